"""Indago: surrogate-guided failure search, and its two baselines (sampling, training-failure replay).

Source: "Testing of Deep Reinforcement Learning Agents with Surrogate Models" (tool Indago), Alg. 1-2. A
surrogate trained on the agent's own training episodes (``gauntlet surrogate train``,
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
an invalid input raises ``InvalidSearchResult`` instead of returning it. The rules, and the subject's own
operators for parameters that have them (Donkey's track), come from the campaign as the keyword
``subject_rules``: what the simulator declared in DescribeEnvironment (common/domain/rules.py), never a subject
file of the generator's own. A rule or operator kind not installed in the generator is a FAILED_PRECONDITION
naming it; built without ``subject_rules`` (outside a campaign), a strategy respects the space's domains only.
Replayed failures that do not fit the space and rules are refused at construction (the artifact or log belongs
to another subject). None of this learns online: ``tell`` ignores results. torch and captum are imported when a
strategy is built, not when this module is imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, model_validator

from common.domain.rules import SubjectRules
from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput
from generator_service.strategies.params import (
    ARTIFACT_PATH,
    Count,
    Integer,
    Number,
    StrategyParamError,
    StrategyParams,
)

SOURCE = "Testing of Deep Reinforcement Learning Agents with Surrogate Models (Indago), Alg. 1-2"
SearchName = Literal["hill_climbing", "genetic"]
SeedsName = Literal["random", "training_failures"]
MutationName = Literal["random", "saliency"]
SettingName = Literal[
    "hc_rnd", "hc_fail", "hc_sal+rnd", "hc_sal+fail", "ga_rnd", "ga_fail", "ga_sal+rnd", "ga_sal+fail"
]
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


# -- parameter schemas (module docstring) -------------------------------------------------------------------
def _path_text(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


FolderPath = Annotated[str, BeforeValidator(_path_text)]


def surrogate_field() -> Any:
    return Field(
        None,
        description="folder of a trained surrogate (`gauntlet surrogate train --model NAME`)",
        json_schema_extra={"allowed": "a folder path", ARTIFACT_PATH: True},
    )


def failure_filter_field() -> Any:
    return Field(30.0, ge=0.0, le=99.999, description="percentage of early training episodes whose failures are unused")


def time_budget_field() -> Any:
    return Field(0.0, ge=0.0, description="wall-clock seconds per input; 0 = no time limit (reproducible)")


class IndagoParams(StrategyParams):
    surrogate: FolderPath | None = surrogate_field()
    setting: SettingName | None = Field(None, description="the paper's name for a search, seeds and mutation")
    search: SearchName | None = Field(None, description="Alg. 1 (hill climbing) or Alg. 2 (genetic)")
    seeds: SeedsName | None = Field(None, description="where searches start")
    mutation: MutationName | None = Field(None, description="which parameter a mutation moves")
    neighbourhood: Integer = Field(50, ge=1, description="neighbours per hill-climbing step")
    population: Integer = Field(50, ge=2, description="GA population")
    crossover: Number = Field(0.75, ge=0.0, le=1.0, description="GA crossover rate")
    elitism: Number = Field(0.05, ge=0.0, le=1.0, description="GA elite fraction")
    time_budget_s: Number = time_budget_field()
    max_iterations: Count | None = Field(100, description="neighbourhoods (HC) or generations (GA) per input")
    mutation_scale: Number = Field(0.1, ge=0.0, le=1.0, description="a mutated number moves by up to this of its range")
    failure_filter: Number = failure_filter_field()

    @model_validator(mode="after")
    def _setting_agrees(self) -> IndagoParams:
        if self.setting is not None:
            implied = SETTINGS[self.setting]
            for label, want in zip(("search", "seeds", "mutation"), implied):
                given = getattr(self, label)
                if given is not None and given != want:
                    raise ValueError(
                        f"indago parameter {label}={given!r} contradicts setting {self.setting!r} "
                        f"({label}={want!r}); give one or the other"
                    )
        return self

    def resolved(self) -> tuple[str, str, str]:
        """(search, seeds, mutation): the setting's, else each given one over the default setting's."""
        if self.setting is not None:
            return SETTINGS[self.setting]
        base = SETTINGS[DEFAULT_SETTING]
        return (self.search or base[0], self.seeds or base[1], self.mutation or base[2])


class IndagoSamplingParams(StrategyParams):
    surrogate: FolderPath | None = surrogate_field()
    candidates: Integer = Field(1000, ge=1, description="random valid inputs the surrogate rates per asked input")
    time_budget_s: Number = time_budget_field()


class TrainFailReplayParams(StrategyParams):
    surrogate: FolderPath | None = surrogate_field()
    log: FolderPath | None = Field(
        None,
        description="a training_log.jsonl.gz (instead of surrogate)",
        json_schema_extra={"allowed": "a file path", ARTIFACT_PATH: True},
    )
    failure_filter: Number = failure_filter_field()

    @model_validator(mode="after")
    def _one_source(self) -> TrainFailReplayParams:
        if (self.surrogate is None) == (self.log is None):
            raise ValueError(
                "train_fail_replay needs exactly one of surrogate (an artifact folder) or log "
                "(a training_log.jsonl.gz) to take the training failures from"
            )
        return self


def open_surrogate(strategy: str, path: Any, space: ParameterSpace, subject_rules: SubjectRules | None) -> Any:
    """The artifact at ``path``, checked against the campaign's subject by name (when the campaign names one:
    two subjects can share a parameter space, e.g. the same offsets on another domain or horizon) and against
    ``space``; StrategyParamError names what is wrong."""
    from generator_service.surrogates.artifact import load_surrogate

    if path is None or path == "":
        raise StrategyParamError(
            f"strategy {strategy} needs parameter surrogate: the folder of a trained "
            "surrogate (train one with `gauntlet surrogate train --model NAME`)"
        )
    if not isinstance(path, (str, Path)):
        raise StrategyParamError(f"{strategy} parameter surrogate must be a folder path, got {path!r}")
    try:
        surrogate = load_surrogate(path, subject=subject_rules.subject if subject_rules else None)
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


class Indago:
    """Indago: per input, a hill-climbing or genetic search on a surrogate failure predictor trained on
    the agent's training episodes (random/saliency mutation, random/training-failure seeds)."""

    source = SOURCE
    Params = IndagoParams

    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        params: IndagoParams,
        *,
        subject_rules: SubjectRules | None = None,
    ) -> None:
        from generator_service.surrogates.search import Budget, Mutator, subject_validity

        name = "indago"
        self.search, self.seeds, self.mutation = params.resolved()
        self.neighbourhood, self.population = params.neighbourhood, params.population
        self.crossover, self.elitism = params.crossover, params.elitism
        self.failure_filter = params.failure_filter
        try:
            self.budget = Budget(params.max_iterations, params.time_budget_s or None)
        except ValueError as exc:
            raise StrategyParamError(f"{name}: {exc}") from None
        self.space = space
        self.rng = rng
        self.surrogate = open_surrogate(name, params.surrogate, space, subject_rules)
        self.validity = subject_validity(space, subject_rules)
        self.mutator = Mutator(self.surrogate, self.validity, rng, self.mutation, params.mutation_scale)
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
    def _fitness(self, inputs: Sequence[Mapping[str, Any]]) -> np.ndarray:
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


