"""Search-based testing of RL ("Search-Based Testing of Reinforcement Learning", IJCAI-ECAI 2022): the DFS of
Algorithm 1 on the paper's Figure 2 example, the safety suites' sizes and the trace-fuzzing operators."""

from __future__ import annotations

import numpy as np
import pytest

from generator_service.search_based.dfs import (
    ENDED,
    GOAL,
    ONGOING,
    UNSAFE,
    Visit,
    depth_first_search,
    repetitions_for,
    shortest_reference_search,
)

A, B = 0, 1
# A graph that reproduces the worked example of Figure 2 (Section 3): from s0 the DFS tries a before b; s4, s5 and
# s9 are unsafe, s10 is the goal; s2's a leads back to s0 and s8's a back to s7 (visited: not explored again).
FIGURE_2 = {
    "s0": {A: "s1"},
    "s1": {A: "s2", B: "s6"},
    "s2": {A: "s0", B: "s3"},
    "s3": {A: "s4", B: "s5"},
    "s6": {A: "s7"},
    "s7": {A: "s8", B: "s10"},
    "s8": {A: "s7", B: "s9"},
}
KINDS = {"s4": UNSAFE, "s5": UNSAFE, "s9": UNSAFE, "s10": GOAL}


class GraphEnvironment:
    """A deterministic graph as a SearchEnvironment; a missing edge is a self-loop (visited, so skipped)."""

    def __init__(self, edges: dict[str, dict[int, str]], kinds: dict[str, str]) -> None:
        self.edges, self.kinds, self.samples = edges, kinds, 0

    def root(self) -> Visit:
        return Visit("s0", ONGOING, 0.0, "s0")

    def sample(self, state: Visit, action: int) -> Visit:
        self.samples += 1
        nxt = self.edges.get(state.handle, {}).get(action, state.handle)
        return Visit(nxt, self.kinds.get(nxt, ONGOING), float(nxt[1:]), nxt)


def test_algorithm_1_reproduces_figure_2() -> None:
    result = depth_first_search(GraphEnvironment(FIGURE_2, KINDS), [A, B])
    assert result.success and result.stats.stopped == "goal"
    assert result.states == ["s0", "s1", "s6", "s7", "s10"]  # τ_ref = ⟨s0,a,s1,b,s6,a,s7,b,s10⟩
    assert result.actions == [A, B, A, B]
    assert [b.key for b in result.boundary] == ["s1", "s7"]
    assert [b.depth for b in result.boundary] == [1, 3]  # DB
    assert result.rewards == [1.0, 6.0, 7.0, 10.0]  # recorded when sampled
    assert result.stats.explored == 6  # {s2, s3, s4, s5, s8, s9}


def test_search_stops_at_its_budget_and_when_no_goal_is_reachable() -> None:
    stopped = depth_first_search(GraphEnvironment(FIGURE_2, KINDS), [A, B], max_samples=3)
    assert not stopped.success and stopped.stats.stopped == "budget" and stopped.stats.samples == 3
    no_goal = depth_first_search(GraphEnvironment(FIGURE_2, {**KINDS, "s10": ENDED}), [A, B])
    assert not no_goal.success and no_goal.stats.stopped == "exhausted"


class TimeLimitedGraph(GraphEnvironment):
    """A graph whose episodes end (a time limit) after `limit` steps: the handle carries the depth."""

    def __init__(self, edges: dict[str, dict[int, str]], kinds: dict[str, str], limit: int) -> None:
        super().__init__(edges, kinds)
        self.limit = limit

    def root(self) -> Visit:
        return Visit("s0", ONGOING, 0.0, ("s0", 0))

    def sample(self, state: Visit, action: int) -> Visit:
        self.samples += 1
        node, depth = state.handle
        nxt = self.edges.get(node, {}).get(action, node)
        kind = self.kinds.get(nxt, ONGOING)
        if kind == ONGOING and depth + 1 >= self.limit:
            kind = ENDED
        return Visit(nxt, kind, 0.0, (nxt, depth + 1))


def test_a_state_first_reached_at_the_time_limit_is_explored_again_from_a_shorter_prefix() -> None:
    # a's detour reaches m only at the limit (a dead end there); b reaches m at once, and m's a is the goal
    edges = {"s0": {A: "p1", B: "m"}, "p1": {A: "p2"}, "p2": {A: "m"}, "m": {A: "g"}}
    kinds = {"g": GOAL}
    printed = depth_first_search(TimeLimitedGraph(edges, kinds, 3), [A, B], revisit_shorter=False)
    assert not printed.success and printed.stats.stopped == "exhausted"  # the global rule never comes back to m
    result = depth_first_search(TimeLimitedGraph(edges, kinds, 3), [A, B])
    assert result.success and result.actions == [B, A] and result.states == ["s0", "m", "g"]
    assert result.boundary == []  # s0's first successor p1 failed, but s0 is never a boundary state


