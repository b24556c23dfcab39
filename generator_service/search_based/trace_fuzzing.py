"""Step 3 of search-based testing of RL: trace fuzzing with a genetic algorithm, as a campaign strategy.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022), Section 5. The population starts from the
reference action trace alone; each generation is p offspring, each by one-point crossover of two parents (with
probability p_cross) or by mutation of one, parents drawn with probability proportional to their fitness
(roulette wheel). A mutation applies insert / remove / change / append of x ∈ {1..ms} random actions at a random
index (append: at the end), and stops after each application with probability p_mstop. Fitness:

    F = λ_cov·fc + λ_pos·r_pos + λ_neg·(1 − |r_neg|)

with fc the trace's newly visited abstract states (not in any earlier generation: the prose's reading; the printed
set difference is reversed), r_pos its positive reward and r_neg its negative reward, each divided by the largest in
its generation. The fittest trace of each generation is kept (T_fit, the benchmark of performance testing).

Traces are executed open loop with no agent step (ActionTrace.agent_steps = 0), batched through RunEpisodes; run
with the oracle ``trace_outcome``, whose descriptors are (positive reward, negative reward, visited-state hashes).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import Field

from common.generated.gauntlet.v1 import generator_pb2, simulator_pb2
from common.space import ParameterSpace
from common.test_case import TestCase, trace_case
from generator_service.search_based.artifact import read_reference
from generator_service.search_based.suites import SOURCE, ArtifactPath, reference_field
from generator_service.strategies.base import Result
from generator_service.strategies.params import Integer, Number, StrategyParams

Trace = list[int]
OPERATORS = ("insert", "remove", "change", "append")


def mutate(trace: Trace, actions: int, rng: np.random.Generator, effect_size: int, stop: float) -> Trace:
    """Applies random operators (each on x ∈ {1..effect_size} actions) until one stops, with probability `stop`.
    The result is never empty and holds only actions in 0..actions-1."""
    out = list(trace)
    while True:
        x = int(rng.integers(1, effect_size + 1))
        operator = OPERATORS[int(rng.integers(len(OPERATORS)))]
        new = [int(a) for a in rng.integers(actions, size=x)]
        if operator == "remove" and len(out) <= 1:
            operator = "append"  # nothing to remove: a trace stays non-empty
        if operator == "append":
            out = out + new
        elif operator == "insert":
            at = int(rng.integers(len(out) + 1))
            out = out[:at] + new + out[at:]
        elif operator == "remove":
            x = min(x, len(out) - 1)
            at = int(rng.integers(len(out) - x + 1))
            out = out[:at] + out[at + x :]
        else:  # change: x actions from a random index (fewer at the end)
            at = int(rng.integers(len(out)))
            out = out[:at] + new[: len(out) - at] + out[at + len(new[: len(out) - at]) :]
        if rng.random() < stop:
            return out


def crossover(first: Trace, second: Trace, rng: np.random.Generator) -> Trace:
    """One-point crossover: the first i actions of `first`, then `second` from position i on, i uniform in
    {1..min(|first|, |second|) − 1}; a copy of `first` when either is too short to cut."""
    shortest = min(len(first), len(second))
    if shortest < 2:
        return list(first)
    i = int(rng.integers(1, shortest))
    return list(first[:i]) + list(second[i:])


def fitness(
    positive: Sequence[float], negative: Sequence[float], new_states: Sequence[int], weights: tuple[float, float, float]
) -> list[float]:
    """F per trace of one generation, each term normalised by the generation's largest."""
    top_pos, top_neg, top_new = (
        max(positive, default=0.0),
        max(map(abs, negative), default=0.0),
        max(new_states, default=0),
    )
    out = []
    for pos, neg, new in zip(positive, negative, new_states):
        fc = new / top_new if top_new else 0.0
        r_pos = pos / top_pos if top_pos > 0 else 0.0
        r_neg = abs(neg) / top_neg if top_neg > 0 else 0.0
        out.append(weights[0] * fc + weights[1] * r_pos + weights[2] * (1 - r_neg))
    return out


class TraceFuzzingParams(StrategyParams):
    reference: ArtifactPath = reference_field()
    generations: Integer = Field(50, ge=1, le=10_000, description="g: generations")
    population: Integer = Field(50, ge=2, le=10_000, description="p: offspring per generation")
    crossover: Number = Field(0.25, ge=0.0, le=1.0, description="p_cross: probability an offspring is a crossover")
    effect_size: Integer = Field(15, ge=1, le=10_000, description="ms: a mutation operator changes 1..ms actions")
    mutation_stop: Number = Field(0.2, gt=0.0, le=1.0, description="p_mstop: stop probability after each operator")
    weight_coverage: Number = Field(2.0, ge=0.0, description="λ_cov")
    weight_positive: Number = Field(1.5, ge=0.0, description="λ_pos")
    weight_negative: Number = Field(1.0, ge=0.0, description="λ_neg")


