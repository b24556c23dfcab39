"""DeepJanus: a search for the frontier of behaviours, kept as an archive of close pass/fail pairs.

"Model-based Exploration of the Frontier of Behaviours for Deep Learning System Testing" (Riccio and Tonella,
ESEC/FSE 2020), Section 4 (individuals, fitness functions, archive), as the DESIGNATE paper ("Search-based DNN
Testing and Retraining with GAN-enhanced Simulations", Section IV-B) ran it against DESIGNATE. What the paper does,
what this module does, and where it deviates: docs/strategies/deepjanus.md.

* An individual is a pair of members, two inputs close in the input space. A pair whose members get opposite
  verdicts (one passes, one fails: the oracle's ``failed``) brackets the frontier of behaviours.
* Initial population: ``population_size`` pairs, each a uniform random input and a mutant of it.
* Each generation: ``population_size`` offspring; each is a copy of a parent picked by binary tournament on (rank,
  crowding distance) with one of its two members (chosen at random) mutated, so an offspring costs one
  evaluation. Reseeding: a random number in [0, ``reseed``] of the offspring are fresh random pairs instead (two
  evaluations each), against the population collapsing on one stretch of the frontier.
* Mutation: one parameter of the member (chosen at random; DeepJanus moves one element of its input model, a
  control point or an SVG vertex), shifted by a uniform step of up to ``mutation_scale`` of its range, clipped.
* Fitness, both minimised by NSGA-II's non-dominated sorting and crowding distance (pymoo's, as designate.py),
  over parents and offspring together: -f1, f1 = sparseness, the distance from the pair to the closest archived
  pair other than itself; and f2 = closeness to the frontier: -1 for a frontier pair, else
  eval(m1) * eval(m2), eval(m) = |margin - ``failure_margin``| (the product of the members' distances to the
  verdict's threshold: smaller is closer), and UNJUDGED when a member has no verdict (invalid, lost, or a margin
  at or above ``irrelevant_margin``: an input the oracle judged irrelevant is on no frontier).
* Archive: a frontier pair whose members are at most ``frontier_distance`` apart is added when it is farther than
  ``archive_threshold`` from every archived pair; otherwise it replaces the closest archived pair when its members
  are closer to each other (a tighter bracket of the frontier), else it is not kept.

Distances are Euclidean over the inputs normalised to [0, 1] per parameter (pose vectors in the image subjects;
DeepJanus uses its own input model's distance); a pair's position is its members' midpoint. The campaign ends
'strategy_exhausted' after ``generations`` generations or ``max_evaluations`` asked inputs, whichever comes first.
The archive (both members of each archived pair) is what ListArchive returns, as DESIGNATE's is.

Every random choice comes from the campaign's seeded generator, so a resumed campaign replays the same asks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput, require_numeric_box
from generator_service.strategies.params import Integer, Number, StrategyParams
from generator_service.strategies.search_support import AskLedger

NAME = "deepjanus"
UNJUDGED = 1.0e9  # f2 of a pair with a member without a verdict: worse than any judged pair
FRONTIER = -1.0  # f2 of a pair across the frontier (DeepJanus' value)
MUTATION_TRIES = 10  # redraws when a step rounds back onto the same input (integer parameters)


class DeepJanusParams(StrategyParams):
    population_size: Integer = Field(12, ge=2, description="pairs in the population (DESIGNATE's 12, Table I)")
    generations: Integer = Field(100, ge=0, description="generations after the initial population")
    max_evaluations: Integer | None = Field(
        None, ge=1, description="stop once this many inputs were asked (null: only generations bounds the run)"
    )
    mutation_scale: Number = Field(
        0.05, gt=0.0, le=1.0, description="largest step of one mutated parameter, a fraction of its range"
    )
    reseed: Integer = Field(
        1, ge=0, description="most offspring per generation replaced by fresh random pairs (a random number up to this)"
    )
    frontier_distance: Number = Field(
        0.1,
        gt=0.0,
        description="largest distance between an archived pair's members (normalised inputs, Euclidean)",
    )
    archive_threshold: Number = Field(
        0.02,
        ge=0.0,
        description="a frontier pair this close to an archived one competes with it instead of being added",
    )
    failure_margin: Number = Field(
        0.0,
        description="the margin at which the oracle's verdict flips; a member's distance to the frontier is "
        "|margin - this| (iou_car / miou: the subject's iou_threshold)",
    )
    irrelevant_margin: Number | None = Field(
        None,
        description="a margin at or above this marks an input judged irrelevant, on no frontier (the DESIGNATE "
        "oracles: 2.0); null: none",
    )


@dataclass
class Member:
    key: int
    x: np.ndarray  # the input normalised to [0, 1] per parameter
    values: TestInput
    told: bool = False
    judged: bool = False  # ran, with a finite margin below irrelevant_margin
    failed: bool = False
    margin: float = math.nan
    distance: float = math.inf  # |margin - failure_margin|


@dataclass
class Pair:
    key: int
    a: Member
    b: Member
    f1: float = 0.0  # sparseness
    f2: float = UNJUDGED  # closeness to the frontier
    rank: int = 0
    crowding: float = 0.0

    @property
    def midpoint(self) -> np.ndarray:
        return np.asarray((self.a.x + self.b.x) / 2.0)

    @property
    def spread(self) -> float:
        """The distance between the members."""
        return float(np.linalg.norm(self.a.x - self.b.x))

    @property
    def on_frontier(self) -> bool:
        return self.a.judged and self.b.judged and self.a.failed != self.b.failed

    def closeness(self, frontier_distance: float = math.inf) -> float:
        """f2: FRONTIER for a pair across the frontier whose members are at most ``frontier_distance`` apart, else
        the product of the members' distances from the verdict's threshold (UNJUDGED without both verdicts)."""
        if self.on_frontier and self.spread <= frontier_distance:
            return FRONTIER
        if not (self.a.judged and self.b.judged):
            return UNJUDGED
        return self.a.distance * self.b.distance


class FrontierArchive:
    """The archive of frontier pairs: add when far from every archived pair, else replace the closest when tighter."""

    def __init__(self, frontier_distance: float, threshold: float) -> None:
        self.frontier_distance = frontier_distance
        self.threshold = threshold
        self.pairs: list[Pair] = []

    def __len__(self) -> int:
        return len(self.pairs)

    def closest(self, pair: Pair) -> tuple[float, int | None]:
        """(distance, position) of the closest archived pair other than ``pair``; (inf, None) when there is none."""
        others = [(i, p) for i, p in enumerate(self.pairs) if p.key != pair.key]
        if not others:
            return math.inf, None
        d = np.linalg.norm(np.stack([p.midpoint for _, p in others]) - pair.midpoint, axis=1)
        best = int(np.argmin(d))
        return float(d[best]), others[best][0]

    def update(self, pair: Pair) -> str:
        """What happened to ``pair``: ignored, member, added, replaced or kept (out)."""
        if not pair.on_frontier or pair.spread > self.frontier_distance:
            return "ignored"
        if any(p.key == pair.key for p in self.pairs):
            return "member"
        d, position = self.closest(pair)
        if position is None or d > self.threshold:
            self.pairs.append(pair)
            return "added"
        if pair.spread < self.pairs[position].spread:
            self.pairs[position] = pair
            return "replaced"
        return "kept"


class DeepJanus:
    """DeepJanus: NSGA-II over pairs of close inputs, toward pairs across the pass/fail frontier (sparseness and
    closeness to the frontier), keeping an archive of diverse frontier pairs."""

    source = (
        "Model-based Exploration of the Frontier of Behaviours for Deep Learning System Testing (DeepJanus), "
        "Section 4; as run in Search-based DNN Testing and Retraining with GAN-enhanced Simulations, Section IV-B"
    )
    Params = DeepJanusParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: DeepJanusParams) -> None:
        require_numeric_box(space, NAME, "mutates real/integer ranges")
        self.space = space
        self.rng = rng
        self.params = params
        self.low, self.high = space.bounds()
        self.dims = len(space.names)
        self.archive = FrontierArchive(params.frontier_distance, params.archive_threshold)
        self.population: list[Pair] = []
        self.generation = -1  # -1 while the initial population is evaluated
        self.asked = 0  # inputs handed out (the max_evaluations count)
        self.evaluations = 0  # results told
        self._next_key = 0
        self._offspring: list[Pair] = []
        self._batch: list[Member] = []  # members of the phase being evaluated
        self._pending: list[Member] = []  # not yet asked
        self._ledger: AskLedger[int] = AskLedger()
        self._start_phase([self._fresh_pair() for _ in range(min(params.population_size, self._left() // 2))])

    # -- ask/tell ---------------------------------------------------------------------------------
    def ask(self, n: int) -> list[TestInput]:
        for key in self._ledger.close():  # asked but never told (a stop mid-batch): no verdict
            self._member(key).told = True
        self._advance_if_done()
        batch, self._pending = self._pending[: max(n, 0)], self._pending[max(n, 0) :]
        for m in batch:
            self._ledger.record(m.values, m.key)
        self.asked += len(batch)
        return [dict(m.values) for m in batch]

    def tell(self, results: Sequence[Result]) -> None:
        for key, result in self._ledger.match(results):
            self._judge(self._member(key), result)
            self.evaluations += 1
        self._advance_if_done()

    # -- inspection -------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return not self._pending and not self._batch

    def archive_inputs(self) -> list[tuple[TestInput, float]]:
        """Both members of every archived pair (each input once), with their margins, in archive order."""
        out, seen = [], set()
        for pair in self.archive.pairs:
            for m in (pair.a, pair.b):
                if m.key not in seen:
                    seen.add(m.key)
                    out.append((dict(m.values), m.margin))
        return out

    def archive_summary(self) -> dict[str, Any]:
        """ListArchive's summary (fields of ArchiveSummary): the distance is over normalised inputs, and
        t_diversity is the archive threshold between pairs."""
        return {
            "variant": NAME,
            "distance": "inputs",
            "t_diversity": self.params.archive_threshold,
            "t_diversity_source": "parameter",
        }

    # -- the algorithm ----------------------------------------------------------------------------
    def _judge(self, m: Member, result: Result) -> None:
        margin = float(result.margin)
        irrelevant = self.params.irrelevant_margin is not None and margin >= self.params.irrelevant_margin
        m.told, m.margin = True, margin
        m.judged = not result.invalid and math.isfinite(margin) and not irrelevant
        m.failed = bool(result.failed) and m.judged
        m.distance = abs(margin - self.params.failure_margin) if m.judged else math.inf

    def _advance_if_done(self) -> None:
        if self._pending or not self._batch or not all(m.told for m in self._batch):
            return
        merged = self.population + self._offspring
        for pair in merged:
            self.archive.update(pair)
        self.population = self._survive(merged)
        self.generation += 1
        self._batch, self._offspring = [], []
        if self._can_continue():
            self._start_phase(self._next_offspring())

    def _can_continue(self) -> bool:
        return self.generation < self.params.generations and self._left() > 0

    def _left(self) -> int:
        """Inputs max_evaluations still allows (called between phases, when nothing is pending)."""
        if self.params.max_evaluations is None:
            return 2 * self.params.population_size  # never binding: a generation needs at most this many
        return max(0, self.params.max_evaluations - self.asked)

    def _survive(self, pairs: list[Pair]) -> list[Pair]:
        """f1 and f2 against the archive as it now is, then pymoo's rank-and-crowding survival."""
        from pymoo.core.population import Population
        from pymoo.core.problem import Problem
        from pymoo.operators.survival.rank_and_crowding import RankAndCrowding

        farthest = math.sqrt(self.dims)  # the unit cube's diagonal: an empty archive's sparseness
        for pair in pairs:
            d, _ = self.archive.closest(pair)
            pair.f1 = min(d, farthest)
            pair.f2 = pair.closeness(self.params.frontier_distance)
        if len(pairs) <= 1:
            return pairs
        problem = Problem(n_var=self.dims, n_obj=2, xl=np.zeros(self.dims), xu=np.ones(self.dims))
        objectives = np.array([[-p.f1, p.f2] for p in pairs], dtype=np.float64)
        pop = Population.new("X", np.stack([p.midpoint for p in pairs]), "F", objectives)
        pop.set("index", np.arange(len(pairs)))
        survivors = RankAndCrowding().do(problem, pop, n_survive=self.params.population_size, random_state=self.rng)
        kept = []
        for index, rank, crowding in zip(survivors.get("index"), survivors.get("rank"), survivors.get("crowding")):
            pair = pairs[int(index)]
            pair.rank, pair.crowding = int(rank), float(crowding)
            kept.append(pair)
        return kept

    def _tournament(self) -> Pair:
        """Binary tournament: the lower rank, then the larger crowding distance, then the first drawn."""
        i, j = self.rng.integers(len(self.population), size=2)
        a, b = self.population[int(i)], self.population[int(j)]
        if (b.rank, -b.crowding) < (a.rank, -a.crowding):
            return b
        return a

    def _next_offspring(self) -> list[Pair]:
        size = self.params.population_size
        fresh = int(self.rng.integers(0, self.params.reseed + 1)) if self.population else size
        offspring: list[Pair] = []
        needed, left = 0, self._left()
        for i in range(size):
            reseeded = i < fresh or not self.population
            needed += 2 if reseeded else 1  # a fresh pair's two members, or the mutant member
            if needed > left:
                break
            offspring.append(self._fresh_pair() if reseeded else self._mutant_pair(self._tournament()))
        return offspring

    def _fresh_pair(self) -> Pair:
        first = self._new_member(self.rng.random(self.dims))
        return self._pair(first, self._mutate(first, first))

    def _mutant_pair(self, parent: Pair) -> Pair:
        if self.rng.random() < 0.5:
            return self._pair(self._mutate(parent.a, parent.b), parent.b)
        return self._pair(parent.a, self._mutate(parent.b, parent.a))

    def _mutate(self, member: Member, partner: Member) -> Member:
        """A new member: one parameter of ``member`` shifted by up to mutation_scale of its range, clipped; redrawn
        (up to MUTATION_TRIES times) when the step rounds back onto the same input or takes it farther than
        frontier_distance from ``partner``, the pair's other member (a pair stays two close inputs)."""
        x = member.x
        for _ in range(MUTATION_TRIES):
            x = member.x.copy()
            dim = int(self.rng.integers(self.dims))
            step = self.rng.uniform(-self.params.mutation_scale, self.params.mutation_scale)
            x[dim] = float(np.clip(x[dim] + step, 0.0, 1.0))
            close = float(np.linalg.norm(x - partner.x)) <= self.params.frontier_distance
            if close and self._values(x) != member.values:
                break
        return self._new_member(x)

    # -- bookkeeping ------------------------------------------------------------------------------
    def _start_phase(self, pairs: list[Pair]) -> None:
        self._offspring = pairs
        # the new members: both of a fresh pair, the mutant of a copied one (its other member was evaluated)
        self._batch = [m for p in pairs for m in (p.a, p.b) if not m.told]
        self._pending = list(self._batch)
        self._index = {m.key: m for m in self._batch}

    def _member(self, key: int) -> Member:
        return self._index[key]

    def _pair(self, a: Member, b: Member) -> Pair:
        self._next_key += 1
        return Pair(self._next_key, a, b)

    def _new_member(self, x: np.ndarray) -> Member:
        self._next_key += 1
        return Member(self._next_key, np.asarray(x, dtype=np.float64), self._values(x))

    def _values(self, x: np.ndarray) -> TestInput:
        values: TestInput = {}
        for p, lo, hi, xi in zip(self.space.parameters, self.low, self.high, x):
            value = lo + float(xi) * (hi - lo)
            values[p.name] = int(round(value)) if p.kind == "integer" else float(value)
        return values
