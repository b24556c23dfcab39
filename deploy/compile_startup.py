#!/usr/bin/env python3
"""Write bytecode for what a role's service imports until it serves, and for nothing else (deploy/Dockerfile).

    python3 deploy/compile_startup.py /opt/venv ROLE

The builder installs with ``pip --no-compile``: bytecode for a whole venv is ~100 MB in the generator's image.
Without any, a service compiles every module it imports on each start (the agent took 9 s to serve instead of 3 s:
torch). So this starts the role's service once, through the image's entrypoint, on a free loopback port with
bytecode writing on, and stops it (SIGTERM) as soon as it serves: the ``__pycache__`` files it leaves are those of
its start (~6 MB for the generator). Modules imported later (pyribs, pymoo, scikit-learn on a campaign's first
batch) compile in memory when they are first used. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# arguments a role needs to start: peers that are never called during a start, and its own folders
NEEDS = {
    "generator": [
        "--simulator-endpoint", "127.0.0.1:9", "--oracle-endpoint", "127.0.0.1:9",
        "--store-url", "sqlite:///{tmp}/store.db", "--no-resume-interrupted",
    ],
    "analysis": ["--generator-endpoint", "127.0.0.1:9", "--report-root", "{tmp}/reports"],
}  # fmt: skip
START_SECONDS = 300


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    venv, role = Path(sys.argv[1]), sys.argv[2]
    for cache in list(venv.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.format(tmp=tmp) for a in NEEDS.get(role, [])]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(GAUNTLET_ROLE=role, HOME=tmp, PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
        service = subprocess.Popen(
            [str(venv / "bin/gauntlet-entrypoint"), "--host", "127.0.0.1", "--port", "0", "--metrics-port", "-1"]
            + args,
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(service.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(START_SECONDS)
        served = bool(lines and lines[0].startswith("{"))
        service.send_signal(signal.SIGTERM)
        try:
            _, errors = service.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            service.kill()
            _, errors = service.communicate()
    if not served:
        sys.exit(f"compile_startup: the {role} service did not serve within {START_SECONDS} s:\n{errors[-3000:]}")
    written = sum(p.stat().st_size for p in venv.rglob("*.pyc"))
    print(f"compile_startup: {role}: {written / 1e6:.1f} MB of bytecode for the modules imported until it served")


if __name__ == "__main__":
    main()
