"""CureFuzz: curiosity-driven fuzzing of sequential decision makers.

Source: J. He, Z. Yang, J. Shi, C. Yang, K. Kim, B. Xu, X. Zhou, D. Lo, "Curiosity-Driven Testing for Sequential
Decision-Making Process", ICSE 2024 (reference [16] of the PRT paper); configured as the PRT paper ("Failure-Based
Testing for Deep Reinforcement Learning Agents", Sections 4.1 and 7, "Internal Validity") re-ran it: the PRT
authors followed CureFuzz's published code, normalised rewards and set alpha = 5, beta = 0.01, gamma = 1. The
docs page docs/strategies/curefuzz.md says what the paper does, what we do and where we deviate.

CureFuzz is the fuzzing loop of ``fuzzing.py`` (seed corpus of ``initial_tests`` passing seeds, each a uniform
random input whose one mutant also passed; mutants of corpus seeds; a seed dropped when its energy is spent; a
fresh collection when the corpus runs dry) with a *curiosity* model steering which seeds are kept, which are
chosen and how often:

* **Curiosity** is random network distillation: a fixed, randomly initialised target network maps an episode's
  state to ``curiosity_outputs`` features; a predictor network (scikit-learn ``MLPRegressor``, one hidden layer of
  ``curiosity_hidden`` units, Adam) learns to reproduce them. The prediction error of a state not seen before is
  high and falls as similar states are trained on, so it measures novelty. Our results carry no state trace, so
  the "state" is the oracle's behaviour descriptors normalised to [0, 1] (or, with none, the normalised input;
  search_support.BehaviourScale). The predictor is first trained on the states of the collected seeds, then one
  Adam step per executed mutant, after its curiosity is read. ``curiosity`` is the squared error relative to
  its running mean (exponential, rate ``curiosity_rate``), so 1 is "as novel as usual".
* **Keeping a mutant** that passed: when it is curious (``curiosity > curiosity_threshold``), moved towards
  failure (margin below its parent's), or behaved unlike its parent (distance of the normalised states above
  ``distance_threshold``), CureFuzz's three conditions.
* **Seed selection**: a seed is chosen with probability proportional to
  ``exp(beta * curiosity) + exp(-alpha * margin_norm) + gamma * distance`` (the authors' ``samplePr``), where
  ``margin_norm`` is the margin min-max normalised over every margin seen so far (the reward normalisation;
  lower margin = closer to failure) and ``distance`` the state distance to its parent (0 for collected seeds).
* **Energy**: a seed is mutated ``round(seed_energy * curiosity)`` times (at least 1, at most 4 * seed_energy)
  before it is dropped; a collected seed, whose curiosity is not yet known, gets ``seed_energy``.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput
from generator_service.strategies.fuzzing import SENSITIVITY_FLOOR, Fuzzer, FuzzerParams, Seed, _Tag
from generator_service.strategies.params import Integer, Number
from generator_service.strategies.search_support import (
    BehaviourScale,
    DescriptorBounds,
    bounds_array,
    descriptor_bounds_field,
    input_key,
    usable,
)

MAX_ENERGY_FACTOR = 4  # a very curious seed is mutated at most 4 * seed_energy times


class CureFuzzParams(FuzzerParams):
    alpha: Number = Field(5.0, ge=0.0, description="weight of closeness to failure in seed selection")
    beta: Number = Field(0.01, ge=0.0, description="weight of curiosity in seed selection")
    gamma: Number = Field(1.0, ge=0.0, description="weight of the state distance to the parent in seed selection")
    curiosity_threshold: Number = Field(
        2.0, gt=0.0, description="a passing mutant this many times as curious as the running mean is kept"
    )
    distance_threshold: Number = Field(
        0.5, gt=0.0, description="a passing mutant whose normalised state lies this far from its parent's is kept"
    )
    curiosity_hidden: Integer = Field(64, ge=1, le=4096, description="hidden units of the target and predictor")
    curiosity_outputs: Integer = Field(64, ge=1, le=4096, description="output features of the target network")
    curiosity_lr: Number = Field(1e-3, gt=0.0, le=1.0, description="Adam learning rate of the predictor")
    curiosity_rate: Number = Field(0.05, gt=0.0, le=1.0, description="update rate of the running mean error")
    descriptor_bounds: DescriptorBounds | None = descriptor_bounds_field()


class RandomNetworkDistillation:
    """Curiosity as the error of a trained predictor against a fixed random target network (Burda et al. 2019)."""

    def __init__(self, dims: int, hidden: int, outputs: int, lr: float, seed: int) -> None:
        from sklearn.neural_network import MLPRegressor  # imported here: listing strategies does not pay for it

        g = np.random.default_rng(seed)
        self.w1 = g.normal(0.0, 1.0 / math.sqrt(max(dims, 1)), (dims, hidden))
        self.b1 = g.normal(0.0, 0.5, hidden)
        self.w2 = g.normal(0.0, 1.0 / math.sqrt(hidden), (hidden, outputs))
        self.predictor = MLPRegressor(
            hidden_layer_sizes=(hidden,),
            learning_rate_init=lr,
            batch_size=1,
            shuffle=False,
            alpha=0.0,
            random_state=seed,
        )
        self.fitted = False

    def target(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(np.maximum(np.atleast_2d(x) @ self.w1 + self.b1, 0.0) @ self.w2)

    def error(self, x: np.ndarray) -> float:
        """Squared prediction error (mean over the target's features) of one state."""
        # the forward pass without predict()'s per-call input validation (the states are float arrays already)
        pred = np.asarray(self.predictor._forward_pass_fast(np.atleast_2d(x).astype(float), check_input=False))
        pred = pred.reshape(1, -1)
        return float(np.mean((pred - self.target(x)) ** 2))

    def learn(self, states: np.ndarray) -> None:
        """One Adam step per state, in order."""
        states = np.atleast_2d(states)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn's convergence notices mean nothing for online steps
            self.predictor.partial_fit(states, self.target(states))
        self.fitted = True


@dataclass
class CureSeed(Seed):
    state: np.ndarray | None = None  # normalised behaviour of the seed's own execution, once known


class CureFuzz(Fuzzer):
    """CureFuzz: fuzzing whose seed selection, energy and corpus are steered by curiosity (random network
    distillation over the episodes' behaviour) besides closeness to failure."""

    source = (
        "He et al.: Curiosity-Driven Testing for Sequential Decision-Making Process (ICSE 2024); settings of "
        "Lin, Meng, Zheng: Failure-Based Testing for Deep Reinforcement Learning Agents (FSE 2026), Sec. 4.1, 7"
    )
    Params = CureFuzzParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: CureFuzzParams) -> None:
        super().__init__(space, rng, params)
        self.name = "curefuzz"
        self.cure = params
        self.behaviour = BehaviourScale(self.name, space, bounds_array(params.descriptor_bounds))
        self.rnd: RandomNetworkDistillation | None = None
        self.mean_error = 0.0
        self._raw_by_input: dict[str, np.ndarray] = {}  # raw states of collection results, by input
        self._parents: dict[int, CureSeed] = {}  # the parent of each mutant in flight, by the mutant's tag
        self._next_parent = 0
        self._margin_low = math.inf
        self._margin_high = -math.inf
        self.kept = Counter[str]()  # passing mutants kept, by the first condition that kept them

    # -- hooks of the fuzzing loop ----------------------------------------------------------------------------
    def _mutant_tag(self, parent: Seed) -> _Tag:
        pid, self._next_parent = self._next_parent, self._next_parent + 1
        self._parents[pid] = parent  # type: ignore[assignment]  # every seed of this corpus is a CureSeed
        return ("mutant", float(pid))

    def _observe(self, r: Result) -> bool:
        """A collection result (seed or probe): its margin and raw state are remembered."""
        if usable(r):
            self._see_margin(float(r.margin))
            raw = self.behaviour.raw(r)
            if raw is not None:
                self._raw_by_input[input_key(r.values)] = raw
                self._states.append(raw)
        return False

    def _add(self, values: TestInput, margin: float, change: float) -> None:
        """A collected seed (it and its probe passed): curiosity 1 (unknown yet), distance 0."""
        raw = self._raw_by_input.get(input_key(values))
        seed = CureSeed(dict(values), margin, 0.0, self.seed_energy, raw)
        seed.sensitivity = self._weight(margin, 1.0, 0.0)
        self.corpus.append(seed)

    def _mutant_told(self, r: Result, parent_id: float) -> None:
        parent = self._parents.pop(int(parent_id), None)
        if parent is None or not usable(r):
            return
        margin = float(r.margin)
        self._see_margin(margin)
        raw = self.behaviour.raw(r)
        curiosity, distance = 0.0, 0.0
        if raw is not None:
            rnd = self._model(raw)
            state = self.behaviour.normalise(raw)
            curiosity = self._curiosity(rnd, state)
            parent_state = self._parent_state(parent)
            if parent_state is not None:
                distance = float(np.linalg.norm(state - parent_state))
        if r.failed:
            return  # a fault: reported by the campaign, not mutated further
        p = self.cure
        reasons = {
            "curiosity": curiosity > p.curiosity_threshold,
            "margin": margin < parent.margin,
            "distance": distance > p.distance_threshold,
        }
        reason = next((name for name, hit in reasons.items() if hit), None)
        if reason is not None:
            self.kept[reason] += 1
            energy = int(min(max(round(self.seed_energy * curiosity), 1), MAX_ENERGY_FACTOR * self.seed_energy))
            seed = CureSeed(dict(r.values), margin, 0.0, energy, raw)
            seed.sensitivity = self._weight(margin, curiosity, distance)
            self.corpus.append(seed)

    # -- curiosity ------------------------------------------------------------------------------------------------
    def _model(self, raw: np.ndarray) -> RandomNetworkDistillation:
        """The curiosity model, built at the first mutant from the collected seeds' states (bounds learned)."""
        if self.rnd is None:
            self.behaviour.learn(self._states or [raw])
            p = self.cure
            self.rnd = RandomNetworkDistillation(
                raw.size, p.curiosity_hidden, p.curiosity_outputs, p.curiosity_lr, int(self.rng.integers(2**31))
            )
            known = np.array([self.behaviour.normalise(s) for s in (self._states or [raw])])
            self.rnd.learn(known)
            self.mean_error = float(np.mean([self.rnd.error(s) for s in known]))
            self._states, self._raw_by_input = [], {}
        return self.rnd

    def _curiosity(self, rnd: RandomNetworkDistillation, state: np.ndarray) -> float:
        """The state's prediction error over the running mean (read before the predictor learns the state)."""
        error = rnd.error(state)
        ratio = error / self.mean_error if self.mean_error > 0 else 1.0
        rnd.learn(state)
        self.mean_error += self.cure.curiosity_rate * (error - self.mean_error)
        return ratio

    def _parent_state(self, parent: CureSeed) -> np.ndarray | None:
        if parent.state is None or not self.behaviour.ready:
            return None
        return np.asarray(self.behaviour.normalise(parent.state))

    # -- seed selection ---------------------------------------------------------------------------------------------
    def _see_margin(self, margin: float) -> None:
        self._margin_low, self._margin_high = min(self._margin_low, margin), max(self._margin_high, margin)

    def _weight(self, margin: float, curiosity: float, distance: float) -> float:
        """samplePr = exp(beta * curiosity) + exp(-alpha * margin_norm) + gamma * distance."""
        p = self.cure
        span = self._margin_high - self._margin_low
        norm = (margin - self._margin_low) / span if span > 0 else 0.0
        value = math.exp(min(p.beta * curiosity, 50.0)) + math.exp(-p.alpha * norm) + p.gamma * distance
        return value + SENSITIVITY_FLOOR
