"""Bootstrap shared by every service: gRPC server, health, reflection, metrics, TLS, token auth, shutdown."""

from __future__ import annotations

import argparse
import collections
import ctypes
import ctypes.util
import hmac
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from common.admission import AdmissionLimit, pool_size
from common.credentials import (
    ClientCredentials,
    CredentialError,
    add_client_arguments,
    add_token_arguments,
    client_credentials,
    read_token,
)
from common.metrics_server import start_metrics_server

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # long traces and image batches
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
TOKEN_HEADER = "authorization"
# A peer that restarts (the local launcher restarts a crashed service on the same port) is found again within
# about 2 s: gRPC's default reconnect backoff grows to 120 s, long after the peer is back.
RECONNECT_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 250), ("grpc.max_reconnect_backoff_ms", 2000)]
# A client keeps its connections as long as they work, so it learns of new replicas behind a `dns:///` name (pods
# added by a scale-up) only when it reconnects. Servers therefore end each connection after MAX_CONNECTION_AGE_MS
# (gRPC adds +-10 % jitter): they send GOAWAY, the client re-resolves the name and opens new calls on fresh
# connections. Calls already open go on over the old connection for up to MAX_CONNECTION_AGE_GRACE_MS after the
# GOAWAY, and only then are cut (UNAVAILABLE); the grace is long so that a campaign's WatchCampaign or a big batch's
# RunEpisodes runs to its end (the CLI's follower and the generator's simulator pool retry one that is cut).
# GAUNTLET_MAX_CONNECTION_AGE_MS overrides the age (milliseconds; tests use a short one).
MAX_CONNECTION_AGE_MS = 5 * 60 * 1000
MAX_CONNECTION_AGE_GRACE_MS = 60 * 60 * 1000
MAX_CONNECTION_AGE_ENV = "GAUNTLET_MAX_CONNECTION_AGE_MS"
READINESS_SECONDS = 2.0  # how often serve() asks a service's `ready` probe
LIVENESS = "liveness"  # a health name that stays SERVING while `ready` says no: liveness probes ask it


@dataclass(frozen=True)
class ServiceOptions:
    host: str
    port: int
    metrics_port: int
    tls_cert: Path | None
    tls_key: Path | None
    tls_client_ca: Path | None
    token: str | None = field(repr=False)  # never in a log line
    workers: int
    log_level: str


def add_service_arguments(parser: argparse.ArgumentParser, port: int, metrics_port: int) -> None:
    g = parser.add_argument_group("server")
    g.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: loopback only; 0.0.0.0 in containers)"
    )
    g.add_argument("--port", type=int, default=port, help=f"gRPC port, 0 = any free port (default {port})")
    g.add_argument(
        "--metrics-port",
        type=int,
        default=metrics_port,
        help=f"Prometheus /metrics port, 0 = any free port, -1 = off (default {metrics_port})",
    )
    g.add_argument("--tls-cert", type=Path, help="PEM certificate: serve TLS instead of plaintext")
    g.add_argument("--tls-key", type=Path, help="PEM private key for --tls-cert")
    g.add_argument("--tls-client-ca", type=Path, help="PEM CA bundle: require client certificates (mTLS)")
    add_token_arguments(g, "every call must carry as 'authorization: Bearer <token>' (health checks exempt)")
    g.add_argument(
        "--workers",
        type=int,
        default=32,
        help="calls served at once (default 32); one more is refused with RESOURCE_EXHAUSTED, and health checks "
        "are exempt and keep threads of their own (common/admission.py)",
    )
    g.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def options_from_args(args: argparse.Namespace) -> ServiceOptions:
    # Every service calls this first: from here on what it creates (the SQLite store and its WAL, reports, lane
    # sockets, folders) is its user's only, 0600/0700, whatever umask it was started with.
    os.umask(0o077)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("error: --tls-cert and --tls-key go together")
    if args.workers < 1:
        raise SystemExit(f"error: --workers must be >= 1 (calls served at once), got {args.workers}")
    if args.tls_client_ca and not args.tls_cert:
        raise SystemExit("error: --tls-client-ca needs --tls-cert and --tls-key (client certificates travel over TLS)")
    try:
        token = read_token(args.token_file)
    except CredentialError as exc:
        raise SystemExit(f"error: {exc}") from None
    return ServiceOptions(
        args.host,
        args.port,
        args.metrics_port,
        args.tls_cert,
        args.tls_key,
        args.tls_client_ca,
        token,
        args.workers,
        args.log_level,
    )


