"""Lock-step episode runner with continuous batching.

K environments advance together; each lock-step makes ONE batched call to the agent for
all active environments, and a slot whose episode ends is refilled with the next job at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping

import gymnasium as gym
import numpy as np

from common.space import ParamValue
from simulator_service.trace import TraceRecorder

ActFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Job:
    test_case_id: str
    values: Mapping[str, ParamValue]
    seed: int
    repetition: int = 0


@dataclass
class Outcome:
    job: Job
    steps: int = 0
    total_reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    signals: dict[str, np.ndarray] = field(default_factory=dict)
    wall_seconds: float = 0.0
    error: str = ""


class AgentError(RuntimeError):
    """The agent could not act (its service failed); the episodes in flight are lost, not judged."""


@dataclass
class _Slot:
    env: gym.Env
    job: Job | None = None
    obs: np.ndarray | None = None
    outcome: Outcome | None = None
    started: float = 0.0


def run_lockstep(
    env_factory: Callable[[], gym.Env],
    envs: list[gym.Env],
    jobs: Iterable[Job],
    act: ActFn,
    recorder_factory: Callable[[], TraceRecorder],
    max_steps: int | None = None,
) -> Iterator[Outcome]:
    """Runs every job on the given environments (len(envs) = parallelism) and yields outcomes as episodes end.

    An environment that raises is replaced by a fresh one from `env_factory` and its job
    yields an Outcome with `error` set; an AgentError propagates (the agent is shared by all slots).
    """
    pending = iter(jobs)
    slots = [_Slot(env) for env in envs]
    recorders = [recorder_factory() for _ in slots]

    def fill(i: int) -> Outcome | None:
        """Starts the next job in slot i; returns an error outcome if the reset itself failed."""
        slot = slots[i]
        slot.job = next(pending, None)
        if slot.job is None:
            return None
        slot.outcome = Outcome(slot.job)
        slot.started = time.perf_counter()
        recorders[i].start()
        try:
            slot.obs, _ = slot.env.reset(seed=slot.job.seed, options={"values": dict(slot.job.values)})
        except Exception as exc:  # noqa: BLE001 - a broken env must not take the batch down
            return _fail(i, exc)
        return None

    def _fail(i: int, exc: Exception) -> Outcome:
        slot = slots[i]
        out = slot.outcome
        assert out is not None
        out.error = f"environment error: {type(exc).__name__}: {exc}"
        out.wall_seconds = time.perf_counter() - slot.started
        try:
            slot.env.close()
        finally:
            slot.env = env_factory()
        slot.job = None
        return out

    for i in range(len(slots)):
        while (err := fill(i)) is not None:
            yield err

    while True:
        active = [i for i, s in enumerate(slots) if s.job is not None]
        if not active:
            return
        actions = act(np.stack([slots[i].obs for i in active]))
        if len(actions) != len(active):
            raise AgentError(f"agent returned {len(actions)} actions for {len(active)} observations")
        for i, action in zip(active, actions):
            slot = slots[i]
            out = slot.outcome
            assert out is not None
            try:
                env_action = action.item() if action.shape == () else action
                obs, reward, terminated, truncated, _ = slot.env.step(env_action)
            except Exception as exc:  # noqa: BLE001
                yield _fail(i, exc)
                while (err := fill(i)) is not None:
                    yield err
                continue
            recorders[i].step(slot.env, slot.obs, action, float(reward))
            out.steps += 1
            out.total_reward += float(reward)
            slot.obs = obs
            if max_steps and out.steps >= max_steps and not terminated:
                truncated = True
            if terminated or truncated:
                out.terminated, out.truncated = bool(terminated), bool(truncated)
                out.signals = recorders[i].finish(slot.env, obs)
                out.wall_seconds = time.perf_counter() - slot.started
                yield out
                while (err := fill(i)) is not None:
                    yield err
