"""Surrogate training: the tuning grid, the selection rule, and the artifact (paper Sec. 4.1).

``train_surrogate`` trains one network per grid point (filter level x hidden layers x seed) and keeps one:

* Data: the log's episodes in training order, encoded (generator_service/surrogates/encoding.py). The held-out
  test set (surrogate_splits.py: 10 % of the episodes after a 5 % filter, fixed seed) is set aside first, for
  every grid point alike. For a filter level p the training pool is the episodes after the first p %, minus the
  held-out ones; 20 % of it (stratified by verdict, split by the grid point's seed) is the validation set that
  picks the best epoch.
* Classifier selection (the paper's rule): among the runs whose validation recall of the failure class is at
  least 10 %, the highest validation precision (ties: higher recall, then higher F1, then grid order). The
  paper applies the rule per (filter, layers) pair and reports one model per case study; we apply it across
  the whole grid, and on the validation set so that the held-out metrics stay an unbiased report. No run
  reaching 10 % recall: the highest validation F1, and the artifact says so in ``selection.note``.
* Regressor selection (the paper gives none): the lowest LDS-weighted validation MSE.
* Grid points whose pool cannot be split into training and validation sets with both verdicts (classifier)
  or with at least 4 episodes (regressor) are skipped and listed in ``selection.skipped``.

Grids (``GRIDS``; a ``TuningGrid`` can be passed directly): ``paper`` is the paper's 9 filter levels x 4 layer
counts x 10 seeds (360 runs); ``small`` 3 x 2 x 3 (18); ``tiny`` 2 x 1 x 1 (2 runs, for tests and smoke runs).

Refusals (ValueError naming the problem): a missing or malformed log (surrogates/dataset.py), a log whose configs do not
fit the subject's space, a classifier asked for a log without failures (the message suggests the regressor)
or without passes, no trainable grid point.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.space import ParameterSpace
from generator_service.api import (
    DROPOUT,
    HIDDEN_UNITS,
    INTERACTION_LOG_NAME,
    LDS_BINS,
    LDS_KERNEL_SIZE,
    LDS_SIGMA,
    SURROGATE_FORMAT_VERSION,
    Encoder,
    FeatureMap,
    InteractionData,
    LdsDensity,
    TrainSettings,
    check_kind,
    class_weights,
    fit,
    kept_indices,
    load_interaction_log,
    load_network,
    predict_scores,
    score_module,
    write_artifact,
)
from offline.surrogate_splits import VALIDATION_FRACTION, MarginScale, held_out_indices, stratified_split

MIN_RECALL = 0.10
DEFAULT_SETTINGS = TrainSettings()  # frozen: one shared default is safe
PAPER_FILTERS = (5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0)


@dataclass(frozen=True)
class TuningGrid:
    name: str
    filters: tuple[float, ...]
    layers: tuple[int, ...]
    seeds: int

    @property
    def size(self) -> int:
        return len(self.filters) * len(self.layers) * self.seeds

    def points(self) -> list[tuple[float, int, int]]:
        return [(f, layers, s) for f in self.filters for layers in self.layers for s in range(self.seeds)]


GRIDS: dict[str, TuningGrid] = {
    "tiny": TuningGrid("tiny", (5.0, 30.0), (1,), 1),
    "small": TuningGrid("small", (5.0, 20.0, 40.0), (1, 2), 3),
    "paper": TuningGrid("paper", PAPER_FILTERS, (1, 2, 3, 4), 10),
}


def resolve_grid(grid: str | TuningGrid) -> TuningGrid:
    if isinstance(grid, TuningGrid):
        if grid.size < 1:
            raise ValueError(f"tuning grid {grid.name!r} is empty")
        return grid
    if grid not in GRIDS:
        raise ValueError(f"unknown tuning grid {grid!r}; known: {', '.join(GRIDS)}")
    return GRIDS[grid]


# -- metrics ----------------------------------------------------------------------------------------------
def failure_metrics(failed: np.ndarray, scores: np.ndarray, cut: float) -> dict[str, Any]:
    """Precision / recall / F1 of "score > cut means failure" (failure = positive class) and the ROC AUC.

    Precision is 0 when nothing is predicted to fail; recall and AUC are None without actual failures (AUC
    also without passes).
    """
    failed = np.asarray(failed, dtype=bool)
    predicted = np.asarray(scores) > cut
    tp = int(np.sum(predicted & failed))
    fp = int(np.sum(predicted & ~failed))
    positives = int(failed.sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / positives if positives else None
    f1 = (
        2 * precision * recall / (precision + recall)
        if recall is not None and precision + recall > 0
        else (0.0 if recall is not None else None)
    )
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "auc": roc_auc(failed, scores),
        "rows": int(len(failed)),
        "failures": positives,
    }


def roc_auc(failed: np.ndarray, scores: np.ndarray) -> float | None:
    """Probability that a failing row scores above a passing one (ties count half); None without both."""
    failed = np.asarray(failed, dtype=bool)
    n_pos, n_neg = int(failed.sum()), int((~failed).sum())
    if not n_pos or not n_neg:
        return None
    from scipy.stats import rankdata

    ranks = rankdata(np.asarray(scores, dtype=np.float64))
    return float((ranks[failed].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# -- training ---------------------------------------------------------------------------------------------
def train_surrogate(
    log_path: Path | str,
    space: ParameterSpace,
    *,
    subject: str,
    out_dir: Path | str,
    model: str | None = None,
    kind: str = "classifier",
    grid: str | TuningGrid = "small",
    settings: TrainSettings = DEFAULT_SETTINGS,
    held_out_seed: int = 0,
    progress: Callable[[int, int, Mapping[str, Any]], None] | None = None,
    features: Mapping[str, Any] | None = None,
) -> Path:
    """Tunes, selects and writes a surrogate artifact to ``out_dir``; returns ``out_dir`` (module docstring).

    ``features`` is what the network reads (generator_service/surrogates/features.py; None: the encoded
    configuration, as the paper); a ``scene`` map's feature ranges are fitted on the episodes outside the
    held-out set.
    """
    import torch

    check_kind(kind)
    tuning = resolve_grid(grid)
    for f in tuning.filters:
        if not 0.0 <= f < 100.0:
            raise ValueError(f"filter level must be a percentage in [0, 100), got {f!r}")
    torch.set_num_threads(1)
    started = time.time()
    data = load_interaction_log(log_path, space)
    n = len(data)
    if kind == "classifier" and data.n_failures == 0:
        raise ValueError(
            f"interaction log {data.path} has no failing episodes ({n} passes): a classifier cannot "
            "learn what fails from it; train a regressor instead (kind 'regressor', "
            "`--kind regressor`), which learns from the oracle margins"
        )
    if kind == "classifier" and data.n_failures == n:
        raise ValueError(
            f"interaction log {data.path} has no passing episodes ({n} failures): a classifier "
            "needs both verdicts; train a regressor instead (`--kind regressor`)"
        )
    encoder = Encoder(space)
    encoded = encoder.encode_many(data.configs)
    held = held_out_indices(n, seed=held_out_seed)
    in_held = np.zeros(n, dtype=bool)
    in_held[held] = True
    feature_map = FeatureMap(features, encoder).fitted(encoded[~in_held])
    x = feature_map.transform(encoded)
    scale = MarginScale.fit(data.margins[~in_held]) if kind == "regressor" else None
    labels = scale.labels(data.margins) if scale else None
    cut = 0.5 if kind == "classifier" else 1.0 - scale.threshold  # type: ignore[union-attr]

    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    best: tuple[Any, ...] | None = None  # (key, record, state_dict)
    points = tuning.points()
    for number, (filt, layers, seed) in enumerate(points, 1):
        pool = kept_indices(n, filt)
        pool = pool[~in_held[pool]]
        train_idx, val_idx = stratified_split(pool, data.failed, VALIDATION_FRACTION, seed)
        why = _untrainable(kind, data.failed, train_idx, val_idx)
        if why:
            skipped.append(f"filter {filt:g} %, {layers} layer(s), seed {seed}: {why}")
            if progress:
                progress(number, len(points), {"filter_percent": filt, "layers": layers, "seed": seed, "skipped": why})
            continue
        if kind == "classifier":
            weights = class_weights(data.failed[train_idx])
            result = fit(
                x[train_idx],
                data.failed[train_idx].astype(np.int64),
                x[val_idx],
                data.failed[val_idx].astype(np.int64),
                kind=kind,
                layers=layers,
                seed=seed,
                settings=settings,
                class_weight=weights,
            )
            extra: dict[str, Any] = {"class_weights": {"pass": float(weights[0]), "fail": float(weights[1])}}
        else:
            density = LdsDensity(labels[train_idx])  # type: ignore[index]
            result = fit(
                x[train_idx],
                labels[train_idx],
                x[val_idx],
                labels[val_idx],  # type: ignore[index]
                kind=kind,
                layers=layers,
                seed=seed,
                settings=settings,
                sample_weights=(
                    density.weights(labels[train_idx]),  # type: ignore[index]
                    density.weights(labels[val_idx], labels[train_idx]),
                ),
            )  # type: ignore[index]
            extra = {}
        scorer = score_module(load_network(result.state_dict, feature_map.n_out, layers, kind), kind)
        val_scores = predict_scores(scorer, x[val_idx])
        metrics = {"validation": failure_metrics(data.failed[val_idx], val_scores, cut)}
        if len(held):
            metrics["held_out"] = failure_metrics(data.failed[held], predict_scores(scorer, x[held]), cut)
        else:
            metrics["held_out"] = None
        if kind == "regressor":
            metrics["validation"]["mse"] = result.best_validation_loss  # LDS-weighted, on [0, 1] labels
            if len(held):
                pred = 1.0 - predict_scores(scorer, x[held])
                metrics["held_out"]["mse"] = float(np.mean((pred - labels[held]) ** 2))  # type: ignore[index]
        record = {
            "filter_percent": filt,
            "layers": layers,
            "seed": seed,
            "train_rows": int(len(train_idx)),
            "train_failures": int(data.failed[train_idx].sum()),
            "epochs": result.epochs,
            "best_epoch": result.best_epoch,
            "metrics": metrics,
            **extra,
        }
        records.append(record)
        key = _selection_key(kind, metrics["validation"])
        if best is None or key > best[0]:
            best = (key, record, result.state_dict)
        if progress:
            progress(number, len(points), record)
    if best is None:
        raise ValueError(
            f"no grid point of grid {tuning.name!r} could be trained on {data.path} "
            f"({n} episodes, {data.n_failures} failures): {'; '.join(skipped[:3])}"
            + (
                "; a regressor (`--kind regressor`) learns from margins and needs no failures"
                if kind == "classifier"
                else ""
            )
        )
    _, chosen, state = best
    reach = [r for r in records if (r["metrics"]["validation"]["recall"] or 0.0) >= MIN_RECALL]
    if kind == "classifier":
        rule = (
            f"highest validation precision among runs with validation recall >= {MIN_RECALL:.0%} "
            "(ties: recall, F1, grid order)"
        )
        note = (
            None
            if reach
            else (f"no run reached {MIN_RECALL:.0%} validation recall; selected the highest validation F1 instead")
        )
    else:
        rule = "lowest LDS-weighted validation MSE"
        note = None
    candidates = len(reach) if kind == "classifier" and reach else len(records)
    meta = _meta(
        data,
        feature_map,
        kind,
        model,
        subject,
        tuning,
        settings,
        chosen,
        rule,
        note,
        len(records),
        candidates,
        skipped,
        scale,
        held_out_seed,
        started,
    )
    failures = [
        {"index": int(i), "episode": int(data.episodes[i]), "config": data.configs[i]}
        for i in np.flatnonzero(data.failed)
    ]
    return write_artifact(Path(out_dir), meta, state, failures, records)


def _untrainable(kind: str, failed: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray) -> str | None:
    if kind == "classifier":
        tf, vf = int(failed[train_idx].sum()), int(failed[val_idx].sum())
        if tf == 0 or vf == 0:
            return f"too few failures after the filter ({tf} training, {vf} validation)"
        if tf == len(train_idx) or vf == len(val_idx):
            return "no passing episodes in the training or validation split"
        return None
    if len(train_idx) < 3 or len(val_idx) < 1:
        return f"too few episodes after the filter ({len(train_idx)} training, {len(val_idx)} validation)"
    return None


def _selection_key(kind: str, val: Mapping[str, Any]) -> tuple[float, ...]:
    """Larger is better; ``>`` keeps the first of equals (grid order)."""
    if kind == "regressor":
        return (-float(val["mse"]),)
    recall = val["recall"] or 0.0
    f1 = val["f1"] or 0.0
    if recall >= MIN_RECALL:
        return (1.0, val["precision"], recall, f1)
    return (0.0, f1, val["precision"], recall)


def _meta(
    data: InteractionData,
    feature_map: FeatureMap,
    kind: str,
    model: str | None,
    subject: str,
    tuning: TuningGrid,
    settings: TrainSettings,
    chosen: Mapping[str, Any],
    rule: str,
    note: str | None,
    trained: int,
    candidates: int,
    skipped: Sequence[str],
    scale: MarginScale | None,
    held_out_seed: int,
    started: float,
) -> dict[str, Any]:
    import torch

    training: dict[str, Any] = {
        **asdict(settings),
        "epochs": chosen["epochs"],
        "best_epoch": chosen["best_epoch"],
        "train_rows": chosen["train_rows"],
        "train_failures": chosen["train_failures"],
        "validation_fraction": VALIDATION_FRACTION,
        "held_out_seed": held_out_seed,
        "optimiser": "adam",
        "wall_seconds": round(time.time() - started, 2),
    }
    if kind == "classifier":
        training["loss"] = "cross-entropy weighted by N / (2 * class count)"
        training["class_weights"] = chosen["class_weights"]
    else:
        training["loss"] = "MSE weighted by label-distribution smoothing"
        training["lds"] = {
            "bins": LDS_BINS,
            "kernel": "gaussian",
            "kernel_size": LDS_KERNEL_SIZE,
            "sigma": LDS_SIGMA,
            "weights": "inverse smoothed density, mean 1",
        }
        training["label"] = {
            "source": "margin",
            "scale": "min-max between 1st and 99th percentile, clipped",
            "low": scale.low,
            "high": scale.high,  # type: ignore[union-attr]
            "failure_below": scale.threshold,
        }  # type: ignore[union-attr]
    return {
        "format_version": SURROGATE_FORMAT_VERSION,
        "kind": kind,
        "subject": subject,
        "model": model,
        "created_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "log": {"path": str(data.path), "sha256": data.sha256, "episodes": len(data), "failures": data.n_failures},
        "filter_percent": chosen["filter_percent"],
        "layers": chosen["layers"],
        "seed": chosen["seed"],
        "architecture": {
            "hidden_units": HIDDEN_UNITS,
            "batch_norm": True,
            "dropout": DROPOUT if chosen["layers"] > 1 else 0.0,
            "output": "softmax over (pass, fail)" if kind == "classifier" else "sigmoid",
            "failure_score": "P(fail)" if kind == "classifier" else "1 - prediction",
        },
        "encoding": feature_map.encoder.spec(),
        "feature_names": feature_map.names,
        "features": feature_map.spec(),
        "training": training,
        "metrics": chosen["metrics"],
        "selection": {
            "rule": rule,
            "candidates": candidates,
            "trained": trained,
            "skipped": list(skipped),
            "note": note,
        },
        "grid": {
            "name": tuning.name,
            "filters": list(tuning.filters),
            "layers": list(tuning.layers),
            "seeds": tuning.seeds,
        },
        "versions": {"torch": torch.__version__.split("+")[0]},
    }


# -- zoo models -------------------------------------------------------------------------------------------
def zoo_model(name: str, model_root: Path | None = None) -> tuple[str, Path]:
    """(subject, interaction log path) of a model listed in the zoo's manifest.yaml."""
    import yaml

    from agent_service.api import DEFAULT_MODEL_ROOT

    root = Path(model_root) if model_root else DEFAULT_MODEL_ROOT
    manifest = root / "manifest.yaml"
    if not manifest.exists():
        raise ValueError(f"no manifest.yaml in model root {root}")
    models = (yaml.safe_load(manifest.read_text()) or {}).get("models") or {}
    if name not in models:
        raise ValueError(f"unknown model {name!r}; models in {manifest}: {', '.join(sorted(models)) or 'none'}")
    # a model listed again for another subject (files: OTHER) learnt from OTHER's training episodes
    return str(models[name]["subject"]), root / str(models[name].get("files", name)) / INTERACTION_LOG_NAME