def add_outgoing_arguments(parser: argparse.ArgumentParser) -> None:
    """--ca/--client-cert/--client-key for a service that calls others (its token is its own --token-file's)."""
    add_client_arguments(parser)


def outgoing_credentials(args: argparse.Namespace) -> ClientCredentials:
    """What this service presents to the services it calls; a bad setting exits with one clear line."""
    try:
        return client_credentials(args)
    except CredentialError as exc:
        raise SystemExit(f"error: {exc}") from None


class _JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        correlation = getattr(record, "correlation_id", None)  # set by common.errors for an INTERNAL answer
        if correlation:
            entry["correlation_id"] = correlation
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(service: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter(service))
    logging.basicConfig(level=level, handlers=[handler], force=True)


class _TokenInterceptor(grpc.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}"

        def deny(request: object, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong 'authorization: Bearer <token>' metadata")

        self._deny: grpc.RpcMethodHandler[object, None] = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        if handler_call_details.method.startswith("/grpc.health.v1.Health/"):
            return continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        # constant-time: a byte-by-byte comparison would tell a prober how much of its guess was right
        if not hmac.compare_digest(str(metadata.get(TOKEN_HEADER, "")).encode(), self._expected.encode()):
            return self._deny
        return continuation(handler_call_details)


# glibc gives every new thread that meets a locked arena an arena of its own (up to 8 per core), and memory freed
# in one is not reused by another: a generator whose campaigns start a stream thread per batch grew 13.9 % in 10
# minutes of bench/load.py (8 campaigns), 2.7 % with two arenas. MALLOC_ARENA_MAX in the environment still wins.
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt parameter number (glibc malloc.h)


def cap_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Caps glibc's malloc arenas for the threads this process starts from now on; False where that is not glibc
    or MALLOC_ARENA_MAX already chose."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return bool(libc is not None and libc.mallopt(_M_ARENA_MAX, arenas) == 1)
    except (OSError, AttributeError):  # musl and others: no mallopt, nothing to cap
        return False


def server_options() -> list[tuple[str, int]]:
    """The gRPC server's channel arguments: message limits and the connection age (MAX_CONNECTION_AGE_MS)."""
    age = os.environ.get(MAX_CONNECTION_AGE_ENV, "").strip()
    if age and not (age.isdigit() and int(age) > 0):
        raise SystemExit(f"error: {MAX_CONNECTION_AGE_ENV} must be a positive number of milliseconds, not {age!r}")
    return [
        *GRPC_OPTIONS,
        ("grpc.max_connection_age_ms", int(age) if age else MAX_CONNECTION_AGE_MS),
        ("grpc.max_connection_age_grace_ms", MAX_CONNECTION_AGE_GRACE_MS),
        # gRPC enables SO_REUSEPORT by default on Linux, so a second server on a taken port would start and share it
        # silently (the launcher reserves ports before starting the services): a port clash must fail the start
        ("grpc.so_reuseport", 0),
    ]


def serve(
    service: str,
    options: ServiceOptions,
    register: Callable[[grpc.Server], Sequence[str]],
    on_stop: Callable[[], None] | None = None,
    ready: Callable[[], bool] | None = None,
) -> None:
    """Runs a service until SIGTERM/SIGINT. `register` adds servicers and returns their full service names.
    `ready`, polled every READINESS_SECONDS, decides whether health answers SERVING or NOT_SERVING (e.g. the
    generator while its store does not answer).

    Once listening it prints one JSON line to stdout, {"service", "port", "metrics_port"},
    which the local launcher reads to learn the ports chosen when 0 was asked for.
    """
    configure_logging(service, options.log_level)
    log = logging.getLogger(service)
    cap_malloc_arenas()
    interceptors: list[grpc.ServerInterceptor] = [_TokenInterceptor(options.token)] if options.token else []
    interceptors.append(AdmissionLimit(service, options.workers))  # streams cannot take the health checks' threads
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=pool_size(options.workers)),
        options=server_options(),
        interceptors=interceptors,
    )
    names = list(register(server))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    address = f"{options.host}:{options.port}"
    if options.tls_cert:
        credentials = grpc.ssl_server_credentials(
            [(options.tls_key.read_bytes(), options.tls_cert.read_bytes())],  # type: ignore[union-attr]
            root_certificates=options.tls_client_ca.read_bytes() if options.tls_client_ca else None,
            require_client_auth=options.tls_client_ca is not None,
        )
    try:
        port = server.add_secure_port(address, credentials) if options.tls_cert else server.add_insecure_port(address)
    except RuntimeError:  # grpcio raises where older releases returned 0
        port = 0
    if port == 0:
        raise SystemExit(f"error: could not bind {address} (--port): is another process listening there?")
    metrics_port = -1
    if options.metrics_port >= 0:  # behind the gRPC port's doors: its TLS, client certificates and token
        httpd = start_metrics_server(
            options.host, options.metrics_port, options.tls_cert, options.tls_key, options.tls_client_ca, options.token
        )
        metrics_port = httpd.server_port
    server.start()
    stopping = threading.Event()

    def set_health() -> None:
        try:
            serving = ready() if ready is not None else True
        except Exception:  # a probe that raises means not ready
            log.exception("readiness probe failed")
            serving = False
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ["", *names]:
            health_servicer.set(name, status)

    set_health()
    if ready is not None:
        # what a liveness probe asks (-service=liveness): the process serves, whatever `ready` says
        health_servicer.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)

        def watch_readiness() -> None:
            while not stopping.wait(READINESS_SECONDS):
                set_health()

        threading.Thread(target=watch_readiness, name="readiness", daemon=True).start()
    requested: list[int] = []

    def request_stop(signum: int, _frame: object) -> None:
        # Only record: the handler can interrupt the main thread anywhere (inside a lock, a logging call, or a
        # drain already under way after an earlier signal), so draining from here could deadlock on re-entry.
        requested.append(signum)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print(json.dumps({"service": service, "port": port, "metrics_port": metrics_port}), flush=True)
    log.info("serving on %s:%d (metrics %d)", options.host, port, metrics_port)

    # Wake up now and then: a SIGTERM delivered to one of gRPC's threads only runs its Python handler once the main
    # thread executes bytecode, and an untimed wait could sleep through it (seen under load in CI).
    while not requested:
        time.sleep(0.5)
    log.info("signal %d: draining", requested[0])
    stopping.set()
    health_servicer.enter_graceful_shutdown()
    if on_stop:
        on_stop()
    server.stop(grace=5).wait()
    log.info("stopped")


