"""How well the segmentation DNN can see an object as a function of its size, on random images (DESIGNATE subjects).

"Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section III, Eqs. 4-7: an urban image is
relevant iff 0 < car share < 0.4. At our 64 x 128 render a car of a few dozen pixels cannot be segmented at all, so
the search converges on such images (IoU_car = 0) and every variant floors. This script measures where that floor
ends: uniform valid poses (the random strategy's distribution), rendered, translated and segmented in process exactly
as the services do (replicate_designate.Renderer), binned by the ground truth's car pixels (urban) or sky pixels
(Mars), with per bin the median IoU on the realistic image and the share of images with IoU = 0.

The chosen minimum (urban) is the smallest bin edge from which on no bin has more than ``--max-zero-share`` of its
images at IoU = 0 (default 0: not one): below it the DNN misses cars because the render is too coarse, not because
the input is hard. The urban subject's ``env_kwargs.min_class_share`` is set from it (a documented deviation from
the paper). Mars is judged by mIoU over every class, which does not drop to 0 with a small sky, so no minimum is
chosen there (``min_pixels`` 0: the paper's rule); its curve is measured all the same.

Writes results/designate_object_size_<subject>.{json,png}; prints ``min_pixels=<n>`` and ``min_share=<s>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np
import torch

from replications.replicate_designate import Renderer
from subjects.urban.metrics import class_iou, mean_iou
from subjects.urban.scene import CLASSES
from translator_service.api import translate

# pixel-count bin edges for a 64 x 128 image (8,192 pixels): up to the paper's upper share, 0.4 of the image for
# the urban car (3,277 pixels), 0.7 for the Mars sky (5,735)
EDGES = {
    "urban": (1, 25, 50, 100, 200, 300, 400, 600, 800, 1200, 1600, 3277),
    "mars": (1, 25, 50, 100, 200, 300, 400, 600, 800, 1200, 1600, 2400, 3277, 4500, 5735),
}
TARGET = {"urban": "car", "mars": "sky"}


def measure(subject: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """Object pixels, IoU on the realistic and on the simulator image, for ``n`` random valid poses."""
    renderer = Renderer(subject)
    rng = np.random.default_rng(seed)
    scene: Any = renderer.env.unwrapped  # the urban pack's SceneEnv
    poses = [dict(scene.subject.sample(rng)) for _ in range(n)]
    classes = CLASSES[subject]
    target = classes.index(TARGET[subject])
    pixels, realistic, simulated = [], [], []
    for start in range(0, n, 64):  # in chunks: the translator and the DNN run on batches
        chunk = poses[start : start + 64]
        sims, labels = [], []
        for pose in chunk:
            sims.append(renderer.env.reset(seed=0, options={"values": pose})[0])
            labels.append(scene.translator_input())
        lab = np.stack(labels)
        pred_real = renderer.dnn.segment(translate(renderer.entry, renderer.generator, lab))
        pred_sim = renderer.dnn.segment(np.stack(sims))
        for t, pr, ps in zip(lab, pred_real, pred_sim):
            pixels.append(int(np.count_nonzero(t == target)))
            if subject == "urban":
                realistic.append(class_iou(t, pr, target))
                simulated.append(class_iou(t, ps, target))
            else:
                realistic.append(mean_iou(t, pr, len(classes)))
                simulated.append(mean_iou(t, ps, len(classes)))
    return {
        "pixels": np.array(pixels),
        "iou_realistic": np.nan_to_num(np.array(realistic, dtype=float)),
        "iou_simulated": np.nan_to_num(np.array(simulated, dtype=float)),
    }


def bins(data: dict[str, np.ndarray], edges: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (data["pixels"] >= lo) & (data["pixels"] < hi)
        real, sim = data["iou_realistic"][inside], data["iou_simulated"][inside]
        rows.append(
            {
                "pixels_from": lo,
                "pixels_to": hi,
                "images": int(inside.sum()),
                "median_iou": float(np.median(real)) if len(real) else None,
                "mean_iou": float(real.mean()) if len(real) else None,
                "zero_iou_share": float(np.mean(real == 0.0)) if len(real) else None,
                "median_iou_simulated": float(np.median(sim)) if len(sim) else None,
            }
        )
    return rows


def chosen_minimum(rows: list[dict[str, Any]], max_zero_share: float) -> int:
    """The smallest lower edge from which every non-empty bin keeps IoU = 0 at or below ``max_zero_share``."""
    chosen = rows[-1]["pixels_to"]
    for row in reversed(rows):
        if row["images"] and row["zero_iou_share"] > max_zero_share:
            break
        chosen = row["pixels_from"]
    return int(chosen)


def plot(path: Path, subject: str, rows: list[dict[str, Any]], minimum: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kept = [r for r in rows if r["images"]]
    labels = [f"{r['pixels_from']}-{r['pixels_to'] - 1}" for r in kept]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    x = np.arange(len(kept))
    ax.plot(x, [r["median_iou"] for r in kept], "o-", label="median IoU (realistic image)")
    ax.plot(x, [r["median_iou_simulated"] for r in kept], "s--", label="median IoU (simulator image)")
    ax.bar(x, [r["zero_iou_share"] for r in kept], alpha=0.3, color="red", label="share with IoU = 0")
    if minimum > 0:
        first = next((i for i, r in enumerate(kept) if r["pixels_from"] >= minimum), len(kept))
        ax.axvline(first - 0.5, color="k", lw=1, ls=":", label=f"chosen minimum: {minimum} px")
    ax.set_xticks(x, labels, rotation=40, ha="right", fontsize=8)
    ax.set_xlabel(f"{TARGET[subject]} pixels in the ground truth (of 8,192)")
    ax.set_ylabel("IoU_car" if subject == "urban" else "mIoU")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="center right")
    ax.set_title(
        f"{subject}: the DNN's accuracy by {TARGET[subject]} size, {sum(r['images'] for r in kept)} random images"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def table(result: dict[str, Any]) -> str:
    """The curve as a markdown table (what the docs quote)."""
    metric = "IoU_car" if result["subject"] == "urban" else "mIoU"
    lines = [
        f"# {metric} by {result['object']} size on random {result['subject']} images",
        "",
        f"Command: `{result['command']}` ({result['images_with_object']} of {result['images']} random valid poses "
        f"show a {result['object']}; realistic image = the translator's, as the DNN is judged).",
        "",
        f"| {result['object']} pixels | images | median {metric} | mean {metric} | share with {metric} = 0 | "
        f"median {metric} on the simulator image |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["bins"]:
        if r["images"]:
            lines.append(
                f"| {r['pixels_from']}-{r['pixels_to'] - 1} | {r['images']} | {r['median_iou']:.3f} | "
                f"{r['mean_iou']:.3f} | {r['zero_iou_share']:.3f} | {r['median_iou_simulated']:.3f} |"
            )
    lines += [
        "",
        f"largest {result['object']} with {metric} = 0: {result['zero_iou_max_pixels']} pixels",
        f"min_pixels={result['min_pixels']}",
        f"min_share={result['min_share']:.5f}",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subject", default="urban", choices=sorted(TARGET))
    parser.add_argument("--images", type=int, default=3000, help="random valid poses to render")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-zero-share", type=float, default=0.0)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    if not 1 <= args.images <= 100_000:
        parser.error("--images must be in [1, 100000]")
    if not 0.0 <= args.max_zero_share <= 1.0:
        parser.error("--max-zero-share must be in [0, 1]")
    torch.set_num_threads(1)
    started = time.time()
    data = measure(args.subject, args.images, args.seed)
    rows = bins(data, EDGES[args.subject])
    minimum = chosen_minimum(rows, args.max_zero_share) if args.subject == "urban" else 0
    size = 64 * 128
    with_object = data["pixels"] > 0
    result = {
        "command": "python replications/designate_object_size.py " + " ".join(sys.argv[1:]),
        "subject": args.subject,
        "object": TARGET[args.subject],
        "images": args.images,
        "images_with_object": int(with_object.sum()),
        "seed": args.seed,
        "max_zero_share": args.max_zero_share,
        "bins": rows,
        "min_pixels": minimum,
        "min_share": minimum / size,
        "zero_iou_max_pixels": int(data["pixels"][with_object & (data["iou_realistic"] == 0)].max(initial=0)),
        "seconds": round(time.time() - started, 1),
        "load1": os.getloadavg()[0],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"designate_object_size_{args.subject}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    stem.with_suffix(".md").write_text(table(result))
    plot(stem.with_suffix(".png"), args.subject, rows, minimum)
    for r in rows:
        if r["images"]:
            print(
                f"{r['pixels_from']:>5}-{r['pixels_to'] - 1:<5} n={r['images']:>4} median={r['median_iou']:.3f} "
                f"zero={r['zero_iou_share']:.2f} sim_median={r['median_iou_simulated']:.3f}"
            )
    print(f"min_pixels={minimum}")
    print(f"min_share={minimum / size:.5f}")


if __name__ == "__main__":
    main()
