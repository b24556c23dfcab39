"""Novelty Search for policy testing, as the QD fault-diversity paper and its code run it.

Source: Q. Mazouni, H. Spieker, A. Gotlieb, M. Acher, "Testing for Fault Diversity in Reinforcement Learning",
AST 2024, Sections 3.2 (Novelty Search, Lehman & Stanley 2011) and 5.4 (implementation); what the paper leaves
open follows the authors' published code. The search ignores margins and verdicts: it only seeks new behaviours.

Behaviours are the oracle's descriptors normalised to [0, 1] per dimension by ``descriptor_bounds`` (given, or
learned from the initial tests; see search_support.py). Distances are Euclidean in that normalised space.

1. Initial phase: ``initial_tests`` uniform random inputs (default 1000, the same initial budget as MAP-Elites
   and MDPFuzz; the paper's NS instead starts from its population of 100 random tests, which
   ``initial_tests=100`` reproduces). As MAP-Elites, an ask at the end of the phase returns only the rest.
   The novelty archive starts with every initial behaviour (the code's archive starts with the initial
   population). The first population is the ``population`` most novel initial tests (all of them when
   ``initial_tests <= population``).
2. Each generation mutates every member of the population once (mutation.py, ``mutation_scale``), in
   population order; a population smaller than ``population`` (after lost results) is cycled, so a
   generation always has ``population`` offspring. An ask hands out the next offspring of the current
   generation, at most up to the end of the generation.
3. When every offspring of the generation has been asked and told (or lost), the generation is closed:
   * novelty of each parent and each told offspring = mean distance to its ``neighbours`` (k = 3) nearest
     behaviours among the archive, the parents and the offspring, not counting itself;
   * archive update (the code's ``update3``): an offspring is added, in order, if the distance to its
     nearest archived behaviour exceeds ``archive_threshold``;
   * replacement (the code's rule): parents and offspring pooled, those with novelty >= the pool median
     kept in pool order (parents first), truncated to ``population``.

``archive_threshold`` defaults to 0.005, the paper's value for Lunar Lander and Bipedal Walker (Taxi: 0.9).
The authors applied it to raw behaviour units; here it is in normalised units, so the same number means a
different distance (raw lunar lander x spans ~0.34 and vy ~0.18, so 0.005 raw is ~1.5-3 % of those ranges,
against 0.5 % here). Population 100 is the paper's (100 x 50 generations = its 5000-test budget).
Invalid results and results with non-finite descriptors are left out of the search (an offspring without a
usable result neither enters the archive nor the population).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field
from scipy.spatial import cKDTree

from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput
from generator_service.strategies.mutation import mutate
from generator_service.strategies.params import Integer, Number
from generator_service.strategies.search_support import (
    AskLedger,
    BehaviourScale,
    DescriptorBounds,
    MutationParams,
    bounds_array,
    check_mutable_space,
    descriptor_bounds_field,
)

NAME = "novelty_search"


class NoveltySearchParams(MutationParams):
    population: Integer = Field(100, ge=1, description="individuals per generation")
    neighbours: Integer = Field(3, ge=1, description="k of the k-nearest-neighbour novelty")
    archive_threshold: Number = Field(0.005, ge=0.0, description="novelty above which a behaviour is archived")
    descriptor_bounds: DescriptorBounds | None = descriptor_bounds_field()


class NoveltySearch:
    """Novelty Search: evolves a population towards behaviours far from those seen so far (k-nearest-neighbour
    novelty over the oracle's behaviour descriptors), keeping an archive of novel behaviours."""

    source = "Mazouni et al.: Testing for Fault Diversity in Reinforcement Learning (AST 2024); Lehman & Stanley 2011"
    Params = NoveltySearchParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: NoveltySearchParams) -> None:
        check_mutable_space(NAME, space)
        self.space = space
        self.rng = rng
        self.initial_tests = params.initial_tests
        self.population_size = params.population
        self.k = params.neighbours
        self.threshold = params.archive_threshold
        self.mutation_scale = params.mutation_scale
        self.integer_mutation, self.mutation_p = params.integer_mutation, params.mutation_p
        self.behaviour = BehaviourScale(NAME, space, bounds_array(params.descriptor_bounds))
        self._asked = 0
        self._ledger: AskLedger[tuple[str, int]] = AskLedger()
        self._next_id = 0
        self._initial: list[tuple[int, TestInput, np.ndarray]] = []  # (id, input, raw behaviour)
        self._archive_ids: list[int] = []
        self._archive_points = np.empty((0, 0))
        self._population: list[tuple[int, TestInput, np.ndarray]] | None = None  # (id, input, normalised)
        self._offspring: list[TestInput] = []  # the current generation, handed out in order
        self._handed = 0
        self._told: dict[int, tuple[int, TestInput, np.ndarray]] = {}  # offspring position -> (id, input, norm)
        self.generation = 0

    # -- ask/tell ---------------------------------------------------------------------------------
    def ask(self, n: int) -> list[TestInput]:
        self._ledger.close()
        if n <= 0:
            return []
        initial_left = self.initial_tests - self._asked
        if initial_left > 0 or not self._start():  # initial phase, or nothing told yet: random inputs
            batch = [self.space.sample(self.rng) for _ in range(min(n, initial_left) if initial_left > 0 else n)]
            tags: list[Any] = [("initial", 0)] * len(batch)
        else:
            if self._handed == len(self._offspring):
                self._close_generation()
                self._new_generation()
            take = min(n, len(self._offspring) - self._handed)
            batch = [dict(v) for v in self._offspring[self._handed : self._handed + take]]
            tags = [("offspring", self._handed + i) for i in range(take)]
            self._handed += take
        for values, tag in zip(batch, tags):
            self._ledger.record(values, tag)
        self._asked += len(batch)
        return batch

    def tell(self, results: Sequence[Result]) -> None:
        for (kind, position), r in self._ledger.match(results):
            if r.invalid:
                continue
            raw = self.behaviour.raw(r)
            if raw is None:
                continue
            test_id, self._next_id = self._next_id, self._next_id + 1
            if kind == "initial":
                self._initial.append((test_id, dict(r.values), raw))
            else:
                self._told[position] = (test_id, dict(r.values), self.behaviour.normalise(raw))

    # -- inspection -------------------------------------------------------------------------------
    @property
    def archive_size(self) -> int:
        return len(self._archive_ids)

    @property
    def archive(self) -> np.ndarray:
        """The archived behaviours, normalised (one row each, in the order they were added)."""
        return self._archive_points.copy()

    @property
    def population(self) -> list[TestInput]:
        return [dict(v) for _, v, _ in self._population or []]

    # -- internals --------------------------------------------------------------------------------
    def _start(self) -> bool:
        """Ends the initial phase once initial results exist: archive and first population. False if none yet."""
        if self._population is not None:
            return True
        if not self._initial:
            return False
        self.behaviour.learn([raw for _, _, raw in self._initial])
        members = [(i, v, self.behaviour.normalise(raw)) for i, v, raw in self._initial]
        self._initial = []
        points = np.array([p for _, _, p in members])
        self._archive_ids = [i for i, _, _ in members]
        self._archive_points = points
        novelty = self._novelty(points, [i for i, _, _ in members], points, [i for i, _, _ in members])
        order = np.argsort(-novelty, kind="stable")[: self.population_size]
        self._population = [members[j] for j in sorted(order)]
        self._new_generation()
        return True

    def _new_generation(self) -> None:
        pop = self._population or []
        self._offspring = [
            mutate(
                self.space,
                pop[i % len(pop)][1],
                self.rng,
                scale=self.mutation_scale,
                p=self.mutation_p,
                integer=self.integer_mutation,
            )
            for i in range(self.population_size)
        ]
        self._handed = 0
        self._told = {}
        self.generation += 1

    def _close_generation(self) -> None:
        parents = self._population or []
        children = [self._told[p] for p in sorted(self._told)]
        pool = parents + children
        if not children:
            return  # nothing learned (all results lost): keep the population
        pool_ids = [i for i, _, _ in pool]
        pool_points = np.array([p for _, _, p in pool])
        ref_ids = list(self._archive_ids) + pool_ids
        ref_points = np.vstack([self._archive_points, pool_points])
        novelty = self._novelty(pool_points, pool_ids, ref_points, ref_ids)
        for test_id, _, point in children:  # update3: nearest archived behaviour farther than the threshold
            archived = self._archive_points
            if not len(archived) or np.min(np.linalg.norm(archived - point, axis=1)) > self.threshold:
                self._archive_ids.append(test_id)
                self._archive_points = np.vstack([self._archive_points, point])
        keep = np.flatnonzero(novelty >= np.median(novelty))[: self.population_size]
        self._population = [pool[j] for j in keep]

    def _novelty(self, points: np.ndarray, ids: list[int], ref_points: np.ndarray, ref_ids: list[int]) -> np.ndarray:
        """Mean distance of each point to its k nearest reference points, not counting its own (same test id)."""
        _, first = np.unique(np.asarray(ref_ids), return_index=True)  # a test both archived and pooled counts once
        first = np.sort(first)
        ref_points, ref = ref_points[first], np.asarray(ref_ids)[first]
        if ref.size < 2:
            return np.full(len(points), np.inf)
        q = min(self.k + 1, ref.size)
        dist, idx = cKDTree(ref_points).query(points, k=q)
        dist, idx = dist.reshape(len(points), q), idx.reshape(len(points), q)
        own = ref[idx] == np.asarray(ids)[:, None]
        # drop the own entry; if it was not among the q nearest (duplicates at distance 0), drop the farthest
        drop = np.where(own.any(axis=1), own.argmax(axis=1), q - 1)
        dist[np.arange(len(points)), drop] = np.nan
        return np.nanmean(dist, axis=1)
