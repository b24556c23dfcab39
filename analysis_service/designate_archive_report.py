"""DESIGNATE's archive in the reports: RQ1's numbers over a campaign's archive and a grid of its images.

"Search-based DNN Testing and Retraining with GAN-enhanced Simulations" (DESIGNATE), Section IV, RQ1 (Tables II-IX):
an approach is judged by the images it keeps, through their accuracy (IoU_car on urban, mIoU on Mars: lower =
better testing), their number and their diversity. Here:

* the archive comes from the generator's ListArchive (its summary, then each member's stored execution). A campaign
  whose strategy keeps none (FAILED_PRECONDITION) but whose executions carry the segmentation oracles' descriptors
  (common/image_diversity.py SCALAR_DESCRIPTORS: an image subject, e.g. `random` on urban) gets the paper's Random row
  instead: its relevant images. Any other campaign gets no archive section;
* relevant images: executions judged relevant (F_accuracy < 2) whose delta_IoU is within the T_relevance in force
  (the archive's; for a campaign without an archive, the one a comparison takes from an archive campaign on the
  same subject, as the bench applies one calibrated filter to every approach);
* feature diversity: the mean pairwise Euclidean distance of the judged images' encoder features; pixel diversity:
  the mean pairwise share of differing pixel-digest cells (common/image_diversity.py pixel_digest). Each over every
  member when the oracle stored that vector in the descriptors (features by `iou_car`/`miou`, digests by the
  `*_pix` oracles), else over the re-rendered members only (the number used is reported). The bench's pixel
  diversity compares full images (exact RGB equality), so the two do not compare;
* the image grid: members re-rendered by ListArchive(include_images=true, max_images), only the first
  ``max_images`` of them (the generator renders those and streams the rest as stored, from one replay), the lowest
  F_accuracy first.

report.py and comparison.py call in through small hooks (archive sections, the RQ1 table), so this module owns
everything archive-specific.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from analysis_service.html_kit import escape, figure_png_base64, fmt_float, img_tag, new_figure, plot_label
from analysis_service.metrics import ExecutionRecord
from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.image_diversity import (
    IRRELEVANT,
    SCALAR_DESCRIPTORS,
    Distance,
    mean_pairwise_distance,
    pixel_digest,
)
from common.remote import local_error
from common.retry import Retry, status_code
from common.tensor import from_tensor

ARCHIVE_IMAGES = 24  # members re-rendered for the grid (and for a diversity the store cannot give)
ARCHIVE_RETRY_SECONDS = 60.0
ARCHIVE_TIMEOUT_SECONDS = 600.0
SCALARS = len(SCALAR_DESCRIPTORS)
DELTA_IOU, ON_ROAD, RELEVANT = (SCALAR_DESCRIPTORS.index(n) for n in ("delta_iou", "on_road", "relevant"))


@dataclass(frozen=True)
class Rendered:
    """One re-rendered member: the image the DNN was judged on, the ground truth and the DNN's label map."""

    index: int
    f_accuracy: float
    image: np.ndarray
    truth: np.ndarray
    prediction: np.ndarray
    features: np.ndarray


@dataclass(frozen=True)
class ArchiveView:
    """What a report shows of one campaign's archive (or, without one, of its relevant images)."""

    source: str  # "archive" or "relevant images"
    summary: dict[str, Any]  # ArchiveSummary's fields; empty for relevant images
    indices: list[int]  # the members' execution indices, archive order
    accuracy: list[float]  # their F_accuracy
    vectors: list[np.ndarray]  # their stored vectors (descriptors after the scalars)
    vector_kind: Distance  # what the stored vectors are
    relevant_images: int
    judged: int  # executions that ran (not invalid)
    rendered: list[Rendered] = field(default_factory=list)
    # diversity's results: a report and a comparison ask more than once, and a large archive costs a second
    _diversity: dict[str, tuple[float | None, int, str]] = field(default_factory=dict, compare=False, repr=False)

    def diversity(self, kind: Distance) -> tuple[float | None, int, str]:
        """(mean pairwise distance, members it is over, where their vectors came from)."""
        if kind not in self._diversity:
            if kind == self.vector_kind and self.vectors and all(v.size for v in self.vectors):
                found = mean_pairwise_distance(self.vectors, kind), len(self.vectors), "stored"
            elif not self.rendered:
                found = None, 0, "not available"
            else:
                vectors = [r.features if kind == "features" else pixel_digest(r.image) for r in self.rendered]
                found = mean_pairwise_distance(vectors, kind), len(vectors), "re-rendered"
            self._diversity[kind] = found
        return self._diversity[kind]


