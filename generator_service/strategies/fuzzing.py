"""MDPFuzz and the plain Fuzzer: one implementation, with and without GMM density guidance.

Sources: Q. Pang, Y. Yuan, S. Wang, "MDPFuzz: Testing Models Solving Markov Decision Processes", ISSTA 2022;
the replication by Mazouni et al. (the plain Fuzzer, "MDPFuzz without GMM coverage guidance", beats MDPFuzz
in most cases, so both are shipped); configurations as the QD paper ("Testing for Fault Diversity in
Reinforcement Learning", Section 5.4, and its authors' code) and the PRT paper ("Failure-Based Testing for Deep
Reinforcement Learning Agents", Section 4.1, and its authors' baseline code) re-ran them.

Seed corpus (``initial_tests``, default 1000: the QD paper's MDPFuzz initialisation within a 5000-test budget;
the PRT paper used 2000 and did not count them, which ``initial_tests=2000`` gives, counted). Collection
repeats, until the corpus holds ``initial_tests`` seeds: a uniform random input (the seed) and one mutant of
it (the probe) are asked together; the seed enters the corpus when both executed and passed (as the PRT
authors' re-run; the QD code asks for "non-failing seeds" at two executions each). Every collection
execution counts against the campaign budget. A probe that fails is a fault found like any other.

Sensitivity: MDPFuzz weighs seed selection by how much the episode reward changes under a small
perturbation (``samplePr = |r_current - r_last| + 1e-6``). Here the reward is the oracle's margin (lower =
closer to failure; for lunar_crash it is the return, for cartpole the smallest slack to the limits, for
mountaincar the best position minus the goal): the sensitivity of a collected seed is |margin(seed) -
margin(probe)| + 1e-6, and that of a mutant added later is |margin(mutant) - margin(parent)| + 1e-6 (the
parent is its perturbation; no extra execution).

Fuzzing: each asked input is a mutant (mutation.py, ``mutation_scale`` = +-5 % of each range) of a corpus
seed drawn with probability proportional to its sensitivity. A seed is dropped after ``seed_energy``
selections (default 5, the QD re-run's energy; the PRT re-run used 100). A mutant that passes joins the corpus
when its margin is below its parent's (it moved towards failure) or, with guidance only (``mdpfuzz``), when
the density of its state under the GMM is below ``density_threshold``. Failing mutants are faults and are not
added. If the corpus runs dry, collection starts again.

GMM guidance (``mdpfuzz``): MDPFuzz models the states visited by the agent with a Gaussian mixture (K = 10
components) and keeps inputs whose state sequence has a low density (a "fresh" sequence; threshold 0.01),
updating the model online with rate 0.01. Our results carry no state trace, only the oracle's margin and
behaviour descriptors, which summarise the episode (e.g. lunar lander (x, vy) at first contact, cartpole
action counts). The "state" is therefore the behaviour descriptor vector normalised to [0, 1] per dimension
by ``descriptor_bounds`` (given, or learned from the collection phase), or the normalised input when the
oracle has no descriptors. In that normalised space a uniform density is 1, so 0.01 means "100 times rarer
than uniform". The mixture (``sklearn.mixture.GaussianMixture``, full covariances) is fitted by EM on the
states of the collection phase, then updated after every execution by one step of stochastic EM with rate
``update_rate``: the sufficient statistics (weights, weighted sums, weighted second moments) move by
rate * (responsibilities of the new state - current value). The density of a mutant is read before its own
update. MDPFuzz's conditional GMM over consecutive states (K = 5) needs state pairs and is not reproduced.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

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
    usable,
)

# What an asked input was for: ("seed" | "probe", collection id) or ("mutant", the parent's margin).
_Tag = tuple[str, float]

SENSITIVITY_FLOOR = 1e-6  # MDPFuzz's "+ 1e-6": a seed whose margin did not move can still be chosen
REG_COVAR = 1e-6  # added to every covariance diagonal (sklearn's default), in normalised state units


@dataclass
class Seed:
    values: TestInput
    margin: float
    sensitivity: float
    energy: int


@dataclass
class _Collection:
    """A seed being collected: its input and the results of the seed and of its probe (one mutant)."""

    values: TestInput
    seed: Result | None = None
    probe: Result | None = None


class OnlineGaussianMixture:
    """A full-covariance Gaussian mixture fitted once by EM (sklearn), then updated online by stochastic EM."""

    def __init__(self, data: np.ndarray, components: int, seed: int) -> None:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.mixture import GaussianMixture  # imported here: only mdpfuzz needs scikit-learn

        data = np.asarray(data, dtype=float)
        k = max(1, min(components, len(np.unique(data, axis=0))))
        for reg in (REG_COVAR, 1e-3):  # sklearn refuses a collapsed component; a larger ridge fixes that
            self.reg = reg
            self.model = GaussianMixture(n_components=k, covariance_type="full", reg_covar=reg, random_state=seed)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    self.model.fit(data)
                break
            except ValueError:
                if reg != REG_COVAR:
                    raise
        w, mu, cov = self.model.weights_, self.model.means_, self.model.covariances_
        self._s0 = w.copy()
        self._s1 = w[:, None] * mu
        self._s2 = w[:, None, None] * (cov + mu[:, :, None] * mu[:, None, :])

    @property
    def components(self) -> int:
        return int(self.model.n_components)

    def _weighted_log_probs(self, x: np.ndarray) -> np.ndarray:
        """log(w_k N(x | mu_k, Sigma_k)) per component, from the model's precision Cholesky factors (as sklearn's
        score_samples computes it, without its per-call input validation)."""
        m = self.model
        y = np.einsum("kij,ki->kj", m.precisions_cholesky_, x[None, :] - m.means_)  # (x - mu) @ P_k, per k
        log_det = np.log(np.abs(np.diagonal(m.precisions_cholesky_, axis1=1, axis2=2))).sum(axis=1)
        with np.errstate(divide="ignore"):
            log_w = np.log(m.weights_)
        return log_w + log_det - 0.5 * (x.size * np.log(2 * np.pi) + np.sum(y * y, axis=1))

    def log_density(self, x: np.ndarray) -> float:
        lp = self._weighted_log_probs(np.asarray(x, dtype=float))
        top = lp.max()
        return float(top + np.log(np.exp(lp - top).sum()))

    def update(self, x: np.ndarray, rate: float) -> None:
        x = np.asarray(x, dtype=float)
        lp = self._weighted_log_probs(x)
        r = np.exp(lp - lp.max())
        r /= r.sum()
        self._s0 = (1 - rate) * self._s0 + rate * r
        self._s1 = (1 - rate) * self._s1 + rate * r[:, None] * x
        self._s2 = (1 - rate) * self._s2 + rate * r[:, None, None] * np.outer(x, x)
        m = self.model
        m.weights_ = self._s0 / self._s0.sum()
        live = self._s0 > 1e-12  # a component that lost all weight keeps its shape
        mean = self._s1[live] / self._s0[live, None]
        cov = self._s2[live] / self._s0[live, None, None] - mean[:, :, None] * mean[:, None, :]
        cov = 0.5 * (cov + np.swapaxes(cov, 1, 2)) + self.reg * np.eye(x.size)
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:  # rounding made a covariance indefinite: keep the previous shapes
            return
        m.means_[live], m.covariances_[live] = mean, cov
        m.precisions_cholesky_[live] = np.swapaxes(np.linalg.inv(chol), 1, 2)  # what sklearn stores for "full"


class FuzzerParams(MutationParams):
    seed_energy: Integer = Field(5, ge=1, description="selections of a seed before it is dropped")


class MDPFuzzParams(FuzzerParams):
    gmm_components: Integer = Field(10, ge=1, description="Gaussian mixture components of the density model")
    density_threshold: Number = Field(0.01, gt=0.0, description="density below which a state counts as fresh")
    update_rate: Number = Field(0.01, gt=0.0, le=1.0, description="online EM step of the density model")
    descriptor_bounds: DescriptorBounds | None = descriptor_bounds_field()


class Fuzzer:
    """The fuzzing loop shared by ``fuzzer`` (guidance off) and ``mdpfuzz`` (guidance on); see the module doc."""

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: FuzzerParams) -> None:
        # the density model exists only with MDPFuzz's parameters (guidance on)
        self.density: MDPFuzzParams | None = params if isinstance(params, MDPFuzzParams) else None
        self.guidance = self.density is not None
        self.name = "mdpfuzz" if self.guidance else "fuzzer"
        check_mutable_space(self.name, space)
        self.space = space
        self.rng = rng
        self.initial_tests = params.initial_tests
        self.mutation_scale = params.mutation_scale
        self.integer_mutation, self.mutation_p = params.integer_mutation, params.mutation_p
        self.seed_energy = params.seed_energy
        self.behaviour = BehaviourScale(
            self.name, space, bounds_array(self.density.descriptor_bounds if self.density else None)
        )
        self.corpus: list[Seed] = []
        self.gmm: OnlineGaussianMixture | None = None
        self._collecting = True
        self._collections: dict[int, _Collection] = {}
        self._next_collection = 0
        self._queue: deque[tuple[TestInput, _Tag]] = deque()  # probes planned but not asked yet
        self._states: list[np.ndarray] = []  # raw states seen before the GMM is fitted
        self._ledger: AskLedger[_Tag] = AskLedger()
        self.executions = 0

    # -- ask/tell ---------------------------------------------------------------------------------
    def ask(self, n: int) -> list[TestInput]:
        for tag in self._ledger.close():
            if tag[0] in ("seed", "probe"):
                self._drop_collection(int(tag[1]))
        if n <= 0:
            return []
        if self._collecting and len(self.corpus) >= self.initial_tests:
            self._collecting = False
        if not self._collecting and self.guidance and self.gmm is None:
            self._fit_gmm()
        out: list[TestInput] = []
        while len(out) < n:
            if self._queue:
                values, tag = self._queue.popleft()
            elif self._collecting:
                if out and len(self.corpus) + len(self._collections) >= self.initial_tests:
                    break  # enough seeds on the way: their results decide whether collection is over
                cid, self._next_collection = self._next_collection, self._next_collection + 1
                values = self.space.sample(self.rng)
                self._collections[cid] = _Collection(values)
                probe = mutate(
                    self.space,
                    values,
                    self.rng,
                    scale=self.mutation_scale,
                    p=self.mutation_p,
                    integer=self.integer_mutation,
                )
                self._queue.append((probe, ("probe", cid)))
                tag = ("seed", cid)
            elif not self.corpus:
                self._collecting = True  # the corpus ran dry: collect seeds again
                continue
            else:
                parent = self._select()
                values = mutate(
                    self.space,
                    parent.values,
                    self.rng,
                    scale=self.mutation_scale,
                    p=self.mutation_p,
                    integer=self.integer_mutation,
                )
                tag = self._mutant_tag(parent)
            self._ledger.record(values, tag)
            out.append(values)
        return out

    def tell(self, results: Sequence[Result]) -> None:
        for tag, r in self._ledger.match(results):
            self.executions += 1
            if tag[0] == "mutant":
                self._mutant_told(r, float(tag[1]))
            else:
                self._observe(r)
                self._collection_told(tag[0], int(tag[1]), r)

    # -- internals --------------------------------------------------------------------------------
    def _mutant_tag(self, parent: Seed) -> _Tag:
        """What a mutant's result is matched with when told: here its parent's margin (CureFuzz keeps more)."""
        return ("mutant", parent.margin)

    def _select(self) -> Seed:
        weights = np.array([s.sensitivity for s in self.corpus])
        j = int(self.rng.choice(len(self.corpus), p=weights / weights.sum()))
        seed = self.corpus[j]
        seed.energy -= 1
        if seed.energy <= 0:
            del self.corpus[j]
        return seed

    def _drop_collection(self, cid: int) -> None:
        if self._collections.pop(cid, None) is not None:
            self._queue = deque(item for item in self._queue if item[1] != ("probe", cid))

    def _collection_told(self, role: str, cid: int, r: Result) -> None:
        c = self._collections.get(cid)
        if c is None:
            return
        if role == "seed":
            c.seed = r
        else:
            c.probe = r
        if c.seed is None or c.probe is None:
            return
        del self._collections[cid]
        s, p = c.seed, c.probe
        if usable(s) and usable(p) and not s.failed and not p.failed:
            self._add(c.values, float(s.margin), abs(float(s.margin) - float(p.margin)))

    def _mutant_told(self, r: Result, parent_margin: float) -> None:
        if not usable(r):
            return
        fresh = self._observe(r)
        margin = float(r.margin)
        if not r.failed and (margin < parent_margin or fresh):
            self._add(r.values, margin, abs(margin - parent_margin))

    def _add(self, values: TestInput, margin: float, change: float) -> None:
        self.corpus.append(Seed(dict(values), margin, change + SENSITIVITY_FLOOR, self.seed_energy))

    def _observe(self, r: Result) -> bool:
        """Guidance only: whether r's state has a density below the threshold (read before the update), then
        the online update (or, before the GMM exists, the state is kept for fitting it)."""
        if self.density is None or r.invalid:
            return False
        raw = self.behaviour.raw(r)
        if raw is None:
            return False
        if self.gmm is None:
            self._states.append(raw)
            return False
        x = self.behaviour.normalise(raw)
        fresh = self.gmm.log_density(x) < math.log(self.density.density_threshold)
        self.gmm.update(x, self.density.update_rate)
        return fresh

    def _fit_gmm(self) -> None:
        if self.density is None or len(self._states) < 2:
            return  # no guidance, or too few states yet: fitted at a later ask
        self.behaviour.learn(self._states)
        data = np.array([self.behaviour.normalise(s) for s in self._states])
        self.gmm = OnlineGaussianMixture(data, self.density.gmm_components, int(self.rng.integers(2**31)))
        self._states = []


class PlainFuzzer(Fuzzer):
    """Fuzzer (MDPFuzz without density guidance): mutates passing seeds chosen by margin sensitivity and keeps
    mutants that move closer to failure."""

    source = "Pang et al.: MDPFuzz (ISSTA 2022); Mazouni et al.'s replication (plain Fuzzer baseline)"
    Params = FuzzerParams


class MDPFuzz(Fuzzer):
    """MDPFuzz: the Fuzzer plus a Gaussian-mixture density model of the episodes' behaviour that also keeps
    mutants with rarely seen behaviour."""

    source = "Pang et al.: MDPFuzz: Testing Models Solving Markov Decision Processes (ISSTA 2022)"
    Params = MDPFuzzParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: MDPFuzzParams) -> None:
        super().__init__(space, rng, params)
