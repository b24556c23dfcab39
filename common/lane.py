"""Same-host lanes: the messages of an ActStream framed on a Unix socket, negotiated by AgentService.OpenLane.

Why: Python gRPC spends about 0.2-0.3 ms of CPU per message on each side (thread hand-offs in its synchronous
stack; its asyncio stack measured no better here), more than a small policy's forward pass, and a campaign sends
one message per lock-step. Where the simulator and the agent share a host, a lane carries the same serialized
messages for about 0.06 ms a round trip (bench/act_link.py). The lane is only ever an offer: the agent makes it
inside an authenticated gRPC call, and a caller that cannot use it (another host, another container, an agent
that serves none) uses ActStream, so every result is the same either way (docs/contracts/lanes.md).

Protocol, after OpenLane answered with a socket path and a secret:
  1. the caller connects and sends the SECRET_BYTES secret;
  2. the agent answers one byte, ACCEPTED (a wrong secret gets the socket closed);
  3. frames both ways: kind (1 byte), payload length (4 bytes, little-endian), payload.
     caller -> agent: REQUEST frames (a serialized ActStreamRequest);
     agent -> caller: RESPONSE frames (ActStreamResponse) in request order, or one ERROR frame (status code,
     4 bytes little-endian, then the UTF-8 detail), after which the agent closes the lane.
"""

from __future__ import annotations

import fcntl
import hmac
import os
import secrets
import shutil
import socket
import stat
import struct
import tempfile
import time
from pathlib import Path

import grpc

SECRET_BYTES = 32
ACCEPTED = b"\x01"
REQUEST, RESPONSE, ERROR = 1, 2, 3
_HEADER = struct.Struct("<BI")
_CODE = struct.Struct("<I")
MAX_FRAME_BYTES = 256 * 1024 * 1024  # as gRPC's message limit in common/server.py
UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL (Linux)
ACCEPT_SECONDS = 10.0  # how long an offered socket waits for its caller
_STATUS_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}
CONNECT_SECONDS = 5.0  # how long a caller waits for the handshake before it uses ActStream instead


class LaneError(Exception):
    """A lane that cannot be used: a bad frame, a failed handshake, a peer that went away."""


class LaneConnection:
    """Frames over a connected Unix stream socket (either end); one thread sends and receives."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def send(self, kind: int, payload: bytes) -> None:
        if len(payload) > MAX_FRAME_BYTES:
            raise LaneError(f"frame of {len(payload):,} bytes exceeds the lane's limit of {MAX_FRAME_BYTES:,}")
        try:
            self._sock.sendall(_HEADER.pack(kind, len(payload)) + payload)
        except OSError as exc:
            raise LaneError(f"the lane closed ({exc.strerror or exc})") from None

    def receive(self) -> tuple[int, bytes]:
        """The next frame; EOFError when the peer closed the lane between frames."""
        header = self._read(_HEADER.size, at_frame_start=True)
        kind, length = _HEADER.unpack(header)
        if kind not in (REQUEST, RESPONSE, ERROR):
            raise LaneError(f"unknown frame kind {kind}")
        if length > MAX_FRAME_BYTES:
            raise LaneError(f"frame of {length:,} bytes exceeds the lane's limit of {MAX_FRAME_BYTES:,}")
        return kind, self._read(length)

    def _read(self, n: int, at_frame_start: bool = False) -> bytes:
        chunks: list[bytes] = []
        left = n
        while left:
            try:
                chunk = self._sock.recv(left, socket.MSG_WAITALL)
            except OSError as exc:
                raise LaneError(f"the lane closed ({exc.strerror or exc})") from None
            if not chunk:
                if at_frame_start and left == n:
                    raise EOFError("the peer closed the lane")
                raise LaneError("the lane closed inside a frame")
            chunks.append(chunk)
            left -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def shutdown(self) -> None:
        """Wakes a receive() blocked in another thread (it then fails); safe to call more than once."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self._sock.close()


def encode_error(code: grpc.StatusCode, detail: str) -> bytes:
    return _CODE.pack(code.value[0]) + detail.encode("utf-8", "replace")


def decode_error(payload: bytes) -> tuple[grpc.StatusCode, str]:
    if len(payload) < _CODE.size:
        raise LaneError("an ERROR frame without a status code")
    code = _STATUS_BY_NUMBER.get(_CODE.unpack_from(payload)[0], grpc.StatusCode.UNKNOWN)
    return code, payload[_CODE.size :].decode("utf-8", "replace")


