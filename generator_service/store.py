"""The campaign store: every asked test case and every execution, in SQLite (default) or PostgreSQL.

An execution is written before it is acknowledged (told to the strategy, reported as
progress). (campaign_id, test_case_id) is unique, so a retried batch never double-counts.

Numbers are stored finite. An execution whose margin, total reward or a descriptor is NaN or infinite (an
environment or oracle that produced one) is stored as an error execution: verdict "invalid", those numbers 0 (no
descriptors), and a reason naming the number and keeping the oracle's verdict and reason. It is counted and shown,
never dropped, and like every invalid execution it does not count against the execution budget.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

metadata = sa.MetaData()

campaigns = sa.Table(
    "campaigns",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("spec", sa.Text, nullable=False),  # JSON of the CampaignConfig
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("stop_reason", sa.String(32), nullable=False, default=""),
    sa.Column("error", sa.Text, nullable=False, default=""),
    sa.Column("wall_seconds", sa.Float, nullable=False, default=0.0),  # closed sessions only
    sa.Column("created_at", sa.String(32), nullable=False),
)

test_cases = sa.Table(
    "test_cases",
    metadata,
    sa.Column("campaign_id", sa.String(64), sa.ForeignKey("campaigns.id"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),  # 1-based order in which the strategy asked
    sa.Column("batch", sa.Integer, nullable=False),
    sa.Column("test_case_id", sa.String(64), nullable=False),
    sa.Column("values", sa.Text, nullable=False),
)

executions = sa.Table(
    "executions",
    metadata,
    sa.Column("campaign_id", sa.String(64), sa.ForeignKey("campaigns.id"), primary_key=True),
    sa.Column("test_case_id", sa.String(64), primary_key=True),
    # 1-based position in the order the strategy asked (not completion order: short, failing
    # episodes finish first in a batch, and "tests to first failure" must not profit from that)
    sa.Column("idx", sa.Integer, nullable=False),
    sa.Column("batch", sa.Integer, nullable=False),
    sa.Column("values", sa.Text, nullable=False),
    sa.Column("verdict", sa.String(8), nullable=False),
    sa.Column("margin", sa.Float, nullable=False),
    sa.Column("steps", sa.Integer, nullable=False),
    sa.Column("total_reward", sa.Float, nullable=False),
    sa.Column("descriptors", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("repetitions", sa.Integer, nullable=False),
    sa.Column("failed_repetitions", sa.Integer, nullable=False),
    sa.Column("elapsed_seconds", sa.Float, nullable=False),
    # JSON list; "[]" unless the campaign keeps final observations (added after the first release: see _migrate)
    sa.Column("final_observation", sa.Text, nullable=False, server_default="[]"),
    sa.UniqueConstraint("campaign_id", "idx", name="uq_execution_index"),
    sa.Index("ix_executions_batch", "campaign_id", "batch"),
)


@dataclass(frozen=True)
class ExecutionRow:
    test_case_id: str
    index: int
    batch: int
    values: dict[str, Any]
    verdict: str  # "pass" | "fail" | "invalid"
    margin: float
    steps: int
    total_reward: float
    descriptors: tuple[float, ...]
    reason: str
    repetitions: int
    failed_repetitions: int
    elapsed_seconds: float
    final_observation: tuple[float, ...] = ()


@dataclass(frozen=True)
class CampaignRow:
    id: str
    name: str
    spec: dict[str, Any]
    state: str
    stop_reason: str
    error: str
    wall_seconds: float
    created_at: str


@dataclass
class Totals:
    """A campaign's running counts. The store computes them with one aggregate; a running campaign seeds them once
    from there (start or resume) and adds each execution it stores, so a stop check or a progress event costs O(1)
    instead of a scan over every stored execution."""

    executions: int = 0  # every stored row
    steps: int = 0
    failures: int = 0
    invalid: int = 0  # inputs the subject rejected (stored unrun)
    first_failure_index: int = 0  # tests to first failure: the earliest-asked failing test (0: none yet)
    first_failure_seconds: float = 0.0  # when a failure was first seen

    def add(self, row: ExecutionRow) -> None:
        """Counts one newly stored execution (never one the store skipped as already stored)."""
        self.executions += 1
        self.steps += row.steps
        if row.verdict == "invalid":
            self.invalid += 1
        if row.verdict == "fail":
            self.failures += 1
            if not self.first_failure_index or row.index < self.first_failure_index:
                self.first_failure_index = row.index
            if self.failures == 1 or row.elapsed_seconds < self.first_failure_seconds:
                self.first_failure_seconds = row.elapsed_seconds

    @property
    def run(self) -> int:
        """Executions that ran the subject (what an execution budget counts)."""
        return self.executions - self.invalid

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_store_url(root: Path = Path("runs")) -> str:
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'gauntlet.db'}"


class CampaignStore:
    def __init__(self, url: str) -> None:
        connect_args = {"check_same_thread": False, "timeout": 30} if url.startswith("sqlite") else {}
        self.url = url
        self.engine: Engine = sa.create_engine(url, connect_args=connect_args, pool_pre_ping=True)
        if url.startswith("sqlite"):
            with self.engine.begin() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        if url.startswith("sqlite"):
            # WAL + synchronous=NORMAL: a commit survives a process crash (what resuming needs), not a power cut
            sa.event.listen(self.engine, "connect", lambda dbapi, _: dbapi.execute("PRAGMA synchronous=NORMAL"))
        metadata.create_all(self.engine)
        _migrate(self.engine)

    # -- campaigns --------------------------------------------------------------------------------
    def create_campaign(self, campaign_id: str, name: str, spec: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                campaigns.insert().values(
                    id=campaign_id,
                    name=name,
                    spec=json.dumps(spec, sort_keys=True),
                    state="running",
                    stop_reason="",
                    error="",
                    wall_seconds=0.0,
                    created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                )
            )

    def campaign(self, campaign_id: str) -> CampaignRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(campaigns.select().where(campaigns.c.id == campaign_id)).mappings().first()
        return _campaign_row(row) if row else None

    def list_campaigns(self) -> list[CampaignRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(campaigns.select().order_by(campaigns.c.created_at)).mappings().all()
        return [_campaign_row(r) for r in rows]

    def set_state(
        self, campaign_id: str, state: str, stop_reason: str = "", error: str = "", add_wall_seconds: float = 0.0
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                campaigns.update()
                .where(campaigns.c.id == campaign_id)
                .values(
                    state=state,
                    stop_reason=stop_reason,
                    error=error,
                    wall_seconds=campaigns.c.wall_seconds + add_wall_seconds,
                )
            )

    # -- test cases -------------------------------------------------------------------------------
    def add_test_cases(
        self, campaign_id: str, batch: int, first_position: int, cases: list[tuple[str, dict[str, Any]]]
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                test_cases.insert(),
                [
                    dict(
                        campaign_id=campaign_id,
                        position=first_position + i,
                        batch=batch,
                        test_case_id=cid,
                        values=json.dumps(values),
                    )
                    for i, (cid, values) in enumerate(cases)
                ],
            )

    def asked_batches(self, campaign_id: str) -> list[list[tuple[str, dict[str, Any]]]]:
        """Test cases in asking order, grouped by batch."""
        with self.engine.connect() as conn:
            rows = (
                conn.execute(
                    test_cases.select().where(test_cases.c.campaign_id == campaign_id).order_by(test_cases.c.position)
                )
                .mappings()
                .all()
            )
        batches: dict[int, list[tuple[str, dict[str, Any]]]] = {}
        for r in rows:
            batches.setdefault(r["batch"], []).append((r["test_case_id"], json.loads(r["values"])))
        return [batches[b] for b in sorted(batches)]

    # -- executions -------------------------------------------------------------------------------
    def add_execution(self, campaign_id: str, row: ExecutionRow) -> bool:
        """Writes one execution (non-finite numbers as an error: storable()); False when that test case was
        already stored (a retried batch). Any other refusal raises: a write that failed is never taken as done."""
        row = storable(row)
        try:
            with self.engine.begin() as conn:
                conn.execute(executions.insert().values(**_execution_values(campaign_id, row)))
            return True
        except sa.exc.IntegrityError:
            if self._stored(campaign_id, row.test_case_id):
                return False
            raise

    def add_executions(self, campaign_id: str, rows: list[ExecutionRow]) -> list[ExecutionRow]:
        """Writes several executions in one transaction; returns those stored, as stored (storable()), skipping
        those an earlier attempt stored."""
        rows = [storable(r) for r in rows]
        if not rows:
            return []
        try:
            with self.engine.begin() as conn:
                conn.execute(executions.insert(), [_execution_values(campaign_id, r) for r in rows])
            return rows
        except sa.exc.IntegrityError:  # some were stored by an earlier attempt: fall back to one by one
            return [r for r in rows if self.add_execution(campaign_id, r)]

    def _stored(self, campaign_id: str, test_case_id: str) -> bool:
        query = sa.select(executions.c.idx).where(
            executions.c.campaign_id == campaign_id, executions.c.test_case_id == test_case_id
        )
        with self.engine.connect() as conn:
            return conn.execute(query).first() is not None

    def executions(self, campaign_id: str, batch: int | None = None) -> Iterator[ExecutionRow]:
        """Stored executions in execution order, optionally only those of one batch."""
        query = executions.select().where(executions.c.campaign_id == campaign_id)
        if batch is not None:
            query = query.where(executions.c.batch == batch)
        with self.engine.connect() as conn:
            for r in conn.execute(query.order_by(executions.c.idx)).mappings():
                yield ExecutionRow(
                    r["test_case_id"],
                    r["idx"],
                    r["batch"],
                    json.loads(r["values"]),
                    r["verdict"],
                    r["margin"],
                    r["steps"],
                    r["total_reward"],
                    tuple(json.loads(r["descriptors"])),
                    r["reason"],
                    r["repetitions"],
                    r["failed_repetitions"],
                    r["elapsed_seconds"],
                    tuple(json.loads(r["final_observation"])),
                )

    def totals(self, campaign_id: str) -> dict[str, Any]:
        return self.count(campaign_id).as_dict()

    def count(self, campaign_id: str) -> Totals:
        """The campaign's totals by one aggregate over its executions (a running campaign keeps its own: Totals)."""
        with self.engine.connect() as conn:
            failing = executions.c.verdict == "fail"
            row = conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.coalesce(sa.func.sum(executions.c.steps), 0),
                    sa.func.coalesce(sa.func.sum(sa.case((failing, 1), else_=0)), 0),
                    sa.func.coalesce(sa.func.sum(sa.case((executions.c.verdict == "invalid", 1), else_=0)), 0),
                    sa.func.min(sa.case((failing, executions.c.idx), else_=None)),
                    sa.func.min(sa.case((failing, executions.c.elapsed_seconds), else_=None)),
                ).where(executions.c.campaign_id == campaign_id)
            ).one()
        return Totals(
            executions=int(row[0]),
            steps=int(row[1]),
            failures=int(row[2]),
            invalid=int(row[3]),
            first_failure_index=int(row[4] or 0),
            first_failure_seconds=float(row[5] or 0.0),
        )


