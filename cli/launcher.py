"""Starts the whole suite as local processes on loopback, and tears it down (`gauntlet run` / `gauntlet up`)."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from cli.certificates import SuiteCredentials
from cli.processes import Service, describe_exit
from cli.supervisor import RestartPolicy, Supervisor
from common.credentials import (
    CA_ENV,
    CLIENT_CERT_ENV,
    CLIENT_KEY_ENV,
    STORE_URL_ENV,
    STORE_URL_FILE_ENV,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
)

if TYPE_CHECKING:
    from simulator_service.subject import Subject

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


@functools.cache
def _subjects(subject_path: str) -> dict[str, Subject]:
    """The subjects a local simulator serves, read once per command (about half a second); keyed by
    $GAUNTLET_SUBJECT_PATH, which decides them besides the installed packs."""
    from simulator_service.subject import load_subjects

    return load_subjects()


def known_subjects() -> dict[str, Subject]:
    from simulator_service.subject import SUBJECT_PATH_ENV

    return _subjects(os.environ.get(SUBJECT_PATH_ENV, ""))


def environments_for(subjects: list[str]) -> tuple[str, ...]:
    """The simulator environments that serve any of these subjects (none for an unknown subject: the simulator
    says it is unknown)."""
    known = known_subjects()
    backends = {known[s].backend for s in subjects if s in known}
    return tuple(n for n, e in SIMULATOR_ENVIRONMENTS.items() if backends & set(e.backends))


def uses_translator(subject: str, observation_translator: str = "") -> bool:
    """Whether episodes of `subject` call the translator service: the campaign names a translator, or leaves it
    to a subject that declares one (`observation_translator: none` turns it off; an unknown subject calls none)."""
    from simulator_service.subject import NO_TRANSLATOR

    if observation_translator:
        return observation_translator != NO_TRANSLATOR
    known = known_subjects()
    return subject in known and bool(known[subject].observation_translator)


def campaign_roles(subject: str, observation_translator: str = "") -> frozenset[str]:
    """The roles a campaign calls (`gauntlet run`): the generator plans and stores, the simulator runs episodes
    with the agent acting, the oracle judges, the analysis renders the report; the translator only for a subject
    with a translator stage (DESIGNATE's image subjects)."""
    roles = set(ROLES)
    if not uses_translator(subject, observation_translator):
        roles.discard("translator")
    return frozenset(roles)


def report_roles(campaigns: Iterable[tuple[str, str]], filmstrips: int) -> frozenset[str]:
    """The roles `gauntlet report` calls for campaigns given as (subject, observation_translator): the generator
    (the store's reader) and the analysis; for an image subject (one that declares a translator stage) the
    simulator and agent that re-render its archive (ListArchive), with the translator where the campaign used it;
    for filmstrips the simulator, agent and oracle that replay failures (ReplayExecution), and that translator."""
    roles = {"generator", "analysis"}
    known = known_subjects()
    for subject, translator in campaigns:
        image = subject in known and bool(known[subject].observation_translator)
        if image or filmstrips:
            roles |= {"simulator", "agent"}
        if filmstrips:
            roles.add("oracle")
        if (image or filmstrips) and uses_translator(subject, translator):
            roles.add("translator")
    return frozenset(roles)


def available_environments() -> tuple[str, ...]:
    """The simulator environments built on this machine (what `gauntlet up` starts)."""
    return tuple(n for n, e in SIMULATOR_ENVIRONMENTS.items() if e.available())


@dataclass(frozen=True)
class Launch:
    """One service process to start: `python -m module --port P --metrics-port M *args`."""

    name: str
    module: str
    args: tuple[str, ...]
    port: int = 0
    metrics_port: int = 0
    python: str = sys.executable


# The suite's roles, each one's dependencies before it: the order the suite lists them in and stops them backwards.
ROLES = ("oracle", "agent", "translator", "simulator", "generator", "analysis")
__all__ = [
    "ROLES",
    "LaunchError",
    "LocalSuite",
    "Service",
    "available_environments",
    "campaign_roles",
    "environments_for",
    "report_roles",
]


# the generator's --artifact-root in a suite `gauntlet run`/`up` starts (relative to the working directory)
LOCAL_ARTIFACT_ROOT = Path("runs")


@dataclass
class LocalSuite:
    """Context manager: oracle, agent, simulator, generator, analysis, translator on free loopback ports.

    `roles` starts only some of them (e.g. {"generator", "analysis"} to render a report): each role left out still
    gets a free port, which the started ones are pointed at, so `start_roles` can bring it up there later."""

    store_url: str
    log_dir: Path = Path("runs/logs")
    report_root: Path = Path("runs/reports")
    model_root: Path | None = None
    artifact_root: Path = LOCAL_ARTIFACT_ROOT  # what campaigns' surrogate/log parameters are relative to
    generator_retry_seconds: float = 60.0
    simulator_pipeline: int = 2
    # False: the agent loads each model at its first use instead of at start (a listing needs none of them)
    agent_preload: bool = True
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
    # the roles to start (names in ROLES); None: all of them
    roles: frozenset[str] | None = None
    # called with each role's name and its start's seconds once all of that role's processes answer, in the order
    # they do (a command prints a line per service)
    on_ready: Callable[[str, float], None] | None = None
    # models the agent preloads (None: every model of the model root; with agent_preload)
    agent_models: tuple[str, ...] | None = None
    # role -> the port it serves on, chosen before anything starts, so the roles start at once, each pointed at
    # the others' ports; extra simulators' and simulator environments' ports likewise
    _ports: dict[str, int] = field(default_factory=dict, init=False)
    _simulator_ports: list[int] = field(default_factory=list, init=False)
    _environment_ports: dict[str, int] = field(default_factory=dict, init=False)

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
        launch = Launch(name, module, args, port, metrics_port, python)
        process = self._spawn(launch)
        line = _read_line(process.stdout, timeout)  # type: ignore[arg-type]
        service = self._ready(launch, process, line)
        self.services[name] = service
        return service

    def _spawn(self, launch: Launch) -> subprocess.Popen[str]:
        """Starts the process; its ready line is read by the caller. Runs on the calling thread, which must live as
        long as the child (the parent-death signal follows the forking thread: cli/supervisor.py)."""
        private_folder(self.log_dir)
        log_path = self.log_dir / f"{launch.name}.log"
        log_file = private_file(log_path).open("a")
        env = self._service_env(launch.name)
        process = subprocess.Popen(
            [
                launch.python,
                "-m",
                launch.module,
                "--port",
                str(launch.port),
                "--metrics-port",
                str(launch.metrics_port),
                *launch.args,
                *self._security_args(launch.name),
            ],
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            env=env,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            start_new_session=True,  # a terminal's Ctrl-C reaches the launcher only, which stops the suite in order
        )
        log_file.close()  # the child holds its own copy
        return process

    def _ready(self, launch: Launch, process: subprocess.Popen[str], line: str) -> Service:
        """The started service from its ready line; LaunchError with its log's tail when there is none."""
        log_path = self.log_dir / f"{launch.name}.log"
        if not line:
            process.kill()
            process.wait()
            tail = log_path.read_text()[-2000:]
            raise LaunchError(
                f"{launch.name} service did not start (exit code {process.returncode}); log {log_path}:\n{tail}"
            )
        ready = json.loads(line)
        return Service(
            launch.name,
            process,
            int(ready["port"]),
            int(ready["metrics_port"]),
            log_path,
            launch.module,
            launch.args,
            launch.python,
        )

    def start(self) -> LocalSuite:
        roles = set(ROLES if self.roles is None else self.roles)
        if unknown := roles - set(ROLES):
            raise LaunchError(f"unknown service role(s) {', '.join(sorted(unknown))}; roles: {', '.join(ROLES)}")
        # every role has its port before any starts: all start at once, each pointed at the ports of those it
        # calls, and a role left out can start there later (they connect lazily and retry)
        self._ports = {r: _free_port() for r in ROLES}
        self._simulator_ports = [self._ports["simulator"], *(_free_port() for _ in range(1, self.simulators))]
        self._environment_ports = {name: _free_port() for name in self.environments}
        private_folder(self.artifact_root)  # runs/: the store, logs, reports and --secure's keys live under it
        store_folder = Path(self.store_url.removeprefix("sqlite:///")).parent.resolve()
        if self.store_url.startswith("sqlite:///") and self.artifact_root.resolve() in store_folder.parents:
            private_folder(store_folder)  # runs/store, made by whoever chose the URL first
        try:
            self.start_roles(roles)
        except BaseException:
            self.stop()
            raise
        if self.restart_policy is not None:
            self.supervisor = Supervisor(self, self.restart_policy).start()
        return self

    def start_roles(self, roles: Iterable[str], timeout: float = 120.0) -> None:
        """Starts these roles at once, each on the port the suite gave it, and waits until every one answers (one
        already running is left as it is); on_ready hears of each role as it comes up. If one does not start, the
        others started here are stopped and LaunchError says which one and why."""
        wanted = set(roles)
        plan = {r: self._launches(r) for r in ROLES if r in wanted and not self._running(r)}
        processes: list[tuple[str, Launch, subprocess.Popen[str]]] = []
        try:
            for role, launches in plan.items():
                processes += [(role, launch, self._spawn(launch)) for launch in launches]
            started = time.monotonic()
            lines = _read_lines([p for _, _, p in processes], timeout)
            pending = {role: len(launches) for role, launches in plan.items()}
            ready: dict[str, Service] = {}
            for index, line in lines:  # in the order the processes answer
                role, launch, process = processes[index]
                ready[launch.name] = self._ready(launch, process, line)
                pending[role] -= 1
                if pending[role] == 0 and self.on_ready is not None:
                    self.on_ready(role, time.monotonic() - started)
        except BaseException:
            for _, _, process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            raise
        for _, launch, _ in processes:  # in ROLES order, so the suite stops in reverse dependency order
            self.services[launch.name] = ready[launch.name]

    def _launches(self, role: str) -> list[Launch]:
        """The processes of one role, each with its reserved port and its peers' endpoints."""
        if role == "oracle":
            return [Launch("oracle", "oracle_service", (), self._ports["oracle"])]
        if role == "agent":
            agent_args = ["--model-root", str(self.model_root)] if self.model_root else []
            agent_args += [] if self.agent_preload else ["--no-preload"]
            if self.agent_preload and self.agent_models is not None:
                agent_args += [a for model in self.agent_models for a in ("--preload-model", model)]
            return [Launch("agent", "agent_service", tuple(agent_args), self._ports["agent"])]
        if role == "translator":  # image subjects' GAN stage
            return [Launch("translator", "translator_service", (), self._ports["translator"])]
        if role == "simulator":
            return self._simulator_launches()
        if role == "generator":
            generator_args = (
                "--simulator-endpoint",
                self._simulator_endpoints(),
                "--oracle-endpoint",
                self._role_endpoint("oracle"),
                "--retry-seconds",
                str(self.generator_retry_seconds),
                "--artifact-root",
                str(self.artifact_root),
                *([] if self.resume_on_start else ["--no-resume-interrupted"]),
            )
            return [Launch("generator", "generator_service", generator_args, self._ports["generator"])]
        analysis_args = (
            "--generator-endpoint",
            self._role_endpoint("generator"),
            "--report-root",
            str(self.report_root),
        )
        return [Launch("analysis", "analysis_service", analysis_args, self._ports["analysis"])]

    def _running(self, role: str) -> bool:
        return role in self.services or (role == "simulator" and simulator_name(0) in self.services)

    def _role_endpoint(self, role: str) -> str:
        """Where `role` serves: its process's endpoint once started, else the port set aside for it."""
        if role in self.services:
            return self.services[role].endpoint
        return f"127.0.0.1:{self._ports[role]}"

    def _simulator_launches(self) -> list[Launch]:
        simulator_args = (
            "--agent-endpoint",
            self._role_endpoint("agent"),
            "--translator-endpoint",
            self._role_endpoint("translator"),
            "--pipeline",
            str(self.simulator_pipeline),
            "--agent-lanes",
            "auto" if self.agent_lanes else "off",
        )
        launches: list[Launch] = []
        peers: list[str] = []
        for name in self.environments:
            environment = self._environment(name)
            backends = tuple(a for b in environment.backends for a in ("--backend", b))
            port = self._environment_ports.setdefault(name, _free_port())  # one added later (a report) too
            launches.append(
                Launch(
                    f"simulator-{name}",
                    "simulator_service",
                    (*simulator_args, *backends),
                    port,
                    python=str(environment.python),
                )
            )
            peers += ["--peer-simulator", f"127.0.0.1:{port}"]
        for i in range(self.simulators):
            launches.append(
                Launch(simulator_name(i), "simulator_service", (*simulator_args, *peers), self._simulator_ports[i])
            )
        return launches

    def _simulator_endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self._simulator_ports)

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


