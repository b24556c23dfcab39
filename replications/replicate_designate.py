"""DESIGNATE's RQ1/RQ2 through the services: DESIGNATE, _single, _pix, _NoGAN, random and DeepJanus on an image subject.

"Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section IV (Tables II, VI, X for urban;
IV, VIII, XII for Mars). Steps, all campaigns on a local suite (cli.launcher.LocalSuite):

1. calibration: a random campaign judged by the subject's oracle (features) and one by its *_pix oracle (pixel
   digests) give T_relevance (the ``--relevance-percentile`` of delta_IoU) and T_diversity (the
   ``--diversity-percentile`` of the pairwise distances; the paper's rule is the median, 50), as
   cli/designate_calibration.py's calibrate_rows. The subject's own relevance rule applies to every approach
   (urban: a minimum car share, env_kwargs.min_class_share, our deviation measured by designate_object_size.py);
2. with ``--sweep P [P ...]``: DESIGNATE (run seeds ``--seeds``, default ``--first-seed``) at each T_diversity
   percentile P: archive size, IoU, diversity and the relevant images the search evaluated per run, accumulated in
   results/designate_diversity_sweep_<subject>.{md,json}, each run kept in designate_<subject>.runs-sweep<P>.json
   (a percentile and seed already there is not run again); then stop;
3. per run seed: the designate strategy (r = 5 x N = 12 seeding, ``--generations`` generations: 1,260 evaluations
   at the paper's 100) in variants designate, single, pix (with the *_pix oracle) and designate with
   ``observation_translator: none`` (NoGAN); random with ``--random-budget`` executed images (the paper's 1,200);
   the deepjanus strategy (the paper's DeepJanus baseline, Section IV-B: judged on the simulator's image) and the
   same with the translator (DeepJanus_GAN), each with DESIGNATE's evaluations (5 x N + generations x N);
   ``--variants`` runs a subset. A DESIGNATE or DeepJanus campaign's archive comes from the generator's ListArchive
   (which replays its stored batches; DeepJanus': both members of its frontier pairs); random's "archive" is its
   relevant images (the paper's Random row). Every run's archive poses go to
   results/designate_<subject>.runs[<share>].json (``--from-runs`` reads them back: RQ2 alone);
4. RQ1: IoU_car (mIoU on Mars) over the archives pooled over runs, the number of archive images per run, feature
   and pixel diversity (mean pairwise distance inside each archive, from re-rendered images: the same pose always
   gives the same images) and Mann-Whitney U / Vargha-Delaney A12 of DESIGNATE against each other approach;
5. RQ2 as an experiment (offline/designate_retraining.py): the zoo DNN trained further on the real train split
   until its validation score plateaus (``--plateau-epochs``, ``--plateau-patience``); then, per seed
   (``--retrain-seeds``), three fine-tunings of that model on sets of equal size: the same ``--retrain-images``
   real train images plus ``--retrain-images`` images of DESIGNATE's archives (pooled over runs), of random's
   relevant images, or of other real train images ("original data only"), trained in lockstep until every arm's
   validation score has gone ``--retrain-patience`` epochs without a gain of ``--retrain-min-delta`` (at most
   ``--retrain-max-epochs``; the same steps for all three, each keeping its best-validation epoch), or exactly
   ``--retrain-epochs`` epochs when given (the fixed protocol); per-image IoU_car / mIoU on the real test split;
   Mann-Whitney and A12 over the seeds' mean IoUs. The RQ2 file is rewritten after every seed (``partial``
   until all are done; ``--resume`` keeps a cut run's finished seeds).

Writes results/designate_<subject>.{md,json} and ends with
    designate_vs_random_iou=<median accuracy over DESIGNATE's archives / median over random's>
    designate_vs_random_iou_ci95=<its 95 % interval, whole runs resampled (a run's images are one search's)>
    designate_vs_random_run_p=<two-sided Mann-Whitney p of DESIGNATE's against random's per-run median accuracies>
    designate_median_iou=<median accuracy over DESIGNATE's archives, pooled>
    archive_images_per_run=<median DESIGNATE archive size over runs>
    retraining_gain=<median over seeds of the mean test IoU after fine-tuning with DESIGNATE's images, minus the
        same with original data only (IoU points)>
    retraining_p=<Mann-Whitney p, two-sided, of those per-seed means>
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np
import torch
import yaml

from analysis_service.api import compare, pooled_median_ratio_interval
from bench.harness import campaign_executions, run_campaign
from cli.designate_calibration import calibrate_rows
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import (
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
)
from common.image_diversity import IRRELEVANT, mean_pairwise_distance, pairwise_pixel_distances
from common.server import client_channel
from common.space import case_values
from generator_service.api import DESIGNATE_SCALARS, CampaignConfig

VARIANTS = ("DESIGNATE", "DESIGNATE_single", "DESIGNATE_pix", "DESIGNATE_NoGAN", "Random", "DeepJanus", "DeepJanus_GAN")
DEEPJANUS = ("DeepJanus", "DeepJanus_GAN")  # the deepjanus strategy, without and with the translator
SIMULATOR_IMAGES = ("DESIGNATE_NoGAN", "DeepJanus")  # judged on the simulator's image (observation_translator none)
PAPER = {  # Tables II/IV (median, avg accuracy, #images), VI/VIII (feature median), X/XII (median after retraining)
    "urban": {
        "DESIGNATE": {"median": 0.77, "avg": 0.54, "images": 721, "feature_div": 14.97, "pixel_div": 0.98},
        "DESIGNATE_single": {"median": 0.67, "avg": 0.48, "images": 893, "feature_div": 12.83, "pixel_div": 0.97},
        "DESIGNATE_pix": {"median": 0.76, "avg": 0.52, "images": 783, "feature_div": 12.67, "pixel_div": 0.97},
        "DESIGNATE_NoGAN": {"median": 0.84, "avg": 0.78, "images": 1190, "feature_div": 12.90, "pixel_div": 0.92},
        "Random": {"median": 0.85, "avg": 0.69, "images": 1185, "feature_div": 10.99, "pixel_div": 0.73},
        "DeepJanus": {"median": 0.74, "avg": 0.68, "images": 943, "feature_div": 13.21, "pixel_div": 0.94},
        "DeepJanus_GAN": {"median": 0.87, "avg": 0.81, "images": 954, "feature_div": 12.11, "pixel_div": 0.97},
        "retraining": {"original": 0.82, "original_data": 0.84, "DESIGNATE": 0.90, "Random": 0.85},
    },
    "mars": {
        "DESIGNATE": {"median": 0.49, "avg": 0.50, "images": 764, "feature_div": 14.75, "pixel_div": 1.00},
        "DESIGNATE_single": {"median": 0.54, "avg": 0.52, "images": 802, "feature_div": 10.59, "pixel_div": 0.99},
        "DESIGNATE_pix": {"median": 0.52, "avg": 0.53, "images": 718, "feature_div": 11.92, "pixel_div": 0.98},
        "DESIGNATE_NoGAN": {"median": 0.32, "avg": 0.39, "images": 1151, "feature_div": 16.79, "pixel_div": 0.98},
        "Random": {"median": 0.64, "avg": 0.62, "images": 1031, "feature_div": 11.36, "pixel_div": 0.98},
        "DeepJanus": {"median": 0.48, "avg": 0.44, "images": 986, "feature_div": 12.81, "pixel_div": 0.96},
        "DeepJanus_GAN": {"median": 0.60, "avg": 0.61, "images": 954, "feature_div": 9.52, "pixel_div": 0.99},
        "retraining": {"original": 0.44, "original_data": 0.47, "DESIGNATE": 0.53, "Random": 0.49},
    },
}
ORACLES = {"urban": "iou_car", "mars": "miou"}
# T_diversity's percentile per subject (the paper's rule is 50). Urban: the sweep's rule, the largest percentile whose
# median archive over its seeds holds at least 100 images (results/designate_diversity_sweep_urban.md). Mars: 0.5,
# urban's earlier choice, at which its committed runs were made (archives of 144-312 images)
DEFAULT_DIVERSITY_PERCENTILE = {"urban": 0.25, "mars": 0.5}


class Renderer:
    """Re-renders poses as the services do: simulator ground truth, translator image, DNN features (in process)."""

    def __init__(self, subject: str) -> None:
        from agent_service.api import SegmentationModel
        from simulator_service.api import get_subject, make_env

        self.env = make_env(get_subject(subject))
        self.iou_threshold = float(get_subject(subject).env_kwargs["iou_threshold"])  # the oracle's pass/fail line
        self.dnn = SegmentationModel.load(ROOT / "agent_service/zoo" / f"segnet-{subject}" / "model.pt")
        root = ROOT / "translator_service/models"
        self.entry = yaml.safe_load((root / "manifest.yaml").read_text())["translators"][f"pix2pix-{subject}"]
        self.generator = torch.jit.load(str(root / f"pix2pix-{subject}" / "generator.pt")).eval()

    def render(self, poses: list[dict[str, Any]], translated: bool = True) -> dict[str, np.ndarray]:
        from translator_service.api import translate

        if not poses:
            return {
                "labels": np.zeros((0, 64, 128), np.uint8),
                "images": np.zeros((0, 64, 128, 3), np.uint8),
                "features": np.zeros((0, 1)),
            }
        sim, maps = [], []
        for pose in poses:
            sim.append(self.env.reset(seed=0, options={"values": pose})[0])
            maps.append(self.env.unwrapped.translator_input())
        labels = np.stack(maps)
        images = translate(self.entry, self.generator, labels) if translated else np.stack(sim)
        return {"labels": labels, "images": images, "features": self.dnn.embed(images)}


def one_run(
    gen: Any,
    subject: str,
    variant: str,
    seed: int,
    args: argparse.Namespace,
    thresholds: dict[str, Any],
    renderer: Renderer,
) -> dict[str, Any]:
    oracle = ORACLES[subject]
    params: dict[str, Any] = {"generations": args.generations, "t_relevance": thresholds["t_relevance"]}
    translator = "none" if variant in SIMULATOR_IMAGES else ""
    if variant in DEEPJANUS:
        evaluations = 5 * 12 + args.generations * 12  # DESIGNATE's r x N seeding + g_max x N
        config = CampaignConfig(
            name=f"designate-{subject}-{variant}-{seed}",
            subject=subject,
            model=f"segnet-{subject}",
            strategy="deepjanus",
            # the verdict flips at the subject's iou_threshold; irrelevant images (F_accuracy 2) are on no frontier;
            # generations never bind before DESIGNATE's number of evaluations does
            strategy_params={
                "generations": evaluations,
                "max_evaluations": evaluations,
                "failure_margin": renderer.iou_threshold,
                "irrelevant_margin": IRRELEVANT,
            },
            oracle=oracle,
            seed=seed,
            budget={"max_executions": 100_000},
            batch_size=60,
            parallelism=12,
            observation_translator=translator,
        )
    elif variant == "Random":
        config = CampaignConfig(
            name=f"designate-{subject}-{variant}-{seed}",
            subject=subject,
            model=f"segnet-{subject}",
            strategy="random",
            oracle=oracle,
            seed=seed,
            budget={"max_executions": args.random_budget},
            batch_size=60,
            parallelism=12,
        )
    else:
        kind = {"DESIGNATE_single": "single", "DESIGNATE_pix": "pix"}.get(variant, "designate")
        params["variant"] = kind
        params["t_diversity"] = thresholds["t_diversity_pixels" if kind == "pix" else "t_diversity_features"]
        config = CampaignConfig(
            name=f"designate-{subject}-{variant}-{seed}",
            subject=subject,
            model=f"segnet-{subject}",
            strategy="designate",
            strategy_params=params,
            oracle=oracle + ("_pix" if kind == "pix" else ""),
            seed=seed,
            budget={"max_executions": 100_000},
            batch_size=60,
            parallelism=12,
            observation_translator=translator,
        )
    started = time.time()
    status = run_campaign(gen, config)
    seconds = time.time() - started
    rows = campaign_executions(gen, status.campaign_id)
    t_rel = thresholds["t_relevance"]
    if variant == "Random":  # the paper's Random row: every relevant image (same calibrated delta_IoU filter)
        kept = [
            r
            for r in rows
            if r.verdict != oracle_pb2.VERDICT_KIND_INVALID and r.margin < IRRELEVANT and r.descriptors[3] <= t_rel
        ]
        members = [(case_values(r.test_case), r.margin) for r in kept]
        scalars = [list(r.descriptors[:DESIGNATE_SCALARS]) for r in kept]
    else:
        listed = gen.ListArchive(generator_pb2.ListArchiveRequest(campaign_id=status.campaign_id), timeout=600)
        archive = [r.member for r in listed if r.WhichOneof("item") == "member"]
        members = [(case_values(m.execution.test_case), m.f_accuracy) for m in archive]
        scalars = [list(m.execution.descriptors[:DESIGNATE_SCALARS]) for m in archive]
    poses = [dict(v) for v, _ in members]
    # what bounds an archive: the relevant images the search evaluated (the archive keeps a T_diversity-spread
    # subset of them), counted and counted once per distinct pose
    relevant = [
        r
        for r in rows
        if r.verdict != oracle_pb2.VERDICT_KIND_INVALID and r.margin < IRRELEVANT and r.descriptors[3] <= t_rel
    ]
    distinct = {json.dumps(case_values(r.test_case), sort_keys=True) for r in relevant}
    rendered = renderer.render(poses, translated=variant not in SIMULATOR_IMAGES)
    images = list(rendered["images"])
    return {
        "seed": seed,
        "campaign": status.campaign_id,
        "evaluations": len(rows),
        "executed": sum(1 for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID),
        "relevant_evaluated": len(relevant),
        "relevant_distinct": len(distinct),
        "seconds": round(seconds, 1),
        "accuracy": [round(float(f), 4) for _, f in members],
        # the class share (car / sky) of each member's ground truth, and its IoU on the simulator image
        "class_share": [round(float(d[4]), 5) for d in scalars],
        "iou_simulated": [round(float(d[1]), 4) for d in scalars],
        "poses": poses,
        # the analysis service's feature diversity (common/image_diversity.py); pixels here on full images, not digests
        "feature_div": _or_nan(mean_pairwise_distance(list(rendered["features"]), "features")),
        "pixel_div": float(np.mean(pairwise_pixel_distances(images))) if len(images) > 1 else float("nan"),
    }


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def calibrate(
    gen: Any, subject: str, args: argparse.Namespace, percentiles: list[float]
) -> dict[float, dict[str, Any]]:
    """Thresholds at each T_diversity percentile, from one pair of random calibration campaigns."""
    out: dict[float, dict[str, Any]] = {p: {} for p in percentiles}
    for oracle in (ORACLES[subject], ORACLES[subject] + "_pix"):
        config = CampaignConfig(
            name=f"designate-{subject}-calibration-{oracle}",
            subject=subject,
            model=f"segnet-{subject}",
            strategy="random",
            oracle=oracle,
            seed=10_000,
            budget={"max_executions": args.calibration},
            batch_size=60,
            parallelism=12,
        )
        status = run_campaign(gen, config)
        rows = campaign_executions(gen, status.campaign_id)
        for p in percentiles:
            found = calibrate_rows(rows, args.relevance_percentile, oracle, p)
            out[p].update({k: v for k, v in found.items() if k.startswith("t_diversity") or oracle == ORACLES[subject]})
    return out


def _sweep_row(p: float, thresholds: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    accuracy = run["accuracy"]
    return {
        "percentile": p,
        "seed": run["seed"],
        "t_diversity_features": thresholds["t_diversity_features"],
        "archive_images": len(accuracy),
        "median_iou": float(np.median(accuracy)) if accuracy else float("nan"),
        "mean_iou": float(np.mean(accuracy)) if accuracy else float("nan"),
        "feature_div": run["feature_div"],
        "pixel_div": run["pixel_div"],
        # absent in runs made before the count existed
        "relevant_evaluated": run.get("relevant_evaluated", float("nan")),
        "relevant_distinct": run.get("relevant_distinct", float("nan")),
        "seconds": run["seconds"],
    }


def sweep_runs_path(out: Path, subject: str, p: float) -> Path:
    """A sweep row's whole run (poses included), in --from-runs' format: the chosen row's runs merge as they are."""
    return out / f"designate_{subject}.runs-sweep{p:g}.json"


