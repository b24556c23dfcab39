"""gRPC servicer of the simulator service."""

from __future__ import annotations

import copy
import itertools
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import grpc
import gymnasium as gym
import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from common.credentials import ClientCredentials
from common.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RelayedError,
    ServiceError,
    grpc_method,
)
from common.generated.gauntlet.v1 import (
    agent_pb2_grpc,
    common_pb2,
    simulator_pb2,
    simulator_pb2_grpc,
    translator_pb2_grpc,
)
from common.seeding import case_episode_seed
from common.server import client_channel
from common.space import case_values
from common.space_spec import pack_observation, space_to_proto
from common.tensor import TensorError, from_tensor, to_tensor
from common.validation import check_id, shown
from simulator_service.agent_client import AgentLane, AgentStream, check_model_fits, open_actor
from simulator_service.backends import check_first_observation, make_env
from simulator_service.frames import DEFAULT_FRAMES, DEFAULT_WIDTH, MAX_FRAMES, MAX_WIDTH, FrameCapture
from simulator_service.image_stage import ImageStage, is_image_env
from simulator_service.peers import Peers
from simulator_service.result_messages import ResultMessages
from simulator_service.runner import LOCKSTEP_END, AgentError, Job, TracePrefix, run_lockstep
from simulator_service.search_spec import to_proto as search_to_proto
from simulator_service.subject import NO_TRANSLATOR, Subject, SubjectError
from simulator_service.trace import TraceRecorder

EPISODES = Counter("gauntlet_simulator_episodes_total", "Episodes finished", ["subject", "outcome"])
STEPS = Counter("gauntlet_simulator_steps_total", "Environment steps", ["subject"])
ACTIVE = Gauge("gauntlet_simulator_active_batches", "RunEpisodes calls in progress")
QUEUE = Gauge("gauntlet_simulator_queued_episodes", "Episodes waiting for a free slot")
LOCKSTEP = Histogram("gauntlet_simulator_act_wait_seconds", "Time waiting for the agent's answer to one lock-step")
MAX_PARALLELISM = 512
MAX_REPETITIONS = 100  # runs per test case, as a campaign allows
MAX_TEST_CASES = 100_000  # per request: a campaign batch is at most 4096
MAX_TRACE_ACTIONS = 100_000  # actions of one action trace (or session replay), and its agent steps
T = TypeVar("T")
FOREVER_SECONDS = 10**7  # a caller's time left beyond this (~4 months) means it set no deadline


class EnvPool:
    """Reuses constructed environments across requests (MuJoCo/Box2D construction is not free)."""

    def __init__(self) -> None:
        self._free: dict[str, list[gym.Env]] = defaultdict(list)
        self._lock = threading.Lock()

    def take(self, subject: Subject, n: int) -> list[gym.Env]:
        with self._lock:
            free = self._free[subject.name]
            taken = [free.pop() for _ in range(min(n, len(free)))]
        return taken + [make_env(subject) for _ in range(n - len(taken))]

    def give(self, subject: Subject, envs: list[gym.Env]) -> None:
        with self._lock:
            self._free[subject.name].extend(envs)


