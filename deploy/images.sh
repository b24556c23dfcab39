#!/usr/bin/env bash
# Build every Gauntlet image (one per role, deploy/Dockerfile) on this machine, with or without a registry.
#
#   deploy/images.sh                     # all roles: gauntlet-<role>:0.1.0
#   deploy/images.sh oracle generator    # some of them
#
# 1. Base: $BASE_IMAGE when set; else python:3.11-slim-bookworm when it is already local; else the local
#    gauntlet-base:bookworm-2, made here the first time with `debootstrap --variant=minbase bookworm` (Debian 12's
#    own python3.11, from the Debian mirror; without docs and message translations) and `docker import` - no
#    registry is needed.
# 2. Dependencies: the host's pip, with the host's own configuration (its index, find-links and constraints, so
#    torch is the CPU wheel 2.13.0+cpu the host has), builds a wheelhouse (build/wheelhouse) for the roles' pinned
#    requirements (deploy/requirements.py), served over loopback while the images build; the builds install with
#    --no-index from it, so they reach no package index themselves.
# 3. Build each role (dependency layers are cached: a source change rebuilds only the source layer), check that the
#    image starts (`--help`), print `image sizes (MB): <role>=<n> ...` (MB = 10^6 bytes, as `docker images` counts).
#
# Settings (environment): GAUNTLET_TAG (0.1.0), BASE_IMAGE, DEBIAN_MIRROR (http://deb.debian.org/debian),
# PYTHON (.venv/bin/python, else python3), PIP (the pip that fills the wheelhouse: $PYTHON -m pip), WHEELHOUSE (build/wheelhouse),
# WHEEL_PORT (18471, below Linux's ephemeral range 32768-60999 so no client socket or port-0 server holds it; it is
# part of the build's cache key, so it stays fixed unless busy: then the next free port up to +99 is used, and the
# dependency layers rebuild once), DOCKER (docker),
# SIMULATOR_APT_PACKAGES (empty; libosmesa6 adds CPU rendering of MuJoCo frames to the simulator image, +315 MB).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_ROLES=(simulator agent translator oracle generator analysis)
# built only when named: the Super Mario Bros. simulator (its own numpy < 2 environment, requirements/mario.txt)
OPTIONAL_ROLES=(mario)
ROLES=("$@")
[ ${#ROLES[@]} -gt 0 ] || ROLES=("${ALL_ROLES[@]}")
TAG=${GAUNTLET_TAG:-0.1.0}
DOCKER=${DOCKER:-docker}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WHEELHOUSE=${WHEELHOUSE:-build/wheelhouse}
WHEEL_PORT=${WHEEL_PORT:-18471}
# Python >= 3.11 (tomllib) for deploy/requirements.py and the wheelhouse's server: the project's venv when there is one
if [ -x .venv/bin/python ]; then PYTHON=${PYTHON:-.venv/bin/python}; else PYTHON=${PYTHON:-python3}; fi
PIP=${PIP:-$PYTHON -m pip}

for role in "${ROLES[@]}"; do
  case " ${ALL_ROLES[*]} ${OPTIONAL_ROLES[*]} " in
    *" $role "*) ;;
    *) echo "unknown role $role (roles: ${ALL_ROLES[*]} ${OPTIONAL_ROLES[*]})" >&2; exit 2 ;;
  esac
done
"$DOCKER" info >/dev/null 2>&1 || { echo "no Docker engine answers ($DOCKER info failed)" >&2; exit 1; }

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- 1. base image ------------------------------------------------------------------------------------------------
if [ -z "${BASE_IMAGE:-}" ]; then
  if "$DOCKER" image inspect python:3.11-slim-bookworm >/dev/null 2>&1; then
    BASE_IMAGE=python:3.11-slim-bookworm
  else
    # the suffix names the recipe below: bump it when that changes, so that a machine's older base is not reused
    BASE_IMAGE=gauntlet-base:bookworm-2
  fi
