"""Indago: encoding, training-progress filter, surrogate training and artifact, refusals, search, baselines."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from common.space import ParameterSpace
from generator_service.strategies import make_strategy
from generator_service.strategies.base import StrategyParamError
from generator_service.surrogates.dataset import filtered_count, kept_indices, load_interaction_log, progress_filter
from generator_service.surrogates.encoding import Encoder
from offline.surrogate_splits import held_out_indices
from offline.surrogate_training import TuningGrid, roc_auc, train_surrogate, train_zoo_surrogate

ROOT = Path(__file__).resolve().parents[2]
SPACE = ParameterSpace.from_config(
    [
        {"name": "x", "low": 0.0, "high": 1.0},
        {"name": "y", "low": -2.0, "high": 2.0},
        {"name": "k", "kind": "integer", "low": 0, "high": 5},
        {"name": "c", "kind": "categorical", "choices": ["a", "b", "c"]},
    ]
)
ONE_RUN = TuningGrid("one", (5.0,), (1,), 1)
FAST = {"time_budget_s": 0, "max_iterations": 8, "neighbourhood": 12, "population": 12}
SETTINGS = ["hc_rnd", "hc_fail", "hc_sal+rnd", "hc_sal+fail", "ga_rnd", "ga_fail", "ga_sal+rnd", "ga_sal+fail"]


def fails(values: dict[str, Any]) -> bool:
    return values["x"] > 0.7


def write_log(path: Path, rows: list[dict[str, Any]]) -> Path:
    with gzip.open(path, "wt") as stream:
        for row in rows:
            stream.write(json.dumps(row) + "\n")
    return path


def synthetic_rows(
    n: int = 600, seed: int = 0, space: ParameterSpace = SPACE, sample: Any = None, failed: Any = fails
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        values = sample(rng) if sample else space.sample(rng)
        bad = failed(values)
        rows.append(
            {
                "episode": i + 1,
                "timestep": 10 * i,
                "config": values,
                "verdict": "fail" if bad else "pass",
                "margin": -0.5 if bad else 0.5,
                "reward": 0.0,
                "steps": 10,
            }
        )
    return rows


@pytest.fixture(scope="module")
def synthetic_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = synthetic_rows()
    for row in rows:  # the regressor learns from margins: closer to the boundary = smaller margin
        row["margin"] = 0.7 - row["config"]["x"]
    return write_log(tmp_path_factory.mktemp("log") / "training_log.jsonl.gz", rows)


@pytest.fixture(scope="module")
def classifier(synthetic_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_surrogate(
        synthetic_log,
        SPACE,
        subject="synthetic",
        kind="classifier",
        grid=ONE_RUN,
        out_dir=tmp_path_factory.mktemp("art") / "classifier",
    )


@pytest.fixture(scope="module")
def taxi_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A surrogate for the real taxi_large space (which has a cross-parameter validity rule)."""
    from simulator_service.subject import get_subject

    subject = get_subject("taxi_large")
    rows = synthetic_rows(300, seed=3, sample=subject.sample, failed=lambda v: v["taxi_row"] >= 12)
    log = write_log(tmp_path_factory.mktemp("taxi") / "training_log.jsonl.gz", rows)
    return train_surrogate(
        log, subject.space, subject="taxi_large", grid=ONE_RUN, out_dir=tmp_path_factory.mktemp("art") / "taxi"
    )


