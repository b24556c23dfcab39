"""`gauntlet rerun`: each failure run again K times with fresh seeds (the generator's RerunExecution), printed as
a failure probability with its Wilson 95 % interval and a flaky label."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc

RERUN_TIMEOUT_SECONDS = 900


def label(r: generator_pb2.RerunExecutionResponse) -> str:
    if r.flaky:
        return "flaky"
    return "fails every time" if r.failures and r.failures == r.judged else "did not fail again"


def rerun_and_print(
    console: Console, generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str, ids: list[str], runs: int
) -> list[generator_pb2.RerunExecutionResponse]:
    answers = []
    for test_case_id in ids:
        request = generator_pb2.RerunExecutionRequest(campaign_id=campaign_id, test_case_id=test_case_id, runs=runs)
        with console.status(f"rerunning {test_case_id}..."):
            r = generator.RerunExecution(request, timeout=RERUN_TIMEOUT_SECONDS)
        answers.append(r)
        console.print(
            f"[bold]{escape(test_case_id)}[/bold]: failed {r.failures} of {r.judged} reruns with fresh seeds, "
            f"p(fail) {100 * r.failure_probability:.1f} % [{100 * r.failure_probability_low:.1f}, "
            f"{100 * r.failure_probability_high:.1f}] (95 % Wilson): {label(r)}",
            highlight=False,
        )
    return answers
