"""Runs one campaign: ask a batch, run it on the simulator, judge it with the oracle, store, tell, repeat.

Resuming replays the stored batches through a fresh strategy (every random choice flows
from the campaign seed, so it asks the same inputs again), re-runs only what is missing,
and continues. Executions are stored before the strategy or any watcher hears of them.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator
from contextlib import closing
from typing import Any

import grpc
from prometheus_client import Counter

from common.action_trace import to_test_case
from common.domain.rules import SubjectRules
from common.generated.gauntlet.v1 import common_pb2, oracle_pb2, oracle_pb2_grpc, simulator_pb2
from common.remote import describe
from common.retry import Retry, is_retryable, status_code
from common.seeding import derive_seed
from common.space import ParameterSpace
from common.tensor import from_tensor
from generator_service.config import CampaignConfig
from generator_service.simulators import SimulatorPool
from generator_service.store import CampaignStore, ExecutionRow, Totals
from generator_service.strategies import Result, make_strategy

log = logging.getLogger("generator")
EXECUTIONS = Counter("gauntlet_generator_executions_total", "Executions stored, by verdict", ["verdict"])
# A campaign stops once it has stored this many rejected inputs per run test (or per 100, early on):
# a strategy that keeps proposing inputs the subject rejects would otherwise never end.
INVALID_ALLOWANCE = 10
VERDICT_NAMES = {
    oracle_pb2.VERDICT_KIND_PASS: "pass",
    oracle_pb2.VERDICT_KIND_FAIL: "fail",
    oracle_pb2.VERDICT_KIND_INVALID: "invalid",
}


SHUTDOWN_ERROR = "the generator service stopped while the campaign ran; a restarted generator resumes it"


class CampaignError(RuntimeError):
    """Stops a campaign as interrupted (resumable): a service stayed unreachable past the retry budget."""


class CampaignFailed(CampaignError):
    """Stops a campaign as failed: a permanent error, which the same request would meet again (a model that
    refuses the subject's observations, a missing credential, an unknown oracle, ...)."""


def stop_error(what: str, exc: grpc.RpcError) -> CampaignError:
    """The error that ends a campaign after a call failed for good: interrupted when the status was transient
    (the retry budget ran out), failed otherwise (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND,
    UNAUTHENTICATED, PERMISSION_DENIED, INTERNAL, ...). The message is one sentence: which call, the code, why."""
    message = f"{what}: {describe(exc)}"
    return CampaignError(message) if is_retryable(status_code(exc), idempotent=True) else CampaignFailed(message)


class ShardCrashed(RuntimeError):
    """A shard's thread died of something other than a gRPC error (a bug): the campaign stops, interrupted, rather
    than retrying a batch whose shard would crash again."""


class CampaignRunner:
    def __init__(
        self,
        campaign_id: str,
        config: CampaignConfig,
        store: CampaignStore,
        simulators: SimulatorPool,
        oracle: oracle_pb2_grpc.OracleServiceStub,
        publish: Callable[[str, str], None],
        retry_seconds: float = 60.0,
    ) -> None:
        self.id = campaign_id
        self.config = config
        self.store = store
        self.simulators = simulators
        self.oracle = oracle
        self.publish = publish  # (kind, message)
        self.retry_seconds = retry_seconds
        self.cancelled = threading.Event()
        self.shutting_down = False  # cancelled because the generator stops, not by a person: ends interrupted
        self._calls: list[Any] = []  # the shard streams in flight, so that a cancel reaches every one
        self._calls_lock = threading.Lock()
        self._positions: dict[str, int] = {}  # test-case id -> position in asking order
        self._started = time.monotonic()
        self._prior_wall = 0.0
        self.totals = Totals()  # seeded from the store when run() starts, then kept by _store()

    # -- bookkeeping -------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self._prior_wall + time.monotonic() - self._started

    def _stop_reason(self) -> str:
        if self.cancelled.is_set():
            return "cancelled"
        b = self.config.budget
        t = self.totals
        # The execution budget counts run tests: inputs the subject rejects are stored as invalid and cost
        # nothing, so a strategy that cannot see validity rules (random on Parking) still gets its N tests.
        if b.max_executions and t.run >= b.max_executions:
            return "max_executions"
        if t.invalid > INVALID_ALLOWANCE * max(b.max_executions, t.run, 100):
            return "too_many_invalid_inputs"
        if b.max_steps and t.steps >= b.max_steps:
            return "max_steps"
        if b.max_wall_seconds and self.elapsed() >= b.max_wall_seconds:
            return "max_wall_seconds"
        if self.config.stop_at_first_failure and t.failures:
            return "first_failure"
        return ""

    def cancel(self) -> None:
        self.cancelled.set()
        self._cancel_calls()

    def interrupt(self) -> None:
        """Stops the campaign because the generator stops: it ends `interrupted` (resumable), not `cancelled`."""
        self.shutting_down = True
        self.cancel()

    def begin_session(self) -> None:
        """Picks up where the store stands: wall time of earlier sessions, and the totals (the one aggregate query
        of a session; from here on _store() counts each execution it writes)."""
        row = self.store.campaign(self.id)
        assert row is not None
        self._prior_wall = row.wall_seconds
        self._started = time.monotonic()
        self.totals = self.store.count(self.id)

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> None:
        self.begin_session()
        state, reason, error = "completed", "", ""
        try:
            reason = self._run()
            if reason == "cancelled" and self.shutting_down:
                state, reason, error = "interrupted", "shutdown", SHUTDOWN_ERROR
            elif reason == "cancelled":
                state = "cancelled"
        except CampaignFailed as exc:
            log.warning("campaign %s failed: %s", self.id, exc)
            state, reason, error = "failed", "error", str(exc)
        except CampaignError as exc:
            state, reason, error = "interrupted", "error", str(exc)
        except Exception as exc:  # a campaign thread must record why it died
            log.exception("campaign %s failed", self.id)
            state, reason, error = "interrupted", "error", f"{type(exc).__name__}: {exc}"
        self.store.set_state(self.id, state, reason, error, add_wall_seconds=time.monotonic() - self._started)
        if error:
            self.publish("error", error)  # the watch stream itself ends with one "finished" event

    def _run(self) -> str:
        cfg = self.config
        info = self._describe()
        space = ParameterSpace.from_proto(info.parameter_space)
        oracle_name = cfg.oracle or info.default_oracle
        signals = self._required_signals(oracle_name)
        if cfg.keep_final_observations and "final_observation" not in signals:
            signals.append("final_observation")  # a standard signal of every subject (simulator_service/subject.py)
        # the subject's rules as the simulator declares them: a strategy that honours rules (Indago) builds them
        strategy = make_strategy(
            cfg.strategy,
            space,
            derive_seed(cfg.seed, "strategy"),
            cfg.strategy_params,
            subject_rules=SubjectRules.from_description(info),
            search=info.search if info.HasField("search") else None,  # search-based testing's declaration
        )
        batches = self.store.asked_batches(self.id)
        self._positions = {cid: i for i, (cid, _) in enumerate((c for b in batches for c in b), 1)}
        position = len(self._positions)
        for number, stored in enumerate(batches, 1):  # replay what a previous session asked
            asked = strategy.ask(len(stored))
            if json.dumps(asked) != json.dumps([v for _, v in stored]):
                raise CampaignFailed(
                    f"cannot resume: strategy {cfg.strategy!r} asked other inputs than the stored "
                    f"batch {number} (is it deterministic given the seed?)"
                )
            stop = self._execute(number, stored, space, oracle_name, signals)
            strategy.tell(self._results(number, stored))
            self._forget_positions(stored)
            if stop:
                return stop
        number = len(batches)
        while not (reason := self._stop_reason()):
            n = cfg.batch_size
            if cfg.budget.max_executions:
                n = min(n, cfg.budget.max_executions - self.totals.run)
            values = strategy.ask(n)
            if not values:
                return "strategy_exhausted"
            number += 1
            cases = [(f"t{position + i + 1:07d}", v) for i, v in enumerate(values)]
            self.store.add_test_cases(self.id, number, position + 1, cases)
            self._positions.update((cid, position + i + 1) for i, (cid, _) in enumerate(cases))
            position += len(cases)
            stop = self._execute(number, cases, space, oracle_name, signals)
            strategy.tell(self._results(number, cases))
            self._forget_positions(cases)
            if stop:
                return stop
        return reason

    def _forget_positions(self, cases: list[tuple[str, dict[str, Any]]]) -> None:
        """A batch's asking positions are needed while it runs only: kept, they grew with every execution (a
        leak bench/load.py measured on long campaigns)."""
        for cid, _ in cases:
            self._positions.pop(cid, None)

    def _results(self, batch: int, cases: list[tuple[str, dict[str, Any]]]) -> list[Result]:
        done = {r.test_case_id: r for r in self.store.executions(self.id, batch)}
        out = []
        for cid, values in cases:
            r = done.get(cid)
            if r is None:  # stopped mid-batch: the strategy hears nothing of unexecuted inputs
                continue
            out.append(Result(values, r.verdict == "fail", r.margin, r.descriptors, r.verdict == "invalid"))
        return out

    # -- remote calls ----------------------------------------------------------------------------
    def _retry(self) -> Retry:
        # Every call the campaign makes is idempotent (reads, or a batch whose stored executions are skipped on
        # the next attempt), so ABORTED is retried too; a cancel cuts a backoff wait short.
        return Retry(
            budget_seconds=self.retry_seconds,
            idempotent=True,
            sleep=self.cancelled.wait,
            give_up=self.cancelled.is_set,
        )

    def _with_retry(self, what: str, call: Callable[[], Any]) -> Any:
        def note(exc: grpc.RpcError, delay: float) -> None:
            self.publish("progress", f"{what}: {describe(exc)}; retrying in {delay:.1f}s")

        try:
            return self._retry().call(call, on_retry=note)
        except grpc.RpcError as exc:
            if self.cancelled.is_set():
                return None
            raise stop_error(what, exc) from None

    def _describe(self) -> simulator_pb2.DescribeEnvironmentResponse:
        return self._with_retry(
            "simulator DescribeEnvironment",
            lambda: self.simulators.call(
                lambda sim: sim.DescribeEnvironment(
                    simulator_pb2.DescribeEnvironmentRequest(subject=self.config.subject), timeout=60
                )
            ),
        )

    def _required_signals(self, oracle_name: str) -> list[str]:
        listing = self._with_retry(
            "oracle ListOracles", lambda: self.oracle.ListOracles(oracle_pb2.ListOraclesRequest(), timeout=30)
        )
        for o in listing.oracles:
            if o.name == oracle_name:
                return list(o.required_signals)
        raise CampaignFailed(f"unknown oracle {oracle_name!r}; known: {', '.join(o.name for o in listing.oracles)}")

    def _execute(
        self,
        batch: int,
        cases: list[tuple[str, dict[str, Any]]],
        space: ParameterSpace,
        oracle_name: str,
        signals: list[str],
    ) -> str:
        """Runs the cases of one batch that are not stored yet; returns a stop reason if one was reached."""
        cfg = self.config
        reps = cfg.repetitions
        retry = self._retry()
        while True:
            done = {r.test_case_id for r in self.store.executions(self.id, batch)}
            pending = [(cid, v) for cid, v in cases if cid not in done]
            if not pending:
                return self._stop_reason()
            if reason := self._stop_reason():
                return reason
            pending = self._drop_invalid(batch, pending, space)
            if not pending:
                continue
            values = dict(pending)
            episodes: dict[str, list[common_pb2.EpisodeResult]] = {}
            ready: list[str] = []
            failure: grpc.RpcError | None = None
            # closing(): a return mid-batch cancels every shard's stream at once, not when the generator is collected
            with closing(self._stream_shards(batch, pending, space, signals)) as items:
                for item in items:
                    if isinstance(item, grpc.RpcError):  # one shard's stream ended with an error; others go on
                        failure = failure or item
                        continue
                    result = item.result
                    episodes.setdefault(result.test_case_id, []).append(result)
                    if len(episodes[result.test_case_id]) == reps:
                        ready.append(result.test_case_id)
                    if len(ready) >= 8:
                        self._judge(batch, ready, episodes, values, oracle_name)
                        ready = []
                        if reason := self._stop_reason():
                            return reason
            self._judge(batch, ready, episodes, values, oracle_name)  # with a failed shard: keep what finished
            if failure is None:
                continue  # every shard ended: the loop's store check finds the batch done
            code = status_code(failure)
            if self.cancelled.is_set() or code == grpc.StatusCode.CANCELLED and self._stop_reason():
                return self._stop_reason() or "cancelled"
            delay = retry.next_delay(failure)
            if delay is None:
                raise stop_error("simulator RunEpisodes", failure) from None
            self.publish("progress", f"simulator {describe(failure)}; retrying in {delay:.1f}s")
            retry.sleep(delay)

    def _cancel_calls(self) -> None:
        with self._calls_lock:
            calls, self._calls = self._calls, []
        for call in calls:
            call.cancel()

    def _stream_shards(
        self,
        batch: int,
        pending: list[tuple[str, dict[str, Any]]],
        space: ParameterSpace,
        signals: list[str],
    ) -> Generator[simulator_pb2.RunEpisodesResponse | grpc.RpcError, None, None]:
        """Runs `pending` as contiguous shards, one RunEpisodes stream each, spread over the simulator endpoints;
        yields every response as it arrives, and the error of each shard that failed. Results are stored by
        test-case id and asking position, and the strategy is told in asking order, so which simulator ran a
        case changes neither the verdicts nor the stored order (every episode's seed derives from the campaign
        seed and the case id)."""
        cfg = self.config
        shards = min(self.simulators.streams, len(pending))
        size, extra = divmod(len(pending), shards)
        chunks, start = [], 0
        for i in range(shards):
            end = start + size + (1 if i < extra else 0)
            chunks.append(pending[start:end])
            start = end
        targets = self.simulators.shard_targets(shards)
        inbox: queue.Queue[Any] = queue.Queue()
        done = object()
        # set when the caller stops reading (a stop reason, an error, the batch done): a shard whose call starts
        # after that cancels it itself, so no stream runs on for nobody (a cancel of the campaign sets `cancelled`)
        abandoned = threading.Event()

        def stream(shard: int, chunk: list[tuple[str, dict[str, Any]]], target: int) -> None:
            request = simulator_pb2.RunEpisodesRequest(
                request_id=f"{self.id}/batch/{batch}/shard/{shard}",
                subject=cfg.subject,
                seed=cfg.seed,
                repetitions=cfg.repetitions,
                trace=common_pb2.TraceSpec(signals=signals),
                parallelism=cfg.parallelism,
                test_cases=[to_test_case(space, cid, v) for cid, v in chunk],
                observation_translator=cfg.observation_translator,
            )
            request.model.name = cfg.model
            try:
                call = self.simulators.simulators[target].stub.RunEpisodes(request)
                with self._calls_lock:
                    self._calls.append(call)
                    late = abandoned.is_set() or self.cancelled.is_set()
                if late:
                    call.cancel()
                for response in call:
                    inbox.put(response)
            except grpc.RpcError as exc:
                if status_code(exc) != grpc.StatusCode.CANCELLED:
                    self.simulators.mark_failed(target)  # the next attempt's shards go to the others
                inbox.put(exc)
            except Exception as exc:  # noqa: BLE001 - a bug must stop the campaign, not leave the shard's cases unrun
                inbox.put(ShardCrashed(f"shard {shard} of batch {batch}: {type(exc).__name__}: {exc}"))
            finally:
                inbox.put(done)

        threads = [
            threading.Thread(target=stream, args=(i, c, t), name=f"shard-{self.id}-{i}", daemon=True)
            for i, (c, t) in enumerate(zip(chunks, targets, strict=True))
        ]
        for t in threads:
            t.start()
        running = len(threads)
        try:
            while running:
                item = inbox.get()
                if item is done:
                    running -= 1
                elif isinstance(item, ShardCrashed):
                    raise item
                else:
                    yield item
        finally:
            with self._calls_lock:
                abandoned.set()
            self._cancel_calls()

    def _drop_invalid(
        self, batch: int, pending: list[tuple[str, dict[str, Any]]], space: ParameterSpace
    ) -> list[tuple[str, dict[str, Any]]]:
        """Stores inputs the subject rejects (e.g. Taxi's passenger == destination) as invalid, unrun.

        A strategy may propose such inputs; the simulator would refuse the whole batch, so they
        are checked first (one ValidateConfigs call per batch) and the strategy is told they were invalid.
        """
        reply = self._with_retry(
            "simulator ValidateConfigs",
            lambda: self.simulators.call(
                lambda sim: sim.ValidateConfigs(
                    simulator_pb2.ValidateConfigsRequest(
                        subject=self.config.subject, test_cases=[to_test_case(space, c, v) for c, v in pending]
                    ),
                    timeout=60,
                )
            ),
        )
        if reply is None:
            return pending
        problems = {r.test_case_id: "; ".join(r.violations) for r in reply.results if not r.valid}
        if problems:
            rows = [
                ExecutionRow(
                    test_case_id=cid,
                    index=self._positions[cid],
                    batch=batch,
                    values=v,
                    verdict="invalid",
                    margin=0.0,
                    steps=0,
                    total_reward=0.0,
                    descriptors=(),
                    reason=f"invalid input: {problems[cid]}",
                    repetitions=0,
                    failed_repetitions=0,
                    elapsed_seconds=self.elapsed(),
                )
                for cid, v in pending
                if cid in problems
            ]
            self._store(rows)
        return [(cid, v) for cid, v in pending if cid not in problems]

    def _store(self, rows: list[ExecutionRow]) -> list[ExecutionRow]:
        """Writes executions and counts those the store took (a retried batch's already stored rows are skipped)."""
        stored = self.store.add_executions(self.id, rows)
        for row in stored:
            self.totals.add(row)
            EXECUTIONS.labels(row.verdict).inc()
        return stored

    def _final_observation(self, episode: common_pb2.EpisodeResult) -> tuple[float, ...]:
        """The episode's last observation, flattened, when the campaign keeps them (else nothing is stored).
        The caller passes repetition 0's episode: repetitions stream back in completion order."""
        if not self.config.keep_final_observations or "final_observation" not in episode.signals:
            return ()
        return tuple(float(x) for x in from_tensor(episode.signals["final_observation"]).reshape(-1))

    def _judge(
        self,
        batch: int,
        ready: list[str],
        episodes: dict[str, list[common_pb2.EpisodeResult]],
        values: dict[str, dict[str, Any]],
        oracle_name: str,
    ) -> None:
        if not ready:
            return
        flat = [ep for cid in ready for ep in episodes[cid]]
        response = self._with_retry(
            "oracle Evaluate",
            lambda: self.oracle.Evaluate(oracle_pb2.EvaluateRequest(oracle=oracle_name, episodes=flat), timeout=120),
        )
        if response is None:
            return
        by_case: dict[str, list[oracle_pb2.Verdict]] = {}
        for v in response.verdicts:
            by_case.setdefault(v.test_case_id, []).append(v)
        rows = []
        for cid in ready:
            verdicts, eps = by_case[cid], episodes[cid]
            kinds = [VERDICT_NAMES[v.verdict] for v in verdicts]
            failed = kinds.count("fail")
            judged = len(kinds) - kinds.count("invalid")
            # majority verdict: fail when more than half of the judged repetitions fail
            verdict = "invalid" if judged == 0 else ("fail" if failed * 2 > judged else "pass")
            first = next((v for v in verdicts if VERDICT_NAMES[v.verdict] == verdict), verdicts[0])
            n = len(eps)
            rows.append(
                ExecutionRow(
                    test_case_id=cid,
                    index=self._positions[cid],
                    batch=batch,
                    values=values[cid],
                    verdict=verdict,
                    margin=sum(v.margin for v in verdicts) / n,
                    steps=sum(e.steps for e in eps),
                    total_reward=sum(e.total_reward for e in eps) / n,
                    descriptors=tuple(first.descriptors),
                    reason=first.reason,
                    repetitions=n,
                    failed_repetitions=failed,
                    elapsed_seconds=self.elapsed(),
                    final_observation=self._final_observation(min(eps, key=lambda e: e.repetition)),
                )
            )
        # `ready` holds only cases that were pending in the store, so none is skipped as already stored
        stored = self._store(rows)
        for row in stored:
            if row.verdict == "fail":
                self.publish("failure", f"{row.test_case_id}: {row.reason}")
        self.publish("progress", "")
