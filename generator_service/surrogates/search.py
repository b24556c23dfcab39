"""Failure search on a surrogate: hill climbing and the genetic algorithm (paper Alg. 1 and 2), random or
saliency-guided mutation, random or training-failure seeds, and the validity rules every candidate obeys.

Fitness is the surrogate's failure score in [0, 1] (higher = more likely to fail; for a regressor it is
1 - prediction, so maximising it is the paper's "minimise the prediction").

Budget per generated input: the search stops at the first of ``max_iterations`` (hill-climbing neighbourhoods
or GA generations) and ``time_budget_s`` of wall-clock time (the paper's B). Without a time limit the search is
a function of the random generator alone (deterministic given the seed); with one, how far it gets depends on
the machine's speed.

Validity (paper: "the mutation is applied to e only if the new environment configuration e_i is valid"):
a candidate must fit the space's domains and the subject's cross-parameter rules (``Validity``). A mutation or
crossover whose result is invalid is retried (``TRIALS`` = 20 times, the authors' code constant); if no try is
valid the input stays as it was. Seeds and reseeds are valid by construction (rejection sampling, or training
failures checked when loaded).

Hill climbing (Alg. 1): from the seed, each iteration builds ``neighbourhood`` mutants of the current solution
and moves to the best of them if it scores strictly higher (the current solution is one of the candidates).

Genetic algorithm (Alg. 2, with the authors' code for what the paper leaves open): population ``population``;
elitism keeps the best floor(``elitism`` * population) (at least one); parents by roulette-wheel selection
(fitness-proportional); single-point crossover over the parameters with probability ``crossover`` (both
children valid, else retried, else the copies stay); both children mutated; the children replace their parents
iff the better child is at least as good as the better parent. Stagnation: when the best fitness changes by
less than 0.005 for more than 10 % of ``max_iterations`` generations (10 without an iteration limit) in a
row, the 5 worst individuals are replaced each generation by new seeds (random, or training failures).

Mutation:

* random: one parameter chosen uniformly, mutated by mutation.py's operator of its kind (``mutate_one``), or by
  the subject's own operator for a parameter that has one (``Validity.operators``: Donkey's track, whose
  mutation and crossover are Indago's per-pair operators, subjects/donkey/track.py);
* saliency: captum Saliency of the failure score at the input, mapped back to parameters
  (encoding.Encoder.parameter_moves); the parameter with the largest attribution magnitude that can still
  move is changed: a number by U(0, scale * range) in the sign's direction (mutation.py ``mutate_towards``), a
  discrete parameter to the choice with the largest first-order gain; a parameter with its own ``directed``
  operator (Donkey's track: one pair's command or value, notes section 2.7) gets its candidates from it. When no
  attribution is usable (all zero) or no directed move gives a valid input, the mutation falls back to the
  random one.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.domain.rules import SubjectRules
from common.space import ParameterSpace, ParamValue
from generator_service.strategies.mutation import mutate_one, mutate_towards, mutate_value

TestInput = dict[str, ParamValue]
Check = Callable[[Mapping[str, ParamValue]], list[str]]
TRIALS = 20
RESEED_COUNT = 5
STAGNATION_TOLERANCE = 0.005
MAX_SAMPLING_TRIES = 10_000


class InvalidSearchResult(RuntimeError):
    """The search produced an input that breaks the space or the subject's rules (a bug; never returned)."""


# -- validity ---------------------------------------------------------------------------------------------
class Validity:
    """The space's domains plus any cross-parameter rules (a subject's validators), and the subject's own
    operators for parameters that have them (sampling, mutation, crossover; common/domain/operators.py)."""

    def __init__(
        self, space: ParameterSpace, rules: Sequence[Check] = (), operators: Mapping[str, Any] | None = None
    ) -> None:
        self.space = space
        self.rules = tuple(rules)
        self.operators: dict[str, Any] = dict(operators or {})

    def problems(self, values: Mapping[str, ParamValue]) -> list[str]:
        problems = self.space.violations(values)
        for rule in self.rules:
            problems += rule(values)
        return problems

    def ok(self, values: Mapping[str, ParamValue]) -> bool:
        if self.space.violations(values):
            return False
        return not any(rule(values) for rule in self.rules)

    def sample(self, rng: np.random.Generator) -> TestInput:
        for _ in range(MAX_SAMPLING_TRIES):
            values = self.space.sample(rng)
            for name, ops in self.operators.items():
                values[name] = ops.sample(rng)
            if not self.rules or self.ok(values):
                return values
        raise ValueError(f"no valid input in {MAX_SAMPLING_TRIES} uniform draws; check the subject's rules")

    def require(self, values: Mapping[str, ParamValue], what: str) -> TestInput:
        problems = self.problems(values)
        if problems:
            raise InvalidSearchResult(
                f"{what} produced an invalid input {dict(values)!r}: {'; '.join(problems)}; "
                "it is not returned (this is a bug in the search)"
            )
        return dict(values)


