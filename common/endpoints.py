"""The endpoint grammar every process checks its endpoint flags with (the CLI's --generator, a service's
--oracle-endpoint): HOST:PORT, [IPv6]:PORT or a gRPC target with its scheme. A host without a port is refused
instead of silently meaning 443, as gRPC would take it."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:")


def endpoint_problem(text: str) -> str | None:
    """Why ``text`` is not an endpoint a client can dial (None when it is): HOST:PORT with a port in 1..65535, a
    bracketed IPv6 address with a port ([::1]:50054), or a gRPC target with its scheme (dns:///name:port, unix:...)."""
    if text.startswith(SCHEMES):
        if text.startswith("dns:") and not re.search(r":\d{1,5}$", text):
            return f"{text!r} has no port (dns:///NAME:PORT)"
        return None
    found = _HOST_PORT.match(text)
    if not found:
        if text and ":" not in text.strip("[]"):
            return f"{text!r} has no port: give HOST:PORT, e.g. {text}:50054 (no port would mean 443)"
        return f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:50054, [::1]:50054 or dns:///generator:50054)"
    if not 1 <= int(found.group(1)) <= 65535:
        return f"{text!r} has port {found.group(1)}, outside 1..65535"
    return None


def endpoint_type(flag: str) -> Callable[[str], str]:
    """An argparse `type` for an endpoint flag: the flag's value, or a usage error naming the flag."""

    def check(text: str) -> str:
        problem = endpoint_problem(text)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return text

    check.__name__ = flag  # argparse names the type in its message: "invalid --generator value"
    return check


def endpoints_type(flag: str, allow_empty: bool = False) -> Callable[[str], str]:
    """An argparse `type` for a flag holding one endpoint or several, comma-separated (a service's replicas); with
    `allow_empty`, "" (no endpoint) passes too. Each endpoint is checked as endpoint_type checks one."""

    def check(text: str) -> str:
        if allow_empty and not text:
            return text
        for item in text.split(","):
            problem = endpoint_problem(item.strip())
            if problem:
                raise argparse.ArgumentTypeError(problem)
        return text

    check.__name__ = flag
    return check