# -- encoding -----------------------------------------------------------------------------------------------
def test_encoding_round_trip_and_attribution_mapping() -> None:
    space = ParameterSpace.from_config(
        [
            *[
                {"name": p.name, "kind": p.kind, "low": p.low, "high": p.high, "choices": list(p.choices)}
                for p in SPACE.parameters
            ],
            {"name": "slot", "kind": "integer_set", "values": [1, 4, 9]},
            {"name": "fixed", "low": 2.0, "high": 2.0},
        ]
    )
    enc = Encoder(space)
    assert enc.n_features == 1 + 1 + 1 + 3 + 3 + 1
    assert enc.feature_names[3:6] == ["c=a", "c=b", "c=c"]
    rng = np.random.default_rng(0)
    for _ in range(200):
        values = space.sample(rng)
        vec = enc.encode(values)
        assert np.all((vec >= 0) & (vec <= 1)) and vec[3:6].sum() == 1 and vec[6:9].sum() == 1
        back = enc.decode(vec)
        assert space.violations(back) == []
        assert back["k"] == values["k"] and back["c"] == values["c"] and back["slot"] == values["slot"]
        assert back["x"] == pytest.approx(values["x"]) and back["y"] == pytest.approx(values["y"])
        assert type(back["k"]) is int and type(back["slot"]) is int and type(back["x"]) is float
    assert np.allclose(enc.encode_many([values, values]), enc.encode(values))
    # attributions back to parameters: |gradient| ranks numbers, the sign gives the direction; a one-hot block
    # suggests the choice with the largest gain over the current one; a number at its bound cannot move on
    values = {"x": 0.5, "y": 2.0, "k": 3, "c": "a", "slot": 4, "fixed": 2.0}
    grad = np.array([-0.2, 5.0, 0.1, 0.0, 0.3, 0.9, 0.0, 0.0, 0.0, 7.0])
    moves = enc.parameter_moves(grad, values)
    assert [(m.name, m.direction, m.target) for m in moves] == [("c", 0, "c"), ("x", -1, None), ("k", 1, None)]
    assert moves[0].score == pytest.approx(0.9)
    with pytest.raises(ValueError, match="kind 'sequence'"):
        Encoder(
            ParameterSpace.from_config(
                [{"name": "road", "kind": "sequence", "max_length": 2, "fields": [{"name": "a", "low": 0, "high": 1}]}]
            )
        )
    with pytest.raises(ValueError, match="not one of"):
        enc.encode({**values, "c": "z"})


# -- the training-progress filter ---------------------------------------------------------------------------
def test_progress_filter_drops_the_first_percent(tmp_path: Path) -> None:
    assert progress_filter(list(range(100)), 30) == list(range(30, 100))
    assert progress_filter(list(range(100)), 0) == list(range(100))
    assert filtered_count(331, 5) == 16 and filtered_count(331, 80) == 264
    assert list(kept_indices(10, 20)) == list(range(2, 10))
    with pytest.raises(ValueError, match="percentage"):
        filtered_count(10, 100)
    held = held_out_indices(200)
    assert len(held) == 19 and held.min() >= filtered_count(200, 5)
    # rows are put in training order (by episode) before filtering
    rows = synthetic_rows(40)
    data = load_interaction_log(write_log(tmp_path / "log.jsonl.gz", rows[::-1]))
    assert list(data.episodes) == list(range(1, 41))
    assert data.configs[0] == rows[0]["config"]


def test_failure_seeds_skip_the_filtered_episodes(classifier: Path) -> None:
    from generator_service.surrogates.artifact import load_surrogate

    surrogate = load_surrogate(classifier)
    data = load_interaction_log(Path(surrogate.meta["log"]["path"]))
    first = filtered_count(len(data), 30)
    expected = [c for i, c in enumerate(data.configs) if data.failed[i] and i >= first]
    assert surrogate.training_failures(30) == expected
    assert len(surrogate.training_failures(0)) == data.n_failures > len(expected)


# -- surrogate training and artifact ------------------------------------------------------------------------
def test_classifier_ranks_failing_inputs_first_and_records_its_metrics(classifier: Path, synthetic_log: Path) -> None:
    from generator_service.surrogates.artifact import load_surrogate

    surrogate = load_surrogate(classifier, subject="synthetic")
    rng = np.random.default_rng(99)
    fresh = [SPACE.sample(rng) for _ in range(1000)]
    auc = roc_auc(np.array([fails(v) for v in fresh]), surrogate.score_inputs(fresh))
    assert auc is not None and auc > 0.8
    meta = json.loads((classifier / "surrogate.json").read_text())
    assert meta["format_version"] == 1 and meta["kind"] == "classifier" and meta["subject"] == "synthetic"
    assert meta["log"]["sha256"] == __import__("hashlib").sha256(synthetic_log.read_bytes()).hexdigest()
    assert meta["log"]["episodes"] == 600 and meta["filter_percent"] == 5.0 and meta["layers"] == 1
    assert meta["seed"] == 0 and meta["created_at"].endswith("+00:00")
    for part in ("validation", "held_out"):
        m = meta["metrics"][part]
        assert {"precision", "recall", "f1", "auc", "rows", "failures"} <= set(m)
        assert m["failures"] > 0 and m["recall"] >= 0.5 and m["precision"] >= 0.5
    assert meta["metrics"]["held_out"]["rows"] == 57  # 10 % of the 570 episodes after a 5 % filter
    assert (classifier / "model.pt").exists() and json.loads((classifier / "tuning.json").read_text())