# Ports the suite picks for its services lie below the kernel's ephemeral range: a port from that range (what binding
# port 0 gives) can be handed to any other socket between the pick and the service's bind, e.g. another service's
# metrics listener or an outgoing connection, and the service then fails to bind its gRPC port.
PICKED_PORTS = (10000, 32768)  # the high end is lowered to the ephemeral range's start where that is lower
_picked: set[int] = set()  # ports this process handed out: two roles never get the same one
_pick_lock = threading.Lock()
_pick_random = random.SystemRandom()  # not the global generator, which a caller may have seeded


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):  # not Linux: the IANA range starts at 49152
        return 49152


def _free_port() -> int:
    """A loopback port free now, for a role that starts later (or never) but that others must be pointed at: a
    random port below the ephemeral range that nothing listens on and this process has not handed out before."""
    low, high = PICKED_PORTS[0], min(PICKED_PORTS[1], _ephemeral_start())
    with _pick_lock:
        for _ in range(200):
            port = _pick_random.randrange(low, high)
            if port in _picked:
                continue
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to a server
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _picked.add(port)
            return port
    with socket.socket() as s:  # 200 taken ports in a row: let the kernel choose (the old way)
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def simulator_name(index: int) -> str:
    """The suite's name of its index-th simulator process (its log is <name>.log)."""
    return "simulator" if index == 0 else f"simulator-{index + 1}"


