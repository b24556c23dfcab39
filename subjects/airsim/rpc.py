"""The wire under the airsim client: msgpack-rpc over one TCP connection, synchronous, with a timeout on every call.

Why not the airsim package's own transport: airsim 1.8.1 talks through msgpack-rpc-python 0.4.1 on tornado 4.5,
whose client (checked in its session.py, future.py and transport/tcp.py) counts timeouts in whole seconds from a
once-a-second timer, leaves a call pending when the host drops the connection (it only times out later), and
raises malformed frames inside tornado's read callback, where the caller never sees them (the call times out
instead). The backend must tell those apart (a host that is gone is UNAVAILABLE and may come back; a host that
answers garbage is DATA_LOSS), so ``RpcConnection`` speaks the same protocol itself and is handed to the airsim
client as its ``client`` (the one attribute whose ``call(method, *args)`` every airsim API method goes through).

msgpack-rpc (the spec every msgpack-rpc implementation follows, and what AirSim's rpclib server speaks): a request
is ``[0, msgid, method, [args...]]``, a response ``[1, msgid, error, result]`` (``error`` nil on success). Objects
of the airsim types travel as maps of their fields (their ``to_msgpack``), as the airsim client sends them; strings
as msgpack str, bytes (images) as bin.

Errors name the endpoint: cannot connect, dropped, or silent past the timeout -> ``HostUnavailable``
(UNAVAILABLE); bytes that are not a msgpack-rpc response -> ``MalformedResponse`` (DATA_LOSS); the host's own
error reply (e.g. an unknown vehicle or camera) -> ``HostRejected`` (FAILED_PRECONDITION: the host's setup, not
this request, must change). Any failure closes the connection: a reply that may still arrive would answer the
wrong call.
"""

from __future__ import annotations

import itertools
import socket
import time
from typing import Any

from common.errors import DataLoss, FailedPrecondition, Unavailable
from simulator_service.plugin_api import Endpoint

REQUEST, RESPONSE = 0, 1
MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # two uncompressed 4K images fit; a peer sending more is not AirSim


class HostUnavailable(Unavailable):
    """The AirSim host cannot be reached, dropped the connection, or did not answer in time."""


class MalformedResponse(DataLoss):
    """The AirSim host answered with something that is not the msgpack-rpc response the call expects."""


class HostRejected(FailedPrecondition):
    """The AirSim host answered a call with an error (its settings lack the vehicle or camera, ...)."""


def _packable(value: Any) -> Any:
    """airsim's types pack as the map of their fields (the airsim client's own ``default``)."""
    to_msgpack = getattr(value, "to_msgpack", None)
    if to_msgpack is None:
        raise TypeError(f"cannot send a {type(value).__name__} to AirSim")
    return to_msgpack()


class RpcConnection:
    """One msgpack-rpc connection to an AirSim host; ``call`` sends one request and waits for its response."""

    def __init__(self, endpoint: Endpoint, connect_timeout_s: float = 10.0, call_timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint
        self.call_timeout_s = call_timeout_s
        self._ids = itertools.count()
        import msgpack  # here: the airsim extra brings it; a deployment without it is told so by the backend

        self._packer = msgpack.Packer(use_bin_type=True, default=_packable)
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=MAX_RESPONSE_BYTES)
        self._undecodable = (ValueError, msgpack.exceptions.UnpackException)
        self._buffer_full = msgpack.exceptions.BufferFull
        self._closed = True
        try:
            self._sock = socket.create_connection((endpoint.host, endpoint.port), timeout=connect_timeout_s)
        except OSError as exc:
            raise HostUnavailable(
                f"cannot connect to the AirSim host at {endpoint} ({exc.strerror or exc}); is the Unreal/AirSim "
                "simulator running there, with its RPC port open in the firewall?"
            ) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._sock.close()
            except OSError:
                pass

    def call(self, method: str, *args: Any) -> Any:
        if self._closed:
            raise HostUnavailable(f"the connection to the AirSim host at {self.endpoint} is closed (calling {method})")
        msgid = next(self._ids) % (1 << 31)
        try:
            self._sock.sendall(self._packer.pack([REQUEST, msgid, method, list(args)]))
        except OSError as exc:
            self.close()
            raise HostUnavailable(
                f"the AirSim host at {self.endpoint} dropped the connection while we sent {method} "
                f"({exc.strerror or exc})"
            ) from None
        try:
            reply = self._read_reply(method)
        except BaseException:
            self.close()
            raise
        if not isinstance(reply, (list, tuple)) or len(reply) != 4 or reply[0] != RESPONSE or reply[1] != msgid:
            self.close()
            raise MalformedResponse(
                f"the AirSim host at {self.endpoint} answered {method} with {_excerpt(reply)}, not the msgpack-rpc "
                f"response [1, {msgid}, error, result]"
            )
        error, result = reply[2], reply[3]
        if error is not None:
            raise HostRejected(f"the AirSim host at {self.endpoint} refused {method}: {_excerpt(error)}")
        return result

    def _read_reply(self, method: str) -> Any:
        deadline = time.monotonic() + self.call_timeout_s
        while True:
            try:
                return next(self._unpacker)
            except StopIteration:
                pass  # no complete object buffered yet
            except self._undecodable as exc:
                raise MalformedResponse(
                    f"the AirSim host at {self.endpoint} answered {method} with bytes that are not msgpack ({exc})"
                ) from None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HostUnavailable(
                    f"the AirSim host at {self.endpoint} did not answer {method} within {self.call_timeout_s:g} s"
                )
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(1024 * 1024)
            except TimeoutError:
                continue
            except OSError as exc:
                raise HostUnavailable(
                    f"the connection to the AirSim host at {self.endpoint} failed while waiting for {method} "
                    f"({exc.strerror or exc})"
                ) from None
            if not chunk:
                raise HostUnavailable(
                    f"the AirSim host at {self.endpoint} closed the connection while we waited for {method}"
                )
            try:
                self._unpacker.feed(chunk)
            except self._buffer_full:
                raise MalformedResponse(
                    f"the AirSim host at {self.endpoint} sent over {MAX_RESPONSE_BYTES} bytes for {method} "
                    "without completing a msgpack object"
                ) from None


def _excerpt(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
