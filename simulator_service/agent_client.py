"""The simulator's side of the agent service: one ActStream per episode batch, one message per lock-step."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc
import numpy as np

from common.errors import FailedPrecondition, InvalidArgument, NotFound, ServiceError, Unavailable
from common.generated.gauntlet.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from common.spaces import compatible, describe, space_to_proto
from common.tensor import from_tensor, to_tensor
from simulator_service.runner import AgentError

_PASS_THROUGH = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
}


def translate_rpc_error(exc: grpc.RpcError, what: str) -> ServiceError:
    """Keeps the agent's own status for caller mistakes; everything else is retryable UNAVAILABLE."""
    code, details = exc.code(), exc.details()  # type: ignore[attr-defined]
    cls = _PASS_THROUGH.get(code, Unavailable)
    return cls(
        f"{what}: {details}"
        if cls is not Unavailable
        else f"{what}: agent service unavailable ({code.name}: {details})"
    )


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
            raise AgentError(str(translate_rpc_error(exc, f"model {self._model!r}"))) from exc
        except StopIteration:
            raise AgentError(f"model {self._model!r}: the agent service closed the action stream") from None

    def close(self) -> None:
        self._requests.put(None)
        cancel = getattr(self._responses, "cancel", None)
        if cancel:
            cancel()


def check_model_fits(
    stub: agent_pb2_grpc.AgentServiceStub, model: str, subject: str, observation_space: object, action_space: object
) -> None:
    """Refuses a model whose observation/action spaces differ from the subject's (FAILED_PRECONDITION)."""
    try:
        info = stub.DescribeModel(agent_pb2.DescribeModelRequest(name=model), timeout=60)
    except grpc.RpcError as exc:
        raise translate_rpc_error(exc, f"model {model!r}") from None
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
