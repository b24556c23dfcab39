"""Can any learner rank the Parking agent's failures from the test configuration? (Indago diagnosis, issue 28)

Indago's surrogate ("Testing of Deep Reinforcement Learning Agents with Surrogate Models", Sec. 3.1 and 4.1) is
an MLP on the environment configuration, trained on the agent's training log. For `parking-her-tqc` it is at
chance on held-out training episodes (AUC about 0.47), yet the configs that failed during training fail again on
the final agent far more often than random ones (train. fail. in results/indago_table2_parking.md). This script
asks whether the configuration carries the signal a surrogate needs, with learners other than the MLP and with
features engineered from the lot's geometry, and writes results/parking_tqc/learnability.{json,md}.

Data (all read with the code `gauntlet surrogate train` uses: the zoo manifest's log, load_interaction_log,
the training-progress filter, the held-out split of offline/surrogate_splits.py):

* training pool for a filter level p: the log's episodes after the first p %, minus the held-out ones;
* (a) held-out: the surrogate trainer's held-out episodes (10 % after a 5 % filter, seed 0);
* (b) eval: the 2,000 random valid inputs of the final agent's measurement (`--eval`, a journal of
  offline/evaluation.py: the inputs are drawn again from its seed, and every failure it lists is checked
  against the drawn input), labelled by that measurement: the question that matters for a search;
* replay: the training failures the train. fail. baseline replays (after a 30 % filter) run once more on the
  final agent, in process (offline/evaluation.py's run_test_cases; Parking is deterministic). Cached in
  `--out`/learnability_replay.json and reused when model file and log are unchanged.

Encodings: ``raw`` is the surrogate's own (generator_service/surrogates/encoding.py: domain-scaled numbers, spot
flags); ``engineered`` adds what the configuration implies about the scene, read from the environment's own road
(goal spot centre and heading, ego heading as sin/cos, goal in the ego's frame, distance and bearing, heading
difference, neighbours of the goal spot occupied, cars in the goal's row and between the ego and the goal, the
nearest parked car). Learners: the project's MLP (generator_service fit, the grid's 1-layer and 3-layer points as
selected on the small and paper grids), k-nearest neighbours, logistic regression, random forest and gradient-
boosted trees (scikit-learn, fixed settings, nothing tuned on (a) or (b)). Scores: ROC AUC with a 95 %
percentile-bootstrap interval (rows resampled), precision at the top k (k = 5 % of the rows: a Table 2 run asks
100 inputs; 1 % too) and its lift over the base rate. Two reference checks that do not use the training log:
out-of-fold AUC of 5-fold cross-validation on (b)'s own labels (is the final agent's failure a function of the
configuration a learner can find from 2,000 rows?) and on the replay's labels. Finally a feature comparison of
the replayed training failures that fail again against those that do not, and of (b)'s failures against its
passes (means and a two-sided Mann-Whitney p).

    python replications/parking_learnability.py  # about 3 CPU-min with the replay cached, 5 without
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from agent_service.api import DEFAULT_MODEL_ROOT, ModelRegistry, model_file_name
from common.seeding import derive_seed
from generator_service.api import (
    Encoder,
    InteractionData,
    TrainSettings,
    class_weights,
    fit,
    kept_indices,
    load_interaction_log,
    load_network,
    load_surrogate,
    predict_scores,
    score_module,
)
from offline.evaluation import draw_test_cases, file_sha256, run_test_cases
from offline.surrogate_features import Lot, read_lot
from offline.surrogate_splits import VALIDATION_FRACTION, held_out_indices, stratified_split
from offline.surrogate_training import roc_auc, zoo_model
from replications.harness import repo_relative
from simulator_service.api import Subject, get_subject

ROOT = Path(__file__).resolve().parent.parent
REPLAY_FILTER = 30.0  # the train. fail. baseline's failure_filter (generator_service/strategies/indago.py)
MLP_POINTS = ((5.0, 1, 0), (80.0, 3, 9))  # (filter %, layers, seed) the small and paper grids selected


# -- the scene a configuration implies ---------------------------------------------------------------------------
ENGINEERED = (
    "x", "y", "cos_h", "sin_h", "goal_x", "goal_y", "goal_row", "goal_col", "goal_edge",
    "dx", "dy", "distance", "goal_forward", "goal_lateral", "bearing_cos", "bearing_sin",
    "rel_heading_cos", "rel_heading_sin", "left_occupied", "right_occupied", "neighbours_occupied",
    "opposite_occupied", "row_occupied", "parked_total", "cars_between", "nearest_car", "row_gap",
)  # fmt: skip


def engineer(values: Mapping[str, Any], lot: Lot) -> list[float]:
    """The ENGINEERED features of one Parking input (spot s = flag parked_{s-1}; heading = 2 pi head_ego)."""
    spots = 2 * lot.per_row
    parked = np.array([int(values[f"parked_{i}"]) for i in range(spots)])
    goal = int(values["goal_lane"]) - 1
    row, col = divmod(goal, lot.per_row)
    x, y = float(values["x"]), float(values["y"])
    h = 2.0 * np.pi * float(values["head_ego"])
    gx, gy = lot.centres[goal]
    dx, dy = gx - x, gy - y
    distance = float(np.hypot(dx, dy))
    forward = dx * np.cos(h) + dy * np.sin(h)
    lateral = -dx * np.sin(h) + dy * np.cos(h)
    rel = lot.headings[goal] - h
    left = parked[goal - 1] if col > 0 else 0
    right = parked[goal + 1] if col < lot.per_row - 1 else 0
    opposite = parked[(1 - row) * lot.per_row + col]
    in_row = parked[row * lot.per_row : (row + 1) * lot.per_row]
    xs = lot.cars[row * lot.per_row : (row + 1) * lot.per_row, 0]
    between = int(np.sum(in_row[(xs > min(x, gx)) & (xs < max(x, gx))]))
    occupied = lot.cars[parked == 1]
    nearest = float(np.min(np.hypot(occupied[:, 0] - x, occupied[:, 1] - y))) if len(occupied) else 60.0
    return [
        x, y, np.cos(h), np.sin(h), gx, gy, row, col, float(col in (0, lot.per_row - 1)),
        dx, dy, distance, forward, lateral, forward / distance, lateral / distance,
        np.cos(rel), np.sin(rel), left, right, left + right, opposite, int(in_row.sum()), int(parked.sum()),
        between, nearest, abs(gy - y),
    ]  # fmt: skip


def encodings(rows: Sequence[Mapping[str, Any]], encoder: Encoder, lot: Lot) -> dict[str, np.ndarray]:
    raw = encoder.encode_many(rows)
    eng = np.array([engineer(r, lot) for r in rows], dtype=np.float64)
    return {
        "raw": raw,
        "engineered": np.hstack([eng, raw[:, [b.start for b in encoder.blocks if "parked" in b.param.name]]]),
    }


# -- the labelled sets ------------------------------------------------------------------------------------------
def eval_inputs(path: Path, subject: Subject) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, Any]]:
    """The measurement's inputs drawn again from its seed, and its verdicts; every listed failure is checked."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    header, chunks = lines[0], lines[1:]
    if "inputs_sha256" in header:
        raise SystemExit(f"error: --eval {path}: a measurement of named inputs; this needs one of random draws")
    inputs = draw_test_cases(subject, int(header["tests"]), int(header["seed"]))
    covered = sorted((c["start"], c["end"]) for c in chunks)
    if sum(e - s for s, e in covered) != len(inputs):
        raise SystemExit(
            f"error: --eval {path}: the journal covers {sum(e - s for s, e in covered)} of {len(inputs)} tests"
        )
    failed = np.zeros(len(inputs), dtype=bool)
    for c in chunks:
        for f in c["failed"]:
            if f["values"] != inputs[f["index"]]:
                raise SystemExit(f"error: --eval {path}: failure {f['index']} is not the input its seed draws")
            failed[f["index"]] = True
    return inputs, failed, header