# --------------------------------------------------------------------------- reading


def is_segmentation(records: Sequence[ExecutionRecord]) -> bool:
    """Whether the executions carry the segmentation oracles' descriptors: the scalars, then a vector, with
    `relevant` and `on_road` flags and `relevant` set exactly when F_accuracy (the margin) is below 2."""
    judged = [r for r in records if r.verdict != "invalid"]
    return bool(judged) and all(
        len(r.descriptors) > SCALARS
        and r.descriptors[RELEVANT] in (0.0, 1.0)
        and r.descriptors[ON_ROAD] in (0.0, 1.0)
        and (r.descriptors[RELEVANT] == 1.0) == (r.margin < IRRELEVANT)
        for r in judged
    )


def _relevant(record: ExecutionRecord, t_relevance: float | None) -> bool:
    if record.verdict == "invalid" or not record.margin < IRRELEVANT:
        return False
    return t_relevance is None or len(record.descriptors) <= DELTA_IOU or record.descriptors[DELTA_IOU] <= t_relevance


def stored_kind(oracle: str) -> Distance:
    """What a segmentation oracle stores after the scalars: pixel digests for the `*_pix` oracles, else features."""
    return "pixels" if oracle.endswith("_pix") else "features"


def relevant_images(
    records: Sequence[ExecutionRecord], oracle: str, t_relevance: float | None = None
) -> ArchiveView | None:
    """The paper's Random row for a campaign without an archive: its relevant images; None when the campaign is
    not on an image subject."""
    if not is_segmentation(records):
        return None
    kept = sorted((r for r in records if _relevant(r, t_relevance)), key=lambda r: r.index)
    summary = {} if t_relevance is None else {"t_relevance": t_relevance}
    return ArchiveView(
        source="relevant images",
        summary=summary,
        indices=[r.index for r in kept],
        accuracy=[r.margin for r in kept],
        vectors=[np.asarray(r.descriptors[SCALARS:], dtype=np.float64) for r in kept],
        vector_kind=stored_kind(oracle),
        relevant_images=len(kept),
        judged=sum(r.verdict != "invalid" for r in records),
    )


