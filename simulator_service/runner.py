"""Lock-step episode runner with continuous batching.

K environments advance together; each lock-step makes ONE batched call to the agent for
all active environments, and a slot whose episode ends is refilled with the next job at once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from common.space import ParamValue
from common.space_spec import pack_observations
from simulator_service.trace import TraceRecorder

ActFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class TracePrefix:
    """An action-trace test input (gauntlet.v1 ActionTrace): `actions` replayed open loop after the reset, then
    `agent_steps` agent steps; the episode is truncated after both."""

    actions: tuple[int, ...]
    agent_steps: int


@dataclass(frozen=True)
class Job:
    test_case_id: str
    values: Mapping[str, ParamValue]
    seed: int
    repetition: int = 0
    trace: TracePrefix | None = None


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
    prefix_terminal: bool = False  # the episode ended during its action-trace prefix


# With run_lockstep(..., boundaries=True): yielded after each lock-step in which episodes ended (compare with `is`),
# so a caller can send the outcomes of one lock-step together (RunEpisodesRequest.batch_results).
LOCKSTEP_END = Outcome(Job("", {}, 0))


class AgentError(RuntimeError):
    """The agent could not act (its service failed); the episodes in flight are lost, not judged."""


@runtime_checkable
class ObservationStage(Protocol):
    """Work between the environments and the agent, once per lock-step (image subjects: the translator and the
    encoder; simulator_service/image_stage.py). `expand` turns the group's packed observations into the
    model's batch; `contract` regroups the model's answers into one action per environment."""

    def expand(self, envs: Sequence[object], observations: np.ndarray) -> np.ndarray: ...

    def contract(self, actions: np.ndarray, n: int) -> np.ndarray: ...


@runtime_checkable
class Actor(Protocol):
    """Acts on batches in two halves (send, then receive in order), so a remote agent can think
    while the simulator steps other environments."""

    def send(self, observations: np.ndarray) -> None: ...

    def receive(self) -> np.ndarray: ...


class LocalActor:
    """An in-process act function as an Actor."""

    def __init__(self, act: ActFn) -> None:
        self._act = act
        self._pending: deque[np.ndarray] = deque()

    def send(self, observations: np.ndarray) -> None:
        self._pending.append(observations)

    def receive(self) -> np.ndarray:
        return self._act(self._pending.popleft())


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
    act: ActFn | Actor | Sequence[Actor],
    recorder_factory: Callable[[], TraceRecorder],
    max_steps: int | None = None,
    groups: int = 1,
    stage: ObservationStage | None = None,
    boundaries: bool = False,
) -> Iterator[Outcome]:
    """Runs every job on the given environments (len(envs) = parallelism) and yields outcomes as episodes end.

    The environments form `groups` lock-step groups, each making one batched agent request per
    step. With several groups the requests are pipelined in this one thread: while the agent
    answers one group, the simulator steps another (answers come back in request order).

    An environment that raises is replaced by a fresh one from `env_factory` and its job
    yields an Outcome with `error` set; an AgentError propagates (the agent is shared by all slots).
    A `stage` runs between the environments and the agent at every lock-step (see ObservationStage).
    Given several actors (e.g. streams to several agent replicas), group g sends to actor g % len(actors).
    With `boundaries`, LOCKSTEP_END follows the outcomes of each lock-step that had any.
    """
    if isinstance(act, Sequence):
        actors: list[Actor] = list(act)
    else:
        actors = [act if isinstance(act, Actor) else LocalActor(act)]
    pending = iter(jobs)
    slots = [_Slot(env) for env in envs]
    recorders = [recorder_factory() for _ in slots]
    groups = max(1, min(groups, len(slots)))
    in_flight: deque[tuple[list[int], Actor]] = deque()  # each actor answers its own requests in order

    def fill(i: int) -> Outcome | None:
        """Starts the next job in slot i (resetting, then replaying its action-trace prefix if it has one); returns
        an outcome when the job is already over: the reset or replay failed, or the trace needs no agent step."""
        slot = slots[i]
        slot.job = next(pending, None)
        if slot.job is None:
            return None
        slot.outcome = Outcome(slot.job)
        slot.started = time.perf_counter()
        recorders[i].start()
        try:
            slot.obs, _ = slot.env.reset(seed=slot.job.seed, options={"values": dict(slot.job.values)})
            if slot.job.trace is not None:
                return replay(i, slot.job.trace)
        except Exception as exc:  # noqa: BLE001 - a broken env must not take the batch down
            return _fail(i, exc)
        return None

    def replay(i: int, trace: TracePrefix) -> Outcome | None:
        """Steps slot i through the trace's actions without the agent (open loop); returns the outcome when the
        episode is over after them (it ended during the prefix, or the agent has no steps), else None."""
        slot, out = slots[i], slots[i].outcome
        assert out is not None and slot.obs is not None
        terminated = truncated = False
        for a in trace.actions:
            obs, reward, terminated, truncated, _ = slot.env.step(a)
            recorders[i].step(slot.env, slot.obs, np.asarray(a), float(reward))
            out.steps += 1
            out.total_reward += float(reward)
            slot.obs = obs
            if terminated or truncated:
                out.prefix_terminal = True
                break
        if not out.prefix_terminal and trace.agent_steps > 0:
            return None
        truncated = truncated or not terminated  # no agent steps: the trace's end cuts the episode
        return finish(i, bool(terminated), bool(truncated))

    def finish(i: int, terminated: bool, truncated: bool) -> Outcome:
        slot, out = slots[i], slots[i].outcome
        assert out is not None and slot.obs is not None
        out.terminated, out.truncated = terminated, truncated
        out.signals = recorders[i].finish(slot.env, slot.obs, terminated, truncated, out.prefix_terminal)
        out.wall_seconds = time.perf_counter() - slot.started
        slot.job = None
        return out

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

    def launch(group: int) -> None:
        active = [i for i in range(group, len(slots), groups) if slots[i].job is not None]
        if active:
            batch = pack_observations([slots[i].obs for i in active])
            if stage is not None:
                batch = stage.expand([slots[i].env for i in active], batch)
            actor = actors[group % len(actors)]
            actor.send(batch)
            in_flight.append((active, actor))

    for i in range(len(slots)):
        while (err := fill(i)) is not None:
            yield err
    for g in range(groups):
        launch(g)

    if boundaries:
        yield LOCKSTEP_END  # the outcomes of the first fills (failed resets, traces over before the agent acts)
    while in_flight:
        active, actor = in_flight.popleft()
        ended = False  # an outcome was yielded in this lock-step
        actions = actor.receive()
        if stage is not None:
            actions = stage.contract(actions, len(active))
        if len(actions) != len(active):
            raise AgentError(f"agent returned {len(actions)} actions for {len(active)} observations")
        for i, action in zip(active, actions):
            slot = slots[i]
            out = slot.outcome
            assert out is not None and slot.obs is not None
            try:
                env_action = action.item() if action.shape == () else action
                obs, reward, terminated, truncated, _ = slot.env.step(env_action)
            except Exception as exc:  # noqa: BLE001
                ended = True
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
            trace = out.job.trace
            if trace is not None and out.steps >= len(trace.actions) + trace.agent_steps and not terminated:
                truncated = True
            if terminated or truncated:
                ended = True
                yield finish(i, bool(terminated), bool(truncated))
                while (err := fill(i)) is not None:
                    yield err
        launch(active[0] % groups)  # slot i belongs to group i % groups
        if boundaries and ended:  # after the launch: the agent answers it while the caller sends these outcomes
            yield LOCKSTEP_END