class IndagoSampling:
    """Sampling baseline (Indago paper): per input, the random valid input the surrogate rates most likely to
    fail among up to `candidates` draws within the time budget."""

    source = SOURCE + "; baseline after Uesato et al."
    Params = IndagoSamplingParams

    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        params: IndagoSamplingParams,
        *,
        subject_rules: SubjectRules | None = None,
    ) -> None:
        from generator_service.surrogates.search import subject_validity

        name = "indago_sampling"
        self.candidates = params.candidates
        self.time_budget_s = params.time_budget_s or None
        self.rng = rng
        self.surrogate = open_surrogate(name, params.surrogate, space, subject_rules)
        self.validity = subject_validity(space, subject_rules)
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


class TrainFailReplay:
    """Training-failure replay baseline (Indago paper): the inputs that failed during training after the first
    `failure_filter` % of episodes, in seeded random order, each once."""

    source = SOURCE + "; 'train. fail.' baseline"
    Params = TrainFailReplayParams

    def __init__(
        self,
        space: ParameterSpace,
        rng: np.random.Generator,
        params: TrainFailReplayParams,
        *,
        subject_rules: SubjectRules | None = None,
    ) -> None:
        from generator_service.surrogates.search import subject_validity

        name = "train_fail_replay"
        percent, surrogate, log = params.failure_filter, params.surrogate, params.log
        if surrogate is not None:
            from generator_service.surrogates.artifact import artifact_failures, read_meta, require_subject

            try:
                meta = read_meta(surrogate)
                if subject_rules is not None:
                    require_subject(surrogate, meta, subject_rules.subject)
                failures = artifact_failures(Path(surrogate), meta, percent)
            except ValueError as exc:
                raise StrategyParamError(f"{name} parameter surrogate: {exc}") from None
            where = str(surrogate)
        elif log is not None:  # the schema requires exactly one of surrogate and log
            from generator_service.surrogates.dataset import filtered_count, load_interaction_log

            try:
                data = load_interaction_log(log)
            except ValueError as exc:
                raise StrategyParamError(f"{name} parameter log: {exc}") from None
            first = filtered_count(len(data), percent)
            failures = [c for i, c in enumerate(data.configs) if i >= first and data.failed[i]]
            where = str(log)
        self.validity = subject_validity(space, subject_rules)
        self.failures = checked_failures(name, failures, self.validity, where)
        self.order = [int(i) for i in rng.permutation(len(self.failures))]
        self.position = 0

    def ask(self, n: int) -> list[TestInput]:
        picked = self.order[self.position : self.position + n]
        self.position += len(picked)
        return [dict(self.failures[i]) for i in picked]

    def tell(self, results: Sequence[Result]) -> None:
        """Replay does not learn from executions."""
