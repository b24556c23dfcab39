"""The Prometheus /metrics endpoint of a service, behind the same doors as its gRPC port.

A service that serves gRPC over TLS serves its metrics over HTTPS with the same certificate; one that requires
client certificates (mTLS, `--tls-client-ca`) requires them here too; one that requires a token requires
`Authorization: Bearer <token>` here too (401 otherwise). A plaintext service without a token serves plain HTTP as
before. A scrape configuration for Prometheus is in docs/operations/security.md.
"""

from __future__ import annotations

import hmac
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
log = logging.getLogger("metrics")
_REFUSED = b"metrics need 'Authorization: Bearer <token>', the token every call to this service carries\n"


class _QuietHandler(WSGIRequestHandler):
    timeout = 30  # seconds a connection may stay silent (a stalled TLS handshake included)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape on stderr would drown the service's log


def require_token(app: WsgiApp, token: str) -> WsgiApp:
    """`app`, answering 401 to a request without `Authorization: Bearer <token>` (compared in constant time)."""
    expected = f"Bearer {token}".encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = str(environ.get("HTTP_AUTHORIZATION", "")).encode("utf-8", "replace")
        if not hmac.compare_digest(given, expected):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain; charset=utf-8"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
            )
            return [_REFUSED]
        return app(environ, start_response)

    return guarded


def tls_context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """The server side of the metrics port's TLS: the service's own certificate, and client certificates signed by
    `client_ca` required when one is given (as its gRPC port requires them)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def start_metrics_server(
    host: str,
    port: int,
    cert: Path | None = None,
    key: Path | None = None,
    client_ca: Path | None = None,
    token: str | None = None,
) -> WSGIServer:
    """Serves /metrics on host:port (0: any free port) in a daemon thread; returns the server (server_port)."""

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def handle_error(self, request: Any, client_address: Any) -> None:
            # a failed handshake (no or a wrong client certificate, plain HTTP on the TLS port) or a dropped
            # connection: the client's problem, never a traceback in the service's log
            log.debug("metrics request from %s failed", client_address, exc_info=True)

    app: WsgiApp = make_wsgi_app()
    if token:
        app = require_token(app, token)
    httpd = make_server(host, port, app, Server, handler_class=_QuietHandler)
    if cert is not None and key is not None:
        # the handshake happens in the request's own thread (on its first read), so a client that stalls in it
        # holds up only itself, never the accepting thread
        httpd.socket = tls_context(cert, key, client_ca).wrap_socket(
            httpd.socket, server_side=True, do_handshake_on_connect=False
        )
    threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()
    return httpd