def subject_validity(space: ParameterSpace, subject: SubjectRules | None = None) -> Validity:
    """The Validity of a subject as its simulator declares it (DescribeEnvironment; common/domain/rules.py): the
    space, the subject's rules and its parameters' own operators, built by the plug-ins installed here.

    A rule or operator kind that is not installed here is a FailedPrecondition naming it: searching without it
    would propose inputs the subject refuses. Without ``subject`` (a strategy built outside a campaign, e.g. over
    a synthetic space), or for a subject without rules, only the space's domains apply.
    """
    if subject is None:
        return Validity(space)
    if subject.space.names != space.names:
        raise ValueError(
            f"the rules of subject {subject.subject!r} are over parameters {subject.space.names}, "
            f"not this space's {space.names}"
        )
    return Validity(space, [v.violations for v in subject.validators()], subject.parameter_operators())


# -- budget -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    max_iterations: int | None = 100
    time_budget_s: float | None = 0.5

    def __post_init__(self) -> None:
        if self.max_iterations is None and not self.time_budget_s:
            raise ValueError("a search needs max_iterations or time_budget_s (both are unlimited)")

    def start(self) -> Clock:
        return Clock(self, time.perf_counter())


@dataclass
class Clock:
    budget: Budget
    started: float

    def done(self, iterations: int) -> bool:
        if self.budget.max_iterations is not None and iterations >= self.budget.max_iterations:
            return True
        if self.budget.time_budget_s:
            return time.perf_counter() - self.started >= self.budget.time_budget_s
        return False


