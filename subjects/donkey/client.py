"""A minimal client for the Donkey simulator's JSON-over-TCP protocol (Tawn Kramer's sdsandbox / gym-donkeycar).

Why our own client: the only gym-donkeycar on the package index here (1.0.13) depends on the old ``gym``
package (our pins use ``gymnasium``), and its transport is built on ``asyncore``, deprecated in Python 3.11 and
removed in 3.12. Newer gym-donkeycar releases (whose ``core/sim_client.py`` connects to the sim as a client)
are not installable here. The protocol is small, so this module speaks it directly, synchronously, with timeouts.

Wire format (checked against gym-donkeycar 1.0.13 ``core/tcp_server.py`` and the Indago authors' copy of
``core/client.py``): the simulator sends JSON objects separated by ``\\n``, each with a ``msg_type``; a reader
buffers partial lines until the newline arrives. The client sends one JSON object per message with no
delimiter, as the reference clients do (``json.dumps(msg)`` written to the socket); numbers in control messages
travel as strings (``"steering": "0.25"``), as the reference clients send them.

Messages used (sim -> client): ``scene_selection_ready``, ``scene_names``, ``car_loaded``, ``need_car_config``,
``telemetry`` (image, pos_x/pos_y/pos_z, speed, cte, hit, material, ...), and Indago's ``send_track``.
(client -> sim): ``load_scene``, ``cam_config``, ``regen_track`` (Indago's), ``reset_car``, ``control``,
``exit_scene``.

Errors: a refused, dropped or silent connection raises ``SimUnavailable`` (gRPC UNAVAILABLE: retryable, the sim
may come back); a message that is not a JSON object with a ``msg_type`` raises ``SimProtocolError`` (DATA_LOSS:
the peer is not speaking this protocol). Both name the endpoint.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from typing import Any

import grpc

from common.errors import ServiceError, Unavailable
from simulator_service.plugin_api import Endpoint
from simulator_service.plugin_api import parse_endpoint as parse_host

MAX_LINE_BYTES = 16 * 1024 * 1024  # a telemetry line carries one base64 image: far below this
ENDPOINT_DEFAULT_PORT = 9091  # the simulator's default port


class SimUnavailable(Unavailable):
    """The simulator cannot be reached, dropped the connection, or did not answer in time."""


class SimProtocolError(ServiceError):
    """The simulator sent something that is not a protocol message (or lacks a field it must carry)."""

    code = grpc.StatusCode.DATA_LOSS


def parse_endpoint(text: str) -> Endpoint:
    """``host:port`` (or ``host``, port 9091); ValueError names the expected form."""
    return parse_host(text, ENDPOINT_DEFAULT_PORT, "donkey")


class DonkeyConnection:
    """One TCP connection to a Donkey simulator: send messages, wait for messages of a given type."""

    def __init__(self, endpoint: Endpoint, connect_timeout_s: float = 10.0, io_timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint
        self.io_timeout_s = io_timeout_s
        self._buffer = b""
        try:
            self._sock = socket.create_connection((endpoint.host, endpoint.port), timeout=connect_timeout_s)
        except OSError as exc:
            raise SimUnavailable(
                f"cannot connect to the Donkey simulator at {endpoint} ({exc.strerror or exc}); "
                "is DonkeySim running and listening there?"
            ) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._closed = False

    # -- sending ----------------------------------------------------------------------------------------
    def send(self, msg_type: str, **fields: Any) -> None:
        payload = json.dumps({"msg_type": msg_type, **fields}).encode("utf-8")
        try:
            self._sock.sendall(payload)
        except OSError as exc:
            self.close()
            raise SimUnavailable(
                f"the Donkey simulator at {self.endpoint} dropped the connection while we sent "
                f"{msg_type!r} ({exc.strerror or exc})"
            ) from None

    # -- receiving --------------------------------------------------------------------------------------
    def _read_line(self, deadline: float, waiting_for: str, timeout_s: float) -> bytes:
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SimUnavailable(
                    f"the Donkey simulator at {self.endpoint} sent no {waiting_for} within {timeout_s:g} s"
                )
            self._sock.settimeout(remaining)
            chunk = self._recv_chunk(waiting_for)
            if chunk is None:
                continue
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE_BYTES and b"\n" not in self._buffer:
                raise SimProtocolError(
                    f"the Donkey simulator at {self.endpoint} sent over {MAX_LINE_BYTES} bytes "
                    "without a newline; it does not speak the newline-delimited JSON protocol"
                )
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _recv_chunk(self, waiting_for: str) -> bytes | None:
        """The next bytes from the socket, or None when none arrived in time (or, non-blocking, none are waiting).

        A failed or closed connection closes the client and raises SimUnavailable naming the endpoint.
        """
        try:
            chunk = self._sock.recv(256 * 1024)
        except (TimeoutError, BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            self.close()
            raise SimUnavailable(
                f"the connection to the Donkey simulator at {self.endpoint} failed while "
                f"waiting for {waiting_for} ({exc.strerror or exc})"
            ) from None
        if not chunk:
            self.close()
            raise SimUnavailable(
                f"the Donkey simulator at {self.endpoint} closed the connection while we waited for {waiting_for}"
            )
        return chunk

    def receive(self, waiting_for: str = "a message", timeout_s: float | None = None) -> dict[str, Any]:
        """The next message (blank lines are skipped)."""
        timeout = self.io_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        while True:
            line = self._read_line(deadline, waiting_for, timeout).strip()
            if line:
                return self._decode(line)

    def _decode(self, line: bytes) -> dict[str, Any]:
        excerpt = line[:80].decode("utf-8", "replace")
        try:
            message = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SimProtocolError(
                f"the Donkey simulator at {self.endpoint} sent a malformed message ({exc}): {excerpt!r}"
            ) from None
        if not isinstance(message, dict) or not isinstance(message.get("msg_type"), str):
            raise SimProtocolError(
                f"the Donkey simulator at {self.endpoint} sent a message without a msg_type: {excerpt!r}"
            )
        return message

    def wait_for(
        self, msg_type: str, timeout_s: float | None = None, handlers: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Reads until a message of ``msg_type`` arrives; any other goes to ``handlers[type](msg)`` or is dropped."""
        timeout = self.io_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.receive(f"{msg_type!r}", timeout_s=max(deadline - time.monotonic(), 0.0))
            except SimUnavailable as exc:
                if self._closed:
                    raise
                raise SimUnavailable(
                    f"the Donkey simulator at {self.endpoint} sent no {msg_type!r} within {timeout:g} s"
                ) from exc
            if message["msg_type"] == msg_type:
                return message
            handler = (handlers or {}).get(message["msg_type"])
            if handler is not None:
                handler(message)

    def drain(self) -> list[dict[str, Any]]:
        """Every complete message already received or waiting in the socket, without blocking."""
        out: list[dict[str, Any]] = []
        self._sock.setblocking(False)
        try:
            while (chunk := self._recv_chunk("pending messages")) is not None:
                self._buffer += chunk
        finally:
            if not self._closed:
                self._sock.setblocking(True)
        while b"\n" in self._buffer:
            line, _, self._buffer = self._buffer.partition(b"\n")
            if line.strip():
                out.append(self._decode(line.strip()))
        return out

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._sock.close()
            except OSError:
                pass

    @property
    def closed(self) -> bool:
        return self._closed
