"""A DESIGNATE campaign's archive, recovered from its stored results, and calibration from a random campaign.

The archive is part of a campaign's stored results without a column of its own: the ``designate`` strategy is
deterministic given the campaign seed, so replaying the stored batches through a fresh strategy (exactly what
resuming a campaign does, generator_service/campaign.py) rebuilds the very archive the campaign ended with. Its
images are re-rendered deterministically from the poses (the simulator's renderer and the campaign's translator:
the same pose always gives the same images, tests/test_designate_e2e.py).

Calibration ("Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section III): over the
executed random inputs of a campaign, T_relevance is a chosen percentile of delta_IoU and T_diversity the median
pairwise distance of their feature vectors (and of their pixel digests, for DESIGNATE_pix).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.generated.gauntlet.v1 import generator_pb2, oracle_pb2
from common.seeding import derive_seed
from common.segmentation import DIVERSITY_PERCENTILE, IRRELEVANT, diversity_threshold, relevance_threshold
from common.space import ParameterSpace, case_values
from generator_service.config import CampaignConfig
from generator_service.strategies import Result, make_strategy
from generator_service.strategies.designate import SCALARS, Designate
from generator_service.strategies.designate_archive import Distance, pairwise


@dataclass(frozen=True)
class ArchiveEntry:
    values: dict[str, Any]
    f_accuracy: float
    execution: generator_pb2.Execution  # the stored execution of this input


def result_of(row: generator_pb2.Execution) -> Result:
    """A stored execution as the strategy was told it (generator_service/campaign.py _results)."""
    verdict = row.verdict
    return Result(
        case_values(row.test_case),
        verdict == oracle_pb2.VERDICT_KIND_FAIL,
        row.margin,
        tuple(row.descriptors),
        verdict == oracle_pb2.VERDICT_KIND_INVALID,
    )


def replay_archive(
    config: CampaignConfig,
    space: ParameterSpace,
    rows: Sequence[generator_pb2.Execution],
    artifact_root: Path | None = None,
) -> tuple[Designate, list[ArchiveEntry]]:
    """The campaign's ``designate`` strategy replayed over its stored executions, and its archive."""
    if config.strategy != "designate":
        raise ValueError(f"campaign {config.name!r} ran strategy {config.strategy!r}: only designate keeps an archive")
    params = dict(config.strategy_params)
    if params.get("thresholds") and artifact_root is not None:
        params["thresholds"] = str(artifact_root / str(params["thresholds"]))
    strategy = make_strategy("designate", space, derive_seed(config.seed, "strategy"), params)
    assert isinstance(strategy, Designate)
    batches: dict[int, list[generator_pb2.Execution]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: r.index):
        batches[row.batch].append(row)
    by_values: dict[str, generator_pb2.Execution] = {}
    for number in sorted(batches):
        stored = batches[number]
        asked = strategy.ask(len(stored))
        results = [result_of(r) for r in stored]
        if json.dumps(asked, sort_keys=True) != json.dumps([r.values for r in results], sort_keys=True):
            raise ValueError(f"batch {number}: the replayed strategy asks other inputs than the stored ones")
        strategy.tell(results)
        by_values.update((json.dumps(r.values, sort_keys=True), row) for r, row in zip(results, stored))
    entries = [
        ArchiveEntry(values, f, by_values[json.dumps(values, sort_keys=True)])
        for values, f in strategy.archive_inputs()
    ]
    return strategy, entries


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
