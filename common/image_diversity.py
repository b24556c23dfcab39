"""Image diversity for DESIGNATE's archive: the descriptor layout, distances and thresholds, as pure numpy.

From "Search-based DNN Testing and Retraining with GAN-enhanced Simulations" (DESIGNATE): the image subjects'
oracles (subjects/urban/oracle.py) write every verdict's descriptors as ``SCALAR_DESCRIPTORS`` then a feature vector
or a pixel digest; the generator's archive (F_similarity), the analysis report and the CLI's calibration read them
with the same distances: Euclidean between feature vectors, and the pixel distance (share of pixels that differ) of
DESIGNATE_pix; T_diversity = the median pairwise distance over a calibration set (Section III). The segmentation
metrics and relevance rules themselves are the urban pack's (subjects/urban/metrics.py).

Conventions where the paper is silent: two RGB pixels match only when all three channels are equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

# What the segmentation oracles (subjects/urban/oracle.py) put before the feature vector or pixel digest in every
# verdict's descriptors, in this order.
SCALAR_DESCRIPTORS = ("iou_judged", "iou_simulated", "iou_realistic", "delta_iou", "class_share", "on_road", "relevant")
IRRELEVANT = 2.0  # F_accuracy of an irrelevant image (Eq. 3): worse than any IoU under minimisation


def feature_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Euclidean distance between two feature vectors."""
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)))


