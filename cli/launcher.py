"""Starts the whole suite as local processes on loopback, and tears it down (`gauntlet run` / `gauntlet up`)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from cli.certificates import SuiteCredentials
from cli.supervisor import RestartPolicy, Supervisor, describe_exit
from common.credentials import (
    CA_ENV,
    CLIENT_CERT_ENV,
    CLIENT_KEY_ENV,
    STORE_URL_ENV,
    STORE_URL_FILE_ENV,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
)

CALLERS = {"simulator", "generator", "analysis"}  # services that call others, so present client credentials
# settings of the user's shell that must not leak into the local services: the launcher sets exactly what it means
_CREDENTIAL_VARIABLES = (
    CA_ENV,
    CLIENT_CERT_ENV,
    CLIENT_KEY_ENV,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    STORE_URL_ENV,
    STORE_URL_FILE_ENV,
)


class LaunchError(RuntimeError):
    """A service did not come up; the message carries the tail of its log."""


REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SimulatorEnvironment:
    """A simulator process in a virtual environment of its own, for backends whose libraries cannot share the
    suite's (`make <venv>`). It serves only its backends' subjects; the suite's simulators forward those subjects to
    it (`--peer-simulator`), so the generator and every client still talk to the one simulator endpoint."""

    name: str
    venv: Path
    backends: tuple[str, ...]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def available(self) -> bool:
        return self.python.exists()


# Super Mario Bros.' emulator needs numpy < 2 (docs/subjects/mario.md); the suite's environment has numpy 2.
SIMULATOR_ENVIRONMENTS = {"mario": SimulatorEnvironment("mario", REPOSITORY / ".venv-mario", ("mario",))}


def environments_for(subjects: list[str]) -> tuple[str, ...]:
    """The simulator environments that serve any of these subjects (none for an unknown subject: the simulator
    says it is unknown)."""
    from simulator_service.subject import load_subjects

    known = load_subjects()
    backends = {known[s].backend for s in subjects if s in known}
    return tuple(n for n, e in SIMULATOR_ENVIRONMENTS.items() if backends & set(e.backends))


def available_environments() -> tuple[str, ...]:
    """The simulator environments built on this machine (what `gauntlet up` starts)."""
    return tuple(n for n, e in SIMULATOR_ENVIRONMENTS.items() if e.available())


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    port: int
    metrics_port: int
    log_path: Path
    module: str = ""  # what a restart runs again: python -m <module> <args>
    args: tuple[str, ...] = ()
    python: str = sys.executable  # the interpreter (a simulator environment's own, e.g. .venv-mario's)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class LocalSuite:
    """Context manager: oracle, agent, simulator, generator, analysis, translator on free loopback ports."""

    store_url: str
    log_dir: Path = Path("runs/logs")
    report_root: Path = Path("runs/reports")
    model_root: Path | None = None
    artifact_root: Path = Path("runs")  # what campaigns' surrogate/log parameters are relative to
    generator_retry_seconds: float = 60.0
    simulator_pipeline: int = 2
    # True: a simulator acts over a same-host lane where the agent offers one (common/lane.py); False: ActStream
    agent_lanes: bool = True
    # simulator processes ("simulator", "simulator-2", ...): the generator spreads each batch over all of them
    simulators: int = 1
    # simulator environments to start too (names in SIMULATOR_ENVIRONMENTS, e.g. "mario"): one more simulator
    # process each, "simulator-<name>", run by that environment's Python; the suite's simulators forward its subjects
    environments: tuple[str, ...] = ()
    security: SuiteCredentials | None = None  # mTLS and a token on every link (`--secure`)
    services: dict[str, Service] = field(default_factory=dict)
    # None: a service that dies stays dead; a policy: it is restarted on its ports (cli/supervisor.py)
    restart_policy: RestartPolicy | None = None
    # False: the generator's first start leaves older interrupted campaigns alone (a one-shot `gauntlet run`)
    resume_on_start: bool = True
    supervisor: Supervisor | None = field(default=None, init=False)

    def start_service(
        self,
        name: str,
        module: str,
        *args: str,
        timeout: float = 120.0,
        port: int = 0,
        metrics_port: int = 0,
        python: str = sys.executable,
    ) -> Service:
        """Starts one service (port 0: any free port) and waits for its ready line."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log_file = log_path.open("a")
        env = self._service_env(name)
        process = subprocess.Popen(
            [
                python,
                "-m",
                module,
                "--port",
                str(port),
                "--metrics-port",
                str(metrics_port),
                *args,
                *self._security_args(name),
            ],
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            env=env,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            start_new_session=True,  # a terminal's Ctrl-C reaches the launcher only, which stops the suite in order
        )
        log_file.close()  # the child holds its own copy
        line = _read_line(process.stdout, timeout)  # type: ignore[arg-type]
        if not line:
            process.kill()
            process.wait()
            tail = log_path.read_text()[-2000:]
            raise LaunchError(f"{name} service did not start (exit code {process.returncode}); log {log_path}:\n{tail}")
        ready = json.loads(line)
        service = Service(name, process, int(ready["port"]), int(ready["metrics_port"]), log_path, module, args, python)
        self.services[name] = service
        return service

    def start(self) -> LocalSuite:
        try:
            oracle = self.start_service("oracle", "oracle_service")
            agent_args = ["--model-root", str(self.model_root)] if self.model_root else []
            agent = self.start_service("agent", "agent_service", *agent_args)
            translator = self.start_service("translator", "translator_service")  # image subjects' GAN stage
            simulator_args = (
                "--agent-endpoint",
                agent.endpoint,
                "--translator-endpoint",
                translator.endpoint,
                "--pipeline",
                str(self.simulator_pipeline),
                "--agent-lanes",
                "auto" if self.agent_lanes else "off",
            )
            peers: list[str] = []
            for name in self.environments:
                environment = self._environment(name)
                backends = [a for b in environment.backends for a in ("--backend", b)]
                peer = self.start_service(
                    f"simulator-{name}",
                    "simulator_service",
                    *simulator_args,
                    *backends,
                    python=str(environment.python),
                )
                peers += ["--peer-simulator", peer.endpoint]
            simulators = [
                self.start_service(simulator_name(i), "simulator_service", *simulator_args, *peers)
                for i in range(self.simulators)
            ]
            generator = self.start_service(
                "generator",
                "generator_service",
                "--simulator-endpoint",
                ",".join(s.endpoint for s in simulators),
                "--oracle-endpoint",
                oracle.endpoint,
                "--retry-seconds",
                str(self.generator_retry_seconds),
                "--artifact-root",
                str(self.artifact_root),
                *([] if self.resume_on_start else ["--no-resume-interrupted"]),
            )
            self.start_service(
                "analysis",
                "analysis_service",
                "--generator-endpoint",
                generator.endpoint,
                "--report-root",
                str(self.report_root),
            )
        except BaseException:
            self.stop()
            raise
        if self.restart_policy is not None:
            self.supervisor = Supervisor(self, self.restart_policy).start()
        return self

    def wait(self) -> str:
        """Blocks while the suite runs; returns why it stopped: the supervisor gave up on a service, or (without
        supervision) a service exited."""
        while True:
            if self.supervisor is not None:
                if self.supervisor.gave_up.wait(1.0):
                    return self.supervisor.failure
                continue
            for service in self.services.values():
                if service.process.poll() is not None:
                    return (
                        f"the {service.name} service exited ({describe_exit(service.process.returncode)}); "
                        f"see its log {service.log_path.resolve()}"
                    )
            time.sleep(1.0)

    def endpoint(self, name: str) -> str:
        return self.services[name].endpoint

    @staticmethod
    def _environment(name: str) -> SimulatorEnvironment:
        if name not in SIMULATOR_ENVIRONMENTS:
            raise LaunchError(f"unknown simulator environment {name!r}; known: {', '.join(SIMULATOR_ENVIRONMENTS)}")
        environment = SIMULATOR_ENVIRONMENTS[name]
        if not environment.available():
            raise LaunchError(
                f"the {name} simulator's environment {environment.venv} does not exist (no {environment.python}); "
                f"build it with `make {environment.venv.relative_to(REPOSITORY)}`"
            )
        return environment

    def _service_env(self, name: str) -> dict[str, str]:
        """The child's environment: secrets travel here, never on its command line (visible to every user in ps)."""
        env = {k: v for k, v in os.environ.items() if k not in _CREDENTIAL_VARIABLES}
        env["PYTHONUNBUFFERED"] = "1"
        if name == "generator":
            env[STORE_URL_ENV] = self.store_url  # may hold a database password
        if self.security is not None:
            env[TOKEN_FILE_ENV] = str(self.security.token_file.resolve())
        return env

    def _security_args(self, name: str) -> list[str]:
        if self.security is None:
            return []
        return [*self.security.server_args(), *(self.security.client_args() if name in CALLERS else [])]

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()  # first: no restart of what is stopped next
        for service in reversed(list(self.services.values())):
            if service.process.poll() is None:
                service.process.send_signal(signal.SIGTERM)
        for service in self.services.values():
            try:
                service.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                service.process.kill()
                service.process.wait()
        self.services.clear()

    def __enter__(self) -> LocalSuite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def simulator_name(index: int) -> str:
    """The suite's name of its index-th simulator process (its log is <name>.log)."""
    return "simulator" if index == 0 else f"simulator-{index + 1}"


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends it SIGTERM when the launching process dies, so a bench or
    `gauntlet run` that is killed (SIGTERM/SIGKILL, where __exit__ never runs) leaves no services behind."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _read_line(stream: IO[str], timeout: float) -> str:
    """First stdout line of a child, or '' if it exits or stays silent past the timeout."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0].strip() if box else ""