# -- mutation ---------------------------------------------------------------------------------------------
class Mutator:
    """Random or saliency-guided mutation of valid inputs into valid inputs (module docstring)."""

    def __init__(
        self, surrogate: Any, validity: Validity, rng: np.random.Generator, mode: str = "random", scale: float = 0.1
    ) -> None:
        if mode not in ("random", "saliency"):
            raise ValueError(f"mutation must be 'random' or 'saliency', got {mode!r}")
        self.surrogate = surrogate
        self.validity = validity
        self.rng = rng
        self.mode = mode
        self.scale = scale
        self.space = validity.space

    def attributions(self, inputs: Sequence[Mapping[str, ParamValue]]) -> np.ndarray | None:
        if self.mode != "saliency" or not inputs:
            return None
        return self.surrogate.saliency(self.surrogate.encoder.encode_many(inputs))

    def mutate(self, values: TestInput, attribution: np.ndarray | None = None) -> TestInput:
        if attribution is not None:
            directed = self.directed(values, attribution)
            if directed is not None:
                return directed
        return self.random(values)

    def random(self, values: TestInput) -> TestInput:
        for _ in range(TRIALS):
            child = self._mutate_one(values)
            if self.validity.ok(child):
                return child
        return dict(values)

    def _mutate_one(self, values: TestInput) -> TestInput:
        owned = self.validity.operators
        if not owned:
            return mutate_one(self.space, values, self.rng, scale=self.scale)
        param = self.space.parameters[int(self.rng.integers(len(self.space.parameters)))]
        child = dict(values)
        if param.name in owned:
            child[param.name] = owned[param.name].mutate(values[param.name], self.rng)
        else:
            child[param.name] = mutate_value(param, values[param.name], self.rng, scale=self.scale, p=1.0)
        return child

    def neighbours(self, values: TestInput, attribution: np.ndarray | None, count: int) -> list[TestInput]:
        """``count`` mutants of ``values`` (a hill-climbing neighbourhood), as ``count`` calls of ``mutate`` give.

        The saliency ranking depends on ``values`` and the attribution only, so it is computed once for the
        whole neighbourhood rather than per neighbour (it was a third of a Parking search's time).
        """
        if attribution is None:
            return [self.random(values) for _ in range(count)]
        ranked = self._ranked(values, attribution)
        return [self._first_valid(values, ranked) or self.random(values) for _ in range(count)]

    def directed(self, values: TestInput, attribution: np.ndarray) -> TestInput | None:
        """The saliency move (best valid one), or None when no move is usable.

        Candidates come from the encoder's per-parameter moves and, for a parameter with its own ``directed``
        operator (Donkey's track), from that operator fed with the parameter's slice of the attribution; they are
        tried in order of attribution magnitude (a block's largest entry for an owned parameter).
        """
        return self._first_valid(values, self._ranked(values, attribution))

    def _ranked(self, values: TestInput, attribution: np.ndarray) -> list[Callable[[], Iterator[TestInput]]]:
        g = np.asarray(attribution, dtype=np.float64).reshape(-1)
        ranked: list[tuple[float, Callable[[], Iterator[TestInput]]]] = [
            (move.score, functools.partial(self._scalar_children, values, move))
            for move in self.surrogate.encoder.parameter_moves(g, values)
        ]
        for block in self.surrogate.encoder.blocks:
            ops = self.validity.operators.get(block.param.name)
            if ops is not None and ops.directed is not None and block.stop > block.start:
                part = g[block.start : block.stop]
                ranked.append(
                    (
                        float(np.max(np.abs(part))),
                        functools.partial(self._owned_children, values, block.param.name, ops, part),
                    )
                )
        ranked.sort(key=lambda item: -item[0])  # stable: ties keep the encoder's order
        return [children for _, children in ranked]

    def _first_valid(self, values: TestInput, ranked: Sequence[Callable[[], Iterator[TestInput]]]) -> TestInput | None:
        for children in ranked:
            for child in children():
                if child != values and self.validity.ok(child):
                    return child
        return None

    def _scalar_children(self, values: TestInput, move: Any) -> Iterator[TestInput]:
        param = self.space[move.name]
        seen = [values[move.name]]
        tries = TRIALS if move.target is None else 1
        if param.kind == "integer" and self.scale * (param.bounds[1] - param.bounds[0]) < 1.5:
            tries = 1  # the move is always exactly one step: one child to try
        for _ in range(tries):
            if move.target is None:
                value = mutate_towards(param, values[move.name], self.rng, move.direction, self.scale)
            else:
                value = move.target
            if value in seen:  # e.g. a 0/1 flag always moves by one step: that child's validity is known already
                continue
            seen.append(value)
            yield {**values, move.name: value}

    def _owned_children(self, values: TestInput, name: str, ops: Any, part: np.ndarray) -> Iterator[TestInput]:
        for value in ops.directed(values[name], part, self.rng):
            yield {**values, name: value}


def crossover(
    a: TestInput, b: TestInput, names: Sequence[str], rng: np.random.Generator, validity: Validity
) -> tuple[TestInput, TestInput]:
    """Single-point crossover over the parameters; the copies when no cut gives two valid children.

    A space of one parameter with its own crossover (Donkey's track: a cut over its 12 pairs) uses that instead.
    """
    if len(names) == 1 and names[0] in validity.operators:
        name = names[0]
        children = validity.operators[name].crossover(a[name], b[name], rng)
        if children is not None:
            c1, c2 = {**a, name: children[0]}, {**b, name: children[1]}
            if validity.ok(c1) and validity.ok(c2):
                return c1, c2
        return dict(a), dict(b)
    if len(names) < 2:
        return dict(a), dict(b)
    for _ in range(TRIALS):
        cut = int(rng.integers(1, len(names)))
        c1 = {n: (a[n] if i < cut else b[n]) for i, n in enumerate(names)}
        c2 = {n: (b[n] if i < cut else a[n]) for i, n in enumerate(names)}
        if validity.ok(c1) and validity.ok(c2):
            return c1, c2
    return dict(a), dict(b)


# -- the searches -----------------------------------------------------------------------------------------
Fitness = Callable[[Sequence[Mapping[str, ParamValue]]], np.ndarray]


@dataclass
class Found:
    values: TestInput
    score: float
    iterations: int
    evaluations: int


def hill_climb(seed: TestInput, fitness: Fitness, mutator: Mutator, neighbourhood: int, budget: Budget) -> Found:
    current = dict(seed)
    score = float(fitness([current])[0])
    evaluations, iterations = 1, 0
    clock = budget.start()
    while not clock.done(iterations):
        attribution = mutator.attributions([current])
        row = None if attribution is None else attribution[0]
        neighbours = mutator.neighbours(current, row, neighbourhood)
        scores = fitness(neighbours)
        evaluations += len(neighbours)
        best = int(np.argmax(scores))
        if scores[best] > score:
            current, score = neighbours[best], float(scores[best])
        iterations += 1
    return Found(current, score, iterations, evaluations)


