"""Keeps a local suite's services running: a service that dies is logged and restarted on the same ports after an
exponential backoff; one that keeps crashing right after its start stops the whole suite with a clear message.

Restarts happen on this supervisor's own long-lived thread, on purpose: a child is started with a parent-death
signal (cli/launcher.py), which Linux delivers when the *thread* that forked it ends, so a child forked by a
short-lived thread would be stopped as soon as that thread returned.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cli.processes import Service, describe_exit

__all__ = ["FIRST_START_ONLY", "RestartPolicy", "Supervisor", "SupervisedSuite", "describe_exit"]

# Options of a service's first start that its restarts drop: a restarted generator resumes the campaigns its
# predecessor was running, even in a suite whose first generator was told not to resume older ones.
FIRST_START_ONLY = frozenset({"--no-resume-interrupted"})


@dataclass(frozen=True)
class RestartPolicy:
    """How a crashed service is restarted. The n-th consecutive quick crash (n = 1, 2, ...) waits
    min(max_delay, initial_delay * multiplier**(n-1)) before the restart; the `max_quick_crashes`-th gives up."""

    initial_delay: float = 0.5
    max_delay: float = 10.0
    multiplier: float = 2.0
    max_quick_crashes: int = 5
    stable_seconds: float = 30.0  # a service that ran this long had a good start: its crash count starts again
    poll_seconds: float = 0.2

    def delay(self, crash_number: int) -> float:
        return min(self.max_delay, self.initial_delay * self.multiplier ** (crash_number - 1))


def _to_stderr(message: str) -> None:
    print(f"gauntlet: {message}", file=sys.stderr, flush=True)


class SupervisedSuite(Protocol):
    """What the supervisor needs of a suite (cli/launcher.py's LocalSuite): its services, a way to start one again
    on its ports, and a way to stop them all."""

    services: dict[str, Service]

    def start_service(
        self,
        name: str,
        module: str,
        *args: str,
        timeout: float = ...,
        port: int = ...,
        metrics_port: int = ...,
        python: str = ...,
    ) -> Service: ...

    def stop(self) -> None: ...


class Supervisor:
    """Watches every service of `suite`; see the module docstring. `notify` receives one line per event."""

    def __init__(
        self, suite: SupervisedSuite, policy: RestartPolicy, notify: Callable[[str], None] | None = None
    ) -> None:
        self.suite = suite
        self.policy = policy
        self.notify = notify or _to_stderr
        self.failure = ""  # why the supervisor gave up; empty while it has not
        self.gave_up = threading.Event()
        # services the suite starts later (LocalSuite.start_roles) count from the supervisor's start
        self.restarts: dict[str, int] = dict.fromkeys(suite.services, 0)
        self._quick_crashes: dict[str, int] = dict.fromkeys(suite.services, 0)
        self._started_at: dict[str, float] = dict.fromkeys(suite.services, time.monotonic())
        self._created = time.monotonic()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gauntlet-supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No restart from now on; waits for a restart under way (it ends within the service's start timeout)."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=150)

    def _watch(self) -> None:
        while not self._stopping.wait(self.policy.poll_seconds):
            for name, service in list(self.suite.services.items()):
                returncode = service.process.poll()
                if returncode is None or self._stopping.is_set():
                    continue
                if not self._restart(name, service, returncode):
                    self._give_up(name, service)
                    return

    def _restart(self, name: str, service: Service, returncode: int) -> bool:
        """Restarts a dead service on its ports; False once it crashed `max_quick_crashes` times in a row."""
        ran = time.monotonic() - self._started_at.get(name, self._created)
        crashes = self._quick_crashes.get(name, 0) + 1 if ran < self.policy.stable_seconds else 1
        self._quick_crashes[name] = crashes
        what = f"{name} service (pid {service.process.pid}) exited with {describe_exit(returncode)} after {ran:.1f}s"
        while True:
            if crashes >= self.policy.max_quick_crashes:
                self._record(service, f"{what}; crash {crashes} in a row: giving up")
                return False
            delay = self.policy.delay(crashes)
            self._record(service, f"{what}; restarting it on {service.endpoint} in {delay:.1f}s (crash {crashes})")
            if self._stopping.wait(delay):
                return True
            args = [a for a in service.args if a not in FIRST_START_ONLY]
            try:
                restarted = self.suite.start_service(
                    name,
                    service.module,
                    *args,
                    port=service.port,
                    metrics_port=service.metrics_port,
                    python=service.python,
                )
            except Exception as exc:  # noqa: BLE001 - a start that fails (LaunchError, a port taken) is one more crash
                if self._stopping.is_set():
                    return True
                crashes += 1
                self._quick_crashes[name] = crashes
                what = f"{name} service did not start again ({str(exc).splitlines()[0]})"
                continue
            self._started_at[name] = time.monotonic()
            self.restarts[name] = self.restarts.get(name, 0) + 1
            self._record(restarted, f"{name} service restarted on {restarted.endpoint} (pid {restarted.process.pid})")
            return True

    def _give_up(self, name: str, service: Service) -> None:
        self.failure = (
            f"the {name} service crashed {self._quick_crashes[name]} times in a row, each within "
            f"{self.policy.stable_seconds:.0f}s of its start; the suite is stopped (log {service.log_path.resolve()})"
        )
        self.notify(self.failure)
        self.suite.stop()
        self.gave_up.set()

    def _record(self, service: Service, message: str) -> None:
        """One line for the person watching, and the same in the service's own log (JSON lines like the service's)."""
        self.notify(message)
        entry = {"ts": round(time.time(), 3), "level": "WARNING", "service": service.name, "logger": "launcher"}
        with service.log_path.open("a") as log:
            log.write(json.dumps({**entry, "msg": message}) + "\n")