def replay_failures(
    model: str, model_root: Path, subject: Subject, configs: list[dict[str, Any]], cache: Path, key: dict[str, Any]
) -> np.ndarray:
    """Runs each config once on the final agent (cached under `cache` for the same key); True = failed again."""
    if cache.exists():
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            return np.array(saved["failed"], dtype=bool)
    registry = ModelRegistry(model_root)
    ev = run_test_cases(
        subject, lambda obs: registry.act(model, obs), list(enumerate(configs)), seed=derive_seed("replay", 0)
    )
    if ev.errors:
        raise SystemExit(f"error: {ev.errors} replayed episodes raised errors")
    failed = np.zeros(len(configs), dtype=bool)
    failed[list(ev.failed_indices)] = True
    cache.write_text(json.dumps({"key": key, "failed": failed.astype(int).tolist()}) + "\n")
    return failed


# -- learners ---------------------------------------------------------------------------------------------------
Scorer = Callable[[np.ndarray], np.ndarray]


def train_mlp(x: np.ndarray, failed: np.ndarray, pool: np.ndarray, layers: int, seed: int) -> Scorer:
    """One grid point of `gauntlet surrogate train` (offline/surrogate_training.py): the same split, weights, fit."""
    train_idx, val_idx = stratified_split(pool, failed, VALIDATION_FRACTION, seed)
    result = fit(
        x[train_idx],
        failed[train_idx].astype(np.int64),
        x[val_idx],
        failed[val_idx].astype(np.int64),
        kind="classifier",
        layers=layers,
        seed=seed,
        settings=TrainSettings(),
        class_weight=class_weights(failed[train_idx]),
    )
    scorer = score_module(load_network(result.state_dict, x.shape[1], layers, "classifier"), "classifier")
    return lambda rows: predict_scores(scorer, rows)


