"""Surrogate features (generator_service/surrogates/features.py): the scene a configuration implies, trained,
stored and loaded; refusals; Parking's geometry (offline/surrogate_features.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from common.space import ParameterSpace
from generator_service.surrogates.encoding import Encoder
from generator_service.surrogates.features import SCENE_FEATURES, FeatureMap
from offline.surrogate_splits import held_out_indices
from offline.surrogate_training import TuningGrid, roc_auc, train_surrogate
from tests.generator_service.test_indago import synthetic_rows, write_log

SPACE = ParameterSpace.from_config(
    [
        {"name": "goal", "kind": "integer", "low": 1, "high": 4},
        {"name": "head", "low": 0.0, "high": 1.0},
        {"name": "parked", "repeat": 4, "kind": "integer", "low": 0, "high": 1},
        {"name": "x", "low": -10.0, "high": 10.0},
        {"name": "y", "low": -5.0, "high": 5.0},
    ]
)
SCENE: dict[str, Any] = {
    "kind": "scene",
    "goal": "goal",
    "x": "x",
    "y": "y",
    "heading": "head",
    "targets": [
        [-2.0, 10.0, math.pi / 2],
        [2.0, 10.0, math.pi / 2],
        [-2.0, -10.0, -math.pi / 2],
        [2.0, -10.0, -math.pi / 2],
    ],
    "neighbours": [
        [None, "parked_1", "parked_2"],
        ["parked_0", None, "parked_3"],
        [None, "parked_3", "parked_0"],
        ["parked_2", None, "parked_1"],
    ],
}
ONE_RUN = TuningGrid("one", (5.0,), (1,), 1)


def behind(values: dict[str, Any]) -> bool:
    """Fails when the goal lies behind the agent: what the encoding shows only through its heading's angle."""
    tx, ty, _ = SCENE["targets"][values["goal"] - 1]
    h = 2 * math.pi * values["head"]
    return (tx - values["x"]) * math.cos(h) + (ty - values["y"]) * math.sin(h) < 0


def test_scene_features_are_the_scene_the_configuration_implies() -> None:
    encoder = Encoder(SPACE)
    fmap = FeatureMap({**SCENE, "low": [0.0] * 15, "span": [1.0] * 15}, encoder)
    values = {"goal": 4, "head": 0.5, "parked_0": 0, "parked_1": 1, "parked_2": 1, "parked_3": 0, "x": 4.0, "y": 0.0}
    out = fmap.transform(encoder.encode(values))[0]
    assert fmap.n_out == encoder.n_features + 15 == len(fmap.names) == len(out)
    np.testing.assert_allclose(out[: encoder.n_features], encoder.encode(values))
    scene = dict(zip(SCENE_FEATURES, out[encoder.n_features :]))
    expected = {
        "cos_heading": -1.0, "sin_heading": 0.0, "goal_dx": -2.0, "goal_dy": -10.0, "goal_distance": math.hypot(2, 10),
        "goal_forward": 2.0, "goal_lateral": 10.0, "goal_bearing_cos": 2 / math.hypot(2, 10),
        "goal_bearing_sin": 10 / math.hypot(2, 10), "goal_rel_heading_cos": 0.0, "goal_rel_heading_sin": 1.0,
        "goal_left_occupied": 1.0, "goal_right_occupied": 0.0, "goal_opposite_occupied": 1.0, "goal_abs_dy": 10.0,
    }  # fmt: skip
    for name, value in expected.items():
        assert scene[name] == pytest.approx(value, abs=1e-6), name
    # fitted ranges scale every scene feature into [0, 1] on the rows they were fitted on
    rows = encoder.encode_many([SPACE.sample(np.random.default_rng(i)) for i in range(200)])
    scaled = fmap.fitted(rows).transform(rows)[:, encoder.n_features :]
    assert scaled.min() >= -1e-9 and scaled.max() <= 1 + 1e-9
    # config is the identity and adds nothing
    plain = FeatureMap(None, encoder)
    assert plain.n_out == encoder.n_features and plain.wrap("net") == "net"
    np.testing.assert_array_equal(plain.transform(rows), rows)


