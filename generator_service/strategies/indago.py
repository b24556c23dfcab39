"""Indago: surrogate-guided failure search, and its two baselines (sampling, training-failure replay).

Source: "Testing of Deep Reinforcement Learning Agents with Surrogate Models" (tool Indago); extraction in
shared/notes/000. A surrogate trained on the agent's own training episodes (``gauntlet surrogate train``,
generator_service/surrogates/) predicts how likely an input makes the agent fail; each asked input is the
result of one search on that prediction, so the agent only runs on the most promising inputs.

Strategies:

* ``indago``: one search per asked input (generator_service/surrogates/search.py has the algorithms).
  Parameters:

  - ``surrogate`` (required): the artifact folder written by ``gauntlet surrogate train``;
  - ``search``: "hill_climbing" (Alg. 1) or "genetic" (Alg. 2);
  - ``seeds``: "random" (valid uniform inputs) or "training_failures" (configs that failed during training,
    after dropping the first ``failure_filter`` = 30 % of the episodes, as the paper). Hill climbing starts
    each search from the next failure of a shuffled list (all are used before any repeats); the GA draws its
    population from them (without replacement when there are enough) and reseeds from them on stagnation;
  - ``mutation``: "random" (one uniformly chosen parameter) or "saliency" (captum Saliency on the surrogate);
  - ``setting``: a shortcut for the three above by the paper's 8 names::

        hc_rnd      = hill_climbing, random,            random
        hc_fail     = hill_climbing, training_failures, random
        hc_sal+rnd  = hill_climbing, random,            saliency
        hc_sal+fail = hill_climbing, training_failures, saliency
        ga_rnd / ga_fail / ga_sal+rnd / ga_sal+fail: the same with genetic

    A setting together with an explicit, different ``search``/``seeds``/``mutation`` is refused.
    With neither: hill_climbing + random seeds + saliency (``hc_sal+rnd``): the setting the paper runs with
    both kinds of surrogate (RQ4), and one that works with every artifact (failure seeds need failures).
  - ``neighbourhood`` 50 (hill climbing), ``population`` 50, ``crossover`` 0.75, ``elitism`` 0.05 (GA): the
    authors' code defaults (the paper gives no values);
  - ``time_budget_s`` 0 (off) by default: a wall-clock limit makes the inputs depend on the machine's speed,
    and a campaign must be reproducible from its seed (``gauntlet resume`` replays it). The paper's budget B
    per generated input (5-30 s on expensive simulators) is one parameter away, e.g. 0.5;
  - ``max_iterations`` 100: neighbourhoods (HC) or generations (GA) per input, the authors' code limits. The
    search stops at whichever limit comes first;
  - ``mutation_scale`` 0.1: a mutated number moves by up to 10 % of its range (the paper's operators move by
    5 % (Parking position) to 100 % (heading) of a range);
  - ``failure_filter`` 30: the percentage of early episodes whose failures are not used as seeds.

* ``indago_sampling`` (the paper's "sampling" baseline, Uesato et al.): for each asked input, draws up to
  ``candidates`` = 1000 valid random inputs (the authors' SAMPLING_SIZE; ``time_budget_s`` off) and returns
  the one the surrogate rates most likely to fail.
* ``train_fail_replay`` (the paper's "train. fail." baseline): replays the configs that failed during training,
  without the first ``failure_filter`` = 30 % of the episodes, in a seeded random order without repeats; asks
  return nothing once all are replayed. The failures come from ``surrogate`` (an artifact folder) or ``log``
  (a training_log.jsonl.gz).

Every returned input is checked against the space and the subject's validity rules; a search that produced
an invalid input raises ``InvalidSearchResult`` instead of returning it. Replayed failures that do not fit the
space are refused at construction (the artifact or log belongs to another subject). None of this learns
online: ``tell`` ignores results. torch and captum are imported when a strategy is built, not when this
module is imported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.space import ParameterSpace
from generator_service.strategies.base import Result, StrategyParamError, TestInput, register_strategy

SOURCE = "Testing of Deep Reinforcement Learning Agents with Surrogate Models (Indago), Alg. 1-2; shared/notes/000"
SEARCHES = ("hill_climbing", "genetic")
SEEDS = ("random", "training_failures")
MUTATIONS = ("random", "saliency")
SETTINGS: dict[str, tuple[str, str, str]] = {
    "hc_rnd": ("hill_climbing", "random", "random"),
    "hc_fail": ("hill_climbing", "training_failures", "random"),
    "hc_sal+rnd": ("hill_climbing", "random", "saliency"),
    "hc_sal+fail": ("hill_climbing", "training_failures", "saliency"),
    "ga_rnd": ("genetic", "random", "random"),
    "ga_fail": ("genetic", "training_failures", "random"),
    "ga_sal+rnd": ("genetic", "random", "saliency"),
    "ga_sal+fail": ("genetic", "training_failures", "saliency"),
}
DEFAULT_SETTING = "hc_sal+rnd"


# -- parameter checks (numbers may arrive as floats: campaign params travel as a protobuf Struct) ------------
def _int(strategy: str, name: str, value: Any, minimum: int) -> int:
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    if ok:
        ok = math.isfinite(float(value)) and float(value) == int(value) and int(value) >= minimum
    if not ok:
        raise StrategyParamError(f"{strategy} parameter {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _float(strategy: str, name: str, value: Any, low: float, high: float = math.inf) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    if ok:
        ok = math.isfinite(float(value)) and low <= float(value) <= high
    if not ok:
        where = f">= {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
        raise StrategyParamError(f"{strategy} parameter {name} must be a number {where}, got {value!r}")
    return float(value)


def _choice(strategy: str, name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise StrategyParamError(f"{strategy} parameter {name} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _time_budget(strategy: str, value: Any) -> float | None:
    if value is None:
        return None
    return _float(strategy, "time_budget_s", value, 0.0) or None


def _max_iterations(strategy: str, value: Any) -> int | None:
    return None if value is None else _int(strategy, "max_iterations", value, 1)


def resolve_setting(setting: Any, search: Any, seeds: Any, mutation: Any) -> tuple[str, str, str]:
    """(search, seeds, mutation) from the ``setting`` shortcut and the explicit parameters (module docstring)."""
    if setting is not None:
        name = _choice("indago", "setting", setting, list(SETTINGS))
        implied = SETTINGS[name]
        for label, given, want in zip(("search", "seeds", "mutation"), (search, seeds, mutation), implied):
            if given is not None and given != want:
                raise StrategyParamError(
                    f"indago parameter {label}={given!r} contradicts setting {name!r} "
                    f"({label}={want!r}); give one or the other"
                )
        return implied
    base = SETTINGS[DEFAULT_SETTING]
    return (
        _choice("indago", "search", search if search is not None else base[0], SEARCHES),
        _choice("indago", "seeds", seeds if seeds is not None else base[1], SEEDS),
        _choice("indago", "mutation", mutation if mutation is not None else base[2], MUTATIONS),
    )


def open_surrogate(strategy: str, path: Any, space: ParameterSpace) -> Any:
    """The artifact at ``path``, checked against ``space``; StrategyParamError names what is wrong."""
    from generator_service.surrogates.artifact import load_surrogate

    if path is None or path == "":
        raise StrategyParamError(
            f"strategy {strategy} needs parameter surrogate: the folder of a trained "
            "surrogate (train one with `gauntlet surrogate train --model NAME`)"
        )
    if not isinstance(path, (str, Path)):
        raise StrategyParamError(f"{strategy} parameter surrogate must be a folder path, got {path!r}")
    try:
        surrogate = load_surrogate(path)
        surrogate.check_space(space)
    except ValueError as exc:
        raise StrategyParamError(f"{strategy} parameter surrogate: {exc}") from None
    return surrogate


def checked_failures(strategy: str, failures: list[dict[str, Any]], validity: Any, where: str) -> list[TestInput]:
    for values in failures:
        problems = validity.problems(values)
        if problems:
            raise StrategyParamError(
                f"{strategy}: a training failure in {where} is not a valid input of this "
                f"space ({'; '.join(problems)}); was it recorded for another subject?"
            )
    return [dict(v) for v in failures]


@register_strategy(
    "indago",
    "Indago: per input, a hill-climbing or genetic search on a surrogate failure predictor trained on "
    "the agent's training episodes (random/saliency mutation, random/training-failure seeds).",
    source=SOURCE,
    surrogate=None,
    setting=None,
    search=None,
    seeds=None,
    mutation=None,
    neighbourhood=50,
    population=50,
    crossover=0.75,
    elitism=0.05,
    time_budget_s=0.0,
    max_iterations=100,
    mutation_scale=0.1,
    failure_filter=30,
)
class Indago:
    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        surrogate: Any = None,
        setting: Any = None,
        search: Any = None,
        seeds: Any = None,
        mutation: Any = None,
        neighbourhood: Any = 50,
        population: Any = 50,
        crossover: Any = 0.75,
        elitism: Any = 0.05,
        time_budget_s: Any = 0.0,
        max_iterations: Any = 100,
        mutation_scale: Any = 0.1,
        failure_filter: Any = 30,
    ) -> None:
        from generator_service.surrogates.search import Budget, Mutator, subject_validity

        name = "indago"
        self.search, self.seeds, self.mutation = resolve_setting(setting, search, seeds, mutation)
        self.neighbourhood = _int(name, "neighbourhood", neighbourhood, 1)
        self.population = _int(name, "population", population, 2)
        self.crossover = _float(name, "crossover", crossover, 0.0, 1.0)
        self.elitism = _float(name, "elitism", elitism, 0.0, 1.0)
        scale = _float(name, "mutation_scale", mutation_scale, 0.0, 1.0)
        self.failure_filter = _float(name, "failure_filter", failure_filter, 0.0, 99.999)
        try:
            self.budget = Budget(_max_iterations(name, max_iterations), _time_budget(name, time_budget_s))
        except ValueError as exc:
            raise StrategyParamError(f"{name}: {exc}") from None
        self.space = space
        self.rng = rng
        self.surrogate = open_surrogate(name, surrogate, space)
        self.validity = subject_validity(self.surrogate.subject, space)
        self.mutator = Mutator(self.surrogate, self.validity, rng, self.mutation, scale)
        self.failures: list[TestInput] = []
        if self.seeds == "training_failures":
            self.failures = checked_failures(
                name, self.surrogate.training_failures(self.failure_filter), self.validity, str(self.surrogate.path)
            )
            if not self.failures:
                raise StrategyParamError(
                    f"indago seeds='training_failures': surrogate {self.surrogate.path} records no failure after the "
                    f"first {self.failure_filter:g} % of training; use seeds='random' (or a lower failure_filter)"
                )
        self._queue: list[int] = []
        self.last: Any = None  # the Found of the last search (score, iterations, evaluations)

    # -- seeds -------------------------------------------------------------------------------------
    def _next_failure(self) -> TestInput:
        if not self._queue:
            self._queue = list(self.rng.permutation(len(self.failures)))
        return dict(self.failures[self._queue.pop()])

    def _seed(self) -> TestInput:
        return self._next_failure() if self.seeds == "training_failures" else self.validity.sample(self.rng)

    def _reseed(self, k: int) -> list[TestInput]:
        if self.seeds == "training_failures":
            idx = self.rng.integers(len(self.failures), size=k)
            return [dict(self.failures[i]) for i in idx]
        return [self.validity.sample(self.rng) for _ in range(k)]

    def _initial_population(self) -> list[TestInput]:
        if self.seeds == "training_failures":
            replace = len(self.failures) < self.population
            idx = self.rng.choice(len(self.failures), size=self.population, replace=replace)
            return [dict(self.failures[i]) for i in idx]
        return [self.validity.sample(self.rng) for _ in range(self.population)]

    # -- ask/tell ----------------------------------------------------------------------------------
    def _fitness(self, inputs: Sequence[TestInput]) -> np.ndarray:
        return self.surrogate.score_inputs(inputs)

    def ask(self, n: int) -> list[TestInput]:
        from generator_service.surrogates.search import genetic, hill_climb

        out = []
        for _ in range(n):
            if self.search == "hill_climbing":
                found = hill_climb(self._seed(), self._fitness, self.mutator, self.neighbourhood, self.budget)
            else:
                found = genetic(
                    self._initial_population(),
                    self._fitness,
                    self.mutator,
                    crossover_rate=self.crossover,
                    elitism=self.elitism,
                    budget=self.budget,
                    reseed=self._reseed,
                )
            self.last = found
            out.append(self.validity.require(found.values, f"indago ({self.search})"))
        return out

    def tell(self, results: Sequence[Result]) -> None:
        """Indago does not learn from executions."""


@register_strategy(
    "indago_sampling",
    "Sampling baseline (Indago paper): per input, the random valid input the surrogate rates "
    "most likely to fail among up to `candidates` draws within the time budget.",
    source=SOURCE + "; baseline after Uesato et al.",
    surrogate=None,
    candidates=1000,
    time_budget_s=0.0,
)
class IndagoSampling:
    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        surrogate: Any = None,
        candidates: Any = 1000,
        time_budget_s: Any = 0.0,
    ) -> None:
        from generator_service.surrogates.search import subject_validity

        name = "indago_sampling"
        self.candidates = _int(name, "candidates", candidates, 1)
        self.time_budget_s = _time_budget(name, time_budget_s)
        self.rng = rng
        self.surrogate = open_surrogate(name, surrogate, space)
        self.validity = subject_validity(self.surrogate.subject, space)
        self.last: Any = None

    def ask(self, n: int) -> list[TestInput]:
        from generator_service.surrogates.search import sample_best

        out = []
        for _ in range(n):
            found = sample_best(
                self.surrogate.score_inputs, self.validity, self.rng, self.candidates, self.time_budget_s
            )
            self.last = found
            out.append(self.validity.require(found.values, "indago_sampling"))
        return out

    def tell(self, results: Sequence[Result]) -> None:
        """Sampling does not learn from executions."""


@register_strategy(
    "train_fail_replay",
    "Training-failure replay baseline (Indago paper): the inputs that failed during training "
    "after the first `failure_filter` % of episodes, in seeded random order, each once.",
    source=SOURCE + "; 'train. fail.' baseline",
    surrogate=None,
    log=None,
    failure_filter=30,
)
class TrainFailReplay:
    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        surrogate: Any = None,
        log: Any = None,
        failure_filter: Any = 30,
    ) -> None:
        from generator_service.surrogates.search import Validity, subject_rules

        name = "train_fail_replay"
        percent = _float(name, "failure_filter", failure_filter, 0.0, 99.999)
        if (surrogate is None) == (log is None):
            raise StrategyParamError(
                f"{name} needs exactly one of surrogate (an artifact folder) or log "
                "(a training_log.jsonl.gz) to take the training failures from"
            )
        if surrogate is not None:
            from generator_service.surrogates.artifact import artifact_failures, read_meta

            try:
                meta = read_meta(surrogate)
                failures = artifact_failures(Path(surrogate), meta, percent)
            except ValueError as exc:
                raise StrategyParamError(f"{name} parameter surrogate: {exc}") from None
            rules = subject_rules(meta["subject"], space)
            where = str(surrogate)
        else:
            from generator_service.surrogates.dataset import filtered_count, load_interaction_log

            try:
                data = load_interaction_log(log)
            except ValueError as exc:
                raise StrategyParamError(f"{name} parameter log: {exc}") from None
            first = filtered_count(len(data), percent)
            failures = [c for i, c in enumerate(data.configs) if i >= first and data.failed[i]]
            rules = []
            where = str(log)
        self.validity = Validity(space, rules)
        self.failures = checked_failures(name, failures, self.validity, where)
        self.order = [int(i) for i in rng.permutation(len(self.failures))]
        self.position = 0

    def ask(self, n: int) -> list[TestInput]:
        picked = self.order[self.position : self.position + n]
        self.position += len(picked)
        return [dict(self.failures[i]) for i in picked]

    def tell(self, results: Sequence[Result]) -> None:
        """Replay does not learn from executions."""
