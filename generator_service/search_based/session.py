"""The DFS's SearchEnvironment over a simulator session (SimulatorService.OpenSession).

A subject that can snapshot is searched with one session: each ongoing state is snapshotted once, and sampling from
a state restores its snapshot unless the session is already there. A subject that cannot (Box2D) is searched by
reset + replay: each sample opens the session again with the state's action prefix plus the action (one round
trip; the simulator replays). With rep(c, p) > 1 every sample restores with a new seed (SessionRestore.reseed):
a snapshot copies the environment's random generator, so without one the repetitions would all be the same.
Both follow the subject's search declaration (DescribeEnvironment.search).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import numpy as np

from common.generated.gauntlet.v1 import common_pb2, simulator_pb2, simulator_pb2_grpc
from common.tensor import from_tensor, to_tensor
from generator_service.search_based.dfs import ENDED, GOAL, ONGOING, UNSAFE, Visit

KINDS = {
    simulator_pb2.STATE_KIND_ONGOING: ONGOING,
    simulator_pb2.STATE_KIND_GOAL: GOAL,
    simulator_pb2.STATE_KIND_UNSAFE: UNSAFE,
    simulator_pb2.STATE_KIND_ENDED: ENDED,
}


class SessionEnvironment:
    """SearchEnvironment on one OpenSession stream; close() ends it."""

    def __init__(
        self,
        stub: simulator_pb2_grpc.SimulatorServiceStub,
        subject: str,
        declaration: simulator_pb2.SearchDeclaration,
        timeout: float = 600.0,
    ) -> None:
        self.subject = subject
        self.declaration = declaration
        self.snapshot = declaration.snapshot
        self._outbox: queue.Queue[simulator_pb2.OpenSessionRequest | None] = queue.Queue()
        self._replies: Iterator[simulator_pb2.OpenSessionResponse] = stub.OpenSession(
            iter(self._outbox.get, None), timeout=timeout
        )
        self._at: Any = None  # handle of the state the session is in
        self.round_trips = 0
        self._draws = 0  # restores with a new seed so far (stochastic subjects)

    def _call(self, request: simulator_pb2.OpenSessionRequest) -> simulator_pb2.OpenSessionResponse:
        self._outbox.put(request)
        self.round_trips += 1
        return next(self._replies)

    def _open(self, replay: tuple[int, ...]) -> simulator_pb2.OpenSessionResponse:
        case = common_pb2.TestCase(id="search")
        for name, value in self.declaration.initial.items():
            case.values[name].CopyFrom(value)
        opened = simulator_pb2.SessionOpen(subject=self.subject, test_case=case, seed=self.declaration.seed)
        opened.replay.extend(replay)
        return self._call(simulator_pb2.OpenSessionRequest(open=opened))

    def _visit(self, reply: simulator_pb2.OpenSessionResponse, handle: Any) -> Visit:
        key = tuple(float(x) for x in np.asarray(from_tensor(reply.abstract_state)).reshape(-1))
        return Visit(key, KINDS.get(reply.state_kind, ENDED), float(reply.reward), handle)

    def _snapshot(self, reply: simulator_pb2.OpenSessionResponse) -> Visit:
        visit = self._visit(reply, None)
        if visit.kind != ONGOING:  # nobody samples from a terminal state: no snapshot needed
            return visit
        snap = self._call(simulator_pb2.OpenSessionRequest(snapshot=simulator_pb2.SessionSnapshot()))
        self._at = snap.snapshot_id
        return Visit(visit.key, visit.kind, visit.reward, snap.snapshot_id)

    def root(self) -> Visit:
        reply = self._open(())
        if not self.snapshot:
            return self._visit(reply, ())
        return self._snapshot(reply)

    def sample(self, state: Visit, action: int) -> Visit:
        if not self.snapshot:
            prefix = (*state.handle, int(action))
            return self._visit(self._open(prefix), prefix)
        if self.declaration.repetitions > 1:  # rep(c, p) samples: restore with a new seed each time
            self._draws += 1
            restore = simulator_pb2.SessionRestore(snapshot_id=state.handle, reseed=self.declaration.seed + self._draws)
            self._call(simulator_pb2.OpenSessionRequest(restore=restore))
        elif self._at != state.handle:
            self._call(simulator_pb2.OpenSessionRequest(restore=simulator_pb2.SessionRestore(snapshot_id=state.handle)))
        step = simulator_pb2.SessionStep(action=to_tensor(np.asarray(int(action), dtype=np.int64)))
        reply = self._call(simulator_pb2.OpenSessionRequest(step=step))
        self._at = None  # the session moved on; _snapshot names where, if the state is kept
        return self._snapshot(reply)

    def close(self) -> None:
        self._outbox.put(None)
        for _ in self._replies:  # drain: the server ends the stream once the requests end
            pass
