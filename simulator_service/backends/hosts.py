"""Remote simulator hosts: ``host:port`` endpoints and the table of which host each env of this process drives.

A remote backend (Donkey, AirSim) runs one vehicle per simulator host. Its envs list every host they may use
(from the subject's ``env_kwargs.endpoint`` or an environment variable, comma-separated) and lease a free one when
they connect; an env that finds every host taken fails with UNAVAILABLE asking for a lower parallelism or more
hosts. The table is per process: the hosts are external, shared by every env this simulator service creates.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import Unavailable


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoint(text: str, default_port: int, simulator: str) -> Endpoint:
    """``host:port`` (or ``host``: ``default_port``); ValueError names the expected form."""
    text = str(text).strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"{simulator} endpoint {text!r} must be host:port with a port in 1..65535, e.g. 127.0.0.1:{default_port}"
        )
    return Endpoint(host.strip("[]"), int(port))


def parse_endpoints(value: str | Sequence[str], default_port: int, simulator: str) -> list[Endpoint]:
    """A comma-separated text or a list of endpoints; ValueError when none is given."""
    texts = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    endpoints = [parse_endpoint(t, default_port, simulator) for t in texts if t.strip()]
    if not endpoints:
        raise ValueError(f"{simulator} endpoint is empty; give host:port (several: comma-separated)")
    return endpoints


class EndpointLeases:
    """Which hosts this process drives a vehicle on (one vehicle per host, whatever the env count)."""

    def __init__(self, simulator: str, env_var: str, error: type[Unavailable] = Unavailable) -> None:
        self.simulator, self.env_var, self.error = simulator, env_var, error
        self._lock = threading.Lock()
        self._taken: set[Endpoint] = set()

    def acquire(self, endpoints: Sequence[Endpoint], exclude: Sequence[Endpoint] = ()) -> Endpoint:
        """The first free endpoint not in ``exclude`` (hosts the caller just failed to reach)."""
        with self._lock:
            for endpoint in endpoints:
                if endpoint not in self._taken and endpoint not in exclude:
                    self._taken.add(endpoint)
                    return endpoint
        raise self.error(
            f"all {len(endpoints)} {self.simulator} simulator endpoint(s) ({', '.join(map(str, endpoints))}) "
            "already run a car for this process; one car runs per simulator: lower the campaign's "
            f"parallelism to {len(endpoints)} or list more hosts in ${self.env_var}"
        )

    def release(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._taken.discard(endpoint)

    def taken(self) -> set[Endpoint]:
        with self._lock:
            return set(self._taken)