fi
if ! "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  [ "$BASE_IMAGE" = gauntlet-base:bookworm-2 ] || { echo "base image $BASE_IMAGE is not here" >&2; exit 1; }
  command -v debootstrap >/dev/null || { echo "no base image and no debootstrap (apt-get install debootstrap)" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "debootstrap needs root to make the base image" >&2; exit 1; }
  t=$(now)
  rootfs=$(mktemp -d /tmp/gauntlet-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  echo "base: debootstrap bookworm into $rootfs ($MIRROR)"
  debootstrap --variant=minbase --include=python3.11,python3.11-venv,python3-distutils bookworm "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 \
    || { tail -20 "$rootfs.log" >&2; exit 1; }
  rm -f "$rootfs.log"
  # what an image does not need: apt's lists and caches (the stages that install packages run apt-get update
  # themselves), docs, and the programs' message translations (/usr/share/locale, 33 MB: the images run with
  # LANG=C.UTF-8, whose definition is in /usr/lib/locale)
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
  tar -C "$rootfs" -c . | "$DOCKER" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  echo "base: $BASE_IMAGE made in $(elapsed "$t") s"
fi
echo "base: $BASE_IMAGE"

# --- 2. wheelhouse ------------------------------------------------------------------------------------------------
t=$(now)
mkdir -p "$WHEELHOUSE"
requirements=$(mktemp)
server_pid=
cleanup() { rm -f "$requirements"; if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
suite_roles=()
for role in "${ROLES[@]}"; do [ "$role" = mario ] || suite_roles+=("$role"); done
"$PYTHON" deploy/requirements.py pyproject.toml "${suite_roles[@]}" >"$requirements"
# the build backend too (pyproject's build-system.requires): the project itself is installed with --no-index
echo "setuptools>=68" >>"$requirements"
echo "wheel" >>"$requirements"
$PIP wheel --quiet --wheel-dir "$WHEELHOUSE" --find-links "$WHEELHOUSE" -r "$requirements"
# mario's pins clash with the core's (numpy < 2): their own resolution; nes-py's C++ extension is built here, on the
# host (Debian 12 like the base image), so the image needs no compiler
if [[ " ${ROLES[*]} " == *" mario "* ]]; then
  $PIP wheel --quiet --wheel-dir "$WHEELHOUSE" --find-links "$WHEELHOUSE" -r requirements/mario.txt
fi
if ls "$WHEELHOUSE" | grep -Ei '^nvidia[-_]|^torch-[^+]*-' >/dev/null; then
  echo "the wheelhouse holds a CUDA torch or nvidia-* wheels: $(ls "$WHEELHOUSE" | grep -Ei '^nvidia|^torch-')" >&2
  echo "configure pip for a CPU torch (e.g. --extra-index-url https://download.pytorch.org/whl/cpu)" >&2
  exit 1
fi
echo "wheelhouse: $WHEELHOUSE, $(ls "$WHEELHOUSE" | wc -l) wheels, $(elapsed "$t") s"

# a port another process holds would answer the builds with its own bytes (CI once met a gRPC server there)
wanted_port=$WHEEL_PORT
WHEEL_PORT=$("$PYTHON" - "$WHEEL_PORT" <<'EOF'
import socket, sys
first = int(sys.argv[1])
for port in range(first, first + 100):
    with socket.socket() as probe:
        # as http.server does: a port whose old connections linger in TIME_WAIT is free; one with a listener is not
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break
else:
    sys.exit(f"no free port in 127.0.0.1:{first}-{first + 99} (WHEEL_PORT)")
EOF
)
[ "$WHEEL_PORT" = "$wanted_port" ] || echo "wheelhouse: port $wanted_port is busy, serving on $WHEEL_PORT (dependency layers rebuild)"
"$PYTHON" -m http.server --bind 127.0.0.1 --directory "$WHEELHOUSE" "$WHEEL_PORT" >/dev/null 2>&1 &
server_pid=$!
served=
for _ in $(seq 50); do
  kill -0 "$server_pid" 2>/dev/null || break
  # ours answers with the wheelhouse's listing; anything else (another server, garbage, no answer) is not ready
  if "$PYTHON" - "$WHEEL_PORT" <<'EOF'
import sys, urllib.request
try:
    listing = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1).read().decode("utf-8", "replace")
except Exception:
    sys.exit(1)
sys.exit(0 if ".whl" in listing else 1)
EOF
  then served=1; break; fi
  sleep 0.2
done
[ -n "$served" ] || { echo "cannot serve the wheelhouse on 127.0.0.1:$WHEEL_PORT (WHEEL_PORT)" >&2; exit 1; }

# --- 3. images ----------------------------------------------------------------------------------------------------
sizes=()
times=()
# BuildKit where the client has it (buildx), else the classic builder: the Dockerfile needs nothing BuildKit-only
if [ -z "${DOCKER_BUILDKIT:-}" ]; then
  if "$DOCKER" buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=1; else export DOCKER_BUILDKIT=0; fi
fi
for role in "${ROLES[@]}"; do
  apt_packages=
  # libosmesa6 would let MuJoCo subjects render frames on the CPU (the Render RPC), at +315 MB: opt-in
  [ "$role" = simulator ] && apt_packages=${SIMULATOR_APT_PACKAGES:-}
  t=$(now)
  # --network host: the build reaches the wheelhouse on the host's loopback (and the Debian mirror for apt)
  "$DOCKER" build --quiet --network host \
    -f deploy/Dockerfile \
    --build-arg BASE_IMAGE="$BASE_IMAGE" \
    --build-arg ROLE="$role" \
    --build-arg APT_PACKAGES="$apt_packages" \
    --build-arg PIP_ARGS="--no-index --find-links http://127.0.0.1:$WHEEL_PORT/" \
    -t "gauntlet-$role:$TAG" . >/dev/null
  "$DOCKER" run --rm --network none "gauntlet-$role:$TAG" --help >/dev/null \
    || { echo "gauntlet-$role:$TAG does not start" >&2; exit 1; }
  bytes=$("$DOCKER" image inspect -f '{{.Size}}' "gauntlet-$role:$TAG")
  sizes+=("$role=$((bytes / 1000000))")
  times+=("$role=$(elapsed "$t")")
  echo "built gauntlet-$role:$TAG ($((bytes / 1000000)) MB) in ${times[-1]#*=} s"
done
echo "build times (s): ${times[*]}"
echo "image sizes (MB): ${sizes[*]}"
