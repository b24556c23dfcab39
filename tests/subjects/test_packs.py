"""Subject packs: a new pack from a temporary folder runs a campaign with its own env, injector, oracle and signals;
an oracle whose signals a subject does not record is refused before a campaign starts, naming both.

The temporary pack is a package plus a ``*.dist-info`` folder whose ``entry_points.txt`` declares its parts (what pip
would write when installing it): put on PYTHONPATH, importlib.metadata finds it in every service process. Nothing in
the repository names it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cli.launcher import LocalSuite
from common.errors import FailedPrecondition, InvalidArgument, NotFound
from common.generated.gauntlet.v1 import (
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    oracle_pb2_grpc,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.server import client_channel
from generator_service.config import CampaignConfig
from generator_service.preflight import check_oracle_fits

PACK = "gauntlet_pack_drift"

PACK_INIT = '''
"""A third-party subject pack: CartPole with a constant sideways push, judged on how far the cart drifts."""

from pathlib import Path

FOLDER = Path(__file__).parent
'''

PACK_SUBJECT = """
subject: drift_cart
description: CartPole whose cart gets a constant push each step; fails when it drifts more than 0.5 m.
backend: drift_cart
env_id: drift-cart
max_steps: 60
injector: {kind: drift_start}
oracle: drift_far
signals:
  - {name: peak_offset, attribute: peak_offset, description: largest |x| of the episode (m)}
  - {name: push, attribute: push, description: the constant push added to x_dot each step (m/s)}
parameters:
  - {name: push, low: -0.05, high: 0.05, description: velocity added to the cart each step}
  - {name: theta, low: -0.05, high: 0.05, description: initial pole angle (rad)}
"""

PACK_BACKEND = '''
"""The pack's simulator side: its env, backend and injector (simulator plug-in surface only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from simulator_service.plugin_api import Injector, Subject, SubjectEnv