# a's branch is a 4-action detour to the goal, which the first DFS takes; b's is 2 actions, past an unsafe state
# (s1-s3 the detour, s4 then unsafe s5 or the goal s8)
DETOUR = {"s0": {A: "s1", B: "s4"}, "s1": {A: "s2"}, "s2": {A: "s3"}, "s3": {A: "s8"}, "s4": {A: "s5", B: "s8"}}
DETOUR_KINDS = {"s8": GOAL, "s5": UNSAFE}


def test_the_shortest_reference_bisects_the_horizon_down_to_the_shortest_goal_trace() -> None:
    first = depth_first_search(GraphEnvironment(DETOUR, DETOUR_KINDS), [A, B])
    assert first.actions == [A, A, A, A] and first.boundary == []
    env = GraphEnvironment(DETOUR, DETOUR_KINDS)
    result = shortest_reference_search(env, [A, B])
    assert result.success and result.stats.stopped == "goal"
    assert result.actions == [B, B] and result.states == ["s0", "s4", "s8"]
    assert [(b.key, b.depth) for b in result.boundary] == [("s4", 1)]  # its first successor, s5, is unsafe
    assert result.stats.samples == env.samples > first.stats.samples  # every search's samples are counted
    horizon_one = depth_first_search(GraphEnvironment(DETOUR, DETOUR_KINDS), [A, B], max_depth=1)
    assert not horizon_one.success and horizon_one.stats.stopped == "exhausted"  # so 2 is the shortest


def test_the_shortest_reference_keeps_the_best_trace_when_its_budget_runs_out() -> None:
    result = shortest_reference_search(GraphEnvironment(DETOUR, DETOUR_KINDS), [A, B], max_samples=5)
    assert result.success and result.actions == [A, A, A, A]  # the first search's 4 samples, then 1 more
    assert result.stats.stopped == "budget" and result.stats.samples == 5


def test_repetitions_follow_rep_c_p() -> None:
    assert repetitions_for(0.9, 0.1) == 22  # the paper's worked example
    assert repetitions_for(0.9, 1.0) == 1
    with pytest.raises(ValueError, match="confidence"):
        repetitions_for(1.0, 0.5)


REFERENCE = {
    "format": "gauntlet.search_reference.v1",
    "success": True,
    "initial": {"x": 0.0},
    "seed": 0,
    "agent_actions": 3,
    "reference_actions": [0, 1, 2, 0, 1, 2, 0, 1],
    "boundary": [{"depth": 1, "state": [1]}, {"depth": 5, "state": [5]}],
}


@pytest.mark.parametrize("k", [1, 2])
def test_suite_sizes(k: int) -> None:
    from generator_service.search_based.suites import suite_cases

    depths = len(REFERENCE["boundary"])
    assert len(suite_cases(REFERENCE, "ST")) == depths
    assert len(suite_cases(REFERENCE, "AC", k=k)) == 3**k * depths  # |AC(k)| = |A|^k·|DB|
    it = suite_cases(REFERENCE, "IT", interval=2)
    assert len(it) == 4 + 5  # depth 1: lengths 0..3 (offsets -2 and -1 both clip to 0); depth 5: lengths 3..7
    assert [a for a, meta in suite_cases(REFERENCE, "ST")] == [[0], [0, 1, 2, 0, 1]]
    ac = suite_cases(REFERENCE, "AC", k=k)
    assert all(
        len(a) == max(d - k, 0) + k for a, meta in ac for d in [REFERENCE["boundary"][meta["boundary"]]["depth"]]
    )


def test_trace_operators_keep_traces_well_formed() -> None:
    from generator_service.search_based.trace_fuzzing import crossover, fitness, mutate

    rng = np.random.default_rng(0)
    traces = [[int(a) for a in rng.integers(4, size=int(n))] for n in rng.integers(1, 30, size=200)]
    for first, second in zip(traces, traces[1:]):
        child = mutate(first, 4, rng, effect_size=15, stop=0.2)
        assert child and all(isinstance(a, int) and 0 <= a < 4 for a in child)
        mixed = crossover(first, second, rng)
        assert mixed and all(0 <= a < 4 for a in mixed)
        if min(len(first), len(second)) >= 2:  # a cut i in 1..min-1: the first i actions of one, then the other's
            assert any(mixed == first[:i] + second[i:] for i in range(1, min(len(first), len(second))))
    assert mutate([1], 4, np.random.default_rng(1), effect_size=1, stop=1.0)  # never empties a trace
    scores = fitness([10.0, 5.0, 0.0], [-4.0, -2.0, 0.0], [3, 0, 6], (2.0, 1.5, 1.0))
    assert scores == [pytest.approx(2 * 0.5 + 1.5 + 0.0), pytest.approx(0 + 0.75 + 0.5), pytest.approx(2 + 0 + 1)]


