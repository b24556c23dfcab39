"""The listening side every fake simulator host in the tests shares: a loopback TCP listener on a free port, an
accept loop on a daemon thread, ``endpoint``, ``stop`` and use as a context manager.

A fake says how it serves a connection by overriding ``_accepted`` (inline, one client at a time, or on a thread).
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Self


class FakeTcpHost:
    def _listen(self, backlog: int) -> None:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(backlog)
        self._server.settimeout(0.1)
        self.port: int = self._server.getsockname()[1]
        self._stop = threading.Event()

    def _start_serving(self) -> None:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._accepted(conn)

    def _accepted(self, conn: socket.socket) -> None:
        raise NotImplementedError
