"""The campaign store: every asked test case and every execution, in SQLite (default) or PostgreSQL.

An execution is written before it is acknowledged (told to the strategy, reported as
progress). (campaign_id, test_case_id) is unique, so a retried batch never double-counts.

Numbers are stored finite. An execution whose margin, total reward or a descriptor is NaN or infinite (an
environment or oracle that produced one) is stored as an error execution: verdict "invalid", those numbers 0 (no
descriptors), and a reason naming the number and keeping the oracle's verdict and reason. It is counted and shown,
never dropped, and like every invalid execution it does not count against the execution budget.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.ext.compiler import compiles

log = logging.getLogger("generator")
metadata = sa.MetaData()


class JsonText(sa.types.TypeDecorator[str]):
    """A JSON document held as text on the Python side. On PostgreSQL the column is `jsonb` (or `json` where key
    order matters), so the database itself refuses a value that is not JSON; SQLite keeps text."""

    impl = sa.Text
    cache_ok = True

    def __init__(self, pg_type: str = "jsonb") -> None:
        super().__init__()
        self.pg_type = pg_type

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(_PgJson(self.pg_type))
        return dialect.type_descriptor(sa.Text())

    def bind_expression(self, bindvalue: Any) -> Any:
        return sa.cast(bindvalue, _PgJson(self.pg_type)) if self.pg_type else bindvalue

    def column_expression(self, column: Any) -> Any:
        return sa.cast(column, sa.Text)


class _PgJson(sa.types.UserDefinedType[str]):
    """PostgreSQL's json/jsonb, passed as text both ways (JsonText casts)."""

    cache_ok = True

    def __init__(self, name: str) -> None:
        self.name = name

    def get_col_spec(self, **_: Any) -> str:
        return self.name.upper()


@compiles(_PgJson, "sqlite")
def _sqlite_json(element: _PgJson, compiler: Any, **_: Any) -> str:
    return "TEXT"  # SQLite casts to TEXT (JsonText's bind cast compiles here)


@dataclass(frozen=True)
class Lease:
    """A generator's ownership of one campaign: its writes carry `fence` (CampaignStore.owned)."""

    campaign_id: str
    owner: str
    fence: int


class StaleOwner(RuntimeError):
    """A write of a generator that no longer owns the campaign (another one took it over): refused, nothing
    written."""


class CampaignExists(Exception):
    """create_campaign: a campaign with that id is stored already (another request created it first)."""


class CorruptRow(ValueError):
    """A stored execution whose JSON cannot be read: names its campaign, test case and column."""

    def __init__(self, campaign_id: str, test_case_id: str, column: str) -> None:
        super().__init__(f"campaign {campaign_id!r}, test case {test_case_id!r}: column {column} is not valid JSON")
        self.campaign_id = campaign_id
        self.test_case_id = test_case_id
        self.column = column


campaigns = sa.Table(
    "campaigns",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("spec", JsonText(), nullable=False),  # JSON of the CampaignConfig
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("stop_reason", sa.String(32), nullable=False, default=""),
    sa.Column("error", sa.Text, nullable=False, default=""),
    sa.Column("wall_seconds", sa.Float, nullable=False, default=0.0),  # closed sessions only
    sa.Column("created_at", sa.String(32), nullable=False),
    # the generator that runs it (one at a time): its id, until when its lease holds (seconds since the epoch, on
    # the database's clock), and the fence, raised by every new owner; a write carries the fence it was made
    # under and is refused once another owner raised it (added after the first release: see _migrate)
    sa.Column("owner", sa.String(200), nullable=False, server_default=""),
    sa.Column("lease_until", sa.Float, nullable=False, server_default="0"),
    sa.Column("fence", sa.Integer, nullable=False, server_default="0"),
    # CancelCampaign reached a generator that does not run it: the owner cancels it at its next renewal
    sa.Column("cancel_requested", sa.Integer, nullable=False, server_default="0"),
)

