"""Search-based testing of RL on one subject, through the services: DFS -> safety suites -> trace fuzzing.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022): Step 1 (Algorithm 1) runs over a simulator
session and stores its reference artifact under the generator's artifact root; Step 2 runs ST, IT(is), AC(1) and
AC(2) as campaigns of the strategy `search_safety` (oracle trace_safety, n repetitions, l agent steps); Step 3 runs
the strategy `trace_fuzzing` (oracle trace_outcome). It prints what it measured and ends with one line per suite,
`suite=<name> tests=<N> invalid=<N> mean_fail_frequency=<f>`. Step 4 (performance testing) and Super Mario Bros.
are not here yet (docs/strategies/search-based.md).

    python bench/replicate_search_based.py --subject taxi_large --model taxi-qlearning
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import campaign_executions, run_campaign
from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import generator_pb2_grpc, simulator_pb2, simulator_pb2_grpc
from common.server import client_channel
from common.space import value_from_proto
from generator_service.config import CampaignConfig
from generator_service.search_based.artifact import reference_document, write_reference
from generator_service.search_based.dfs import depth_first_search
from generator_service.search_based.safety_metrics import measure_suite
from generator_service.search_based.session import SessionEnvironment

SUITES = (("ST", {}), ("IT", {"interval": 2}), ("AC", {"k": 1}), ("AC", {"k": 2}))


def search_reference(
    simulator: simulator_pb2_grpc.SimulatorServiceStub, subject: str, path: Path, max_samples: int
) -> dict[str, Any]:
    """Step 1: the DFS over a session of `subject`, stored at `path`; returns the stored document."""
    info = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=subject), timeout=60)
    if not info.HasField("search"):
        raise SystemExit(f"subject {subject} declares no `search` section (docs/strategies/search-based.md)")
    declaration = info.search
    env = SessionEnvironment(simulator, subject, declaration)
    try:
        result = depth_first_search(env, list(declaration.actions), declaration.repetitions, max_samples=max_samples)
    finally:
        env.close()
    initial = {name: value_from_proto(v) for name, v in declaration.initial.items()}
    document = reference_document(
        result, subject, initial, declaration.seed, list(declaration.actions), declaration.agent_actions
    )
    document["stats"]["round_trips"] = env.round_trips
    write_reference(path, document)
    return document


def run_pipeline(
    local: LocalSuite,
    subject: str,
    model: str,
    max_samples: int = 20_000,
    repetitions: int = 10,
    agent_steps: int = 40,
    generations: int = 50,
    population: int = 50,
) -> dict[str, Any]:
    """DFS, the four suites and trace fuzzing on a running suite; what was measured, as JSON-like data."""
    simulator = simulator_pb2_grpc.SimulatorServiceStub(client_channel(local.endpoint("simulator")))
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
    relative = Path("search") / f"{subject}.json"
    document = search_reference(simulator, subject, local.artifact_root / relative, max_samples)
    report: dict[str, Any] = {
        "subject": subject,
        "model": model,
        "search": {
            "success": document["success"],
            "reference_length": len(document["reference_actions"]),
            "boundary_depths": [b["depth"] for b in document["boundary"]],
            **document["stats"],
        },
        "suites": {},
    }
    if not document["success"]:
        return report
    common = {"subject": subject, "model": model, "seed": 0, "batch_size": 64, "parallelism": 16}
    for suite, extra in SUITES:
        config = CampaignConfig(
            name=f"search-{suite}",
            strategy="search_safety",
            strategy_params={"reference": str(relative), "suite": suite, "agent_steps": agent_steps, **extra},
            oracle="trace_safety",
            repetitions=repetitions,
            budget={"max_executions": 100_000},
            **common,
        )
        status = run_campaign(gen, config)
        measured = measure_suite(campaign_executions(gen, status.campaign_id))
        name = suite + (f"({extra['interval']})" if "interval" in extra else f"({extra['k']})" if "k" in extra else "")
        report["suites"][name] = {
            "tests": measured.tests,
            "invalid": measured.invalid,
            "mean_fail_frequency": measured.mean,
            "per_boundary": measured.per_boundary,
        }
    fuzz = CampaignConfig(
        name="search-fuzzing",
        strategy="trace_fuzzing",
        strategy_params={"reference": str(relative), "generations": generations, "population": population},
        oracle="trace_outcome",
        budget={"max_executions": 1_000_000},
        **{**common, "batch_size": population},
    )
    status = run_campaign(gen, fuzz)
    rows = campaign_executions(gen, status.campaign_id)
    report["fuzzing"] = {
        "executions": len(rows),
        "unsafe": sum(1 for e in rows if e.verdict == 2),
        "distinct_states": len({h for e in rows for h in e.descriptors[2:]}),
        "best_total_reward": max((e.total_reward for e in rows), default=0.0),
        "wall_seconds": status.wall_seconds,
    }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subject", required=True, help="a subject with a `search` section, e.g. taxi_large")
    parser.add_argument("--model", required=True, help="the agent under test, e.g. taxi-qlearning")
    parser.add_argument("--max-samples", type=int, default=20_000, help="DFS budget in sampled transitions")
    parser.add_argument("--repetitions", type=int, default=10, help="n: runs per safety test case")
    parser.add_argument("--agent-steps", type=int, default=40, help="l: agent steps after a prefix")
    parser.add_argument("--generations", type=int, default=50, help="g: trace-fuzzing generations")
    parser.add_argument("--population", type=int, default=50, help="p: trace-fuzzing population")
    parser.add_argument("--out", type=Path, default=None, help="write the measurements as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with LocalSuite(
            store_url=f"sqlite:///{root / 'store.db'}",
            log_dir=root / "logs",
            report_root=root / "reports",
            artifact_root=root / "artifacts",
        ) as local:
            report = run_pipeline(
                local,
                args.subject,
                args.model,
                args.max_samples,
                args.repetitions,
                args.agent_steps,
                args.generations,
                args.population,
            )
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    for name, suite in report["suites"].items():
        print(
            f"suite={name} tests={suite['tests']} invalid={suite['invalid']} "
            f"mean_fail_frequency={suite['mean_fail_frequency']:.3f}"
        )
    return 0 if report["search"]["success"] else 1


if __name__ == "__main__":
    sys.exit(main())
