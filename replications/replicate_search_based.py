"""Search-based testing of RL on one subject, through the services: DFS -> safety suites -> trace fuzzing ->
performance testing.

"Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022): Step 1 (Algorithm 1) runs over a simulator
session and stores its reference artifact under the generator's artifact root; Step 2 runs ST, IT(is), AC(1) and
AC(2) per agent as campaigns of the strategy `search_safety` (oracle trace_safety, n repetitions, l agent steps), plus
RS, the agent started from states on τ_ref drawn uniformly at random; Step 3 runs the strategy `trace_fuzzing`
(oracle trace_outcome) once and rebuilds T_fit from its executions; Step 4 runs `trace_performance` simple and robust
per agent. Writes results/search_based_<subject>.{md,json,png} with the paper's statements beside ours and ends with
`boundary_vs_random_state_fail_rate=<mean boundary-suite fail frequency / mean RS fail frequency>` (ST, IT and AC
together, over distinct valid tests, averaged over agents), `boundary_vs_random_p=<p>` (two-sided permutation test,
labels shuffled within each agent) and `boundary_vs_random_fisher_p=<p>` (the pooled Fisher table, printed beside),
then the same comparison with a boundary state's cluster (its ST test and the IT/AC tests built from it) as the unit:
`boundary_vs_random_cluster_ci95=<lo>-<hi>` (cluster bootstrap interval of the ratio),
`boundary_vs_random_cluster_difference_ci95=<lo>..<hi>` and `boundary_vs_random_cluster_p=<p>` (permutation test over
unit means). `--summarise-only` recomputes the statistics of a stored results file and runs nothing; with `--pool A.json
B.json --pool-references A.ref.json B.ref.json` it pools the results files of several reference traces of one subject
(e.g. DFS runs with another visited-state rule or action order, offline/mario_demos.py) into one comparison, each
reference's clusters and random states units of their own except for the states two traces share, written to
search_based_<subject>_pooled.{json,md}.
`--focus-models` with `--focus-suites` gives the extra suites (and more random states) only to the agents named.

    python replications/replicate_search_based.py --subject taxi_large --model taxi-qlearning
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis_service.api import measure_performance
from bench.harness import campaign_executions, run_campaign
from cli.launcher import LocalSuite, environments_for
from common.generated.gauntlet.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    generator_pb2_grpc,
    simulator_pb2,
    simulator_pb2_grpc,
)
from common.server import client_channel
from common.space import value_from_proto
from common.space_spec import compatible, describe
from generator_service.api import (
    CampaignConfig,
    SessionEnvironment,
    depth_first_search,
    fittest_traces,
    measure_suite,
    read_reference,
    reference_document,
    shortest_reference_search,
    write_reference,
    write_traces,
)
from replications.search_based_statistics import (
    PERMUTATIONS,
    agent_sides,
    boundary_names,
    boundary_vs_random,
    boundary_vs_random_fisher_p,
    boundary_vs_random_p,
    cluster_summary,
    correlation,
    failing_interval,
    load_previous,
    planned_suites,
    pool_reports,
    pooled_summary,
    state_key,
)

Suite = tuple[str, dict[str, int]]
SUITES: tuple[Suite, ...] = (("ST", {}), ("IT", {"interval": 2}), ("AC", {"k": 1}), ("AC", {"k": 2}))
# --suites names: the paper's four suites and our RS (random states on τ_ref)
SUITE_CHOICES: dict[str, Suite] = dict(zip(("ST", "IT", "AC1", "AC2"), SUITES)) | {"RS": ("RS", {})}
# The paper's statements (Section 7, on Super Mario Bros.), printed beside ours.
PAPER = {
    "ST": "2-moves agents safest (about 10 % of ST tests fail), right-complex the least safe (about 38 %)",
    "boundary": "boundary states are where agents fail (the suites built around them find failures)",
    "performance": "agents reach the fuzz traces' reward from s0 but fall below it from later states (robust)",
    "correlation": "fail frequency vs mean accumulated reward over all agents at four training stages and all suites: "
    "Pearson r = -0.7",
}

# the DFS runs in one OpenSession stream, and a stream's deadline covers all of it
SESSION_TIMEOUT_SECONDS = 6 * 3600.0


def search_reference(
    simulator: simulator_pb2_grpc.SimulatorServiceStub,
    subject: str,
    path: Path,
    max_samples: int,
    revisit_shorter: bool = True,
    session_timeout: float = SESSION_TIMEOUT_SECONDS,
    reference_rule: str = "first",
) -> dict[str, Any]:
    """Step 1: the DFS over a session of `subject`, stored at `path`; returns the stored document. `reference_rule`:
    "first", τ_ref is the first goal trace Algorithm 1 finds (the paper's: it need not be optimal); "shortest", the
    shortest goal trace, by DFS with a bisected horizon (shortest_reference_search; needs revisit_shorter)."""
    info = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=subject), timeout=60)
    if not info.HasField("search"):
        raise SystemExit(f"subject {subject} declares no `search` section (docs/strategies/search-based.md)")
    declaration = info.search
    env = SessionEnvironment(simulator, subject, declaration, timeout=session_timeout)
    try:
        if reference_rule == "shortest":
            result = shortest_reference_search(
                env, list(declaration.actions), declaration.repetitions, max_samples=max_samples
            )
        else:
            result = depth_first_search(
                env,
                list(declaration.actions),
                declaration.repetitions,
                max_samples=max_samples,
                revisit_shorter=revisit_shorter,
            )
    finally:
        env.close()
    initial = {name: value_from_proto(v) for name, v in declaration.initial.items()}
    document = reference_document(
        result, subject, initial, declaration.seed, list(declaration.actions), declaration.agent_actions
    )
    document["stats"]["round_trips"] = env.round_trips
    write_reference(path, document)
    return document


def reuse_reference(
    simulator: simulator_pb2_grpc.SimulatorServiceStub, subject: str, source: Path, path: Path
) -> dict[str, Any]:
    """Step 1 from a stored search: the reference document at `source` (a gauntlet.search_reference.v1 file an earlier
    DFS wrote) checked against the subject's search declaration and copied to `path`; the DFS is not rerun. Its search
    actions may be any order of the declared ones and its initial test case other values of the declared parameters
    (both are search parameters, offline/mario_demos.py's --action-order and --initial, not properties of the
    subject; the suites start from the document's own initial test case); the report's search section says which."""
    try:
        document = read_reference(source)
    except ValueError as exc:
        raise SystemExit(f"--reference: {exc}") from None
    info = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=subject), timeout=60)
    declaration = info.search
    initial = {name: value_from_proto(v) for name, v in declaration.initial.items()}
    declared = [int(a) for a in declaration.actions]
    stored = (document.get("subject"), document.get("search_actions"), document.get("initial"), document.get("seed"))
    same_actions = isinstance(stored[1], list) and sorted(stored[1]) == sorted(declared)
    same_parameters = isinstance(stored[2], dict) and sorted(stored[2]) == sorted(initial)
    if not (same_actions and same_parameters) or (stored[0], stored[3]) != (subject, declaration.seed):
        raise SystemExit(
            f"--reference {source.name}: searched {stored[0]!r} with actions {stored[1]}, initial {stored[2]}, seed "
            f"{stored[3]}; subject {subject!r} declares actions {declared} (in any order), initial {initial} (any "
            f"values), seed {declaration.seed}"
        )
    write_reference(path, document)
    stats = {
        **document["stats"],
        "reused_from": source.name,
        "declared_search_actions": declared,
        "initial": stored[2],
        "declared_initial": initial,
    }
    return {**document, "stats": stats}


def acting_subjects(
    simulator: simulator_pb2_grpc.SimulatorServiceStub,
    agent: agent_pb2_grpc.AgentServiceStub,
    subject: str,
    models: list[str],
) -> dict[str, str]:
    """The subject each model acts in after a prefix: "" (the searched subject itself) or one of its declared
    variants (another action set on the same level). Checked before the search is spent: a model that fits neither
    stops the run here, naming its spaces and the variants tried."""
    info = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=subject), timeout=60)
    spaces = {subject: (info.observation_space, info.action_space)}
    for variant in info.variants:
        vinfo = simulator.DescribeEnvironment(simulator_pb2.DescribeEnvironmentRequest(subject=variant), timeout=60)
        spaces[variant] = (vinfo.observation_space, vinfo.action_space)
    acting: dict[str, str] = {}
    for model in models:
        minfo = agent.DescribeModel(agent_pb2.DescribeModelRequest(name=model), timeout=60)
        # the model's own subject first (a variant trained on), then the searched subject, then the other variants
        order = [minfo.summary.subject, subject, *info.variants]
        fits = [
            name
            for name in dict.fromkeys(order)
            if name in spaces
            and compatible(minfo.observation_space, spaces[name][0])
            and compatible(minfo.action_space, spaces[name][1])
        ]
        if not fits:
            raise SystemExit(
                f"model {model!r} ({minfo.summary.subject}: observations {describe(minfo.observation_space)}, actions "
                f"{describe(minfo.action_space)}) fits neither subject {subject!r} nor a variant it declares "
                f"({', '.join(info.variants) or 'none'}); nothing was searched"
            )
        acting[model] = "" if fits[0] == subject else fits[0]
    if "" not in acting.values():  # the fuzzing campaign runs in the subject itself, under a model that fits it
        raise SystemExit(
            f"every model acts in a variant of {subject!r} ({', '.join(sorted(set(acting.values())))}): trace fuzzing "
            f"runs its traces in {subject!r} itself and needs one model of it among --model; nothing was searched"
        )
    return acting


def suite_name(suite: str, extra: dict[str, int]) -> str:
    return suite + (f"({extra['interval']})" if "interval" in extra else f"({extra['k']})" if "k" in extra else "")


def run_pipeline(
    local: LocalSuite,
    subject: str,
    models: list[str],
    max_samples: int = 20_000,
    repetitions: int = 10,
    agent_steps: int = 40,
    generations: int = 50,
    population: int = 50,
    random_states: int = 100,
    n_test: int = 10,
    n_ep: int = 10,
    width: int = 20,
    revisit_shorter: bool = True,
    session_timeout: float = SESSION_TIMEOUT_SECONDS,
    *,
    reference: Path | None = None,
    suites: tuple[str, ...] = tuple(SUITE_CHOICES),
    previous: dict[str, Any] | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    focus_models: tuple[str, ...] = (),
    focus_suites: tuple[str, ...] = (),
    focus_random_states: int | None = None,
    reference_rule: str = "first",
) -> dict[str, Any]:
    """DFS (or the stored `reference`; `reference_rule` as search_reference's), the suites, trace fuzzing and
    performance testing on a running suite; what was measured. `previous`: an earlier report whose finished parts
    made with the same settings are kept, not rerun (per agent and suite, the fuzzing, per agent's performance);
    `checkpoint` is called with the report after each finished part (the results file stays current).
    `focus_models` also run `focus_suites` (RS with `focus_random_states` states): the extra tests go where they
    add information."""
    simulator = simulator_pb2_grpc.SimulatorServiceStub(client_channel(local.endpoint("simulator")))
    gen = generator_pb2_grpc.GeneratorServiceStub(client_channel(local.endpoint("generator")))
    agent = agent_pb2_grpc.AgentServiceStub(client_channel(local.endpoint("agent")))
    acting = acting_subjects(simulator, agent, subject, models)  # before the search: a misfit stops the run now
    relative = Path("search") / f"{subject}.json"
    if reference is not None:
        document = reuse_reference(simulator, subject, reference, local.artifact_root / relative)
    else:
        document = search_reference(
            simulator,
            subject,
            local.artifact_root / relative,
            max_samples,
            revisit_shorter,
            session_timeout,
            reference_rule,
        )
    report: dict[str, Any] = {
        "complete": False,
        "subject": subject,
        "models": models,
        "acting_subjects": {m: a or subject for m, a in acting.items()},
        "parameters": {
            "max_samples": max_samples,
            "n": repetitions,
            "l": agent_steps,
            "g": generations,
            "p": population,
            "random_states": random_states,
            "n_test": n_test,
            "n_ep": n_ep,
            "w": width,
            "revisit_shorter": revisit_shorter,
            **({"reference_rule": reference_rule} if reference is None else {}),  # a stored τ_ref keeps its own
            "suites": list(suites),
            "focus_models": list(focus_models),
            "focus_suites": list(focus_suites),
            "focus_random_states": focus_random_states,
        },
        "search": {
            "success": document["success"],
            "reference_length": len(document["reference_actions"]),
            "boundary_depths": [b["depth"] for b in document["boundary"]],
            "search_actions": list(document["search_actions"]),  # in the order the DFS tried them
            **document["stats"],
        },
        "agents": {},
        "paper": PAPER,
    }
    if not document["success"]:
        return report
    same_search = previous is not None and all(
        previous.get("search", {}).get(k) == report["search"][k] for k in ("reference_length", "boundary_depths")
    )
    kept = previous if previous is not None and same_search and previous.get("subject") == subject else {}
    save = checkpoint or (lambda _report: None)
    common: dict[str, Any] = {"subject": subject, "seed": 0, "batch_size": 64, "parallelism": 16}
    for model in models:
        focused = model in focus_models
        planned = tuple(dict.fromkeys((*suites, *(focus_suites if focused else ()))))
        done = kept.get("agents", {}).get(model, {}).get("suites", {})
        measured_suites: dict[str, Any] = {}
        report["agents"][model] = {"suites": measured_suites}
        for key in planned:
            suite, extra = SUITE_CHOICES[key]
            count = focus_random_states if focused and focus_random_states and key in focus_suites else random_states
            extra = {"count": count} if suite == "RS" else extra
            name = suite_name(suite, extra) if suite != "RS" else "RS"
            settings = {"n": repetitions, "l": agent_steps, **({"count": count} if suite == "RS" else {})}
            if name in done and suite_settings(kept, done[name], suite == "RS") == settings:
                measured_suites[name] = done[name]
                continue
            config = CampaignConfig(
                name=f"search-{suite}",
                strategy="search_safety",
                strategy_params={
                    "reference": str(relative),
                    "suite": suite,
                    "agent_steps": agent_steps,
                    "agent_subject": acting[model],
                    **extra,
                },
                oracle="trace_safety",
                repetitions=repetitions,
                budget={"max_executions": 100_000},
                model=model,
                **common,
            )
            status = run_campaign(gen, config)
            executions = campaign_executions(gen, status.campaign_id)
            measured = measure_suite(executions)
            actions = {e.test_case.id: list(e.test_case.action_trace.actions) for e in executions}
            measured_suites[name] = {
                "tests": measured.tests,
                "invalid": measured.invalid,
                "mean_fail_frequency": measured.mean,
                # tests whose runs mostly failed (on a deterministic subject: whose run failed), for the Fisher test
                "failing_tests": sum(1 for f in measured.fail_frequency.values() if f > 0.5),
                "mean_reward": measured.mean_reward,
                "per_boundary": measured.per_boundary,
                # each valid test's fail frequency under its replayed actions (state_key): the same state reached
                # twice (IT and AC overlap ST) is one test in the boundary-versus-random statistics
                "per_test": {
                    state_key(actions[i], document["reference_actions"]): f for i, f in measured.fail_frequency.items()
                },
                "settings": settings,
                "wall_seconds": status.wall_seconds,
            }
            save(report)
    fuzz_keys, perf_keys = ("g", "p"), ("g", "p", "n_test", "n_ep", "w")
    same = {k: kept.get("parameters", {}).get(k) == report["parameters"][k] for k in perf_keys}
    keep_fuzzing = bool(kept.get("fuzzing", {}).get("t_fit")) and all(same[k] for k in fuzz_keys)
    keep_performance = keep_fuzzing and all(same.values())
    if keep_fuzzing:
        report["fuzzing"] = kept["fuzzing"]
        t_fit = report["fuzzing"]["t_fit"]
        traces_relative = Path("search") / f"{subject}_t_fit.json"
        write_traces(local.artifact_root / traces_relative, t_fit)
    else:
        fuzz_model = next(m for m in models if not acting[m])  # one exists: acting_subjects checked it
        t_fit, traces_relative, summary = fuzz_traces(
            gen, local, subject, relative, fuzz_model, generations, population, common
        )
        report["fuzzing"] = {**summary, "t_fit_lengths": [len(t) for t in t_fit], "t_fit": t_fit}
    save(report)
    for model in models:
        done = kept.get("agents", {}).get(model, {}).get("performance")
        if done is not None and keep_performance:
            report["agents"][model]["performance"] = done
            continue
        performance: dict[str, Any] = {}
        for mode in ("simple", "robust"):
            config = CampaignConfig(
                name=f"search-performance-{mode}",
                strategy="trace_performance",
                strategy_params={
                    "reference": str(relative),
                    "traces": str(traces_relative),
                    "mode": mode,
                    "n_test": n_test,
                    "width": width,
                    "agent_subject": acting[model],
                },
                oracle="trace_outcome",
                repetitions=n_ep,
                budget={"max_executions": 1_000_000},
                model=model,
                **common,
            )
            status = run_campaign(gen, config)
            rewards = measure_performance(
                (e.test_case.action_trace.labels, e.total_reward) for e in campaign_executions(gen, status.campaign_id)
            )
            performance[mode] = {"R_a": rewards.agent, "R_t": rewards.traces, "wall_seconds": status.wall_seconds}
        report["agents"][model]["performance"] = performance
        save(report)
    report["correlation"] = correlation(report)
    report["complete"] = True
    return report


def suite_settings(previous: dict[str, Any], entry: dict[str, Any], random: bool) -> dict[str, Any]:
    """The settings a stored suite measurement was made with: its own record, or (a results file from before they
    were recorded per suite) its report's parameters."""
    if "settings" in entry:
        return dict(entry["settings"])
    parameters = previous.get("parameters", {})
    return {
        "n": parameters.get("n"),
        "l": parameters.get("l"),
        **({"count": parameters.get("random_states")} if random else {}),
    }


def fuzz_traces(
    gen: generator_pb2_grpc.GeneratorServiceStub,
    local: LocalSuite,
    subject: str,
    relative: Path,
    model: str,
    generations: int,
    population: int,
    common: dict[str, Any],
) -> tuple[list[list[int]], Path, dict[str, Any]]:
    """Step 3: one trace-fuzzing campaign; T_fit (stored beside the reference for the performance campaigns), where
    it is stored, and what the campaign found."""
    fuzz = CampaignConfig(
        name="search-fuzzing",
        strategy="trace_fuzzing",
        strategy_params={"reference": str(relative), "generations": generations, "population": population},
        oracle="trace_outcome",
        budget={"max_executions": 1_000_000},
        model=model,  # traces run open loop: the agent is never asked
        **{**common, "batch_size": population},
    )
    status = run_campaign(gen, fuzz)
    rows = campaign_executions(gen, status.campaign_id)
    t_fit = [[int(a) for a in t] for t in fittest_traces(rows)]
    traces_relative = Path("search") / f"{subject}_t_fit.json"
    write_traces(local.artifact_root / traces_relative, t_fit)
    summary = {
        "executions": len(rows),
        "unsafe": sum(1 for e in rows if e.verdict == 2),
        "distinct_states": len({h for e in rows for h in e.descriptors[2:]}),
        "best_total_reward": max((e.total_reward for e in rows), default=0.0),
        "wall_seconds": status.wall_seconds,
    }
    return t_fit, traces_relative, summary


def cluster_line(c: dict[str, Any]) -> str:
    """The cluster-aware figures as the bench prints them."""
    return (
        f"boundary_vs_random_cluster_ci95={c['ratio_ci95'][0]:.3f}-{c['ratio_ci95'][1]:.3f} "
        f"boundary_vs_random_cluster_difference_ci95={c['difference_ci95'][0]:.3f}..{c['difference_ci95'][1]:.3f} "
        f"boundary_vs_random_cluster_p={c['p']:.4f}"
    )


def comparison_lines(report: dict[str, Any]) -> list[str]:
    """The boundary-versus-random tables of the results page: per agent and pooled, tests as units, then boundary
    clusters as units (a pooled report's: over every reference)."""
    lines = [
        "",
        "Boundary versus random states per agent, over distinct valid tests (a state that ST, IT and AC share counts "
        "once): the boundary side is ST, IT(is) and AC(k) together, the random side RS. p: two-sided permutation test "
        "of the fail-frequency difference, labels shuffled within each agent's tests "
        f"({PERMUTATIONS} shuffles; the pooled row averages the differences over agents); Fisher p: two-sided Fisher "
        "exact test of failing vs passing tests (pooled row: one table over all agents).",
        "",
        "| agent | boundary tests | boundary fail frequency | RS tests | RS fail frequency | ratio | p (permutation) | "
        "Fisher p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model in report["agents"]:
        b, r = agent_sides(report, model)
        lines.append(
            f"| {model} | {len(b)} | {sum(b) / len(b) if b else float('nan'):.3f} | {len(r)} | "
            f"{sum(r) / len(r) if r else float('nan'):.3f} | {boundary_vs_random(report, model):.2f} | "
            f"{boundary_vs_random_p(report, model):.4f} | {boundary_vs_random_fisher_p(report, model):.4f} |"
        )
    lines.append(
        f"| pooled | | | | | {boundary_vs_random(report):.2f} | {boundary_vs_random_p(report):.4f} | "
        f"{boundary_vs_random_fisher_p(report):.4f} |"
    )
    clustered = report.get("boundary_vs_random_cluster") or cluster_summary(report)
    lines += [
        "",
        "The same comparison with the boundary cluster as the unit: a boundary state's ST test and the IT/AC tests "
        "built from it are one cluster (boundary states whose tests share a state, such as adjacent depths, are one "
        "cluster), each distinct RS state is a unit of its own. Ratio and difference as above (tests weigh equally); "
        f"intervals: {clustered['method']}.",
        "",
        "| agent | boundary clusters | RS states | ratio (95 % cluster interval) | difference (95 % cluster "
        "interval) | p (cluster permutation) |",
        "|---|---|---|---|---|---|",
    ]
    for model, c in [*clustered["agents"].items(), ("pooled", clustered["pooled"])]:
        lines.append(
            f"| {model} | {c['boundary_clusters']} | {c['random_states']} | {c['ratio']:.2f} "
            f"({c['ratio_ci95'][0]:.2f}-{c['ratio_ci95'][1]:.2f}) | {c['difference']:.3f} "
            f"({c['difference_ci95'][0]:.3f} to {c['difference_ci95'][1]:.3f}) | {c['p']:.4f} |"
        )
    return lines


def search_variant(search: dict[str, Any]) -> str:
    """How the DFS of a stored reference was run where the Step 1 line should say it: the order it tried the search
    actions, its initial test case where it differs from the declared one, its visited-state rule where a stored
    document records it (offline/mario_demos.py); "" for a file from before the order was recorded."""
    if "search_actions" not in search:
        return ""
    declared = search.get("declared_search_actions", search["search_actions"])
    other = f", not the subject's declared {declared}" if declared != search["search_actions"] else ""
    initial = search.get("initial", search.get("declared_initial"))
    start = (
        f"; initial test case {initial}, not the subject's declared {search['declared_initial']}"
        if initial != search.get("declared_initial")
        else ""
    )
    rules = {
        "printed": "; the paper's printed visited-state rule (a visited state is never explored again)",
        "revisit shorter": "; a visited state explored again when a shorter prefix reaches it",
    }
    rule = rules.get(search.get("visited_rule", ""), "")
    return f"; search actions tried in the order {search['search_actions']}{other}{start}{rule}"


def write_markdown(report: dict[str, Any], path: Path, command: str) -> None:
    search = report["search"]
    finished = sum(len(a["suites"]) for a in report["agents"].values())
    partial = [] if report.get("complete", True) else [
        f"**PARTIAL**: the run stopped after {finished} of {planned_suites(report)} (agent, suite) measurements "
        f"({sum(1 for a in report['agents'].values() if 'performance' in a)} of {len(report['models'])} agents with "
        "performance tests); `--resume` with the same arguments adds the rest.",
        "",
    ]  # fmt: skip
    reused = f" (the DFS's stored result {search['reused_from']}, not rerun)" if search.get("reused_from") else ""
    lines = [
        f"# Search-based testing of RL on `{report['subject']}`",
        "",
        *partial,
        'Replication of "Search-Based Testing of Reinforcement Learning" (IJCAI-ECAI 2022) on a subject of ours, '
        "through the services. Reproduce with:",
        "",
        f"    {command}",
        "",
        "Parameters: " + ", ".join(f"{k} = {v}" for k, v in report["parameters"].items()) + ".",
        "",
        "## Step 1: DFS",
        "",
        f"success {search['success']}, |τ_ref| = {search['reference_length']}, "
        f"|DB| = {len(search['boundary_depths'])}, "
        f"{search['samples']} samples, {search['visited']} states visited, {search['seconds']:.1f} s{reused}"
        f"{search_variant(search)}.",
        "",
        "## Step 2: safety suites (mean fail frequency over valid tests)",
        "",
        "Acting subjects: " + ", ".join(f"{m} in {a}" for m, a in report.get("acting_subjects", {}).items()) + ".",
        "",
        "| agent | suite | tests | invalid | mean fail frequency | failing tests (95 % interval) | mean accumulated "
        "reward |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, agent in report["agents"].items():
        for name, suite in agent["suites"].items():
            low, high = failing_interval(suite) if "failing_tests" in suite else (float("nan"),) * 2
            lines.append(
                f"| {model} | {name} | {suite['tests']} | {suite['invalid']} | {suite['mean_fail_frequency']:.3f} | "
                f"{suite.get('failing_tests', '?')} ({low:.3f}-{high:.3f}) | "
                f"{suite.get('mean_reward', float('nan')):.2f} |"
            )
    lines += comparison_lines(report)
    clustered = report.get("boundary_vs_random_cluster") or cluster_summary(report)
    fuzz = report.get("fuzzing", {})
    if fuzz:
        lines += [
            "",
            "## Step 3: trace fuzzing",
            "",
            f"{fuzz['executions']} traces, {fuzz['unsafe']} unsafe, {fuzz['distinct_states']} distinct states, "
            f"best reward {fuzz['best_total_reward']:.2f}, |T_fit| = {len(fuzz['t_fit_lengths'])}, "
            f"{fuzz['wall_seconds']:.0f} s.",
            "",
            "## Step 4: performance",
            "",
            "| agent | R_a (s0) | R_t (s0) | robust: prefix lengths where R_a^pl ≥ R_t^pl |",
            "|---|---|---|---|",
        ]
        for model, agent in report["agents"].items():
            perf = agent.get("performance", {})
            simple, robust = perf.get("simple", {}), perf.get("robust", {})
            lengths = sorted(robust.get("R_a", {}))
            above = sum(1 for pl in lengths if robust["R_a"][pl] >= robust["R_t"].get(pl, float("inf")))
            lines.append(
                f"| {model} | {simple.get('R_a', {}).get(0, float('nan')):.2f} | "
                f"{simple.get('R_t', {}).get(0, float('nan')):.2f} | {above} of {len(lengths)} |"
            )
    corr = report.get("correlation") or correlation(report)
    ratio = boundary_vs_random(report)
    lines += [
        "",
        "## Beside the paper",
        "",
        "| claim | paper (Super Mario Bros.) | ours |",
        "|---|---|---|",
        f"| safety per agent | {PAPER['ST']} | ST mean fail frequency: "
        + ", ".join(
            f"{m} {a['suites']['ST']['mean_fail_frequency']:.3f}"
            for m, a in report["agents"].items()
            if "ST" in a["suites"]
        )
        + " |",
        f"| boundary states | {PAPER['boundary']} | boundary_vs_random_state_fail_rate = {ratio:.2f}, two-sided "
        f"permutation p = {boundary_vs_random_p(report):.4f} (Fisher p = {boundary_vs_random_fisher_p(report):.4f}; "
        f"{', '.join(boundary_names(report))} vs RS); with boundary clusters as units: ratio 95 % interval "
        f"{clustered['pooled']['ratio_ci95'][0]:.2f}-{clustered['pooled']['ratio_ci95'][1]:.2f}, permutation p = "
        f"{clustered['pooled']['p']:.4f} |",
        f"| performance | {PAPER['performance']} | see Step 4 and the figure |",
        f"| correlation | {PAPER['correlation']} | r = {corr.get('pearson_r', float('nan')):.2f} (95 % interval "
        f"{corr.get('ci95', [float('nan')] * 2)[0]:.2f} to {corr.get('ci95', [float('nan')] * 2)[1]:.2f}; fail "
        f"frequency vs mean accumulated reward) over {corr.get('pairs', 0)} (agent, suite) points of "
        f"{corr.get('agents', 0)} (agent, stage) pairs |",
        "",
    ]
    path.write_text("\n".join(lines))


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for model, agent in report["agents"].items():
        for name, suite in agent["suites"].items():
            if name == "RS" or not suite["per_boundary"]:
                continue
            xs = sorted(suite["per_boundary"])
            left.plot(xs, [suite["per_boundary"][x] for x in xs], marker=".", label=f"{model} {name}")
        robust = agent.get("performance", {}).get("robust", {})
        if robust.get("R_a"):
            pls = sorted(robust["R_a"])
            right.plot(pls, [robust["R_a"][p] for p in pls], marker="o", label=f"R_a^pl {model}")
            right.plot(pls, [robust["R_t"].get(p, float("nan")) for p in pls], "--", marker="x", label="R_t^pl")
    left.set(xlabel="boundary state i", ylabel="fail frequency", title="Safety per boundary state")
    right.set(xlabel="prefix length pl", ylabel="mean episode reward", title="Robust performance")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.suptitle(f"Search-based testing of RL on {report['subject']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subject", required=True, help="a subject with a `search` section, e.g. taxi_large")
    parser.add_argument("--model", nargs="+", help="the agent(s) under test, e.g. taxi-qlearning (required)")
    parser.add_argument("--max-samples", type=int, default=20_000, help="DFS budget in sampled transitions")
    parser.add_argument("--printed-visited-rule", action="store_true", help="never re-explore a visited state")
    parser.add_argument(
        "--reference-rule",
        choices=("first", "shortest"),
        default="first",
        help="τ_ref: first, the first goal trace the DFS finds (the paper's Algorithm 1; it need not be optimal), or "
        "shortest, the shortest one (DFS with a bisected horizon; each bisection step is another search within "
        "--max-samples): for a subject whose first trace is a detour the agent never drives (taxi_large)",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=SESSION_TIMEOUT_SECONDS,
        help=f"deadline of the DFS's one simulator session in seconds (default {SESSION_TIMEOUT_SECONDS:g}; Mario "
        "samples cost about 0.3-0.8 s each here)",
    )
    parser.add_argument("--repetitions", type=int, default=10, help="n: runs per safety test case")
    parser.add_argument("--agent-steps", type=int, default=40, help="l: agent steps after a prefix")
    parser.add_argument("--random-states", type=int, default=100, help="RS: random states on τ_ref per agent")
    parser.add_argument("--generations", type=int, default=50, help="g: trace-fuzzing generations")
    parser.add_argument("--population", type=int, default=50, help="p: trace-fuzzing population")
    parser.add_argument("--n-test", type=int, default=10, help="n_test: traces per prefix length (robust)")
    parser.add_argument("--n-ep", type=int, default=10, help="n_ep: episodes per performance test")
    parser.add_argument("--width", type=int, default=20, help="w: prefix-length step (robust)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for search_based_<subject>.*")
    parser.add_argument(
        "--reference",
        type=Path,
        help="a stored DFS result (gauntlet.search_reference.v1, e.g. offline/mario_demos.py's) to test from instead "
        "of searching again; it must be the subject's own search (actions, initial test case, seed)",
    )
    parser.add_argument(
        "--suites",
        default=",".join(SUITE_CHOICES),
        help=f"comma-separated suites to run per agent, of {', '.join(SUITE_CHOICES)} (default all)",
    )
    parser.add_argument(
        "--focus-models",
        nargs="+",
        default=[],
        help="models (of --model) that also run --focus-suites: the extra tests go to the agents that fail at all",
    )
    parser.add_argument(
        "--focus-suites",
        default="",
        help=f"comma-separated suites the --focus-models also run, of {', '.join(SUITE_CHOICES)}",
    )
    parser.add_argument(
        "--focus-random-states", type=int, help="RS: random states for the --focus-models when RS is a focus suite"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the finished parts (agents' suites, fuzzing, performance) of the results file a run with the same "
        "settings wrote, and run the rest",
    )
    parser.add_argument(
        "--summarise-only",
        action="store_true",
        help="run nothing: read --out's stored search_based_<subject>.json, compute its statistics again (e.g. the "
        "cluster-aware boundary-versus-random test, for a file made before it) and rewrite the .json and .md",
    )
    parser.add_argument(
        "--pool",
        nargs="+",
        type=Path,
        help="with --summarise-only: two or more stored results files of --subject (one per reference trace, e.g. "
        "DFS runs with another action order) pooled into one boundary-versus-random comparison, each reference's "
        "clusters and random states units of their own (a state two references share is one); writes --out's "
        "search_based_<subject>_pooled.{json,md}",
    )
    parser.add_argument(
        "--pool-references",
        nargs="+",
        type=Path,
        default=[],
        help="with --pool: the stored reference documents the --pool files were tested from, in the same order (their "
        "traces tell which states two references share)",
    )
    parser.add_argument(
        "--pool-merge-within",
        type=float,
        help="with --pool: also merge boundary clusters of different references whose boundary states lie within this "
        "distance in the abstraction's first coordinate (Mario: x in pixels), a sensitivity check for traces that "
        "pass the same places of a level; writes search_based_<subject>_pooled_within<W>.*",
    )
    args = parser.parse_args(argv)
    if args.pool is not None:
        if not args.summarise_only:
            parser.error("--pool pools stored results files: it needs --summarise-only")
        if len(args.pool) < 2 or len({p.resolve() for p in args.pool}) != len(args.pool):
            parser.error("--pool needs two or more different results files")
        if args.pool_merge_within is not None and not (
            math.isfinite(args.pool_merge_within) and args.pool_merge_within >= 0
        ):
            parser.error(f"--pool-merge-within must be a distance >= 0, got {args.pool_merge_within}")
        if len(args.pool_references) != len(args.pool):
            parser.error("--pool-references: one reference document per --pool file, in the same order")
    suites = tuple(dict.fromkeys(name.strip() for name in args.suites.split(",") if name.strip()))
    unknown = [name for name in suites if name not in SUITE_CHOICES]
    if unknown or not suites:
        parser.error(f"--suites: unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(SUITE_CHOICES)}")
    focus_suites = tuple(dict.fromkeys(name.strip() for name in args.focus_suites.split(",") if name.strip()))
    unknown = [name for name in focus_suites if name not in SUITE_CHOICES]
    if unknown:
        parser.error(f"--focus-suites: unknown {', '.join(unknown)}; choose from {', '.join(SUITE_CHOICES)}")
    strangers = [m for m in args.focus_models if m not in (args.model or [])]
    if strangers:
        parser.error(f"--focus-models: {', '.join(strangers)} not among --model")
    if bool(args.focus_models) != bool(focus_suites):
        parser.error("--focus-models and --focus-suites go together")
    if args.reference_rule == "shortest" and args.printed_visited_rule:
        # a bounded DFS under the printed rule can miss a goal within its horizon, so the bisection would be wrong
        parser.error(
            "--reference-rule shortest needs states revisited from shorter prefixes; drop --printed-visited-rule"
        )
    if args.focus_random_states is not None and not 1 <= args.focus_random_states <= 1_000_000:
        parser.error(f"--focus-random-states must be in 1..1000000, got {args.focus_random_states}")
    positive = {
        "--max-samples": args.max_samples, "--repetitions": args.repetitions, "--agent-steps": args.agent_steps,
        "--random-states": args.random_states, "--generations": args.generations, "--population": args.population,
        "--n-test": args.n_test, "--n-ep": args.n_ep, "--width": args.width,
    }  # fmt: skip
    for flag, value in positive.items():
        if not 1 <= value <= 1_000_000:
            parser.error(f"{flag} must be in 1..1000000, got {value}")
    if not (math.isfinite(args.session_timeout) and args.session_timeout > 0):
        parser.error(f"--session-timeout must be a positive number of seconds, got {args.session_timeout}")
    if args.reference is not None and not args.reference.is_file():
        parser.error(f"--reference: no file {args.reference}")
    command = "python replications/replicate_search_based.py " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"search_based_{args.subject}"
    previous = load_previous(stem.with_suffix(".json")) if args.resume else None

    def write(report: dict[str, Any]) -> None:  # after every finished part: a run cut short leaves its results
        report["boundary_vs_random_cluster"] = cluster_summary(report)
        stem.with_suffix(".json").write_text(json.dumps({**report, "command": command}, indent=1))
        write_markdown(report, stem.with_suffix(".md"), command)

    if args.pool is not None:
        return summarise_pool(args.pool, args.pool_references, args.subject, args.out, command, args.pool_merge_within)
    if args.summarise_only:  # the stored measurements, their statistics computed again; no service starts
        report = load_previous(stem.with_suffix(".json")) or {}
        if not report:
            raise SystemExit(f"--summarise-only: no stored results at {stem.with_suffix('.json')}")
        command = report.pop("command", None) or command
        write(report)
        return report_lines(report)
    if not args.model:
        parser.error("--model is required (unless --summarise-only)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with LocalSuite(
            store_url=f"sqlite:///{root / 'store.db'}",
            log_dir=root / "logs",
            report_root=root / "reports",
            artifact_root=root / "artifacts",
            environments=environments_for([args.subject]),  # e.g. Mario's simulator in .venv-mario
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
                args.random_states,
                args.n_test,
                args.n_ep,
                args.width,
                not args.printed_visited_rule,
                args.session_timeout,
                reference=args.reference,
                suites=suites,
                previous=previous,
                checkpoint=write,
                focus_models=tuple(args.focus_models),
                focus_suites=focus_suites,
                focus_random_states=args.focus_random_states,
                reference_rule=args.reference_rule,
            )
    write(report)
    if report["search"]["success"]:
        plot(report, stem.with_suffix(".png"))
    return report_lines(report)


def print_pooled_lines(report: dict[str, Any]) -> None:
    """The bench's last lines: the boundary-versus-random figures over all agents (and, pooled, all references)."""
    print(f"boundary_vs_random_state_fail_rate={boundary_vs_random(report):.3f}")
    print(f"boundary_vs_random_p={boundary_vs_random_p(report):.4f}")
    print(f"boundary_vs_random_fisher_p={boundary_vs_random_fisher_p(report):.4f}")
    print(cluster_line(report["boundary_vs_random_cluster"]["pooled"]).replace(" ", "\n"))


def write_pooled_markdown(report: dict[str, Any], path: Path, command: str) -> None:
    """The pooled comparison's page: the references pooled, then the boundary-versus-random tables."""
    lines = [
        f"# Search-based testing of RL on `{report['subject']}`: boundary versus random states over "
        f"{len(report['references'])} reference traces",
        "",
        "Pooled from stored results files (nothing rerun) with:",
        "",
        f"    {command}",
        "",
        "Each reference's boundary clusters and random states are units of their own (unit ids prefixed with the "
        "reference's label), except where references share a state (the same actions from the same initial test "
        "case, on traces with a common prefix): a shared state is tested once (the first reference's test), and "
        "boundary clusters that share a state are one cluster, as within one reference. An agent's tests are those "
        "of every reference that tested it."
        + (
            ""
            if report.get("merge_within") is None
            else f" Sensitivity check (--pool-merge-within {report['merge_within']:g}): boundary clusters of different "
            "references also merge when two of their boundary states lie within "
            f"{report['merge_within']:g} of each other in the abstraction's first coordinate (Mario: x in pixels), "
            "as the same place of the level."
        ),
        "",
        "| reference | results file | search actions (order tried) | initial test case | DFS visited-state rule | "
        "τ_ref | DB | boundary states an earlier reference has | complete |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for ref in report["references"]:
        lines.append(
            f"| {ref['label']} | {ref['file']} | {ref['search_actions']} | {ref['initial']} | {ref['visited_rule']} | "
            f"{ref['reference_length']} | {len(ref['boundary_depths'])} | "
            f"{ref['boundary_states_shared_with_earlier_references']} | {ref['complete']} |"
        )
    lines += comparison_lines(report)
    path.write_text("\n".join([*lines, ""]))


def summarise_pool(
    paths: list[Path], references: list[Path], subject: str, out: Path, command: str, merge_within: float | None
) -> int:
    """--pool: the pooled comparison of stored results files, written to out/search_based_<subject>_pooled.* (with
    --pool-merge-within W: search_based_<subject>_pooled_within<W>.*)."""
    report = pool_reports(paths, references, subject, merge_within)
    report["boundary_vs_random_cluster"] = cluster_summary(report)
    suffix = "" if merge_within is None else f"_within{merge_within:g}"
    stem = f"search_based_{subject}_pooled{suffix}"  # a name with a dot (within0.5): no with_suffix
    (out / f"{stem}.json").write_text(json.dumps({**pooled_summary(report), "command": command}, indent=1))
    write_pooled_markdown(report, out / f"{stem}.md", command)
    for model in report["agents"]:
        print(f"agent={model} {cluster_line(report['boundary_vs_random_cluster']['agents'][model])}")
    print_pooled_lines(report)
    return 0


def report_lines(report: dict[str, Any]) -> int:
    """Prints what was measured, the last lines the boundary-versus-random figures; the exit status."""
    clustered = report["boundary_vs_random_cluster"]
    print(json.dumps(report["search"]))
    for model, agent in report["agents"].items():
        for name, suite in agent["suites"].items():
            low, high = failing_interval(suite)
            print(
                f"agent={model} suite={name} tests={suite['tests']} invalid={suite['invalid']} "
                f"mean_fail_frequency={suite['mean_fail_frequency']:.3f} failing_ci95={low:.3f}-{high:.3f} "
                f"mean_reward={suite.get('mean_reward', float('nan')):.2f}"
            )
        simple = agent.get("performance", {}).get("simple", {})
        print(f"agent={model} R_a={simple.get('R_a', {}).get(0)} R_t={simple.get('R_t', {}).get(0)}")
        print(
            f"agent={model} boundary_vs_random_state_fail_rate={boundary_vs_random(report, model):.3f} "
            f"boundary_vs_random_p={boundary_vs_random_p(report, model):.4f} "
            f"boundary_vs_random_fisher_p={boundary_vs_random_fisher_p(report, model):.4f}"
        )
        print(f"agent={model} {cluster_line(clustered['agents'][model])}")
    corr = report.get("correlation") or correlation(report)
    print(f"correlation={json.dumps(corr)}")
    print_pooled_lines(report)
    if not report.get("complete"):
        print(
            f"PARTIAL: {sum(len(a['suites']) for a in report['agents'].values())} of {planned_suites(report)} "
            "(agent, suite) measurements"
        )
    return 0 if report["search"]["success"] else 1


if __name__ == "__main__":
    sys.exit(main())
