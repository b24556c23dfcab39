"""New versus seen-before failures (ClusterFailures): the distinct failing inputs of a campaign and of earlier
campaigns on the same subject, pooled and clustered together with Indago's k-means and silhouette rule
(failure_clusters.py); a failure of the campaign is *seen before* when its cluster holds a failure of an earlier one.

Inputs are encoded by ``encode_inputs`` over the whole pool (numbers min-max scaled, bools 0/1, strings one-hot;
lists such as action traces left out, so campaigns of action traces fall in one cluster), clustered once with seed
0 and k capped at ``MAX_K``, so the same campaigns always give the same answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis_service.failure_clusters import encode_inputs, select_clustering

MAX_K = 30  # as the comparison's cluster coverage caps it, for speed
SEED = 0


@dataclass(frozen=True)
class Failure:
    campaign_id: str
    test_case_id: str
    reason: str
    values: Mapping[str, object]


@dataclass(frozen=True)
class Clustered:
    failure: Failure
    cluster: int
    seen: Failure | None = None  # the first earlier failure in its cluster (only for the campaign's failures)


def distinct(failures: Sequence[Failure]) -> list[Failure]:
    """The failures with distinct inputs, first of each kept (the order given: asking order)."""
    seen: set[str] = set()
    out = []
    for f in failures:
        key = json.dumps(f.values, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def cluster_seen(
    campaign: Sequence[Failure], earlier: Sequence[Failure]
) -> tuple[list[Clustered], list[Clustered], int]:
    """(the campaign's failures, the earlier failures, k*): every failure with its cluster in the pooled clustering,
    the campaign's marked with the first earlier failure of their cluster, if any."""
    pooled = list(campaign) + list(earlier)
    if not pooled:
        return [], [], 0
    features: Any = encode_inputs([dict(f.values) for f in pooled])
    if features.shape[1] == 0:  # nothing numeric or categorical to tell them apart: one cluster
        features = np.zeros((len(pooled), 1))
    found = select_clustering(features, SEED, max_k=MAX_K)
    labels = [int(x) for x in found.labels]
    first_earlier: dict[int, Failure] = {}
    for f, label in zip(earlier, labels[len(campaign) :]):
        first_earlier.setdefault(label, f)
    mine = [Clustered(f, label, first_earlier.get(label)) for f, label in zip(campaign, labels)]
    theirs = [Clustered(f, label) for f, label in zip(earlier, labels[len(campaign) :])]
    return mine, theirs, found.k
