"""Regression campaigns: `gauntlet export CAMPAIGN --failures` writes one (the `replay` strategy over stored inputs,
each with its original episode seed), and `gauntlet run` of one ends with exit 1 naming the inputs that still fail."""

from __future__ import annotations

from typing import Any

from cli.errors import UserError
from common.generated.gauntlet.v1 import common_pb2, generator_pb2, generator_pb2_grpc, oracle_pb2
from common.seeding import case_episode_seed
from common.space import value_from_proto

REPLAY_STRATEGY = "replay"
STILL_FAILING_EXIT_CODE = 1
SHOWN = 20


def stored_trace(trace: common_pb2.ActionTrace) -> dict[str, Any]:
    """An action trace as the campaign store and a `replay` case hold it."""
    out: dict[str, Any] = {"actions": [int(a) for a in trace.actions], "agent_steps": int(trace.agent_steps)}
    if trace.HasField("reset_seed"):
        out["reset_seed"] = int(trace.reset_seed)
    if trace.artifact:
        out["artifact"] = trace.artifact
    if trace.prefix_length:
        out["prefix_length"] = int(trace.prefix_length)
    return {**out, **dict(trace.labels)}


def replay_case(campaign_id: str, campaign_seed: int, e: generator_pb2.Execution) -> dict[str, Any]:
    """One entry of a `replay` campaign's `cases`: the stored input, where its episode seeds come from (the original
    episode's, also when it was itself a replayed case), its first episode's seed and why it failed."""
    case = e.test_case
    origin_seed, origin_id = campaign_seed, case.id
    if case.HasField("seed_origin"):
        origin_seed, origin_id = int(case.seed_origin.campaign_seed), case.seed_origin.test_case_id
    entry: dict[str, Any] = {
        "id": origin_id,
        "campaign_seed": origin_seed,
        "values": {k: value_from_proto(v) for k, v in case.values.items()},
    }
    if case.HasField("action_trace"):
        entry["action_trace"] = stored_trace(case.action_trace)
    entry["episode_seed"] = case_episode_seed(campaign_seed, case, 0)
    entry["campaign"] = campaign_id
    if e.reason:
        entry["reason"] = e.reason
    return entry


def regression_campaign(
    status: generator_pb2.CampaignStatus, executions: list[generator_pb2.Execution], model: str | None
) -> dict[str, Any]:
    """The campaign file (a mapping) that reruns ``executions`` of the campaign ``status`` describes."""
    spec = status.spec
    cases = [replay_case(status.campaign_id, spec.seed, e) for e in executions]
    campaign: dict[str, Any] = {
        "name": f"regression-{status.campaign_id}"[:200],
        "subject": spec.subject,
        "model": model or spec.model.name,
        "strategy": REPLAY_STRATEGY,
        "strategy_params": {"cases": cases},
        "seed": int(spec.seed),
        "budget": {"max_executions": len(cases)},
        "batch_size": max(1, min(len(cases), spec.batch_size or len(cases))),
        "parallelism": max(1, min(len(cases), spec.parallelism or 1)),
        "repetitions": max(1, spec.repetitions),
    }
    if spec.oracle:
        campaign["oracle"] = spec.oracle
    if spec.observation_translator:
        campaign["observation_translator"] = spec.observation_translator
    return {"campaign": campaign}


def still_failing(executions: list[generator_pb2.Execution]) -> list[tuple[str, str]]:
    """(original test case id, reason) of each failing execution of a regression campaign."""
    out = []
    for e in executions:
        if e.verdict != oracle_pb2.VERDICT_KIND_FAIL:
            continue
        case = e.test_case
        out.append((case.seed_origin.test_case_id if case.HasField("seed_origin") else case.id, e.reason))
    return out


def list_executions(generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str) -> list[Any]:
    request = generator_pb2.ListExecutionsRequest(campaign_id=campaign_id)
    return [r.execution for r in generator.ListExecutions(request, timeout=300)]


class StillFailing(UserError):
    """A regression campaign completed and some of its inputs still fail (exit code 1)."""

    exit_code = STILL_FAILING_EXIT_CODE


def check_regression(generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str, total: int) -> str:
    """The line saying every input of a completed regression campaign passes; StillFailing naming the original ids
    (and reasons) of those that still fail."""
    failing = still_failing(list_executions(generator, campaign_id))
    if not failing:
        return f"regression: all {total} inputs pass"
    named = "; ".join(f"{cid} ({reason})" if reason else cid for cid, reason in failing[:SHOWN])
    more = f"; and {len(failing) - SHOWN} more" if len(failing) > SHOWN else ""
    raise StillFailing(f"regression: {len(failing)} of {total} inputs still fail: {named}{more}")
