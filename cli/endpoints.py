"""The endpoints a command talks to: checked when they are given (a missing port is not silently 443), and reached
within seconds before any work is sent (an unreachable service is named with its endpoint, instead of a call that
retries for minutes)."""

from __future__ import annotations

import re
import socket
import ssl
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cli.errors import UserError
from common.endpoints import SCHEMES, endpoint_problem
from common.remote import describe

# How long a command waits for a named service to answer a health check before it gives up on the endpoint.
REACH_SECONDS = 5.0


def check_endpoint(service: str, text: str, origin: str = "") -> str:
    """``text`` if it is an endpoint a client can dial; else UserError naming the service (and where it came from,
    e.g. a campaign file's endpoints: section)."""
    problem = endpoint_problem(text)
    if problem:
        where = f" ({origin})" if origin else ""
        raise UserError(f"{service} service endpoint{where}: {problem}")
    return text


def reach(
    channel: grpc.Channel, service: str, endpoint: str, seconds: float = REACH_SECONDS, plaintext: bool = False
) -> None:
    """Waits up to ``seconds`` for the service behind ``channel`` to answer a health check (any answer will do:
    a service that is not serving says why in the call that follows). UserError naming the service and its
    endpoint when nothing answers; with ``plaintext`` (a channel without TLS), one that says TLS is required when
    the endpoint turns out to speak TLS."""
    try:
        stub: Any = health_pb2_grpc.HealthStub(channel)  # types-grpcio-health-checking declares no methods on it
        stub.Check(health_pb2.HealthCheckRequest(), timeout=seconds)
    except grpc.RpcError as exc:
        if exc.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND):
            return  # something that speaks gRPC answered
        if plaintext and speaks_tls(endpoint):
            raise UserError(
                f"the {service} service at {endpoint} requires TLS (it answered a TLS handshake, and this command "
                "spoke plaintext): give --ca or GAUNTLET_CA, and --client-cert/--client-key and --token-file (or "
                "GAUNTLET_CLIENT_CERT, GAUNTLET_CLIENT_KEY, GAUNTLET_TOKEN_FILE) when the service asks for them"
            ) from None
        why = describe(exc)
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            why = f"no answer within {seconds:g} s"
        raise UserError(f"cannot reach the {service} service at {endpoint}: {why}") from None


def speaks_tls(endpoint: str, seconds: float = 2.0) -> bool:
    """Whether the server at ``endpoint`` (HOST:PORT, [v6]:PORT or dns:///NAME:PORT) completes a TLS handshake, or
    refuses one with a TLS alert (a client certificate it requires); False for a plaintext server or none at all.
    Nothing is verified: it only tells a plaintext client why it was hung up on."""
    target = re.sub(r"^dns:(//[^/]*/)?", "", endpoint)
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit() or target.startswith(SCHEMES):
        return False
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=seconds) as raw:
            with context.wrap_socket(raw):
                return True
    except ssl.SSLError as exc:
        return "ALERT" in str(exc.reason or "").upper()
    except (OSError, ValueError):
        return False
