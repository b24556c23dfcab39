"""Prior Random Testing: Eq. 4 placement, the boundary rule, the fast realization against a literal one, spaces."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from common.space import ParameterSpace
from generator_service.strategies import Result, make_strategy, strategies
from generator_service.strategies.base import StrategyParamError
from generator_service.strategies.prt import DEFAULT_LAMBDA, PRTGenerator, apply_mapping, eq4
from simulator_service.subject import load_subjects

SUBJECTS = load_subjects()
HUGE = 1e9  # lambda so large that Eq. 4 puts every value on the midpoint / the boundary (exactly, or within 1e-9)


def generator_with(points: list[float], lam: float = HUGE, variant: str = "paper", seed: int = 0) -> PRTGenerator:
    g = PRTGenerator(1, np.random.default_rng(seed), lam=lam, variant=variant)
    for p in points:
        g.add([p])
    return g


def as_unit(space: ParameterSpace, cases: list[dict]) -> np.ndarray:
    low, high = space.bounds()
    return (np.array([[c[n] for n in space.names] for c in cases], dtype=float) - low) / (high - low)


# -- a literal transcription of Alg. 1-3 (sorts every time), for checking the O(MN^2) realization ----------
def _literal_place(rng: np.random.Generator, lam: float, where: str, lo: float, hi: float, authors: bool) -> float:
    if where == "left":
        value = eq4(rng.uniform(0.5, 1.0), -hi, hi, lam)  # f(theta | 2*inf - p_1, p_1), inf = 0
    elif where == "right":
        value = eq4(rng.uniform(0.0, 0.5), lo, 2.0 - lo, lam)  # f(theta | p_n, 2*sup - p_n), sup = 1
    else:
        theta = rng.random()
        if authors:
            offset = 0.5 * (1.0 - abs(1.0 - 2.0 * theta) ** lam) * 0.5 * (hi - lo)
            value = lo + offset if theta < 0.5 else hi - offset
        else:
            value = eq4(theta, lo, hi, lam)
        value = min(max(value, lo), hi)
    return min(max(value, 0.0), 1.0)


def _literal_reduction(C: np.ndarray, authors: bool) -> tuple[list[float], list[tuple[str, float, float]]]:
    intervals, where = [], []
    for i in range(C.shape[1]):
        p = np.sort(C[:, i])
        interval, at = 0.0, ("interior", 0.0, 0.0)
        if len(p) > 1:
            d = np.diff(p)
            j = int(np.argmax(d))
            interval, at = (p[j + 1] - p[j]) / 2, ("interior", p[j], p[j + 1])
        if (interval <= p[0]) if authors else (interval < p[0]):
            interval, at = p[0], ("left", 0.0, p[0])
        if (interval <= 1.0 - p[-1]) if authors else (interval < 1.0 - p[-1]):
            interval, at = 1.0 - p[-1], ("right", p[-1], 1.0)
        intervals.append(interval)
        where.append(at)
    return intervals, where


def literal_prt(n: int, dims: int, seed: int, lam: float, variant: str) -> np.ndarray:
    authors = variant == "authors_code"
    rng = np.random.default_rng(seed)
    T = [rng.random(dims)]
    while len(T) < n:
        C = np.array(T)
        tau = (len(T) + 1) ** (-1.0 / dims)
        eps = np.empty(dims)
        todo = list(range(dims))
        while todo:
            intervals, where = _literal_reduction(C, authors)
            if authors:
                early = [i for i in range(len(todo)) if intervals[i] > tau]
                for i in early:
                    eps[todo[i]] = _literal_place(rng, lam, *where[i], authors)
                late = [i for i in range(len(todo)) if i not in early]
                C, todo = C[:, late], [todo[i] for i in late]
                intervals, where = [intervals[i] for i in late], [where[i] for i in late]
                if not todo:
                    break
            k = int(np.argmax(intervals))
            value = _literal_place(rng, lam, *where[k], authors)
            eps[todo[k]] = value
            dist = np.abs(C[:, k] - value)
            if authors:
                q = np.quantile(dist, tau, method="higher")
            else:
                q = np.sort(dist)[min(max(math.ceil(tau * len(dist)), 1), len(dist)) - 1]
            C = np.delete(C[dist <= q], k, axis=1)
            todo.pop(k)
        T.append(eps)
    return np.array(T)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    dims=st.integers(1, 5),
    n=st.integers(2, 40),
    variant=st.sampled_from(["paper", "authors_code"]),
    lam=st.sampled_from([1.0, 3.0, DEFAULT_LAMBDA]),
)
def test_fast_realization_matches_a_literal_transcription(
    seed: int, dims: int, n: int, variant: str, lam: float
) -> None:
    g = PRTGenerator(dims, np.random.default_rng(seed), lam=lam, variant=variant)
    fast = np.array([g.next() for _ in range(n)])
    np.testing.assert_allclose(fast, literal_prt(n, dims, seed, lam, variant), rtol=0, atol=1e-12)


@pytest.mark.parametrize("variant", ["paper", "authors_code"])
@pytest.mark.parametrize("dims,n", [(3, 200), (8, 140)])
def test_fast_realization_matches_past_buffer_growth(variant: str, dims: int, n: int) -> None:
    g = PRTGenerator(dims, np.random.default_rng(21), variant=variant)
    fast = np.array([g.next() for _ in range(n)])
    np.testing.assert_allclose(fast, literal_prt(n, dims, 21, DEFAULT_LAMBDA, variant), rtol=0, atol=1e-12)


def test_sorted_rows_and_owners_stay_consistent() -> None:
    g = PRTGenerator(6, np.random.default_rng(3))
    for _ in range(300):
        g.next()
    pts = g.points
    for d in range(6):
        values, owners = g.sorted_projection(d)
        assert np.all(np.diff(values) >= 0)
        np.testing.assert_array_equal(pts[owners, d], values)
        assert sorted(owners.tolist()) == list(range(300))


# -- Eq. 4 ---------------------------------------------------------------------------------------------
def test_lambda_one_draws_uniformly_inside_the_gap() -> None:
    g = generator_with([0.0, 0.3, 0.9, 1.0], lam=1.0, seed=7)  # widest gap (0.3, 0.9); both boundaries taken
    draws = np.array([g.propose()[0] for _ in range(3000)])
    assert draws.min() >= 0.3 and draws.max() <= 0.9
    assert stats.kstest(draws, "uniform", args=(0.3, 0.6)).pvalue > 0.001


def test_lambda_twenty_matches_the_papers_deviation_probabilities() -> None:
    """Sec. 4.3: with lambda = 20 the deviation |1-2theta|^20 exceeds 10 % w.p. 10.9 % and 2 % w.p. 17.8 %."""
    g = generator_with([0.0, 0.2, 0.8, 1.0], lam=20.0, seed=11)
    deviation = np.abs(np.array([g.propose()[0] for _ in range(6000)]) - 0.5) / 0.3
    for level, p in ((0.10, 0.109), (0.02, 0.178)):
        share = np.mean(deviation > level)
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / 6000), (level, share)


def test_eq4_is_symmetric_and_stays_in_its_interval() -> None:
    assert eq4(0.5, 2.0, 4.0, 20.0) == 3.0
    assert eq4(0.0, 2.0, 4.0, 20.0) == 2.0 and eq4(1.0, 2.0, 4.0, 20.0) == 4.0
    assert eq4(0.3, 0.0, 1.0, 1.0) == pytest.approx(0.3) and eq4(0.8, 0.0, 1.0, 1.0) == pytest.approx(0.8)


# -- the boundary rule (Alg. 2) -------------------------------------------------------------------------
def test_papers_example_picks_the_boundary_then_the_midpoint() -> None:
    """Sec. 3.3: domain [0,1], points {0, 0.1, 0.3, 0.7}: the next point is 1 (interval 0.3 > 0.2), then 0.5."""
    g = generator_with([0.0, 0.1, 0.3, 0.7])
    assert g.next()[0] == 1.0
    assert g.next()[0] == pytest.approx(0.5, abs=1e-9)
    # with the paper's lambda = 20 the same intervals are chosen, the values only scatter inside them
    g = generator_with([0.0, 0.1, 0.3, 0.7], lam=DEFAULT_LAMBDA)
    assert 0.7 < g.next()[0] <= 1.0
    assert 0.3 < g.next()[0] < 0.7


def test_boundary_counts_twice_an_interior_gap() -> None:
    """Sec. 3.4: points {0.3, 0.8}: the interior candidate 0.55 has interval 0.25, the boundary 0 has 0.3."""
    assert generator_with([0.3, 0.8]).next()[0] == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12, unique=True))
def test_next_value_follows_the_largest_interval_rule(points: list[float]) -> None:
    p = sorted(points)
    half = max((b - a) / 2 for a, b in zip(p, p[1:])) if len(p) > 1 else 0.0
    value = generator_with(p).next()[0]
    if 1.0 - p[-1] > max(half, p[0]):
        assert value == 1.0
    elif p[0] > half:
        assert value == 0.0
    else:  # the midpoint of the (first) widest gap
        j = int(np.argmax(np.diff(p)))
        assert value == pytest.approx((p[j] + p[j + 1]) / 2, abs=1e-9)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), subject=st.sampled_from(["cartpole", "humanoid"]))
def test_second_test_goes_to_the_far_boundary_in_every_dimension(seed: int, subject: str) -> None:
    space = SUBJECTS[subject].space
    first, second = as_unit(space, make_strategy("prt", space, seed, {"lam": HUGE}).ask(2))
    np.testing.assert_allclose(second, np.where(first < 0.5, 1.0, 0.0), atol=1e-9)


def test_with_the_default_lambda_the_second_test_is_near_the_far_boundary() -> None:
    space = SUBJECTS["humanoid"].space
    near = []
    for seed in range(10):
        first, second = as_unit(space, make_strategy("prt", space, seed).ask(2))
        near.extend(np.abs(second - np.where(first < 0.5, 1.0, 0.0)) < 0.1)
    assert np.mean(near) > 0.8  # >= 1 - 10.9 % expected per coordinate


# -- the strategy ------------------------------------------------------------------------------------------
def test_registered_with_the_papers_defaults() -> None:
    info = strategies()["prt"]
    assert dict(info.defaults) == {"lam": 20.0, "variant": "paper", "mapping": "hints"}


@pytest.mark.parametrize("subject", ["cartpole", "humanoid"])
def test_same_seed_same_tests_and_batches_do_not_matter(subject: str) -> None:
    space = SUBJECTS[subject].space
    once = make_strategy("prt", space, 5).ask(40)
    batched = make_strategy("prt", space, 5)
    assert batched.ask(7) + batched.ask(0) + batched.ask(33) == once
    assert make_strategy("prt", space, 6).ask(40) != once


def test_tell_changes_nothing() -> None:
    space = SUBJECTS["cartpole"].space
    a, b = make_strategy("prt", space, 2), make_strategy("prt", space, 2)
    for _ in range(3):
        batch = a.ask(5)
        a.tell([Result(v, failed=True, margin=-1.0) for v in batch])
        assert b.ask(5) == batch


@pytest.mark.parametrize("subject,n", [("cartpole", 400), ("humanoid", 150)])
@pytest.mark.parametrize("params", [{}, {"variant": "authors_code"}, {"mapping": "centre"}, {"lam": 1.0}])
def test_every_test_lies_in_the_parameter_space(subject: str, n: int, params: dict) -> None:
    space = SUBJECTS[subject].space
    cases = make_strategy("prt", space, 1, params).ask(n)
    assert len(cases) == n
    for case in cases:
        assert space.violations(case) == []
        assert all(type(v) is float for v in case.values())


def test_centre_hints_concentrate_mountaincar_tests_near_the_centre() -> None:
    space = SUBJECTS["mountaincar"].space
    assert {h.kind for p in space.parameters for h in p.hints} == {"centre"}
    near = {}
    for mapping in ("hints", "identity"):
        u = np.vstack([as_unit(space, make_strategy("prt", space, s, {"mapping": mapping}).ask(300)) for s in range(4)])
        near[mapping] = np.mean(np.abs(u - 0.5) < 0.01)  # uniform: 2 % of the coordinates
    assert near["hints"] > 0.05 and near["hints"] > 2 * near["identity"]
    second = as_unit(space, make_strategy("prt", space, 0, {"lam": HUGE}).ask(2))[1]
    np.testing.assert_allclose(second, 0.5, atol=1e-9)  # the far boundary, mapped onto the centre


def test_centre_mapping_is_the_papers_f1_in_raw_units() -> None:
    space = SUBJECTS["mountaincar"].space
    raw = make_strategy("prt", space, 9, {"mapping": "identity"}).ask(50)
    mapped = make_strategy("prt", space, 9, {"mapping": "centre"}).ask(50)
    for p in space.parameters:
        inf, sup = p.low, p.high
        for r, m in zip(raw, mapped):
            t = r[p.name]
            f1 = (3 * inf + sup) / 2 - t if t <= (inf + sup) / 2 else (inf + 3 * sup) / 2 - t
            assert m[p.name] == pytest.approx(f1, abs=1e-12)


def test_value_hint_maps_the_boundary_onto_the_value_and_keeps_uniformity() -> None:
    cuts = np.array([0.2, 0.2, 0.2])
    np.testing.assert_allclose(apply_mapping(np.array([0.0, 1.0, 0.2]), cuts), [0.2, 0.2, 0.0])
    u = np.random.default_rng(0).random(5000)
    assert stats.kstest(apply_mapping(u, np.full(u.shape, 0.2)), "uniform").pvalue > 0.001
    space = ParameterSpace.from_config([{"name": "x", "low": -1, "high": 3, "hints": [{"value": 2.0}]}])
    second = make_strategy("prt", space, 4, {"lam": HUGE}).ask(2)[1]["x"]
    assert second == pytest.approx(2.0, abs=1e-8)


def test_authors_code_variant_places_on_quarter_points() -> None:
    paper = generator_with([0.0, 1.0])
    authors = generator_with([0.0, 1.0], variant="authors_code")
    assert paper.propose()[0] == pytest.approx(0.5, abs=1e-9)
    quarters = {round(authors.propose()[0], 6) for _ in range(40)}
    assert quarters == {0.25, 0.75}
    space = SUBJECTS["cartpole"].space
    assert make_strategy("prt", space, 3).ask(30) != make_strategy("prt", space, 3, {"variant": "authors_code"}).ask(30)


def test_integer_parameters_are_rounded_and_clipped() -> None:
    space = ParameterSpace.from_config(
        [
            {"name": "lane", "kind": "integer", "low": 0, "high": 5},
            {"name": "x", "low": -1.0, "high": 1.0},
            {"name": "fixed", "kind": "integer", "low": 3, "high": 3},
        ]
    )
    cases = make_strategy("prt", space, 0).ask(200)
    for case in cases:
        assert space.violations(case) == []
        assert type(case["lane"]) is int and case["fixed"] == 3
    assert {c["lane"] for c in cases} == set(range(6))
    first, second = make_strategy("prt", space, 0, {"lam": HUGE}).ask(2)
    assert second["lane"] == (5 if first["lane"] <= 2 else 0)  # the far boundary (raw 2.5 has probability 0)


def test_non_box_spaces_are_refused_naming_the_parameter() -> None:
    space = ParameterSpace.from_config(
        [
            {"name": "x", "low": 0, "high": 1},
            {"name": "weather", "kind": "categorical", "choices": ["sun", "rain"]},
            {"name": "slot", "kind": "integer_set", "values": [1, 4]},
        ]
    )
    with pytest.raises(ValueError, match="'weather'"):
        make_strategy("prt", space, 0)


@pytest.mark.parametrize(
    "params,word",
    [
        ({"lam": 0.5}, "lam"),
        ({"lam": float("nan")}, "lam"),
        ({"lam": True}, "lam"),
        ({"variant": "code"}, "variant"),
        ({"mapping": "middle"}, "mapping"),
        ({"tau": 0.3}, "tau"),
    ],
)
def test_bad_parameters_are_refused(params: dict, word: str) -> None:
    with pytest.raises(StrategyParamError, match=word):
        make_strategy("prt", SUBJECTS["cartpole"].space, 0, params)


def test_value_hint_outside_the_domain_is_refused() -> None:
    space = ParameterSpace.from_config([{"name": "x", "low": 0, "high": 1, "hints": [{"value": 2.0}]}])
    with pytest.raises(ValueError, match="'x'"):
        make_strategy("prt", space, 0)
