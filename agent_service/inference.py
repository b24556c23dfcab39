"""The agent's inference path: deterministic actions for a batch of observations, as the service computes them.

One function, predict_actions, used by the service (ModelRegistry.act) and by the benches' in-process baselines
(through agent_service/api.py), so a comparison between the suite and an in-process loop runs the same inference
code on both sides. It is pure: a loaded model and observations in, actions out (no locks, no validation of the
wire shape, no dtype of the wire; the caller owns those).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.space_spec import unpack_observations

# CPU matmul kernels pick their code path by batch shape, so one observation's action could differ in the
# last float bits between a lock-step batch of 3 and one of 64 (measured: BipedalWalker PPO at batch 1-3,
# MountainCar SAC at 2, 3, 79, 97, ...), and a walker turns such bits into another verdict. Every forward
# pass therefore runs on a block of one of these row counts (the smallest that holds the batch, padded), at
# which every bundled model gives each row the same bits at every row position and every rung (measured on
# random inputs, kept by tests/agent_service/test_zoo.py): an input's action no longer depends on which other
# episodes are alive. A batch over the top rung runs in blocks of it. The smaller rungs spare a lock-step group of 32
# the compute of 128 rows.
INFERENCE_BLOCKS = (16, 32, 64, 128)
INFERENCE_ROWS = INFERENCE_BLOCKS[-1]


def block_rows(n: int) -> int:
    """Rows of the padded block that a batch of n (1 <= n <= INFERENCE_ROWS) observations runs in."""
    return next(rows for rows in INFERENCE_BLOCKS if rows >= n)


def predict_actions(model: Any, observations: np.ndarray) -> np.ndarray:
    """Deterministic actions for a batch of observations (rows), run in padded blocks of INFERENCE_BLOCKS rows so
    that an observation's action does not depend on the batch it came in."""
    n = len(observations)
    if n == 0:  # an empty batch: no forward pass (a policy cannot reshape 0 rows), no actions
        space = model.action_space
        return np.zeros((0, *(space.shape or ())), dtype=space.dtype or np.float32)
    blocks = []
    for start in range(0, n, INFERENCE_ROWS):
        rows = min(INFERENCE_ROWS, n - start)
        # one writable copy of the wire buffer, padded with copies of the first row (their actions are dropped)
        block = np.empty((block_rows(rows), *observations.shape[1:]), dtype=observations.dtype)
        block[:rows] = observations[start : start + rows]
        block[rows:] = observations[start]
        blocks.append(predict_block(model, block)[:rows])
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


def predict_block(model: Any, observations: np.ndarray) -> np.ndarray:
    """Deterministic actions for a batch; the same result as `model.predict(obs, deterministic=True)`.

    For Box observations it calls the policy directly under inference_mode, skipping predict()'s
    per-call checks and conversions (measurable at one call per lock-step).
    """
    from gymnasium import spaces

    if isinstance(model.observation_space, spaces.Dict):  # goal-conditioned (HER): restore the dict first
        actions, _ = model.predict(unpack_observations(model.observation_space, observations), deterministic=True)
        return np.asarray(actions)
    # e.g. Discrete (SB3 models and Q-tables alike), or a model that is no SB3 policy (a Q-network)
    if not isinstance(model.observation_space, spaces.Box) or not hasattr(model, "policy"):
        actions, _ = model.predict(observations, deterministic=True)
        return np.asarray(actions)
    import torch

    policy = model.policy
    if policy.training:  # once: set_training_mode walks every submodule (~40 % of a CartPole policy's act here)
        policy.set_training_mode(False)
    with torch.inference_mode():
        obs = torch.from_numpy(np.asarray(observations, dtype=np.float32))  # the padded block is a writable copy
        actions = policy._predict(obs, deterministic=True).numpy()
    if isinstance(model.action_space, spaces.Box):
        actions = actions.reshape((-1, *model.action_space.shape))
        if policy.squash_output:
            actions = policy.unscale_action(actions)
        else:
            actions = np.clip(actions, model.action_space.low, model.action_space.high)
    else:
        actions = actions.reshape((-1, *model.action_space.shape))
    return actions
