"""Indago's interaction dataset as campaigns need it: the training log read and checked, the training-progress filter.

A log is ``training_log.jsonl.gz`` in the format of interaction_log.py: one JSON row per training
episode with ``episode``, ``timestep``, ``config`` (the test input), ``verdict`` ("pass"/"fail") and
``margin``. Rows are put in training order (by episode number) whatever their order in the file.

* Training-progress filter (paper Sec. 3.1): the first p % of the episodes in training order are dropped,
  because the failures of a near-random early policy say little about the final agent. With N episodes the
  first floor(N * p / 100) go.

The held-out set, the train/validation split and the regression labels only training needs are in
offline/surrogate_splits.py.
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
from generator_service.surrogates.interaction_log import read_interaction_log


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
    try:
        rows = read_interaction_log(path)
    # the reasons name the kind of problem only: gzip's and the codec's own messages quote the file's bytes
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(
            f"interaction log {path} is not a readable gzip-compressed JSONL file ({type(exc).__name__})"
        ) from None
    except UnicodeDecodeError:
        raise ValueError(f"interaction log {path} is not UTF-8 text inside its gzip stream") from None
    if not rows:
        raise ValueError(f"interaction log {path} holds no episodes")
    configs: list[dict[str, Any]] = []
    failed, margins, episodes = [], [], []
    for number, row in enumerate(rows, 1):
        where = f"{path}: row {number}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
        if row["verdict"] not in ("pass", "fail"):
            raise ValueError(f"{where}: verdict must be 'pass' or 'fail'")  # not echoed: a log line is file content
        if not isinstance(row["config"], dict) or not row["config"]:
            raise ValueError(f"{where}: config must be a non-empty JSON object, got {type(row['config']).__name__}")
        margin = row["margin"]
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin):
            raise ValueError(f"{where}: margin must be a finite number, got {type(margin).__name__}")
        episode = row["episode"]
        if isinstance(episode, bool) or not isinstance(episode, int):
            raise ValueError(f"{where}: episode must be an integer, got {type(episode).__name__}")
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