def fetch_archive(
    generator: generator_pb2_grpc.GeneratorServiceStub,
    campaign_id: str,
    records: Sequence[ExecutionRecord],
    oracle: str,
    max_images: int = ARCHIVE_IMAGES,
) -> ArchiveView | None:
    """A campaign's archive from ListArchive, with its first ``max_images`` members re-rendered; None when its
    strategy keeps no archive (or the generator predates ListArchive)."""
    retry = Retry(budget_seconds=ARCHIVE_RETRY_SECONDS, idempotent=True)

    # one call: the generator replays the campaign once, renders the first max_images members and streams the
    # rest as stored (it used to take two calls, each replaying the whole campaign)
    request = generator_pb2.ListArchiveRequest(
        campaign_id=campaign_id, include_images=max_images > 0, max_images=max(max_images, 0)
    )
    try:
        head, *rest = retry.call(lambda: list(generator.ListArchive(request, timeout=ARCHIVE_TIMEOUT_SECONDS)))
        rendered_rows = [r for r in rest if r.member.HasField("image")]
    except grpc.RpcError as exc:
        if status_code(exc) in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED):
            return None
        raise local_error(exc, "generator service (ListArchive)") from None
    s = head.summary
    summary: dict[str, Any] = {
        "strategy": s.strategy,
        "variant": s.variant,
        "members": s.members,
        "distance": s.distance,
        "t_diversity": s.t_diversity,
        "t_diversity_source": s.t_diversity_source,
        "t_relevance": s.t_relevance if s.HasField("t_relevance") else None,
        "diversity_percentile": s.diversity_percentile if s.HasField("diversity_percentile") else None,
    }
    members = [r.member for r in rest]
    rendered = [
        Rendered(
            index=m.execution.index,
            f_accuracy=m.f_accuracy,
            image=from_tensor(m.image),
            truth=from_tensor(m.label_map),
            prediction=from_tensor(m.prediction),
            features=from_tensor(m.features).astype(np.float64),
        )
        for m in (r.member for r in rendered_rows)
    ]
    return ArchiveView(
        source="archive",
        summary=summary,
        indices=[m.execution.index for m in members],
        accuracy=[m.f_accuracy for m in members],
        vectors=[np.asarray(m.execution.descriptors[SCALARS:], dtype=np.float64) for m in members],
        vector_kind=stored_kind(oracle),
        relevant_images=sum(_relevant(r, summary["t_relevance"]) for r in records),
        judged=sum(r.verdict != "invalid" for r in records),
        rendered=rendered,
    )


def with_shared_relevance(
    views: Sequence[ArchiveView | None],
    infos: Sequence[Mapping[str, Any]],
    records: Sequence[Sequence[ExecutionRecord]],
) -> list[ArchiveView | None]:
    """Relevant-image views recomputed with the T_relevance of an archive campaign on the same subject (the first
    that has one), so that a comparison applies one relevance filter to every approach."""
    t_by_subject: dict[str, float] = {}
    for view, info in zip(views, infos):
        t = view.summary.get("t_relevance") if view is not None and view.source == "archive" else None
        if t is not None:
            t_by_subject.setdefault(str(info.get("subject")), float(t))
    out: list[ArchiveView | None] = []
    for view, info, rows in zip(views, infos, records):
        t = t_by_subject.get(str(info.get("subject")))
        if view is not None and view.source == "relevant images" and t is not None:
            view = relevant_images(rows, str(info.get("oracle") or ""), t)
        out.append(view)
    return out


# --------------------------------------------------------------------------- numbers


def accuracy_name(info: Mapping[str, Any]) -> str:
    """IoU_car (urban) or mIoU (Mars): the oracle's accuracy, which F_accuracy holds."""
    oracle, subject = str(info.get("oracle") or ""), str(info.get("subject") or "")
    return "mIoU" if oracle.startswith("miou") or "mars" in subject else "IoU_car"


def distribution(values: Sequence[float]) -> dict[str, Any]:
    """n, median, mean, Q1, Q3, min, max (the paper's Tables II/IV give median, average and the box plot)."""
    x = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if not len(x):
        return {"n": 0}
    q1, median, q3 = np.percentile(x, [25, 50, 75])
    return {
        "n": int(len(x)),
        "median": float(median),
        "mean": float(x.mean()),
        "q1": float(q1),
        "q3": float(q3),
        "min": float(x.min()),
        "max": float(x.max()),
    }


def archive_entry(view: ArchiveView, info: Mapping[str, Any]) -> dict[str, Any]:
    """The report's JSON for one campaign's archive."""
    out: dict[str, Any] = {
        "source": view.source,
        "accuracy_name": accuracy_name(info),
        "summary": view.summary,
        "members": len(view.indices),
        "relevant_images": view.relevant_images,
        "judged_executions": view.judged,
        "accuracy": distribution(view.accuracy),
        "rendered": len(view.rendered),
        "member_indices": view.indices,
        "member_accuracy": view.accuracy,
    }
    kinds: tuple[tuple[Distance, str], ...] = (("features", "feature_diversity"), ("pixels", "pixel_diversity"))
    for kind, key in kinds:
        value, n, source = view.diversity(kind)
        out[key] = {"value": value, "members": n, "source": source}
    return out


