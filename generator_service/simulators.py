"""The simulator endpoints one generator spreads a campaign's batches over.

`--simulator-endpoint` takes one endpoint or several, comma-separated (`host1:50052,host2:50052`); a
`dns:///name:port` entry is one round-robin channel over every address the name resolves to (a Kubernetes
headless Service); gRPC resolves the name again when a connection breaks, not on a timer, so a replica added
later takes shards once the generator reconnects. A batch is split into `streams` shards that go round-robin
over the endpoints, carrying on from the previous batch: with one dns:/// entry the channel's round-robin
policy puts the streams on different pods. An endpoint whose stream failed sits out a short while, so a
retried batch goes to the others instead of waiting for it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from common.credentials import ClientCredentials
from common.errors import InvalidArgument
from common.generated.gauntlet.v1 import simulator_pb2_grpc
from common.retry import TRANSIENT, status_code
from common.server import client_channel

T = TypeVar("T")

SIMULATOR_ENDPOINT_ENV = "GAUNTLET_SIMULATOR_ENDPOINT"
SIMULATOR_STREAMS_ENV = "GAUNTLET_SIMULATOR_STREAMS"
DNS_STREAMS = 4  # streams per batch when one dns:/// name stands for an unknown number of replicas
MAX_STREAMS = 256
SIT_OUT_SECONDS = 15.0  # how long an endpoint whose stream failed gets no new shards (it may be restarting)


def parse_endpoints(spec: str) -> list[str]:
    """`a:1,b:2` -> ['a:1', 'b:2']; empty entries are dropped, duplicates refused (they would double one load)."""
    endpoints = [e.strip() for e in spec.split(",") if e.strip()]
    if not endpoints:
        raise InvalidArgument("simulator endpoint: expected host:port[,host:port...] or dns:///name:port")
    if len(set(endpoints)) != len(endpoints):
        raise InvalidArgument(f"simulator endpoint: {spec!r} names an endpoint twice")
    return endpoints


def default_streams(endpoints: list[str]) -> int:
    """One stream per listed endpoint; a dns:/// entry counts as DNS_STREAMS (it may hide several replicas)."""
    return sum(DNS_STREAMS if e.startswith("dns:") else 1 for e in endpoints)


@dataclass
class Simulator:
    endpoint: str
    stub: simulator_pb2_grpc.SimulatorServiceStub


class SimulatorPool:
    """Stubs for every endpoint; `shard_targets(n)` says which stub runs each of n shards."""

    def __init__(self, spec: str, credentials: ClientCredentials | None = None, streams: int | None = None) -> None:
        endpoints = parse_endpoints(spec)
        self.simulators = [
            Simulator(e, simulator_pb2_grpc.SimulatorServiceStub(client_channel(e, credentials))) for e in endpoints
        ]
        self.streams = default_streams(endpoints) if streams is None else streams
        if not 1 <= self.streams <= MAX_STREAMS:
            raise InvalidArgument(f"simulator streams: {self.streams} is outside 1..{MAX_STREAMS}")
        self._down_until: dict[int, float] = {}
        self._turn = 0  # where the next batch's round robin starts
        self._lock = threading.Lock()

    def call(self, rpc: Callable[[simulator_pb2_grpc.SimulatorServiceStub], T]) -> T:
        """One single call (DescribeEnvironment, ValidateConfigs, a preflight) on the endpoints in turn, those not
        sitting out first: an endpoint that answers with a transient error (down, restarting, overloaded) sits out
        and the next one is asked, so one dead simulator neither fails the call nor holds the caller's retries. Any
        other error is the answer (every simulator would give it); when all fail, the last error is raised."""
        healthy = self._healthy()
        order = healthy + [i for i in range(len(self.simulators)) if i not in healthy]
        for n, index in enumerate(order, 1):
            try:
                return rpc(self.simulators[index].stub)
            except grpc.RpcError as exc:
                if status_code(exc) not in TRANSIENT:
                    raise
                self.mark_failed(index)
                if n == len(order):
                    raise
        raise AssertionError("unreachable: the pool has at least one endpoint")

    def shard_targets(self, shards: int) -> list[int]:
        """Indices into `simulators` for each shard: round-robin over the endpoints not sitting out (all of them
        when every one is), going on where the previous batch stopped, so batches of fewer cases than endpoints
        (a strategy's small batches, a budget's last one) still reach every simulator."""
        healthy = self._healthy()
        with self._lock:
            start, self._turn = self._turn, self._turn + shards
        return [healthy[(start + i) % len(healthy)] for i in range(shards)]

    def mark_failed(self, index: int) -> None:
        with self._lock:
            self._down_until[index] = time.monotonic() + SIT_OUT_SECONDS

    def _healthy(self) -> list[int]:
        now = time.monotonic()
        with self._lock:
            up = [i for i in range(len(self.simulators)) if self._down_until.get(i, 0.0) <= now]
        return up or list(range(len(self.simulators)))


def streams_from_env() -> int | None:
    value = os.environ.get(SIMULATOR_STREAMS_ENV)
    try:
        return int(value) if value else None
    except ValueError:
        expected = f"expected a whole number in 1..{MAX_STREAMS}"
        raise InvalidArgument(f"{SIMULATOR_STREAMS_ENV}={value!r}: {expected}") from None