def sweep(
    subject: str,
    args: argparse.Namespace,
    seeds: list[int],
    renderer: Renderer,
    imported: list[tuple[Path, dict[str, Any]]],
) -> None:
    """DESIGNATE at each T_diversity percentile and seed (seed by seed, so a cut sweep has every row's first seeds):
    archive size, IoU, diversity and the relevant images the search evaluated, per run. Rows accumulate in
    results/designate_diversity_sweep_<subject>.{md,json} over invocations (a row of the same percentile and seed
    is replaced); each run is also kept whole in designate_<subject>.runs-sweep<P>.json. A (percentile, seed) that
    already has a row is not run again (a cut sweep resumes). ``imported``: runs files of ordinary replications
    whose DESIGNATE runs become rows at their files' percentile (no campaign)."""
    stem = args.out / f"designate_diversity_sweep_{subject}"
    found: dict[str, Any] = {"rows": [], "commands": [], "calibration": {}}
    if stem.with_suffix(".json").exists():
        found = json.loads(stem.with_suffix(".json").read_text())
        found.setdefault("commands", [found.pop("command")] if "command" in found else [])
    found["subject"], found["generations"] = subject, args.generations
    found["commands"].append("python replications/replicate_designate.py " + " ".join(sys.argv[1:]))
    rows: dict[tuple[float, int], dict[str, Any]] = {(r["percentile"], r["seed"]): r for r in found["rows"]}

    def write() -> None:
        found["rows"] = sorted(rows.values(), key=lambda r: (r["percentile"], r["seed"]))
        found["load1"] = os.getloadavg()[0]
        stem.with_suffix(".json").write_text(json.dumps(found, indent=1, default=float))
        stem.with_suffix(".md").write_text(render_sweep(found))

    def check(p: float, thresholds: dict[str, Any], where: str) -> None:
        known = found["calibration"].setdefault(f"{p:g}", thresholds)
        if (
            known["t_relevance"] != thresholds["t_relevance"]
            or known["t_diversity_features"] != thresholds["t_diversity_features"]
        ):
            raise SystemExit(f"--sweep: {where} was calibrated otherwise than the sweep's percentile {p:g}")

    for path, saved in imported:
        p = float(saved["thresholds"]["diversity_percentile"])
        check(p, saved["thresholds"], str(path))
        for run in saved["runs"].get("DESIGNATE", []):
            rows[(p, run["seed"])] = _sweep_row(p, saved["thresholds"], run)
    saved_runs: dict[float, dict[str, Any]] = {}  # {} where a percentile has no runs file yet
    for p in args.sweep:
        path = sweep_runs_path(args.out, subject, p)
        saved_runs[p] = json.loads(path.read_text()) if path.exists() else {}
        for run in saved_runs[p].get("runs", {}).get("DESIGNATE", []):
            rows[(p, run["seed"])] = _sweep_row(p, saved_runs[p]["thresholds"], run)
    todo = [(seed, p) for seed in seeds for p in args.sweep if (p, seed) not in rows]
    if not todo:
        write()
        return
    with TemporaryDirectory() as tmp:
        with LocalSuite(store_url=f"sqlite:///{tmp}/designate.db", log_dir=Path(tmp) / "logs") as local:
            gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
            by_percentile = calibrate(gen, subject, args, list(args.sweep))
            for p, thresholds in by_percentile.items():
                check(p, thresholds, "this calibration")
                if saved_runs[p] and saved_runs[p]["thresholds"] != thresholds:
                    raise SystemExit(f"--sweep: {sweep_runs_path(args.out, subject, p)} was calibrated otherwise")
            for seed, p in todo:
                run = one_run(gen, subject, "DESIGNATE", seed, args, by_percentile[p], renderer)
                row = rows[(p, seed)] = _sweep_row(p, by_percentile[p], run)
                print(
                    f"sweep percentile {p:g} seed {seed}: T_diversity {row['t_diversity_features']:.3f}, "
                    f"{row['archive_images']} archive images of {row['relevant_evaluated']} relevant evaluated "
                    f"({row['relevant_distinct']} distinct), median {row['median_iou']:.3f}, feature div "
                    f"{row['feature_div']:.2f}, pixel div {row['pixel_div']:.3f} ({row['seconds']} s)",
                    flush=True,
                )
                if not saved_runs[p]:
                    saved_runs[p] = {"command": " ".join(sys.argv), "thresholds": by_percentile[p], "runs": {}}
                saved_runs[p]["runs"].setdefault("DESIGNATE", []).append(run)
                sweep_runs_path(args.out, subject, p).write_text(json.dumps(saved_runs[p], default=float))
                write()  # after every run: a stopped sweep keeps the rows it finished


