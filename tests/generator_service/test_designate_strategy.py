"""DESIGNATE's archive (Algorithm 1, Eq. 8) and its NSGA-II strategy (Algorithm 2) on a deterministic stand-in for
the services: invariants, phases, variants and determinism. The end-to-end campaign is in test_designate_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from common.image_diversity import IRRELEVANT, digest_distance, pixel_digest
from generator_service.strategies import Result, make_strategy
from generator_service.strategies.base import StrategyParamError, TestInput
from generator_service.strategies.designate import Designate
from generator_service.strategies.designate_diversity_archive import Archive
from simulator_service.subject import load_subjects

SPACE = load_subjects()["urban"].space


def evaluate(values: TestInput) -> Result:
    """A smooth accuracy over the pose, irrelevant above 0.7, invalid off the road lanes, a 3-value vector."""
    x, y, yaw = float(values["x"]), float(values["y"]), float(values["yaw"])
    accuracy = (np.sin(x * 0.3) + np.cos(yaw * 0.05) + 2) / 4
    invalid = abs(y) > 3.5 and not 36.5 < x < 43.5
    vector = (np.sin(x), np.cos(yaw / 30), y / 12)
    delta = 0.3 if x > 70 else 0.0  # a GAN-mismatch stand-in for t_relevance
    return Result(values, accuracy < 0.3, IRRELEVANT if accuracy > 0.7 else accuracy,
                  (accuracy, 0, 0, delta, 0.1, 1, 1, *vector), invalid)  # fmt: skip


def drive(seed: int, params: dict[str, object], batch: int = 12) -> tuple[Designate, list[list[TestInput]]]:
    strategy = make_strategy("designate", SPACE, seed, params)
    assert isinstance(strategy, Designate)
    asks = []
    while asked := strategy.ask(batch):
        asks.append(asked)
        strategy.tell([evaluate(v) for v in asked])
    return strategy, asks


# -- Algorithm 1 and Eq. 8 ---------------------------------------------------------------------------------
def test_archive_ignores_irrelevant_adds_far_and_replaces_only_strictly_lower() -> None:
    archive = Archive(threshold=1.0, kind="features")
    v = np.array([0.0, 0.0])
    assert archive.update(1, {}, IRRELEVANT, v) == "ignored" and len(archive) == 0
    assert archive.update(2, {}, 0.5, None) == "ignored"
    assert archive.update(3, {}, 0.5, v) == "added"
    assert archive.update(4, {}, 0.5, np.array([0.5, 0.0])) == "kept"  # within T, equal F_accuracy: no replacement
    assert archive.update(5, {}, 0.6, np.array([0.5, 0.0])) == "kept"
    assert archive.update(6, {}, 0.4, np.array([1.0, 0.0])) == "replaced"  # d = 1.0 <= T, strictly lower
    assert [m.key for m in archive.members] == [6]
    assert archive.update(7, {}, 0.9, np.array([2.5, 0.0])) == "added"  # d = 1.5 > T
    assert archive.update(6, {}, 0.4, np.array([1.0, 0.0])) == "member"
    assert all(m.f_accuracy < IRRELEVANT for m in archive.members)


def test_f_similarity_is_two_under_the_threshold_and_one_over_one_plus_d_otherwise() -> None:
    archive = Archive(threshold=1.0, kind="features")
    assert archive.f_similarity(1, np.zeros(2)) == 0.0  # empty archive: infinitely far
    archive.update(1, {}, 0.3, np.zeros(2))
    assert archive.f_similarity(2, np.array([0.6, 0.8])) == 1.0 / (1.0 + 1.0)  # d = 1.0, not below T
    assert archive.f_similarity(2, np.array([0.6, 0.7])) == IRRELEVANT  # d < T
    assert archive.f_similarity(2, np.array([3.0, 4.0])) == pytest.approx(1.0 / 6.0)
    assert archive.f_similarity(1, np.zeros(2)) == 0.0  # a member is not compared with itself
    assert archive.f_similarity(3, None) == IRRELEVANT  # never ran: no vector


def test_pixel_archive_counts_differing_digest_cells() -> None:
    a = np.zeros((8, 8, 3), dtype=np.uint8)
    b = a.copy()
    b[:4, :4] = 255  # one of four 4x4 cells
    da, db = pixel_digest(a), pixel_digest(b)
    assert da.shape == (4,) and digest_distance(da, db) == 0.25
    archive = Archive(threshold=0.2, kind="pixels")
    archive.update(1, {}, 0.5, da)
    assert archive.f_similarity(2, db) == pytest.approx(1 / 1.25)
    assert archive.update(2, {}, 0.1, db) == "added"


# -- Algorithm 2 ------------------------------------------------------------------------------------------
def test_seeding_then_generations_of_n_and_the_paper_budget() -> None:
    strategy, asks = drive(1, {})
    sizes = [len(a) for a in asks]
    assert sum(sizes) == 5 * 12 + 100 * 12  # 1,260 evaluations, as the paper's budget with seeding
    assert sizes[:5] == [12] * 5 and set(sizes[5:]) == {12}
    assert strategy.generation == 100 and strategy.finished and strategy.ask(12) == []
    assert len(strategy.population) == 12
    assert all(m.f_accuracy < IRRELEVANT for m in strategy.archive.members)
    values = [v for a in asks for v in a]
    assert all(not SPACE.violations(v) for v in values)


def test_an_ask_takes_up_to_a_phase_at_once() -> None:
    strategy = make_strategy("designate", SPACE, 2, {})
    seeds = strategy.ask(100)
    assert len(seeds) == 60
    strategy.tell([evaluate(v) for v in seeds])
    assert len(strategy.ask(100)) == 12


def test_same_seed_same_asks_and_archive_other_seed_other_asks() -> None:
    params = {"generations": 10}
    first, asks = drive(3, params)
    again, asks_again = drive(3, params, batch=5)  # the campaign's batch size does not change the search
    assert json.dumps(asks_again) == json.dumps(asks) or [v for a in asks_again for v in a] == [
        v for a in asks for v in a
    ]
    assert first.archive_inputs() == again.archive_inputs()
    _, other = drive(4, params)
    assert other != asks


def test_invalid_and_irrelevant_inputs_never_enter_the_archive_and_get_f_accuracy_two() -> None:
    strategy, asks = drive(5, {"generations": 5})
    told = [evaluate(v) for a in asks for v in a]
    assert any(r.invalid for r in told) and any(r.margin == IRRELEVANT for r in told)
    archived = {json.dumps(v, sort_keys=True) for v, _ in strategy.archive_inputs()}
    for r in told:
        if r.invalid or r.margin >= IRRELEVANT:
            assert json.dumps(r.values, sort_keys=True) not in archived


def test_single_keeps_every_relevant_image_and_t_relevance_tightens_the_filter() -> None:
    single, asks = drive(6, {"variant": "single", "generations": 5})

    def relevant(batches: list[list[TestInput]]) -> set[str]:
        told = [evaluate(v) for a in batches for v in a]
        return {json.dumps(r.values, sort_keys=True) for r in told if not r.invalid and r.margin < IRRELEVANT}

    archived = {json.dumps(v, sort_keys=True) for v, _ in single.archive_inputs()}
    # every relevant offspring is kept; of the seeds, only P0's are offered to the archive (Algorithm 2)
    assert relevant(asks[5:]) <= archived <= relevant(asks)
    tight, _ = drive(6, {"variant": "single", "generations": 5, "t_relevance": 0.1})
    assert all(float(v["x"]) <= 70 for v, _ in tight.archive_inputs())  # delta 0.3 there: F_accuracy = 2


def test_thresholds_come_from_a_calibration_file_and_bad_parameters_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"t_relevance": 0.05, "t_diversity_features": 0.7, "t_diversity_pixels": 0.3}))
    strategy = make_strategy("designate", SPACE, 1, {"thresholds": str(path)})
    assert isinstance(strategy, Designate)
    assert strategy.archive.threshold == 0.7 and strategy.t_relevance == 0.05
    pix = make_strategy("designate", SPACE, 1, {"thresholds": str(path), "variant": "pix", "t_relevance": 0.2})
    assert isinstance(pix, Designate) and pix.archive.threshold == 0.3 and pix.t_relevance == 0.2
    path.write_text("{}")
    with pytest.raises(ValueError, match="thresholds: .* is not a calibration file"):
        make_strategy("designate", SPACE, 1, {"thresholds": str(path)})
    with pytest.raises(StrategyParamError, match="variant must be one of designate, single, pix"):
        make_strategy("designate", SPACE, 1, {"variant": "nogan"})


def test_seeding_calibrates_t_diversity_as_the_median_pairwise_distance() -> None:
    strategy = make_strategy("designate", SPACE, 7, {"generations": 0})
    assert isinstance(strategy, Designate)
    seeds = strategy.ask(60)
    strategy.tell([evaluate(v) for v in seeds])
    vectors = np.array([evaluate(v).descriptors[7:] for v in seeds if not evaluate(v).invalid])
    i, j = np.triu_indices(len(vectors), 1)
    distances = np.linalg.norm(vectors[i] - vectors[j], axis=1)
    assert strategy.archive.threshold == pytest.approx(float(np.median(distances)))
    assert strategy.ask(12) == [] and strategy.finished
    lower = make_strategy("designate", SPACE, 7, {"generations": 0, "diversity_percentile": 20})
    assert isinstance(lower, Designate)
    lower.tell([evaluate(v) for v in lower.ask(60)])
    assert lower.archive.threshold == pytest.approx(float(np.percentile(distances, 20)))
    assert lower.archive.threshold < strategy.archive.threshold


# -- calibration from a stored random campaign (cli/designate_calibration.py) -------------------------------------
def test_calibration_takes_a_percentile_of_delta_and_the_median_pairwise_distance() -> None:
    from cli.designate_calibration import calibrate_rows
    from common.generated.gauntlet.v1 import generator_pb2, oracle_pb2

    def row(delta: float, vector: list[float], verdict: int = oracle_pb2.VERDICT_KIND_PASS) -> generator_pb2.Execution:
        return generator_pb2.Execution(verdict=verdict, margin=0.5, descriptors=[0.5, 0, 0, delta, 0.1, 1, 1, *vector])

    rows = [row(0.0, [0.0, 0.0]), row(0.1, [3.0, 4.0]), row(0.2, [6.0, 8.0]),
            row(9.0, [99.0, 0.0], oracle_pb2.VERDICT_KIND_INVALID)]  # fmt: skip
    found = calibrate_rows(rows, 50.0, "iou_car")
    assert found["t_relevance"] == pytest.approx(0.1) and found["calibration_images"] == 3
    assert found["t_diversity_features"] == pytest.approx(5.0)  # distances 5, 10, 5
    assert found["diversity_percentile"] == 50.0
    assert calibrate_rows(rows, 50.0, "iou_car", diversity_percentile=100.0)["t_diversity_features"] == 10.0
    pix = calibrate_rows([row(0.0, [1, 2]), row(0.0, [1, 3]), row(0.0, [4, 3])], 50.0, "iou_car_pix")
    assert pix["t_diversity_pixels"] == pytest.approx(0.5)  # shares 0.5, 1.0, 0.5
    with pytest.raises(ValueError, match="at least 2 executed images"):
        calibrate_rows(rows[:1], 50.0, "iou_car")
