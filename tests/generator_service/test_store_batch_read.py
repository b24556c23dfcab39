"""The campaign loop reads one batch's executions per batch: that read must not grow with the campaign's store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from generator_service.store import CampaignStore, ExecutionRow

VALUES = {"x": 0.1, "theta": 0.01}


def row(position: int, batch: int) -> ExecutionRow:
    return ExecutionRow(f"t{position:07d}", position, batch, VALUES, "pass", 0.5, 1, 1.0, (), "", 1, 0, 0.1)


def test_a_batch_is_read_through_its_index_in_asking_order(tmp_path: Path) -> None:
    store = CampaignStore(f"sqlite:///{tmp_path / 'store.db'}")
    store.create_campaign("c", "c", {"x": 1})
    for batch in (1, 2, 3):
        # stored in completion order, not asking order (short episodes finish first)
        store.add_executions("c", [row(p, batch) for p in reversed(range(batch * 10 - 9, batch * 10 + 1))])
    statements: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        statements.append((statement, parameters))

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    read = list(store.executions("c", 2))
    sa.event.remove(store.engine, "before_cursor_execute", seen)
    assert [r.index for r in read] == list(range(11, 21))
    assert [r.index for r in store.executions("c")] == list(range(1, 31))
    (statement, parameters), *_ = [s for s in statements if "FROM executions" in s[0]]
    with store.engine.connect() as conn:
        plan = " ".join(str(step[-1]) for step in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters))
    # walking the (campaign_id, idx) index instead visits every row of the campaign for each batch
    assert "ix_executions_batch" in plan, plan
