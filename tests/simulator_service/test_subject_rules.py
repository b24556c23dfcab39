"""Subject rules in the contract: DescribeEnvironment declares a subject's validity rules and search operators, and
the generator builds them from that alone (never from a subject file of its own).

The end-to-end tests run a simulator whose subject folder and rule plug-in exist only in its own environment
(GAUNTLET_SUBJECT_PATH, PYTHONPATH), and a generator started elsewhere without them.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from cli.launcher import LocalSuite
from common.domain.operators import OperatorSpec
from common.domain.rules import RuleSpec, SubjectRules
from common.errors import FailedPrecondition
from common.generated.gauntlet.v1 import (
    generator_pb2,
    generator_pb2_grpc,
    oracle_pb2,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.seeding import derive_seed
from common.server import client_channel
from generator_service.config import CampaignConfig
from generator_service.strategies import make_strategy
from generator_service.surrogates.search import subject_validity
from simulator_service.subject import SUBJECT_PATH_ENV, SubjectError, get_subject, load_subject_file, load_subjects

ROOT = Path(__file__).resolve().parents[2]
TAXI_YAML = ROOT / "subjects" / "taxi" / "taxi_large.yaml"
# A rule plug-in installed only where the simulator runs: a module and the dist-info that declares its entry point
ZIGZAG_MODULE = """
from common.domain.validators import Validator


def zigzag(options, names):
    def check(values):
        return [] if values.get("taxi_row", 0) % 2 == 0 else ["taxi_row must be even (zigzag)"]

    return Validator("zigzag", "taxi_row is even", check)
"""
INDAGO = {"setting": "hc_rnd", "time_budget_s": 0, "max_iterations": 10, "neighbourhood": 10, "mutation_scale": 0.5}


def describe(rules: SubjectRules) -> simulator_pb2.DescribeEnvironmentResponse:
    """The part of DescribeEnvironment the simulator fills from a subject's rules (simulator_service/server.py)."""
    return simulator_pb2.DescribeEnvironmentResponse(
        summary=simulator_pb2.EnvironmentSummary(subject=rules.subject),
        parameter_space=rules.space.to_proto(),
        **rules.to_proto_fields(),
    )


# -- the declarations and their building, in process ------------------------------------------------------------
def test_every_subject_s_rules_survive_describe_environment_and_judge_alike() -> None:
    rng = np.random.default_rng(0)
    declared = 0
    for subject in load_subjects().values():
        received = SubjectRules.from_description(describe(subject.rules))
        assert received == subject.rules, subject.name
        validity = subject_validity(subject.space, received)
        assert set(validity.operators) == set(subject.operators), subject.name
        declared += len(received.rules)
        if not received.rules:
            continue
        for _ in range(30):  # the generator's rules reject exactly what the simulator's reject
            values = subject.space.sample(rng)
            assert validity.problems(values) == subject.violations(values), subject.name
    assert declared >= 4  # taxi_large, parking, donkey, donkey_rq4
    taxi = describe(get_subject("taxi_large").rules)
    assert [(r.kind, r.text) for r in taxi.validity_rules] == [("distinct", "passenger != destination")]
    assert dict(taxi.validity_rules[0].options) == {"parameters": ["passenger", "destination"]}
    donkey = describe(get_subject("donkey").rules)
    assert [(o.parameter, o.kind) for o in donkey.search_operators] == [("track", "donkey_track")]
    assert not describe(get_subject("cartpole").rules).validity_rules  # no rules: legitimately none


def test_rule_and_operator_kinds_not_installed_are_failed_precondition_naming_them(tmp_path: Path) -> None:
    space = get_subject("taxi_large").space
    unknown_rule = SubjectRules("taxi_x", space, (RuleSpec("zigzag", "taxi_row is even", {}),))
    with pytest.raises(FailedPrecondition, match="validity rule 0 of kind 'zigzag'.*installed: distinct"):
        subject_validity(space, unknown_rule)
    unknown_operator = SubjectRules("taxi_x", space, operators=(OperatorSpec("passenger", "swap", {}),))
    with pytest.raises(FailedPrecondition, match="search operator kind 'swap' for parameter 'passenger'"):
        subject_validity(space, unknown_operator)
    bad_options = SubjectRules("taxi_x", space, (RuleSpec("distinct", "", {"parameters": ["passenger", "nope"]}),))
    with pytest.raises(FailedPrecondition, match="unknown parameter.*nope"):
        subject_validity(space, bad_options)
    # the simulator refuses a subject file naming a kind it lacks, naming the file and the entry
    text = TAXI_YAML.read_text().replace("kind: distinct", "kind: zigzag")
    (tmp_path / "taxi.yaml").write_text(text)
    with pytest.raises(SubjectError, match=r"taxi.yaml: validators\[0\]: unknown validator kind 'zigzag'"):
        load_subject_file(tmp_path / "taxi.yaml")