def roulette(fitness: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    weights = np.clip(np.asarray(fitness, dtype=np.float64), 0.0, None) + 1e-12
    return rng.choice(len(weights), size=k, replace=True, p=weights / weights.sum())


def genetic(
    population: Sequence[TestInput],
    fitness: Fitness,
    mutator: Mutator,
    *,
    crossover_rate: float,
    elitism: float,
    budget: Budget,
    reseed: Callable[[int], list[TestInput]],
) -> Found:
    pop = [dict(p) for p in population]
    size = len(pop)
    if size < 2:
        raise ValueError(f"the genetic algorithm needs a population of at least 2, got {size}")
    fit = np.asarray(fitness(pop), dtype=np.float64)
    evaluations, generation, stagnant = size, 0, 0
    names = mutator.space.names
    rng = mutator.rng
    n_elite = min(size, max(1, int(math.floor(elitism * size + 1e-9)))) if elitism > 0 else 0
    patience = max(1, int(0.1 * budget.max_iterations)) if budget.max_iterations else 10
    clock = budget.start()
    while not clock.done(generation):
        best_before = float(fit.max())
        order = np.argsort(-fit, kind="stable")
        new_pop = [pop[i] for i in order[:n_elite]]
        new_fit = [float(fit[i]) for i in order[:n_elite]]
        n_pairs = (size - n_elite + 1) // 2
        parents = roulette(fit, 2 * n_pairs, rng).reshape(n_pairs, 2)
        children: list[TestInput] = []
        for i, j in parents:
            c1, c2 = dict(pop[i]), dict(pop[j])
            if rng.random() < crossover_rate:
                c1, c2 = crossover(c1, c2, names, rng, mutator.validity)
            children += [c1, c2]
        attributions = mutator.attributions(children)
        children = [
            mutator.mutate(c, None if attributions is None else attributions[k]) for k, c in enumerate(children)
        ]
        child_fit = np.asarray(fitness(children), dtype=np.float64)
        evaluations += len(children)
        for k, (i, j) in enumerate(parents):
            if max(child_fit[2 * k], child_fit[2 * k + 1]) >= max(fit[i], fit[j]):
                new_pop += [children[2 * k], children[2 * k + 1]]
                new_fit += [float(child_fit[2 * k]), float(child_fit[2 * k + 1])]
            else:
                new_pop += [dict(pop[i]), dict(pop[j])]
                new_fit += [float(fit[i]), float(fit[j])]
        pop, fit = new_pop[:size], np.asarray(new_fit[:size])
        generation += 1
        stagnant = stagnant + 1 if abs(float(fit.max()) - best_before) < STAGNATION_TOLERANCE else 0
        if stagnant > patience:
            count = min(RESEED_COUNT, size - n_elite)
            fresh = reseed(count)
            if fresh:
                worst = np.argsort(fit, kind="stable")[: len(fresh)]
                fresh_fit = np.asarray(fitness(fresh), dtype=np.float64)
                evaluations += len(fresh)
                for slot, values, f in zip(worst, fresh, fresh_fit):
                    pop[slot], fit[slot] = dict(values), float(f)
    best = int(np.argmax(fit))
    return Found(pop[best], float(fit[best]), generation, evaluations)


def sample_best(
    fitness: Fitness,
    validity: Validity,
    rng: np.random.Generator,
    candidates: int,
    time_budget_s: float | None,
    chunk: int = 250,
) -> Found:
    """The sampling baseline: the highest-scoring of up to ``candidates`` valid random inputs (time permitting)."""
    clock = Budget(max_iterations=None if not candidates else int(candidates), time_budget_s=time_budget_s).start()
    best: TestInput | None = None
    best_score = -np.inf
    drawn = 0
    while best is None or not clock.done(drawn):
        k = chunk if not candidates else min(chunk, int(candidates) - drawn)
        batch = [validity.sample(rng) for _ in range(max(k, 1))]
        scores = fitness(batch)
        drawn += len(batch)
        j = int(np.argmax(scores))
        if scores[j] > best_score:
            best, best_score = batch[j], float(scores[j])
    return Found(best, best_score, drawn, drawn)
