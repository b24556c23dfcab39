"""Every benchmark's results file: results/bench/<name>.json, written by the bench that measured it.

A file holds the bench's metrics (the numbers its last line prints and the docs quote) and the facts needed to judge
them: the command that made it, when, the machine (cores, load average before and after, CPU model, memory) and the
versions of the packages that decide the speed. tests/project/test_bench_results.py checks that the numbers the docs
quote are in these files.

    with BenchRecord("throughput") as record:
        ...measure...
        record.metrics["suite_over_naive"] = 10.2
    # on leaving the block: results/bench/throughput.json
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "results" / "bench"
# the packages whose versions move the numbers (inference, transport, simulators, numerics)
VERSIONED_PACKAGES = ("torch", "grpcio", "protobuf", "numpy", "gymnasium", "stable-baselines3", "mujoco", "box2d")


def machine_facts() -> dict[str, Any]:
    """Cores, CPU model, memory and Python of this machine: what a reader needs to compare two results files."""
    cpu_model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    memory_gib = 0.0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = round(int(line.split()[1]) / 2**20, 1)
                break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": usable,
        "cpu_model": cpu_model,
        "memory_gib": memory_gib,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def package_versions() -> dict[str, str]:
    """Installed versions of VERSIONED_PACKAGES (absent ones are left out)."""
    versions = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _finite_json(value: Any) -> Any:
    """NaN and infinities are not JSON: written as null, so a reader never parses a non-standard token."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_json(v) for v in value]
    return value


class BenchRecord:
    """Collects one bench run's metrics and writes results/bench/<name>.json when the block ends without an error.

    metrics: the headline numbers (flat name -> number; the docs quote these); details: anything else worth keeping
    (per-repeat timings, settings). A run that raises writes nothing, so a results file is always a finished run.
    """

    def __init__(self, name: str, *, directory: Path | None = None, argv: list[str] | None = None) -> None:
        if not name.replace("_", "").isalnum():
            raise ValueError(f"bench name {name!r}: letters, digits and _ only")
        self.name = name
        self.directory = directory or RESULTS_DIR
        self.argv = list(sys.argv if argv is None else argv)
        self.metrics: dict[str, float | int | str] = {}
        self.details: dict[str, Any] = {}
        self._started = 0.0
        self._load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __enter__(self) -> BenchRecord:
        self._started = time.perf_counter()
        self._load_before = os.getloadavg()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            self.write()

    def path(self) -> Path:
        return self.directory / f"{self.name}.json"

    def write(self) -> Path:
        """Writes the file (atomically: a reader never sees half of it) and returns its path."""
        script = Path(self.argv[0]) if self.argv else Path("?")
        try:
            script = script.resolve().relative_to(ROOT)
        except ValueError:
            pass
        record = {
            "bench": self.name,
            "command": shlex.join(["python", str(script), *self.argv[1:]]),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "wall_s": round(time.perf_counter() - self._started, 2),
            "machine": machine_facts(),
            "load_average_before": [round(x, 2) for x in self._load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "versions": package_versions(),
            "metrics": self.metrics,
            "details": self.details,
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path()
        partial = target.with_suffix(".json.partial")
        partial.write_text(json.dumps(_finite_json(record), indent=1, sort_keys=False) + "\n")
        partial.replace(target)
        return target
