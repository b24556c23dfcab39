"""The simulator's side of the agent service: one ActStream per episode batch, one message per lock-step."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc
import numpy as np

from common.errors import FailedPrecondition, Unavailable
from common.generated.gauntlet.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from common.remote import local_error
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