class DriftCartPole(CartPoleEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.push = 0.0
        self.peak_offset = 0.0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        self.state = np.asarray(self.state) + np.array([0.0, self.push, 0.0, 0.0])
        self.peak_offset = max(self.peak_offset, abs(float(self.state[0])))
        return np.asarray(self.state, dtype=np.float32), reward, terminated, truncated, info


def make_env(subject: Subject, render_mode: str | None = None) -> gym.Env:
    env = gym.wrappers.TimeLimit(DriftCartPole(render_mode=render_mode), max_episode_steps=subject.max_steps)
    return SubjectEnv(env, subject)


def drift_start(subject: Subject, options: Mapping[str, Any]) -> Injector:
    def inject(env: gym.Env, values: Mapping[str, Any], seed: int | None) -> np.ndarray:
        env.reset(seed=seed)
        base = env.unwrapped
        base.state = np.array([0.0, 0.0, float(values["theta"]), 0.0])
        base.push = float(values["push"])
        base.peak_offset = 0.0
        return np.asarray(base.state, dtype=np.float32)

    return inject
'''

PACK_ORACLE = '''
"""The pack's oracle side (oracle plug-in surface only): it reads the pack's own signal peak_offset."""

from oracle_service.plugin_api import Episode, Judgement, Oracle, scalar

LIMIT = 0.5


def _judge(episode: Episode) -> Judgement:
    peak = scalar(episode, "peak_offset")
    return Judgement(peak > LIMIT, LIMIT - peak, (peak,), f"drift-pack: the cart drifted {peak:.4f} m")


DRIFT_FAR = Oracle(
    "drift_far",
    "Fails when the cart drifts more than 0.5 m from the centre.",
    ("peak_offset",),
    ("peak_offset",),
    "0.5 minus the largest |x|",
    _judge,
)
'''

ENTRY_POINTS = """
[gauntlet.subject_dirs]
drift = gauntlet_pack_drift:FOLDER

[gauntlet.simulators]
drift_cart = gauntlet_pack_drift.backend:make_env

[gauntlet.injectors]
drift_start = gauntlet_pack_drift.backend:drift_start

[gauntlet.oracles]
drift_far = gauntlet_pack_drift.oracle:DRIFT_FAR
"""


@pytest.fixture(scope="module")
def pack_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site folder holding the pack and its distribution metadata, as an installer lays them out."""
    site = tmp_path_factory.mktemp("pack-site")
    package = site / PACK
    package.mkdir()
    for name, text in {
        "__init__.py": PACK_INIT,
        "drift_cart.yaml": PACK_SUBJECT,
        "backend.py": PACK_BACKEND,
        "oracle.py": PACK_ORACLE,
    }.items():
        (package / name).write_text(textwrap.dedent(text).lstrip())
    info = site / f"{PACK}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACK.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS.lstrip())
    return site


@pytest.fixture(scope="module")
def pack_suite(pack_site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    """Every service as its own process, each with the temporary pack on its path."""
    root = tmp_path_factory.mktemp("pack-suite")
    suite = LocalSuite(store_url=f"sqlite:///{root / 'store.db'}", log_dir=root / "logs")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPATH", str(pack_site))
        suite.start()
    try:
        yield suite
    finally:
        suite.stop()


def _generator(suite: LocalSuite) -> generator_pb2_grpc.GeneratorServiceStub:
    return generator_pb2_grpc.GeneratorServiceStub(client_channel(suite.endpoint("generator")))


def test_a_pack_from_a_temporary_folder_runs_a_campaign_with_its_own_oracle_and_signals(
    pack_suite: LocalSuite,
) -> None:
    simulator = simulator_pb2_grpc.SimulatorServiceStub(client_channel(pack_suite.endpoint("simulator")))
    described = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="drift_cart"))
    assert described.default_oracle == "drift_far" and described.summary.backend == "drift_cart"
    assert {"peak_offset", "push"} <= {s.name for s in described.signals}
    oracles = oracle_pb2_grpc.OracleServiceStub(client_channel(pack_suite.endpoint("oracle")))
    listed = {o.name: o for o in oracles.ListOracles(oracle_pb2.ListOraclesRequest()).oracles}
    assert list(listed["drift_far"].required_signals) == ["peak_offset"]

    gen = _generator(pack_suite)
    config = CampaignConfig(
        subject="drift_cart", model="cartpole-ppo", seed=3, budget={"max_executions": 24}, batch_size=12
    )
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(campaign_id="drift-1", spec=config.to_proto()))
    events = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.status.campaign_id)))
    final = events[-1].status
    assert final.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, events[-1].message
    rows = [r.execution for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id="drift-1"))]
    assert len(rows) == 24
    verdicts = set()
    for row in rows:
        (peak,) = row.descriptors  # the pack's oracle judged every execution from the pack's signal
        assert row.reason == f"drift-pack: the cart drifted {peak:.4f} m"
        assert row.margin == pytest.approx(0.5 - peak)
        failed = row.verdict == oracle_pb2.VERDICT_KIND_FAIL
        assert failed == (peak > 0.5)
        verdicts.add(failed)
    assert verdicts == {True, False}  # the push decides: both outcomes occur, so the oracle is not constant


@pytest.mark.parametrize(
    ("subject", "oracle", "missing"),
    [
        ("cartpole", "drift_far", "peak_offset"),  # the pack's oracle on a subject without its signal
        ("drift_cart", "donkey_off_road", "off_road, reached_end, max_abs_deviation, cte_limit"),
    ],
)
def test_an_oracle_whose_signals_the_subject_does_not_record_is_refused_before_anything_runs(
    pack_suite: LocalSuite, subject: str, oracle: str, missing: str
) -> None:
    gen = _generator(pack_suite)
    config = CampaignConfig(subject=subject, model="cartpole-ppo", oracle=oracle, budget={"max_executions": 5})
    with pytest.raises(grpc.RpcError) as err:
        gen.StartCampaign(generator_pb2.StartCampaignRequest(campaign_id=f"refused-{oracle}", spec=config.to_proto()))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details()
    assert details.startswith(f"spec.oracle: oracle {oracle!r} reads signal(s) {missing}, which subject {subject!r}")
    assert "Traceback" not in details
    with pytest.raises(grpc.RpcError) as gone:  # nothing was stored
        gen.GetCampaign(generator_pb2.GetCampaignRequest(campaign_id=f"refused-{oracle}"))
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND


def _description(subject: str, signals: list[str], default_oracle: str) -> simulator_pb2.DescribeEnvironmentResponse:
    info = simulator_pb2.DescribeEnvironmentResponse(default_oracle=default_oracle)
    info.summary.subject = subject
    info.signals.extend(simulator_pb2.SignalInfo(name=s) for s in signals)
    return info


def test_the_check_names_the_field_or_the_default_and_lists_what_exists() -> None:
    listing = oracle_pb2.ListOraclesResponse(
        oracles=[
            oracle_pb2.OracleInfo(name="needs_a_b", required_signals=["a", "b"]),
            oracle_pb2.OracleInfo(name="needs_a", required_signals=["a"]),
        ]
    )
    check_oracle_fits("needs_a", _description("s", ["a"], "needs_a_b"), listing)  # chosen: only a is read
    check_oracle_fits("", _description("s", ["a", "b"], "needs_a_b"), listing)
    with pytest.raises(InvalidArgument, match=r"^spec.oracle: oracle 'needs_a_b' reads signal\(s\) b, which subject "):
        check_oracle_fits("needs_a_b", _description("s", ["a", "c"], "needs_a"), listing)
    with pytest.raises(FailedPrecondition, match=r"^subject 's'\'s default oracle 'needs_a_b' reads signal\(s\) a, b"):
        check_oracle_fits("", _description("s", ["c"], "needs_a_b"), listing)
    with pytest.raises(NotFound, match=r"oracle 'nope' is not installed.*installed oracles: needs_a, needs_a_b$"):
        check_oracle_fits("nope", _description("s", [], "needs_a"), listing)
    with pytest.raises(FailedPrecondition, match=r"default oracle 'gone' is not installed"):
        check_oracle_fits("", _description("s", [], "gone"), listing)


def test_a_search_subject_describes_the_search_signals_its_oracles_read(pack_suite: LocalSuite) -> None:
    simulator = simulator_pb2_grpc.SimulatorServiceStub(client_channel(pack_suite.endpoint("simulator")))
    taxi = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="taxi_large"))
    assert {"abstract_states", "prefix_terminal", "unsafe", "goal"} <= {s.name for s in taxi.signals}
    car = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="mountaincar"))
    assert "unsafe" not in {s.name for s in car.signals}  # mountaincar.yaml declares no search