# Every ownership a campaign had, for operators and tests: who held it under which fence, since when, the last
# lease they renewed, and when they gave it back (NULL: never; a generator that died)
campaign_owners = sa.Table(
    "campaign_owners",
    metadata,
    sa.Column("campaign_id", sa.String(64), sa.ForeignKey("campaigns.id"), primary_key=True),
    sa.Column("fence", sa.Integer, primary_key=True),
    sa.Column("owner", sa.String(200), nullable=False),
    sa.Column("previous_owner", sa.String(200), nullable=False),
    sa.Column("acquired_at", sa.Float, nullable=False),
    sa.Column("lease_until", sa.Float, nullable=False),
    sa.Column("released_at", sa.Float, nullable=True),
)

test_cases = sa.Table(
    "test_cases",
    metadata,
    sa.Column("campaign_id", sa.String(64), sa.ForeignKey("campaigns.id"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),  # 1-based order in which the strategy asked
    sa.Column("batch", sa.Integer, nullable=False),
    sa.Column("test_case_id", sa.String(64), nullable=False),
    # json, not jsonb: jsonb reorders keys, and a resume compares the replayed inputs with these as text
    sa.Column("values", JsonText("json"), nullable=False),
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
    sa.Column("values", JsonText(), nullable=False),
    sa.Column("verdict", sa.String(8), nullable=False),
    sa.Column("margin", sa.Float, nullable=False),
    sa.Column("steps", sa.Integer, nullable=False),
    sa.Column("total_reward", sa.Float, nullable=False),
    sa.Column("descriptors", JsonText(), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("repetitions", sa.Integer, nullable=False),
    sa.Column("failed_repetitions", sa.Integer, nullable=False),
    sa.Column("elapsed_seconds", sa.Float, nullable=False),
    # JSON list; "[]" unless the campaign keeps final observations (added after the first release: see _migrate)
    sa.Column("final_observation", JsonText(), nullable=False, server_default="[]"),
    sa.UniqueConstraint("campaign_id", "idx", name="uq_execution_index"),
    sa.Index("ix_executions_batch", "campaign_id", "batch"),
)

# One row per shrunk failure (ShrinkExecution, or a campaign's `shrink` option at its end): the failure's id, the
# minimal failing input found (its values, as they ran under the failure's own episode seeds, with its verdict and
# reason), both distances from the nominal point, the parameters still moved and the executions the search spent.
# Shrinking the same failure again replaces its row.
shrinks = sa.Table(
    "shrinks",
    metadata,
    sa.Column("campaign_id", sa.String(64), sa.ForeignKey("campaigns.id"), primary_key=True),
    sa.Column("test_case_id", sa.String(64), primary_key=True),  # the original failure
    # the candidate's id ("s0000012"), or the original's when nothing nearer failed
    sa.Column("shrunk_test_case_id", sa.String(64), nullable=False),
    sa.Column("values", JsonText(), nullable=False),
    sa.Column("verdict", sa.String(8), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("margin", sa.Float, nullable=False),
    sa.Column("steps", sa.Integer, nullable=False),
    sa.Column("total_reward", sa.Float, nullable=False),
    sa.Column("repetitions", sa.Integer, nullable=False),
    sa.Column("failed_repetitions", sa.Integer, nullable=False),
    sa.Column("original_distance", sa.Float, nullable=False),
    sa.Column("shrunk_distance", sa.Float, nullable=False),
    sa.Column("moved", JsonText(), nullable=False),  # JSON list of parameter names
    sa.Column("nominal", JsonText(), nullable=False),  # JSON object: parameter -> nominal value
    sa.Column("executions", sa.Integer, nullable=False),
    sa.Column("max_executions", sa.Integer, nullable=False),
    sa.Column("created_at", sa.String(32), nullable=False),
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


STORE_FOLDER = "store"  # the default SQLite store's own folder under runs/, which no request path may name
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")  # files SQLite keeps beside the database


def default_store_url(root: Path = Path("runs")) -> str:
    """sqlite:///runs/store/gauntlet.db. A store an earlier version kept at runs/gauntlet.db (inside the generator's
    artifact root) is copied there once, consistently (VACUUM INTO), and the old file renamed
    gauntlet.db.moved-to-store; stop the suite that used it before the first start of this version."""
    folder = root / STORE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    database = folder / "gauntlet.db"
    legacy = root / "gauntlet.db"
    if legacy.is_file() and not database.exists():
        _move_legacy_store(legacy, database)
    return f"sqlite:///{database}"


def _move_legacy_store(legacy: Path, database: Path) -> None:
    import sqlite3

    partial = database.with_name(database.name + ".partial")
    partial.unlink(missing_ok=True)
    with closing(sqlite3.connect(legacy, timeout=30)) as conn:
        conn.execute("VACUUM INTO ?", (str(partial),))  # a consistent copy, committed WAL content included
    partial.rename(database)
    legacy.rename(legacy.with_name(legacy.name + ".moved-to-store"))
    for suffix in SQLITE_SIDECARS:
        legacy.with_name(legacy.name + suffix).unlink(missing_ok=True)
    log.warning("moved the campaign store %s to %s (its own folder, outside the artifact root)", legacy, database)


class CampaignStore:
    lease: Lease | None = None  # set on the view owned() returns: every write is fenced by it

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
        database = self.sqlite_file()
        self._identity = _file_identity(database) if database is not None else None

    def sqlite_file(self) -> Path | None:
        """The SQLite database file (None for PostgreSQL or an in-memory database)."""
        url = sa.engine.make_url(self.url)
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return None
        return Path(url.database)

    def own_files(self) -> tuple[list[Path], list[Path]]:
        """(files, folders) of the store on this machine, which no request path may name: the SQLite database and
        the files SQLite keeps beside it, and its folder."""
        database = self.sqlite_file()
        if database is None:
            return [], []
        files = [database, *(database.with_name(database.name + s) for s in SQLITE_SIDECARS)]
        return files, [database.parent]

    # -- campaigns --------------------------------------------------------------------------------
    def create_campaign(
        self, campaign_id: str, name: str, spec: dict[str, Any], owner: str = "", lease_seconds: float = 0.0
    ) -> Lease | None:
        """Stores a new campaign, running (owned by `owner` for `lease_seconds`, when given: its lease);
        CampaignExists when that id is stored already. The insert is the one atomic test of the idempotency key:
        of concurrent requests with one id, exactly one creates it."""
        try:
            with self.engine.begin() as conn:
                now = self._now(conn)
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
                        owner=owner,
                        lease_until=now + lease_seconds if owner else 0.0,
                        fence=1 if owner else 0,
                    )
                )
                if not owner:
                    return None
                conn.execute(
                    campaign_owners.insert().values(
                        campaign_id=campaign_id,
                        fence=1,
                        owner=owner,
                        previous_owner="",
                        acquired_at=now,
                        lease_until=now + lease_seconds,
                        released_at=None,
                    )
                )
                return Lease(campaign_id, owner, 1)
        except sa.exc.IntegrityError:
            if self.campaign(campaign_id) is None:
                raise  # another constraint
            raise CampaignExists(campaign_id) from None

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
            done = conn.execute(
                campaigns.update()
                .where(campaigns.c.id == campaign_id, *self._owned_by_me(campaign_id))
                .values(
                    state=state,
                    stop_reason=stop_reason,
                    error=error,
                    wall_seconds=campaigns.c.wall_seconds + add_wall_seconds,
                    # a cancel asked through another generator is answered once the campaign stops
                    cancel_requested=campaigns.c.cancel_requested if state == "running" else 0,
                )
            )
            if self.lease is not None and done.rowcount != 1:
                raise self._stale(campaign_id)

    # -- ownership --------------------------------------------------------------------------------
    def owned(self, lease: Lease) -> CampaignStore:
        """This store as the owner of `lease` writes to it: every write checks, in its own transaction, that the
        lease's fence is still the campaign's, else raises StaleOwner and writes nothing."""
        view = copy.copy(self)
        view.lease = lease
        return view

    def acquire(self, campaign_id: str, owner: str, lease_seconds: float, may_take: Any = None) -> Lease | None:
        """Takes the campaign for `owner` when nobody holds it: no owner, `owner` itself, a lease that ran out on the
        database's clock, or an owner `may_take(previous_owner)` says is gone (a dead process on this host). The
        fence goes up by one, so the writes of any previous owner are refused from now on. None: another generator
        holds it (or took it at the same moment)."""
        with self.engine.begin() as conn:
            now = self._now(conn)
            row = conn.execute(
                sa.select(campaigns.c.owner, campaigns.c.lease_until, campaigns.c.fence).where(
                    campaigns.c.id == campaign_id
                )
            ).first()
            if row is None:
                return None
            previous, until, fence = row
            free = not previous or previous == owner or until < now or (may_take is not None and may_take(previous))
            if not free:
                return None
            taken = conn.execute(  # compare-and-set on the fence: of two takers, one wins
                campaigns.update()
                .where(campaigns.c.id == campaign_id, campaigns.c.fence == fence, campaigns.c.owner == previous)
                .values(owner=owner, lease_until=now + lease_seconds, fence=fence + 1)
            )
            if taken.rowcount != 1:
                return None
            conn.execute(
                campaign_owners.insert().values(
                    campaign_id=campaign_id,
                    fence=fence + 1,
                    owner=owner,
                    previous_owner=previous,
                    acquired_at=now,
                    lease_until=now + lease_seconds,
                    released_at=None,
                )
            )
        return Lease(campaign_id, owner, fence + 1)

    def renew(self, lease: Lease, lease_seconds: float) -> bool:
        """Extends the lease from now; False when it is no longer held (another generator took the campaign)."""
        with self.engine.begin() as conn:
            now = self._now(conn)
            renewed = conn.execute(campaigns.update().where(*_holds(lease)).values(lease_until=now + lease_seconds))
            if renewed.rowcount != 1:
                return False
            conn.execute(
                campaign_owners.update()
                .where(campaign_owners.c.campaign_id == lease.campaign_id, campaign_owners.c.fence == lease.fence)
                .values(lease_until=now + lease_seconds)
            )
        return True

    def request_cancel(self, campaign_id: str) -> bool:
        """Asks the generator that runs the campaign to cancel it (it reads this when it renews its lease); False
        when the campaign is not running."""
        with self.engine.begin() as conn:
            asked = conn.execute(
                campaigns.update()
                .where(campaigns.c.id == campaign_id, campaigns.c.state == "running")
                .values(cancel_requested=1)
            )
        return asked.rowcount == 1

    def cancels_requested(self, leases: list[Lease]) -> list[str]:
        """Of the campaigns these leases hold, those another generator was asked to cancel."""
        if not leases:
            return []
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(campaigns.c.id).where(
                    campaigns.c.id.in_([lease.campaign_id for lease in leases]), campaigns.c.cancel_requested == 1
                )
            ).all()
        return [r[0] for r in rows]

    def release(self, lease: Lease) -> None:
        """Gives the campaign back (when still held): another generator may take it at once."""
        with self.engine.begin() as conn:
            now = self._now(conn)
            released = conn.execute(campaigns.update().where(*_holds(lease)).values(owner="", lease_until=0.0))
            if released.rowcount == 1:
                conn.execute(
                    campaign_owners.update()
                    .where(campaign_owners.c.campaign_id == lease.campaign_id, campaign_owners.c.fence == lease.fence)
                    .values(released_at=now)
                )

    def owners(self, campaign_id: str) -> list[dict[str, Any]]:
        """The campaign's ownership history, oldest first (campaign_owners)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                campaign_owners.select()
                .where(campaign_owners.c.campaign_id == campaign_id)
                .order_by(campaign_owners.c.fence)
            ).mappings()
            return [dict(r) for r in rows]

    def unowned(self, owner: str, may_take: Any = None) -> list[str]:
        """Ids of the campaigns left unfinished (running, or interrupted by a generator's shutdown) that `owner`
        may take now (acquire's rules), oldest first."""
        left = sa.or_(
            campaigns.c.state == "running",
            sa.and_(campaigns.c.state == "interrupted", campaigns.c.stop_reason == "shutdown"),
        )
        with self.engine.connect() as conn:
            now = self._now(conn)
            rows = conn.execute(
                sa.select(campaigns.c.id, campaigns.c.owner, campaigns.c.lease_until)
                .where(left)
                .order_by(campaigns.c.created_at)
            ).all()
        return [
            cid
            for cid, previous, until in rows
            if not previous or previous == owner or until < now or (may_take is not None and may_take(previous))
        ]

    def leases(self) -> dict[str, tuple[str, float]]:
        """campaign id -> (owner, lease_until) of every campaign with an owner."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(campaigns.c.id, campaigns.c.owner, campaigns.c.lease_until).where(campaigns.c.owner != "")
            ).all()
        return {r[0]: (r[1], r[2]) for r in rows}

    def database_now(self) -> float:
        with self.engine.connect() as conn:
            return self._now(conn)

    def _now(self, conn: sa.Connection) -> float:
        """Seconds since the epoch on the database's clock: leases of generators on several machines compare on
        one clock."""
        if self.engine.dialect.name == "postgresql":
            return float(conn.execute(sa.select(sa.extract("epoch", sa.func.clock_timestamp()))).scalar_one())
        return float(conn.execute(sa.select((sa.func.julianday("now") - 2440587.5) * 86400.0)).scalar_one())

    def _owned_by_me(self, campaign_id: str) -> list[Any]:
        if self.lease is None:
            return []
        if self.lease.campaign_id != campaign_id:
            raise ValueError(f"a store owned for campaign {self.lease.campaign_id!r} writes {campaign_id!r}")
        return _holds(self.lease)

    def _fence(self, conn: sa.Connection, campaign_id: str) -> None:
        """In a write's transaction: StaleOwner unless this view's lease still holds the campaign. The update takes
        the campaign row's lock (PostgreSQL) or the write lock (SQLite) until the write commits, so a new owner's
        takeover waits for it, and every later write of this one is refused."""
        if self.lease is None:
            return
        held = conn.execute(
            campaigns.update()
            .where(campaigns.c.id == campaign_id, *self._owned_by_me(campaign_id))
            .values(lease_until=campaigns.c.lease_until)
        )
        if held.rowcount != 1:
            raise self._stale(campaign_id)

    def _stale(self, campaign_id: str) -> StaleOwner:
        assert self.lease is not None
        return StaleOwner(
            f"campaign {campaign_id!r}: {self.lease.owner} no longer owns it (fence {self.lease.fence} is stale); "
            "another generator took it over"
        )

    # -- test cases -------------------------------------------------------------------------------
    def add_test_cases(
        self, campaign_id: str, batch: int, first_position: int, cases: list[tuple[str, dict[str, Any]]]
    ) -> None:
        with self.engine.begin() as conn:
            self._fence(conn, campaign_id)
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
                self._fence(conn, campaign_id)
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
                self._fence(conn, campaign_id)
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

    def executions(
        self, campaign_id: str, batch: int | None = None, corrupt: list[CorruptRow] | None = None
    ) -> Iterator[ExecutionRow]:
        """Stored executions in execution order, optionally only those of one batch. A row whose JSON cannot be
        read raises CorruptRow naming it; with `corrupt`, it is appended there instead and the listing goes on."""
        query = executions.select().where(executions.c.campaign_id == campaign_id)
        with self.engine.connect() as conn:
            if batch is None:
                found: Iterable[sa.RowMapping] = conn.execute(query.order_by(executions.c.idx)).mappings()
            else:
                # one batch (the campaign loop reads one per batch): found through ix_executions_batch and sorted
                # here. Ordered by idx in SQL, SQLite walks the (campaign_id, idx) index over every row of the
                # campaign instead, so each batch's read grew with the store (bench/campaign_overhead.py)
                found = conn.execute(query.where(executions.c.batch == batch)).mappings().all()
                found = sorted(found, key=lambda r: int(r["idx"]))
            for r in found:
                try:
                    yield _execution_row(campaign_id, r)
                except CorruptRow as exc:
                    if corrupt is None:
                        raise
                    corrupt.append(exc)

    def add_shrink(self, campaign_id: str, row: ShrinkRow) -> None:
        """Stores a shrink result, replacing an earlier one of the same failure (no lease: shrinking writes no
        execution, and runs after the campaign's own work)."""
        s = storable(row.shrunk)
        values = dict(
            campaign_id=campaign_id,
            test_case_id=row.test_case_id,
            shrunk_test_case_id=s.test_case_id,
            values=json.dumps(s.values),
            verdict=s.verdict,
            reason=s.reason,
            margin=s.margin,
            steps=s.steps,
            total_reward=s.total_reward,
            repetitions=s.repetitions,
            failed_repetitions=s.failed_repetitions,
            original_distance=row.original_distance,
            shrunk_distance=row.shrunk_distance,
            moved=json.dumps(list(row.moved)),
            nominal=json.dumps(row.nominal),
            executions=row.executions,
            max_executions=row.max_executions,
            created_at=row.created_at or datetime.now(UTC).isoformat(timespec="seconds"),
        )
        with self.engine.begin() as conn:
            conn.execute(
                shrinks.delete().where(shrinks.c.campaign_id == campaign_id, shrinks.c.test_case_id == row.test_case_id)
            )
            conn.execute(shrinks.insert().values(**values))

    def shrinks(self, campaign_id: str) -> list[ShrinkRow]:
        """The campaign's stored shrinks, ordered by the original failure's id (its asking position)."""
        query = shrinks.select().where(shrinks.c.campaign_id == campaign_id).order_by(shrinks.c.test_case_id)
        out = []
        with self.engine.connect() as conn:
            for r in conn.execute(query).mappings():
                try:
                    values, moved, centre = json.loads(r["values"]), json.loads(r["moved"]), json.loads(r["nominal"])
                except (TypeError, ValueError):
                    raise CorruptRow(campaign_id, r["test_case_id"], "shrinks") from None
                if not (isinstance(values, dict) and isinstance(moved, list) and isinstance(centre, dict)):
                    raise CorruptRow(campaign_id, r["test_case_id"], "shrinks")
                shrunk = ExecutionRow(
                    r["shrunk_test_case_id"],
                    0,
                    0,
                    values,
                    r["verdict"],
                    r["margin"],
                    r["steps"],
                    r["total_reward"],
                    (),
                    r["reason"],
                    r["repetitions"],
                    r["failed_repetitions"],
                    0.0,
                )
                out.append(
                    ShrinkRow(
                        r["test_case_id"],
                        shrunk,
                        r["original_distance"],
                        r["shrunk_distance"],
                        tuple(str(m) for m in moved),
                        {str(k): float(v) for k, v in centre.items()},
                        r["executions"],
                        r["max_executions"],
                        r["created_at"],
                    )
                )
        return out

    def corrupt_executions(self, campaign_id: str) -> list[CorruptRow]:
        """Every stored execution of the campaign that cannot be read (one pass over them)."""
        found: list[CorruptRow] = []
        for _ in self.executions(campaign_id, corrupt=found):
            pass
        return found

    def check(self) -> str:
        """'' when the store answers a read and (SQLite) its file is still the one opened; else why not, in words
        without paths or server details (what readiness reports)."""
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.select(sa.func.count()).select_from(campaigns)).scalar()
        except sa.exc.SQLAlchemyError as exc:
            return f"the campaign store cannot be read ({type(exc).__name__})"
        database = self.sqlite_file()
        if database is not None and self._identity is not None and _file_identity(database) != self._identity:
            return "the campaign store's database file was deleted or replaced under the running generator"
        return ""

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


@dataclass(frozen=True)
class ShrinkRow:
    """A stored shrink: the original failure's id and the minimal failing input found for it."""

    test_case_id: str
    shrunk: ExecutionRow  # as it ran; index and batch are the original's
    original_distance: float
    shrunk_distance: float
    moved: tuple[str, ...]
    nominal: dict[str, float]
    executions: int
    max_executions: int
    created_at: str = ""


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


def _execution_row(campaign_id: str, r: Any) -> ExecutionRow:
    def document(column: str) -> Any:
        try:
            return json.loads(r[column])
        except (TypeError, ValueError):
            raise CorruptRow(campaign_id, r["test_case_id"], column) from None

    values, descriptors, final = document("values"), document("descriptors"), document("final_observation")
    if not isinstance(values, dict):
        raise CorruptRow(campaign_id, r["test_case_id"], "values")
    for column, numbers in (("descriptors", descriptors), ("final_observation", final)):
        if not isinstance(numbers, list) or not all(isinstance(x, int | float) for x in numbers):
            raise CorruptRow(campaign_id, r["test_case_id"], column)
    return ExecutionRow(
        r["test_case_id"],
        r["idx"],
        r["batch"],
        values,
        r["verdict"],
        r["margin"],
        r["steps"],
        r["total_reward"],
        tuple(descriptors),
        r["reason"],
        r["repetitions"],
        r["failed_repetitions"],
        r["elapsed_seconds"],
        tuple(final),
    )


def _holds(lease: Lease) -> list[Any]:
    return [campaigns.c.id == lease.campaign_id, campaigns.c.owner == lease.owner, campaigns.c.fence == lease.fence]


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


# PostgreSQL columns an earlier version created as text, and the JSON type they become
_JSON_COLUMNS = {
    "campaigns": {"spec": "jsonb"},
    "test_cases": {"values": "json"},
    "executions": {"values": "jsonb", "descriptors": "jsonb", "final_observation": "jsonb"},
}


def _migrate(engine: Engine) -> None:
    """Brings a store written by an earlier version up to this schema (create_all adds tables, not columns)."""
    inspector = sa.inspect(engine)
    present = {c["name"] for c in inspector.get_columns("executions")}
    if "final_observation" not in present:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE executions ADD COLUMN final_observation TEXT NOT NULL DEFAULT '[]'")
    owned = {c["name"] for c in inspector.get_columns("campaigns")}
    for column, ddl in (
        ("owner", "VARCHAR(200) NOT NULL DEFAULT ''"),
        ("lease_until", "FLOAT NOT NULL DEFAULT 0"),
        ("fence", "INTEGER NOT NULL DEFAULT 0"),
        ("cancel_requested", "INTEGER NOT NULL DEFAULT 0"),
    ):
        if column not in owned:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"ALTER TABLE campaigns ADD COLUMN {column} {ddl}")
    if engine.dialect.name != "postgresql":
        return
    for table, columns in _JSON_COLUMNS.items():
        types = {c["name"]: str(c["type"]).lower() for c in sa.inspect(engine).get_columns(table)}
        for column, kind in columns.items():
            if types.get(column) in ("text", "varchar"):
                try:
                    with engine.begin() as conn:
                        conn.exec_driver_sql(
                            f'ALTER TABLE {table} ALTER COLUMN "{column}" DROP DEFAULT, '
                            f'ALTER COLUMN "{column}" TYPE {kind} USING "{column}"::{kind}'
                        )
                        if column == "final_observation":
                            conn.exec_driver_sql(f"ALTER TABLE {table} ALTER COLUMN \"{column}\" SET DEFAULT '[]'")
                except sa.exc.DataError:  # a row that is not JSON: kept as text, reported as DATA_LOSS when read
                    log.error("store column %s.%s stays text: a row in it is not valid JSON", table, column)


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
