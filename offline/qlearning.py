"""Tabular Q-learning (Watkins & Dayan 1992) for subjects with Discrete observations and actions.

Used by `offline.training.train` when a recipe's algorithm is QLEARNING. Like the Stable-
Baselines3 recipes, every training episode starts from a test case drawn from the subject's own
space (through the same SubjectEnv, so the validators hold) and is judged by the subject's oracle
and logged by the same InteractionLogger. The product is a greedy QTablePolicy in `model.npz`.

Hyper-parameters (the recipe's `hyperparams`):
  episodes              training episodes (the budget; the recipe's `timesteps` only caps env steps)
  learning_rate         alpha of the update Q[s,a] += alpha * (target - Q[s,a])
  gamma                 discount; target = r at a terminal step (delivery, or a fault when it ends the
                        episode), else r + gamma * max_a' Q[s',a'] (also at the time limit: a cut, not an end)
  epsilon_start/_end    epsilon-greedy exploration, decayed linearly per episode from start to end over
  exploration_fraction  the first fraction of the episodes, then held at the end value (the authors' schedule)
  initial_q             initial value of every table entry (0: unvisited actions look best, as rewards are mostly -1)
  env_kwargs            overrides of the subject's env_kwargs while training (Taxi: {end_on_fault: false}
                        trains on plain Gymnasium Taxi dynamics, as the authors did)
"""

from __future__ import annotations

import dataclasses
import gzip
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from agent_service.api import QTABLE_FILE_NAME, QTablePolicy
from generator_service.api import INTERACTION_LOG_NAME, InteractionLog
from offline.interaction_logger import InteractionLogger
from simulator_service.api import get_subject, make_env


@dataclass(frozen=True)
class QLearningParams:
    episodes: int
    learning_rate: float = 0.1
    gamma: float = 0.99
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    exploration_fraction: float = 0.5
    initial_q: float = 0.0
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_hyperparams(cls, hyperparams: Mapping[str, Any]) -> QLearningParams:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(hyperparams) - known)
        if unknown:
            raise ValueError(
                f"unknown QLEARNING hyper-parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        if "episodes" not in hyperparams:
            raise ValueError("a QLEARNING recipe needs hyperparams.episodes (its training budget)")
        params = cls(**dict(hyperparams))
        if params.episodes < 1 or not 0 < params.learning_rate <= 1 or not 0 <= params.gamma <= 1:
            raise ValueError(f"QLEARNING needs episodes >= 1, 0 < learning_rate <= 1 and 0 <= gamma <= 1, got {params}")
        if (
            not 0 <= params.epsilon_end <= 1
            or not 0 <= params.epsilon_start <= 1
            or not 0 <= params.exploration_fraction <= 1
        ):
            raise ValueError(f"QLEARNING epsilons and exploration_fraction must lie in [0, 1], got {params}")
        return params

    def epsilon(self, episode: int) -> float:
        """Exploration rate of the 0-based `episode`."""
        decay = int(self.exploration_fraction * self.episodes)
        if episode >= decay:
            return self.epsilon_end
        return self.epsilon_start + (self.epsilon_end - self.epsilon_start) * episode / decay


def train_qlearning(
    recipe: Any, out_dir: Path, timesteps: int | None = None, progress: Callable[[int, int, Any], None] | None = None
) -> dict[str, Any]:
    """Trains `recipe` (a training.Recipe), writes model.npz and the interaction log into out_dir.

    Stops after `hyperparams.episodes` episodes, or earlier once `timesteps` (default: the recipe's
    `timesteps`; 0 = no cap) env steps are done, leaving the last episode unfinished and unlogged.
    """
    params = QLearningParams.from_hyperparams(recipe.hyperparams)
    if recipe.n_envs != 1:
        raise ValueError(f"recipe {recipe.name}: QLEARNING runs one environment (n_envs: 1), got {recipe.n_envs}")
    cap = timesteps if timesteps is not None else recipe.timesteps
    subject = get_subject(recipe.subject)
    subject = dataclasses.replace(subject, env_kwargs={**subject.env_kwargs, **params.env_kwargs})
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with gzip.open(out_dir / INTERACTION_LOG_NAME, "wt") as stream:
        log = InteractionLog(stream)
        env = make_env(subject)
        env._sampler = np.random.default_rng([recipe.seed, 0])  # type: ignore[attr-defined] # as train(): rank 0
        env = InteractionLogger(env, subject, log)
        if not (isinstance(env.observation_space, spaces.Discrete) and isinstance(env.action_space, spaces.Discrete)):
            raise ValueError(
                f"subject {subject.name}: Q-learning needs Discrete observation and action spaces, "
                f"got {env.observation_space} and {env.action_space}"
            )
        n_actions = int(env.action_space.n)
        q = np.full((int(env.observation_space.n), n_actions), float(params.initial_q))
        explore = random.Random(recipe.seed)  # exploration draws (Python's generator: fast per-step scalars)
        alpha, gamma = params.learning_rate, params.gamma
        obs, _ = env.reset(seed=recipe.seed)
        done_by_cap = False
        for episode in range(params.episodes):
            if episode:
                obs, _ = env.reset()
            epsilon = params.epsilon(episode)
            s = int(obs)
            while True:
                a = explore.randrange(n_actions) if explore.random() < epsilon else int(q[s].argmax())
                obs, reward, terminated, truncated, _ = env.step(a)
                s2 = int(obs)
                target = reward if terminated else reward + gamma * q[s2].max()
                q[s, a] += alpha * (target - q[s, a])
                s = s2
                if progress and log.timesteps % 2048 == 0:
                    progress(log.timesteps, cap, log)
                if cap and log.timesteps >= cap:
                    done_by_cap = True
                    break
                if terminated or truncated:
                    break
            if done_by_cap:
                break
        env.close()
        QTablePolicy(q).save(out_dir / QTABLE_FILE_NAME)
    return {
        "subject": recipe.subject,
        "algorithm": recipe.algorithm,
        "seed": recipe.seed,
        "timesteps": log.timesteps,  # env steps actually taken (the budget is in episodes)
        "n_envs": 1,
        "train_wall_seconds": round(time.time() - started, 1),
        "training_episodes": log.episodes,
        "training_failures": log.failures,
        "file_bytes": (out_dir / QTABLE_FILE_NAME).stat().st_size,
    }
