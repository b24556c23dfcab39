"""Following a campaign to its end from the CLI: a progress stream that survives a generator restart, retried
calls, and what the campaign's end means for `gauntlet run`'s exit code."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import grpc

from common.generated.gauntlet.v1 import generator_pb2, generator_pb2_grpc
from common.remote import describe
from common.retry import Retry

T = TypeVar("T")
# How long the CLI waits for a generator that went away (restarting under the launcher, redeployed) before it
# gives up on a call or on the progress stream.
RECONNECT_SECONDS = 120.0

State = generator_pb2.CampaignState
# `gauntlet run` / `gauntlet resume`: 0 when the campaign completed; otherwise one code per way it stopped.
# (2 is any refused command or request, 130 Ctrl-C: cli/main.py.)
EXIT_CODES: dict[int, int] = {
    State.CAMPAIGN_STATE_COMPLETED: 0,
    State.CAMPAIGN_STATE_FAILED: 3,
    State.CAMPAIGN_STATE_INTERRUPTED: 4,
    State.CAMPAIGN_STATE_CANCELLED: 5,
}
NOT_FINISHED_EXIT_CODE = 4  # the generator let go of a campaign still marked running: like interrupted
EXIT_CODES_HELP = (
    "exit status: 0 the campaign completed, 2 the command or a request was refused, 3 the campaign failed "
    "(a permanent error; its reason is printed), 4 it was interrupted (resumable: gauntlet resume ID), "
    "5 it was cancelled, 130 Ctrl-C"
)


class LostCampaign(RuntimeError):
    """The generator stayed unreachable past RECONNECT_SECONDS; the message says what was last seen."""


def retrying(call: Callable[[], T]) -> T:
    """call(), retried while the peer is unreachable or restarting (for idempotent calls only)."""
    return Retry(budget_seconds=RECONNECT_SECONDS, idempotent=True).call(call)


def _let_go(status: generator_pb2.CampaignStatus) -> bool:
    """The generator stopped while running the campaign (a killed one left it 'running', a stopped one marked it
    interrupted by its shutdown): a restarted generator resumes it, so the stream is worth reopening."""
    return status.state == State.CAMPAIGN_STATE_RUNNING or (
        status.state == State.CAMPAIGN_STATE_INTERRUPTED and status.stop_reason == "shutdown"
    )


def campaign_events(
    generator: generator_pb2_grpc.GeneratorServiceStub, campaign_id: str, note: Callable[[str], None]
) -> Iterator[generator_pb2.WatchCampaignResponse]:
    """WatchCampaign's events up to the campaign's end, across generator restarts.

    A broken stream (UNAVAILABLE: the generator died) is reopened with backoff; a stream that ends while the
    campaign is still let go of (see _let_go) is reopened too, until a generator runs the campaign again or
    RECONNECT_SECONDS pass. The last event is the campaign's final 'finished' one.
    """
    request = generator_pb2.WatchCampaignRequest(campaign_id=campaign_id)
    retry = Retry(budget_seconds=RECONNECT_SECONDS, idempotent=True)
    waiting_since: float | None = None  # when the campaign was last seen let go of, while no generator ran it
    while True:
        try:
            for number, event in enumerate(generator.WatchCampaign(request)):
                retry = Retry(budget_seconds=RECONNECT_SECONDS, idempotent=True)  # connected: a fresh budget
                if event.kind != "finished":
                    if number > 0:  # beyond the stream's opening status: the campaign's own events, so it runs
                        waiting_since = None
                    yield event
                    continue
                if not _let_go(event.status):
                    yield event
                    return
                now = time.monotonic()
                waiting_since = waiting_since or now
                if now - waiting_since >= RECONNECT_SECONDS:
                    yield event  # no generator took it up again: its state is what it is
                    return
                note("the generator stopped; waiting for a restarted generator to resume the campaign")
                time.sleep(1.0)
        except grpc.RpcError as exc:
            delay = retry.next_delay(exc)
            if delay is None:
                raise LostCampaign(f"lost the campaign's progress stream: {describe(exc)}") from None
            note(f"generator {describe(exc)}; reconnecting in {delay:.1f}s")
            time.sleep(delay)


def outcome(status: generator_pb2.CampaignStatus) -> tuple[int, str]:
    """(exit code, the line that says how the campaign ended; empty when it completed)."""
    cid = status.campaign_id
    code = EXIT_CODES.get(status.state, NOT_FINISHED_EXIT_CODE)
    if status.state == State.CAMPAIGN_STATE_COMPLETED:
        return code, ""
    if status.state == State.CAMPAIGN_STATE_FAILED:
        return code, f"campaign {cid} failed: {status.error}"
    if status.state == State.CAMPAIGN_STATE_CANCELLED:
        return code, f"campaign {cid} was cancelled; continue it with: gauntlet resume {cid}"
    why = status.error or "no generator runs it any more"
    return code, f"campaign {cid} was interrupted: {why}; resume it with: gauntlet resume {cid}"


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@dataclass
class Pace:
    """Executions per second and the time left, for the progress bar: measured from the first status this command
    saw (a resumed campaign's earlier executions do not inflate the rate), over valid executions only (invalid
    inputs are not executions and do not count toward the budget)."""

    started: float
    first_executions: int | None = None

    def fields(self, executions: int, total: int, now: float) -> dict[str, str]:
        if self.first_executions is None:
            self.first_executions = executions
        done, elapsed = executions - self.first_executions, now - self.started
        if done <= 0 or elapsed <= 0:
            return {"rate": "-/s", "eta": "ETA -" if total else ""}
        rate = done / elapsed
        shown = f"{rate:.1f}/s" if rate < 100 else f"{rate:.0f}/s"
        if not total:
            return {"rate": shown, "eta": ""}
        return {"rate": shown, "eta": f"ETA {_clock(max(total - executions, 0) / rate)}"}
