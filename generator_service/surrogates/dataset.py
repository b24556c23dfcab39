"""Indago's interaction dataset: the training log read and checked, the training-progress filter, splits, labels.

A log is ``training_log.jsonl.gz`` as agent_service.training writes it: one JSON row per training episode with
``episode``, ``timestep``, ``config`` (the test input), ``verdict`` ("pass"/"fail") and ``margin``. Rows are put
in training order (by episode number) whatever their order in the file.

* Training-progress filter (paper Sec. 3.1): the first p % of the episodes in training order are dropped,
  because the failures of a near-random early policy say little about the final agent. With N episodes the
  first floor(N * p / 100) go.
* Held-out set (paper Sec. 4.1): after a 5 % filter, 10 % of the remaining episodes drawn at random (fixed
  seed). They are removed from every training pool, so the held-out metrics are measured on unseen data.
* Train/validation split: 20 % validation, stratified by verdict so that both parts see failures.
* Regression labels (paper Sec. 4.1.2, "0 indicates a failure"): the oracle margin (negative = failure, lower =
  worse), min-max scaled into [0, 1] between its 1st and 99th percentiles and clipped. The margin 0 (the
  verdict boundary) lands on ``threshold``; a label below it means failure.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.space import ParameterSpace

HELD_OUT_FILTER = 5.0
HELD_OUT_FRACTION = 0.1
VALIDATION_FRACTION = 0.2


@dataclass(frozen=True)
class InteractionData:
    """A checked interaction log, in training order."""

    path: Path
    sha256: str
    configs: list[dict[str, Any]]
    failed: np.ndarray  # bool, one per episode
    margins: np.ndarray  # float
    episodes: np.ndarray  # int

    def __len__(self) -> int:
        return len(self.configs)

    @property
    def n_failures(self) -> int:
        return int(self.failed.sum())


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_interaction_log(path: Path | str, space: ParameterSpace | None = None) -> InteractionData:
    """Reads and checks a log; ValueError names the file and the problem (missing, not gzip, bad row...).

    With ``space``, every config must be a valid input of it (a misfit means the log belongs to another subject).
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(
            f"interaction log {path} does not exist (a zoo model's log is "
            f"agent_service/zoo/<model>/training_log.jsonl.gz)"
        )
    if not path.is_file():
        raise ValueError(f"interaction log {path} is not a file")
    from agent_service.training import read_interaction_log

    try:
        rows = read_interaction_log(path)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"interaction log {path} is not a readable gzip-compressed JSONL file ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"interaction log {path} is not UTF-8 text inside its gzip stream ({exc})") from None
    if not rows:
        raise ValueError(f"interaction log {path} holds no episodes")
    configs: list[dict[str, Any]] = []
    failed, margins, episodes = [], [], []
    for number, row in enumerate(rows, 1):
        where = f"{path}: row {number}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
        if row["verdict"] not in ("pass", "fail"):
            raise ValueError(f"{where}: verdict must be 'pass' or 'fail', got {row['verdict']!r}")
        if not isinstance(row["config"], dict) or not row["config"]:
            raise ValueError(f"{where}: config must be a non-empty JSON object, got {row['config']!r}")
        margin = row["margin"]
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin):
            raise ValueError(f"{where}: margin must be a finite number, got {margin!r}")
        episode = row["episode"]
        if isinstance(episode, bool) or not isinstance(episode, int):
            raise ValueError(f"{where}: episode must be an integer, got {episode!r}")
        if space is not None:
            problems = space.violations(row["config"])
            if problems:
                raise ValueError(
                    f"{where}: the config does not fit the subject's parameter space "
                    f"({'; '.join(problems)}); is this the log of another subject?"
                )
        configs.append(row["config"])
        failed.append(row["verdict"] == "fail")
        margins.append(float(margin))
        episodes.append(episode)
    order = np.argsort(np.asarray(episodes), kind="stable")
    return InteractionData(
        path=path,
        sha256=file_sha256(path),
        configs=[configs[i] for i in order],
        failed=np.asarray(failed, dtype=bool)[order],
        margins=np.asarray(margins, dtype=np.float64)[order],
        episodes=np.asarray(episodes, dtype=np.int64)[order],
    )


# -- training-progress filter ----------------------------------------------------------------------------
def filtered_count(n: int, percent: float) -> int:
    """How many of n episodes (in training order) a filter of ``percent`` drops: floor(n * percent / 100)."""
    if not 0.0 <= percent < 100.0:
        raise ValueError(f"filter level must be a percentage in [0, 100), got {percent!r}")
    return int(math.floor(n * percent / 100.0 + 1e-9))


def progress_filter(items: list[Any], percent: float) -> list[Any]:
    """``items`` (in training order) without the first ``percent`` %."""
    return items[filtered_count(len(items), percent) :]


def kept_indices(n: int, percent: float) -> np.ndarray:
    return np.arange(filtered_count(n, percent), n)


# -- splits ----------------------------------------------------------------------------------------------
def held_out_indices(
    n: int, seed: int = 0, filter_percent: float = HELD_OUT_FILTER, fraction: float = HELD_OUT_FRACTION
) -> np.ndarray:
    """The held-out test episodes: ``fraction`` of those after a ``filter_percent`` filter, at random."""
    pool = kept_indices(n, filter_percent)
    k = int(round(fraction * len(pool)))
    rng = np.random.default_rng([seed, 0x4E1D])
    return np.sort(rng.choice(pool, size=k, replace=False)) if k else np.empty(0, dtype=np.int64)


def stratified_split(
    indices: np.ndarray, labels: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) indices: ``fraction`` of each class to validation (at least one of a class with
    two or more members, so validation sees failures whenever there are two)."""
    rng = np.random.default_rng([seed, 0x5B1])
    train, val = [], []
    for cls in (False, True):
        members = indices[labels[indices] == cls]
        members = members[rng.permutation(len(members))]
        k = int(round(fraction * len(members)))
        if len(members) >= 2:
            k = min(max(k, 1), len(members) - 1)
        val.append(members[:k])
        train.append(members[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


# -- regression labels -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MarginScale:
    """Margin -> label in [0, 1] (0 = the worst failures); ``threshold`` is the label of margin 0."""

    low: float
    high: float

    @staticmethod
    def fit(margins: np.ndarray) -> MarginScale:
        low, high = (float(v) for v in np.percentile(margins, [1.0, 99.0]))
        if not high > low:
            low, high = float(np.min(margins)), float(np.max(margins))
        if not high > low:
            high = low + 1.0
        return MarginScale(low, high)

    def labels(self, margins: np.ndarray) -> np.ndarray:
        return np.clip((np.asarray(margins, dtype=np.float64) - self.low) / (self.high - self.low), 0.0, 1.0)

    @property
    def threshold(self) -> float:
        return float(np.clip((0.0 - self.low) / (self.high - self.low), 0.0, 1.0))