def default_out_dir(model: str, kind: str, root: Path = Path("runs/surrogates")) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return root / f"{model}-{kind}-{stamp}"


def train_zoo_surrogate(
    model: str,
    *,
    kind: str = "classifier",
    grid: str | TuningGrid = "small",
    out_dir: Path | str | None = None,
    model_root: Path | None = None,
    settings: TrainSettings = DEFAULT_SETTINGS,
    progress: Callable[[int, int, Mapping[str, Any]], None] | None = None,
    features: str = "config",
) -> Path:
    """Trains a surrogate for a zoo model from its interaction log (subject and space from the manifest);
    ``features`` names what the network reads (offline/surrogate_features.py: config or scene)."""
    from offline.surrogate_features import feature_spec
    from simulator_service.api import get_subject

    check_kind(kind)
    resolve_grid(grid)
    subject_name, log_path = zoo_model(model, model_root)
    try:
        subject = get_subject(subject_name)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    spec = feature_spec(features, subject_name)
    out = Path(out_dir) if out_dir else default_out_dir(model, kind)
    return train_surrogate(
        log_path,
        subject.space,
        subject=subject_name,
        model=model,
        kind=kind,
        grid=grid,
        out_dir=out,
        settings=settings,
        progress=progress,
        features=spec,
    )
