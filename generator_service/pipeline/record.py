"""Record: store a batch's executions (before anyone hears of them), count them, publish progress, then tell the
strategy what the store holds, in asking order.

The running totals start from the store's one aggregate query of a session and add each execution the store took
(a retried batch's already stored rows are skipped), so a stop check or a progress event costs O(1). An invalid
input is stored and counted as invalid, never as an execution: ``Totals.run`` is what budgets, progress and
summaries count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import Counter

from generator_service.pipeline.plan import Batch, results_of
from generator_service.store import CampaignStore, ExecutionRow, Totals
from generator_service.strategies.base import Result, Strategy

EXECUTIONS = Counter("gauntlet_generator_executions_total", "Executions stored, by verdict", ["verdict"])


class Recorder:
    def __init__(self, store: CampaignStore, campaign_id: str, publish: Callable[[str, str], None]) -> None:
        self.store = store
        self.campaign_id = campaign_id
        self.publish = publish  # (kind, message)
        self.totals = Totals()

    def begin(self) -> None:
        """Counts what the store holds (a resumed campaign's earlier sessions)."""
        self.totals = self.store.count(self.campaign_id)

    def record(self, rows: Sequence[ExecutionRow]) -> list[ExecutionRow]:
        """Stores ``rows``; counts and announces those the store took (a failure each, then one progress event)."""
        stored = self.store.add_executions(self.campaign_id, list(rows))
        for row in stored:
            self.totals.add(row)
            EXECUTIONS.labels(row.verdict).inc()
        for row in stored:
            if row.verdict == "fail":
                self.publish("failure", f"{row.test_case_id}: {row.reason}")
        if stored:
            self.publish("progress", "")
        return stored

    def stored_ids(self, batch: Batch) -> set[str]:
        return {r.test_case_id for r in self.store.executions(self.campaign_id, batch.number)}

    def results(self, batch: Batch) -> list[Result]:
        return results_of(batch, {r.test_case_id: r for r in self.store.executions(self.campaign_id, batch.number)})

    def tell(self, strategy: Strategy, batch: Batch) -> None:
        """Tells the strategy the batch's stored results (cases without one, when the campaign stopped mid-batch,
        are left out)."""
        strategy.tell(self.results(batch))
