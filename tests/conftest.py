"""Shared fixtures: a real local suite of services, and a real PostgreSQL server started for the session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from glob import glob
from pathlib import Path

import pytest

from cli.launcher import LocalSuite

MODEL_ROOT = Path(os.environ["GAUNTLET_TEST_MODEL_ROOT"]) if os.environ.get("GAUNTLET_TEST_MODEL_ROOT") else None


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    """Every service as a separate process on loopback, with the bundled zoo and a fresh SQLite store."""
    root = tmp_path_factory.mktemp("suite")
    local = LocalSuite(
        store_url=f"sqlite:///{root / 'store.db'}",
        log_dir=root / "logs",
        model_root=MODEL_ROOT,
        report_root=root / "reports",
        artifact_root=root / "artifacts",  # campaigns name surrogates and logs relative to it
        generator_retry_seconds=60.0,
    )
    local.start()
    yield local
    local.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres_bin() -> Path | None:
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway PostgreSQL server (Debian's binaries) on a free loopback port."""
    bindir = _postgres_bin()
    if bindir is None:
        if os.environ.get("GAUNTLET_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL binaries not found (.ci/run installs Debian's postgresql)")
        pytest.skip("PostgreSQL binaries not installed (apt-get install postgresql)")
    # outside pytest's tmp tree: that one is private to root, and postgres refuses to run as root
    data = Path(tempfile.mkdtemp(prefix="gauntlet-pg-")) / "data"
    port = free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data.parent, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]

    def run(*cmd: str) -> None:
        done = subprocess.run([*as_user, *cmd], capture_output=True, text=True)
        if done.returncode:
            pytest.fail(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")

    run(str(bindir / "initdb"), "-D", str(data), "-U", "gauntlet", "--auth=trust", "-E", "UTF8")
    run(
        str(bindir / "pg_ctl"),
        "-D",
        str(data),
        "-w",
        "-l",
        str(data.parent / "log"),
        "-o",
        f"-p {port} -k {data.parent} -c listen_addresses=127.0.0.1",
        "start",
    )
    try:
        for _ in range(50):
            if (
                subprocess.run(
                    [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)], capture_output=True
                ).returncode
                == 0
            ):
                break
            time.sleep(0.2)
        yield f"postgresql+psycopg://gauntlet@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(data.parent, ignore_errors=True)


def one_model_root(folder: Path, name: str) -> Path:
    """A model root that holds only zoo model `name`: an agent service on it starts, and restarts, without loading
    every bundled model (it preloads what its manifest lists)."""
    import yaml

    zoo = MODEL_ROOT or Path(__file__).resolve().parent.parent / "agent_service" / "zoo"
    entry = yaml.safe_load((zoo / "manifest.yaml").read_text())["models"][name]
    (folder / name).mkdir(parents=True)
    for saved in (zoo / name).glob("model.*"):
        shutil.copy(saved, folder / name / saved.name)
    (folder / "manifest.yaml").write_text(yaml.safe_dump({"models": {name: entry}}))
    return folder
