"""The messages of a RunEpisodes stream: one result each, or (RunEpisodesRequest.batch_results) the results of one
lock-step together, so a one-step episode does not pay for a message of its own."""

from __future__ import annotations

from common.generated.gauntlet.v1 import common_pb2, simulator_pb2

MAX_BATCH_BYTES = 4 * 1024 * 1024  # well under the message limit, and a client sees image results early


class ResultMessages:
    """Collects results; `add` and `flush` return the messages to send now."""

    def __init__(self, batched: bool, max_bytes: int = MAX_BATCH_BYTES) -> None:
        self.batched = batched
        self.max_bytes = max_bytes
        self._results: list[common_pb2.EpisodeResult] = []
        self._bytes = 0

    def add(self, result: common_pb2.EpisodeResult) -> list[simulator_pb2.RunEpisodesResponse]:
        if not self.batched:
            return [simulator_pb2.RunEpisodesResponse(result=result)]
        size = result.ByteSize()
        out = self.flush() if self._results and self._bytes + size > self.max_bytes else []
        self._results.append(result)
        self._bytes += size
        return out

    def flush(self) -> list[simulator_pb2.RunEpisodesResponse]:
        """The collected results as one message (none when there are none)."""
        if not self._results:
            return []
        message = simulator_pb2.RunEpisodesResponse(results=self._results)
        self._results, self._bytes = [], 0
        return [message]
