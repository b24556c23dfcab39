"""DESIGNATE's archive (Algorithm 1) and its diversity fitness F_similarity (Eq. 8).

"Search-based DNN Testing and Retraining with GAN-enhanced Simulations", Section III-C:

* Algorithm 1: an individual with F_accuracy = 2 (irrelevant or invalid) is ignored; one farther than
  T_diversity from its closest member is added; one within T_diversity replaces its closest member only when its
  F_accuracy is strictly lower.
* Eq. 8: F_similarity = 2 when the distance to the closest member is below T_diversity, 1 / (1 + d) otherwise.

Where the paper is silent (our choices): an empty archive is infinitely far (the first relevant individual is
added, F_similarity = 0); an individual's distance excludes itself when it is a member (else every member would
get F_similarity = 2); the boundary follows the paper as printed (Eq. 8 uses d < T, Algorithm 1 adds on d > T
and replaces on d <= T); an individual without a vector (an invalid input, never run) gets F_similarity = 2.

Distances: ``features`` is the Euclidean distance between feature vectors (DESIGNATE); ``pixels`` is the share of
entries that differ between two pixel digests (DESIGNATE_pix; common/image_diversity.py pixel_digest). ``keep_all``
is DESIGNATE_single's archive: every relevant image is kept, no diversity rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from common.image_diversity import IRRELEVANT, Distance, pairwise_distances, vector_distances


@dataclass
class Member:
    key: int  # the individual's identity in the search
    values: dict[str, Any]
    f_accuracy: float
    vector: np.ndarray


# The distances live in common/ so that the analysis service measures an archive's diversity the same way
__all__ = ["Archive", "Distance", "Member", "distances", "pairwise"]
distances = vector_distances
pairwise = pairwise_distances


class Archive:
    def __init__(self, threshold: float, kind: Distance, keep_all: bool = False) -> None:
        self.threshold = threshold
        self.kind = kind
        self.keep_all = keep_all
        self.members: list[Member] = []
        # the members' vectors stacked, rebuilt only after the archive changes: F_similarity asks for every
        # individual of every generation, and restacking a 1,000-member archive each time dominated a replay
        self._stacked: np.ndarray | None = None
        self._keys: set[int] = set()

    def __len__(self) -> int:
        return len(self.members)

    def _set(self, position: int | None, member: Member) -> None:
        if position is None:
            self.members.append(member)
        else:
            self._keys.discard(self.members[position].key)
            self.members[position] = member
        self._keys.add(member.key)
        self._stacked = None

    def distance_from_closest(self, vector: np.ndarray, exclude: int | None = None) -> tuple[float, int | None]:
        """(distance, position) of the closest member other than ``exclude``; (inf, None) when there is none."""
        if not self.members or (len(self.members) == 1 and self.members[0].key == exclude):
            return float("inf"), None
        if self._stacked is None:
            self._stacked = np.stack([m.vector for m in self.members])
        d = np.asarray(distances(self._stacked, vector, self.kind), dtype=np.float64)
        if exclude in self._keys:
            d = d.copy()
            d[next(i for i, m in enumerate(self.members) if m.key == exclude)] = np.inf
        best = int(np.argmin(d))
        return float(d[best]), best

    def f_similarity(self, key: int, vector: np.ndarray | None) -> float:
        """Eq. 8 for one individual."""
        if vector is None:
            return IRRELEVANT
        d, _ = self.distance_from_closest(vector, exclude=key)
        return IRRELEVANT if d < self.threshold else 1.0 / (1.0 + d)

    def update(self, key: int, values: dict[str, Any], f_accuracy: float, vector: np.ndarray | None) -> str:
        """Algorithm 1; returns what happened: ignored, member, added, replaced or kept."""
        if f_accuracy >= IRRELEVANT or vector is None:
            return "ignored"
        if key in self._keys:
            return "member"
        if self.keep_all:
            self._set(None, Member(key, dict(values), f_accuracy, vector))
            return "added"
        d, closest = self.distance_from_closest(vector)
        if closest is None or d > self.threshold:
            self._set(None, Member(key, dict(values), f_accuracy, vector))
            return "added"
        if self.members[closest].f_accuracy > f_accuracy:
            self._set(closest, Member(key, dict(values), f_accuracy, vector))
            return "replaced"
        return "kept"
