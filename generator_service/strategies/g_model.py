"""G-Model: test cases sampled from a diffusion model that is fine-tuned round after round.

Source: Z. Li, X. Wu, D. Zhu, M. Cheng, S. Chen, F. Zhang, X. Xie, L. Ma, J. Zhao, "Generative Model-Based Testing
on Decision-Making Policies", ASE 2023 (reference [20] of the PRT paper), as the PRT paper ("Failure-Based Testing
for Deep Reinforcement Learning Agents", Sections 4.1, 5.2 and 8) re-ran it: "in every epoch, random test cases are
sampled to fine-tune the diffusion model, which then generates a batch of new test cases"; it needs model training
before testing but no execution feedback (the PRT paper's Table 2), and test cases the model generates outside the
input domain are projected onto its boundary. The settings are those of the PRT authors' baseline code. The docs page
docs/strategies/g_model.md says what the paper does, what we do and where we deviate.

The model is a DDPM (Ho et al. 2020) over test cases normalised to [0, 1] per parameter:

* ``diffusion_steps`` noise levels (50) with betas from ``beta_start`` to ``beta_end`` (0.0004 to 0.02, linear in
  beta: the "sqrt_linear" schedule of the latent-diffusion code the authors' model follows);
* the denoiser is an MLP (scikit-learn ``MLPRegressor``, hidden layers 256, 512, 256, ReLU, Adam with learning rate
  ``learning_rate``) from the noisy case and a sinusoidal embedding of the step to the noise;
* pre-training: ``pretrain_epochs`` (100) epochs of ``steps_per_epoch`` (50) single-sample Adam steps on
  ``pretrain_cases`` (1,000) uniform random cases;
* each round generates ``round_size`` (50) cases by ancestral sampling, clips them to [0, 1] (the projection onto
  the boundary), and then fine-tunes the model for one epoch, one single-sample step each, on those cases and
  ``fresh_cases`` (100) new uniform ones, in random order. ``ask`` serves the generated cases in order.

G-Model takes no feedback: ``tell`` ignores results. It needs a box of real/integer parameters (integers are
rounded); a parameter whose range is one value is kept at it.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Sequence

import numpy as np
from pydantic import Field, model_validator

from common.space import ParameterSpace
from generator_service.strategies.base import Result, TestInput, require_numeric_box
from generator_service.strategies.params import Integer, Number, StrategyParams
from generator_service.strategies.unit_cube import UnitCube

HIDDEN = (256, 512, 256)  # the authors' denoiser: x -> 256 -> 512 -> 256 -> x
TIME_FEATURES = 16  # sinusoidal embedding of the diffusion step


class GModelParams(StrategyParams):
    diffusion_steps: Integer = Field(50, ge=2, le=1000, description="noise levels of the diffusion model")
    beta_start: Number = Field(0.0004, gt=0.0, lt=1.0, description="noise variance of the first step")
    beta_end: Number = Field(0.02, gt=0.0, lt=1.0, description="noise variance of the last step")
    learning_rate: Number = Field(3e-4, gt=0.0, le=1.0, description="Adam learning rate of the denoiser")
    pretrain_cases: Integer = Field(1000, ge=1, description="uniform random cases the model is pre-trained on")
    pretrain_epochs: Integer = Field(100, ge=0, description="pre-training epochs")
    steps_per_epoch: Integer = Field(50, ge=1, description="single-sample steps per pre-training epoch")
    round_size: Integer = Field(50, ge=1, description="cases generated per round, before each fine-tuning")
    fresh_cases: Integer = Field(100, ge=0, description="uniform random cases added to each fine-tuning epoch")
    batch_size: Integer = Field(
        50, ge=1, description="cases per Adam step (the authors' code: 1; 50 makes a pre-training epoch one step)"
    )

    @model_validator(mode="after")
    def _increasing_betas(self) -> GModelParams:
        if self.beta_end < self.beta_start:
            raise ValueError(f"beta_end ({self.beta_end}) must be at least beta_start ({self.beta_start})")
        return self


def time_embedding(steps: np.ndarray) -> np.ndarray:
    """Sinusoidal features of diffusion steps (Vaswani et al.'s positional encoding), one row per step."""
    half = TIME_FEATURES // 2
    freqs = np.exp(-math.log(10_000.0) * np.arange(half) / half)
    angles = np.asarray(steps, dtype=float)[:, None] * freqs[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


class Diffusion:
    """A DDPM over [0, 1]^d with an MLP noise predictor, trained one sample per step."""

    def __init__(self, dims: int, params: GModelParams, rng: np.random.Generator) -> None:
        from sklearn.neural_network import MLPRegressor  # imported here: listing strategies does not pay for it

        self.dims = dims
        self.rng = rng
        self.steps = int(params.diffusion_steps)
        self.betas = np.linspace(params.beta_start, params.beta_end, self.steps)
        self.alphas = 1.0 - self.betas
        self.alpha_bars = np.cumprod(self.alphas)
        self.net = MLPRegressor(
            hidden_layer_sizes=HIDDEN,
            learning_rate_init=params.learning_rate,
            batch_size=int(params.batch_size),
            shuffle=False,
            alpha=0.0,
            random_state=int(rng.integers(2**31)),
        )

    def train(self, cases: np.ndarray) -> None:
        """Adam steps over the cases, ``batch_size`` at a time, each at a random step with fresh noise (DDPM loss)."""
        x0 = np.atleast_2d(cases)
        t = self.rng.integers(0, self.steps, len(x0))
        noise = self.rng.standard_normal(x0.shape)
        ab = self.alpha_bars[t][:, None]
        xt = np.sqrt(ab) * x0 + np.sqrt(1.0 - ab) * noise
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn's convergence notices mean nothing for online steps
            self.net.partial_fit(np.hstack([xt, time_embedding(t)]), noise)

    def sample(self, n: int) -> np.ndarray:
        """n cases by ancestral sampling from pure noise (unclipped)."""
        x = self.rng.standard_normal((n, self.dims))
        for t in range(self.steps - 1, -1, -1):
            # the forward pass without predict()'s per-call input validation (50 calls a round)
            inputs = np.hstack([x, time_embedding(np.full(n, t))])
            eps = np.asarray(self.net._forward_pass_fast(inputs, check_input=False)).reshape(n, self.dims)
            mean = (x - self.betas[t] / math.sqrt(1.0 - self.alpha_bars[t]) * eps) / math.sqrt(self.alphas[t])
            x = mean + (math.sqrt(self.betas[t]) * self.rng.standard_normal(x.shape) if t > 0 else 0.0)
        return x


class GModel:
    """G-Model: a diffusion model pre-trained on uniform random cases generates each round of tests and is then
    fine-tuned on them and on fresh random cases; no feedback. Out-of-domain samples are clipped to the boundary."""

    source = (
        "Li et al.: Generative Model-Based Testing on Decision-Making Policies (ASE 2023), as re-run in Lin, Meng, "
        "Zheng: Failure-Based Testing for Deep Reinforcement Learning Agents (FSE 2026), Sec. 4.1"
    )
    Params = GModelParams

    def __init__(self, space: ParameterSpace, rng: np.random.Generator, params: GModelParams) -> None:
        require_numeric_box(space, "g_model", "needs a box of real/integer parameters")
        self.space = space
        self.rng = rng
        self.params = params
        self._cube = UnitCube(space)
        self.model: Diffusion | None = None
        self._queue: deque[TestInput] = deque()
        self.clipped = 0  # coordinates the model generated outside [0, 1] and projected onto the boundary

    def ask(self, n: int) -> list[TestInput]:
        out: list[TestInput] = []
        while len(out) < n:
            if not self._queue:
                self._round()
            out.append(self._queue.popleft())
        return out

    def tell(self, results: Sequence[Result]) -> None:
        """G-Model is not feedback-driven: the model learns from its own samples and random cases only."""

    def _round(self) -> None:
        d, p = int(self._cube.active.size), self.params
        if d == 0:  # nothing to generate: every parameter is fixed
            self._queue.extend(self._cube.values(np.empty(0)) for _ in range(p.round_size))
            return
        if self.model is None:
            self.model = Diffusion(d, p, self.rng)
            pool = self.rng.random((p.pretrain_cases, d))
            for _ in range(p.pretrain_epochs):
                picks = self.rng.choice(len(pool), size=p.steps_per_epoch, replace=p.steps_per_epoch > len(pool))
                self.model.train(pool[picks])
            if p.pretrain_epochs == 0:  # an untrained denoiser still needs its weights
                self.model.train(pool[:1])
        raw = self.model.sample(p.round_size)
        if not np.all(np.isfinite(raw)):  # a diverged model: its non-finite outputs fall back to the centre
            raw = np.where(np.isfinite(raw), raw, 0.5)
        self.clipped += int(np.sum((raw < 0.0) | (raw > 1.0)))
        generated = np.clip(raw, 0.0, 1.0)
        self._queue.extend(self._cube.values(u) for u in generated)
        tune = np.vstack([generated, self.rng.random((p.fresh_cases, d))])
        self.model.train(tune[self.rng.permutation(len(tune))])
