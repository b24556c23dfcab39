"""DESIGNATE's segmentation metrics and relevance rules for the urban and Mars subjects, as pure numpy functions.

From "Search-based DNN Testing and Retraining with GAN-enhanced Simulations" (DESIGNATE):

* IoU of one class (Eq. 1) and the per-image mean IoU (Eq. 2);
* relevance (Section III, Eqs. 4-7): an urban image is relevant iff 0 < car-pixel share < 0.4 on the ground
  truth, the ego is on the road and delta_IoU = IoU(simulator image) - IoU(realistic image) <= T_relevance; a Mars
  image iff 0 < sky-pixel share < 0.7. Eqs. 6 and 7 print the share conditions inverted ("F = 2 if 0 < p < 0.4");
  the prose, which says the image is relevant inside the range, is what is implemented;
* F_accuracy (Eq. 3): 2 for an irrelevant image, the accuracy otherwise.

Our deviation (measured by replications/designate_object_size.py): a minimum object share, ``min_share`` (the
subject's ``env_kwargs.min_class_share``), below which an image is irrelevant too. At our 64 x 128 render a car of a
few dozen pixels cannot be segmented, and without it the search converges on such images (IoU_car = 0 for every
variant). 0 keeps the paper's rule.

Conventions where the paper is silent: a class absent from both maps has no IoU (NaN) and is left out of the mean;
IoU_car of an image without cars in either map is NaN (such an image is irrelevant anyway). The pack's oracles
(oracle.py) and the offline segmentation training read them; the archive's distances are common/image_diversity.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.image_diversity import IRRELEVANT

CAR_SHARE_RANGE = (0.0, 0.4)  # urban: relevant iff low < car share < high (open interval)
SKY_SHARE_RANGE = (0.0, 0.7)  # Mars: relevant iff low < sky share < high


def iou_per_class(truth: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """IoU of every class (Eq. 1), shape (n_classes,); NaN for a class in neither map."""
    truth, predicted = np.asarray(truth), np.asarray(predicted)
    if truth.shape != predicted.shape:
        raise ValueError(f"ground truth {truth.shape} and prediction {predicted.shape} differ in shape")
    t, p = truth.reshape(-1).astype(np.int64), predicted.reshape(-1).astype(np.int64)
    confusion = np.bincount(t * n_classes + p, minlength=n_classes * n_classes).reshape(n_classes, n_classes)
    tp = np.diag(confusion).astype(np.float64)
    union = confusion.sum(0) + confusion.sum(1) - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, tp / np.maximum(union, 1), np.nan)


def class_iou(truth: np.ndarray, predicted: np.ndarray, label: int) -> float:
    """IoU of one class (Eq. 1); NaN when neither map has it."""
    t, p = np.asarray(truth) == label, np.asarray(predicted) == label
    union = int(np.count_nonzero(t | p))
    return float(np.count_nonzero(t & p)) / union if union else float("nan")


def mean_iou(truth: np.ndarray, predicted: np.ndarray, n_classes: int) -> float:
    """Per-image mIoU (Eq. 2) over the classes present in the ground truth or the prediction."""
    values = iou_per_class(truth, predicted, n_classes)
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def class_share(labels: np.ndarray, label: int) -> float:
    """Share of the map's pixels of one class (the car or sky proportion of the relevance rules)."""
    labels = np.asarray(labels)
    return float(np.count_nonzero(labels == label)) / labels.size if labels.size else 0.0


def share_in_range(share: float, bounds: tuple[float, float]) -> bool:
    """The relevance condition as the paper's prose states it: low < share < high (Eqs. 6-7 print its negation)."""
    return bounds[0] < share < bounds[1]


@dataclass(frozen=True)
class Relevance:
    relevant: bool
    reason: str  # one sentence: which rule decided


def urban_relevance(
    car_share: float, on_road: bool, delta_iou: float | None, t_relevance: float, min_share: float = 0.0
) -> Relevance:
    """DESIGNATE's urban relevance: cars in view but no close-up, the ego on the road, and the GAN not suspected
    of losing objects (delta_IoU <= T_relevance; skipped when there is no realistic image, as in DESIGNATE_NoGAN);
    with ``min_share`` > 0, also cars large enough to be segmented at the render's resolution (our deviation)."""
    if not share_in_range(car_share, CAR_SHARE_RANGE):
        low, high = CAR_SHARE_RANGE
        return Relevance(False, f"car share {car_share:.3f} is outside ({low:g}, {high:g})")
    if car_share < min_share:
        return Relevance(False, f"car share {car_share:.4f} is below the minimum {min_share:g}")
    if not on_road:
        return Relevance(False, "the ego is off the road")
    if delta_iou is not None and not delta_iou <= t_relevance:
        return Relevance(False, f"delta_IoU {delta_iou:.3f} > T_relevance {t_relevance:g}")
    return Relevance(True, "relevant")


def mars_relevance(sky_share: float, min_share: float = 0.0) -> Relevance:
    """DESIGNATE's Mars relevance: some sky, but under 70 % of the image (and at least ``min_share``, 0 = the
    paper's rule)."""
    if not share_in_range(sky_share, SKY_SHARE_RANGE):
        low, high = SKY_SHARE_RANGE
        return Relevance(False, f"sky share {sky_share:.3f} is outside ({low:g}, {high:g})")
    if sky_share < min_share:
        return Relevance(False, f"sky share {sky_share:.4f} is below the minimum {min_share:g}")
    return Relevance(True, "relevant")


def f_accuracy(relevance: Relevance, accuracy: float) -> float:
    """Eq. 3: 2 for an irrelevant image, else its accuracy (IoU_car or mIoU; NaN counts as 0: nothing found)."""
    if not relevance.relevant:
        return IRRELEVANT
    return 0.0 if not np.isfinite(accuracy) else float(accuracy)
