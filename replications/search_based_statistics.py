"""The statistics of search-based testing of RL over stored results: boundary versus random states, per test and per
cluster, and the pooling of several reference traces' results of one subject.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022) compares where agents fail; the comparison here is
ours (docs/strategies/search-based.md): the boundary side is ST, IT(is) and AC(k) together over distinct valid tests,
the random side RS; the test-level permutation and Fisher tests; the cluster-aware comparison, whose unit is a
boundary state's cluster (its ST test and the IT/AC tests built from it) or a random state; and a pooled report of
several references (pool_reports), whose states two traces share count once. Everything reads the results documents
replications/replicate_search_based.py writes, and runs nothing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from analysis_service.api import ClusterComparison, cluster_comparison, pearson, wilson_interval
from generator_service.api import read_reference


def state_key(actions: list[int], reference: list[int]) -> str:
    """One name per state a test starts the agent from: the length of the reference prefix the replayed actions
    follow, then (AC's combinations) the actions after it that leave τ_ref, e.g. "71" or "70+1,0"."""
    follows = 0
    for taken, wanted in zip(actions, reference):
        if int(taken) != int(wanted):
            break
        follows += 1
    rest = [int(a) for a in actions[follows:]]
    return f"{follows}+{','.join(map(str, rest))}" if rest else str(follows)


def correlation(report: dict[str, Any]) -> dict[str, Any]:
    """Safety vs performance as the paper's Section 7 measures it ("fail verdict frequency and mean accumulated reward
    for all agents at four stages of training with all test suites"): Pearson r between each (agent, suite)'s mean
    fail frequency and the mean accumulated reward of the same tests, our RS suite left out; every model is one
    (agent, stage) pair. The 95 % interval is Fisher's z (NaN below 4 points); r is NaN with fewer than 3 points or a
    constant side."""
    fails, rewards = [], []
    for agent in report["agents"].values():
        for name, suite in agent["suites"].items():
            if name != "RS" and "mean_reward" in suite:
                fails.append(suite["mean_fail_frequency"])
                rewards.append(suite["mean_reward"])
    r = pearson(fails, rewards)
    return {
        "pairs": len(fails),
        "pearson_r": r,
        "ci95": list(pearson_interval(r, len(fails))),
        "agents": len(report["agents"]),  # (agent, stage) pairs: one model each
    }


def pearson_interval(r: float, n: int) -> tuple[float, float]:
    """Fisher z 95 % interval of Pearson's r over n points (NaN below 4 points or without r)."""
    if n < 4 or math.isnan(r):
        return float("nan"), float("nan")
    if abs(r) >= 1.0:
        return r, r
    z, half = math.atanh(r), 1.959964 / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def failing_interval(suite: dict[str, Any]) -> tuple[float, float]:
    """95 % Wilson interval of a suite's share of failing valid tests (a test fails when most of its runs fail; on a
    deterministic subject, its one run)."""
    return wilson_interval(int(suite["failing_tests"]), int(suite["tests"]) - int(suite["invalid"]))


PERMUTATIONS = 20_000  # label shuffles of the permutation test (its p is resolved to about 1/20,000)


def suite_values(entry: dict[str, Any], name: str, depths: list[int]) -> dict[str, float]:
    """A suite's valid tests as {state_key: fail frequency}. Results files from before per-test records rebuild them:
    ST's tests are its boundary states (per_boundary); other suites become their failing and passing counts under
    keys of their own (they cannot be matched with other suites' tests; exact on a deterministic subject, n = 1)."""
    if "per_test" in entry:
        return {str(k): float(v) for k, v in entry["per_test"].items()}
    if name == "ST" and "per_boundary" in entry and len(entry["per_boundary"]) == len(depths):
        return {str(depths[int(i)]): float(f) for i, f in entry["per_boundary"].items()}
    if "failing_tests" not in entry:
        return {}
    valid, failing = int(entry["tests"]) - int(entry["invalid"]), int(entry["failing_tests"])
    return {f"{name}#{i}": 1.0 if i < failing else 0.0 for i in range(valid)}


def sides(report: dict[str, Any], model: str) -> tuple[list[float], list[float]]:
    """One agent's distinct valid tests' fail frequencies: from boundary states (ST, IT(is), AC(k) together, a state
    the suites share counted once) and from random states (RS)."""
    depths = list(report.get("search", {}).get("boundary_depths", []))
    boundary: dict[str, float] = {}
    random: dict[str, float] = {}
    for name, entry in report["agents"][model]["suites"].items():
        (random if name == "RS" else boundary).update(suite_values(entry, name, depths))
    return list(boundary.values()), list(random.values())


def agent_sides(report: dict[str, Any], model: str) -> tuple[list[float], list[float]]:
    """sides' lists; for a pooled report (pool_reports) the agent's distinct states over every reference that tested
    it (pooled_states: a state two references share counts once)."""
    if "sources" not in report:
        return sides(report, model)
    boundary, random = pooled_states(report)[model]
    return [f for f, _ in boundary.values()], [f for f, _ in random.values()]


def state_identity(label: str, key: str, reference: list[int], initial: dict[str, Any]) -> str:
    """The state a test starts from, the same on every reference: its initial test case and the whole action sequence
    its state key (state_key) stands for on `reference`. A key that names no state (a results file from before
    per-test records) stays its reference's own ("R1:RS#3")."""
    head, _, rest = key.partition("+")
    if not head.isdigit():
        return f"{label}:{key}"
    actions = [int(a) for a in reference[: int(head)]] + ([int(a) for a in rest.split(",")] if rest else [])
    return json.dumps([initial, actions], sort_keys=True)


Placed = dict[str, tuple[float, str]]  # state identity -> (fail frequency, unit id)


def pooled_states(report: dict[str, Any]) -> dict[str, tuple[Placed, Placed]]:
    """Per agent of a pooled report (pool_reports), its distinct boundary and random states over all references,
    each with its unit. Unit ids are namespaced by reference ("R2:92-93-94", "R2:RS 120"), and a state two references
    share (the same actions from the same initial test case: traces with a common prefix) is one state, tested once
    (the first reference's test; the subject is deterministic): boundary clusters that share a state are one
    cluster, as within one reference (boundary_clusters), named by the first reference's; a shared random state is
    one unit. With the report's `merge_within` (--pool-merge-within) clusters of different references also merge when
    two of their boundary states lie within that distance in the abstraction's first coordinate (Mario: x in pixels),
    as states at the same place of the level would be."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            node = parent[node]
        return node

    def merge(one: str, other: str) -> None:  # the merged cluster keeps the name of the one seen first
        first, second = sorted((root(one), root(other)), key=lambda n: rank[n])
        parent[second] = first

    first_unit: dict[str, str] = {}  # state identity -> the first unit it was placed in
    rank: dict[str, int] = {}  # boundary cluster -> when it was first seen
    nodes: dict[str, tuple[str, dict[int, float]]] = {}  # boundary cluster -> its reference, depth -> first coordinate
    states: dict[str, tuple[Placed, Placed]] = {m: ({}, {}) for m in report["agents"]}
    for label, source in report["sources"]:
        clusters = boundary_clusters(source) or {}
        depths = list(source["search"]["boundary_depths"])
        reference, initial = source["search"]["reference_actions"], source["search"]["initial"]
        for model, agent in source["agents"].items():
            boundary, random = states[model]
            for name, entry in agent["suites"].items():
                for key, value in suite_values(entry, name, depths).items():
                    identity = state_identity(label, key, reference, initial)
                    if name == "RS":
                        random.setdefault(identity, (value, first_unit.setdefault(identity, f"{label}:RS {key}")))
                        continue
                    node = f"{label}:{clusters[model][key]}"
                    nodes.setdefault(node, (label, source["search"]["boundary_first"]))
                    rank.setdefault(node, len(rank))
                    merge(node, first_unit.setdefault(f"B {identity}", node))
                    boundary.setdefault(identity, (value, node))
    for later, earlier in nearby_clusters(nodes, report.get("merge_within")):
        merge(later, earlier)
    return {
        m: ({i: (f, root(node)) for i, (f, node) in boundary.items()}, random)
        for m, (boundary, random) in states.items()
    }


def nearby_clusters(nodes: dict[str, tuple[str, dict[int, float]]], within: float | None) -> list[tuple[str, str]]:
    """Pairs (later, earlier) of boundary clusters ("R2:92-93-94", in first-seen order) of different references with
    boundary states within `within` of each other in the abstraction's first coordinate; none when `within` is None."""
    if within is None:
        return []

    def place(node: str) -> list[float]:
        _, first = nodes[node]
        return [first[int(d)] for d in node.split(":", 1)[1].split("-")]

    order = list(nodes)
    return [
        (later, earlier)
        for i, later in enumerate(order)
        for earlier in order[:i]
        if nodes[later][0] != nodes[earlier][0]
        and min(abs(a - b) for a in place(later) for b in place(earlier)) <= within
    ]


def _agents(report: dict[str, Any], model: str | None) -> list[tuple[list[float], list[float]]]:
    pairs = [agent_sides(report, m) for m in ([model] if model else list(report["agents"]))]
    return [(b, r) for b, r in pairs if b and r]


def boundary_vs_random(report: dict[str, Any], model: str | None = None) -> float:
    """Mean over agents of the boundary suites' fail frequency (distinct valid tests of ST, IT, AC) / mean over agents
    of RS's (inf when RS never fails); one agent's with `model`. An agent that fails nothing adds 0 to both means."""
    pairs = _agents(report, model)
    if not pairs:
        return float("nan")
    mean_b = sum(sum(b) / len(b) for b, _ in pairs) / len(pairs)
    mean_r = sum(sum(r) / len(r) for _, r in pairs) / len(pairs)
    return mean_b / mean_r if mean_r else float("inf") if mean_b else float("nan")


def boundary_vs_random_p(report: dict[str, Any], model: str | None = None, permutations: int = PERMUTATIONS) -> float:
    """Two-sided permutation test of the boundary-versus-random difference, stratified by agent: the statistic is the
    mean over agents of (boundary fail frequency - RS fail frequency) over distinct valid tests, and each shuffle
    reassigns the boundary/RS labels among one agent's own tests (seeded: the same report gives the same p). Agents
    differ in how often they fail and in how many tests each side has, so pooling tests across agents (the Fisher
    table) would mix their base rates; within-agent shuffles do not, and an agent that never fails adds nothing.
    NaN without both sides."""
    import numpy as np

    pairs = _agents(report, model)
    if not pairs:
        return float("nan")
    rng = np.random.default_rng(0)
    observed = sum(sum(b) / len(b) - sum(r) / len(r) for b, r in pairs) / len(pairs)
    shuffled = np.zeros(permutations)
    for b, r in pairs:
        values = np.tile(np.asarray(b + r, dtype=float), (permutations, 1))
        values = rng.permuted(values, axis=1)
        shuffled += values[:, : len(b)].mean(axis=1) - values[:, len(b) :].mean(axis=1)
    shuffled /= len(pairs)
    extreme = int(np.sum(np.abs(shuffled) >= abs(observed) - 1e-12))
    return (1 + extreme) / (1 + permutations)


def boundary_vs_random_fisher_p(report: dict[str, Any], model: str | None = None) -> float:
    """Two-sided Fisher exact test of failing (fail frequency > 0.5) vs passing distinct valid tests, boundary suites
    against RS, pooled over the agents (one agent's with `model`); the statistic the 22-test run reported, printed
    beside the permutation test. NaN without both sides."""
    from scipy.stats import fisher_exact

    pairs = _agents(report, model)
    if not pairs:
        return float("nan")
    table = [
        [sum(1 for f in side if f > 0.5), sum(1 for f in side if f <= 0.5)]
        for side in ([f for b, _ in pairs for f in b], [f for _, r in pairs for f in r])
    ]
    return float(fisher_exact(table).pvalue)


def built_from(name: str, key: str, depths: list[int], length: int) -> set[int] | None:
    """The boundary states (indices into `depths`) a boundary suite's test could have been built from, by the suite's
    name ("ST", "IT(is)", "AC(k)") and the test's state key (state_key; `length` = |τ_ref|), as suite_cases builds
    them: ST's test is its boundary state's prefix; IT(is)'s prefix lengths lie within is of a boundary depth
    (clamped to τ_ref); AC(k)'s replayed actions are as long as the boundary state's prefix (k actions after
    depth - k). None when the key is no state key (a results file from before per-test records)."""
    head, _, rest = key.partition("+")
    if not head.isdigit():
        return None
    follows = int(head)
    total = follows + (len(rest.split(",")) if rest else 0)
    if name == "ST":
        return {i for i, d in enumerate(depths) if d == total} if not rest else set()
    if name.startswith("IT(") and not rest:
        interval = int(name[3:-1])
        return {
            i
            for i, d in enumerate(depths)
            if follows in {min(max(d + o, 0), length) for o in range(-interval, interval + 1)}
        }
    if name.startswith("AC("):
        k = int(name[3:-1])
        return {i for i, d in enumerate(depths) if max(d - k, 0) + k == total}
    return set()


def boundary_clusters(report: dict[str, Any]) -> dict[str, dict[str, str]] | None:
    """Per agent, each distinct valid boundary test's cluster: {state_key: cluster id}. A boundary state's cluster is
    its ST test and the IT/AC tests built from it; boundary states whose tests share a state (IT(2) around depths
    71, 72 and 73 overlap) are one cluster, over all agents' tests, so the clusters are the same for every agent
    and are named by their depths ("71-72-73"). None when a test cannot be placed (no per-test records)."""
    depths = list(report.get("search", {}).get("boundary_depths", []))
    length = int(report.get("search", {}).get("reference_length", 0))
    parent = list(range(len(depths)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owners: dict[str, dict[str, set[int]]] = {}
    for model, agent in report["agents"].items():
        tests = owners.setdefault(model, {})
        for name, entry in agent["suites"].items():
            if name == "RS":
                continue
            for key in suite_values(entry, name, depths):
                built = built_from(name, key, depths, length)
                if not built:  # a test no boundary state builds cannot be placed in a cluster
                    return None
                tests.setdefault(key, set()).update(built)
                first, *others = sorted(built)
                for other in others:
                    parent[root(other)] = root(first)
    members: dict[int, list[int]] = {}
    for i in range(len(depths)):
        members.setdefault(root(i), []).append(depths[i])
    names = {r: "-".join(map(str, sorted(ds))) for r, ds in members.items()}
    return {model: {key: names[root(min(built))] for key, built in tests.items()} for model, tests in owners.items()}


def cluster_units(
    report: dict[str, Any], model: str, clusters: dict[str, dict[str, str]]
) -> tuple[dict[str, tuple[float, int]], dict[str, tuple[float, int]]]:
    """One agent's units for cluster_comparison: boundary clusters {cluster: (summed fail frequency, distinct tests)}
    and random states {"RS " + state_key: (fail frequency, 1)}, over the same distinct valid tests as sides'."""
    depths = list(report.get("search", {}).get("boundary_depths", []))
    boundary: dict[str, float] = {}
    random: dict[str, float] = {}
    for name, entry in report["agents"][model]["suites"].items():
        (random if name == "RS" else boundary).update(suite_values(entry, name, depths))
    units: dict[str, tuple[float, int]] = {}
    for key, value in boundary.items():
        fails, tests = units.get(clusters[model][key], (0.0, 0))
        units[clusters[model][key]] = (fails + value, tests + 1)
    return units, {f"RS {key}": (value, 1) for key, value in random.items()}


Units = dict[str, tuple[float, int]]


def agent_units(report: dict[str, Any], model: str) -> tuple[Units, Units] | None:
    """cluster_units' boundary clusters and random states of one agent (None when its tests cannot be placed in
    clusters); for a pooled report (pool_reports) its units over every reference (pooled_states)."""
    if "sources" not in report:
        clusters = boundary_clusters(report)
        return None if clusters is None else cluster_units(report, model, clusters)
    placed, random = pooled_states(report)[model]
    boundary: Units = {}
    for value, unit in placed.values():
        fails, tests = boundary.get(unit, (0.0, 0))
        boundary[unit] = (fails + value, tests + 1)
    return boundary, {unit: (value, 1) for value, unit in random.values()}


CLUSTER_RESAMPLES = 10_000  # bootstrap draws of the cluster-aware interval


def boundary_vs_random_cluster(report: dict[str, Any], model: str | None = None) -> ClusterComparison:
    """The boundary-versus-random comparison with the boundary cluster as the unit (analysis_service's
    cluster_comparison): per agent (one agent's with `model`, else all agents that have both sides, as
    boundary_vs_random pools them), boundary clusters against distinct random states; the same ratio and difference
    as boundary_vs_random's, with a cluster bootstrap interval and a permutation p over unit means. NaN figures when
    the tests cannot be placed in clusters (a results file without per-test records)."""
    units = [agent_units(report, m) for m in ([model] if model else list(report["agents"]))]
    placed = [u for u in units if u is not None]
    pairs = [(b, r) for b, r in placed if b and r] if len(placed) == len(units) else []
    return cluster_comparison(
        [b for b, _ in pairs], [r for _, r in pairs], resamples=CLUSTER_RESAMPLES, permutations=PERMUTATIONS
    )


def cluster_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The cluster-aware comparison per agent and pooled, as the results file stores it."""

    def entry(c: ClusterComparison) -> dict[str, Any]:
        return {
            "boundary_clusters": c.units[0],
            "random_states": c.units[1],
            "ratio": c.ratio,
            "ratio_ci95": list(c.ratio_ci95),
            "difference": c.difference,
            "difference_ci95": list(c.difference_ci95),
            "p": c.p_value,
        }

    return {
        "method": f"cluster bootstrap ({CLUSTER_RESAMPLES} draws, percentile 95 % intervals) and two-sided "
        f"permutation test ({PERMUTATIONS} shuffles, Welch t over unit means) with boundary clusters and distinct "
        "random states as units; pooled: units drawn and shuffled alike for every agent",
        "agents": {m: entry(boundary_vs_random_cluster(report, m)) for m in report["agents"]},
        "pooled": entry(boundary_vs_random_cluster(report)),
    }


def planned_suites(report: dict[str, Any]) -> int:
    """How many (agent, suite) measurements the report's parameters ask for."""
    parameters = report["parameters"]
    base, focus = parameters["suites"], parameters.get("focus_suites", [])
    focused = set(parameters.get("focus_models", []))
    return sum(len(dict.fromkeys([*base, *(focus if m in focused else [])])) for m in report["models"])


def boundary_names(report: dict[str, Any]) -> list[str]:
    """The boundary suites measured, in first-measured order."""
    return list(dict.fromkeys(n for a in report["agents"].values() for n in a["suites"] if n != "RS"))


def load_previous(path: Path) -> dict[str, Any] | None:
    """A results file an earlier run wrote (for --resume), with its integer keys (boundary indices, prefix lengths)
    back as integers; None when there is none."""
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    for agent in report.get("agents", {}).values():
        for suite in agent.get("suites", {}).values():
            suite["per_boundary"] = {int(k): v for k, v in suite.get("per_boundary", {}).items()}
        for mode in agent.get("performance", {}).values():
            for side in ("R_a", "R_t"):
                mode[side] = {int(k): v for k, v in mode.get(side, {}).items()}
    return report


def pooled_source(path: Path, reference: Path, subject: str) -> dict[str, Any]:
    """One results file of a pool with its reference trace's actions and initial test case (from the stored
    reference document it was tested from) in its search section; SystemExit naming the flag when they do not fit."""
    report = load_previous(path)
    if report is None:
        raise SystemExit(f"--pool: no stored results at {path}")
    if report.get("subject") != subject:
        raise SystemExit(f"--pool {path}: results of subject {report.get('subject')!r}, not {subject!r}")
    try:
        document = read_reference(reference)
    except ValueError as exc:
        raise SystemExit(f"--pool-references: {exc}") from None
    search = report["search"]
    depths = [int(b["depth"]) for b in document["boundary"]]
    if (len(document["reference_actions"]), depths) != (search["reference_length"], search["boundary_depths"]):
        raise SystemExit(f"--pool-references {reference}: not the reference trace {path} was tested from")
    if boundary_clusters(report) is None:
        raise SystemExit(f"--pool {path}: boundary tests without per-test records cannot be placed in clusters")
    search |= {"reference_actions": document["reference_actions"], "initial": document["initial"]}
    search.setdefault("search_actions", document["search_actions"])
    search["boundary_first"] = {int(b["depth"]): float(b["state"][0]) for b in document["boundary"]}
    search["visited_rule"] = document["stats"].get("visited_rule", "not recorded")
    return report


def shared_boundary_states(sources: list[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    """Per reference, how many of its boundary states an earlier reference of the pool also has on its τ_ref (the
    same actions from the same initial test case)."""
    seen: set[str] = set()
    shared: dict[str, int] = {}
    for label, source in sources:
        search = source["search"]
        on_trace = {
            state_identity(label, str(d), search["reference_actions"], search["initial"])
            for d in range(search["reference_length"] + 1)
        }
        boundary = [state_identity(label, str(d), search["reference_actions"], search["initial"])
                    for d in search["boundary_depths"]]  # fmt: skip
        shared[label] = sum(1 for state in boundary if state in seen)
        seen |= on_trace
    return shared


def pool_reports(
    paths: list[Path], references: list[Path], subject: str, merge_within: float | None = None
) -> dict[str, Any]:
    """Several stored results files of `subject`, each with the reference trace it was tested from (`references`,
    in the same order), as one pooled report for the boundary-versus-random statistics: reference i is labelled
    "R<i>" in the order given, its boundary clusters and random states are units of their own ("R2:92-93-94") except
    where two references share a state (pooled_states), and each agent's tests are those of every file that tested
    it (the agents: every file's, in first-seen order)."""
    sources = [(f"R{i}", pooled_source(p, r, subject)) for i, (p, r) in enumerate(zip(paths, references), start=1)]
    shared = shared_boundary_states(sources)
    models = list(dict.fromkeys(m for _, r in sources for m in r["agents"]))
    return {
        "subject": subject,
        "references": [
            {
                "label": label,
                "file": str(path),
                "command": report.get("command", ""),
                "reference": str(reference),
                "complete": bool(report.get("complete")),
                "initial": report["search"]["initial"],
                **{
                    k: report["search"].get(k)
                    for k in ("reference_length", "boundary_depths", "search_actions", "visited_rule")
                },
                "boundary_states_shared_with_earlier_references": shared[label],
            }
            for (label, report), path, reference in zip(sources, paths, references)
        ],
        "models": models,
        "agents": {m: {"references": [label for label, r in sources if m in r["agents"]]} for m in models},
        "merge_within": merge_within,
        "sources": sources,
    }


def pooled_summary(report: dict[str, Any]) -> dict[str, Any]:
    """A pooled report's figures as its results file stores them (its sources left out: they are the files named)."""
    rows = {m: (boundary_vs_random(report, m), boundary_vs_random_p(report, m)) for m in report["agents"]}
    return {
        **{k: v for k, v in report.items() if k != "sources"},
        "boundary_vs_random": {
            "agents": {m: {"ratio": ratio, "p": p} for m, (ratio, p) in rows.items()},
            "pooled": {
                "ratio": boundary_vs_random(report),
                "p": boundary_vs_random_p(report),
                "fisher_p": boundary_vs_random_fisher_p(report),
            },
        },
    }
