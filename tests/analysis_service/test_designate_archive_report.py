"""DESIGNATE's archive in the reports, on hand-made executions: which campaigns get a section, the relevance filter,
where each diversity comes from, the RQ1 table of a comparison and the image grid (the services' path:
tests/system/test_designate_e2e.py)."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from analysis_service.comparison import build_comparison, render_comparison_html
from analysis_service.designate_archive_report import (
    ArchiveView,
    Rendered,
    archive_entry,
    image_grid,
    is_segmentation,
    member_tile,
    relevant_images,
    with_shared_relevance,
)
from analysis_service.metrics import ExecutionRecord
from analysis_service.report import build_report, render_html
from common.image_diversity import pixel_digest

RNG = np.random.default_rng(0)


def image_record(index: int, accuracy: float, delta: float = 0.0, invalid: bool = False) -> ExecutionRecord:
    """An execution as the iou_car oracle stores it: 7 scalars, then a 4-value feature vector."""
    relevant = accuracy < 2.0
    scalars = (accuracy if relevant else 0.3, 0.5, 0.5, delta, 0.1, 1.0, 1.0 if relevant else 0.0)
    features = tuple(float(v) for v in RNG.normal(size=4))
    verdict = "invalid" if invalid else "fail" if accuracy < 0.5 else "pass"
    return ExecutionRecord(index, {"x": float(index)}, verdict, accuracy, 1, 0.0, 0.1 * index, scalars + features)


def rl_record(index: int, margin: float) -> ExecutionRecord:
    return ExecutionRecord(index, {"x": 0.1 * index}, "pass", margin, 10, 1.0, 0.1, (0.0, 1.0))


def test_only_executions_with_the_segmentation_descriptors_count_as_images() -> None:
    images = [image_record(1, 0.4), image_record(2, 2.0), image_record(3, 2.0, invalid=True)]
    assert is_segmentation(images)
    assert not is_segmentation([rl_record(i, 0.5) for i in range(1, 5)])
    assert not is_segmentation([])
    # a "relevant" flag that disagrees with F_accuracy is not the oracle's layout
    broken = image_record(4, 0.3)
    broken = ExecutionRecord(4, {}, "pass", 2.0, 1, 0.0, 0.0, broken.descriptors)
    assert not is_segmentation([broken])
    assert relevant_images([rl_record(1, 0.5)], "") is None


def test_relevant_images_apply_t_relevance_and_take_the_stored_features() -> None:
    records = [image_record(1, 0.2, delta=0.05), image_record(2, 0.6, delta=0.3), image_record(3, 2.0)]
    records.append(image_record(4, 0.1, invalid=True))
    view = relevant_images(records, "iou_car")
    assert view is not None and view.indices == [1, 2] and view.relevant_images == 2 and view.judged == 3
    tight = relevant_images(records, "iou_car", t_relevance=0.1)
    assert tight is not None and tight.indices == [1] and tight.summary == {"t_relevance": 0.1}
    value, n, source = view.diversity("features")
    a, b = (np.asarray(records[i].descriptors[7:]) for i in (0, 1))
    assert (n, source) == (2, "stored") and value == pytest.approx(float(np.linalg.norm(a - b)))
    assert view.diversity("pixels") == (None, 0, "not available")  # no digests stored, nothing to re-render
    # a *_pix oracle stores digests: then the pixel diversity is the stored one
    digests = relevant_images(records, "iou_car_pix")
    assert digests is not None and digests.diversity("pixels")[2] == "stored"


def test_a_comparison_applies_the_archive_t_relevance_to_a_campaign_without_one() -> None:
    records = [image_record(1, 0.2, delta=0.05), image_record(2, 0.6, delta=0.3)]
    archive = ArchiveView("archive", {"t_relevance": 0.1}, [1], [0.2], [np.zeros(4)], "features", 1, 2)
    loose = relevant_images(records, "")
    infos = [{"subject": "urban"}, {"subject": "urban"}, {"subject": "mars"}]
    out = with_shared_relevance([archive, loose, loose], infos, [records, records, records])
    assert out[0] is archive and out[1] is not None and out[1].indices == [1]
    assert out[2] is loose  # another subject: its own filter


def rendered(index: int, accuracy: float) -> Rendered:
    image = RNG.integers(0, 256, size=(8, 16, 3), dtype=np.uint8)
    truth = RNG.integers(0, 6, size=(8, 16), dtype=np.uint8)
    return Rendered(index, accuracy, image, truth, truth[::-1].copy(), RNG.normal(size=4))


def test_report_entry_takes_pixel_diversity_from_the_rendered_members() -> None:
    members = [rendered(i, a) for i, a in ((3, 0.5), (7, 0.1), (9, 0.3))]
    view = ArchiveView(
        "archive",
        {"variant": "designate", "t_relevance": None, "t_diversity": 5.0, "t_diversity_source": "parameter"},
        [3, 7, 9, 12],
        [0.5, 0.1, 0.3, 0.0],
        [RNG.normal(size=4) for _ in range(4)],
        "features",
        6,
        10,
        members,
    )
    entry = archive_entry(view, {"subject": "urban", "oracle": ""})
    assert entry["members"] == 4 and entry["rendered"] == 3 and entry["accuracy_name"] == "IoU_car"
    assert entry["accuracy"]["median"] == pytest.approx(0.2) and entry["accuracy"]["min"] == 0.0
    assert entry["feature_diversity"]["members"] == 4 and entry["feature_diversity"]["source"] == "stored"
    digests = [pixel_digest(m.image) for m in members]
    expected = np.mean([np.mean(digests[i] != digests[j]) for i, j in ((0, 1), (0, 2), (1, 2))])
    assert entry["pixel_diversity"] == {"value": pytest.approx(expected), "members": 3, "source": "re-rendered"}
    info = {"campaign_id": "c1", "name": "arch", "subject": "urban", "strategy": "designate"}
    records = [image_record(i, a) for i, a in ((3, 0.5), (7, 0.1), (9, 0.3), (12, 0.0))]
    report = build_report([(info, records)], {"c1": view})
    assert report["campaigns"][0]["archive"]["members"] == 4
    page = render_html(report, {"c1": records}, {"c1": view})
    assert "<h3>Archive</h3>" in page and 'aria-label="archive image grid, arch"' in page
    assert "click one to enlarge it" in page and "class=zoom tabindex=0" in page
    assert "3 members re-rendered" in page and "1 more not rendered" in page
    plain = render_html(build_report([(info, records)]), {"c1": records})
    assert "<h3>Archive" not in plain


def test_image_grid_shows_large_tiles_lowest_accuracy_first_with_a_class_legend() -> None:
    from io import BytesIO

    from PIL import Image

    member = rendered(1, 0.9)
    tile = Image.open(BytesIO(base64.b64decode(member_tile(member))))
    height, width = member.image.shape[:2]
    assert tile.size == (3 * (3 * width + 2 * 4), 3 * height)  # three panels, each drawn 3x
    grid = image_grid([member, rendered(2, 0.1)], "IoU_car", "t")
    assert grid.index("#2 · IoU_car 0.100") < grid.index("#1 · IoU_car 0.900")
    assert grid.count("<img class=zoom") == 2 and 'aria-label="archive image grid, t"' in grid
    legend = grid[: grid.index("<div")]
    assert all(c in legend for c in ("road", "sidewalk", "building", "vegetation", "sky", "car"))
    assert image_grid([], "IoU_car", "t") == ""


def test_comparison_has_the_rq1_table_with_a12_of_pooled_accuracies() -> None:
    def campaign(strategy: str, seed: int, accuracies: list[float]) -> tuple[dict, list[ExecutionRecord]]:
        info = {"campaign_id": f"{strategy}-{seed}", "strategy": strategy, "seed": seed, "subject": "urban"}
        return info, [image_record(i, a) for i, a in enumerate(accuracies, 1)]

    runs = [
        campaign("designate", 0, [0.0, 0.1, 0.2]),
        campaign("designate", 1, [0.05, 0.3]),
        campaign("random", 0, [0.6, 0.7, 0.1, 2.0]),
        campaign("random", 1, [0.8, 0.9]),
    ]
    views = [relevant_images(records, "") for _, records in runs]
    c = build_comparison(runs, archives=views)
    rows = {r["strategy"]: r for r in c["rq1"]}
    assert rows["designate"]["images_per_campaign"] == 2.5 and rows["random"]["images_per_campaign"] == 2.5
    assert rows["designate"]["accuracy"]["n"] == 5 and rows["designate"]["accuracy"]["median"] == pytest.approx(0.1)
    a, b = [0.0, 0.1, 0.2, 0.05, 0.3], [0.6, 0.7, 0.1, 0.8, 0.9]
    a12 = float(np.mean([(x > y) + 0.5 * (x == y) for x in a for y in b]))
    assert rows["designate"]["versus_baseline"]["a12"] == pytest.approx(a12) and a12 < 0.2
    # lower accuracy is better testing: the row's side wins
    assert rows["designate"]["versus_baseline"]["favours"] == "row"
    assert c["rq1_accuracy"] == "IoU_car"
    designate = next(s for s in c["strategies"] if s["strategy"] == "designate")
    assert designate["summary"]["archive_images"]["median"] == 2.5
    assert "archive_median_accuracy" in designate["versus_baseline"]
    page = render_comparison_html(c)
    assert "Archives (DESIGNATE" in page and "median IoU_car" in page
    # without archives the comparison is what it was
    plain = build_comparison(runs)
    assert "rq1" not in plain and "archive_images" not in [m["key"] for m in plain["metrics"]]
