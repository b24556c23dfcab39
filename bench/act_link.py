"""Round trips per second of the simulator-agent link, by transport, side by side in one run.

A campaign sends one act message per lock-step and group, so the link's cost per message bounds a cheap subject's
throughput. This bench isolates it: a server process answers each ActStreamRequest of 32 CartPole-sized
observations with 32 actions (decoding and encoding the tensors, no model), and a client sends N requests one at a
time (depth 1, as each lock-step group does) over

1. grpc:      the synchronous gRPC stream the suite uses between hosts (a queue-fed request iterator, as
              simulator_service/agent_client.py's AgentStream);
2. grpc-aio:  gRPC's asyncio stack on both ends, the candidate the profile suggested;
3. lane:      a same-host lane (common/lane.py), the messages framed on a Unix socket.

Ends with `act_link: lane/grpc=<x> grpc_aio/grpc=<y>` (ratios of round trips per second) and writes every number
it prints to results/bench/act_link.json.

    python bench/act_link.py [--messages 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import queue
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import BenchRecord
from common.generated.gauntlet.v1 import agent_pb2, agent_pb2_grpc
from common.lane import REQUEST, RESPONSE, LaneOffer, connect_lane
from common.tensor import from_tensor, to_tensor

WARM_UP = 200  # messages before the clock starts: connection set-up and first-call costs are not the link's
OBSERVATIONS = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)


def answer(request: agent_pb2.ActStreamRequest) -> agent_pb2.ActStreamResponse:
    """What the agent does around its forward pass: decode, act (here: a threshold), encode."""
    observations = from_tensor(request.observations)
    return agent_pb2.ActStreamResponse(actions=to_tensor((observations[:, 2] > 0).astype(np.int64)))


def sync_echo(requests: Iterator[agent_pb2.ActStreamRequest], context: object) -> Iterator[object]:
    for message in requests:
        yield answer(message)


async def aio_echo(requests: AsyncIterator[agent_pb2.ActStreamRequest], context: object) -> AsyncIterator[object]:
    async for message in requests:
        yield answer(message)


def act_stream_handler(behaviour: Callable[..., Any]) -> grpc.GenericRpcHandler:
    """AgentService.ActStream served by `behaviour` alone (the servicer base class would want every RPC)."""
    handler = grpc.stream_stream_rpc_method_handler(
        behaviour,
        request_deserializer=agent_pb2.ActStreamRequest.FromString,
        response_serializer=agent_pb2.ActStreamResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler("gauntlet.v1.AgentService", {"ActStream": handler})


def serve(kind: str, ready: mp.Queue, folder: str) -> None:
    if kind == "grpc":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((act_stream_handler(sync_echo),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        ready.put(port)
        server.wait_for_termination()
    elif kind == "grpc-aio":

        async def main() -> None:
            server = grpc.aio.server()
            server.add_generic_rpc_handlers((act_stream_handler(aio_echo),))
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            ready.put(port)
            await server.wait_for_termination()

        asyncio.run(main())
    else:
        offer = LaneOffer(Path(folder))
        ready.put((offer.path, offer.secret))
        lane = offer.accept(timeout=60)
        assert lane is not None
        while True:
            try:
                _, payload = lane.receive()
            except EOFError:
                return
            lane.send(RESPONSE, answer(agent_pb2.ActStreamRequest.FromString(payload)).SerializeToString())


def request() -> agent_pb2.ActStreamRequest:
    return agent_pb2.ActStreamRequest(observations=to_tensor(OBSERVATIONS))


def over_grpc(port: int, n: int) -> float:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    requests: queue.Queue[agent_pb2.ActStreamRequest | None] = queue.Queue()
    responses = agent_pb2_grpc.AgentServiceStub(channel).ActStream(iter(requests.get, None))
    for i in range(WARM_UP + n):
        if i == WARM_UP:
            started = time.perf_counter()
        requests.put(request())
        from_tensor(next(responses).actions)
    seconds = time.perf_counter() - started
    requests.put(None)
    channel.close()
    return seconds


def over_grpc_aio(port: int, n: int) -> float:
    async def main() -> float:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = agent_pb2_grpc.AgentServiceStub(channel).ActStream()
            for i in range(WARM_UP + n):
                if i == WARM_UP:
                    started = time.perf_counter()
                await call.write(request())
                reply = await call.read()
                assert isinstance(reply, agent_pb2.ActStreamResponse)
                from_tensor(reply.actions)
            seconds = time.perf_counter() - started
            await call.done_writing()
            return seconds

    return asyncio.run(main())


def over_lane(offer: tuple[str, bytes], n: int) -> float:
    lane = connect_lane(*offer)
    for i in range(WARM_UP + n):
        if i == WARM_UP:
            started = time.perf_counter()
        lane.send(REQUEST, request().SerializeToString())
        _, payload = lane.receive()
        from_tensor(agent_pb2.ActStreamResponse.FromString(payload).actions)
    seconds = time.perf_counter() - started
    lane.close()
    return seconds


def measure(kind: str, n: int, client: Callable[[object, int], float]) -> float:
    """Round trips per second: the server in its own process, the first WARM_UP messages not counted."""
    with tempfile.TemporaryDirectory(prefix="act-link-") as folder:
        spawn = mp.get_context("spawn")  # a fresh interpreter: no gRPC state inherited from this one
        ready: mp.Queue = spawn.Queue()
        server = spawn.Process(target=serve, args=(kind, ready, folder), daemon=True)
        server.start()
        address = ready.get(timeout=60)
        try:
            return n / client(address, n)
        finally:
            server.terminate()
            server.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=4000, help="round trips per transport (default 4000)")
    args = parser.parse_args()
    with BenchRecord("act_link") as record:
        rates = {
            "grpc": measure("grpc", args.messages, over_grpc),  # type: ignore[arg-type]
            "grpc-aio": measure("grpc-aio", args.messages, over_grpc_aio),  # type: ignore[arg-type]
            "lane": measure("lane", args.messages, over_lane),  # type: ignore[arg-type]
        }
        record.metrics["messages"] = args.messages
        print(f"{'transport':10s} {'round trips/s':>14s} {'us each':>8s}")
        for kind, rate in rates.items():
            key = kind.replace("-", "_")
            record.metrics[f"{key}_round_trips_per_s"] = round(rate)
            record.metrics[f"{key}_us_per_round_trip"] = round(1e6 / rate)
            print(f"{kind:10s} {rate:14.0f} {1e6 / rate:8.0f}")
        lane, aio = rates["lane"] / rates["grpc"], rates["grpc-aio"] / rates["grpc"]
        record.metrics.update(lane_over_grpc=round(lane, 2), grpc_aio_over_grpc=round(aio, 2))
        print(f"act_link: lane/grpc={lane:.2f} grpc_aio/grpc={aio:.2f}")


if __name__ == "__main__":
    main()
