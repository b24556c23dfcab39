"""Execute: a batch's test cases as RunEpisodes streams, sharded over the simulator endpoints.

The request asks the simulator to answer an invalid test case (outside the space, breaking a validity rule) with
one result naming its violations (``invalid_as_results``), so a batch is checked and run in one call: no separate
ValidateConfigs round trip, and one invalid input never refuses the rest of its batch.

Shards are contiguous runs of the pending cases, one stream each, round-robin over the endpoints. Every episode's
seed derives from the campaign seed and the case id, and the campaign stores by asking position and tells in
asking order, so which simulator ran a case changes neither the verdicts nor the stored order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from common.generated.gauntlet.v1 import common_pb2, simulator_pb2
from common.retry import status_code
from common.space import ParameterSpace
from generator_service.config import CampaignConfig
from generator_service.pipeline.plan import PlannedCase
from generator_service.simulators import SimulatorPool


@dataclass(frozen=True)
class Ran:
    """A test case whose episodes are all in: one per repetition, or the one result of an invalid input."""

    case: PlannedCase
    episodes: list[common_pb2.EpisodeResult]

    @property
    def violations(self) -> list[str]:
        """Why the simulator refused the input (empty: it ran)."""
        return [v for e in self.episodes for v in e.violations]


@dataclass(frozen=True)
class ShardFailed:
    """One shard's stream ended with an error; the other shards go on."""

    error: grpc.RpcError


class ShardCrashed(RuntimeError):
    """A shard's thread died of something other than a gRPC error (a bug): the campaign stops, interrupted, rather
    than retrying a batch whose shard would crash again."""


def shards(pending: Sequence[PlannedCase], count: int) -> list[list[PlannedCase]]:
    """``pending`` cut into ``count`` contiguous shards whose sizes differ by at most one (the first ones larger)."""
    count = max(1, min(count, len(pending)))
    size, extra = divmod(len(pending), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(list(pending[start:end]))
        start = end
    return out


class Executor:
    """Runs test cases on the simulators for one campaign; ``cancel()`` cuts every stream in flight."""

    def __init__(
        self,
        campaign_id: str,
        config: CampaignConfig,
        space: ParameterSpace,
        signals: Sequence[str],
        simulators: SimulatorPool,
        cancelled: threading.Event,
    ) -> None:
        self.campaign_id = campaign_id
        self.config = config
        self.space = space
        self.signals = list(signals)
        self.simulators = simulators
        self.cancelled = cancelled
        self._calls: list[Any] = []  # the shard streams in flight, so that a cancel reaches every one
        self._lock = threading.Lock()

    def request(self, batch: int, shard: int, cases: Sequence[PlannedCase]) -> simulator_pb2.RunEpisodesRequest:
        cfg = self.config
        request = simulator_pb2.RunEpisodesRequest(
            request_id=f"{self.campaign_id}/batch/{batch}/shard/{shard}",
            subject=cfg.subject,
            seed=cfg.seed,
            repetitions=cfg.repetitions,
            trace=common_pb2.TraceSpec(signals=self.signals),
            parallelism=cfg.parallelism,
            test_cases=[c.case.to_proto(self.space, c.id) for c in cases],
            observation_translator=cfg.observation_translator,
            invalid_as_results=True,
            batch_results=True,  # a lock-step's results in one message: fewer messages at short episodes
        )
        request.model.name = cfg.model
        return request

    def cancel(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for call in calls:
            call.cancel()

    def run(self, batch: int, pending: Sequence[PlannedCase]) -> Generator[Ran | ShardFailed, None, None]:
        """Runs ``pending``; yields each case once all its episodes are in (in completion order), and each shard's
        error. Closing the generator (a stop reason, an error) cancels every stream at once."""
        if not pending:
            return
        by_id = {c.id: c for c in pending}
        repetitions = max(self.config.repetitions, 1)
        episodes: dict[str, list[common_pb2.EpisodeResult]] = {}
        for item in self._stream(batch, pending):
            if isinstance(item, ShardFailed):
                yield item
                continue
            result = item
            if result.test_case_id not in by_id:
                continue  # not asked for in this call: never stored under another case's name
            got = episodes.setdefault(result.test_case_id, [])
            got.append(result)
            if len(result.violations) or len(got) == repetitions:
                yield Ran(by_id[result.test_case_id], episodes.pop(result.test_case_id))

    def _stream(
        self, batch: int, pending: Sequence[PlannedCase]
    ) -> Generator[common_pb2.EpisodeResult | ShardFailed, None, None]:
        chunks = shards(pending, self.simulators.streams)
        targets = self.simulators.shard_targets(len(chunks))
        inbox: queue.Queue[Any] = queue.Queue()
        done = object()
        # set when the caller stops reading (a stop reason, an error, the batch done): a shard whose call starts
        # after that cancels it itself, so no stream runs on for nobody (a cancel of the campaign sets `cancelled`)
        abandoned = threading.Event()

        def stream(shard: int, chunk: list[PlannedCase], target: int) -> None:
            try:
                call = self.simulators.simulators[target].stub.RunEpisodes(self.request(batch, shard, chunk))
                with self._lock:
                    self._calls.append(call)
                    late = abandoned.is_set() or self.cancelled.is_set()
                if late:
                    call.cancel()
                for response in call:  # several results, or one (a simulator that predates batch_results)
                    for result in response.results if len(response.results) else (response.result,):
                        inbox.put(result)
            except grpc.RpcError as exc:
                if status_code(exc) != grpc.StatusCode.CANCELLED:
                    self.simulators.mark_failed(target)  # the next attempt's shards go to the others
                inbox.put(ShardFailed(exc))
            except Exception as exc:  # noqa: BLE001 - a bug must stop the campaign, not leave the shard's cases unrun
                inbox.put(ShardCrashed(f"shard {shard} of batch {batch}: {type(exc).__name__}: {exc}"))
            finally:
                inbox.put(done)

        threads = [
            threading.Thread(target=stream, args=(i, c, t), name=f"shard-{self.campaign_id}-{i}", daemon=True)
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
            with self._lock:
                abandoned.set()
            self.cancel()
