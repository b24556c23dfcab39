"""One local service process as the launcher started it, and how its exit reads (shared by cli/launcher.py, which
starts services, and cli/supervisor.py, which restarts them)."""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    port: int
    metrics_port: int
    log_path: Path
    module: str = ""  # what a restart runs again: python -m <module> <args>
    args: tuple[str, ...] = ()
    python: str = sys.executable  # the interpreter (a simulator environment's own, e.g. .venv-mario's)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


def describe_exit(returncode: int) -> str:
    """'exit code 3' or 'signal SIGKILL' (Popen reports a signal as a negative return code)."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"
