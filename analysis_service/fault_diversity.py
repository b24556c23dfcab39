"""The QD fault-diversity paper's metrics over a test sequence (RQ1/RQ2), as its authors' analysis computes them.

Source: Mazouni et al., "Testing for Fault Diversity in Reinforcement Learning" (AST 2024), Section 5.3
(metrics), and the authors' published analysis script (result_analysis.py). For the first n tests of one run, at every
checkpoint n:

- faults(n): distinct fault-triggering inputs (unique input vectors among the failing tests);
- #BS(n) / #FBS(n): distinct cells of a shared behaviour grid hit by all tests / by failing tests;
- FS(n) / FFS(n): sparsity of the distinct final states of all tests / of failing tests: per point the mean
  distance to its 3 nearest other points, median over points (statistics.sparsity). FFS is undefined (NaN)
  until more than 3 distinct failing final states exist.

Across runs (`relative_to_baseline`): FS and FFS are averaged over runs and divided by random testing's average
at the same checkpoint, the authors' aggregation (a ratio; 1.0 = as sparse as random testing).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from analysis_service.statistics import grid_cells, sparsity


@dataclass(frozen=True)
class Grid:
    """A regular behaviour grid: `cells` bins per descriptor within [low, high]; outside values clamp to the edges."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    cells: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (len(self.low) == len(self.high) == len(self.cells)) or not self.low:
            raise ValueError(
                f"grid: low, high and cells need one entry per descriptor, got {self.low}, {self.high}, {self.cells}"
            )
        if any(h <= lo for lo, h in zip(self.low, self.high)) or any(c < 1 for c in self.cells):
            raise ValueError(f"grid: every low must be < high and every cell count >= 1, got {self}")

    def cell(self, descriptors: Sequence[float]) -> tuple[int, ...]:
        return next(iter(grid_cells(np.asarray([descriptors], dtype=float), self.low, self.high, self.cells)))


@dataclass
class Curves:
    """Metrics of one run at each checkpoint (numbers of tests run so far)."""

    checkpoints: list[int]
    faults: list[int] = field(default_factory=list)
    bs: list[int] = field(default_factory=list)
    fbs: list[int] = field(default_factory=list)
    fs: list[float] = field(default_factory=list)
    ffs: list[float] = field(default_factory=list)


def checkpoints_for(total: int, every: int = 50) -> list[int]:
    """Every `every` tests, and the last test (the authors sample every 50)."""
    if total < 1 or every < 1:
        raise ValueError(f"checkpoints need total >= 1 and every >= 1, got {total}, {every}")
    points = list(range(every, total + 1, every))
    return points if points and points[-1] == total else [*points, total]


def run_curves(
    inputs: Sequence[Hashable],
    failed: Sequence[bool],
    descriptors: Sequence[Sequence[float]],
    final_states: Sequence[Sequence[float]] | None,
    grid: Grid,
    checkpoints: Sequence[int],
    neighbours: int = 3,
) -> Curves:
    """The metrics of one run, tests in the order they were asked. `inputs` are hashable keys of the test inputs
    (equal keys = the same input); `final_states` may be None (FS/FFS left empty)."""
    n = len(inputs)
    if not (len(failed) == len(descriptors) == n) or (final_states is not None and len(final_states) != n):
        raise ValueError("run_curves: inputs, failed, descriptors (and final_states) must have the same length")
    if any(c < 1 or c > n for c in checkpoints) or list(checkpoints) != sorted(checkpoints):
        raise ValueError(f"run_curves: checkpoints must increase within 1..{n}")
    curves = Curves(list(checkpoints))
    fault_inputs: set[Hashable] = set()
    cells: set[tuple[int, ...]] = set()
    fault_cells: set[tuple[int, ...]] = set()
    states = None if final_states is None else np.asarray(final_states, dtype=float).reshape(n, -1)
    fail = np.asarray(failed, dtype=bool)
    done = 0
    for point in checkpoints:
        for i in range(done, point):
            cell = grid.cell(descriptors[i])
            cells.add(cell)
            if fail[i]:
                fault_inputs.add(inputs[i])
                fault_cells.add(cell)
        done = point
        curves.faults.append(len(fault_inputs))
        curves.bs.append(len(cells))
        curves.fbs.append(len(fault_cells))
        if states is not None:
            curves.fs.append(sparsity(states[:point], neighbours))
            failing = states[:point][fail[:point]]
            curves.ffs.append(sparsity(failing, neighbours) if len(failing) else float("nan"))
    return curves


def quartiles(runs: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first quartile, median, third quartile) over runs, per checkpoint."""
    data = np.asarray(runs, dtype=float)
    first, median, third = (np.percentile(data, q, axis=0) for q in (25, 50, 75))
    return first, median, third


def relative_to_baseline(runs: Sequence[Sequence[float]], baseline_runs: Sequence[Sequence[float]]) -> np.ndarray:
    """Mean over runs divided by the baseline's mean over runs, per checkpoint (NaN where either is undefined)."""
    ours = np.nanmean(np.asarray(runs, dtype=float), axis=0) if len(runs) else np.nan
    base = np.nanmean(np.asarray(baseline_runs, dtype=float), axis=0) if len(baseline_runs) else np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(ours / base, dtype=float)


def improvement(value: float, baseline: float) -> float:
    """(value - baseline) / baseline in percent (the paper's "+x %" relative to random testing)."""
    return float("nan") if not baseline else 100.0 * (value - baseline) / baseline