# --------------------------------------------------------------------------- plots


def plot_accuracy(values: Sequence[float], name: str, title: str) -> str | None:
    """Histogram of F_accuracy over the archive beside its box plot."""
    x = [v for v in values if math.isfinite(v)]
    if not x:
        return None
    fig = new_figure(8.0, 3.0)
    hist, box = fig.subplots(1, 2, width_ratios=[3, 1])
    hist.hist(x, bins=np.linspace(0.0, 1.0, 21), color="tab:blue", edgecolor="white")
    hist.set_xlabel(name)
    hist.set_ylabel("members")
    hist.set_title(plot_label(f"{name} over the archive: {title}"))
    hist.grid(alpha=0.3)
    box.boxplot(x, showmeans=True)
    box.set_xticks([1], [name])
    box.set_ylim(-0.02, 1.02)
    box.grid(alpha=0.3, axis="y")
    return figure_png_base64(fig)


# Class colours of the label maps (matplotlib's tab10, by class index) and the class names of the image subjects
# (their subject files' env_kwargs.classes: urban and airsim_urban, Mars); another subject's classes show as indices.
PALETTE = np.array(
    [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189], [140, 86, 75], [227, 119, 194],
     [127, 127, 127], [188, 189, 34], [23, 190, 207]],
    dtype=np.uint8,
)  # fmt: skip
CLASS_NAMES = {
    "IoU_car": ("road", "sidewalk", "building", "vegetation", "sky", "car"),
    "mIoU": ("soil", "sand", "bedrock", "big_rock", "sky"),
}
TILE_SCALE = 3  # a 64 x 128 image is drawn 192 x 384 (nearest neighbour): small cars stay visible
TILE_GAP = 4  # pixels between the three panels, before scaling


def member_tile(member: Rendered) -> str:
    """One member as a PNG (base64): judged image | ground truth | prediction, class colours from PALETTE."""
    from PIL import Image  # matplotlib's dependency; lazy like matplotlib

    def colour(labels: np.ndarray) -> np.ndarray:
        return PALETTE[np.asarray(labels, dtype=np.int64) % len(PALETTE)]

    image = np.asarray(member.image, dtype=np.uint8)
    gap = np.full((image.shape[0], TILE_GAP, 3), 255, dtype=np.uint8)
    row = np.concatenate([image, gap, colour(member.truth), gap, colour(member.prediction)], axis=1)
    row = row.repeat(TILE_SCALE, axis=0).repeat(TILE_SCALE, axis=1)
    buf = io.BytesIO()
    Image.fromarray(row).save(buf, format="PNG", optimize=True)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def class_legend(name: str, rendered: Sequence[Rendered]) -> str:
    """The class colours as swatches with the subject's class names (indices for an unknown subject)."""
    names = CLASS_NAMES.get(name, ())
    top = max([len(names) - 1, *(int(max(r.truth.max(), r.prediction.max())) for r in rendered)])
    items = "".join(
        f'<span class=swatch style="background:rgb({",".join(str(int(c)) for c in PALETTE[k % len(PALETTE)])})">'
        f"</span>{escape(names[k] if k < len(names) else f'class {k}')} "
        for k in range(top + 1)
    )
    return f"<p class=legend>{items}</p>"


def image_grid(rendered: Sequence[Rendered], name: str, title: str) -> str:
    """Members as (judged image | ground truth | prediction) tiles, the lowest F_accuracy first, two per row; a
    click (focus) shows a tile over the whole window, a click elsewhere puts it back. Empty without members."""
    if not rendered:
        return ""
    shown = sorted(rendered, key=lambda r: (r.f_accuracy, r.index))
    tiles = "".join(
        f"<figure>{_zoom_img(member_tile(m), f'archive member #{m.index}, {name} {m.f_accuracy:.3f}, {title}')}"
        f"<figcaption>#{m.index} · {escape(name)} {m.f_accuracy:.3f}</figcaption></figure>"
        for m in shown
    )
    return (
        class_legend(name, shown)
        + f'<div class=archive-grid role=list aria-label="{escape(f"archive image grid, {title}")}">{tiles}</div>'
    )


