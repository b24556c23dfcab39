"""Peer simulators: other simulator services that serve subjects this one cannot run in its own environment.

A backend whose libraries cannot share the suite's Python environment (Super Mario Bros.' emulator needs numpy < 2)
runs in a simulator process of its own, in its own virtual environment. Its subjects declare the modules they need
(`requires:`); a simulator whose environment lacks them does not serve them, and forwards every call about such a
subject to the first peer (`--peer-simulator host:port`, repeatable) whose ListEnvironments names it. So the
generator, the CLI and any client keep talking to the one simulator endpoint they know: which process, in which
environment, runs a subject is the simulators' business.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import grpc

from common.credentials import ClientCredentials
from common.generated.gauntlet.v1 import simulator_pb2, simulator_pb2_grpc
from common.server import client_channel

LISTING_TIMEOUT = 10.0  # seconds for one peer's ListEnvironments
RELIST_SECONDS = 5.0  # a subject no peer listed is asked for again at most this often (a peer may be starting)


class Peers:
    """Stubs for the peer simulators and what each serves (asked once, asked again for a subject none lists)."""

    def __init__(self, endpoints: Iterable[str], credentials: ClientCredentials | None = None) -> None:
        self.endpoints = list(dict.fromkeys(e for e in endpoints if e))
        self._stubs = {
            e: simulator_pb2_grpc.SimulatorServiceStub(client_channel(e, credentials)) for e in self.endpoints
        }
        self._listings: dict[str, list[simulator_pb2.EnvironmentSummary]] = {}
        self._asked_at = float("-inf")
        self._lock = threading.Lock()

    def _refresh(self, force: bool = False) -> None:
        """Asks every peer whose listing is missing (all of them when `force`); a peer that does not answer is
        asked again on the next refresh."""
        with self._lock:
            now = time.monotonic()
            missing = [e for e in self.endpoints if force or e not in self._listings]
            if not missing or now - self._asked_at < RELIST_SECONDS:
                return
            self._asked_at = now
        for endpoint in missing:
            try:
                reply = self._stubs[endpoint].ListEnvironments(
                    simulator_pb2.ListEnvironmentsRequest(), timeout=LISTING_TIMEOUT
                )
            except grpc.RpcError:
                continue
            with self._lock:
                self._listings[endpoint] = list(reply.environments)

    def environments(self) -> list[simulator_pb2.EnvironmentSummary]:
        """Every subject some peer serves (the first peer's summary where two serve one)."""
        if not self.endpoints:
            return []
        self._refresh()
        seen: dict[str, simulator_pb2.EnvironmentSummary] = {}
        with self._lock:
            for endpoint in self.endpoints:
                for summary in self._listings.get(endpoint, []):
                    seen.setdefault(summary.subject, summary)
        return list(seen.values())

    def stub_for(self, subject: str) -> simulator_pb2_grpc.SimulatorServiceStub | None:
        """The stub of the first peer that serves `subject`, or None when no peer does."""
        if not self.endpoints:
            return None
        for attempt in range(2):
            if attempt:
                self._refresh(force=True)  # not listed: a peer may have started, or restarted, with it since
            else:
                self._refresh()
            with self._lock:
                for endpoint in self.endpoints:
                    if any(s.subject == subject for s in self._listings.get(endpoint, [])):
                        return self._stubs[endpoint]
        return None
