#!/bin/sh
# The images' entrypoint: `python -m <role>_service ARGS`, the role being the image's ($GAUNTLET_ROLE), or
# `python -m NAME_service ARGS` when the first argument names a service (deploy/compose.yaml and deploy/k8s name it).
# exec: python becomes PID 1 and gets SIGTERM itself, so it drains its gRPC calls before it exits.
case "${1:-}" in
  *_service) exec python -m "$@" ;;
esac
# the mario image is a simulator that serves only the mario backend's subjects (a suite's simulator forwards them
# to it: --peer-simulator)
[ "${GAUNTLET_ROLE:-}" = mario ] && exec python -m simulator_service --backend mario "$@"
exec python -m "${GAUNTLET_ROLE:?the image sets GAUNTLET_ROLE}_service" "$@"