def _int_or_dash(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.0f}"


def render_sweep(s: dict[str, Any]) -> str:
    metric = "IoU_car" if s["subject"] == "urban" else "mIoU"
    commands = "\n".join(f"    {c}" for c in s["commands"])
    lines = [
        f"# DESIGNATE T_diversity sweep on {s['subject']}",
        "",
        f"Commands, in order (rows accumulate; generations {s['generations']}; T_diversity = that percentile of the "
        "pairwise feature distances of the random calibration images; 50 = the paper's median):",
        "",
        commands,
        "",
        "Per percentile (medians over the seeds; relevant evaluated = the search's evaluated images that pass the "
        "relevance rule, which bound the archive):",
        "",
        f"| percentile | T_diversity | seeds | archive images, median (min-max) | median {metric} (median over "
        "seeds) | feature div | pixel div | relevant evaluated | distinct relevant |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by_p: dict[float, list[dict[str, Any]]] = {}
    for r in s["rows"]:
        by_p.setdefault(r["percentile"], []).append(r)
    for p, rs in sorted(by_p.items()):
        sizes = [r["archive_images"] for r in rs]
        lines.append(
            f"| {p:g} | {rs[0]['t_diversity_features']:.3f} | {len(rs)} | {np.median(sizes):g} ({min(sizes)}-"
            f"{max(sizes)}) | {np.median([r['median_iou'] for r in rs]):.3f} | "
            f"{np.median([r['feature_div'] for r in rs]):.2f} | {np.median([r['pixel_div'] for r in rs]):.3f} | "
            f"{_int_or_dash(np.median([r.get('relevant_evaluated', np.nan) for r in rs]))} | "
            f"{_int_or_dash(np.median([r.get('relevant_distinct', np.nan) for r in rs]))} |"
        )
    lines += [
        "",
        "Per run:",
        "",
        f"| percentile | seed | T_diversity | archive images | relevant evaluated | distinct relevant | "
        f"median {metric} | mean {metric} | feature div | pixel div | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["rows"]:
        lines.append(
            f"| {r['percentile']:g} | {r['seed']} | {r['t_diversity_features']:.3f} | {r['archive_images']} | "
            f"{_int_or_dash(r.get('relevant_evaluated'))} | {_int_or_dash(r.get('relevant_distinct'))} | "
            f"{r['median_iou']:.3f} | {r['mean_iou']:.3f} | {r['feature_div']:.2f} | {r['pixel_div']:.3f} | "
            f"{r['seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def plateau(subject: str, args: argparse.Namespace) -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
    """RQ2's starting point: the zoo DNN trained further until its validation score plateaus (or the cached one)."""
    from offline.designate_retraining import train_to_plateau

    cache = args.plateau_cache
    if cache is not None and cache.exists():
        saved = torch.load(cache)
        print(f"plateau: {saved['log']} (from {cache})", flush=True)
        return saved["state"], saved["log"]
    recipe = f"segnet-{subject}"
    started = time.time()
    model_path = ROOT / "agent_service/zoo" / recipe / "model.pt"
    state, log = train_to_plateau(subject, model_path, recipe, args.plateau_epochs, args.plateau_patience)
    print(f"plateau: {log} ({time.time() - started:.0f} s)", flush=True)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        saved = {"state": state, "log": log, "epochs": args.plateau_epochs, "patience": args.plateau_patience}
        torch.save(saved, cache)
    return state, log


def retraining(
    subject: str,
    runs: dict[str, list[dict[str, Any]]],
    renderer: Renderer,
    args: argparse.Namespace,
    on_seed: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """RQ2 as an experiment: a plateau model, then equal-size fine-tunings per approach and seed."""
    from offline.designate_retraining import (
        fine_tune_from,
        fine_tune_to_plateau,
        per_image_accuracy,
        real_splits,
        validation_score,
    )

    recipe = f"segnet-{subject}"
    started = time.time()
    state, plateau_log = plateau(subject, args)
    splits = real_splits(subject, recipe)
    train, val, test = splits["train"], splits["val"], splits["test"]
    start_model = fine_tune_from(subject, state, recipe, (train[0][:0], train[1][:0]), 0, 0)
    out: dict[str, Any] = {
        "plateau_log": plateau_log,
        "plateau_test": per_image_accuracy(subject, start_model, *test).tolist(),
    }
    pools = {v: [p for r in runs[v] for p in r["poses"]] for v in ("DESIGNATE", "Random")}
    n = min(args.retrain_images, len(pools["DESIGNATE"]), len(pools["Random"]), len(train[0]) // 2)
    out["images_per_set"] = n
    # the images each approach adds: up to 4 n of its pool rendered once, each seed drawing n of them
    rendered = {}
    for v, pool in pools.items():
        order = np.random.default_rng(0).permutation(len(pool))[: 4 * n]
        r = renderer.render([pool[i] for i in order])
        rendered[v] = (r["labels"], r["images"])
    arms: dict[str, list[float]] = {"original_data": [], "DESIGNATE": [], "Random": []}
    per_image: dict[str, list[float]] = {a: [] for a in arms}
    val_scores: dict[str, list[float]] = {a: [] for a in arms}
    # fixed protocol (--retrain-epochs E): E epochs each, last weights; else lockstep until every arm plateaus
    fixed = args.retrain_epochs is not None
    max_epochs = args.retrain_epochs if fixed else args.retrain_max_epochs
    patience = None if fixed else args.retrain_patience
    fits: list[dict[str, Any]] = []
    done, prior_seconds = 0, 0.0
    if args.resume is not None and args.resume.exists():  # a run cut short: keep its finished seeds
        before = json.loads(args.resume.read_text())
        arms, per_image, val_scores = before["seed_means"], before["per_image"], before["val"]
        fits, done = before.get("fine_tuning", []), len(before["seed_means"]["DESIGNATE"])
        prior_seconds = float(before["seconds"])
        print(f"resumed {done} seeds from {args.resume}", flush=True)
    for seed in range(args.retrain_seeds):
        rng = np.random.default_rng(1000 + seed)
        real = rng.permutation(len(train[0]))
        base, more = real[:n], real[n : 2 * n]
        extra = {"original_data": (train[0][more], train[1][more])}
        for v in ("DESIGNATE", "Random"):
            pick = rng.choice(len(rendered[v][0]), n, replace=False)
            extra[v] = (rendered[v][0][pick], rendered[v][1][pick])
        if seed < done:  # drawn above all the same, so the later seeds' images do not depend on resuming
            continue
        sets = {
            arm: (np.concatenate([train[0][base], extra[arm][0]]), np.concatenate([train[1][base], extra[arm][1]]))
            for arm in arms
        }
        models, fit = fine_tune_to_plateau(
            subject, state, recipe, sets, val, max_epochs, patience, seed, args.retrain_min_delta
        )
        fits.append({"seed": seed, **fit})
        for arm, model in models.items():
            scores = per_image_accuracy(subject, model, *test)
            arms[arm].append(float(np.mean(scores)))
            per_image[arm].extend(float(x) for x in scores)
            val_scores[arm].append(validation_score(subject, model, *val))
        print(
            f"retraining seed {seed}: "
            + ", ".join(f"{a} {arms[a][-1]:.4f} (best epoch {fit['best_epoch'][a]})" for a in arms)
            + f", {fit['epochs']} epochs ({time.time() - started:.0f} s)",
            flush=True,
        )
        out.update({"seed_means": arms, "per_image": per_image, "val": val_scores, "fine_tuning": fits})
        out["seconds"] = time.time() - started + prior_seconds
        if on_seed is not None:
            on_seed(out)
    out.update({"seed_means": arms, "per_image": per_image, "val": val_scores, "fine_tuning": fits})
    out.setdefault("seconds", prior_seconds)  # every seed resumed: nothing ran
    return out


def stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if not len(a):
        return {k: float("nan") for k in ("min", "max", "median", "p5", "q1", "q3", "avg")}
    q = np.percentile(a, [0, 100, 50, 5, 25, 75])
    return {"min": q[0], "max": q[1], "median": q[2], "p5": q[3], "q1": q[4], "q3": q[5], "avg": float(a.mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subject", default="urban", choices=["urban", "mars"])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--generations", type=int, default=100)
    parser.add_argument("--random-budget", type=int, default=1200)
    parser.add_argument("--calibration", type=int, default=300, help="executed random images for calibration")
    parser.add_argument("--relevance-percentile", type=float, default=97.0)
    parser.add_argument(
        "--diversity-percentile",
        type=float,
        help="T_diversity = this percentile of the random pairwise distances (50: the paper's median; default: "
        "urban 0.25, the sweep's choice, mars 0.5; see docs/replications/designate.md)",
    )
    parser.add_argument("--sweep", type=float, nargs="+", help="T_diversity percentiles to sweep (then stop)")
    parser.add_argument(
        "--sweep-import",
        type=Path,
        nargs="+",
        default=[],
        help="runs files whose DESIGNATE runs become sweep rows at their calibration's percentile (no campaigns)",
    )
    parser.add_argument("--plateau-epochs", type=int, default=8, help="RQ2: most epochs to reach the plateau")
    parser.add_argument("--plateau-patience", type=int, default=2, help="RQ2: epochs without improvement")
    parser.add_argument("--retrain-seeds", type=int, default=10)
    parser.add_argument("--retrain-images", type=int, default=144, help="RQ2: images each approach adds (n)")
    parser.add_argument(
        "--retrain-epochs",
        type=int,
        help="RQ2, fixed protocol: every fine-tuning exactly this many epochs (default: until validation plateaus)",
    )
    parser.add_argument(
        "--retrain-max-epochs", type=int, default=15, help="RQ2: most fine-tuning epochs (all arms in lockstep)"
    )
    parser.add_argument(
        "--retrain-patience",
        type=int,
        default=3,
        help="RQ2: fine-tuning stops once every arm has gone this many epochs without a validation gain",
    )
    parser.add_argument(
        "--retrain-min-delta", type=float, default=0.005, help="RQ2: the validation gain that counts as one"
    )
    parser.add_argument(
        "--resume", type=Path, help="RQ2: a partial designate_<subject>.rq2.json whose finished seeds are kept"
    )
    parser.add_argument("--first-seed", type=int, default=0, help="run seeds first .. first + runs - 1")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="run exactly these seeds instead of --first-seed/--runs (the ones a merge still lacks; one calibration)",
    )
    parser.add_argument(
        "--campaigns-only",
        action="store_true",
        help="run the campaigns, write designate_<subject>.runs[-from<first>].json and stop (a share of the runs)",
    )
    parser.add_argument(
        "--from-runs",
        nargs="+",
        help="RQ2 and the tables from saved .runs.json files, merged; FILE:V1,V2 takes only those variants of a "
        "file (e.g. a file's Random runs beside DESIGNATE runs made at another T_diversity)",
    )
    parser.add_argument(
        "--share",
        default="",
        help="name of this share's runs file, designate_<subject>.runs-<share>.json (default: from<first seed>, "
        "or none for seed 0); e.g. --variants DeepJanus DeepJanus_GAN --campaigns-only --share deepjanus",
    )
    parser.add_argument(
        "--plateau-cache",
        type=Path,
        help="RQ2's plateau model: loaded from this file when it exists, else trained and saved there",
    )
    parser.add_argument("--plateau-only", action="store_true", help="train (or load) the plateau model and stop")
    parser.add_argument(
        "--rq2-only",
        action="store_true",
        help="RQ2 alone (with --from-runs): write designate_<subject>.rq2.json and stop",
    )
    parser.add_argument("--rq2-run-seeds", type=int, nargs="+", help="RQ2's pools: only the runs of these seeds")
    parser.add_argument("--rq2-from", type=Path, help="RQ2's results from a designate_<subject>.rq2.json")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    for name, low, high in (
        ("runs", 1, 100),
        ("first_seed", 0, 10_000),
        ("generations", 0, 1000),
        ("random_budget", 1, 100_000),
        ("calibration", 2, 100_000),
        ("plateau_epochs", 0, 100),
        ("plateau_patience", 1, 100),
        ("retrain_seeds", 0, 100),
        ("retrain_images", 1, 10_000),
        ("retrain_epochs", 1, 100),
        ("retrain_max_epochs", 1, 100),
        ("retrain_patience", 1, 100),
    ):
        value = getattr(args, name)
        if value is not None and not low <= value <= high:
            parser.error(f"--{name.replace('_', '-')} must be in [{low}, {high}]")
    if not (np.isfinite(args.retrain_min_delta) and 0.0 <= args.retrain_min_delta <= 1.0):
        parser.error("--retrain-min-delta must be in [0, 1]")
    if args.seeds is not None:
        if len(set(args.seeds)) != len(args.seeds) or not all(0 <= seed <= 10_000 for seed in args.seeds):
            parser.error("--seeds must be distinct integers in [0, 10000]")
        if len(args.seeds) > 100:
            parser.error("--seeds takes at most 100 seeds")
        args.first_seed = min(args.seeds)  # names the share file when --share does not
    seeds = args.seeds or list(range(args.first_seed, args.first_seed + args.runs))
    if args.share and not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", args.share):
        parser.error("--share must be 1-40 letters, digits, '_', '.' or '-'")
    if args.diversity_percentile is None:
        args.diversity_percentile = DEFAULT_DIVERSITY_PERCENTILE[args.subject]
    for p in [args.diversity_percentile, args.relevance_percentile, *(args.sweep or [])]:
        if not 0.0 <= p <= 100.0:
            parser.error(f"a percentile must be in [0, 100], got {p}")
    torch.set_num_threads(1)
    subject = args.subject
    renderer = Renderer(subject)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.plateau_only:
        plateau(subject, args)
        return
    if args.sweep:
        imported = [(path, json.loads(path.read_text())) for path in args.sweep_import]
        sweep(subject, args, args.seeds or [args.first_seed], renderer, imported)
        return
    if args.from_runs:
        try:
            runs, thresholds = merge_runs([(spec, *read_runs_spec(spec)) for spec in args.from_runs])
        except ValueError as e:
            parser.error(f"--from-runs: {e}")
    else:
        runs = {v: [] for v in args.variants}
        with TemporaryDirectory() as tmp:
            with LocalSuite(store_url=f"sqlite:///{tmp}/designate.db", log_dir=Path(tmp) / "logs") as local:
                gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
                thresholds = calibrate(gen, subject, args, [args.diversity_percentile])[args.diversity_percentile]
                print("calibration:", json.dumps(thresholds), flush=True)
                for seed in seeds:
                    for variant in args.variants:
                        run = one_run(gen, subject, variant, seed, args, thresholds, renderer)
                        runs[variant].append(run)
                        print(
                            f"{variant} seed {seed}: {len(run['accuracy'])} archive images, median "
                            f"{np.median(run['accuracy']) if run['accuracy'] else float('nan'):.3f}, "
                            f"{run['evaluations']} evaluations in {run['seconds']} s",
                            flush=True,
                        )
                    # after every seed: a stopped replication keeps its finished runs (--from-runs reads them)
                    saved = {"command": " ".join(sys.argv), "thresholds": thresholds, "runs": runs}
                    share = f"-{args.share}" if args.share else f"-from{args.first_seed}" if args.first_seed else ""
                    (args.out / f"designate_{subject}.runs{share}.json").write_text(json.dumps(saved, default=float))
        if args.campaigns_only:
            return
    if args.rq2_from:
        rq2 = json.loads(args.rq2_from.read_text())
    elif args.retrain_seeds:
        pool_runs = {
            v: [r for r in done if args.rq2_run_seeds is None or r["seed"] in args.rq2_run_seeds]
            for v, done in runs.items()
        }
        protocol = {
            "command": "python replications/replicate_designate.py " + " ".join(sys.argv[1:]),
            "run_seeds": {v: [r["seed"] for r in done] for v, done in pool_runs.items()},
            "retrain_seeds": args.retrain_seeds,
            "retrain_epochs": args.retrain_epochs,  # None: until validation plateaus, as below
            "retrain_max_epochs": None if args.retrain_epochs else args.retrain_max_epochs,
            "retrain_patience": None if args.retrain_epochs else args.retrain_patience,
            "retrain_min_delta": None if args.retrain_epochs else args.retrain_min_delta,
        }
        rq2_path = args.out / f"designate_{subject}.rq2.json"

        def save(partial: dict[str, Any]) -> None:  # after every seed: a run cut short keeps its finished seeds
            seeds_done = len(partial["seed_means"]["DESIGNATE"])
            label = {"partial": seeds_done < args.retrain_seeds, "seeds_done": seeds_done}
            rq2_path.write_text(json.dumps({**partial, **protocol, **label}, default=float))

        rq2 = {**retraining(subject, pool_runs, renderer, args, save), **protocol}
        rq2["partial"], rq2["seeds_done"] = False, args.retrain_seeds
        rq2_path.write_text(json.dumps(rq2, default=float))
    else:
        rq2 = None
    if args.rq2_only:
        return
    summary = summarise(subject, runs, rq2, thresholds, args)
    (args.out / f"designate_{subject}.json").write_text(json.dumps(summary, indent=1, default=float))
    (args.out / f"designate_{subject}.md").write_text(render(subject, summary))
    print(f"designate_vs_random_iou={summary['designate_vs_random_iou']:.3f}")
    print("designate_vs_random_iou_ci95={:.3f}-{:.3f}".format(*summary["designate_vs_random_iou_ci95"]))
    print(f"designate_vs_random_run_p={summary['designate_vs_random_run_p']:.3g}")
    for key in ("designate_median_iou", "archive_images_per_run"):
        print(f"{key}={summary[key]:.3f}")
    print(f"retraining_gain={summary['retraining_gain']:.4f}")
    print(f"retraining_p={summary['retraining_p']:.3g}")


# the calibration entries only the T_diversity-using variants depend on: random's relevant images and DeepJanus'
# frontier pairs are the same whatever T_diversity is, so their runs merge with DESIGNATE runs made at another one
DIVERSITY_KEYS = ("t_diversity_features", "t_diversity_pixels", "diversity_percentile")
USES_T_DIVERSITY = ("DESIGNATE", "DESIGNATE_pix", "DESIGNATE_NoGAN")


def read_runs_spec(spec: str) -> tuple[dict[str, Any], list[str] | None]:
    """A --from-runs entry, FILE or FILE:V1,V2 (only those variants of the file)."""
    path, _, names = spec.partition(":") if not Path(spec).exists() else (spec, "", "")
    chosen = [v for v in names.split(",") if v] if names else None
    if chosen is not None and (not chosen or any(v not in VARIANTS for v in chosen)):
        raise ValueError(f"{spec}: the variants after ':' must be among {', '.join(VARIANTS)}")
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such file")
    return json.loads(Path(path).read_text()), chosen


def merge_runs(
    shares: list[tuple[str, dict[str, Any], list[str] | None]],
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Runs of several shares, merged in the order given. Every share must share the calibration's T_relevance;
    the shares that bring a T_diversity-using variant must also share T_diversity (the thresholds reported are
    theirs). A (variant, seed) given twice is an error."""
    runs: dict[str, list[dict[str, Any]]] = {}
    base: dict[str, Any] | None = None
    diversity: dict[str, Any] | None = None
    first, first_diversity = "", ""
    for spec, saved, chosen in shares:
        taken = {v: done for v, done in saved["runs"].items() if chosen is None or v in chosen}
        t = saved["thresholds"]
        common = {k: x for k, x in t.items() if k not in DIVERSITY_KEYS}
        if base is None:
            base, first = common, spec
        elif common != base:
            raise ValueError(f"{spec} was calibrated otherwise than {first} (T_relevance)")
        if any(taken.get(v) for v in USES_T_DIVERSITY):
            if diversity is None:
                diversity, first_diversity = t, spec
            elif t != diversity:
                raise ValueError(f"{spec} has another T_diversity than {first_diversity}")
        for v, done in taken.items():
            seen = {r["seed"] for r in runs.get(v, [])}
            again = sorted(seen & {r["seed"] for r in done})
            if again:
                raise ValueError(f"{spec}: {v} seed(s) {again} already given by an earlier file")
            runs.setdefault(v, []).extend(done)
    thresholds = diversity or (shares[0][1]["thresholds"] if shares else {})
    return runs, thresholds


def summarise(
    subject: str,
    runs: dict[str, list[dict[str, Any]]],
    rq2: dict[str, Any] | None,
    thresholds: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, Any]:
    variants = [v for v in VARIANTS if runs.get(v)]
    pooled = {v: [x for r in runs[v] for x in r["accuracy"]] for v in variants}
    rq1 = {}
    for v in variants:
        rq1[v] = {
            **stats(pooled[v]),
            "runs": len(runs[v]),
            "images_per_run": float(np.mean([len(r["accuracy"]) for r in runs[v]])),
            "images_per_run_median": float(np.median([len(r["accuracy"]) for r in runs[v]])),
            "feature_div": float(np.nanmean([r["feature_div"] for r in runs[v]])),
            "median_class_share": float(np.median([x for r in runs[v] for x in r["class_share"]] or [np.nan])),
            "pixel_div": float(np.nanmean([r["pixel_div"] for r in runs[v]])),
            "evaluations_per_run": float(np.mean([r["evaluations"] for r in runs[v]])),
            "seconds_per_run": float(np.mean([r["seconds"] for r in runs[v]])),
        }
        if v != "DESIGNATE" and pooled[v] and pooled.get("DESIGNATE"):
            c = compare(pooled["DESIGNATE"], pooled[v], alternative="two-sided")
            rq1[v]["designate_a12"], rq1[v]["designate_p"] = c.a12, c.p_value
    # every pair, not only DESIGNATE against the rest: Â12 of the first approach against the second (< 0.5: the
    # first's archive images score lower, i.e. it tests better), two-sided Mann-Whitney p over the pooled images
    pairs = {}
    for i, a in enumerate(variants):
        for b in variants[i + 1 :]:
            if pooled[a] and pooled[b]:
                c = compare(pooled[a], pooled[b], alternative="two-sided")
                pairs[f"{a} vs {b}"] = {"a12": c.a12, "p": c.p_value}
    out: dict[str, Any] = {
        "command": "python replications/replicate_designate.py " + " ".join(sys.argv[1:]),
        "subject": subject,
        "runs": max(len(r) for r in runs.values()),
        "generations": args.generations,
        "random_budget": args.random_budget,
        "thresholds": thresholds,
        "diversity_percentile": thresholds.get("diversity_percentile", args.diversity_percentile),
        "rq1": rq1,
        "rq1_pairs": pairs,
        "designate_vs_random_iou": rq1["DESIGNATE"]["median"] / rq1["Random"]["median"],
        # a run's archive images come from one search: the interval and the test take runs, not images, as units
        "designate_vs_random_iou_ci95": pooled_median_ratio_interval(
            [r["accuracy"] for r in runs["DESIGNATE"]], [r["accuracy"] for r in runs["Random"]]
        ),
        "designate_vs_random_run_p": compare(
            run_medians(runs["DESIGNATE"]), run_medians(runs["Random"]), alternative="two-sided"
        ).p_value,
        "designate_median_iou": rq1["DESIGNATE"]["median"],
        "archive_images_per_run": rq1["DESIGNATE"]["images_per_run_median"],
        "retraining_gain": float("nan"),
        "retraining_p": float("nan"),
        "paper": PAPER[subject],
        "load1": os.getloadavg()[0],
        "per_run": {v: [{k: x for k, x in r.items() if k != "poses"} for r in runs[v]] for v in variants},
    }
    if rq2 is not None:
        means = rq2["seed_means"]
        medians = {a: float(np.median(m)) for a, m in means.items()}
        tests = {
            a: compare(means[a], means["original_data"], alternative="two-sided")
            for a in ("DESIGNATE", "Random")
            if len(means[a]) > 1
        }
        pooled_tests = {
            a: compare(rq2["per_image"][a], rq2["per_image"]["original_data"], alternative="two-sided")
            for a in ("DESIGNATE", "Random")
        }
        out["rq2"] = {
            "plateau_log": rq2["plateau_log"],
            "plateau_test": stats(rq2["plateau_test"]),
            "images_per_set": rq2["images_per_set"],
            "command": rq2.get("command"),
            "seeds": len(means["DESIGNATE"]),
            "partial": bool(rq2.get("partial", False)),
            "epochs": rq2.get("retrain_epochs"),
            "max_epochs": rq2.get("retrain_max_epochs"),
            "patience": rq2.get("retrain_patience"),
            "min_delta": rq2.get("retrain_min_delta"),
            "fine_tuning": rq2.get("fine_tuning", []),
            "run_seeds": rq2.get("run_seeds"),
            "seconds": rq2["seconds"],
            "seed_means": means,
            "seed_mean_median": medians,
            "val_median": {a: float(np.median(v)) for a, v in rq2["val"].items()},
            "per_image": {a: stats(v) for a, v in rq2["per_image"].items()},
            "vs_original_data": {a: {"p": c.p_value, "a12": c.a12} for a, c in tests.items()},
            "vs_original_data_per_image": {a: {"p": c.p_value, "a12": c.a12} for a, c in pooled_tests.items()},
        }
        out["retraining_gain"] = medians["DESIGNATE"] - medians["original_data"]
        out["retraining_p"] = tests["DESIGNATE"].p_value if "DESIGNATE" in tests else float("nan")
    return out


def run_medians(runs: list[dict[str, Any]]) -> list[float]:
    """Each run's median archive accuracy (runs with an empty archive have none and are left out)."""
    return [float(np.median(r["accuracy"])) for r in runs if len(r["accuracy"])]


def _p(p: float) -> str:
    """A p-value as the tables print it; one that underflows a double reads '< 1e-300', not 0."""
    return "< 1e-300" if p == 0.0 else f"{p:.1e}"


def _fine_tuning(q: dict[str, Any]) -> str:
    """RQ2's fine-tuning protocol in words, with the epochs each seed ran and each arm's best epoch."""
    if q.get("patience") is None:
        return f"{q['epochs']} epoch(s)" if q.get("epochs") else "epochs not recorded"
    fits = q["fine_tuning"]
    ran = [f["epochs"] for f in fits]
    best = {a: [f["best_epoch"][a] for f in fits] for a in fits[0]["best_epoch"]} if fits else {}
    return (
        f"all three arms in lockstep until each has gone {q['patience']} epochs without a validation gain of "
        f"{q['min_delta']:g} (at most {q['max_epochs']}), each keeping its best-validation epoch: "
        f"{min(ran, default=0)}-{max(ran, default=0)} epochs a seed (median {np.median(ran) if ran else 0:g}, "
        f"{fits[0]['steps'] // max(fits[0]['epochs'], 1) if fits else 0} steps an epoch); best epoch median "
        + ", ".join(f"{a} {np.median(b):g}" for a, b in best.items())
    )


def render(subject: str, s: dict[str, Any]) -> str:
    metric = "IoU_car" if subject == "urban" else "mIoU"
    share = "car" if subject == "urban" else "sky"
    p = s["paper"]
    lines = [
        f"# DESIGNATE replication on {subject} ({s['runs']} runs)",
        "",
        f"Command: `{s['command']}` (generations {s['generations']}, random budget {s['random_budget']}, T_diversity "
        f"at percentile {s['diversity_percentile']:g} of the random images' pairwise distances).",
        "",
        "Calibration (random campaigns): "
        + ", ".join(f"{k} = {v:.4g}" for k, v in s["thresholds"].items() if isinstance(v, float))
        + ".",
        "",
        f"## RQ1: {metric} over the archives (lower = better testing), pooled over runs; diversity = mean pairwise",
        "",
        "| approach | runs | images/run (paper) | median (paper) | avg (paper) | Q1 | min | "
        f"feature div (paper median) | pixel div (paper median) | A12 DESIGNATE vs it (p) | median {share} share | "
        "evaluations/run | s/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v, r in s["rq1"].items():
        pv = p[v]
        a12 = f"{r['designate_a12']:.2f} ({_p(r['designate_p'])})" if "designate_a12" in r else "-"
        lines.append(
            f"| {v} | {r['runs']} | {r['images_per_run']:.0f} ({pv['images']}) | "
            f"{r['median']:.3f} ({pv['median']:.2f}) | "
            f"{r['avg']:.3f} ({pv['avg']:.2f}) | {r['q1']:.3f} | {r['min']:.3f} | {r['feature_div']:.2f} "
            f"({pv['feature_div']}) | {r['pixel_div']:.3f} ({pv['pixel_div']}) | {a12} | "
            f"{r['median_class_share']:.4f} | {r['evaluations_per_run']:.0f} | {r['seconds_per_run']:.0f} |"
        )
    if s.get("rq1_pairs"):
        lines += [
            "",
            f"Every pair (Â12 of the first against the second over the pooled archive {metric}s, < 0.5: the first's "
            "are lower; two-sided Mann-Whitney p):",
            "",
            "| pair | runs | A12 | p |",
            "|---|---|---|---|",
        ]
        for pair, c in s["rq1_pairs"].items():
            a, b = pair.split(" vs ")
            lines.append(f"| {pair} | {s['rq1'][a]['runs']} / {s['rq1'][b]['runs']} | {c['a12']:.2f} | {_p(c['p'])} |")
    if "rq2" in s:
        q = s["rq2"]
        lines += [
            "",
            f"## RQ2: per-image {metric} on the real test split after fine-tuning (higher = better)",
            "",
            f"Plateau model: the zoo DNN trained further on the real train split, validation {metric} per epoch "
            + ", ".join(f"{e['val']:.3f}" for e in q["plateau_log"])
            + f" (epoch 0 = the zoo model; the best epoch is kept), test median {q['plateau_test']['median']:.3f}, "
            f"mean {q['plateau_test']['avg']:.4f}. "
            f"Each fine-tuning: {q['images_per_set']} real train images plus {q['images_per_set']} of the approach's, "
            f"{_fine_tuning(q)}, {q['seeds']} seeds ({q['seconds'] / 60:.0f} min in all)"
            + (" **PARTIAL**" if q["partial"] else "")
            + f"; the added images are drawn from the runs of seeds {q['run_seeds']}."
            + (f" Made by: `{q['command']}`." if q.get("command") else ""),
            "",
            "| fine-tuned with | median over seeds of the mean test IoU | per-image median (paper) | per-image Q1 | "
            "A12 vs original data (p, seeds) | A12 vs original data (p, per image) |",
            "|---|---|---|---|---|---|",
        ]
        pr = p["retraining"]
        for arm in ("original_data", "DESIGNATE", "Random"):
            t = q["vs_original_data"].get(arm)
            ti = q["vs_original_data_per_image"].get(arm)
            lines.append(
                f"| {arm} | {q['seed_mean_median'][arm]:.4f} | {q['per_image'][arm]['median']:.3f} ({pr[arm]:.2f}) | "
                f"{q['per_image'][arm]['q1']:.3f} | "
                + (f"{t['a12']:.2f} ({t['p']:.2g})" if t else "-")
                + " | "
                + (f"{ti['a12']:.2f} ({ti['p']:.2g})" if ti else "-")
                + " |"
            )
    pr = p["retraining"]
    lines += [
        "",
        f"designate_vs_random_iou={s['designate_vs_random_iou']:.3f} "
        f"(paper {p['DESIGNATE']['median'] / p['Random']['median']:.3f})",
        "designate_vs_random_iou_ci95={:.3f}-{:.3f} (runs resampled)".format(*s["designate_vs_random_iou_ci95"]),
        f"designate_vs_random_run_p={s['designate_vs_random_run_p']:.3g} (two-sided Mann-Whitney over run medians)",
        f"designate_median_iou={s['designate_median_iou']:.3f} (paper {p['DESIGNATE']['median']:.2f})",
        f"archive_images_per_run={s['archive_images_per_run']:g} (paper {p['DESIGNATE']['images']})",
        f"retraining_gain={s['retraining_gain']:.4f} (paper {(pr['DESIGNATE'] - pr['original_data']):.2f})",
        f"retraining_p={s['retraining_p']:.3g}",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