def _zoom_img(b64: str, alt: str) -> str:
    return f'<img class=zoom tabindex=0 alt="{escape(alt)}" src="data:image/png;base64,{b64}">'


# the grid's stylesheet, added to the report page's (click to enlarge without script: a focused tile is fixed
# over the page)
GRID_CSS = (
    ".archive-grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:.5rem 1rem}"
    ".archive-grid figure{margin:0}.archive-grid figcaption{font-size:.8rem;color:#444}"
    ".zoom{width:100%;image-rendering:pixelated;cursor:zoom-in;margin:.2rem 0}"
    ".zoom:focus{position:fixed;top:50%;left:50%;transform:translate(-50%,-50%);width:min(96vw,2000px);"
    "max-width:none;z-index:10;box-shadow:0 0 0 100vmax rgba(0,0,0,.75);cursor:zoom-out;outline:none}"
    ".legend .swatch{display:inline-block;width:.9rem;height:.9rem;margin:0 .25rem 0 .6rem;vertical-align:middle;"
    "border:1px solid #888}"
)


# --------------------------------------------------------------------------- HTML (single-campaign report)


def _diversity_text(d: Mapping[str, Any], total: int) -> str:
    if d["value"] is None:
        return "— (" + escape(d["source"]) + ")"
    over = "every member" if d["members"] == total else f"{d['members']} of {total} members"
    return f"{fmt_float(d['value'], 3)} <span class=meta>({escape(d['source'])}, {escape(over)})</span>"


def archive_section(entry: Mapping[str, Any], view: ArchiveView, title: str) -> str:
    """The campaign section's "Archive" part: summary, F_accuracy's distribution and plot, diversity, image grid."""
    name, s, acc = entry["accuracy_name"], entry["summary"], entry["accuracy"]
    heading = "Archive" if view.source == "archive" else "Relevant images (no archive: the paper's Random row)"
    rows: list[tuple[str, str]] = []
    if view.source == "archive":
        source = s.get("t_diversity_source") or ""
        if s.get("diversity_percentile") is not None:
            source += f", percentile {s['diversity_percentile']:g}"
        rows += [
            ("variant", escape(s.get("variant"))),
            ("distance", escape(s.get("distance"))),
            ("T_diversity", f"{fmt_float(s.get('t_diversity'), 4)} <span class=meta>({escape(source)})</span>"),
        ]
    t_rel = s.get("t_relevance")
    rows += [
        ("T_relevance", "— (the subject's own filter)" if t_rel is None else fmt_float(t_rel, 4)),
        ("members" if view.source == "archive" else "images", str(entry["members"])),
        ("relevant images", f"{entry['relevant_images']} of {entry['judged_executions']} judged executions"),
    ]
    if acc.get("n"):
        rows.append(
            (
                f"{name} (F_accuracy)",
                f"median {acc['median']:.3f} · mean {acc['mean']:.3f} · Q1 {acc['q1']:.3f} · min {acc['min']:.3f} "
                f"· max {acc['max']:.3f}",
            )
        )
    rows += [
        ("feature diversity", _diversity_text(entry["feature_diversity"], entry["members"])),
        ("pixel diversity (digests)", _diversity_text(entry["pixel_diversity"], entry["members"])),
    ]
    table = "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    parts = [f"<h3>{escape(heading)}</h3>", f"<table class=archive><tbody>{table}</tbody></table>"]
    png = plot_accuracy(view.accuracy, name, title)
    if png:
        parts.append(img_tag(png, f"{name} over the archive, {title}"))
    grid = image_grid(view.rendered, name, title)
    if grid:
        more = entry["members"] - len(view.rendered)
        parts.append(
            f"<p class=meta>{len(view.rendered)} members re-rendered by the generator (judged image | ground truth | "
            f"prediction), the lowest {escape(name)} first; click one to enlarge it"
            + (f"; {more} more not rendered (the analysis service's --archive-images)" if more > 0 else "")
            + ".</p>"
        )
        parts.append(f"<style>{GRID_CSS}</style>{grid}")
    return "".join(parts)