def scaled(scorer: Scorer, low: np.ndarray, span: np.ndarray) -> Scorer:
    return lambda rows: scorer((rows - low) / span)


def sklearn_learners() -> dict[str, Callable[[], Any]]:
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {
        "knn_50": lambda: make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=50)),
        "logistic": lambda: make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=5000)),
        "random_forest": lambda: RandomForestClassifier(
            n_estimators=300, min_samples_leaf=5, class_weight="balanced_subsample", random_state=0, n_jobs=1
        ),
        "boosted_trees": lambda: HistGradientBoostingClassifier(
            max_iter=200, learning_rate=0.05, max_leaf_nodes=15, class_weight="balanced", random_state=0
        ),
    }


def train_sklearn(make: Callable[[], Any], x: np.ndarray, y: np.ndarray) -> Scorer:
    model = make().fit(x, y.astype(int))
    return lambda rows: model.predict_proba(rows)[:, 1]


# -- scores -----------------------------------------------------------------------------------------------------
def auc_interval(failed: np.ndarray, scores: np.ndarray, reps: int, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the AUC, rows resampled within each class (counts kept)."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(failed), np.flatnonzero(~failed)
    lab = np.r_[np.ones(len(pos), dtype=bool), np.zeros(len(neg), dtype=bool)]
    values = [roc_auc(lab, scores[np.r_[rng.choice(pos, len(pos)), rng.choice(neg, len(neg))]]) for _ in range(reps)]
    low, high = np.percentile(np.asarray(values, dtype=np.float64), [2.5, 97.5])
    return float(low), float(high)


def ranking(failed: np.ndarray, scores: np.ndarray, reps: int) -> dict[str, Any]:
    order = np.argsort(-scores, kind="stable")
    base = float(failed.mean())
    out: dict[str, Any] = {"rows": int(len(failed)), "failures": int(failed.sum()), "base_rate": base}
    out["auc"] = roc_auc(failed, scores)
    out["auc_ci95"] = list(auc_interval(failed, scores, reps))
    for share in (0.05, 0.01):
        k = max(1, int(round(share * len(failed))))
        hits = int(failed[order[:k]].sum())
        out[f"top{share:.0%}"] = {"k": k, "failures": hits, "precision": hits / k, "lift": (hits / k) / base}
    return out


def out_of_fold(make: Callable[[], Any], x: np.ndarray, y: np.ndarray, seed: int = 0) -> np.ndarray:
    from sklearn.model_selection import StratifiedKFold

    scores = np.zeros(len(y))
    for train, test in StratifiedKFold(5, shuffle=True, random_state=seed).split(x, y):
        scores[test] = make().fit(x[train], y[train].astype(int)).predict_proba(x[test])[:, 1]
    return scores


def compare_features(x: np.ndarray, names: Sequence[str], group: np.ndarray) -> list[dict[str, Any]]:
    """Per feature: mean in each group, standardised difference, two-sided Mann-Whitney p; largest |d| first."""
    from scipy.stats import mannwhitneyu

    rows = []
    for j, name in enumerate(names):
        a, b = x[group, j], x[~group, j]
        sd = float(np.std(x[:, j])) or 1.0
        p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue) if np.ptp(x[:, j]) > 0 else 1.0
        rows.append(
            {
                "feature": name,
                "mean_yes": float(a.mean()),
                "mean_no": float(b.mean()),
                "d": float((a.mean() - b.mean()) / sd),
                "p": p,
            }
        )
    return sorted(rows, key=lambda r: -abs(r["d"]))


