"""The campaign pipeline's stages one at a time (generator_service/pipeline/): plan, execute, judge, record; and the
typed test case they pass along (common/test_case.py)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from cli.launcher import LocalSuite
from common.generated.gauntlet.v1 import common_pb2, oracle_pb2, simulator_pb2
from common.seeding import derive_seed, strategy_seed
from common.space import ParameterSpace
from common.test_case import STORED_TRACE_KEY, ActionTrace, TestCase, trace_case
from generator_service.config import CampaignConfig
from generator_service.pipeline.execute import Executor, Ran, ShardFailed, shards
from generator_service.pipeline.judge import Judge, majority
from generator_service.pipeline.plan import (
    Batch,
    PlannedCase,
    Planner,
    ReplayMismatch,
    rebuild_strategy,
    results_of,
    stored_batches,
)
from generator_service.pipeline.record import Recorder
from generator_service.simulators import SimulatorPool
from generator_service.store import CampaignStore, ExecutionRow
from generator_service.strategies import make_strategy

CARTPOLE = {"x": 0.1, "x_dot": 0.0, "theta": 0.01, "theta_dot": 0.0}


def cartpole_info() -> simulator_pb2.DescribeEnvironmentResponse:
    """A DescribeEnvironment answer for CartPole's four reals (what build_strategy reads: the space, no rules)."""
    space = ParameterSpace.from_config(
        [{"name": n, "kind": "real", "low": -0.05, "high": 0.05} for n in ("x", "x_dot", "theta", "theta_dot")]
    )
    return simulator_pb2.DescribeEnvironmentResponse(parameter_space=space.to_proto())


def row(case: PlannedCase, verdict: str = "pass", batch: int = 1) -> ExecutionRow:
    return ExecutionRow(
        case.id, case.position, batch, case.case.to_stored(), verdict, 0.5, 10, 10.0, (1.0,), "ok", 1, 0, 0.1
    )


# -- the typed test case -------------------------------------------------------------------------------------------
def test_a_test_case_is_stored_in_the_format_earlier_versions_wrote_and_read_back() -> None:
    # what an earlier version stored for a safety-suite test: the trace under the reserved key, with provenance
    old = {
        "taxi_row": 8,
        "passenger": 0,
        STORED_TRACE_KEY: {
            "actions": [0, 2],
            "agent_steps": 40,
            "reset_seed": 0,
            "artifact": "a.json",
            "boundary": 1,
        },
    }
    case = TestCase.from_stored(json.loads(json.dumps(old)))
    assert case.values == {"taxi_row": 8, "passenger": 0}  # the trace is no parameter value
    assert case.action_trace == ActionTrace((0, 2), 40, 0, "a.json", None, {"boundary": 1})
    assert case.to_stored() == old and json.dumps(case.to_stored()) == json.dumps(old)  # same keys, same order
    assert TestCase.from_stored({"x": 0.1}) == TestCase({"x": 0.1})  # a plain row has no trace
    made = trace_case({"taxi_row": 8, "passenger": 0}, [0, 2], 40, 0, artifact="a.json", boundary=1)
    assert made == case and made.same_as(case)
    assert not made.same_as(trace_case({"taxi_row": 8, "passenger": 0}, [0, 3], 40, 0, artifact="a.json", boundary=1))


def test_a_test_case_goes_on_the_wire_with_its_trace_in_its_own_field() -> None:
    space = ParameterSpace.from_config([{"name": "taxi_row", "kind": "integer", "low": 0, "high": 17}])
    msg = trace_case({"taxi_row": 3}, [1, 1], 5, 7, prefix_length=2, mode="simple").to_proto(space, "t0000001")
    assert msg.id == "t0000001" and set(msg.values) == {"taxi_row"} and msg.values["taxi_row"].integer == 3
    trace = msg.action_trace
    assert list(trace.actions) == [1, 1] and trace.agent_steps == 5 and trace.reset_seed == 7
    assert trace.prefix_length == 2 and dict(trace.labels) == {"mode": "simple"}
    assert not TestCase({"taxi_row": 3}).to_proto(space, "t").HasField("action_trace")
    assert trace.agent_subject == ""  # the agent acts in the campaign's subject


