"""DESIGNATE's oracles for image subjects: IoU_car (urban) and per-image mIoU (Mars), with the relevance rules.

"Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section III (Eqs. 1-7): the accuracy of
the DNN under test on the realistic image (the translator's), against the simulator's ground truth; an irrelevant
image gets F_accuracy = 2. Relevance and metrics are metrics.py's.

How a verdict carries it (our choice; the paper has no pass/fail): the margin IS F_accuracy, the value the search
minimises: the IoU (or mIoU) of a relevant image, 2.0 for an irrelevant one. A relevant image whose accuracy is
below the subject's `iou_threshold` fails; an irrelevant one passes with margin 2.0 and a reason starting with
"irrelevant:" (it is a judged input, just not a useful one: VERDICT_KIND_INVALID stays for episodes that could not
run). Without a translator (DESIGNATE_NoGAN) the DNN is judged on the simulator's image and there is no delta_IoU
filter.

Descriptors, in order: iou_judged, iou_simulated, iou_realistic, delta_iou, class_share (car or sky), on_road,
relevant (1/0), then the judged image's feature vector (the `features` signal, D values). An IoU that is
undefined (the class in neither map) is reported as 0.0; delta_IoU is 0.0 without a realistic image.

The *_pix oracles (iou_car_pix, miou_pix: DESIGNATE_pix) judge alike but, after the 7 scalars, give a pixel
digest of the judged image (common/image_diversity.py pixel_digest: 512 colour codes for 64 x 128) instead of the
features, so that the search can compare images pixel by pixel without the store keeping images.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from common.image_diversity import pixel_digest
from oracle_service.plugin_api import Episode, Judgement, Oracle
from subjects.urban.metrics import (
    Relevance,
    class_iou,
    class_share,
    f_accuracy,
    mars_relevance,
    mean_iou,
    urban_relevance,
)

URBAN_CAR = 5  # the urban class table: road, sidewalk, building, vegetation, sky, car
MARS_SKY, MARS_CLASSES = 4, 5  # the Mars class table: soil, sand, bedrock, big_rock, sky
SIGNALS = (
    "label_map",
    "on_road",
    "prediction_simulated",
    "prediction_realistic",
    "features",
    "t_relevance",
    "iou_threshold",
    "min_class_share",
)
PIX_SIGNALS = (*(s for s in SIGNALS if s != "features"), "image", "realistic_image")  # no Embed call needed
DESCRIPTORS = (
    "iou_judged",
    "iou_simulated",
    "iou_realistic",
    "delta_iou",
    "class_share",
    "on_road",
    "relevant",
    "features...",
)
PIX_DESCRIPTORS = (*DESCRIPTORS[:-1], "pixel_digest...")


def _finite(value: float) -> float:
    return float(value) if np.isfinite(value) else 0.0


def _judge(
    ep: Episode,
    accuracy: Callable[[np.ndarray, np.ndarray], float],
    relevance: Callable[[float, bool, float | None, float, float], Relevance],
    share_of: int,
    metric: str,
    pixels: bool = False,
) -> Judgement:
    truth = np.asarray(ep.signals["label_map"])
    simulated = np.asarray(ep.signals["prediction_simulated"])
    realistic = np.asarray(ep.signals["prediction_realistic"])
    has_realistic = realistic.shape == truth.shape
    on_road = bool(np.asarray(ep.signals["on_road"]).item())
    threshold = float(np.asarray(ep.signals["iou_threshold"]).item())
    iou_sim = accuracy(truth, simulated)
    iou_real = accuracy(truth, realistic) if has_realistic else iou_sim
    judged = iou_real  # the realistic image's, or the simulator's without a translator (NoGAN)
    delta = _finite(iou_sim) - _finite(iou_real) if has_realistic else None
    share = class_share(truth, share_of)
    t_relevance = float(np.asarray(ep.signals["t_relevance"]).item())
    rel = relevance(share, on_road, delta, t_relevance, float(np.asarray(ep.signals["min_class_share"]).item()))
    fitness = f_accuracy(rel, judged)
    if pixels:  # the judged image's digest: the realistic image, or the simulator's without a translator
        judged_image = np.asarray(ep.signals["realistic_image" if has_realistic else "image"])
        features = pixel_digest(judged_image)
    else:
        features = np.asarray(ep.signals["features"], dtype=np.float64).reshape(-1)
    descriptors = (
        _finite(judged),
        _finite(iou_sim),
        _finite(iou_real),
        0.0 if delta is None else float(delta),
        share,
        float(on_road),
        float(rel.relevant),
        *features.tolist(),
    )
    seen = "realistic" if has_realistic else "simulator"
    if not rel.relevant:
        return Judgement(False, fitness, descriptors, f"irrelevant: {rel.reason}")
    failed = fitness < threshold
    verdict = "below" if failed else "at or above"
    return Judgement(
        failed, fitness, descriptors, f"{metric} {fitness:.3f} on the {seen} image, {verdict} {threshold:g}"
    )


def _urban(ep: Episode, pixels: bool = False) -> Judgement:
    def relevance(share: float, on_road: bool, delta: float | None, t: float, low: float) -> Relevance:
        return urban_relevance(share, on_road, delta, t, low)

    return _judge(ep, lambda t, p: class_iou(t, p, URBAN_CAR), relevance, URBAN_CAR, "IoU_car", pixels)


def _mars(ep: Episode, pixels: bool = False) -> Judgement:
    def relevance(share: float, on_road: bool, delta: float | None, t: float, low: float) -> Relevance:
        return mars_relevance(share, low)  # no delta_IoU filter on Mars (Section IV)

    return _judge(ep, lambda t, p: mean_iou(t, p, MARS_CLASSES), relevance, MARS_SKY, "mIoU", pixels)


MARGIN = "F_accuracy: the accuracy on the judged image (lower is worse), 2.0 for an irrelevant image"

IOU_CAR = Oracle(
    "iou_car",
    "DESIGNATE urban: IoU of the car class on the realistic image (the simulator's without a translator); "
    "relevant iff 0 < car share < 0.4, car share >= min_class_share (the subject's; our deviation), the ego on the "
    "road and delta_IoU <= t_relevance; fails below iou_threshold.",
    SIGNALS,
    DESCRIPTORS,
    MARGIN,
    _urban,
)

MIOU = Oracle(
    "miou",
    "DESIGNATE Mars: per-image mean IoU on the realistic image (the simulator's without a translator); relevant iff "
    "0 < sky share < 0.7 (and >= min_class_share, 0 on mars: the paper's rule); fails below iou_threshold.",
    SIGNALS,
    DESCRIPTORS,
    MARGIN,
    _mars,
)

IOU_CAR_PIX = Oracle(
    "iou_car_pix",
    "DESIGNATE_pix urban: iou_car's verdict, with a pixel digest of the judged image in place of its features "
    "(for the designate strategy's variant pix).",
    PIX_SIGNALS,
    PIX_DESCRIPTORS,
    MARGIN,
    lambda ep: _urban(ep, pixels=True),
)

MIOU_PIX = Oracle(
    "miou_pix",
    "DESIGNATE_pix Mars: miou's verdict, with a pixel digest of the judged image in place of its features "
    "(for the designate strategy's variant pix).",
    PIX_SIGNALS,
    PIX_DESCRIPTORS,
    MARGIN,
    lambda ep: _mars(ep, pixels=True),
)
