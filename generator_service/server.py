"""gRPC servicer of the generator service: campaign lifecycle, progress streams and the store."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import sqlalchemy as sa
from google.protobuf import struct_pb2
from prometheus_client import Gauge
from pydantic import ValidationError

from common.credentials import ClientCredentials
from common.domain.rules import SubjectRules
from common.errors import (
    AlreadyExists,
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
    grpc_method,
)
from common.generated.gauntlet.v1 import (
    common_pb2,
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2_grpc,
    simulator_pb2,
)
from common.remote import describe, local_error
from common.seeding import strategy_seed
from common.server import client_channel
from common.space import ParameterSpace
from common.test_case import TestCase
from common.validation import check_id, resolve_under, shown
from generator_service.archive_listing import judged_views, render, replay
from generator_service.campaign import VERDICT_NAMES, CampaignRunner
from generator_service.config import CampaignConfig, explain
from generator_service.ownership import DEFAULT_LEASE_SECONDS, LeaseKeeper, gone, owner_id
from generator_service.preflight import check_signals
from generator_service.protected import ProtectedPaths
from generator_service.replay import MAX_FRAMES as MAX_REPLAY_FRAMES
from generator_service.replay import Replayer, find_execution, rendered_repetition
from generator_service.replay import summary as replay_summary
from generator_service.shrink import DEFAULT_BUDGET as DEFAULT_SHRINK_BUDGET
from generator_service.shrink import MAX_BUDGET as MAX_SHRINK_BUDGET
from generator_service.shrink import shrink_and_store
from generator_service.simulators import SimulatorPool
from generator_service.store import (
    CampaignExists,
    CampaignRow,
    CampaignStore,
    CorruptRow,
    ExecutionRow,
    Lease,
    ShrinkRow,
    StaleOwner,
)
from generator_service.strategies import make_strategy, strategies
from generator_service.strategies.params import ARTIFACT_PATH
from generator_service.trust import DEFAULT_RUNS as DEFAULT_RERUNS
from generator_service.trust import MAX_RUNS as MAX_RERUNS
from generator_service.trust import rerun, wilson

log = logging.getLogger("generator")
DEFAULT_ARTIFACT_ROOT = Path("runs")  # surrogates and training logs a campaign names live under it
ARTIFACT_ROOT_NAME = "the generator's artifact root (--artifact-root, default runs/)"
RUNNING = Gauge("gauntlet_generator_running_campaigns", "Campaigns running")
# errors of the store's connection or file (PostgreSQL down, SQLite disk I/O): retryable, never INTERNAL
STORE_DOWN = (sa.exc.OperationalError, sa.exc.InterfaceError)
STORE_DOWN_MESSAGE = "the campaign store is unavailable ({}); retry later"
WATCH_POLL_SECONDS = 1.0  # WatchCampaign of a campaign another generator replica runs reads the store this often
_STATE = {
    "running": generator_pb2.CAMPAIGN_STATE_RUNNING,
    "completed": generator_pb2.CAMPAIGN_STATE_COMPLETED,
    "cancelled": generator_pb2.CAMPAIGN_STATE_CANCELLED,
    "interrupted": generator_pb2.CAMPAIGN_STATE_INTERRUPTED,
    "failed": generator_pb2.CAMPAIGN_STATE_FAILED,
}


def store_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """An RPC whose store connection or file fails answers UNAVAILABLE (retryable), never INTERNAL, and never with
    the driver's message (it can hold a host, a path or SQL); one that meets a stored row it cannot read answers
    DATA_LOSS naming the row (ListArchive, ReplayExecution and any other reader)."""
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def stream(*args: Any, **kwargs: Any) -> Any:
            try:
                yield from func(*args, **kwargs)
            except STORE_DOWN as exc:
                log.error("store error in %s: %s", func.__name__, exc)
                raise Unavailable(STORE_DOWN_MESSAGE.format(type(exc).__name__)) from None
            except CorruptRow as exc:
                raise DataLoss(corrupt_message(exc.campaign_id, [exc])) from None

        return stream

    @functools.wraps(func)
    def unary(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except STORE_DOWN as exc:
            log.error("store error in %s: %s", func.__name__, exc)
            raise Unavailable(STORE_DOWN_MESSAGE.format(type(exc).__name__)) from None
        except CorruptRow as exc:
            raise DataLoss(corrupt_message(exc.campaign_id, [exc])) from None

    return unary


class GeneratorServicer(generator_pb2_grpc.GeneratorServiceServicer):
    def __init__(
        self,
        store: CampaignStore,
        simulator_endpoint: str,
        oracle_endpoint: str,
        retry_seconds: float = 60.0,
        credentials: ClientCredentials | None = None,
        artifact_root: Path = DEFAULT_ARTIFACT_ROOT,
        simulator_streams: int | None = None,
        protected: ProtectedPaths | None = None,
        owner: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.store = store
        self.artifact_root = artifact_root
        # the store's own files, logs and credentials: refused as artifact paths (generator_service/protected.py)
        self.protected = protected or ProtectedPaths.of(*store.own_files(), artifact_root)
        # one or several endpoints (comma-separated, or dns:///): a campaign's batches are spread over all of them
        self.simulators = SimulatorPool(simulator_endpoint, credentials, simulator_streams)
        self.oracle = oracle_pb2_grpc.OracleServiceStub(client_channel(oracle_endpoint, credentials))
        self.retry_seconds = retry_seconds
        self._runners: dict[str, CampaignRunner] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._watchers: dict[str, list[queue.Queue]] = {}
        self._lock = threading.Lock()
        # one owner per running campaign (generator_service/ownership.py): this generator's id and its leases
        self.owner = owner or owner_id()
        self.lease_seconds = lease_seconds
        self.keeper = LeaseKeeper(store, lease_seconds, self._lost, self._cancel_here)
        self._taking = threading.Lock()  # acquire + launch, one campaign at a time in this process
        self._unresumable: set[str] = set()

    # -- campaign threads ----------------------------------------------------------------------
    def _publish(self, campaign_id: str, kind: str, message: str) -> None:
        with self._lock:
            if not self._watchers.get(campaign_id):
                return  # nobody watches: no status to build
        status = self._status(campaign_id)
        event = generator_pb2.WatchCampaignResponse(kind=kind, status=status, message=message)
        with self._lock:
            for q in self._watchers.get(campaign_id, []):
                q.put(event)

    def _launch(self, campaign_id: str, config: CampaignConfig, lease: Lease) -> None:
        """Runs a stored campaign this generator holds the lease of; its spec keeps the paths as the client gave
        them, the runner gets them resolved. Every write of the runner is fenced by the lease."""
        try:
            self._start_runner(campaign_id, config, lease)
        except BaseException:
            self._give_back(lease)
            raise

    def _start_runner(self, campaign_id: str, config: CampaignConfig, lease: Lease) -> None:
        owned = self.store.owned(lease)
        runner = CampaignRunner(
            campaign_id,
            resolve_artifact_paths(config, self.artifact_root, self.protected),
            owned,
            self.simulators,
            self.oracle,
            lambda kind, msg: self._publish(campaign_id, kind, msg),
            self.retry_seconds,
        )

        def body() -> None:
            RUNNING.inc()
            try:
                runner.run()
            except StaleOwner as exc:  # another generator took it over: its state is theirs to write
                log.warning("%s; this generator stops running it", exc)
            finally:
                RUNNING.dec()
                self._give_back(lease)
                with self._lock:
                    self._runners.pop(campaign_id, None)
                    self._threads.pop(campaign_id, None)
                    for q in self._watchers.get(campaign_id, []):
                        q.put(None)

        thread = threading.Thread(target=body, name=f"campaign-{campaign_id}", daemon=True)
        # stored as running first: a store that fails here leaves no runner registered (no phantom campaign)
        owned.set_state(campaign_id, "running")
        with self._lock:
            self._runners[campaign_id] = runner
            self._threads[campaign_id] = thread
        self.keeper.hold(lease)
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._runners.pop(campaign_id, None)
                self._threads.pop(campaign_id, None)
            raise

    def _give_back(self, lease: Lease) -> None:
        self.keeper.drop(lease.campaign_id)
        try:
            self.store.release(lease)
        except sa.exc.SQLAlchemyError as exc:  # the lease runs out by itself
            log.warning("cannot release campaign %s: %s", lease.campaign_id, type(exc).__name__)

    def _lost(self, campaign_id: str) -> None:
        """The lease was taken over (this generator could not renew it in time): stop the runner; its writes are
        refused already."""
        runner = self._runners.get(campaign_id)
        if runner is not None:
            runner.interrupt()

    def _cancel_here(self, campaign_id: str) -> None:
        runner = self._runners.get(campaign_id)
        if runner is not None:
            runner.cancel()

    def _cancel_orphan(self, campaign_id: str) -> bool:
        """Cancels a campaign left running that no generator holds (its owner is gone); False when one does."""
        with self._taking:
            if campaign_id in self._runners:
                return False
            lease = self.store.acquire(
                campaign_id, self.owner, self.lease_seconds, may_take=lambda previous: gone(previous, self.owner)
            )
            if lease is None:
                return False
            try:
                self.store.owned(lease).set_state(campaign_id, "cancelled", "cancelled")
            finally:
                self.store.release(lease)
            return True

    def _take(self, campaign_id: str) -> bool:
        """Acquires and launches a stored campaign when nobody else holds it; False when another generator does
        (it runs there) or it runs here already. InvalidArgument / DataLoss for a campaign that cannot resume."""
        with self._taking:
            if campaign_id in self._runners:
                return False
            row = self._row(campaign_id)
            config = stored_config(row)
            self._check_readable(campaign_id)
            lease = self.store.acquire(
                campaign_id, self.owner, self.lease_seconds, may_take=lambda previous: gone(previous, self.owner)
            )
            if lease is None:
                return False
            if self.store.cancels_requested([lease]):  # cancelled through a generator while its owner was gone
                try:
                    self.store.owned(lease).set_state(campaign_id, "cancelled", "cancelled")
                finally:
                    self.store.release(lease)
                return False
            self._launch(campaign_id, config, lease)
            return True

    def start_ownership(self, adopt: bool) -> None:
        """Starts renewing this generator's leases; with `adopt`, also takes over, between renewals, the campaigns
        whose generator is gone (its lease ran out, or it stopped and gave them back)."""
        self.keeper.start(self.resume_unfinished if adopt else None)

    def ready(self) -> bool:
        """Readiness: the store answers (health says NOT_SERVING while it does not)."""
        problem = self.store.check()
        if problem:
            log.error("not ready: %s", problem)
        return not problem

    def resume_unfinished(self) -> list[str]:
        """Continues the campaigns another generator was running and no longer holds: those it left 'running' (it
        was killed: its lease ran out, or its process is gone) and those it marked interrupted by its shutdown.
        Campaigns interrupted by an error wait for ResumeCampaign."""
        resumed = []
        for campaign_id in self.store.unowned(self.owner, may_take=lambda previous: gone(previous, self.owner)):
            try:
                if self._take(campaign_id):
                    resumed.append(campaign_id)
                    log.info("campaign %s: taken over by %s", campaign_id, self.owner)
            except (InvalidArgument, DataLoss) as exc:  # listed with its read_error; never blocks the others
                if campaign_id not in self._unresumable:  # said once, not at every round of taking over
                    self._unresumable.add(campaign_id)
                    log.error("campaign %s left running cannot be resumed: %s", campaign_id, exc)
        return resumed

    def stop_all(self, wait_seconds: float = 10.0) -> None:
        """On shutdown: every running campaign ends `interrupted` (resumable; a restarted generator resumes it),
        and waits a little for their threads to store that, before the process exits under them."""
        with self._lock:
            runners = list(self._runners.values())
            threads = list(self._threads.values())
        self.keeper.stop()
        for runner in runners:
            runner.interrupt()
        deadline = time.monotonic() + wait_seconds
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- status ----------------------------------------------------------------------------------
    def _row(self, campaign_id: str) -> CampaignRow:
        check_id("campaign_id", campaign_id)
        row = self.store.campaign(campaign_id)
        if row is None:
            raise NotFound(f"unknown campaign {campaign_id!r}")
        return row

    def _status(self, campaign_id: str) -> generator_pb2.CampaignStatus:
        return self._status_of(self._row(campaign_id))

    def _status_of(self, row: CampaignRow) -> generator_pb2.CampaignStatus:
        """The row's status; a row this version cannot read gets one with read_error saying why (never an error:
        one bad row must not hide the others from a listing)."""
        campaign_id = row.id
        try:
            spec = stored_config(row).to_proto()
        except InvalidArgument as exc:
            return generator_pb2.CampaignStatus(
                campaign_id=row.id,
                state=_STATE.get(row.state, generator_pb2.CAMPAIGN_STATE_UNSPECIFIED),
                stop_reason=row.stop_reason,
                error=row.error,
                created_at=row.created_at,
                read_error=str(exc),
            )
        runner = self._runners.get(campaign_id)
        # a running campaign counts as it stores (O(1) per progress event); a stopped one is counted by the store
        totals = dataclasses.replace(runner.totals) if runner else self.store.count(campaign_id)
        wall = runner.elapsed() if runner else row.wall_seconds
        return generator_pb2.CampaignStatus(
            campaign_id=row.id,
            spec=spec,
            state=_STATE.get(row.state, generator_pb2.CAMPAIGN_STATE_UNSPECIFIED),
            executions=totals.run,  # an input the subject refused is no execution
            invalid_inputs=totals.invalid,
            failures=totals.failures,
            steps=totals.steps,
            wall_seconds=wall,
            stop_reason=row.stop_reason,
            error=row.error,
            first_failure_index=totals.first_failure_index,
            first_failure_seconds=totals.first_failure_seconds,
            created_at=row.created_at,
        )

    # -- RPCs --------------------------------------------------------------------------------------
    @grpc_method
    def ListStrategies(
        self, request: generator_pb2.ListStrategiesRequest, context: grpc.ServicerContext
    ) -> generator_pb2.ListStrategiesResponse:
        out = []
        for info in strategies().values():
            defaults = struct_pb2.Struct()
            defaults.update(dict(info.defaults))
            out.append(
                generator_pb2.StrategyInfo(
                    name=info.name,
                    description=info.description,
                    source=info.source,
                    default_params=defaults,
                    params_schema=json.dumps(info.json_schema),
                    package=info.package,
                )
            )
        return generator_pb2.ListStrategiesResponse(strategies=out)

    def _preflight(self, config: CampaignConfig) -> None:
        """Fails fast on an unknown subject/model/strategy or a model that does not fit the subject."""
        try:
            info = self.simulators.call(
                lambda sim: sim.DescribeEnvironment(
                    simulator_pb2.DescribeEnvironmentRequest(subject=config.subject), timeout=60
                )
            )
        except grpc.RpcError as exc:
            raise local_error(exc, "simulator service") from None
        check_signals(config.oracle, info, self.oracle)  # the oracle reads only signals the subject records
        search = info.search if info.HasField("search") else None
        check_strategy(config, SubjectRules.from_description(info), self.artifact_root, search)
        # a search-based strategy's agent may act in a declared variant of the subject (ActionTrace.agent_subject):
        # the model must fit that one
        acting = config.strategy_params.get("agent_subject") or ""
        if acting and acting not in info.variants:
            raise InvalidArgument(
                f"strategy_params.agent_subject={shown(acting)} is not a variant of subject {config.subject} "
                f"(its variants: {', '.join(info.variants) or 'none'})"
            )
        request = simulator_pb2.RunEpisodesRequest(subject=acting or config.subject, trace=common_pb2.TraceSpec())
        request.model.name = config.model
        try:
            # no test cases: checks model and fit only
            self.simulators.call(lambda sim: list(sim.RunEpisodes(request, timeout=120)))
        except grpc.RpcError as exc:
            raise local_error(exc, "simulator service") from None

    @grpc_method
    @store_errors
    def StartCampaign(
        self, request: generator_pb2.StartCampaignRequest, context: grpc.ServicerContext
    ) -> generator_pb2.StartCampaignResponse:
        check_id("campaign_id", request.campaign_id, required=False)
        try:
            config = CampaignConfig.from_proto(request.spec)
        except ValidationError as exc:
            raise InvalidArgument(explain(exc, prefix="spec.")) from None
        # refuses a path outside the root, or one to the store, a log or a credential, before anything opens it
        resolved = resolve_artifact_paths(config, self.artifact_root, self.protected)
        campaign_id = request.campaign_id or uuid.uuid4().hex[:12]
        spec = json.loads(config.model_dump_json())
        if self.store.campaign(campaign_id) is not None:
            return self._existing(campaign_id, spec)
        self._preflight(resolved)
        with self._taking:  # the takeover round must not see it stored and owned by us, yet not running
            try:
                lease = self.store.create_campaign(campaign_id, config.name, spec, self.owner, self.lease_seconds)
            except CampaignExists:  # a concurrent request with this id stored it first: the insert decides
                lease = None
            if lease is not None:
                self._launch(campaign_id, config, lease)
        if lease is None:
            return self._existing(campaign_id, spec)
        return generator_pb2.StartCampaignResponse(status=self._status(campaign_id))

    def _existing(self, campaign_id: str, spec: dict[str, Any]) -> generator_pb2.StartCampaignResponse:
        """StartCampaign with a stored id: the same campaign for the same spec (the idempotency key), else
        ALREADY_EXISTS."""
        if self._row(campaign_id).spec != spec:
            raise AlreadyExists(f"campaign {campaign_id!r} exists with another spec")
        return generator_pb2.StartCampaignResponse(status=self._status(campaign_id))

    @grpc_method
    @store_errors
    def WatchCampaign(
        self, request: generator_pb2.WatchCampaignRequest, context: grpc.ServicerContext
    ) -> Iterator[generator_pb2.WatchCampaignResponse]:
        self._row(request.campaign_id)
        q: queue.Queue = queue.Queue()
        with self._lock:
            running = request.campaign_id in self._runners
            if running:
                self._watchers.setdefault(request.campaign_id, []).append(q)
        try:
            status = self._status(request.campaign_id)
            yield generator_pb2.WatchCampaignResponse(kind="progress", status=status)
            # running on another generator replica (same store): follow it through the store
            while not running and status.state == generator_pb2.CAMPAIGN_STATE_RUNNING and context.is_active():
                time.sleep(WATCH_POLL_SECONDS)
                previous, status = status, self._status(request.campaign_id)
                if (status.executions, status.state) != (previous.executions, previous.state):
                    yield generator_pb2.WatchCampaignResponse(kind="progress", status=status)
            while running and context.is_active():
                try:
                    event = q.get(timeout=1.0)
                except queue.Empty:
                    continue
                if event is None:
                    break
                yield event
            final = self._status(request.campaign_id)
            yield generator_pb2.WatchCampaignResponse(
                kind="finished", status=final, message=f"stopped: {final.stop_reason}" if final.stop_reason else ""
            )
        finally:
            with self._lock:
                watchers = self._watchers.get(request.campaign_id, [])
                if q in watchers:
                    watchers.remove(q)

    @grpc_method
    @store_errors
    def GetCampaign(
        self, request: generator_pb2.GetCampaignRequest, context: grpc.ServicerContext
    ) -> generator_pb2.GetCampaignResponse:
        status = self._status(request.campaign_id)
        if not request.with_parameter_space:
            return generator_pb2.GetCampaignResponse(status=status)
        return generator_pb2.GetCampaignResponse(status=status, parameter_space=self._space_of(status.spec.subject))

    def _space_of(self, subject: str) -> common_pb2.ParameterSpace | None:
        """The subject's parameter space as a simulator describes it, for a report's units; None when no simulator
        answers (a suite started for reports only has none): the report then prints bare numbers."""
        if not subject:
            return None
        try:
            request = simulator_pb2.DescribeEnvironmentRequest(subject=subject)
            info = self.simulators.call(lambda sim: sim.DescribeEnvironment(request, timeout=10))
        except grpc.RpcError as exc:
            log.info("no parameter space for subject %s: %s", subject, describe(exc))
            return None
        return info.parameter_space

    @grpc_method
    @store_errors
    def ListCampaigns(
        self, request: generator_pb2.ListCampaignsRequest, context: grpc.ServicerContext
    ) -> generator_pb2.ListCampaignsResponse:
        return generator_pb2.ListCampaignsResponse(
            campaigns=[self._status_of(row) for row in self.store.list_campaigns()]
        )

    @grpc_method
    @store_errors
    def ListExecutions(
        self, request: generator_pb2.ListExecutionsRequest, context: grpc.ServicerContext
    ) -> Iterator[generator_pb2.ListExecutionsResponse]:
        self._row(request.campaign_id)  # NOT_FOUND for an unknown campaign, before streaming anything
        corrupt: list[CorruptRow] = []
        for e in self.store.executions(request.campaign_id, corrupt=corrupt):
            yield generator_pb2.ListExecutionsResponse(execution=_execution(e))
        if corrupt:  # every readable row went out first; the status names the others
            raise DataLoss(corrupt_message(request.campaign_id, corrupt))

    def _check_readable(self, campaign_id: str) -> None:
        """DATA_LOSS naming the campaign's stored executions that cannot be read: resuming would replay the
        strategy over them, so the campaign waits for the rows to be repaired instead."""
        corrupt = self.store.corrupt_executions(campaign_id)
        if corrupt:
            raise DataLoss(
                f"{corrupt_message(campaign_id, corrupt)}; the campaign cannot be resumed until they are repaired "
                "or deleted in the store"
            )

    @grpc_method
    @store_errors
    def ListArchive(
        self, request: generator_pb2.ListArchiveRequest, context: grpc.ServicerContext
    ) -> Iterator[generator_pb2.ListArchiveResponse]:
        row = self._row(request.campaign_id)
        try:
            config = resolve_artifact_paths(stored_config(row), self.artifact_root, self.protected)
        except InvalidArgument as exc:
            raise FailedPrecondition(str(exc)) from None
        try:
            info = self.simulators.call(
                lambda stub: stub.DescribeEnvironment(
                    simulator_pb2.DescribeEnvironmentRequest(subject=config.subject), timeout=60
                )
            )
        except grpc.RpcError as exc:
            raise local_error(exc, "simulator service") from None
        archive = replay(self.store, row.id, config, info)
        summary = generator_pb2.ArchiveSummary(
            strategy=config.strategy, members=len(archive.members), **archive.summary
        )
        yield generator_pb2.ListArchiveResponse(summary=summary)
        if not request.include_images:
            for m in archive.members:
                member = generator_pb2.ArchiveMember(execution=_execution(m.execution), f_accuracy=m.f_accuracy)
                yield generator_pb2.ListArchiveResponse(member=member)
            return
        space = ParameterSpace.from_proto(info.parameter_space)
        # one replay for both parts: the first max_images members rendered, the rest as stored
        shown = archive.members[: request.max_images] if request.max_images else archive.members
        for m, episode in render(self.simulators, config, space, shown, f"{row.id}/archive"):
            member = generator_pb2.ArchiveMember(
                execution=_execution(m.execution), f_accuracy=m.f_accuracy, **judged_views(episode)
            )
            yield generator_pb2.ListArchiveResponse(member=member)
        for m in archive.members[len(shown) :]:
            member = generator_pb2.ArchiveMember(execution=_execution(m.execution), f_accuracy=m.f_accuracy)
            yield generator_pb2.ListArchiveResponse(member=member)

    @grpc_method
    @store_errors
    def CancelCampaign(
        self, request: generator_pb2.CancelCampaignRequest, context: grpc.ServicerContext
    ) -> generator_pb2.CancelCampaignResponse:
        row = self._row(request.campaign_id)
        runner = self._runners.get(request.campaign_id)
        thread = self._threads.get(request.campaign_id)
        if runner:
            runner.cancel()
        if thread:
            thread.join(timeout=30)
        elif row.state == "running" and self._cancel_orphan(row.id):
            pass
        elif row.state == "running" and self.store.request_cancel(row.id):
            # another generator replica runs it: it cancels at its next lease renewal; wait as long as for ours
            deadline = time.monotonic() + max(30.0, self.lease_seconds)
            while self._row(row.id).state == "running" and time.monotonic() < deadline and context.is_active():
                time.sleep(WATCH_POLL_SECONDS)
        return generator_pb2.CancelCampaignResponse(status=self._status(request.campaign_id))

    @grpc_method
    @store_errors
    def ResumeCampaign(
        self, request: generator_pb2.ResumeCampaignRequest, context: grpc.ServicerContext
    ) -> generator_pb2.ResumeCampaignResponse:
        row = self._row(request.campaign_id)
        if request.campaign_id in self._runners:
            return generator_pb2.ResumeCampaignResponse(status=self._status(request.campaign_id))
        if row.state == "completed":
            raise FailedPrecondition(f"campaign {row.id!r} is completed ({row.stop_reason}); nothing to resume")
        try:
            stored_config(row)
        except InvalidArgument as exc:
            raise FailedPrecondition(str(exc)) from None
        self._take(row.id)  # False: another generator runs it (the status says running)
        return generator_pb2.ResumeCampaignResponse(status=self._status(request.campaign_id))

    @grpc_method
    @store_errors
    def ReplayExecution(
        self, request: generator_pb2.ReplayExecutionRequest, context: grpc.ServicerContext
    ) -> Iterator[generator_pb2.ReplayExecutionResponse]:
        row = self._row(request.campaign_id)
        check_id("test_case_id", request.test_case_id)
        if request.max_frames > MAX_REPLAY_FRAMES:
            raise InvalidArgument(f"max_frames={request.max_frames} is out of range [1, {MAX_REPLAY_FRAMES}] (0 = 300)")
        try:
            config = stored_config(row)
        except InvalidArgument as exc:
            raise FailedPrecondition(str(exc)) from None
        stored = find_execution(self.store, row.id, request.test_case_id)
        replayer = Replayer(self.simulators, self.oracle)
        replayed = replayer.replay(row.id, config, stored)
        repetition = rendered_repetition(replayed) if request.render else 0
        yield generator_pb2.ReplayExecutionResponse(summary=replay_summary(replayed, config, _execution, repetition))
        if request.render:
            for frame in replayer.frames(config, replayed, repetition, request.max_frames):
                yield generator_pb2.ReplayExecutionResponse(frame=frame)

    @grpc_method
    @store_errors
    def ShrinkExecution(
        self, request: generator_pb2.ShrinkExecutionRequest, context: grpc.ServicerContext
    ) -> generator_pb2.ShrinkExecutionResponse:
        row = self._row(request.campaign_id)
        check_id("test_case_id", request.test_case_id)
        if request.max_executions > MAX_SHRINK_BUDGET:
            raise InvalidArgument(
                f"max_executions={request.max_executions} is out of range [1, {MAX_SHRINK_BUDGET}] (0 = 60)"
            )
        try:
            config = stored_config(row)
        except InvalidArgument as exc:
            raise FailedPrecondition(str(exc)) from None
        stored = find_execution(self.store, row.id, request.test_case_id)
        if stored.verdict != "fail":
            raise FailedPrecondition(
                f"execution {stored.test_case_id!r} of campaign {row.id!r} did not fail ({stored.verdict}); "
                "only a failure can be shrunk"
            )
        replayer = Replayer(self.simulators, self.oracle)
        space = replayer.context(config)[2]
        budget = request.max_executions or DEFAULT_SHRINK_BUDGET
        return _shrink_answer(stored, shrink_and_store(self.store, replayer, row.id, config, space, stored, budget))

    @grpc_method
    @store_errors
    def ListShrinks(
        self, request: generator_pb2.ListShrinksRequest, context: grpc.ServicerContext
    ) -> generator_pb2.ListShrinksResponse:
        row = self._row(request.campaign_id)
        shrinks = self.store.shrinks(row.id)
        if not shrinks:
            return generator_pb2.ListShrinksResponse()
        originals = {e.test_case_id: e for e in self.store.executions(row.id)}
        return generator_pb2.ListShrinksResponse(
            shrinks=[_shrink_answer(originals[s.test_case_id], s) for s in shrinks if s.test_case_id in originals]
        )

    @grpc_method
    @store_errors
    def RerunExecution(
        self, request: generator_pb2.RerunExecutionRequest, context: grpc.ServicerContext
    ) -> generator_pb2.RerunExecutionResponse:
        row = self._row(request.campaign_id)
        check_id("test_case_id", request.test_case_id)
        runs = request.runs or DEFAULT_RERUNS
        if not 2 <= runs <= MAX_RERUNS:
            raise InvalidArgument(f"runs={request.runs} is out of range [2, {MAX_RERUNS}] (0 = {DEFAULT_RERUNS})")
        try:
            config = stored_config(row)
        except InvalidArgument as exc:
            raise FailedPrecondition(str(exc)) from None
        stored = find_execution(self.store, row.id, request.test_case_id)
        if stored.verdict == "invalid":
            raise FailedPrecondition(f"execution {stored.test_case_id!r} is an invalid input that never ran")
        replayer = Replayer(self.simulators, self.oracle)
        done = rerun(replayer, row.id, config, stored, runs)
        low, high = wilson(done.failures, done.judged)
        try:
            described = self.simulators.call(
                lambda sim: sim.DescribeEnvironment(
                    simulator_pb2.DescribeEnvironmentRequest(subject=config.subject), timeout=60
                )
            )
        except grpc.RpcError as exc:
            raise local_error(exc, "simulator service") from None
        return generator_pb2.RerunExecutionResponse(
            stored=_execution(stored),
            runs=runs,
            failures=done.failures,
            judged=done.judged,
            failure_probability=done.failures / done.judged if done.judged else 0.0,
            failure_probability_low=low,
            failure_probability_high=high,
            flaky=done.flaky,
            verdicts=done.verdicts,
            reasons=done.reasons,
            seeds=done.seeds,
            subject_deterministic=described.deterministic,
        )


def corrupt_message(campaign_id: str, corrupt: list[CorruptRow], shown_rows: int = 5) -> str:
    """One sentence naming the campaign and its unreadable rows (the first few, and how many in all)."""
    named = "; ".join(f"test case {c.test_case_id!r} ({c.column} is not valid JSON)" for c in corrupt[:shown_rows])
    more = f"; and {len(corrupt) - shown_rows} more" if len(corrupt) > shown_rows else ""
    return f"campaign {campaign_id!r}: {len(corrupt)} stored execution(s) cannot be read: {named}{more}"


def stored_config(row: CampaignRow) -> CampaignConfig:
    """The campaign spec of a stored row; InvalidArgument naming the row and its first bad field when this version
    cannot read it (e.g. a budget an older version stored as JSON null)."""
    try:
        return CampaignConfig.model_validate(row.spec)
    except ValidationError as exc:
        raise InvalidArgument(
            f"stored campaign {row.id!r} cannot be read: {explain(exc, prefix='spec.')}; it is kept as it is "
            "(repair or delete the row in the store to use it again)"
        ) from None


def resolve_artifact_paths(
    config: CampaignConfig, root: Path, protected: ProtectedPaths | None = None
) -> CampaignConfig:
    """`config` with each path parameter of its strategy (a surrogate folder, a training log) resolved under
    `root`; InvalidArgument for one that is absolute, has '..', leads out through a symbolic link, or leads to one
    of the `protected` paths (the store, logs, credentials). An unknown strategy is left for check_strategy to
    name."""
    info = strategies().get(config.strategy)
    if info is None:
        return config
    params: dict[str, Any] = dict(config.strategy_params)
    for name, field in info.schema.model_fields.items():
        extra = field.json_schema_extra
        value = params.get(name)
        if value is None or not (isinstance(extra, dict) and extra.get(ARTIFACT_PATH)):
            continue
        where = f"spec.strategy_params.{name}"
        if not isinstance(value, str):
            kind = type(value).__name__
            raise InvalidArgument(f"{where} must be a path relative to {ARTIFACT_ROOT_NAME}, got a {kind}")
        resolved = resolve_under(root, value, where, ARTIFACT_ROOT_NAME)
        if protected is not None:
            protected.check(resolved, where)
        params[name] = str(resolved)
    return config.model_copy(update={"strategy_params": params})


def check_strategy(
    config: CampaignConfig, subject: SubjectRules, artifact_root: Path | None = None, search: Any = None
) -> None:
    """Builds the campaign's strategy once: NOT_FOUND for an unknown name, INVALID_ARGUMENT for bad parameters,
    FAILED_PRECONDITION for a subject rule or operator kind the strategy needs but this generator lacks.
    With `artifact_root`, a message names artifact paths relative to it, as the client gave them."""
    known = strategies()
    if config.strategy not in known:
        raise NotFound(f"unknown strategy {config.strategy!r}; installed strategies: {', '.join(sorted(known))}")
    try:
        make_strategy(  # seeded as the campaign will seed it, so a seed-dependent check refuses what the run would
            config.strategy,
            subject.space,
            strategy_seed(config.seed),
            config.strategy_params,
            subject_rules=subject,
            search=search,
        )
    except ValueError as exc:  # StrategyParamError, or a constructor's check of a parameter against the space
        message = str(exc)
        root = f"{artifact_root.resolve()}/" if artifact_root is not None else None
        if root and root in message:  # the server's own folders are none of the caller's business, its root's name is
            message = message.replace(root, "") + f" (paths are relative to {ARTIFACT_ROOT_NAME})"
        raise InvalidArgument(message) from None


_VERDICTS = {name: kind for kind, name in VERDICT_NAMES.items()}


def _execution(e: ExecutionRow) -> generator_pb2.Execution:
    """A stored execution as the contract shows it (ListExecutions, ListArchive)."""
    stored = TestCase.from_stored(e.values)
    case = common_pb2.TestCase(id=e.test_case_id)
    for name, value in stored.values.items():
        case.values[name].CopyFrom(_value(value))
    if stored.action_trace is not None:  # an action trace is no parameter: it has its own field
        case.action_trace.CopyFrom(stored.action_trace.to_proto())
    if stored.seed_origin is not None:  # a replayed case (regression campaign): whose episode seeds it reran
        case.seed_origin.campaign_seed = stored.seed_origin.campaign_seed
        case.seed_origin.test_case_id = stored.seed_origin.test_case_id
    return generator_pb2.Execution(
        index=e.index,
        test_case=case,
        verdict=_VERDICTS[e.verdict],
        margin=e.margin,
        steps=e.steps,
        total_reward=e.total_reward,
        descriptors=e.descriptors,
        reason=e.reason,
        repetitions=e.repetitions,
        failed_repetitions=e.failed_repetitions,
        elapsed_seconds=e.elapsed_seconds,
        batch=e.batch,
        final_observation=e.final_observation,
    )


def _shrink_answer(original: ExecutionRow, s: ShrinkRow) -> generator_pb2.ShrinkExecutionResponse:
    """A stored shrink as ShrinkExecution answers it."""
    return generator_pb2.ShrinkExecutionResponse(
        original=_execution(original),
        shrunk=_execution(s.shrunk),
        executions=s.executions,
        original_distance=s.original_distance,
        shrunk_distance=s.shrunk_distance,
        moved=list(s.moved),
        nominal=s.nominal,
    )


def _value(value: object) -> common_pb2.Value:
    if isinstance(value, bool):
        return common_pb2.Value(integer=int(value))
    if isinstance(value, int):
        return common_pb2.Value(integer=value)
    if isinstance(value, float):
        return common_pb2.Value(real=value)
    if isinstance(value, str):
        return common_pb2.Value(category=value)
    records = common_pb2.RecordList()
    for item in value:  # type: ignore[attr-defined]
        rec = records.records.add()
        for k, v in item.items():
            rec.fields[k].CopyFrom(_value(v))
    return common_pb2.Value(records=records)


def register(server: grpc.Server, servicer: GeneratorServicer) -> list[str]:
    generator_pb2_grpc.add_GeneratorServiceServicer_to_server(servicer, server)
    return [generator_pb2.DESCRIPTOR.services_by_name["GeneratorService"].full_name]
