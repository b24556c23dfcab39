"""RunEpisodesRequest.batch_results: a lock-step's results in one message, the same results as one per message.

The simulator and agent are real processes on loopback (cli.launcher.LocalSuite)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import common_pb2, simulator_pb2, simulator_pb2_grpc
from common.server import client_channel
from common.space import ParameterSpace
from simulator_service.result_messages import ResultMessages


def _result(case: str, payload: int = 0) -> common_pb2.EpisodeResult:
    result = common_pb2.EpisodeResult(test_case_id=case, steps=1)
    if payload:
        result.signals["observations"].data = b"x" * payload
    return result


def test_results_go_one_per_message_unless_batched() -> None:
    single = ResultMessages(batched=False)
    assert [m.result.test_case_id for m in single.add(_result("a"))] == ["a"]
    assert single.flush() == []
    batched = ResultMessages(batched=True, max_bytes=1000)
    assert batched.add(_result("a")) == [] and batched.add(_result("b")) == []
    [message] = batched.flush()
    assert [r.test_case_id for r in message.results] == ["a", "b"] and not message.HasField("result")
    assert batched.flush() == []
    # a result that would take the message past max_bytes sends what was collected first
    assert batched.add(_result("c", 600)) == []
    [full] = batched.add(_result("d", 600))
    assert [r.test_case_id for r in full.results] == ["c"]
    assert [r.test_case_id for r in batched.flush()[0].results] == ["d"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    root = tmp_path_factory.mktemp("batch-results")
    with LocalSuite(
        store_url=f"sqlite:///{root / 'store.db'}",
        log_dir=root / "logs",
        artifact_root=root,
        roles=frozenset({"agent", "simulator"}),
        agent_models=("cartpole-ppo",),
    ) as local:
        yield local


def _run(sim: simulator_pb2_grpc.SimulatorServiceStub, cases: list, batched: bool, max_steps: int) -> tuple[list, int]:
    request = simulator_pb2.RunEpisodesRequest(
        subject="cartpole",
        test_cases=cases,
        seed=11,
        repetitions=2,
        parallelism=16,
        max_steps=max_steps,
        invalid_as_results=True,
        batch_results=batched,
        trace=common_pb2.TraceSpec(signals=["final_observation"]),
    )
    request.model.name = "cartpole-ppo"
    messages = list(sim.RunEpisodes(request, timeout=300))
    results = [r for m in messages for r in (m.results if batched else [m.result])]
    if not batched:
        assert all(not m.results for m in messages)
    return sorted((r.SerializeToString(deterministic=True) for r in _timeless(results)), key=bytes), len(messages)


def _timeless(results: list[common_pb2.EpisodeResult]) -> list[common_pb2.EpisodeResult]:
    for r in results:
        r.wall_seconds = 0.0  # the only field that differs between two runs
    return results


@pytest.mark.parametrize("max_steps", [1, 0])  # one-step episodes (all end together), and the subject's own length
def test_batched_results_are_the_same_results_in_fewer_messages(suite: LocalSuite, max_steps: int) -> None:
    sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(suite.endpoint("simulator")))
    space = ParameterSpace.from_proto(
        sim.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpole")).parameter_space
    )
    cases = [
        space.test_case_to_proto(f"c{i}", {"x": -0.8 + 0.04 * i, "x_dot": 0.0, "theta": 0.0, "theta_dot": 0.0})
        for i in range(40)
    ]
    cases.append(space.test_case_to_proto("bad", {"x": 2.0, "x_dot": 0.0, "theta": 0.0, "theta_dot": 0.0}))
    one_each, singles = _run(sim, cases, batched=False, max_steps=max_steps)
    together, messages = _run(sim, cases, batched=True, max_steps=max_steps)
    assert together == one_each and len(one_each) == 81  # 40 cases x 2 repetitions + the invalid one
    assert singles == 81
    assert messages < singles / 4 if max_steps == 1 else messages < singles
