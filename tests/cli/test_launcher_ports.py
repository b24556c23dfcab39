"""The ports a local suite picks for its services: below the kernel's ephemeral range (where binding port 0, e.g. a
service's metrics listener, or an outgoing connection could take one before its service binds it), never one that
is listened on, never the same one twice."""

from __future__ import annotations

import socket

from cli.launcher import PICKED_PORTS, _ephemeral_start, _free_port


def test_picked_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    ports = [_free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(PICKED_PORTS[0] <= p < min(PICKED_PORTS[1], _ephemeral_start()) for p in ports), ports
    for port in ports[:20]:  # free to a server now
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))


def test_a_listened_port_is_never_picked() -> None:
    listeners = []
    try:
        # hold ports of the range that the launcher never handed out (so only its bind check can step around them):
        # every free one in a window of 300, which random picks from the range would meet about 10 times in 200
        low = PICKED_PORTS[0] + 4000
        for port in range(low, low + 300):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            s.listen()
            listeners.append(s)
        held = {s.getsockname()[1] for s in listeners}
        assert not held & {_free_port() for _ in range(2000)}
    finally:
        for s in listeners:
            s.close()
