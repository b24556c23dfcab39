"""Servers end their connections after a maximum age (common/server.py), so that clients of a `dns:///` name find new
replicas; calls open at that moment must go on (a campaign's WatchCampaign, a big batch's RunEpisodes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import grpc
import pytest

from common.server import MAX_CONNECTION_AGE_ENV, MAX_CONNECTION_AGE_MS, client_channel, server_options

ROOT = Path(__file__).resolve().parents[2]

# A service run by common.server.serve with two methods: Peer (unary) answers the caller's address as the server
# sees it (a new connection has a new client port), Ticks (server stream) sends that address every 50 ms for the
# number of ticks asked.
SERVER = textwrap.dedent(
    """
    import time
    import grpc
    from common.server import ServiceOptions, serve

    def peer(request, context):
        return context.peer().encode()

    def ticks(request, context):
        for _ in range(int(request)):
            time.sleep(0.05)
            yield context.peer().encode()

    def register(server):
        same = dict(request_deserializer=None, response_serializer=None)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Age", {
            "Peer": grpc.unary_unary_rpc_method_handler(peer, **same),
            "Ticks": grpc.unary_stream_rpc_method_handler(ticks, **same),
        })])
        return ["test.Age"]

    serve("age", ServiceOptions("127.0.0.1", 0, -1, None, None, None, None, 8, "WARNING"), register)
    """
)


def start(age_ms: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, MAX_CONNECTION_AGE_ENV: age_ms},
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line, proc.stderr.read()  # type: ignore[union-attr]
    return proc, json.loads(line)["port"]


def test_the_default_age_and_a_long_grace() -> None:
    options = dict(server_options())
    assert options["grpc.max_connection_age_ms"] == MAX_CONNECTION_AGE_MS == 300_000
    assert options["grpc.max_connection_age_grace_ms"] >= 3_600_000  # open streams are not cut for an hour


def test_a_stream_outlives_the_connection_age_and_new_calls_reconnect() -> None:
    proc, port = start("500")  # a connection lives 0.45-0.55 s
    try:
        channel = client_channel(f"127.0.0.1:{port}")
        peer: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/test.Age/Peer")
        ticks: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream("/test.Age/Ticks")
        first = peer(b"", timeout=10)
        # a 3 s stream on that connection: it gets GOAWAY after ~0.5 s and goes on to its last tick
        started = time.monotonic()
        received = list(ticks(b"60", timeout=30))
        assert time.monotonic() - started > 2.5
        assert received == [first] * 60  # every tick over the first connection, none lost
        # a call after the age went over a new connection (the client connected again: a dns:/// name re-resolved)
        second = peer(b"", timeout=10)
        assert second != first
        # and calls keep working across further connection ends
        for _ in range(5):
            time.sleep(0.3)
            assert peer(b"", timeout=10).startswith(b"ipv4:127.0.0.1:")
    finally:
        proc.kill()
        proc.wait()
    assert "Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


@pytest.mark.parametrize("age", ["0", "-5", "5m"])
def test_a_bad_age_is_refused(age: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SERVER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, MAX_CONNECTION_AGE_ENV: age},
    )
    assert done.returncode != 0
    assert f"{MAX_CONNECTION_AGE_ENV} must be a positive number of milliseconds" in done.stderr