def storable(row: ExecutionRow) -> ExecutionRow:
    """The row as the store keeps it: unchanged when its numbers are finite, else an error execution saying which
    number was not finite and what the oracle had said (module docstring)."""
    bad = [("margin", row.margin), ("total_reward", row.total_reward)]
    bad += [(f"descriptors[{i}]", d) for i, d in enumerate(row.descriptors)]
    bad = [(name, value) for name, value in bad if not math.isfinite(value)]
    if not bad:
        return row
    numbers = ", ".join(f"{name}={value}" for name, value in bad[:3]) + (", ..." if len(bad) > 3 else "")
    return dataclasses.replace(
        row,
        verdict="invalid",
        margin=0.0,
        total_reward=0.0,
        descriptors=(),
        reason=f"error: the episode gave non-finite numbers ({numbers}), so it was not judged; "
        f"the oracle said {row.verdict}: {row.reason}",
    )


def _execution_values(campaign_id: str, row: ExecutionRow) -> dict[str, Any]:
    return dict(
        campaign_id=campaign_id,
        test_case_id=row.test_case_id,
        idx=row.index,
        batch=row.batch,
        values=json.dumps(row.values),
        verdict=row.verdict,
        margin=row.margin,
        steps=row.steps,
        total_reward=row.total_reward,
        descriptors=json.dumps(list(row.descriptors)),
        reason=row.reason,
        repetitions=row.repetitions,
        failed_repetitions=row.failed_repetitions,
        elapsed_seconds=row.elapsed_seconds,
        final_observation=json.dumps(list(row.final_observation)),
    )


def _migrate(engine: Engine) -> None:
    """Brings a store written by an earlier version up to this schema (create_all adds tables, not columns)."""
    present = {c["name"] for c in sa.inspect(engine).get_columns("executions")}
    if "final_observation" not in present:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE executions ADD COLUMN final_observation TEXT NOT NULL DEFAULT '[]'")


def _campaign_row(r: Any) -> CampaignRow:
    try:
        spec = json.loads(r["spec"])
    except (TypeError, ValueError):  # written by hand or by a broken version: the servicer reports it, per row
        spec = None
    return CampaignRow(
        r["id"],
        r["name"],
        spec if isinstance(spec, dict) else {},
        r["state"],
        r["stop_reason"],
        r["error"],
        r["wall_seconds"],
        r["created_at"],
    )