def test_a_traces_agent_subject_is_stored_and_sent_but_is_no_label() -> None:
    """Issue 29: the subject variant an agent with another action set acts in after the prefix."""
    space = ParameterSpace.from_config([{"name": "noop_frames", "kind": "integer", "low": 0, "high": 60}])
    made = trace_case({"noop_frames": 0}, [0, 1], 40, 0, agent_subject="mario_1_1_basic", suite="ST")
    stored = made.to_stored()
    assert stored["action_trace"]["agent_subject"] == "mario_1_1_basic"
    back = TestCase.from_stored(json.loads(json.dumps(stored)))
    assert back == made and back.action_trace is not None and dict(back.action_trace.labels) == {"suite": "ST"}
    msg = made.to_proto(space, "t0000001").action_trace
    assert msg.agent_subject == "mario_1_1_basic" and dict(msg.labels) == {"suite": "ST"}


# -- plan ----------------------------------------------------------------------------------------------------------
def test_plan_stores_each_batch_as_asked_and_numbers_the_cases(tmp_path: Path) -> None:
    store = CampaignStore(f"sqlite:///{tmp_path / 's.db'}")
    store.create_campaign("c", "n", {})
    config = CampaignConfig(subject="cartpole", model="m", seed=4, budget={"max_executions": 9})
    planner = Planner(rebuild_strategy(config, cartpole_info(), [], lambda b: []).strategy, store, "c", [])
    first, second = planner.next_batch(3), planner.next_batch(2)
    assert first is not None and second is not None
    assert [(c.id, c.position) for c in first.cases + second.cases] == [(f"t{i:07d}", i) for i in range(1, 6)]
    assert (first.number, second.number) == (1, 2)
    # the strategy is seeded by the one rule (bench/throughput.py uses it too): the same inputs as made by hand
    by_hand = make_strategy("random", ParameterSpace.from_proto(cartpole_info().parameter_space), strategy_seed(4))
    assert [c.case.values for c in first.cases] == by_hand.ask(3)
    assert strategy_seed(4) == derive_seed(4, "strategy")
    loaded = stored_batches(store, "c")
    assert [b.number for b in loaded] == [1, 2] and [c.case for c in loaded[1].cases] == [c.case for c in second.cases]
    resumed = Planner(planner.strategy, store, "c", loaded)  # numbering goes on after what is stored
    third = resumed.next_batch(1)
    assert third is not None and third.number == 3 and third.cases[0].id == "t0000006"


def test_rebuild_replays_stored_batches_runs_what_is_missing_and_refuses_other_inputs(tmp_path: Path) -> None:
    store = CampaignStore(f"sqlite:///{tmp_path / 's.db'}")
    store.create_campaign("c", "n", {})
    config = CampaignConfig(subject="cartpole", model="m", seed=1, budget={"max_executions": 9})
    planner = Planner(rebuild_strategy(config, cartpole_info(), [], lambda b: []).strategy, store, "c", [])
    planner.next_batch(2), planner.next_batch(2)
    batches = stored_batches(store, "c")
    executed = {c.id: row(c) for c in batches[0].cases}  # batch 2 was never executed
    ran: list[int] = []

    def run_missing(batch: Batch) -> str:
        ran.append(batch.number)
        return "max_steps" if batch.number == 2 else ""

    told: list[int] = []

    def results(batch: Batch) -> list[Any]:
        told.append(batch.number)
        return results_of(batch, executed)

    rebuilt = rebuild_strategy(config, cartpole_info(), batches, results, run_missing)
    assert (ran, told, rebuilt.stop_reason, rebuilt.batches) == ([1, 2], [1, 2], "max_steps", 2)
    # the rebuilt strategy goes on where the first one is: both ask the same next inputs
    assert rebuilt.strategy.ask(2) == planner.strategy.ask(2)
    other = CampaignConfig(subject="cartpole", model="m", seed=2, budget={"max_executions": 9})
    with pytest.raises(ReplayMismatch) as err:
        rebuild_strategy(other, cartpole_info(), batches, results)
    assert err.value.batch == 1


