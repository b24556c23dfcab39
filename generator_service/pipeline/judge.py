"""Judge: the oracle's verdicts on a case's episodes (Evaluate), and the majority verdict over its repetitions.

An input the simulator refused (execute.Ran.violations) is an invalid execution, judged without an oracle call:
it was not run, costs no execution budget, and the strategy hears it was invalid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from common.generated.gauntlet.v1 import common_pb2, oracle_pb2, oracle_pb2_grpc
from common.tensor import from_tensor
from generator_service.pipeline.execute import Ran
from generator_service.store import ExecutionRow

VERDICT_NAMES = {
    oracle_pb2.VERDICT_KIND_PASS: "pass",
    oracle_pb2.VERDICT_KIND_FAIL: "fail",
    oracle_pb2.VERDICT_KIND_INVALID: "invalid",
}

# (what, call) -> the call's answer, or None when the campaign was cancelled meanwhile (campaign.py's retry)
CallWithRetry = Callable[[str, Callable[[], Any]], Any]


def majority(kinds: Sequence[str]) -> str:
    """The verdict of a case from its repetitions' verdicts: fail when more than half of the judged repetitions
    fail, pass otherwise; invalid when no repetition could be judged."""
    failed = sum(k == "fail" for k in kinds)
    judged = len(kinds) - sum(k == "invalid" for k in kinds)
    if judged == 0:
        return "invalid"
    return "fail" if failed * 2 > judged else "pass"


def invalid_row(ran: Ran, batch: int, elapsed: float) -> ExecutionRow:
    """The execution of an input the subject refused: stored unrun, with the simulator's reasons."""
    return ExecutionRow(
        test_case_id=ran.case.id,
        index=ran.case.position,
        batch=batch,
        values=ran.case.case.to_stored(),
        verdict="invalid",
        margin=0.0,
        steps=0,
        total_reward=0.0,
        descriptors=(),
        reason=f"invalid input: {'; '.join(ran.violations)}",
        repetitions=0,
        failed_repetitions=0,
        elapsed_seconds=elapsed,
    )


class Judge:
    """Turns executed cases into execution rows with the campaign's oracle."""

    def __init__(
        self,
        oracle: oracle_pb2_grpc.OracleServiceStub,
        oracle_name: str,
        call: CallWithRetry,
        keep_final_observations: bool = False,
    ) -> None:
        self.oracle = oracle
        self.oracle_name = oracle_name
        self.call = call
        self.keep_final_observations = keep_final_observations

    def judge(self, batch: int, ran: Sequence[Ran], elapsed: float) -> list[ExecutionRow] | None:
        """One row per case of ``ran``, in the same order; None when the campaign was cancelled during the call."""
        rows: dict[str, ExecutionRow] = {r.case.id: invalid_row(r, batch, elapsed) for r in ran if r.violations}
        executed = [r for r in ran if not r.violations]
        if executed:
            flat = [ep for r in executed for ep in r.episodes]
            request = oracle_pb2.EvaluateRequest(oracle=self.oracle_name, episodes=flat)
            response = self.call("oracle Evaluate", lambda: self.oracle.Evaluate(request, timeout=120))
            if response is None:
                return None
            by_case: dict[str, list[oracle_pb2.Verdict]] = {}
            for v in response.verdicts:
                by_case.setdefault(v.test_case_id, []).append(v)
            for r in executed:
                rows[r.case.id] = self._row(r, by_case[r.case.id], batch, elapsed)
        return [rows[r.case.id] for r in ran]

    def _row(self, ran: Ran, verdicts: list[oracle_pb2.Verdict], batch: int, elapsed: float) -> ExecutionRow:
        eps = ran.episodes
        kinds = [VERDICT_NAMES[v.verdict] for v in verdicts]
        verdict = majority(kinds)
        first = next((v for v in verdicts if VERDICT_NAMES[v.verdict] == verdict), verdicts[0])
        n = len(eps)
        return ExecutionRow(
            test_case_id=ran.case.id,
            index=ran.case.position,
            batch=batch,
            values=ran.case.case.to_stored(),
            verdict=verdict,
            margin=sum(v.margin for v in verdicts) / n,
            steps=sum(e.steps for e in eps),
            total_reward=sum(e.total_reward for e in eps) / n,
            descriptors=tuple(first.descriptors),
            reason=first.reason,
            repetitions=n,
            failed_repetitions=kinds.count("fail"),
            elapsed_seconds=elapsed,
            # repetition 0's episode: repetitions stream back in completion order
            final_observation=self._final_observation(min(eps, key=lambda e: e.repetition)),
        )

    def _final_observation(self, episode: common_pb2.EpisodeResult) -> tuple[float, ...]:
        """The episode's last observation, flattened, when the campaign keeps them (else nothing is stored)."""
        if not self.keep_final_observations or "final_observation" not in episode.signals:
            return ()
        return tuple(float(x) for x in from_tensor(episode.signals["final_observation"]).reshape(-1))
