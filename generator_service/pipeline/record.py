"""Record: store a batch's executions (before anyone hears of them), count them, publish progress, then tell the
strategy what the store holds, in asking order.

The running totals start from the store's one aggregate query of a session and add each execution the store took
(a retried batch's already stored rows are skipped), so a stop check or a progress event costs O(1). An invalid
input is stored and counted as invalid, never as an execution: ``Totals.run`` is what budgets, progress and
summaries count.

The current batch's stored rows are kept as they are stored (read from the store once per batch, for what an earlier
session stored), so the per-batch questions (which cases are stored, what the strategy hears) do not read the batch
back from the store: the rows kept are the ones add_executions stored, as stored (storable()).
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
        self._batch = 0  # the batch whose stored rows _rows holds (0: none yet)
        self._rows: dict[str, ExecutionRow] = {}

    def begin(self) -> None:
        """Counts what the store holds (a resumed campaign's earlier sessions)."""
        self.totals = self.store.count(self.campaign_id)
        self._batch, self._rows = 0, {}  # the store is read again at the next batch's first question

    def record(self, rows: Sequence[ExecutionRow]) -> list[ExecutionRow]:
        """Stores ``rows``; counts and announces those the store took (a failure each, then one progress event)."""
        stored = self.store.add_executions(self.campaign_id, list(rows))
        for row in stored:
            self.totals.add(row)
            if row.batch == self._batch:
                self._rows[row.test_case_id] = row
            EXECUTIONS.labels(row.verdict).inc()
        for row in stored:
            if row.verdict == "fail":
                self.publish("failure", f"{row.test_case_id}: {row.reason}")
        if stored:
            self.publish("progress", "")
        return stored

    def stored_rows(self, batch: Batch) -> dict[str, ExecutionRow]:
        """The batch's stored executions by test case id: from the store at the batch's first question, then kept as
        this recorder stores them."""
        if batch.number != self._batch:
            self._rows = {r.test_case_id: r for r in self.store.executions(self.campaign_id, batch.number)}
            self._batch = batch.number
        return self._rows

    def stored_ids(self, batch: Batch) -> set[str]:
        return set(self.stored_rows(batch))

    def results(self, batch: Batch) -> list[Result]:
        return results_of(batch, self.stored_rows(batch))

    def tell(self, strategy: Strategy, batch: Batch) -> None:
        """Tells the strategy the batch's stored results (cases without one, when the campaign stopped mid-batch,
        are left out)."""
        strategy.tell(self.results(batch))