def test_random_state_suite_draws_prefixes_of_states_on_the_reference_before_the_goal() -> None:
    from generator_service.search_based.suites import suite_cases

    cases = suite_cases(REFERENCE, "RS", count=200, rng=np.random.default_rng(3))
    lengths = [meta["prefix_length"] for _, meta in cases]
    assert len(cases) == 200 and set(lengths) == set(range(len(REFERENCE["reference_actions"])))  # 0..|τ_ref|−1
    assert all(a == REFERENCE["reference_actions"][: meta["prefix_length"]] for a, meta in cases)
    assert len(suite_cases(REFERENCE, "RS")) == len(REFERENCE["boundary"])  # count 0: as many as |DB|


def test_performance_cases_follow_algorithms_2_and_3() -> None:
    from generator_service.search_based.performance import performance_cases

    traces = [[0] * 45, [1] * 25, [2] * 65, [0, 1] * 30]  # lengths 45, 25, 65, 60
    simple = performance_cases(traces, "simple", 2, 20, np.random.default_rng(0))
    assert [(p, agent) for p, agent, _ in simple] == [([], True)] + [(t, False) for t in traces]
    robust = performance_cases(traces, "robust", 2, 20, np.random.default_rng(0))
    # pl = 20 (4 traces long enough), 40 (3), 60 (2); at 80 none: too few, Algorithm 3 stops
    assert sorted({meta["pl"] for _, _, meta in robust}) == [20, 40, 60]
    for prefix, agent, meta in robust:
        trace = traces[meta["trace"]]
        assert len(trace) >= meta["pl"]
        assert prefix == (trace[: meta["pl"]] if agent else trace)  # the agent takes over at s_pl; R_t: whole trace
    assert sum(1 for _, agent, _ in robust if agent) == 3 * 2  # n_test agent tests per length


def test_fittest_traces_and_performance_are_measured_from_stored_executions() -> None:
    from analysis_service.performance_testing import measure_performance, pearson
    from common.generated.gauntlet.v1 import generator_pb2
    from generator_service.search_based.trace_fuzzing import fittest_traces

    def execution(actions: list[int], labels: dict[str, str], descriptors: list[float], reward: float = 0.0):
        e = generator_pb2.Execution(total_reward=reward)
        e.test_case.action_trace.actions.extend(actions)
        e.test_case.action_trace.labels.update(labels)
        e.descriptors.extend(descriptors)
        return e

    fuzz = [
        execution([0], {"generation": "0"}, [9.0, 0.0, 1.0, 2.0]),  # the seed: not part of T_fit
        execution([1], {"generation": "1"}, [1.0, 0.0, 1.0, 2.0]),  # states seen in generation 0: fc 0
        execution([2], {"generation": "1"}, [1.0, 0.0, 7.0]),  # a new state: the fittest
        execution([3], {"generation": "2"}, [1.0, -5.0, 8.0]),
        execution([4], {"generation": "2"}, [1.0, 0.0, 9.0]),  # same coverage and reward, no negative: fittest
    ]
    assert fittest_traces(fuzz) == [[2], [4]]
    perf = [
        execution([], {"role": "agent", "pl": "0"}, [], 3.0),
        execution([1], {"role": "trace", "pl": "0"}, [], 2.0),
        execution([2], {"role": "trace", "pl": "0"}, [], 4.0),
        execution([1], {"role": "agent", "pl": "20"}, [], 1.0),
        execution([1, 2], {"role": "trace", "pl": "20"}, [], 5.0),
    ]
    measured = measure_performance((e.test_case.action_trace.labels, e.total_reward) for e in perf)
    assert measured.agent == {0: 3.0, 20: 1.0} and measured.traces == {0: 3.0, 20: 5.0}
    assert pearson([0.1, 0.2, 0.3], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert np.isnan(pearson([0.1, 0.2, 0.3], [1.0, 1.0, 1.0]))  # one agent: a constant performance side


def test_a_suite_is_measured_by_fail_frequency_and_accumulated_reward_over_its_valid_tests() -> None:
    from common.generated.gauntlet.v1 import generator_pb2, oracle_pb2
    from generator_service.search_based.safety_metrics import measure_suite

    def execution(case: str, boundary: str, failed: int, reward: float, invalid: bool = False):
        e = generator_pb2.Execution(repetitions=4, failed_repetitions=failed, total_reward=reward)
        e.test_case.id = case
        e.test_case.action_trace.labels["boundary"] = boundary
        e.verdict = oracle_pb2.VERDICT_KIND_INVALID if invalid else oracle_pb2.VERDICT_KIND_PASS
        return e

    measured = measure_suite(
        [execution("a", "0", 1, 10.0), execution("b", "0", 3, 30.0), execution("c", "1", 4, 2.0, invalid=True)]
    )
    assert (measured.tests, measured.invalid) == (3, 1)
    assert measured.mean == pytest.approx(0.5) and measured.per_boundary == {0: 0.5}
    assert measured.mean_reward == pytest.approx(20.0)  # the invalid test's reward is not counted
