"""SessionRestore.reseed on a stochastic subject that can snapshot: a slippery copy of taxi_large (the taxi env's
`slip`, as Gymnasium's rainy Taxi), declared in YAML through $GAUNTLET_SUBJECT_PATH and served by a real simulator
process. A snapshot copies the env's random generator, so restores without a reseed all sample the same successor;
with one, each seed samples anew and the same seed samples the same successor again."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import common_pb2, simulator_pb2, simulator_pb2_grpc
from common.server import client_channel
from common.tensor import from_tensor, to_tensor
from subjects.taxi.env import SOUTH

ROOT = Path(__file__).resolve().parents[2]
START = {"taxi_row": 8, "taxi_col": 6, "passenger": 0, "destination": 1}


@pytest.fixture(scope="module")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[simulator_pb2_grpc.SimulatorServiceStub]:
    folder = tmp_path_factory.mktemp("rainy")
    subject = yaml.safe_load((ROOT / "subjects" / "taxi" / "taxi_large.yaml").read_text())
    subject.update(subject="taxi_rainy", deterministic=False, env_kwargs={"end_on_fault": False, "slip": 0.5})
    (folder / "subjects").mkdir()
    (folder / "subjects" / "taxi_rainy.yaml").write_text(yaml.safe_dump(subject))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GAUNTLET_SUBJECT_PATH", str(folder / "subjects"))  # the simulator process inherits it
        local = LocalSuite(store_url=f"sqlite:///{folder / 'store.db'}", log_dir=folder / "logs")
        simulator = local.start_service("simulator", "simulator_service", "--agent-endpoint", "127.0.0.1:1")
    try:
        yield simulator_pb2_grpc.SimulatorServiceStub(client_channel(simulator.endpoint))
    finally:
        local.stop()


class Session:
    def __init__(self, stub: simulator_pb2_grpc.SimulatorServiceStub) -> None:
        self.outbox: queue.Queue[simulator_pb2.OpenSessionRequest | None] = queue.Queue()
        self.replies = stub.OpenSession(iter(self.outbox.get, None), timeout=120)

    def send(self, request: simulator_pb2.OpenSessionRequest) -> simulator_pb2.OpenSessionResponse:
        self.outbox.put(request)
        return next(self.replies)

    def south_from(self, snapshot: str, reseed: int | None) -> int:
        """Restores the snapshot (with a new seed when given), steps south, returns the observed state."""
        restore = simulator_pb2.SessionRestore(snapshot_id=snapshot)
        if reseed is not None:
            restore.reseed = reseed
        self.send(simulator_pb2.OpenSessionRequest(restore=restore))
        step = simulator_pb2.SessionStep(action=to_tensor(np.int64(SOUTH)))
        return int(from_tensor(self.send(simulator_pb2.OpenSessionRequest(step=step)).observation))


def test_a_restore_samples_anew_only_with_a_new_seed(simulator: simulator_pb2_grpc.SimulatorServiceStub) -> None:
    session = Session(simulator)
    try:
        case = common_pb2.TestCase(id="start")
        for name, value in START.items():
            case.values[name].integer = value
        session.send(
            simulator_pb2.OpenSessionRequest(open=simulator_pb2.SessionOpen(subject="taxi_rainy", test_case=case))
        )
        snapshot = session.send(simulator_pb2.OpenSessionRequest(snapshot=simulator_pb2.SessionSnapshot())).snapshot_id
        copied = {session.south_from(snapshot, None) for _ in range(12)}
        reseeded = [session.south_from(snapshot, seed) for seed in range(40)]
        again = [session.south_from(snapshot, seed) for seed in range(40)]
    finally:
        session.outbox.put(None)
    assert len(copied) == 1  # the snapshot's copied generator: the same successor every time
    assert len(set(reseeded)) >= 2  # slip 0.5: south and the sideways moves all occur over 40 seeds
    assert again == reseeded  # a seed picks its successor: the search's repetitions are reproducible
