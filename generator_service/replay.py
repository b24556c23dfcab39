"""Replay: one stored execution run and judged again (ReplayExecution), and its episode's frames.

The episode seeds are not stored: they derive from the campaign seed, the test case id and the repetition by the
one rule every episode follows (common/seeding.py ``episode_seed``; an action trace that pins ``reset_seed`` keeps
it), so running the stored test case again with the campaign seed resets every repetition's environment the same
way. The replay runs as the campaign ran it (RunEpisodes with the campaign's repetitions, the oracle's signals, the
same majority vote); with frames asked for, one repetition runs again through RenderEpisode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import grpc

from common.errors import FailedPrecondition, NotFound
from common.generated.gauntlet.v1 import (
    common_pb2,
    generator_pb2,
    oracle_pb2,
    oracle_pb2_grpc,
    simulator_pb2,
)
from common.remote import local_error
from common.retry import Retry
from common.seeding import case_episode_seed
from common.space import ParameterSpace
from common.test_case import TestCase
from generator_service.config import CampaignConfig
from generator_service.pipeline.execute import Ran
from generator_service.pipeline.judge import VERDICT_NAMES, Judge
from generator_service.pipeline.plan import PlannedCase
from generator_service.simulators import SimulatorPool
from generator_service.store import CampaignStore, ExecutionRow

REPLAY_TIMEOUT_SECONDS = 600
DEFAULT_FRAMES = 300
MAX_FRAMES = 1000
SHOWN_IDS = 5


@dataclass(frozen=True)
class Replayed:
    stored: ExecutionRow
    replayed: ExecutionRow
    seeds: list[int]
    oracle: str
    verdicts: list[str]  # per repetition, repetition 0 first
    test_case: common_pb2.TestCase


def find_execution(store: CampaignStore, campaign_id: str, test_case_id: str) -> ExecutionRow:
    """The stored execution of ``test_case_id``; NOT_FOUND naming a few stored ids when there is none."""
    ids: list[str] = []
    for row in store.executions(campaign_id):
        if row.test_case_id == test_case_id:
            return row
        if len(ids) < SHOWN_IDS:
            ids.append(row.test_case_id)
    shown = ", ".join(ids) + (", ..." if len(ids) == SHOWN_IDS else "")
    raise NotFound(
        f"campaign {campaign_id!r} has no execution {test_case_id!r} "
        f"(ids look like t0000079; stored: {shown or 'none'})"
    )


def seeds_of(config: CampaignConfig, case: common_pb2.TestCase, repetitions: int) -> list[int]:
    """Each repetition's reset seed, by the simulator's rule (common/seeding.py case_episode_seed)."""
    return [case_episode_seed(config.seed, case, r) for r in range(repetitions)]


class Replayer:
    """Runs stored executions again on the campaign's simulators and oracle."""

    def __init__(self, simulators: SimulatorPool, oracle: oracle_pb2_grpc.OracleServiceStub) -> None:
        self.simulators = simulators
        self.oracle = oracle

    def _call(self, what: str, call: Callable[[], object]) -> object:
        try:
            return Retry(budget_seconds=30, idempotent=True).call(call)
        except grpc.RpcError as exc:
            raise local_error(exc, what) from None

    def context(self, config: CampaignConfig) -> tuple[str, list[str], ParameterSpace]:
        """(oracle name, the signals it needs, the parameter space) of the campaign's subject."""
        info = self._call(
            "simulator service",
            lambda: self.simulators.call(
                lambda sim: sim.DescribeEnvironment(
                    simulator_pb2.DescribeEnvironmentRequest(subject=config.subject), timeout=60
                )
            ),
        )
        assert isinstance(info, simulator_pb2.DescribeEnvironmentResponse)
        oracle_name = config.oracle or info.default_oracle
        return oracle_name, self._signals(oracle_name), ParameterSpace.from_proto(info.parameter_space)

    def run_cases(
        self, campaign_id: str, config: CampaignConfig, cases: list[tuple[str, TestCase]], tag: str
    ) -> list[ExecutionRow]:
        """Runs (id, test case) pairs as the campaign runs its inputs (its repetitions, oracle and majority vote)
        and returns their judged rows in the same order; an input the subject refuses comes back invalid."""
        oracle_name, signals, space = self.context(config)
        return self._run(campaign_id, config, cases, tag, oracle_name, signals, space)[0]

    def _run(
        self,
        campaign_id: str,
        config: CampaignConfig,
        cases: list[tuple[str, TestCase]],
        tag: str,
        oracle_name: str,
        signals: list[str],
        space: ParameterSpace,
    ) -> tuple[list[ExecutionRow], list[Ran]]:
        repetitions = max(config.repetitions, 1)
        request = simulator_pb2.RunEpisodesRequest(
            request_id=f"{campaign_id}/{tag}/{cases[0][0]}",
            subject=config.subject,
            seed=config.seed,
            repetitions=config.repetitions,
            trace=common_pb2.TraceSpec(signals=signals),
            parallelism=max(1, min(config.parallelism, len(cases) * repetitions)),
            test_cases=[case.to_proto(space, cid) for cid, case in cases],
            observation_translator=config.observation_translator,
            invalid_as_results=True,
        )
        request.model.name = config.model
        episodes = self._call(
            "simulator service",
            lambda: self.simulators.call(
                lambda sim: [r.result for r in sim.RunEpisodes(request, timeout=REPLAY_TIMEOUT_SECONDS)]
            ),
        )
        assert isinstance(episodes, list)
        broken = [e for e in episodes if e.error]
        if broken:
            raise FailedPrecondition(
                f"the episode of {broken[0].test_case_id!r} did not run to its end: {broken[0].error[:300]}"
            )
        by_case: dict[str, list[common_pb2.EpisodeResult]] = {}
        for e in episodes:
            by_case.setdefault(e.test_case_id, []).append(e)
        ran = [
            Ran(PlannedCase(cid, i + 1, case), sorted(by_case.get(cid, []), key=lambda e: e.repetition))
            for i, (cid, case) in enumerate(cases)
        ]
        judge = Judge(self.oracle, oracle_name, lambda what, call: self._call("oracle service", call))
        rows = judge.judge(0, ran, 0.0)
        assert rows is not None
        return rows, ran

    def replay(self, campaign_id: str, config: CampaignConfig, stored: ExecutionRow) -> Replayed:
        if stored.verdict == "invalid":
            raise FailedPrecondition(
                f"execution {stored.test_case_id!r} of campaign {campaign_id!r} is an invalid input that never ran "
                f"({stored.reason}); there is no episode to replay"
            )
        oracle_name, signals, space = self.context(config)
        test_case = TestCase.from_stored(stored.values)
        rows, ran = self._run(
            campaign_id, config, [(stored.test_case_id, test_case)], "replay", oracle_name, signals, space
        )
        row = replace(rows[0], index=stored.index, batch=stored.batch, elapsed_seconds=stored.elapsed_seconds)
        case = test_case.to_proto(space, stored.test_case_id)
        verdicts = self._verdicts(oracle_name, ran[0])
        return Replayed(stored, row, seeds_of(config, case, max(config.repetitions, 1)), oracle_name, verdicts, case)

    def _signals(self, oracle_name: str) -> list[str]:
        listing = self._call(
            "oracle service", lambda: self.oracle.ListOracles(oracle_pb2.ListOraclesRequest(), timeout=30)
        )
        assert isinstance(listing, oracle_pb2.ListOraclesResponse)
        for o in listing.oracles:
            if o.name == oracle_name:
                return list(o.required_signals)
        raise FailedPrecondition(
            f"the campaign's oracle {oracle_name!r} is not served; known: {', '.join(o.name for o in listing.oracles)}"
        )

    def judge_episodes(self, oracle_name: str, episodes: list[common_pb2.EpisodeResult]) -> list[oracle_pb2.Verdict]:
        """The oracle's verdict on each episode, in order."""
        request = oracle_pb2.EvaluateRequest(oracle=oracle_name, episodes=episodes)
        answer = self._call("oracle service", lambda: self.oracle.Evaluate(request, timeout=120))
        assert isinstance(answer, oracle_pb2.EvaluateResponse)
        return list(answer.verdicts)

    def _verdicts(self, oracle_name: str, ran: Ran) -> list[str]:
        if len(ran.violations):
            return ["invalid"]
        request = oracle_pb2.EvaluateRequest(oracle=oracle_name, episodes=ran.episodes)
        answer = self._call("oracle service", lambda: self.oracle.Evaluate(request, timeout=120))
        assert isinstance(answer, oracle_pb2.EvaluateResponse)
        return [VERDICT_NAMES[v.verdict] for v in answer.verdicts]

    def frames(
        self, config: CampaignConfig, replayed: Replayed, repetition: int, max_frames: int
    ) -> Iterator[common_pb2.Tensor]:
        """The frames of one repetition's episode (SimulatorService.RenderEpisode), in episode order."""
        request = simulator_pb2.RenderEpisodeRequest(
            subject=config.subject,
            test_case=replayed.test_case,
            seed=config.seed,
            repetition=repetition,
            max_frames=max_frames or DEFAULT_FRAMES,
            observation_translator=config.observation_translator,
        )
        request.model.name = config.model
        try:
            responses = self.simulators.call(
                lambda sim: list(sim.RenderEpisode(request, timeout=REPLAY_TIMEOUT_SECONDS))
            )
        except grpc.RpcError as exc:
            raise local_error(exc, "simulator service") from None
        for r in responses:
            if r.WhichOneof("item") == "frame":
                yield r.frame


def summary(
    replayed: Replayed,
    config: CampaignConfig,
    execution: Callable[[ExecutionRow], generator_pb2.Execution],
    rendered: int = 0,
) -> generator_pb2.ReplaySummary:
    return generator_pb2.ReplaySummary(
        stored=execution(replayed.stored),
        replayed=execution(replayed.replayed),
        same_verdict=replayed.stored.verdict == replayed.replayed.verdict,
        episode_seeds=replayed.seeds,
        campaign_seed=config.seed,
        subject=config.subject,
        model=config.model,
        oracle=replayed.oracle,
        rendered_repetition=rendered,
        repetition_verdicts=replayed.verdicts,
    )


def rendered_repetition(replayed: Replayed) -> int:
    """The repetition whose frames show the verdict: the first failing one, else 0."""
    return next((i for i, v in enumerate(replayed.verdicts) if v == "fail"), 0)