LANE_DIR_PREFIX = "gauntlet-lanes-"
OWNER_LOCK = "owner.lock"
STALE_UNLOCKED_SECONDS = 60.0  # a folder without a lock file this old was left between mkdtemp and the lock
_held_locks: list[int] = []  # the descriptors holding our folders' locks: open for the life of the process


def private_lane_dir(parent: Path | None = None) -> Path:
    """A fresh folder only this user can enter (0700), for the sockets a service offers; first removes the folders
    that agents killed before they could remove their own left behind (remove_stale_lane_dirs).

    The folder holds OWNER_LOCK, locked (flock) for as long as this process lives: the kernel drops the lock when
    the process dies, however it dies, so a folder whose lock can be taken belongs to nobody."""
    remove_stale_lane_dirs(parent)
    folder = Path(tempfile.mkdtemp(prefix=LANE_DIR_PREFIX, dir=parent))
    fd, pending = tempfile.mkstemp(prefix=".owner-", dir=folder)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(pending, folder / OWNER_LOCK)  # the lock file appears locked already: never taken for a stale one
    _held_locks.append(fd)
    return folder


def _abandoned(folder: Path) -> bool:
    try:
        status = folder.lstat()
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
            return False  # a link, a file, or another user's: never ours to remove
        try:
            fd = os.open(folder / OWNER_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:  # from before the lock, or cut short; or being created right now
            return time.time() - status.st_mtime >= STALE_UNLOCKED_SECONDS
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when closed, just below
        except BlockingIOError:
            return False  # its agent lives
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


def remove_stale_lane_dirs(parent: Path | None = None) -> list[Path]:
    """Removes this user's lane folders under `parent` (default: the temp folder) whose owner is gone: OWNER_LOCK
    can be locked, or (a folder from before the lock, or one cut short) there is none and it is older than
    STALE_UNLOCKED_SECONDS. Returns what it removed; a folder it cannot judge is left alone."""
    removed: list[Path] = []
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(LANE_DIR_PREFIX)]
    except OSError:
        return removed
    for folder in candidates:
        if _abandoned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class LaneOffer:
    """One offered socket (the agent's side of one OpenLane call): a fresh path under `directory` and a secret."""

    def __init__(self, directory: Path) -> None:
        self.secret = secrets.token_bytes(SECRET_BYTES)
        self.path = str(directory / f"{secrets.token_hex(8)}.sock")
        if len(self.path.encode()) > UNIX_PATH_MAX:
            raise LaneError(f"lane socket path is {len(self.path.encode())} bytes, over the {UNIX_PATH_MAX} allowed")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        os.chmod(self.path, 0o600)
        self._listener.listen(1)

    def accept(self, timeout: float = ACCEPT_SECONDS) -> LaneConnection | None:
        """The caller's connection once it proved the secret; None when nobody came in time (it used ActStream),
        the offer was withdrawn (withdraw()), or a connection brought the wrong secret."""
        self._listener.settimeout(timeout)
        try:
            sock, _ = self._listener.accept()
        except OSError:  # timeout, or withdrawn from another thread
            return None
        finally:
            self.withdraw()
        try:
            sock.settimeout(CONNECT_SECONDS)
            presented = b""
            while len(presented) < SECRET_BYTES:  # a socket with a timeout may return part of it
                chunk = sock.recv(SECRET_BYTES - len(presented))
                if not chunk:
                    break
                presented += chunk
            if not hmac.compare_digest(presented, self.secret):
                sock.close()
                return None
            sock.sendall(ACCEPTED)
            sock.settimeout(None)
        except OSError:
            sock.close()
            return None
        return LaneConnection(sock)

    def withdraw(self) -> None:
        """Stops offering: wakes a pending accept() and removes the socket file; safe to call more than once."""
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def connect_lane(path: str, secret: bytes, timeout: float = CONNECT_SECONDS) -> LaneConnection:
    """The caller's side of the handshake; raises LaneError when the lane cannot be used from here."""
    if not path.startswith("/") or len(path.encode()) > UNIX_PATH_MAX or "\x00" in path:
        raise LaneError("the offered lane path is not an absolute socket path")
    if len(secret) != SECRET_BYTES:
        raise LaneError(f"the offered lane secret has {len(secret)} bytes, not {SECRET_BYTES}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(secret)
        if sock.recv(1) != ACCEPTED:
            raise LaneError("the agent refused the lane")
        sock.settimeout(None)
    except OSError as exc:  # no such socket here: another host or container
        sock.close()
        raise LaneError(f"cannot reach the lane ({exc.strerror or exc})") from None
    except LaneError:
        sock.close()
        raise
    return LaneConnection(sock)