def test_regressor_with_lds_learns_from_margins(synthetic_log: Path, tmp_path: Path) -> None:
    from generator_service.surrogates.artifact import load_surrogate
    from generator_service.surrogates.model import LdsDensity

    # LDS: a rare label weighs more than a common one, and the training weights average 1
    labels = np.array([0.1] * 90 + [0.9] * 10)
    w = LdsDensity(labels).weights(labels)
    assert w.mean() == pytest.approx(1.0) and w[-1] > 5 * w[0]
    path = train_surrogate(
        synthetic_log, SPACE, subject="synthetic", kind="regressor", grid=ONE_RUN, out_dir=tmp_path / "reg"
    )
    surrogate = load_surrogate(path)
    assert surrogate.meta["kind"] == "regressor" and surrogate.meta["training"]["lds"]["bins"] == 50
    rng = np.random.default_rng(5)
    fresh = [SPACE.sample(rng) for _ in range(500)]
    assert roc_auc(np.array([fails(v) for v in fresh]), surrogate.score_inputs(fresh)) > 0.8
    assert surrogate.meta["metrics"]["validation"]["mse"] < 0.05


# -- refusals -----------------------------------------------------------------------------------------------
def test_missing_or_malformed_logs_are_refused_clearly(tmp_path: Path) -> None:
    def train(log: Path, kind: str = "classifier") -> Path:
        return train_surrogate(log, SPACE, subject="synthetic", kind=kind, grid=ONE_RUN, out_dir=tmp_path / "out")

    with pytest.raises(ValueError, match="does not exist"):
        train(tmp_path / "missing.jsonl.gz")
    (tmp_path / "plain.jsonl.gz").write_text('{"episode": 1}\n')
    with pytest.raises(ValueError, match="not a readable gzip"):
        train(tmp_path / "plain.jsonl.gz")
    with gzip.open(tmp_path / "bad.jsonl.gz", "wt") as stream:
        stream.write(json.dumps(synthetic_rows(1)[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl.gz:2: not JSON"):
        train(tmp_path / "bad.jsonl.gz")
    row = synthetic_rows(1)[0]
    with pytest.raises(ValueError, match="missing field"):
        train(write_log(tmp_path / "nofield.jsonl.gz", [{k: v for k, v in row.items() if k != "verdict"}]))
    with pytest.raises(ValueError, match="verdict must be 'pass' or 'fail'"):
        train(write_log(tmp_path / "verdict.jsonl.gz", [{**row, "verdict": "crash"}]))
    with pytest.raises(ValueError, match="does not fit the subject's parameter space"):
        train(write_log(tmp_path / "other.jsonl.gz", [{**row, "config": {"fx": 1.0, "fy": 2.0}}]))
    write_log(tmp_path / "empty.jsonl.gz", [])
    with pytest.raises(ValueError, match="no episodes"):
        train(tmp_path / "empty.jsonl.gz")
    passing = write_log(tmp_path / "passing.jsonl.gz", synthetic_rows(50, failed=lambda v: False))
    with pytest.raises(ValueError, match="no failing episodes.*regressor"):
        train(passing)
    assert (train(passing, kind="regressor") / "surrogate.json").exists()  # the suggested remedy works


def test_wrong_subject_or_missing_artifact_is_refused(classifier: Path, tmp_path: Path) -> None:
    from generator_service.surrogates.artifact import load_surrogate
    from simulator_service.subject import get_subject

    with pytest.raises(ValueError, match="trained for subject 'synthetic', not 'cartpole'"):
        load_surrogate(classifier, subject="cartpole")
    with pytest.raises(ValueError, match="trained for subject 'synthetic'"):
        make_strategy("indago", get_subject("cartpole").space, 0, {"surrogate": str(classifier)})
    with pytest.raises(StrategyParamError, match="needs parameter surrogate"):
        make_strategy("indago", SPACE, 0)
    with pytest.raises(ValueError, match="does not exist"):
        make_strategy("indago_sampling", SPACE, 0, {"surrogate": str(tmp_path / "nowhere")})
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no surrogate.json"):
        load_surrogate(tmp_path / "empty")
    with pytest.raises(StrategyParamError, match="contradicts setting"):
        make_strategy(
            "indago", SPACE, 0, {"surrogate": str(classifier), "setting": "ga_rnd", "search": "hill_climbing"}
        )
    with pytest.raises(StrategyParamError, match="setting must be one of"):
        make_strategy("indago", SPACE, 0, {"surrogate": str(classifier), "setting": "hc_random"})


def test_a_surrogate_of_another_subject_with_the_same_space_is_refused_by_name(tmp_path: Path) -> None:
    # lunarlander and lunarlander_continuous share their parameter space: only the subject's name tells them apart
    from common.errors import InvalidArgument
    from generator_service.api import CampaignConfig
    from generator_service.server import check_strategy
    from simulator_service.subject import get_subject

    ours, other = get_subject("lunarlander"), get_subject("lunarlander_continuous")
    assert ours.space == other.space
    rows = synthetic_rows(200, seed=4, sample=ours.sample, failed=lambda v: v["fx"] > 500)
    log = write_log(tmp_path / "training_log.jsonl.gz", rows)
    art = str(train_surrogate(log, ours.space, subject="lunarlander", grid=ONE_RUN, out_dir=tmp_path / "art"))
    cases: list[tuple[str, dict[str, Any]]] = [
        ("indago", {"setting": "hc_rnd", **FAST}),
        ("indago_sampling", {"candidates": 10}),
        ("train_fail_replay", {}),
    ]
    for name, params in cases:
        with pytest.raises(StrategyParamError, match="trained for subject 'lunarlander', not 'lunarlander_continuous'"):
            make_strategy(name, other.space, 0, {"surrogate": art, **params}, subject_rules=other.rules)
        assert (
            len(make_strategy(name, ours.space, 0, {"surrogate": art, **params}, subject_rules=ours.rules).ask(1)) == 1
        )
        # the generator's preflight builds the strategy with the subject it described: INVALID_ARGUMENT by name
        config = CampaignConfig.model_validate(
            {
                "subject": other.name,
                "model": "lunarlander-continuous-ppo",
                "strategy": name,
                "strategy_params": {"surrogate": art, **params},
                "budget": {"max_executions": 1},
            }
        )
        with pytest.raises(InvalidArgument, match="trained for subject 'lunarlander'"):
            check_strategy(config, other.rules)


# -- search ---------------------------------------------------------------------------------------------------
def test_hill_climbing_and_ga_move_towards_the_failing_region(classifier: Path) -> None:
    def share_failing(strategy: str, params: dict[str, Any]) -> float:
        asked = make_strategy(strategy, SPACE, 11, {"surrogate": str(classifier), **params}).ask(12)
        return float(np.mean([fails(v) for v in asked]))

    baseline = float(np.mean([fails(v) for v in make_strategy("random", SPACE, 11).ask(200)]))
    assert 0.15 < baseline < 0.45
    hc = share_failing("indago", {"setting": "hc_rnd", **FAST, "max_iterations": 30, "neighbourhood": 20})
    ga = share_failing("indago", {"setting": "ga_rnd", **FAST})
    sampling = share_failing("indago_sampling", {"candidates": 200, "time_budget_s": 0})
    assert hc >= baseline + 0.4 and ga >= baseline + 0.4 and sampling >= baseline + 0.4, (hc, ga, sampling, baseline)


def test_saliency_mutation_moves_towards_higher_failure_probability(classifier: Path) -> None:
    from generator_service.surrogates.artifact import load_surrogate
    from generator_service.surrogates.search import Mutator, Validity

    surrogate = load_surrogate(classifier)
    rng = np.random.default_rng(4)
    mutator = Mutator(surrogate, Validity(SPACE), rng, mode="saliency", scale=0.2)
    parents = []
    for _ in range(30):
        values = SPACE.sample(rng)
        values["x"] = float(rng.uniform(0.45, 0.65))  # below the failing region, where x matters most
        parents.append(values)
    grads = mutator.attributions(parents)
    children = [mutator.mutate(p, g) for p, g in zip(parents, grads)]
    before, after = surrogate.score_inputs(parents), surrogate.score_inputs(children)
    moved_x_up = np.mean([c["x"] > p["x"] for p, c in zip(parents, children)])
    assert moved_x_up >= 0.8
    assert np.mean(after > before) >= 0.8 and after.mean() > before.mean()
    for p, c in zip(parents, children):  # one parameter changed, and only it
        assert sum(p[n] != c[n] for n in SPACE.names) == 1


def test_a_neighbourhood_is_what_as_many_single_mutations_give(classifier: Path) -> None:
    # hill climbing ranks the saliency moves once per neighbourhood; the neighbours must not change for it
    from generator_service.surrogates.artifact import load_surrogate
    from generator_service.surrogates.search import Mutator, Validity

    surrogate = load_surrogate(classifier)
    parent = SPACE.sample(np.random.default_rng(7))
    for mode in ("saliency", "random"):
        one, many = (
            Mutator(surrogate, Validity(SPACE), np.random.default_rng(9), mode=mode, scale=0.2) for _ in range(2)
        )
        grad = one.attributions([parent])
        row = None if grad is None else grad[0]
        assert many.neighbours(parent, row, 30) == [one.mutate(parent, row) for _ in range(30)]


def test_every_strategy_asks_only_valid_inputs_and_is_deterministic(taxi_artifact: Path) -> None:
    from simulator_service.subject import get_subject

    subject = get_subject("taxi_large")
    rules = subject.rules  # what DescribeEnvironment declares: the campaign passes it to the strategy
    art = str(taxi_artifact)
    cases: list[tuple[str, dict[str, Any]]] = [("indago", {"setting": s, **FAST}) for s in SETTINGS]
    cases += [
        ("indago", {"search": "genetic", "seeds": "random", "mutation": "saliency", "crossover": 1.0, **FAST}),
        ("indago_sampling", {"candidates": 100, "time_budget_s": 0}),
        ("train_fail_replay", {}),
    ]
    for name, params in cases:
        first = make_strategy(name, subject.space, 5, {"surrogate": art, **params}, subject_rules=rules).ask(4)
        again = make_strategy(name, subject.space, 5, {"surrogate": art, **params}, subject_rules=rules).ask(4)
        assert first == again, (name, params)
        assert len(first) == 4
        for values in first:
            assert subject.violations(values) == [], (name, params, values)
    # asking in several batches gives the same inputs as asking at once (what a resumed campaign relies on)
    params = {"surrogate": art, "setting": "ga_sal+fail", **FAST}
    at_once = make_strategy("indago", subject.space, 9, params, subject_rules=rules).ask(4)
    split = make_strategy("indago", subject.space, 9, params, subject_rules=rules)
    assert split.ask(1) + split.ask(3) == at_once
    # replay takes the failures after the first 30 % of training and stops when they run out
    replay = make_strategy("train_fail_replay", subject.space, 1, {"surrogate": art}, subject_rules=rules)
    everything = replay.ask(10_000)
    assert len(everything) == len(replay.failures) > 0 and replay.ask(5) == []
    assert all(v["taxi_row"] >= 12 for v in everything)


def test_an_invalid_search_result_is_raised_not_returned() -> None:
    from generator_service.surrogates.search import InvalidSearchResult, Validity

    validity = Validity(SPACE, [lambda v: ["x must not exceed y"] if v["x"] > v["y"] else []])
    assert validity.ok({"x": 0.1, "y": 1.0, "k": 0, "c": "a"})
    with pytest.raises(InvalidSearchResult, match="x must not exceed y"):
        validity.require({"x": 0.9, "y": 0.0, "k": 0, "c": "a"}, "indago")
    rng = np.random.default_rng(0)
    assert all(validity.ok(validity.sample(rng)) for _ in range(50))


# -- the real zoo log, end to end ---------------------------------------------------------------------------
def test_cartpole_log_trains_and_searches_end_to_end(tmp_path: Path) -> None:
    from simulator_service.subject import get_subject

    out = train_zoo_surrogate("cartpole-ppo", grid="tiny", out_dir=tmp_path / "cartpole")
    meta = json.loads((out / "surrogate.json").read_text())
    assert meta["subject"] == "cartpole" and meta["model"] == "cartpole-ppo"
    assert meta["log"]["episodes"] == 331 and meta["log"]["failures"] == 207
    assert meta["filter_percent"] in (5.0, 30.0) and meta["selection"]["trained"] == 2
    space = get_subject("cartpole").space
    asked = make_strategy("indago", space, 3, {"surrogate": str(out), "setting": "hc_sal+fail", **FAST}).ask(2)
    assert len(asked) == 2 and all(space.violations(v) == [] for v in asked)
    shown = subprocess.run(
        [sys.executable, "-m", "cli.main", "surrogate", "show", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and "cartpole-ppo" in shown.stdout and "held-out" in shown.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "cli.main", "surrogate", "show", str(tmp_path / "none")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def test_listing_strategies_does_not_import_torch() -> None:
    code = (
        "import sys; from generator_service.strategies import strategies; "
        "listed = {name: info.parameters for name, info in strategies().items()}; "
        "from generator_service.surrogates import artifact, dataset, encoding, model, search; "
        "from offline import surrogate_splits, surrogate_training; "
        "assert {'indago', 'indago_sampling', 'train_fail_replay'} <= set(listed); "
        "assert 'torch' not in sys.modules and 'captum' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