class SimulatorServicer(simulator_pb2_grpc.SimulatorServiceServicer):
    def __init__(
        self,
        subjects: dict[str, Subject],
        agent_endpoint: str,
        default_parallelism: int = 64,
        pipeline: int = 2,
        credentials: ClientCredentials | None = None,
        translator_endpoint: str = "",
        allowed_endpoints: Iterable[str] = (),
        peers: Iterable[str] = (),
        agent_lanes: bool = True,
    ) -> None:
        # a subject whose backend needs modules this environment lacks is not served here (docs/subjects/mario.md):
        # a peer simulator in an environment that has them serves it, and this one forwards its calls there
        self.unavailable = {n: s.missing_modules() for n, s in subjects.items() if s.missing_modules()}
        self.subjects = {n: s for n, s in subjects.items() if n not in self.unavailable}
        self.peers = Peers(peers, credentials)
        # A request may name another agent/translator service, but only one the operator configured: a client must
        # never make this service open connections of its choosing (server-side request forgery).
        # several agent endpoints (comma-separated): replicas of one agent service, each lock-step group acts with one
        self.agent_endpoints = tuple(e.strip() for e in agent_endpoint.split(",") if e.strip())
        self.allowed_endpoints = frozenset(
            e for e in (*self.agent_endpoints, translator_endpoint, *allowed_endpoints) if e
        )
        self.translator_endpoint = translator_endpoint  # image subjects' default translator service
        self.credentials = credentials  # presented to every agent this simulator calls
        self.pipeline = max(1, pipeline)
        self.agent_lanes = agent_lanes  # try a same-host lane to the agent before ActStream (common/lane.py)
        self.agent_endpoint = self.agent_endpoints[0] if self.agent_endpoints else ""
        self.default_parallelism = default_parallelism
        self.pool = EnvPool()
        self._channels: dict[str, grpc.Channel] = {}
        self._fits: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()
        self._spaces: dict[str, tuple[object, object]] = {}

    # -- helpers -----------------------------------------------------------------------------
    def _subject(self, name: str) -> Subject:
        if name in self.unavailable:
            raise FailedPrecondition(
                f"subject {shown(name)} needs the Python module(s) {', '.join(self.unavailable[name])}, which this "
                "simulator's environment lacks, and no peer simulator (--peer-simulator) serves it: start a simulator "
                "in an environment that has them and name it with --peer-simulator (for Mario: make .venv-mario, "
                "docs/subjects/mario.md)"
            )
        if name not in self.subjects:
            known = sorted({*self.subjects, *(e.subject for e in self.peers.environments())})
            raise NotFound(f"unknown subject {shown(name)}; known subjects: {', '.join(known)}")
        return self.subjects[name]

    def _peer(self, name: str) -> simulator_pb2_grpc.SimulatorServiceStub | None:
        """The peer simulator that runs `name`, when this one does not serve it itself."""
        return None if name in self.subjects else self.peers.stub_for(name)

    @staticmethod
    def _relay(call: Callable[[], T]) -> T:
        """A forwarded call's answer; its failure keeps the peer's status code and sentence."""
        try:
            return call()
        except grpc.RpcError as exc:
            raise RelayedError(exc.details() or "", exc.code()) from None

    def _relay_stream(self, call: Callable[[], Iterator[T]], context: grpc.ServicerContext) -> Iterator[T]:
        """A forwarded stream, answer by answer; the caller's cancel reaches the peer."""
        stream = call()
        context.add_callback(getattr(stream, "cancel", lambda: None))
        try:
            yield from stream
        except grpc.RpcError as exc:
            raise RelayedError(exc.details() or "", exc.code()) from None

    def _spaces_of(self, subject: Subject) -> tuple[object, object]:
        if subject.name not in self._spaces:
            env = self.pool.take(subject, 1)
            # A backend whose envs run here checks the subject's first observation against its space once, so a
            # subject that cannot work is refused at its first description (every campaign's preflight), not
            # mid-campaign; a remote backend (donkey) offers no check: it would need its simulator to describe.
            try:
                check_first_observation(env[0])
            except SubjectError as exc:
                raise FailedPrecondition(str(exc)) from None
            self._spaces[subject.name] = (env[0].observation_space, env[0].action_space)
            self.pool.give(subject, env)
        return self._spaces[subject.name]

    def _endpoint(self, field: str, requested: str, default: str) -> str:
        """The service a request's `field` names if the simulator was configured with it, else its own default."""
        if not requested:
            return default
        if requested not in self.allowed_endpoints:
            raise PermissionDenied(
                f"RunEpisodesRequest.{field} {shown(requested)} is not an endpoint this simulator may connect to: "
                "leave it empty for the simulator's own service, or have its operator allow it with --allow-endpoint"
            )
        return requested

    def _agent_stub(self, endpoint: str) -> agent_pb2_grpc.AgentServiceStub:
        if not endpoint:
            raise FailedPrecondition(
                "no agent endpoint: start the simulator with --agent-endpoint (or allow one with --allow-endpoint and "
                "name it in RunEpisodesRequest.agent_endpoint)"
            )
        with self._lock:
            if endpoint not in self._channels:
                self._channels[endpoint] = client_channel(endpoint, self.credentials)
            return agent_pb2_grpc.AgentServiceStub(self._channels[endpoint])

    def _translator_stub(self, endpoint: str) -> translator_pb2_grpc.TranslatorServiceStub:
        if not endpoint:
            raise FailedPrecondition(
                "no translator endpoint: start the simulator with --translator-endpoint (or allow one with "
                "--allow-endpoint and name it in RunEpisodesRequest.translator_endpoint), or run without a translator "
                "(observation_translator: none)"
            )
        with self._lock:
            if endpoint not in self._channels:
                self._channels[endpoint] = client_channel(endpoint, self.credentials)
            return translator_pb2_grpc.TranslatorServiceStub(self._channels[endpoint])

    def _image_stage(
        self,
        subject: Subject,
        envs: list[gym.Env],
        request: simulator_pb2.RunEpisodesRequest,
        agent: agent_pb2_grpc.AgentServiceStub,
    ) -> ImageStage | None:
        """The translator/encoder stage of an image subject's episodes (simulator_service/image_stage.py)."""
        if not envs or not is_image_env(envs[0]):  # asks the envs this call took: a remote backend may lease hosts
            return None
        name = request.observation_translator or subject.observation_translator
        name = "" if name == NO_TRANSLATOR else name
        endpoint = self._endpoint("translator_endpoint", request.translator_endpoint, self.translator_endpoint)
        stub = self._translator_stub(endpoint) if name else None
        return ImageStage(stub, name, agent, request.model.name, "features" in request.trace.signals)

    def _summary(self, s: Subject) -> simulator_pb2.EnvironmentSummary:
        return simulator_pb2.EnvironmentSummary(
            subject=s.name, backend=s.backend, env_id=s.env_id, description=s.description
        )

    def _validate(self, subject: Subject, cases: list[common_pb2.TestCase]) -> list[simulator_pb2.ConfigValidity]:
        if len(cases) > MAX_TEST_CASES:
            raise InvalidArgument(f"test_cases must hold at most {MAX_TEST_CASES:,}, got {len(cases):,}")
        for i, case in enumerate(cases):  # ids travel into results, traces and seeds: the shared id rule
            check_id(f"test_cases[{i}].id", case.id)
        return [
            simulator_pb2.ConfigValidity(
                test_case_id=c.id, valid=not (v := subject.violations(case_values(c))), violations=v
            )
            for c in cases
        ]

    def _trace(self, subject: Subject, case: common_pb2.TestCase) -> TracePrefix:
        """A test case's action trace, checked against the subject's discrete action space."""
        _, act_space = self._spaces_of(subject)
        n = getattr(act_space, "n", None)
        if not isinstance(act_space, gym.spaces.Discrete) or n is None:
            raise InvalidArgument(
                f"test case {shown(case.id)}: action_trace needs a discrete action space; subject {subject.name} "
                f"has {act_space}"
            )
        trace = case.action_trace
        if len(trace.actions) > MAX_TRACE_ACTIONS or trace.agent_steps > MAX_TRACE_ACTIONS:
            raise InvalidArgument(
                f"test case {shown(case.id)}: action_trace.actions and agent_steps must each be at most "
                f"{MAX_TRACE_ACTIONS:,}"
            )
        start = int(act_space.start)
        for i, a in enumerate(trace.actions):
            if not start <= a < start + int(n):
                raise InvalidArgument(
                    f"test case {shown(case.id)}: action_trace.actions[{i}]={a} is outside the action space "
                    f"{{{start}, ..., {start + int(n) - 1}}}"
                )
        return TracePrefix(tuple(int(a) for a in trace.actions), int(trace.agent_steps))

    def _acting_subject(self, subject: Subject, cases: list[common_pb2.TestCase]) -> Subject:
        """The subject whose environment the episodes run in: the request's, or the declared variant its cases'
        action traces name (ActionTrace.agent_subject; one per request), checked to be the same level with another
        action set, so a prefix found with the search's actions is replayed there and the agent acts with its own."""
        named = {c.action_trace.agent_subject if c.HasField("action_trace") else "" for c in cases}
        if named <= {""}:
            return subject
        if len(named) > 1:
            shown_names = ", ".join(shown(n) if n else "none" for n in sorted(named))
            raise InvalidArgument(
                f"test cases name different action_trace.agent_subject values ({shown_names}): every test case of "
                "one request must name the same variant"
            )
        name = named.pop()
        if name not in subject.variants:
            raise InvalidArgument(
                f"action_trace.agent_subject={shown(name)} is not a variant of subject {subject.name} "
                f"(its variants: {', '.join(subject.variants) or 'none'})"
            )
        variant = self.subjects.get(name)
        if variant is None:
            raise FailedPrecondition(f"subject {subject.name}'s variant {name} is not served by this simulator")
        ours = (subject.backend, subject.env_id, subject.space.names)
        if (variant.backend, variant.env_id, variant.space.names) != ours:
            raise FailedPrecondition(
                f"subject {subject.name}'s variant {name} is not the same environment (backend, env_id and "
                "parameters must match)"
            )
        return variant

    @staticmethod
    def _reset_seed(seed: int, case: common_pb2.TestCase, repetition: int) -> int:
        """The episode's reset seed: an action trace's own seed when it pins one (every repetition starts from the
        state its trace was found from), else the one derived from (seed, test case id, repetition)."""
        return case_episode_seed(seed, case, repetition)

    def _session_reply(
        self,
        subject: Subject,
        env: gym.Env,
        obs: object,
        step: int,
        ended: tuple[bool, bool],
        reward: float = 0.0,
        snapshot_id: str = "",
    ) -> simulator_pb2.OpenSessionResponse:
        """A session answer; a subject with a `search` declaration adds the state's abstraction and kind."""
        reply = simulator_pb2.OpenSessionResponse(
            observation=to_tensor(pack_observation(obs)),
            step=step,
            reward=reward,
            terminated=ended[0],
            truncated=ended[1],
            snapshot_id=snapshot_id,
        )
        if subject.search is not None:
            reply.abstract_state.CopyFrom(to_tensor(subject.search.abstract(env, obs)))
            reply.state_kind = subject.search.kind(env, obs, reply.terminated, reply.truncated)
        return reply

    # -- RPCs ----------------------------------------------------------------------------------
    @grpc_method
    def ListEnvironments(
        self, request: simulator_pb2.ListEnvironmentsRequest, context: grpc.ServicerContext
    ) -> simulator_pb2.ListEnvironmentsResponse:
        own = [self._summary(self.subjects[n]) for n in sorted(self.subjects)]
        forwarded = [e for e in self.peers.environments() if e.subject not in self.subjects]
        return simulator_pb2.ListEnvironmentsResponse(environments=sorted([*own, *forwarded], key=lambda e: e.subject))

    @grpc_method
    def DescribeEnvironment(
        self, request: simulator_pb2.DescribeEnvironmentRequest, context: grpc.ServicerContext
    ) -> simulator_pb2.DescribeEnvironmentResponse:
        if peer := self._peer(request.subject):
            return self._relay(lambda: peer.DescribeEnvironment(request, timeout=_deadline(context)))
        s = self._subject(request.subject)
        obs_space, act_space = self._spaces_of(s)
        signals = [  # standard, search (for a subject with a search declaration), then the subject's own
            simulator_pb2.SignalInfo(name=d.name, granularity=d.granularity, description=d.description)
            for d in s.recorded_signals()
        ]
        return simulator_pb2.DescribeEnvironmentResponse(
            summary=self._summary(s),
            parameter_space=s.space.to_proto(),
            observation_space=space_to_proto(obs_space),
            action_space=space_to_proto(act_space),
            default_oracle=s.oracle,
            max_steps=s.max_steps,
            signals=signals,
            deterministic=s.deterministic,
            **s.rules.to_proto_fields(),  # the rules travel declared, so a remote generator builds the same ones
            search=search_to_proto(s.search, s.space, int(getattr(act_space, "n", 0))) if s.search else None,
            variants=list(s.variants),
        )

    @grpc_method
    def ValidateConfigs(
        self, request: simulator_pb2.ValidateConfigsRequest, context: grpc.ServicerContext
    ) -> simulator_pb2.ValidateConfigsResponse:
        if peer := self._peer(request.subject):
            return self._relay(lambda: peer.ValidateConfigs(request, timeout=_deadline(context)))
        s = self._subject(request.subject)
        return simulator_pb2.ValidateConfigsResponse(results=self._validate(s, list(request.test_cases)))

    @grpc_method
    def RunEpisodes(
        self, request: simulator_pb2.RunEpisodesRequest, context: grpc.ServicerContext
    ) -> Iterator[simulator_pb2.RunEpisodesResponse]:
        if peer := self._peer(request.subject):
            yield from self._relay_stream(lambda: peer.RunEpisodes(request, timeout=_deadline(context)), context)
            return
        subject = self._subject(request.subject)
        if not request.model.name:
            raise InvalidArgument("RunEpisodesRequest.model.name is required")
        parallelism = request.parallelism or self.default_parallelism
        if parallelism > MAX_PARALLELISM:
            raise InvalidArgument(f"parallelism={parallelism} is out of range [1, {MAX_PARALLELISM}]")
        if request.repetitions > MAX_REPETITIONS:  # each repetition is a job held in memory
            raise InvalidArgument(f"repetitions={request.repetitions} is out of range [0, {MAX_REPETITIONS}] (0 = 1)")
        invalid = {v.test_case_id: list(v.violations) for v in self._validate(subject, list(request.test_cases))}
        invalid = {case_id: violations for case_id, violations in invalid.items() if violations}
        if invalid and not request.invalid_as_results:
            case_id, violations = next(iter(invalid.items()))
            raise InvalidArgument(f"test case {case_id!r}: {'; '.join(violations)}")
        cases = [c for c in request.test_cases if c.id not in invalid]
        subject = self._acting_subject(subject, cases)  # a declared variant the traces' agent acts in
        try:
            TraceRecorder(subject, list(request.trace.signals))  # an unknown signal fails before any episode runs
        except KeyError as exc:
            raise InvalidArgument(str(exc.args[0])) from None
        if request.agent_endpoint:
            agent_endpoints = [self._endpoint("agent_endpoint", request.agent_endpoint, self.agent_endpoint)]
        else:
            agent_endpoints = list(self.agent_endpoints) or [""]
        self._endpoint("translator_endpoint", request.translator_endpoint, self.translator_endpoint)  # before any env
        stubs = [self._agent_stub(endpoint) for endpoint in agent_endpoints]
        for agent_endpoint, stub in zip(agent_endpoints, stubs):
            key = (agent_endpoint, request.model.name, subject.name)
            if key not in self._fits:
                check_model_fits(stub, request.model.name, subject.name, *self._spaces_of(subject))
                self._fits.add(key)
        stub = stubs[0]  # the image stage's encoder

        repetitions = max(request.repetitions, 1)
        traces = {c.id: self._trace(subject, c) for c in cases if c.HasField("action_trace")}
        messages = ResultMessages(request.batch_results)
        for case_id, violations in invalid.items():  # invalid_as_results: one result each, not run
            yield from messages.add(common_pb2.EpisodeResult(test_case_id=case_id, violations=violations))
        yield from messages.flush()
        jobs = [
            Job(c.id, case_values(c), self._reset_seed(request.seed, c, r), r, traces.get(c.id))
            for c in cases
            for r in range(repetitions)
        ]
        if not jobs:
            return
        QUEUE.inc(len(jobs))
        envs = self.pool.take(subject, min(parallelism, len(jobs)))
        try:
            stage = self._image_stage(subject, envs, request, stub)
        except ServiceError:  # e.g. no translator endpoint: the envs go back unused
            self.pool.give(subject, envs)
            raise
        # with 2 groups the agent answers one half while this thread steps the other (>= 8 envs a group); group g
        # acts over a stream (or lane) of its own to agent endpoint g % endpoints, so at most one request of a group
        # is ever in flight on it
        groups = max(1, min(self.pipeline, len(envs) // 8))
        agents = [open_actor(stubs[g % len(stubs)], request.model.name, self.agent_lanes) for g in range(groups)]
        ACTIVE.inc()

        class MeteredAgent:
            """An agent stream, counting steps and timing the wait for each answer."""

            def __init__(self, agent: AgentLane | AgentStream) -> None:
                self.agent = agent

            def send(self, observations: np.ndarray) -> None:
                STEPS.labels(subject.name).inc(len(observations))
                self.agent.send(observations)

            def receive(self) -> np.ndarray:
                started = time.perf_counter()
                actions = self.agent.receive()
                LOCKSTEP.observe(time.perf_counter() - started)
                return actions

        healthy = True
        try:
            for out in run_lockstep(
                lambda: make_env(subject),
                envs,
                jobs,
                [MeteredAgent(agent) for agent in agents],
                lambda: TraceRecorder(subject, list(request.trace.signals)),
                max_steps=request.max_steps or None,
                groups=groups,
                stage=stage,
                boundaries=request.batch_results,
            ):
                if out is LOCKSTEP_END:  # the results of one lock-step go together
                    yield from messages.flush()
                    continue
                QUEUE.dec()
                EPISODES.labels(subject.name, "error" if out.error else "ok").inc()
                result = common_pb2.EpisodeResult(
                    test_case_id=out.job.test_case_id,
                    seed=out.job.seed,
                    repetition=out.job.repetition,
                    steps=out.steps,
                    total_reward=out.total_reward,
                    terminated=out.terminated,
                    truncated=out.truncated,
                    wall_seconds=out.wall_seconds,
                    error=out.error,
                )
                for name, value in out.signals.items():
                    result.signals[name].CopyFrom(to_tensor(value))
                yield from messages.add(result)
            yield from messages.flush()
        except AgentError as exc:  # the agent answered, but not with one action per observation: retrying won't help
            healthy = False
            raise FailedPrecondition(str(exc)) from None
        except ServiceError:  # the agent's status, relayed with its code (simulator_service/agent_client.py)
            healthy = False
            raise
        finally:
            ACTIVE.dec()
            for agent in agents:
                agent.close()
            if healthy:
                self.pool.give(subject, envs)

    @grpc_method
    def OpenSession(
        self, requests: Iterator[simulator_pb2.OpenSessionRequest], context: grpc.ServicerContext
    ) -> Iterator[simulator_pb2.OpenSessionResponse]:
        env: gym.Env | None = None
        subject: Subject | None = None
        snapshots: dict[str, tuple[gym.Env, int, object, bool, bool]] = {}
        step = 0
        obs: object = None
        ended = (False, False)  # (terminated, truncated) of the current state
        first = next(requests, None)
        if first is None:
            return
        if first.WhichOneof("command") == "open" and (peer := self._peer(first.open.subject)):
            # the whole session runs on the peer: this stream only passes commands and answers through
            yield from self._relay_stream(lambda: peer.OpenSession(itertools.chain([first], requests)), context)
            return
        try:
            for request in itertools.chain([first], requests):
                which = request.WhichOneof("command")
                if which == "open":
                    subject = self._subject(request.open.subject)
                    values = case_values(request.open.test_case)
                    problems = subject.violations(values)
                    if problems:
                        raise InvalidArgument("; ".join(problems))
                    if len(request.open.replay) > MAX_TRACE_ACTIONS:
                        raise InvalidArgument(f"open.replay must hold at most {MAX_TRACE_ACTIONS:,} actions")
                    if env is not None:
                        env.close()
                    env = make_env(subject)
                    obs, _ = env.reset(seed=request.open.seed, options={"values": values})
                    step, ended, replay_reward = 0, (False, False), 0.0
                    for i, a in enumerate(request.open.replay):  # reset + replay: a search's way back to a state
                        if not env.action_space.contains(_as_space_dtype(env.action_space, int(a))):
                            raise InvalidArgument(
                                f"open.replay[{i}]={a} is outside the action space {env.action_space}"
                            )
                        if any(ended):
                            raise InvalidArgument(f"open.replay[{i}]: the episode already ended at step {step}")
                        obs, r, terminated, truncated, _ = env.step(int(a))
                        step, ended, replay_reward = step + 1, (bool(terminated), bool(truncated)), float(r)
                    yield self._session_reply(subject, env, obs, step, ended, replay_reward)
                    continue
                if env is None or subject is None:
                    raise FailedPrecondition("the first command of a session must be 'open'")
                if which == "step":
                    try:
                        action = from_tensor(request.step.action)
                    except TensorError as exc:
                        raise InvalidArgument(f"step.action: {exc}") from None
                    action_value = action.item() if action.shape == () else action
                    if not env.action_space.contains(_as_space_dtype(env.action_space, action_value)):
                        raise InvalidArgument(
                            f"step.action of shape {tuple(action.shape)} is outside the action space {env.action_space}"
                        )
                    obs, reward, terminated, truncated, _ = env.step(action_value)
                    step += 1
                    ended = (bool(terminated), bool(truncated))
                    yield self._session_reply(subject, env, obs, step, ended, float(reward))
                elif which == "snapshot":
                    snapshot_id = uuid.uuid4().hex
                    try:
                        snapshots[snapshot_id] = (copy.deepcopy(env), step, copy.deepcopy(obs), *ended)
                    except Exception as exc:  # noqa: BLE001 - e.g. Box2D worlds cannot be copied
                        raise FailedPrecondition(
                            f"this environment cannot be snapshotted ({type(exc).__name__})"
                        ) from None
                    yield simulator_pb2.OpenSessionResponse(snapshot_id=snapshot_id, step=step)
                elif which == "restore":
                    if request.restore.snapshot_id not in snapshots:
                        raise NotFound(f"unknown snapshot {request.restore.snapshot_id!r}")
                    saved, step, obs, *flags = snapshots[request.restore.snapshot_id]
                    ended = (bool(flags[0]), bool(flags[1]))
                    env.close()
                    env = copy.deepcopy(saved)
                    if request.restore.HasField("reseed"):  # a real repetition: not the snapshot's copied generator
                        env.unwrapped.np_random = np.random.default_rng(request.restore.reseed)
                    yield self._session_reply(subject, env, obs, step, ended, snapshot_id=request.restore.snapshot_id)
                else:
                    raise InvalidArgument("OpenSessionRequest has no command")
        finally:
            if env is not None:
                env.close()

    @grpc_method
    def Render(
        self, request: simulator_pb2.RenderRequest, context: grpc.ServicerContext
    ) -> simulator_pb2.RenderResponse:
        if peer := self._peer(request.subject):
            return self._relay(lambda: peer.Render(request, timeout=_deadline(context)))
        subject = self._subject(request.subject)
        values = case_values(request.test_case)
        problems = subject.violations(values)
        if problems:
            raise InvalidArgument("; ".join(problems))
        env = make_env(subject, render_mode="rgb_array")
        try:
            env.reset(seed=request.seed, options={"values": values})
            noop = env.action_space.sample() * 0
            for _ in range(request.steps):
                env.step(noop)
            frame = np.asarray(env.render(), dtype=np.uint8)
        finally:
            env.close()
        return simulator_pb2.RenderResponse(image=to_tensor(frame))

    @grpc_method
    def RenderEpisode(
        self, request: simulator_pb2.RenderEpisodeRequest, context: grpc.ServicerContext
    ) -> Iterator[simulator_pb2.RenderEpisodeResponse]:
        if peer := self._peer(request.subject):
            yield from self._relay_stream(lambda: peer.RenderEpisode(request, timeout=_deadline(context)), context)
            return
        subject = self._subject(request.subject)
        if not request.model.name:
            raise InvalidArgument("RenderEpisodeRequest.model.name is required")
        if request.max_frames > MAX_FRAMES:
            raise InvalidArgument(
                f"max_frames={request.max_frames} is out of range [1, {MAX_FRAMES}] (0 = {DEFAULT_FRAMES})"
            )
        if request.max_width > MAX_WIDTH:
            raise InvalidArgument(
                f"max_width={request.max_width} is out of range [1, {MAX_WIDTH}] (0 = {DEFAULT_WIDTH})"
            )
        if request.repetition >= MAX_REPETITIONS:
            raise InvalidArgument(f"repetition={request.repetition} is out of range [0, {MAX_REPETITIONS - 1}]")
        case = request.test_case
        violations = self._validate(subject, [case])[0].violations
        if violations:
            raise InvalidArgument(f"test case {case.id!r}: {'; '.join(violations)}")
        try:
            TraceRecorder(subject, list(request.trace.signals))
        except KeyError as exc:
            raise InvalidArgument(str(exc.args[0])) from None
        endpoint = self._endpoint("agent_endpoint", request.agent_endpoint, self.agent_endpoint)
        stub = self._agent_stub(endpoint)
        key = (endpoint, request.model.name, subject.name)
        if key not in self._fits:
            check_model_fits(stub, request.model.name, subject.name, *self._spaces_of(subject))
            self._fits.add(key)
        trace = self._trace(subject, case) if case.HasField("action_trace") else None
        job = Job(
            case.id,
            case_values(case),
            self._reset_seed(request.seed, case, request.repetition),
            request.repetition,
            trace,
        )
        try:
            env = FrameCapture(
                make_env(subject, render_mode="rgb_array"),
                stride=request.frame_stride or 1,
                max_frames=request.max_frames or DEFAULT_FRAMES,
                max_width=request.max_width or DEFAULT_WIDTH,
            )
        except (TypeError, ValueError) as exc:  # a backend without rgb_array rendering
            raise FailedPrecondition(
                f"subject {subject.name} cannot render its episodes ({type(exc).__name__})"
            ) from None
        as_run = simulator_pb2.RunEpisodesRequest(
            subject=request.subject, observation_translator=request.observation_translator, trace=request.trace
        )
        as_run.model.name = request.model.name
        agent = open_actor(stub, request.model.name, self.agent_lanes)
        try:
            stage = self._image_stage(subject, [env], as_run, stub)
            outcomes = list(
                run_lockstep(
                    lambda: make_env(subject),
                    [env],
                    [job],
                    [agent],
                    lambda: TraceRecorder(subject, list(request.trace.signals)),
                    max_steps=request.max_steps or None,
                    stage=stage,
                )
            )
        except AgentError as exc:
            raise FailedPrecondition(str(exc)) from None
        finally:
            agent.close()
            env.close()
        out = outcomes[0]
        for frame in env.frames:
            yield simulator_pb2.RenderEpisodeResponse(frame=to_tensor(frame))
        result = common_pb2.EpisodeResult(
            test_case_id=case.id,
            seed=job.seed,
            repetition=job.repetition,
            steps=out.steps,
            total_reward=out.total_reward,
            terminated=out.terminated,
            truncated=out.truncated,
            wall_seconds=out.wall_seconds,
            error=out.error,
        )
        for name, value in out.signals.items():
            result.signals[name].CopyFrom(to_tensor(value))
        yield simulator_pb2.RenderEpisodeResponse(result=result)


def register(
    server: grpc.Server,
    subjects: dict[str, Subject],
    agent_endpoint: str,
    parallelism: int,
    pipeline: int = 2,
    credentials: ClientCredentials | None = None,
    translator_endpoint: str = "",
    allowed_endpoints: Iterable[str] = (),
    peers: Iterable[str] = (),
    agent_lanes: bool = True,
) -> list[str]:
    simulator_pb2_grpc.add_SimulatorServiceServicer_to_server(
        SimulatorServicer(
            subjects,
            agent_endpoint,
            parallelism,
            pipeline,
            credentials,
            translator_endpoint,
            allowed_endpoints,
            peers,
            agent_lanes,
        ),
        server,
    )
    return [simulator_pb2.DESCRIPTOR.services_by_name["SimulatorService"].full_name]


def _deadline(context: grpc.ServicerContext) -> float | None:
    """The caller's time left, for a forwarded call; None when the caller set no deadline (grpc then reports one
    in the far future, which as a timeout would overflow into an immediate DEADLINE_EXCEEDED)."""
    left = context.time_remaining()
    return None if left is None or left > FOREVER_SECONDS else left


def _as_space_dtype(space: gym.Space, action: object) -> object:
    """The action cast to a Box's dtype, so a float64 tensor of in-range values is not refused for being float64."""
    if isinstance(space, gym.spaces.Box):
        return np.asarray(action, dtype=space.dtype)
    return action