def test_results_leave_out_unexecuted_cases_and_keep_asking_order() -> None:
    cases = [PlannedCase(f"t{i:07d}", i, TestCase({"x": i / 10})) for i in (1, 2, 3)]
    batch = Batch(1, cases)
    rows = {cases[2].id: row(cases[2], "invalid"), cases[0].id: row(cases[0], "fail")}
    out = results_of(batch, rows)
    assert [(r.values, r.failed, r.invalid) for r in out] == [({"x": 0.1}, True, False), ({"x": 0.3}, False, True)]


# -- execute -------------------------------------------------------------------------------------------------------
def test_shards_are_contiguous_and_balanced() -> None:
    cases = [PlannedCase(str(i), i, TestCase({})) for i in range(7)]
    assert [[c.position for c in s] for s in shards(cases, 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert len(shards(cases[:2], 5)) == 2


def test_execute_runs_a_batch_in_one_call_per_shard_and_returns_invalid_cases_unrun(suite: LocalSuite) -> None:
    pool = SimulatorPool(suite.endpoint("simulator"), streams=2)
    info = pool.call(lambda s: s.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject="cartpole")))
    space = ParameterSpace.from_proto(info.parameter_space)
    config = CampaignConfig(
        subject="cartpole", model="cartpole-ppo", seed=5, repetitions=2, budget={"max_executions": 3}
    )
    executor = Executor("exec-test", config, space, [], pool, threading.Event())
    cases = [
        PlannedCase("t0000001", 1, TestCase(CARTPOLE)),
        PlannedCase("t0000002", 2, TestCase({**CARTPOLE, "theta": 7.0})),  # outside the space
        PlannedCase("t0000003", 3, TestCase({**CARTPOLE, "x": -0.2})),
    ]
    request = executor.request(1, 0, cases)
    assert request.invalid_as_results and request.request_id == "exec-test/batch/1/shard/0"
    items = list(executor.run(1, cases))
    assert not [i for i in items if isinstance(i, ShardFailed)]
    ran = {i.case.id: i for i in items if isinstance(i, Ran)}
    assert set(ran) == {"t0000001", "t0000002", "t0000003"}
    assert "theta=7" in ran["t0000002"].violations[0] and ran["t0000002"].episodes[0].steps == 0
    for cid in ("t0000001", "t0000003"):
        assert not ran[cid].violations and sorted(e.repetition for e in ran[cid].episodes) == [0, 1]
        assert all(e.steps > 0 for e in ran[cid].episodes)


# -- judge ---------------------------------------------------------------------------------------------------------
def test_majority_fails_when_more_than_half_of_the_judged_repetitions_fail() -> None:
    assert majority(["fail", "fail", "pass"]) == "fail"
    assert majority(["fail", "pass"]) == "pass"  # a tie is no majority
    assert majority(["fail", "invalid", "invalid"]) == "fail"  # unjudged repetitions do not vote
    assert majority(["invalid", "invalid"]) == "invalid"


