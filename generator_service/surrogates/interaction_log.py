"""The interaction log: one JSON line per training episode of an agent, gzip-compressed.

Training writes it (offline/training.py judges each finished episode with the subject's oracle); Indago's
surrogates learn from it which inputs fail, and Indago's train_fail_replay replays its failures. One line:

* ``episode``   1-based episode number in the order episodes finished (training order)
* ``timestep``  environment steps taken by the whole run before this episode finished
* ``config``    the episode's test input, parameter name -> value
* ``verdict``   ``"pass"`` or ``"fail"`` under the subject's oracle
* ``margin``    the oracle's margin (negative = failure, lower = worse)
* ``reward``    the episode's total reward (optional for readers)
* ``steps``     the episode's length in steps (optional for readers)

Pure: no gymnasium, no simulator; a reader needs only this module. The generator (Indago's strategies) is the one
service that reads it; the offline tools that write it reach it through generator_service/api.py.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import IO, Any

LOG_NAME = "training_log.jsonl.gz"
REQUIRED_FIELDS = ("episode", "timestep", "config", "verdict", "margin")


class InteractionLog:
    """Append-only writer of the log's lines (one writer per training run); counts what it wrote.

    ``timesteps`` is advanced by the caller on every environment step, so each line records how far
    training had gone when its episode ended.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self.episodes = 0
        self.timesteps = 0
        self.failures = 0

    def write(self, values: dict[str, Any], failed: bool, margin: float, reward: float, steps: int) -> None:
        self.episodes += 1
        self.failures += int(failed)
        row = {
            "episode": self.episodes,
            "timestep": self.timesteps,
            "config": values,
            "verdict": "fail" if failed else "pass",
            "margin": margin,
            "reward": reward,
            "steps": steps,
        }
        self._stream.write(json.dumps(row) + "\n")


def read_interaction_log(path: Path) -> list[dict[str, Any]]:
    """The log's rows in file order; ValueError names the line of a malformed row or a missing field."""
    rows = []
    with gzip.open(path, "rt") as stream:
        for number, line in enumerate(stream, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            missing = set(REQUIRED_FIELDS) - set(row)
            if missing:
                raise ValueError(f"{path}:{number}: missing field(s) {', '.join(sorted(missing))}")
            rows.append(row)
    return rows