def test_a_scene_surrogate_trains_stores_and_loads_the_same_scores(tmp_path: Path) -> None:
    from generator_service.surrogates.artifact import load_surrogate

    rows = synthetic_rows(1500, seed=5, space=SPACE, failed=behind)
    log = write_log(tmp_path / "training_log.jsonl.gz", rows)
    path = train_surrogate(log, SPACE, subject="lot", grid=ONE_RUN, out_dir=tmp_path / "art", features=SCENE)
    meta = json.loads((path / "surrogate.json").read_text())
    assert meta["features"]["kind"] == "scene" and len(meta["features"]["low"]) == len(SCENE_FEATURES)
    assert meta["feature_names"][-len(SCENE_FEATURES) :] == list(SCENE_FEATURES)
    surrogate = load_surrogate(path, subject="lot")
    held = held_out_indices(len(rows))
    configs = [rows[i]["config"] for i in held]
    failed = np.array([rows[i]["verdict"] == "fail" for i in held])
    # the loaded network reads encoded configurations and scores the held-out rows as training measured them
    assert roc_auc(failed, surrogate.score_inputs(configs)) == pytest.approx(
        meta["metrics"]["held_out"]["auc"], abs=1e-3
    )
    assert meta["metrics"]["held_out"]["auc"] > 0.9
    # saliency is over the encoding's features and reaches the pose through the scene
    g = surrogate.saliency(surrogate.encoder.encode_many(configs[:20]))
    assert g.shape == (20, surrogate.encoder.n_features)
    for name in ("head", "x", "y"):
        block = next(b for b in surrogate.encoder.blocks if b.param.name == name)
        assert np.abs(g[:, block.start]).sum() > 0, name


def test_malformed_scene_specs_are_refused_naming_the_field(tmp_path: Path) -> None:
    encoder = Encoder(SPACE)
    with pytest.raises(ValueError, match="unknown surrogate features 'pose'"):
        FeatureMap({"kind": "pose"}, encoder)
    with pytest.raises(ValueError, match="goal must name a parameter of kind integer, got 'head'"):
        FeatureMap({**SCENE, "goal": "head"}, encoder)
    with pytest.raises(ValueError, match="targets must be 4 finite"):
        FeatureMap({**SCENE, "targets": SCENE["targets"][:3]}, encoder)
    with pytest.raises(ValueError, match="targets must be 4 finite"):
        FeatureMap({**SCENE, "targets": [[math.nan, 0.0, 0.0]] * 4}, encoder)
    with pytest.raises(ValueError, match="a neighbour must name a parameter of kind integer, got 'parked_9'"):
        FeatureMap({**SCENE, "neighbours": [["parked_9", None, None]] * 4}, encoder)
    with pytest.raises(ValueError, match="low and span must hold 15"):
        FeatureMap({**SCENE, "low": [0.0], "span": [1.0]}, encoder).transform(np.zeros((1, encoder.n_features)))
    # an artifact whose features do not fit is refused by load_surrogate, naming surrogate.json
    from generator_service.surrogates.artifact import load_surrogate

    rows = synthetic_rows(300, seed=2, space=SPACE, failed=behind)
    path = train_surrogate(
        write_log(tmp_path / "log.jsonl.gz", rows),
        SPACE,
        subject="lot",
        grid=ONE_RUN,
        out_dir=tmp_path / "a",
        features=SCENE,
    )
    meta = json.loads((path / "surrogate.json").read_text())
    meta["features"]["heading"] = "nope"
    (path / "surrogate.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"surrogate.json: scene features: heading must name a parameter of kind real"):
        load_surrogate(path)


def test_parking_scene_geometry_comes_from_the_environment() -> None:
    from offline.surrogate_features import feature_spec
    from simulator_service.subject import get_subject

    spec = feature_spec("scene", "parking")
    assert len(spec["targets"]) == 20 and len(spec["neighbours"]) == 20
    assert spec["targets"][0][:2] == [-18.0, 14.0] and spec["targets"][19][:2] == [18.0, -14.0]
    assert spec["neighbours"][0] == [None, "parked_1", "parked_10"]
    assert spec["neighbours"][14] == ["parked_13", "parked_15", "parked_4"]
    assert FeatureMap(spec, Encoder(get_subject("parking").space)).n_out == 24 + 15
    assert feature_spec("config", "cartpole") == {"kind": "config"}
    with pytest.raises(ValueError, match="scene geometry of subject 'cartpole'"):
        feature_spec("scene", "cartpole")
    with pytest.raises(ValueError, match="unknown surrogate features 'pose'"):
        feature_spec("pose", "parking")