# --------------------------------------------------------------------------- comparison (RQ1)


def archive_outcome(view: ArchiveView | None) -> dict[str, Any]:
    """One campaign's archive numbers as comparison Outcome fields (None without an archive)."""
    if view is None:
        return {}
    acc = distribution(view.accuracy)
    return {
        "archive_images": len(view.indices),
        "archive_median_accuracy": acc.get("median"),
        "archive_mean_accuracy": acc.get("mean"),
        "feature_diversity": view.diversity("features")[0],
        "pixel_diversity": view.diversity("pixels")[0],
    }


def rq1(
    strategies: Sequence[str],
    views: Sequence[ArchiveView | None],
    baseline: str,
    alternative: str,
    test: Callable[[Sequence[float], Sequence[float]], dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """The paper's RQ1 table per strategy (`strategies[i]` ran the campaign of `views[i]`): archive images per
    campaign, the accuracy pooled over its campaigns' archives (median, mean, Q1, min), mean feature / pixel
    diversity, and `test` (the comparison's Mann–Whitney U and Â12) of its pooled accuracies against the baseline's.
    Empty when no compared campaign has an archive."""
    pooled: dict[str, list[float]] = {}
    per_group: dict[str, list[ArchiveView]] = {}
    for strategy, view in zip(strategies, views):
        if view is not None:
            pooled.setdefault(strategy, []).extend(view.accuracy)
            per_group.setdefault(strategy, []).append(view)
    rows = []
    for group, members in per_group.items():
        div = {kind: [v.diversity(kind)[0] for v in members] for kind in ("features", "pixels")}
        row: dict[str, Any] = {
            "strategy": group,
            "campaigns": len(members),
            "source": members[0].source,
            "images_per_campaign": float(np.mean([len(v.indices) for v in members])),
            "accuracy": distribution(pooled[group]),
            "feature_diversity": _mean_or_none(div["features"]),
            "pixel_diversity": _mean_or_none(div["pixels"]),
        }
        if group != baseline and baseline in pooled:
            row["versus_baseline"] = test(pooled[group], pooled[baseline])
        rows.append(row)
    return rows


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def rq1_html(rows: Sequence[Mapping[str, Any]], baseline: str, name: str) -> str:
    """The RQ1 table of a comparison page."""
    head = (
        "<tr><th>strategy</th><th>campaigns</th><th>images / campaign</th>"
        f"<th>median {escape(name)}</th><th>mean</th><th>Q1</th><th>min</th>"
        "<th>feature diversity</th><th>pixel diversity (digests)</th>"
        f"<th>vs {escape(baseline)}: p · Â12 (band)</th></tr>"
    )
    body = []
    for r in rows:
        a = r["accuracy"]
        t = r.get("versus_baseline")
        test = (
            "—"
            if t is None
            else f"{fmt_float(t['p_value'], 3)} · {t['a12']:.2f} ({escape(t['effect'])})"
            if "a12" in t
            else "—"
        )
        cells = [
            f"<td>{escape(r['strategy'])}{' (baseline)' if r['strategy'] == baseline else ''}"
            f"<br><span class=meta>{escape(r['source'])}</span></td>",
            f"<td class=num>{r['campaigns']}</td>",
            f"<td class=num>{r['images_per_campaign']:.1f}</td>",
            *(
                f"<td class=num>{fmt_float(a.get(k), 3) if a.get('n') else '—'}</td>"
                for k in ("median", "mean", "q1", "min")
            ),
            f"<td class=num>{fmt_float(r['feature_diversity'], 3)}</td>",
            f"<td class=num>{fmt_float(r['pixel_diversity'], 3)}</td>",
            f"<td class=num>{test}</td>",
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class=rq1><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"
