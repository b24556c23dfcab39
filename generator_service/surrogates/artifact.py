"""The surrogate artifact (a versioned folder) and the runtime ``Surrogate`` loaded from it.

Folder layout (format version 1):

* ``surrogate.json``: what the model is and how good it is. Keys: ``format_version``, ``kind``
  ("classifier" | "regressor"), ``subject``, ``model`` (zoo model name or null), ``created_at`` (UTC ISO 8601),
  ``log`` {path, sha256, episodes, failures}, ``filter_percent``, ``layers``, ``seed``, ``architecture``
  {hidden_units, batch_norm, dropout}, ``encoding`` (the parameter space, see encoding.Encoder.spec),
  ``feature_names``, optionally ``features`` (what the network reads: absent or kind "config" = the
  encoding, "scene" = the encoding plus scene features, see features.py), ``training`` (optimiser settings,
  epochs, class weights or LDS settings and the margin scale), ``metrics`` {validation, held_out: {precision,
  recall, f1, auc, rows, failures[, mse]}},
  ``selection`` {rule, candidates, trained, note}, ``grid`` {name, filters, layers, seeds}, ``versions``.
* ``model.pt``: the network's ``state_dict`` (torch.save; loaded with ``weights_only=True``).
* ``failures.jsonl.gz``: every failing training episode, in training order, as {index, episode, config}
  (``index`` = position among all episodes), for failure seeds and the training-failure replay baseline.
* ``tuning.json``: one record per trained grid point (filter, layers, seed, metrics), for inspection.

Loading refuses with a ValueError that names the problem: a missing folder or file, malformed JSON, an
unknown format version, weights that do not fit the recorded architecture, or a subject other than asked.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.space import ParameterSpace
from generator_service.surrogates.dataset import filtered_count
from generator_service.surrogates.encoding import Encoder
from generator_service.surrogates.features import FeatureMap
from generator_service.surrogates.model import check_kind

FORMAT_VERSION = 1
META_FILE = "surrogate.json"
WEIGHTS_FILE = "model.pt"
FAILURES_FILE = "failures.jsonl.gz"
TUNING_FILE = "tuning.json"
REQUIRED_KEYS = (
    "format_version",
    "kind",
    "subject",
    "layers",
    "encoding",
    "log",
    "filter_percent",
    "seed",
    "metrics",
    "created_at",
)


def write_artifact(
    out_dir: Path,
    meta: Mapping[str, Any],
    state_dict: Mapping[str, Any],
    failures: Iterable[Mapping[str, Any]],
    tuning: Sequence[Mapping[str, Any]] = (),
) -> Path:
    import torch

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(dict(state_dict), out_dir / WEIGHTS_FILE)
    with gzip.open(out_dir / FAILURES_FILE, "wt") as stream:
        for row in failures:
            stream.write(json.dumps(row) + "\n")
    (out_dir / TUNING_FILE).write_text(json.dumps(list(tuning), indent=1) + "\n")
    # written last: a folder with surrogate.json is complete
    (out_dir / META_FILE).write_text(json.dumps(dict(meta), indent=2) + "\n")
    return out_dir


def read_meta(path: Path | str) -> dict[str, Any]:
    """surrogate.json of an artifact folder, checked (no torch needed)."""
    path = Path(path)
    hint = "train one with `gauntlet surrogate train --model NAME`"
    if not path.exists():
        raise ValueError(f"surrogate artifact {path} does not exist ({hint})")
    if not path.is_dir():
        raise ValueError(
            f"surrogate artifact {path} is not a folder (expected a folder with {META_FILE} and {WEIGHTS_FILE}; {hint})"
        )
    meta_path = path / META_FILE
    if not meta_path.exists():
        raise ValueError(f"surrogate artifact {path} has no {META_FILE} (incomplete or not an artifact; {hint})")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{meta_path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:  # its message quotes the file's bytes
        raise ValueError(f"{meta_path} is not UTF-8 text") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path} must hold a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise ValueError(f"{meta_path} lacks {', '.join(missing)}")
    if meta["format_version"] != FORMAT_VERSION:
        raise ValueError(
            f"{meta_path} has format version {meta['format_version']!r}; this Gauntlet reads "
            f"version {FORMAT_VERSION} (retrain the surrogate)"
        )
    try:
        check_kind(meta["kind"])
    except ValueError as exc:
        raise ValueError(f"{meta_path}: {exc}") from None
    log = meta["log"]
    if not isinstance(log, dict) or not {"path", "sha256", "episodes", "failures"} <= set(log):
        raise ValueError(f"{meta_path}: 'log' must record path, sha256, episodes and failures")
    if not isinstance(meta["metrics"], dict) or not isinstance(meta["encoding"], list):
        raise ValueError(f"{meta_path}: 'metrics' must be an object and 'encoding' a list of parameters")
    return meta


class Surrogate:
    """A trained surrogate: failure scores in [0, 1] (higher = more likely to fail) and their saliency."""

    def __init__(self, path: Path, meta: dict[str, Any], network: Any) -> None:
        from generator_service.surrogates.model import score_module

        self.path = path
        self.meta = meta
        self.kind: str = meta["kind"]
        self.subject: str = meta["subject"]
        self.encoder = Encoder.from_spec(meta["encoding"])
        self.network = network
        self.scorer = score_module(network, self.kind)
        self.scorer.eval()
        self._saliency: Any = None

    # -- checks ------------------------------------------------------------------------------------
    def check_space(self, space: ParameterSpace) -> None:
        problems = self.encoder.differences(space)
        if problems:
            raise ValueError(
                f"surrogate {self.path} was trained for subject {self.subject!r} and cannot read "
                f"this parameter space: {'; '.join(problems)}"
            )

    # -- scores ------------------------------------------------------------------------------------
    def scores(self, features: np.ndarray) -> np.ndarray:
        from generator_service.surrogates.model import predict_scores

        return predict_scores(self.scorer, np.atleast_2d(np.asarray(features, dtype=np.float64)))

    def score_inputs(self, inputs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        if not inputs:
            return np.empty(0)
        return self.scores(self.encoder.encode_many(inputs))

    def saliency(self, features: np.ndarray) -> np.ndarray:
        """captum Saliency of the failure score w.r.t. each feature (signed gradients), one row per input."""
        import torch
        from captum.attr import Saliency

        if self._saliency is None:
            self._saliency = Saliency(self.scorer)
        x = torch.as_tensor(np.atleast_2d(features), dtype=torch.float32).requires_grad_(True)
        return self._saliency.attribute(x, abs=False).detach().numpy().astype(np.float64)

    # -- training failures -------------------------------------------------------------------------
    def training_failures(self, filter_percent: float = 30.0) -> list[dict[str, Any]]:
        """Configs of the failing training episodes after the first ``filter_percent`` % of all episodes."""
        return artifact_failures(self.path, self.meta, filter_percent)


def artifact_failures(path: Path, meta: Mapping[str, Any], filter_percent: float) -> list[dict[str, Any]]:
    failures_path = Path(path) / FAILURES_FILE
    if not failures_path.exists():
        raise ValueError(f"surrogate artifact {path} has no {FAILURES_FILE}")
    first = filtered_count(int(meta["log"]["episodes"]), filter_percent)
    out = []
    try:
        with gzip.open(failures_path, "rt") as stream:
            for line in stream:
                row = json.loads(line)
                if row["index"] >= first:
                    out.append(row["config"])
    except (OSError, EOFError, json.JSONDecodeError, KeyError, TypeError) as exc:  # the kind only: no file bytes
        raise ValueError(f"{failures_path} is malformed ({type(exc).__name__})") from None
    return out


def require_subject(path: Path | str, meta: Mapping[str, Any], subject: str) -> None:
    """Refuses an artifact trained for another subject, by name: subjects can share a parameter space (the same
    pose offsets on a wider domain, or another horizon) while the agent fails on other inputs."""
    if meta["subject"] != subject:
        raise ValueError(f"surrogate {path} was trained for subject {meta['subject']!r}, not {subject!r}")


def load_surrogate(path: Path | str, subject: str | None = None) -> Surrogate:
    """The surrogate in artifact folder ``path``; with ``subject``, refuses one trained for another subject."""
    import torch

    from generator_service.surrogates.model import load_network

    path = Path(path)
    meta = read_meta(path)
    if subject is not None:
        require_subject(path, meta, subject)
    weights = path / WEIGHTS_FILE
    if not weights.exists():
        raise ValueError(f"surrogate artifact {path} has no {WEIGHTS_FILE}")
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a corrupt file
        raise ValueError(f"{weights} cannot be read as a torch state dict ({type(exc).__name__}: {exc})") from None
    encoder = Encoder.from_spec(meta["encoding"])
    try:
        features = FeatureMap(meta.get("features"), encoder)  # absent: the encoded configuration (format 1)
    except ValueError as exc:
        raise ValueError(f"{path / META_FILE}: {exc}") from None
    try:
        network = load_network(state, features.n_out, int(meta["layers"]), meta["kind"])
    except (RuntimeError, ValueError, TypeError) as exc:
        raise ValueError(
            f"{weights} does not fit the architecture in {META_FILE} "
            f"({meta['layers']} hidden layers, {features.n_out} features): {exc}"
        ) from None
    network = features.wrap(network)  # the network reads encoded configurations whatever its features
    torch.set_num_threads(1)  # tiny MLP: one thread is fastest, and the service shares the machine
    return Surrogate(path, meta, network)