# -- a subject that only the simulator's host has ----------------------------------------------------------------
@pytest.fixture(scope="module")
def simulator_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with subjects taxi_copy (Taxi under a new name, its `distinct` rule kept) and taxi_zigzag (adds a
    rule of kind zigzag), and a folder with the zigzag plug-in installed: both for the simulator only."""
    root = tmp_path_factory.mktemp("simulator_host")
    subjects = root / "subjects"
    subjects.mkdir()
    text = TAXI_YAML.read_text()
    (subjects / "taxi_copy.yaml").write_text(text.replace("subject: taxi_large", "subject: taxi_copy"))
    zigzag = text.replace("subject: taxi_large", "subject: taxi_zigzag").replace(
        "validators:\n", "validators:\n  - {kind: zigzag}\n"
    )
    assert "kind: zigzag" in zigzag
    (subjects / "taxi_zigzag.yaml").write_text(zigzag)
    plugins = root / "plugins"
    (plugins / "zigzag_rule-0.1.dist-info").mkdir(parents=True)
    (plugins / "zigzag_rule.py").write_text(ZIGZAG_MODULE)
    (plugins / "zigzag_rule-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: zigzag-rule\nVersion: 0.1\n"
    )
    (plugins / "zigzag_rule-0.1.dist-info" / "entry_points.txt").write_text(
        "[gauntlet.validators]\nzigzag = zigzag_rule:zigzag\n"
    )
    return root


@pytest.fixture(scope="module")
def split_suite(simulator_only: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSuite]:
    """Oracle, agent and simulator see the extra subjects and plug-in; the generator runs in another folder with
    neither (its environment lacks GAUNTLET_SUBJECT_PATH and the plug-in's path)."""
    logs = tmp_path_factory.mktemp("logs")
    suite = LocalSuite(
        store_url=f"sqlite:///{logs / 'store.db'}", log_dir=logs, artifact_root=tmp_path_factory.mktemp("artifacts")
    )
    model_root = os.environ.get("GAUNTLET_TEST_MODEL_ROOT")
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv(SUBJECT_PATH_ENV, str(simulator_only / "subjects"))
            env.setenv("PYTHONPATH", str(simulator_only / "plugins"))
            oracle = suite.start_service("oracle", "oracle_service")
            agent = suite.start_service("agent", "agent_service", *(["--model-root", model_root] if model_root else []))
            simulator = suite.start_service("simulator", "simulator_service", "--agent-endpoint", agent.endpoint)
        with pytest.MonkeyPatch.context() as env:
            env.delenv(SUBJECT_PATH_ENV, raising=False)
            env.delenv("PYTHONPATH", raising=False)
            env.chdir(tmp_path_factory.mktemp("generator_cwd"))
            suite.start_service(
                "generator",
                "generator_service",
                "--simulator-endpoint",
                simulator.endpoint,
                "--oracle-endpoint",
                oracle.endpoint,
                "--store-url",
                suite.store_url,
                "--artifact-root",
                str(suite.artifact_root),
            )
        yield suite
    finally:
        suite.stop()


@pytest.fixture(scope="module")
def copy_surrogate(split_suite: LocalSuite) -> Path:
    """A tiny Indago surrogate for taxi_copy that rates small passenger and destination locations most likely to
    fail: unconstrained, its search ends at passenger == destination == 0, which the subject's rule forbids."""
    from offline.surrogate_training import TuningGrid, train_surrogate

    space = get_subject("taxi_large").space  # taxi_copy's space (this process cannot load taxi_copy itself)
    rng = np.random.default_rng(0)
    folder = split_suite.artifact_root / "surrogate"  # a campaign names it relative to the generator's root
    folder.mkdir()
    log = folder / "training_log.jsonl.gz"
    with gzip.open(log, "wt") as stream:
        for i in range(300):
            values = space.sample(rng)
            bad = values["passenger"] + values["destination"] <= 3
            row = {"episode": i + 1, "timestep": 10 * i, "config": values, "reward": 0.0, "steps": 10}
            stream.write(json.dumps({**row, "verdict": "fail" if bad else "pass", "margin": -0.5 if bad else 0.5}))
            stream.write("\n")
    grid = TuningGrid("one", (5.0,), (1,), 1)
    trained = train_surrogate(log, space, subject="taxi_copy", grid=grid, out_dir=folder / "artifact")
    # the same surrogate for taxi_zigzag (same space): a surrogate is refused on a subject it was not trained for
    train_surrogate(log, space, subject="taxi_zigzag", grid=grid, out_dir=folder / "artifact_zigzag")
    return trained


def test_a_subject_only_on_the_simulator_is_searched_with_its_rule(
    split_suite: LocalSuite, copy_surrogate: Path
) -> None:
    generator_pid = split_suite.services["generator"].process.pid
    assert SUBJECT_PATH_ENV.encode() not in Path(f"/proc/{generator_pid}/environ").read_bytes()
    with pytest.raises(KeyError):
        get_subject("taxi_copy")  # nor does this process know it
    simulator = simulator_pb2_grpc.SimulatorServiceStub(client_channel(split_suite.endpoint("simulator")))
    described = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="taxi_copy"))
    assert [r.kind for r in described.validity_rules] == ["distinct"]

    config = CampaignConfig(
        subject="taxi_copy",
        model="taxi-qlearning",
        strategy="indago",
        strategy_params={"surrogate": str(copy_surrogate.relative_to(split_suite.artifact_root)), **INDAGO},
        seed=4,
        budget={"max_executions": 10},
        batch_size=10,
        parallelism=10,
    )
    # the test can fail: without the rule, the campaign's strategy would ask passenger == destination every time
    unconstrained = make_strategy(
        "indago",
        get_subject("taxi_large").space,
        derive_seed(config.seed, "strategy"),
        {"surrogate": str(copy_surrogate), **INDAGO},
    ).ask(10)
    assert sum(v["passenger"] == v["destination"] for v in unconstrained) >= 5

    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(split_suite.endpoint("generator")))
    started = gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()), timeout=120).status
    events = list(gen.WatchCampaign(generator_pb2.WatchCampaignRequest(campaign_id=started.campaign_id), timeout=300))
    status = events[-1].status
    assert status.state == generator_pb2.CAMPAIGN_STATE_COMPLETED, status.error
    assert status.stop_reason == "max_executions"
    rows = [
        r.execution
        for r in gen.ListExecutions(generator_pb2.ListExecutionsRequest(campaign_id=status.campaign_id), timeout=60)
    ]
    assert len(rows) == 10
    assert not [r for r in rows if r.verdict == oracle_pb2.VERDICT_KIND_INVALID]
    pairs = [(r.test_case.values["passenger"].integer, r.test_case.values["destination"].integer) for r in rows]
    assert all(p != d for p, d in pairs), pairs
    assert all(min(p, d) == 0 for p, d in pairs), pairs  # the search still went where the surrogate points


def test_a_rule_kind_the_generator_lacks_is_failed_precondition_naming_it(
    split_suite: LocalSuite, copy_surrogate: Path
) -> None:
    simulator = simulator_pb2_grpc.SimulatorServiceStub(client_channel(split_suite.endpoint("simulator")))
    described = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="taxi_zigzag"))
    assert [r.kind for r in described.validity_rules] == ["zigzag", "distinct"]  # the simulator has the plug-in
    config = CampaignConfig(
        subject="taxi_zigzag",
        model="taxi-qlearning",
        strategy="indago",
        strategy_params={
            "surrogate": str((copy_surrogate.parent / "artifact_zigzag").relative_to(split_suite.artifact_root)),
            **INDAGO,
        },
        budget={"max_executions": 10},
    )
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(split_suite.endpoint("generator")))
    with pytest.raises(grpc.RpcError) as refused:
        gen.StartCampaign(generator_pb2.StartCampaignRequest(spec=config.to_proto()), timeout=120)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = refused.value.details()
    assert "'zigzag'" in details and "taxi_zigzag" in details and "gauntlet.validators" in details, details
    assert "Traceback" not in details