def private_folder(path: Path) -> None:
    """Creates `path` 0700 (its parents as the umask says); one of ours that exists loses group and other access:
    the store, logs and reports under it hold campaigns' inputs, and runs/secure a suite's keys."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    status = path.stat()
    if status.st_uid == os.getuid() and status.st_mode & 0o077:
        path.chmod(status.st_mode & 0o700)


def private_file(path: Path) -> Path:
    """Creates `path` 0600 if it does not exist; one of ours that exists loses group and other access."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600))
    status = path.stat()
    if status.st_uid == os.getuid() and status.st_mode & 0o077:
        path.chmod(status.st_mode & 0o600)
    return path


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends it SIGTERM when the launching process dies, so a bench or
    `gauntlet run` that is killed (SIGTERM/SIGKILL, where __exit__ never runs) leaves no services behind."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _read_lines(processes: list[subprocess.Popen[str]], timeout: float) -> Iterator[tuple[int, str]]:
    """(index, first stdout line) of each process as it answers, '' for one that exits or stays silent past the
    timeout (counted from this call for all of them)."""
    answers: queue.Queue[tuple[int, str]] = queue.Queue()
    for index, process in enumerate(processes):
        stream = process.stdout
        assert stream is not None
        threading.Thread(target=lambda i=index, s=stream: answers.put((i, s.readline().strip())), daemon=True).start()
    deadline = time.monotonic() + timeout
    waiting = set(range(len(processes)))
    while waiting:
        try:
            index, line = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:  # the first still silent one is reported; the caller stops them all
            yield min(waiting), ""
            return
        waiting.discard(index)
        yield index, line


def _read_line(stream: IO[str], timeout: float) -> str:
    """First stdout line of a child, or '' if it exits or stays silent past the timeout."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0].strip() if box else ""