# -- report -----------------------------------------------------------------------------------------------------
def fmt_rank(r: Mapping[str, Any]) -> str:
    lo, hi = r["auc_ci95"]
    t5 = r["top5%"]
    return (
        f"{r['auc']:.3f} ({lo:.3f}-{hi:.3f}) | {t5['failures']}/{t5['k']} = {t5['precision']:.1%} (x{t5['lift']:.2f})"
    )


def render(doc: Mapping[str, Any]) -> str:
    d = doc["data"]
    lines = [
        f"# Can a learner rank `{doc['model']}`'s failures from the configuration? (issue 28)",
        "",
        f"Command: `{doc['command']}` ({doc['cpu_seconds']:.0f} CPU s). Made by replications/parking_learnability.py;",
        "numbers below are from learnability.json beside this file.",
        "",
        f"Training log: {d['log_episodes']} episodes, {d['log_failures']} failures. (a) held-out training episodes: "
        f"{d['held_out_rows']} rows, {d['held_out_failures']} failures. (b) the final agent on {d['eval_rows']} random "
        f"valid inputs: {d['eval_failures']} failures ({d['eval_failures'] / d['eval_rows']:.2%}). Replay: "
        f"{d['replay_rows']} training failures after the {REPLAY_FILTER:g} % filter run on the final agent, "
        f"{d['replay_failures']} fail again ({d['replay_failures'] / d['replay_rows']:.1%}).",
        "",
        "AUC (95 % bootstrap interval) | failures among the top 5 % by score (precision, lift over the base rate):",
        "",
        "| learner | encoding | filter | (a) held-out AUC | (a) top 5 % | (b) final agent AUC | (b) top 5 % |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in doc["models"]:
        where = f"| {r['learner']} | {r['encoding']} | {r['filter_percent']:g} % |"
        lines.append(f"{where} {fmt_rank(r['held_out'])} | {fmt_rank(r['eval'])} |")
    best = doc["best_eval"]
    lines += [
        "",
        f"Best on (b): {best['learner']} / {best['encoding']} / filter {best['filter_percent']:g} %: AUC "
        f"{best['eval']['auc']:.3f} (95 % CI {best['eval']['auc_ci95'][0]:.3f}-{best['eval']['auc_ci95'][1]:.3f}). "
        f"Models whose (b) interval lies above 0.6: {doc['above_0_6'] or 'none'}.",
        "",
        "Surrogate artifacts (`gauntlet surrogate train`, the grid's selected network) on the same sets:",
        "",
        "| artifact | features | grid (selected) | (a) held-out AUC | (a) top 5 % | (b) eval AUC | (b) top 5 % |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {a['path']} | {a['features']} | {a['grid']} ({a['selected']['filter_percent']:g} %, "
            f"{a['selected']['layers']} layer(s), seed {a['selected']['seed']}) | "
            f"{fmt_rank(a['held_out'])} | {fmt_rank(a['eval'])} |"
            for a in doc["surrogates"]
        ),
        "",
        "Reference checks without the training log (5-fold out-of-fold AUC on the set's own labels):",
        "",
        "| labels | learner | encoding | AUC (95 % CI) | top 5 % |",
        "|---|---|---|---|---|",
    ]
    for r in doc["cross_validation"]:
        lines.append(
            f"| {r['labels']} | {r['learner']} | {r['encoding']} | "
            + " | ".join(fmt_rank(r["scores"]).split(" | "))
            + " |"
        )
    for title, key in (
        ("Replayed training failures: fail again (yes) vs not (no)", "replay_features"),
        ("Final agent on the eval inputs: failed (yes) vs passed (no)", "eval_features"),
    ):
        lines += ["", f"{title}, engineered features, largest standardised difference first (top 8):", "",
                  "| feature | mean yes | mean no | d | MW p |", "|---|---|---|---|---|"]  # fmt: skip
        for f in doc[key][:8]:
            lines.append(
                f"| {f['feature']} | {f['mean_yes']:.3f} | {f['mean_no']:.3f} | {f['d']:+.2f} | {f['p']:.2g} |"
            )
    lines += ["", f"learnability: {doc['verdict']}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="parking-her-tqc", help="a Parking zoo model")
    parser.add_argument(
        "--eval",
        type=Path,
        default=ROOT / "results/parking_tqc/eval_2000.jsonl",
        help="the model's measurement journal on random inputs (gauntlet evaluate --journal)",
    )
    parser.add_argument("--filters", type=float, nargs="+", default=[5.0, 80.0], help="training-progress filters, %%")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples per AUC interval (100..20000)")
    parser.add_argument(
        "--surrogates",
        type=Path,
        nargs="*",
        default=[],
        help="surrogate artifacts of --model to score on the same sets (gauntlet surrogate train)",
    )
    parser.add_argument("--model-root", type=Path, default=DEFAULT_MODEL_ROOT)
    parser.add_argument("--out", type=Path, default=ROOT / "results/parking_tqc")
    args = parser.parse_args()
    if not 100 <= args.bootstrap <= 20_000:
        raise SystemExit("error: --bootstrap must be in 100..20000")
    if any(not (np.isfinite(f) and 0.0 <= f < 100.0) for f in args.filters):
        raise SystemExit("error: --filters must be percentages in [0, 100)")
    if not args.eval.is_file():
        raise SystemExit(f"error: --eval: no such file {args.eval}")
    started = time.process_time()
    subject_name, log_path = zoo_model(args.model, args.model_root)
    if subject_name != "parking":
        raise SystemExit(f"error: --model {args.model} is a {subject_name} model; the features are Parking's")
    subject = get_subject(subject_name)
    data: InteractionData = load_interaction_log(log_path, subject.space)
    encoder, lot = Encoder(subject.space), read_lot()
    n = len(data)
    held = held_out_indices(n)
    in_held = np.zeros(n, dtype=bool)
    in_held[held] = True
    log_x = encodings(data.configs, encoder, lot)
    ev_inputs, ev_failed, header = eval_inputs(args.eval, subject)
    model_sha = file_sha256(ModelRegistry(args.model_root).folder(args.model) / model_file_name("TQC"))
    if header["model_sha256"] != model_sha:
        raise SystemExit(f"error: --eval {args.eval} measured another model file than {args.model}'s")
    ev_x = encodings(ev_inputs, encoder, lot)

    first = int(kept_indices(n, REPLAY_FILTER)[0])
    replay_idx = np.flatnonzero(data.failed & (np.arange(n) >= first))
    replay_cfg = [data.configs[i] for i in replay_idx]
    args.out.mkdir(parents=True, exist_ok=True)
    key = {"model_sha256": model_sha, "log_sha256": data.sha256, "filter_percent": REPLAY_FILTER}
    replay_failed = replay_failures(
        args.model, args.model_root, subject, replay_cfg, args.out / "learnability_replay.json", key
    )
    replay_x = encodings(replay_cfg, encoder, lot)

    models: list[dict[str, Any]] = []
    learners = sklearn_learners()
    for filt in args.filters:
        pool = kept_indices(n, filt)
        pool = pool[~in_held[pool]]
        for enc in ("raw", "engineered"):
            x = log_x[enc]
            lo, span = x[pool].min(axis=0), np.ptp(x[pool], axis=0)
            span[span == 0] = 1.0  # the MLP reads min-max-scaled features, as the raw encoding already is
            if enc == "raw":
                lo, span = np.zeros_like(lo), np.ones_like(span)
            trained: dict[str, Scorer] = {}
            for f, layers, seed in MLP_POINTS:
                if f == filt:
                    trained[f"mlp_{layers}layer_seed{seed}"] = scaled(
                        train_mlp((x - lo) / span, data.failed, pool, layers, seed), lo, span
                    )
            for name, make in learners.items():
                trained[name] = train_sklearn(make, x[pool], data.failed[pool])
            for name, score in trained.items():
                row = {
                    "learner": name,
                    "encoding": enc,
                    "filter_percent": filt,
                    "train_rows": int(len(pool)),
                    "train_failures": int(data.failed[pool].sum()),
                    "held_out": ranking(data.failed[held], score(x[held]), args.bootstrap),
                    "eval": ranking(ev_failed, score(ev_x[enc]), args.bootstrap),
                    "replay": ranking(replay_failed, score(replay_x[enc]), args.bootstrap),
                }
                models.append(row)
                where = f"{name:>22} {enc:>10} {filt:>4g} %"
                print(f"{where} held-out {fmt_rank(row['held_out'])}  eval {fmt_rank(row['eval'])}", flush=True)

    artifacts: list[dict[str, Any]] = []
    for path in args.surrogates:
        try:
            surrogate = load_surrogate(path, subject=subject_name)
        except ValueError as exc:
            raise SystemExit(f"error: --surrogates: {exc}") from None
        if surrogate.meta["log"]["sha256"] != data.sha256:
            raise SystemExit(f"error: --surrogates: {path} was trained on another log than {args.model}'s")
        meta = surrogate.meta
        artifacts.append(
            {
                "path": repo_relative(path),
                "features": (meta.get("features") or {"kind": "config"})["kind"],
                "grid": meta["grid"]["name"],
                "selected": {"filter_percent": meta["filter_percent"], "layers": meta["layers"], "seed": meta["seed"]},
                "held_out": ranking(
                    data.failed[held], surrogate.score_inputs([data.configs[i] for i in held]), args.bootstrap
                ),
                "eval": ranking(ev_failed, surrogate.score_inputs(ev_inputs), args.bootstrap),
                "replay": ranking(replay_failed, surrogate.score_inputs(replay_cfg), args.bootstrap),
            }
        )
        print(
            f"artifact {path}: held-out {fmt_rank(artifacts[-1]['held_out'])}  eval {fmt_rank(artifacts[-1]['eval'])}",
            flush=True,
        )

    cross: list[dict[str, Any]] = []
    for labels, xs, y in (("eval (final agent)", ev_x, ev_failed), ("replay (fail again)", replay_x, replay_failed)):
        for enc in ("raw", "engineered"):
            for name in ("knn_50", "logistic", "random_forest", "boosted_trees"):
                scores = out_of_fold(learners[name], xs[enc], y)
                cross.append(
                    {"labels": labels, "learner": name, "encoding": enc, "scores": ranking(y, scores, args.bootstrap)}
                )
                print(f"cv {labels} {name} {enc} {fmt_rank(cross[-1]['scores'])}", flush=True)

    names = list(ENGINEERED)
    best = max(models, key=lambda r: r["eval"]["auc"])
    above = [
        f"{r['learner']}/{r['encoding']}/{r['filter_percent']:g} %" for r in models if r["eval"]["auc_ci95"][0] > 0.6
    ]
    verdict = (
        f"learnable from the training log: {len(above)} model(s) rank (b) with AUC interval above 0.6"
        if above
        else "not learnable from the training log: no model's (b) AUC interval lies above 0.6 "
        f"(best {best['eval']['auc']:.3f}, 95 % CI {best['eval']['auc_ci95'][0]:.3f}-{best['eval']['auc_ci95'][1]:.3f})"
    )
    command = "python " + " ".join([repo_relative(Path(sys.argv[0]))] + sys.argv[1:])
    doc = {
        "command": command,
        "model": args.model,
        "model_sha256": model_sha,
        "log_sha256": data.sha256,
        "data": {
            "log_episodes": n,
            "log_failures": data.n_failures,
            "held_out_rows": int(len(held)),
            "held_out_failures": int(data.failed[held].sum()),
            "eval_rows": len(ev_inputs),
            "eval_failures": int(ev_failed.sum()),
            "eval_seed": int(header["seed"]),
            "replay_rows": int(len(replay_idx)),
            "replay_failures": int(replay_failed.sum()),
        },
        "engineered_features": names,
        "models": models,
        "best_eval": best,
        "above_0_6": above,
        "surrogates": artifacts,
        "cross_validation": cross,
        "replay_features": compare_features(replay_x["engineered"][:, : len(names)], names, replay_failed),
        "eval_features": compare_features(ev_x["engineered"][:, : len(names)], names, ev_failed),
        "verdict": verdict,
        "cpu_seconds": round(time.process_time() - started, 1),
    }
    (args.out / "learnability.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "learnability.md").write_text(render(doc))
    print(render(doc))


if __name__ == "__main__":
    main()
