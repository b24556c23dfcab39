"""A simulator given several agent endpoints (--agent-endpoint a,b) spreads each batch's lock-step groups over them."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import numpy as np

from cli.launcher import LocalSuite, Service
from common.generated.gauntlet.v1 import common_pb2, simulator_pb2, simulator_pb2_grpc
from common.server import client_channel
from common.tensor import from_tensor


def observations_acted_on(agent: Service) -> float:
    """The agent's gauntlet_agent_observations_total for the CartPole model (0 before its first act)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=10).read().decode()
    match = re.search(r'^gauntlet_agent_observations_total\{model="cartpole-ppo"\} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def run(simulator: Service) -> dict[str, tuple[object, ...]]:
    rng = np.random.default_rng(0)
    names = ("x", "x_dot", "theta", "theta_dot")
    cases = [
        common_pb2.TestCase(id=f"t{i}", values={k: common_pb2.Value(real=float(v)) for k, v in zip(names, row)})
        for i, row in enumerate(rng.uniform(-0.03, 0.03, size=(24, 4)))  # inside every parameter's domain
    ]
    request = simulator_pb2.RunEpisodesRequest(
        subject="cartpole",
        model=common_pb2.ModelRef(name="cartpole-ppo"),
        seed=5,
        parallelism=16,  # two lock-step groups of 8
        test_cases=cases,
        trace=common_pb2.TraceSpec(signals=["observations", "actions"]),
    )
    sim = simulator_pb2_grpc.SimulatorServiceStub(client_channel(simulator.endpoint))
    results = [r.result for r in sim.RunEpisodes(request, timeout=300)]
    assert len(results) == 24 and not any(r.error for r in results)
    return {
        r.test_case_id: (
            r.steps,
            r.total_reward,
            r.terminated,
            r.truncated,
            from_tensor(r.signals["observations"]).tobytes(),
            from_tensor(r.signals["actions"]).tobytes(),
        )
        for r in results
    }


def test_each_lock_step_group_acts_with_its_own_agent_replica_and_the_results_equal_one_agents(
    tmp_path: Path,
) -> None:
    local = LocalSuite(store_url=f"sqlite:///{tmp_path / 'unused.db'}", log_dir=tmp_path)
    try:
        first = local.start_service("agent", "agent_service")
        second = local.start_service("agent-2", "agent_service")
        both = local.start_service(
            "simulator", "simulator_service", "--agent-endpoint", f"{first.endpoint},{second.endpoint}"
        )
        one = local.start_service("simulator-one", "simulator_service", "--agent-endpoint", first.endpoint)

        spread = run(both)
        acted = observations_acted_on(first), observations_acted_on(second)
        assert acted[0] > 0 and acted[1] > 0, acted  # both replicas received Act calls
        assert sum(acted) == sum(r[0] for r in spread.values())  # one observation per agent step, no step twice
        single = run(one)
        assert observations_acted_on(second) == acted[1]  # the one-agent simulator did not reach the second
        assert spread == single
    finally:
        local.stop()
