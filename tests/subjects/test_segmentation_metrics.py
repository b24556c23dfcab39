"""DESIGNATE's metrics and relevance rules (subjects/urban/metrics.py) and distances (common/image_diversity.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common.image_diversity import (
    IRRELEVANT,
    calibrate,
    diversity_threshold,
    feature_distance,
    pairwise_feature_distances,
    pixel_distance,
    relevance_threshold,
)
from subjects.urban.metrics import (
    class_iou,
    class_share,
    f_accuracy,
    iou_per_class,
    mars_relevance,
    mean_iou,
    urban_relevance,
)

CAR = 5


def test_class_iou_counts_true_false_positives_and_negatives() -> None:
    truth = np.zeros((4, 4), dtype=np.uint8)
    truth[0, :] = CAR  # 4 car pixels
    predicted = np.zeros((4, 4), dtype=np.uint8)
    predicted[0, :2] = CAR  # TP 2
    predicted[1, :3] = CAR  # FP 3; FN 2
    assert class_iou(truth, predicted, CAR) == pytest.approx(2 / (2 + 3 + 2))
    assert class_iou(truth, truth, CAR) == 1.0
    assert class_iou(truth, np.zeros_like(truth), CAR) == 0.0
    assert math.isnan(class_iou(np.zeros_like(truth), np.zeros_like(truth), CAR))  # car in neither map


def test_mean_iou_averages_only_classes_present_in_either_map() -> None:
    truth = np.array([[0, 0, 1, 1]], dtype=np.uint8)
    predicted = np.array([[0, 1, 1, 1]], dtype=np.uint8)
    # class 0: TP 1, FN 1 -> 1/2; class 1: TP 2, FP 1 -> 2/3; classes 2..4 absent from both: left out
    assert mean_iou(truth, predicted, 5) == pytest.approx((1 / 2 + 2 / 3) / 2)
    per = iou_per_class(truth, predicted, 5)
    assert per[:2] == pytest.approx([1 / 2, 2 / 3]) and np.isnan(per[2:]).all()
    with pytest.raises(ValueError, match="differ in shape"):
        iou_per_class(truth, predicted[:, :3], 5)


def test_urban_relevance_follows_the_prose_not_the_inverted_equation() -> None:
    """Eq. 6 prints 'F = 2 if 0 < carPixelsProportion < 0.4'; the prose says such an image is RELEVANT."""
    inside = urban_relevance(0.2, on_road=True, delta_iou=0.0, t_relevance=0.1)
    assert inside.relevant
    assert f_accuracy(inside, 0.3) == 0.3  # the printed equation would give 2 here
    for share in (0.0, 0.4, 0.75):  # no car, the bound itself, a close-up
        rel = urban_relevance(share, on_road=True, delta_iou=0.0, t_relevance=0.1)
        assert not rel.relevant and f_accuracy(rel, 0.9) == IRRELEVANT
    assert not urban_relevance(0.2, on_road=False, delta_iou=0.0, t_relevance=0.1).relevant
    assert urban_relevance(0.2, True, delta_iou=0.1, t_relevance=0.1).relevant  # delta <= T is relevant
    assert not urban_relevance(0.2, True, delta_iou=0.11, t_relevance=0.1).relevant
    assert urban_relevance(0.2, True, delta_iou=None, t_relevance=0.1).relevant  # NoGAN: no delta filter


def test_mars_relevance_follows_the_prose_not_the_inverted_equation() -> None:
    """Eq. 7 prints 'F = 2 if 0 < skyPixelsProportion < 0.7'; the prose says such an image is RELEVANT."""
    assert mars_relevance(0.3).relevant
    assert f_accuracy(mars_relevance(0.3), 0.45) == 0.45
    for share in (0.0, 0.7, 0.95):
        assert f_accuracy(mars_relevance(share), 0.45) == IRRELEVANT


def test_accuracy_of_a_relevant_image_with_undefined_iou_is_zero() -> None:
    assert f_accuracy(mars_relevance(0.3), float("nan")) == 0.0


def test_class_share() -> None:
    labels = np.array([[5, 5, 0, 0], [0, 0, 0, 0]], dtype=np.uint8)
    assert class_share(labels, 5) == 0.25


def test_pixel_distance_is_the_share_of_pixels_that_differ_in_any_channel() -> None:
    a = np.zeros((2, 2, 3), dtype=np.uint8)
    b = a.copy()
    b[0, 0, 2] = 1  # one channel of one pixel
    b[1, 1] = 255
    assert pixel_distance(a, a) == 0.0
    assert pixel_distance(a, b) == 0.5
    with pytest.raises(ValueError, match="cannot be compared"):
        pixel_distance(a, b[:1])


def test_feature_distances_and_the_papers_thresholds() -> None:
    features = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])
    assert feature_distance(features[0], features[1]) == 5.0
    pairwise = pairwise_feature_distances(features)
    assert sorted(pairwise.round(9)) == [5.0, 5.0, 10.0]
    assert diversity_threshold(pairwise) == 5.0  # the median pairwise distance (T_diversity)
    assert diversity_threshold(pairwise, 100.0) == 10.0 and diversity_threshold(pairwise, 0.0) == 5.0
    assert diversity_threshold(np.array([1.0, 2.0, 3.0, 4.0, 5.0]), 25.0) == 2.0  # the exposed percentile
    with pytest.raises(ValueError, match=r"diversity percentile must lie in \[0, 100\]"):
        diversity_threshold(pairwise, 101.0)
    assert relevance_threshold(np.array([0.0, 0.1, 0.2, 0.3, np.nan]), 50) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="at least two"):
        diversity_threshold(np.array([]))


def test_calibration_gives_the_papers_three_thresholds() -> None:
    images = [np.zeros((2, 2, 3), np.uint8), np.full((2, 2, 3), 9, np.uint8), np.zeros((2, 2, 3), np.uint8)]
    images[2][0, 0] = 9  # differs from the first in 1 of 4 pixels, from the second in 3
    features = np.array([[0.0], [1.0], [4.0]])
    t = calibrate(np.array([-0.2, 0.0, 0.4]), features, images, relevance_percentile=50)
    assert (t.t_relevance, t.t_diversity_features, t.t_diversity_pixels) == (0.0, 3.0, 0.75)
    assert t.calibration_images == 3
    with pytest.raises(ValueError, match="one per calibration image"):
        calibrate(np.array([0.0]), features[:2], images, 50)