def client_channel(endpoint: str, credentials: ClientCredentials | None = None) -> grpc.Channel:
    """A channel to another service, presenting `credentials` (CA, client certificate, token; none = plaintext);
    `dns:///host:port` endpoints balance round-robin across replicas."""
    options = [*GRPC_OPTIONS, ("grpc.lb_policy_name", "round_robin"), *RECONNECT_OPTIONS]
    credentials = credentials or ClientCredentials()
    tls = credentials.channel_credentials()
    if tls is not None:
        if credentials.token:
            tls = grpc.composite_channel_credentials(tls, grpc.access_token_call_credentials(credentials.token))
        return grpc.secure_channel(endpoint, tls, options=options)
    channel = grpc.insecure_channel(endpoint, options=options)
    if credentials.token:  # call credentials need TLS in gRPC, so plaintext channels add the header themselves
        channel = grpc.intercept_channel(channel, _TokenClientInterceptor(credentials.token))
    return channel


class _CallDetails(
    collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _TokenClientInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, token: str) -> None:
        self._metadata = ((TOKEN_HEADER, f"Bearer {token}"),)

    def _details(self, details):  # untyped: grpc's client-interceptor generics add nothing here
        return _CallDetails(
            details.method,
            details.timeout,
            tuple(details.metadata or ()) + self._metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)