class TraceFuzzing:
    """Trace fuzzing of search-based testing of RL: a genetic algorithm over action traces seeded with the DFS's
    reference trace, rewarding new states, positive reward and little negative reward; keeps each generation's
    fittest trace."""

    source = f"{SOURCE}, Section 5"
    Params = TraceFuzzingParams

    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        params: TraceFuzzingParams,
        search: simulator_pb2.SearchDeclaration | None = None,
    ) -> None:
        if not params.reference:
            raise ValueError("strategy parameter reference is required: the DFS's reference artifact")
        self.reference = read_reference(Path(params.reference))
        self.params, self.rng = params, rng
        self.actions = int(self.reference["agent_actions"])
        self.weights = (params.weight_coverage, params.weight_positive, params.weight_negative)
        self.covered: set[float] = set()  # Cov_ppop: states every earlier generation visited
        self.generation = 0  # 0: the seed τ_A,ref alone
        self.parents: list[Trace] = []
        self.parent_fitness: list[float] = []
        self.offspring: list[Trace] = [[int(a) for a in self.reference["reference_actions"]]]
        self.results: list[Result] = []
        self.asked = 0
        self.fittest: list[tuple[Trace, float]] = []  # T_fit, one per generation

    def _input(self, trace: Trace) -> TestCase:
        return trace_case(self.reference["initial"], trace, 0, int(self.reference["seed"]), generation=self.generation)

    def ask(self, n: int) -> list[TestCase]:
        if self.asked == len(self.offspring) and len(self.results) == len(self.offspring):
            if self.generation >= self.params.generations:
                return []
            self._next_generation()
        batch = self.offspring[self.asked : self.asked + n]
        self.asked += len(batch)
        return [self._input(t) for t in batch]

    def tell(self, results: Sequence[Result]) -> None:
        self.results.extend(results)
        if len(self.results) < len(self.offspring):
            return
        # a generation is complete: score it against the states earlier generations covered, then cover its own
        traces = [list(r.action_trace.actions) if r.action_trace else [] for r in self.results]
        visited = [set(r.descriptors[2:]) for r in self.results]
        scores = fitness(
            [r.descriptors[0] if r.descriptors else 0.0 for r in self.results],
            [r.descriptors[1] if len(r.descriptors) > 1 else 0.0 for r in self.results],
            [len(v - self.covered) for v in visited],
            self.weights,
        )
        for v in visited:
            self.covered |= v
        best = int(np.argmax(scores))
        if self.generation > 0:
            self.fittest.append((traces[best], scores[best]))
        self.parents, self.parent_fitness = traces, scores

    def _next_generation(self) -> None:
        self.generation += 1
        weights = np.asarray(self.parent_fitness, dtype=float)
        probs = weights / weights.sum() if weights.sum() > 0 else np.full(len(weights), 1 / len(weights))
        children = []
        for _ in range(self.params.population):
            if self.rng.random() < self.params.crossover:
                a, b = self.rng.choice(len(self.parents), size=2, p=probs)
                children.append(crossover(self.parents[int(a)], self.parents[int(b)], self.rng))
            else:
                parent = self.parents[int(self.rng.choice(len(self.parents), p=probs))]
                children.append(
                    mutate(parent, self.actions, self.rng, self.params.effect_size, self.params.mutation_stop)
                )
        self.offspring, self.results, self.asked = children, [], 0


def fittest_traces(
    executions: Sequence[generator_pb2.Execution], weights: tuple[float, float, float] = (2.0, 1.5, 1.0)
) -> list[Trace]:
    """T_fit rebuilt from a fuzzing campaign's stored executions: generation by generation (the `generation` label),
    the same fitness the strategy computed against the states earlier generations covered; generation 0 (the seed
    τ_ref alone) is not part of it, as in the strategy."""
    by_generation: dict[int, list[generator_pb2.Execution]] = {}
    for e in executions:
        by_generation.setdefault(int(e.test_case.action_trace.labels.get("generation", "0")), []).append(e)
    covered: set[float] = set()
    out: list[Trace] = []
    for generation in sorted(by_generation):
        rows = by_generation[generation]
        visited = [set(r.descriptors[2:]) for r in rows]
        scores = fitness(
            [r.descriptors[0] if r.descriptors else 0.0 for r in rows],
            [r.descriptors[1] if len(r.descriptors) > 1 else 0.0 for r in rows],
            [len(v - covered) for v in visited],
            weights,
        )
        for v in visited:
            covered |= v
        if generation > 0:
            out.append([int(a) for a in rows[int(np.argmax(scores))].test_case.action_trace.actions])
    return out
