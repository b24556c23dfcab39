"""Runs one campaign through the pipeline (generator_service/pipeline/): plan a batch, execute it, judge it,
record it, repeat until a stop reason.

This module owns what spans the stages: the budget and the other stop reasons, retries of the remote calls, and
cancellation. Resuming rebuilds the strategy from the stored batches (``rebuild_strategy``: every random choice
flows from the campaign seed, so it asks the same test cases again), runs only what is missing, and continues.
Executions are stored before the strategy or any watcher hears of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import replace
from typing import Any

import grpc

from common.generated.gauntlet.v1 import oracle_pb2, oracle_pb2_grpc, simulator_pb2
from common.remote import describe
from common.retry import Retry, is_retryable, status_code
from common.space import ParameterSpace
from generator_service.config import CampaignConfig
from generator_service.pipeline.execute import Executor, Ran, ShardCrashed, ShardFailed
from generator_service.pipeline.judge import VERDICT_NAMES, Judge
from generator_service.pipeline.plan import Batch, Planner, ReplayMismatch, rebuild_strategy, stored_batches
from generator_service.pipeline.record import Recorder
from generator_service.replay import Replayer
from generator_service.shrink import distinct_failures, shrink_and_store
from generator_service.simulators import SimulatorPool
from generator_service.store import CampaignStore, Totals, storable

__all__ = [
    "INVALID_ALLOWANCE",
    "VERDICT_NAMES",
    "CampaignError",
    "CampaignFailed",
    "CampaignRunner",
    "ShardCrashed",
    "stop_error",
]

log = logging.getLogger("generator")
# A campaign stops once it has stored this many rejected inputs per run test (or per 100, early on):
# a strategy that keeps proposing inputs the subject rejects would otherwise never end.
INVALID_ALLOWANCE = 10
JUDGE_EVERY = 8  # a stop reason is checked after every this many cases of a batch, in arrival order
# While a batch runs, the cases that arrived are judged in one oracle call and stored in one transaction once this
# many are ready, or once the oldest waited JUDGE_WAIT seconds (slow episodes); always a multiple of JUDGE_EVERY but
# at the batch's end, and each JUDGE_EVERY is stop-checked as if judged alone (an oracle call and a commit per 8
# cases were most of the generator's time at one-step episodes: bench/first_execution.py).
JUDGE_GROUP = 64
JUDGE_WAIT = 0.05

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
        self.recorder = Recorder(store, campaign_id, publish)
        self.executor: Executor | None = None  # made once the subject is described
        self._started = time.monotonic()
        self._prior_wall = 0.0

    # -- bookkeeping -------------------------------------------------------------------------------
    @property
    def totals(self) -> Totals:
        """The campaign's running counts (seeded from the store when a session begins, then kept by the recorder)."""
        return self.recorder.totals

    def elapsed(self) -> float:
        return self._prior_wall + time.monotonic() - self._started

    def stop_reason(self, totals: Totals | None = None) -> str:
        """Why the campaign stops now ("" to go on), given its totals (default: what the recorder counted)."""
        if self.cancelled.is_set():
            return "cancelled"
        b = self.config.budget
        t = self.totals if totals is None else totals
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
        if self.executor is not None:
            self.executor.cancel()

    def interrupt(self) -> None:
        """Stops the campaign because the generator stops: it ends `interrupted` (resumable), not `cancelled`."""
        self.shutting_down = True
        self.cancel()

    def begin_session(self) -> None:
        """Picks up where the store stands: wall time of earlier sessions, and the totals (the one aggregate query
        of a session; from here on the recorder counts each execution it stores)."""
        row = self.store.campaign(self.id)
        assert row is not None
        self._prior_wall = row.wall_seconds
        self._started = time.monotonic()
        self.recorder.begin()

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> None:
        self.begin_session()
        state, reason, error = "completed", "", ""
        try:
            reason = self._run()
            if reason != "cancelled" and self.config.shrink.first:
                self._shrink()
                reason = "cancelled" if self.cancelled.is_set() else reason
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
        oracle_name = cfg.oracle or info.default_oracle
        signals = self._required_signals(oracle_name)
        if cfg.keep_final_observations and "final_observation" not in signals:
            signals.append("final_observation")  # a standard signal of every subject (simulator_service/subject.py)
        space = ParameterSpace.from_proto(info.parameter_space)
        self.executor = Executor(self.id, cfg, space, signals, self.simulators, self.cancelled)
        judge = Judge(self.oracle, oracle_name, self._with_retry, cfg.keep_final_observations)
        batches = stored_batches(self.store, self.id)
        try:  # replay what a previous session asked, running what it left unrun
            rebuilt = rebuild_strategy(
                cfg, info, batches, self.recorder.results, run_missing=lambda b: self._run_batch(b, judge)
            )
        except ReplayMismatch as exc:
            raise CampaignFailed(
                f"cannot resume: strategy {cfg.strategy!r} asked other inputs than the stored "
                f"batch {exc.batch} (is it deterministic given the seed?)"
            ) from None
        if rebuilt.stop_reason:
            return rebuilt.stop_reason
        planner = Planner(rebuilt.strategy, self.store, self.id, batches)
        while not (reason := self.stop_reason()):
            n = cfg.batch_size
            if cfg.budget.max_executions:
                n = min(n, cfg.budget.max_executions - self.totals.run)
            batch = planner.next_batch(n)
            if batch is None:
                return "strategy_exhausted"
            stop = self._run_batch(batch, judge)
            self.recorder.tell(planner.strategy, batch)
            if stop:
                return stop
        return reason

    def _shrink(self) -> None:
        """The spec's `shrink` option: the first distinct failures shrunk and stored (ShrinkExecution's search),
        before the campaign is completed. A cancel stops it between failures."""
        replayer = Replayer(self.simulators, self.oracle)
        space: ParameterSpace | None = None
        for stored in distinct_failures(self.store.executions(self.id), self.config.shrink.first):
            if self.cancelled.is_set():
                return
            if space is None:
                space = replayer.context(self.config)[2]
            self.publish("progress", f"shrinking {stored.test_case_id}")
            row = shrink_and_store(
                self.store, replayer, self.id, self.config, space, stored, self.config.shrink.max_executions
            )
            log.info(
                "campaign %s: %s shrunk from distance %.4f to %.4f in %d executions",
                self.id,
                stored.test_case_id,
                row.original_distance,
                row.shrunk_distance,
                row.executions,
            )

    def _run_batch(self, batch: Batch, judge: Judge) -> str:
        """Executes, judges and records the cases of ``batch`` that are not stored yet, retrying failed shards with
        what they left; returns a stop reason if one was reached."""
        assert self.executor is not None
        retry = self._retry()
        while True:
            stored = self.recorder.stored_ids(batch)
            pending = [c for c in batch.cases if c.id not in stored]
            if not pending:
                return self.stop_reason()
            if reason := self.stop_reason():
                return reason
            ready: list[Ran] = []
            oldest = 0.0  # when the first of `ready` arrived
            failure: grpc.RpcError | None = None
            # closing(): a return mid-batch cancels every shard's stream at once, not when the generator is collected
            with closing(self.executor.run(batch.number, pending)) as items:
                for item in items:
                    if isinstance(item, ShardFailed):  # one shard's stream ended with an error; others go on
                        failure = failure or item.error
                        continue
                    if not ready:
                        oldest = time.monotonic()
                    ready.append(item)
                    if len(ready) >= JUDGE_GROUP or (
                        len(ready) >= JUDGE_EVERY and time.monotonic() - oldest >= JUDGE_WAIT
                    ):
                        cut = len(ready) - len(ready) % JUDGE_EVERY
                        if reason := self._judge(judge, batch, ready[:cut]):
                            return reason
                        ready = ready[cut:]
                        oldest = time.monotonic()
                        if reason := self.stop_reason():  # e.g. cancelled during the oracle call
                            return reason
            if reason := self._judge(judge, batch, ready):  # with a failed shard: keep what finished
                return reason
            if failure is None:
                continue  # every shard ended: the loop's store check finds the batch done
            code = status_code(failure)
            if self.cancelled.is_set() or code == grpc.StatusCode.CANCELLED and self.stop_reason():
                return self.stop_reason() or "cancelled"
            delay = retry.next_delay(failure)
            if delay is None:
                raise stop_error("simulator RunEpisodes", failure) from None
            self.publish("progress", f"simulator {describe(failure)}; retrying in {delay:.1f}s")
            retry.sleep(delay)

    def _judge(self, judge: Judge, batch: Batch, ready: list[Ran]) -> str:
        """Judges `ready` in one oracle call and stores its rows in one transaction, up to the first JUDGE_EVERY
        after which a stop reason holds (the rows after it are dropped, as if they had not run); returns that
        reason, or ""."""
        if not ready:
            return ""
        rows = judge.judge(batch.number, ready, self.elapsed())
        if rows is None:  # cancelled during the oracle call
            return ""
        # `ready` holds only cases pending in the store, so the store takes every row, as storable() makes it (a
        # non-finite number makes an invalid execution), and the recorder counts it as here
        rows = [storable(row) for row in rows]
        totals, reason, cut = replace(self.totals), "", len(rows)
        for start in range(0, len(rows), JUDGE_EVERY):
            for row in rows[start : start + JUDGE_EVERY]:
                totals.add(row)
            if reason := self.stop_reason(totals):
                cut = min(start + JUDGE_EVERY, len(rows))
                break
        self.recorder.record(rows[:cut])
        return reason

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