def pixel_distance(a: np.ndarray, b: np.ndarray) -> float:
    """DESIGNATE_pix: the share of pixels that do not match (all channels equal = a match), in [0, 1]."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"images of shapes {a.shape} and {b.shape} cannot be compared pixel by pixel")
    differ = a != b
    if differ.ndim == 3:
        differ = differ.any(axis=2)
    return float(np.count_nonzero(differ)) / differ.size if differ.size else 0.0


def pixel_digest(image: np.ndarray, block: int = 4, levels: int = 16) -> np.ndarray:
    """A compact stand-in for an RGB image in DESIGNATE_pix's pixel distance: the mean colour of each block x block
    cell, quantised to ``levels`` per channel and packed into one integer code per cell (as float64, exact).
    A 64 x 128 image gives 512 codes, small enough to travel as oracle descriptors and be stored per execution;
    the share of codes that differ between two digests is then the pixel distance at the digest's resolution."""
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"a pixel digest needs an RGB image (H, W, 3), got shape {img.shape}")
    h, w = img.shape[0] // block * block, img.shape[1] // block * block
    cells = img[:h, :w].astype(np.float64).reshape(h // block, block, w // block, block, 3).mean(axis=(1, 3))
    q = np.clip(np.floor(cells * levels / 256.0), 0, levels - 1)
    return ((q[..., 0] * levels + q[..., 1]) * levels + q[..., 2]).reshape(-1)


def digest_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The share of digest cells whose codes differ, in [0, 1]."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"digests of shapes {a.shape} and {b.shape} cannot be compared")
    return float(np.mean(a != b)) if a.size else 0.0


Distance = Literal["features", "pixels"]


def vector_distances(vectors: np.ndarray, vector: np.ndarray, kind: Distance) -> np.ndarray:
    """Distance of ``vector`` to every row of ``vectors``: Euclidean (``features``) or the share of differing
    entries (``pixels``: pixel digests, as digest_distance)."""
    if kind == "features":
        return np.sqrt(np.sum((vectors - vector[None, :]) ** 2, axis=1))
    return np.mean(vectors != vector[None, :], axis=1) if vectors.shape[1] else np.zeros(len(vectors))


def pairwise_distances(vectors: Sequence[np.ndarray], kind: Distance) -> np.ndarray:
    """All pairwise distances (i < j) of ``vectors``, flattened, in vector_distances' measure."""
    rows = np.asarray(vectors, dtype=np.float64)
    return np.concatenate(
        [vector_distances(rows[i + 1 :], rows[i], kind) for i in range(len(rows) - 1)] or [np.zeros(0)]
    )


def mean_pairwise_distance(vectors: Sequence[np.ndarray], kind: Distance) -> float | None:
    """DESIGNATE's diversity of a set of images (RQ1): the mean pairwise distance of their feature vectors or pixel
    digests; None for fewer than two."""
    if len(vectors) < 2:
        return None
    if kind == "features":  # one matrix product: an archive of a thousand 384-value vectors in well under a second
        return float(np.mean(pairwise_feature_distances(np.asarray(vectors, dtype=np.float64))))
    return float(np.mean(pairwise_distances(vectors, kind)))


def pairwise_feature_distances(features: np.ndarray) -> np.ndarray:
    """All pairwise Euclidean distances (i < j) of the rows of `features`, flattened."""
    x = np.asarray(features, dtype=np.float64)
    sq = np.sum(x * x, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
    i, j = np.triu_indices(len(x), k=1)
    return np.sqrt(d2[i, j])


def pairwise_pixel_distances(images: Sequence[np.ndarray]) -> np.ndarray:
    """All pairwise pixel distances (i < j), flattened."""
    return np.array(
        [pixel_distance(images[i], images[j]) for i in range(len(images)) for j in range(i + 1, len(images))]
    )


DIVERSITY_PERCENTILE = 50.0  # the paper's T_diversity: the median pairwise distance of random images


def diversity_threshold(pairwise: np.ndarray, percentile: float = DIVERSITY_PERCENTILE) -> float:
    """T_diversity: a percentile of the pairwise distances over a calibration set of random images; the paper's
    rule is the median (50). A lower percentile admits images closer to the archive's members (a larger archive):
    with a low-dimensional input (a 3-parameter pose) few images lie farther than the median from every member."""
    values = np.asarray(pairwise, dtype=np.float64)
    if values.size == 0:
        raise ValueError("T_diversity needs at least two calibration images (one pairwise distance)")
    if not 0.0 <= percentile <= 100.0:
        raise ValueError(f"diversity percentile must lie in [0, 100], got {percentile}")
    return float(np.percentile(values, percentile))


def relevance_threshold(deltas: np.ndarray, percentile: float) -> float:
    """T_relevance as a chosen percentile of delta_IoU over a calibration set. The paper says "the third
    percentile" (and Table I 0.1): ambiguous, so the percentile is the caller's choice."""
    values = np.asarray(deltas, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        raise ValueError("T_relevance needs at least one finite delta_IoU")
    if not 0.0 <= percentile <= 100.0:
        raise ValueError(f"percentile must lie in [0, 100], got {percentile}")
    return float(np.percentile(values, percentile))


@dataclass(frozen=True)
class Thresholds:
    """DESIGNATE's calibrated thresholds (Section III, Table I: 0.1, 18 and 0.02 in the paper's setting)."""

    t_relevance: float  # delta_IoU above this: the GAN is suspected of losing objects (urban only)
    t_diversity_features: float  # F_similarity's threshold with feature distances (DESIGNATE)
    t_diversity_pixels: float  # the same with pixel distances (DESIGNATE_pix)
    relevance_percentile: float
    calibration_images: int
    diversity_percentile: float = DIVERSITY_PERCENTILE


def calibrate(
    deltas: np.ndarray,
    features: np.ndarray,
    images: Sequence[np.ndarray],
    relevance_percentile: float,
    diversity_percentile: float = DIVERSITY_PERCENTILE,
) -> Thresholds:
    """The paper's calibration over a set of random configurations: T_relevance from their delta_IoU values,
    T_diversity as the median (``diversity_percentile``) pairwise distance of their feature vectors (and of their
    realistic images)."""
    if len(features) != len(images):
        raise ValueError(f"{len(features)} feature vectors for {len(images)} images: one per calibration image")
    return Thresholds(
        t_relevance=relevance_threshold(deltas, relevance_percentile),
        t_diversity_features=diversity_threshold(pairwise_feature_distances(features), diversity_percentile),
        t_diversity_pixels=diversity_threshold(pairwise_pixel_distances(images), diversity_percentile),
        relevance_percentile=relevance_percentile,
        calibration_images=len(images),
        diversity_percentile=diversity_percentile,
    )
