"""The simulator's side of the agent service: per lock-step group of a batch, one ActStream or, where the agent
runs on this host, one same-host lane (common/lane.py); one message per lock-step either way."""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Iterator

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from common.errors import FailedPrecondition, Unavailable
from common.generated.gauntlet.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from common.lane import ERROR, REQUEST, RESPONSE, LaneConnection, LaneError, connect_lane, decode_error
from common.remote import error_from_status, local_error
from common.retry import Retry
from common.space_spec import compatible, describe, space_to_proto
from common.tensor import from_tensor, to_tensor

AGENT = "agent service"
# DescribeModel is retried this long while the agent is unreachable (e.g. restarting under the local launcher);
# a batch lost mid-stream is not: the simulator relays UNAVAILABLE and the generator re-runs the batch's rest.
DESCRIBE_RETRY_SECONDS = 15.0


class AgentStream:
    """Blocking act() over a bidirectional ActStream."""

    def __init__(self, stub: agent_pb2_grpc.AgentServiceStub, model: str, timeout: float | None = None) -> None:
        self._model = model
        self._requests: queue.Queue[agent_pb2.ActStreamRequest | None] = queue.Queue()
        self._responses: Iterator[agent_pb2.ActStreamResponse] = stub.ActStream(
            iter(self._requests.get, None), timeout=timeout
        )
        self._first = True

    def act(self, observations: np.ndarray) -> np.ndarray:
        self.send(observations)
        return self.receive()

    def send(self, observations: np.ndarray) -> None:
        """Queues a batch; answers come back in order through receive()."""
        request = agent_pb2.ActStreamRequest(observations=to_tensor(observations))
        if self._first:
            request.model.name = self._model
            self._first = False
        self._requests.put(request)

    def receive(self) -> np.ndarray:
        try:
            return from_tensor(next(self._responses).actions)
        except grpc.RpcError as exc:
            # the agent's own status, relayed with its code: INTERNAL (a bug) must not read as retryable
            raise local_error(exc, f"model {self._model!r}: {AGENT}") from None
        except StopIteration:  # the agent ended the stream without a status: it is going away, so transient
            raise Unavailable(f"model {self._model!r}: the agent service closed the action stream") from None

    def close(self) -> None:
        self._requests.put(None)
        cancel = getattr(self._responses, "cancel", None)
        if cancel:
            cancel()


class AgentLane:
    """The same act() over a same-host lane (common/lane.py): the frames of an ActStream on a Unix socket, offered
    by the agent inside an OpenLane call that stays open for the lane's life (its credentials, its admission)."""

    def __init__(self, call: grpc.Call, connection: LaneConnection, model: str) -> None:
        self._call = call
        self._connection = connection
        self._model = model
        # At most one request on the socket at a time: two large frames crossing (an image batch out, a label map
        # back) could fill both socket buffers and block both ends. Later sends wait here until an answer is read.
        self._waiting: deque[bytes] = deque()
        self._in_flight = False

    @classmethod
    def open(cls, stub: agent_pb2_grpc.AgentServiceStub, model: str) -> AgentLane | None:
        """A lane to the agent, or None where it offers none or its socket is not reachable from here."""
        request = agent_pb2.OpenLaneRequest(model=common_pb2.ModelRef(name=model))
        call = stub.OpenLane(request)
        try:
            offer = next(call)
            connection = connect_lane(offer.socket_path, offer.secret)
        except (grpc.RpcError, StopIteration, LaneError):  # any refusal: ActStream gives the same answer its way
            call.cancel()
            return None
        return cls(call, connection, model)

    def act(self, observations: np.ndarray) -> np.ndarray:
        self.send(observations)
        return self.receive()

    def send(self, observations: np.ndarray) -> None:
        self._waiting.append(agent_pb2.ActStreamRequest(observations=to_tensor(observations)).SerializeToString())
        if not self._in_flight:
            self._send_next()

    def _send_next(self) -> None:
        self._in_flight = bool(self._waiting)
        if self._waiting:
            try:
                self._connection.send(REQUEST, self._waiting.popleft())
            except LaneError:
                pass  # the agent is gone; receive() says so, with the agent's status if it sent one

    def receive(self) -> np.ndarray:
        try:
            kind, payload = self._connection.receive()
            if kind == RESPONSE:
                self._send_next()  # the agent works on the next request while the caller uses this answer
            if kind == ERROR:
                code, detail = decode_error(payload)
                raise error_from_status(code, detail, f"model {self._model!r}: {AGENT}")
            if kind != RESPONSE:
                raise LaneError(f"frame kind {kind} where a response belongs")
            return from_tensor(agent_pb2.ActStreamResponse.FromString(payload).actions)
        except (EOFError, LaneError, DecodeError):  # as a stream that ended without a status: transient
            raise Unavailable(f"model {self._model!r}: the agent service closed the action lane") from None

    def close(self) -> None:
        self._connection.close()
        self._call.cancel()


def open_actor(stub: agent_pb2_grpc.AgentServiceStub, model: str, lanes: bool = True) -> AgentLane | AgentStream:
    """A same-host lane to the agent where it offers one and this process can reach it (lanes=True), else an
    ActStream: the answers are the same on both."""
    lane = AgentLane.open(stub, model) if lanes else None
    return lane if lane is not None else AgentStream(stub, model)


def check_model_fits(
    stub: agent_pb2_grpc.AgentServiceStub, model: str, subject: str, observation_space: object, action_space: object
) -> None:
    """Refuses a model whose observation/action spaces differ from the subject's (FAILED_PRECONDITION). The agent's
    own status otherwise keeps its code (NOT_FOUND for an unknown model, UNAUTHENTICATED, ...)."""
    request = agent_pb2.DescribeModelRequest(name=model)
    try:
        info = Retry(budget_seconds=DESCRIBE_RETRY_SECONDS, idempotent=True).call(
            lambda: stub.DescribeModel(request, timeout=30)
        )
    except grpc.RpcError as exc:
        raise local_error(exc, f"model {model!r}: {AGENT}") from None
    pairs: list[tuple[str, common_pb2.SpaceSpec, common_pb2.SpaceSpec]] = [
        ("observation", info.observation_space, space_to_proto(observation_space)),
        ("action", info.action_space, space_to_proto(action_space)),
    ]
    for what, theirs, ours in pairs:
        if not compatible(theirs, ours):
            raise FailedPrecondition(
                f"model {model!r} ({info.summary.subject}) does not fit subject {subject!r}: its {what} space is "
                f"{describe(theirs)} but the subject's is {describe(ours)}"
            )
