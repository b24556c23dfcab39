"""DESIGNATE's thresholds calibrated from a stored random campaign (`gauntlet designate calibrate`).

(A designate campaign's archive comes from the generator's ListArchive RPC, generator_service/archive_listing.py.)

Calibration ("Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section III): over the
executed random inputs of a campaign, T_relevance is a chosen percentile of delta_IoU and T_diversity the median
pairwise distance of their feature vectors (and of their pixel digests, for DESIGNATE_pix).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from common.generated.gauntlet.v1 import generator_pb2, oracle_pb2
from common.image_diversity import DIVERSITY_PERCENTILE, IRRELEVANT, diversity_threshold, relevance_threshold
from generator_service.strategies.designate import SCALARS
from generator_service.strategies.designate_diversity_archive import Distance, pairwise


def calibrate_rows(
    rows: Sequence[generator_pb2.Execution],
    percentile: float,
    oracle: str,
    diversity_percentile: float = DIVERSITY_PERCENTILE,
) -> dict[str, Any]:
    """T_relevance (the ``percentile`` of delta_IoU) and T_diversity (the ``diversity_percentile`` of the pairwise
    distances; the paper's median by default) over the executed inputs of a random campaign. Pixel thresholds need
    a campaign judged by a *_pix oracle (its descriptors carry pixel digests); feature thresholds one judged by
    iou_car / miou."""
    run = [r for r in rows if r.verdict != oracle_pb2.VERDICT_KIND_INVALID and len(r.descriptors) > SCALARS]
    if len(run) < 2:
        raise ValueError(f"calibration needs at least 2 executed images, the campaign has {len(run)}")
    vectors = [np.asarray(r.descriptors[SCALARS:], dtype=np.float64) for r in run]
    deltas = np.array([r.descriptors[3] for r in run])
    kind: Distance = "pixels" if oracle.endswith("_pix") else "features"
    return {
        "t_relevance": relevance_threshold(deltas, percentile),
        f"t_diversity_{kind}": diversity_threshold(pairwise(vectors, kind), diversity_percentile),
        "relevance_percentile": percentile,
        "diversity_percentile": diversity_percentile,
        "calibration_images": len(run),
        "relevant_images": sum(1 for r in run if r.margin < IRRELEVANT),
    }
