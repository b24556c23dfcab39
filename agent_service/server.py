"""gRPC servicer of the agent service."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
from google.protobuf.message import DecodeError
from prometheus_client import Counter, Histogram

from agent_service.registry import ModelRegistry
from common.errors import FailedPrecondition, InvalidArgument, grpc_method, status_of
from common.generated.gauntlet.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from common.lane import ERROR, REQUEST, RESPONSE, LaneConnection, LaneError, LaneOffer, encode_error
from common.space_spec import space_to_proto
from common.tensor import TensorError, element_size, from_tensor, to_tensor
from common.validation import non_finite_summary

ACT_LATENCY = Histogram("gauntlet_agent_act_seconds", "Latency of one batched act call", ["model"])
ACT_OBSERVATIONS = Counter("gauntlet_agent_observations_total", "Observations acted on", ["model"])
log = logging.getLogger("agent")
LANES = Counter("gauntlet_agent_lanes_total", "Same-host lanes offered, by what became of them", ["outcome"])
# The largest batch one call may carry. A campaign sends at most 2 x 512 observations a lock-step (parallelism
# <= 512; image subjects send each simulator image and its translation), a few MB; a 240 MB batch was once
# accepted and the process kept 1.5 GB afterwards. Checked on the message before any copy is made of its data.
MAX_BATCH_OBSERVATIONS = 4096
MAX_BATCH_BYTES = 64 * 1024 * 1024


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, registry: ModelRegistry, lane_dir: Path | None = None) -> None:
        self.registry = registry
        self.lane_dir = lane_dir  # None: no same-host lanes (OpenLane answers FAILED_PRECONDITION)

    def _summary(self, name: str) -> agent_pb2.ModelSummary:
        e = self.registry.entry(name)
        return agent_pb2.ModelSummary(
            name=e.name,
            algorithm=e.algorithm,
            subject=e.subject,
            description=e.description,
            metadata={k: str(v) for k, v in e.metadata.items()},
        )

    @grpc_method
    def ListModels(
        self, request: agent_pb2.ListModelsRequest, context: grpc.ServicerContext
    ) -> agent_pb2.ListModelsResponse:
        return agent_pb2.ListModelsResponse(models=[self._summary(n) for n in sorted(self.registry.entries)])

    @grpc_method
    def DescribeModel(
        self, request: agent_pb2.DescribeModelRequest, context: grpc.ServicerContext
    ) -> agent_pb2.DescribeModelResponse:
        model = self.registry.load(request.name)
        meta = {k: str(v) for k, v in self.registry.entry(request.name).metadata.items()}
        return agent_pb2.DescribeModelResponse(
            summary=self._summary(request.name),
            observation_space=space_to_proto(model.observation_space),
            action_space=space_to_proto(model.action_space),
            metadata=meta,
        )

    def _act(self, name: str, tensor: common_pb2.Tensor) -> common_pb2.Tensor:
        check_batch("observations", tensor)
        try:
            observations = from_tensor(tensor)
        except TensorError as exc:
            raise InvalidArgument(f"observations: {exc}") from None
        problem = non_finite_summary(observations)  # a policy would act on NaN, or fail with a tensor dump
        if problem is None and observations.dtype == np.float64:  # the models compute in float32
            with np.errstate(over="ignore"):
                problem = non_finite_summary(observations.astype(np.float32), "observations (as float32)")
        if problem:
            raise InvalidArgument(problem)
        started = time.perf_counter()
        actions = self.registry.act(name, observations)
        ACT_LATENCY.labels(name).observe(time.perf_counter() - started)
        ACT_OBSERVATIONS.labels(name).inc(len(observations))
        return to_tensor(actions)

    @grpc_method
    def Act(self, request: agent_pb2.ActRequest, context: grpc.ServicerContext) -> agent_pb2.ActResponse:
        return agent_pb2.ActResponse(actions=self._act(request.model.name, request.observations))

    @grpc_method
    def Embed(self, request: agent_pb2.EmbedRequest, context: grpc.ServicerContext) -> agent_pb2.EmbedResponse:
        check_batch("images", request.images)
        try:
            images = from_tensor(request.images)
        except TensorError as exc:
            raise InvalidArgument(f"images: {exc}") from None
        return agent_pb2.EmbedResponse(features=to_tensor(self.registry.embed(request.model.name, images)))

    @grpc_method
    def ActStream(
        self, requests: Iterator[agent_pb2.ActStreamRequest], context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.ActStreamResponse]:
        name = ""
        for request in requests:
            name = request.model.name or name
            if not name:
                raise InvalidArgument("ActStreamRequest.model.name must be set on the first message of a stream")
            yield agent_pb2.ActStreamResponse(actions=self._act(name, request.observations))

    @grpc_method
    def OpenLane(
        self, request: agent_pb2.OpenLaneRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.OpenLaneResponse]:
        name = request.model.name
        self.registry.entry(name)  # NOT_FOUND now, not on the lane's first frame
        if self.lane_dir is None:
            raise FailedPrecondition("this agent service offers no same-host lanes (--lane-dir off); use ActStream")
        try:
            offer = LaneOffer(self.lane_dir)
        except (LaneError, OSError) as exc:  # e.g. the folder was removed: the caller uses ActStream instead
            log.warning("cannot offer a same-host lane: %s", exc)
            raise FailedPrecondition("this agent service cannot offer a same-host lane now; use ActStream") from None
        context.add_callback(offer.withdraw)  # a caller that gives up (another host) cancels: stop waiting at once
        yield agent_pb2.OpenLaneResponse(socket_path=offer.path, secret=offer.secret)
        lane = offer.accept()
        if lane is None:
            LANES.labels("unused").inc()
            return
        LANES.labels("used").inc()
        try:
            if not context.add_callback(lane.shutdown):  # cancelled or stopping: the lane's blocked receive ends
                return  # the call has ended already

            self._serve_lane(name, lane)
        finally:
            lane.close()

    def _serve_lane(self, name: str, lane: LaneConnection) -> None:
        """Answers the lane's frames as ActStream answers its messages, until the caller closes it; a failure is
        sent as one ERROR frame with the status ActStream would have ended with, and ends the lane."""
        while True:
            try:
                kind, payload = lane.receive()
            except (EOFError, LaneError):  # the caller is done, or gone
                return
            try:
                if kind != REQUEST:
                    raise InvalidArgument(f"lane frame kind {kind} where a request ({REQUEST}) belongs")
                try:
                    message = agent_pb2.ActStreamRequest.FromString(payload)
                except DecodeError:
                    raise InvalidArgument("lane frame: not an ActStreamRequest") from None
                if message.model.name and message.model.name != name:
                    raise InvalidArgument(
                        f"ActStreamRequest.model.name {message.model.name!r} on a lane opened for {name!r}"
                    )
                answer = agent_pb2.ActStreamResponse(actions=self._act(name, message.observations))
            except Exception as exc:  # noqa: BLE001 - sent to the caller as its status, as grpc_method would
                code, detail = status_of(exc, "OpenLane")
                try:
                    lane.send(ERROR, encode_error(code, detail))
                except LaneError:
                    pass
                return
            try:
                lane.send(RESPONSE, answer.SerializeToString())
            except LaneError:
                return


def check_batch(field: str, tensor: common_pb2.Tensor) -> None:
    """INVALID_ARGUMENT when a batch is over MAX_BATCH_OBSERVATIONS rows or MAX_BATCH_BYTES of data, judged from
    its declared shape and dtype, so that a refused batch is never decoded or copied (a data field that does not
    match its shape is refused by from_tensor)."""
    shape = [int(s) for s in tensor.shape]
    try:
        _check_batch(field, tensor, shape)
    except InvalidArgument:
        # the refused message's buffers are freed as the call ends, but malloc keeps them unless handed back
        release_free_memory()
        later = threading.Timer(1.0, release_free_memory)
        later.daemon = True
        later.start()
        raise


def _check_batch(field: str, tensor: common_pb2.Tensor, shape: list[int]) -> None:
    if shape and shape[0] > MAX_BATCH_OBSERVATIONS:
        raise InvalidArgument(
            f"{field}: a batch may hold at most {MAX_BATCH_OBSERVATIONS:,} rows (shape[0]); got {shape[0]:,} "
            "(split it into several calls)"
        )
    itemsize = element_size(tensor.dtype)
    declared = math.prod(shape) * itemsize if itemsize and all(s >= 0 for s in shape) else 0
    if declared > MAX_BATCH_BYTES:
        raise InvalidArgument(
            f"{field}: a batch may hold at most {MAX_BATCH_BYTES:,} bytes of data; got shape {shape[:8]} of "
            f"{declared:,} bytes (split it into several calls)"
        )


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None) if sys.platform == "linux" else None


def release_free_memory() -> None:
    """Hands memory malloc holds but no longer uses back to the system (glibc's malloc_trim); a no-op elsewhere."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def register(server: grpc.Server, registry: ModelRegistry, lane_dir: Path | None = None) -> list[str]:
    agent_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(registry, lane_dir), server)
    return [agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name]
