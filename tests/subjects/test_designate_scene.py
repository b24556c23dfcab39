"""DESIGNATE's image subjects: the procedural renderer, its backend's signals, the road-lane rule and the oracles."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oracle_service.oracles import Episode, get_oracle
from simulator_service.backends import make_env
from simulator_service.subject import load_subjects
from subjects.urban.scene import URBAN_CLASSES, Camera, build_scene, render

CAR = URBAN_CLASSES.index("car")


@pytest.fixture(scope="module")
def subjects() -> dict:
    return load_subjects()


def test_same_pose_same_images_in_a_fresh_env(subjects: dict) -> None:
    pose = {"x": 12.5, "y": -1.0, "yaw": 20.0}
    a, b = make_env(subjects["urban"]), make_env(subjects["urban"])
    a.reset(seed=0, options={"values": pose})
    b.reset(seed=99, options={"values": {"x": 60.0, "y": 2.0, "yaw": -90.0}})  # another pose first
    b.reset(seed=1, options={"values": pose})
    assert np.array_equal(a.signal("image"), b.signal("image"))
    assert np.array_equal(a.signal("label_map"), b.signal("label_map"))
    assert a.signal("image").shape == (64, 128, 3) and a.signal("image").dtype == np.uint8
    assert a.signal("label_map").dtype == np.uint8 and int(a.signal("label_map").max()) < len(URBAN_CLASSES)


def test_approaching_a_car_grows_it_into_a_close_up() -> None:
    scene, camera = build_scene("urban", 0), Camera()
    car = next(b for b in scene.boxes if b.label == CAR and abs(b.lo[1] + b.hi[1]) / 2 < 3.0 and b.lo[0] > 5)
    cx, cy = (car.lo[0] + car.hi[0]) / 2, (car.lo[1] + car.hi[1]) / 2
    shares = []
    for gap in (30.0, 10.0, 1.0):  # behind the car, looking at its rear along +x
        shot = render(scene, camera, car.lo[0] - gap, cy, 0.0)
        shares.append(float(np.mean(shot.labels == CAR)))
    assert shares[0] < shares[1] < shares[2]
    assert 0.0 < shares[0] < 0.4 and shares[2] >= 0.4  # a close-up: irrelevant by the 0.4 rule
    assert cx > car.lo[0]


def test_road_lane_rule_refuses_off_road_poses(subjects: dict) -> None:
    urban = subjects["urban"]
    assert urban.violations({"x": 10.0, "y": 2.0, "yaw": 0.0}) == []
    assert urban.violations({"x": 40.0, "y": 10.0, "yaw": 0.0}) == []  # the cross street
    (problem,) = urban.violations({"x": 10.0, "y": 8.0, "yaw": 0.0})
    assert "off the road" in problem and "x in [0, 80]" in problem


def test_step_stores_both_predictions_and_ends_the_episode(subjects: dict) -> None:
    env = make_env(subjects["urban"])
    env.reset(seed=0, options={"values": {"x": 12.5, "y": -1.0, "yaw": 20.0}})
    truth = env.signal("label_map")
    _, _, terminated, _, _ = env.step(np.stack([truth, np.zeros_like(truth)]))
    assert terminated
    assert np.array_equal(env.signal("prediction_simulated"), truth)
    assert not env.signal("prediction_realistic").any()
    env.reset(seed=0, options={"values": {"x": 12.5, "y": -1.0, "yaw": 20.0}})
    env.step(truth)  # one view: no translator
    assert env.signal("prediction_realistic").shape == (0,)


def test_a_subject_whose_class_table_differs_from_the_renderer_is_refused(subjects: dict) -> None:
    kwargs = {**subjects["urban"].env_kwargs, "classes": ["road", "car"]}
    with pytest.raises(ValueError, match="differ from the urban renderer's class table"):
        make_env(dataclasses.replace(subjects["urban"], env_kwargs=kwargs))


def _episode(
    truth: np.ndarray, simulated: np.ndarray, realistic: np.ndarray, on_road: int = 1, min_share: float = 0.0
) -> Episode:
    signals = {
        "label_map": truth,
        "on_road": np.uint8(on_road),
        "prediction_simulated": simulated,
        "prediction_realistic": realistic,
        "features": np.array([1.0, 2.0], dtype=np.float32),
        "t_relevance": np.float64(0.1),
        "iou_threshold": np.float64(0.5),
        "min_class_share": np.float64(min_share),
    }
    return Episode(1, 0.0, True, False, signals)


def test_iou_car_oracle_margin_is_f_accuracy() -> None:
    oracle = get_oracle("iou_car")
    truth = np.zeros((10, 10), dtype=np.uint8)
    truth[:2, :5] = CAR  # 10 % cars
    half = np.zeros_like(truth)
    half[:2, :2] = CAR  # IoU 4/10
    fail = oracle.evaluate(_episode(truth, half, half))
    assert fail.failed and fail.margin == pytest.approx(0.4)
    assert fail.descriptors[:7] == pytest.approx((0.4, 0.4, 0.4, 0.0, 0.1, 1.0, 1.0))
    assert fail.descriptors[7:] == (1.0, 2.0)  # the feature vector follows
    passed = oracle.evaluate(_episode(truth, truth, truth))
    assert not passed.failed and passed.margin == 1.0
    # the DNN does much better on the simulator image than on the realistic one: the GAN is suspected
    suspect = oracle.evaluate(_episode(truth, truth, half))
    assert not suspect.failed and suspect.margin == 2.0 and suspect.reason.startswith("irrelevant: delta_IoU")
    off_road = oracle.evaluate(_episode(truth, half, half, on_road=0))
    assert off_road.margin == 2.0 and "off the road" in off_road.reason
    close_up = truth.copy()
    close_up[:5] = CAR
    assert oracle.evaluate(_episode(close_up, half, half)).margin == 2.0
    # without a translator (NoGAN) the simulator image is judged and there is no delta filter
    no_gan = oracle.evaluate(_episode(truth, half, np.zeros((0,), dtype=np.uint8)))
    assert no_gan.failed and no_gan.margin == pytest.approx(0.4) and "simulator image" in no_gan.reason
    # the subject's minimum car share (our deviation): a 10 % car is too small under 0.11, not under 0.1
    small = oracle.evaluate(_episode(truth, half, half, min_share=0.11))
    assert not small.failed and small.margin == 2.0 and "below the minimum 0.11" in small.reason
    assert oracle.evaluate(_episode(truth, half, half, min_share=0.1)).margin == pytest.approx(0.4)


def test_miou_oracle_uses_the_sky_share_rule() -> None:
    oracle = get_oracle("miou")
    truth = np.zeros((10, 10), dtype=np.uint8)
    truth[:3] = 4  # 30 % sky
    assert oracle.evaluate(_episode(truth, truth, truth)).margin == 1.0
    all_sky = np.full_like(truth, 4)
    judged = oracle.evaluate(_episode(all_sky, all_sky, all_sky))
    assert judged.margin == 2.0 and "sky share" in judged.reason