class FakeOracle:
    """An oracle stub that fails an episode whose total reward is below 20, and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def Evaluate(self, request: oracle_pb2.EvaluateRequest, timeout: float) -> oracle_pb2.EvaluateResponse:
        self.calls.append(len(request.episodes))
        kind = {True: oracle_pb2.VERDICT_KIND_FAIL, False: oracle_pb2.VERDICT_KIND_PASS}
        return oracle_pb2.EvaluateResponse(
            verdicts=[
                oracle_pb2.Verdict(
                    test_case_id=e.test_case_id,
                    verdict=kind[e.total_reward < 20],
                    margin=e.total_reward - 20,
                    reason=f"reward {e.total_reward:g}",
                )
                for e in request.episodes
            ]
        )


def test_judge_votes_over_repetitions_and_never_sends_an_invalid_input_to_the_oracle() -> None:
    def episodes(cid: str, *rewards: float) -> list[common_pb2.EpisodeResult]:
        return [
            common_pb2.EpisodeResult(test_case_id=cid, repetition=r, total_reward=x, steps=int(x))
            for r, x in enumerate(rewards)
        ]

    oracle = FakeOracle()
    judge = Judge(oracle, "fake", lambda what, call: call())  # type: ignore[arg-type]
    cases = [PlannedCase(f"t{i:07d}", i, TestCase({"x": float(i)})) for i in (1, 2, 3)]
    ran = [
        Ran(cases[0], episodes("t0000001", 10, 10, 30)),  # 2 of 3 fail
        Ran(cases[1], [common_pb2.EpisodeResult(test_case_id="t0000002", violations=["x=2 is outside [0, 1]"])]),
        Ran(cases[2], episodes("t0000003", 10, 30, 30)),  # 1 of 3 fails
    ]
    rows = judge.judge(4, ran, elapsed=1.5)
    assert rows is not None and oracle.calls == [6]  # one call, the invalid case's result not in it
    assert [(r.test_case_id, r.index, r.batch, r.verdict) for r in rows] == [
        ("t0000001", 1, 4, "fail"),
        ("t0000002", 2, 4, "invalid"),
        ("t0000003", 3, 4, "pass"),
    ]
    assert (rows[0].failed_repetitions, rows[0].repetitions, rows[0].steps) == (2, 3, 50)
    assert rows[0].margin == pytest.approx((-10 - 10 + 10) / 3) and rows[0].reason == "reward 10"
    assert rows[1].reason == "invalid input: x=2 is outside [0, 1]" and rows[1].repetitions == 0
    assert rows[2].reason == "reward 30"  # the reason of a repetition that agrees with the verdict
    only_invalid = judge.judge(4, ran[1:2], elapsed=1.5)
    assert only_invalid is not None and len(only_invalid) == 1 and oracle.calls == [6]
    assert Judge(oracle, "fake", lambda what, call: None).judge(4, ran, 0.0) is None  # type: ignore[arg-type]


# -- record --------------------------------------------------------------------------------------------------------
def test_record_stores_counts_and_announces_then_tells_in_asking_order(tmp_path: Path) -> None:
    store = CampaignStore(f"sqlite:///{tmp_path / 's.db'}")
    store.create_campaign("c", "n", {})
    cases = [PlannedCase(f"t{i:07d}", i, TestCase({"x": i / 10})) for i in (1, 2, 3, 4)]
    store.add_test_cases("c", 1, 1, [(c.id, c.case.to_stored()) for c in cases])
    events: list[tuple[str, str]] = []
    recorder = Recorder(store, "c", lambda kind, message: events.append((kind, message)))
    recorder.begin()
    recorder.record([row(cases[2], "fail"), row(cases[1], "invalid")])
    recorder.record([row(cases[2], "fail"), row(cases[0])])  # a retried batch: t0000003 is not counted again
    assert (recorder.totals.executions, recorder.totals.run, recorder.totals.invalid) == (3, 2, 1)
    assert recorder.totals == store.count("c")
    assert [k for k, _ in events] == ["failure", "progress", "progress"] and events[0][1].startswith("t0000003")
    batch = Batch(1, cases)
    assert recorder.stored_ids(batch) == {"t0000001", "t0000002", "t0000003"}

    class Listener:
        told: list[Any] = []

        def ask(self, n: int) -> list[Any]:
            return []

        def tell(self, results: Any) -> None:
            self.told = list(results)

    listener = Listener()
    recorder.tell(listener, batch)
    assert [(r.values["x"], r.failed, r.invalid) for r in listener.told] == [
        (0.1, False, False),
        (0.2, False, True),
        (0.3, True, False),
    ]  # asking order; t0000004 (not executed) is left out
