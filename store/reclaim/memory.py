"""keeper's durable reclaim memory: controller epochs, job ids seen issued, the nodes keeper
knows, the holdings agents reported (the fence), evidence signalled and drains owned.

One controller per memory. Every write is idempotent, so an activity that is run again does
no harm: sightings reuse the open holding, closes and drains compare before they write, and
upserts replace rows with what they already hold. The API is synchronous (SQLAlchemy Core);
async callers run it in a thread. No method holds a transaction across anything but its own
SQL. Times must be timezone-aware; they are stored as UTC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from keeper.domain.reclaim.epoch import Observation
from keeper.domain.reclaim.evidence import BeatEvidence, BeatReport, ReleaseTally
from keeper.domain.reclaim.jobs import JobState
from keeper.domain.reclaim.models import NODE_ID_RE, EpochState, Holding, KnownJob
from keeper.store.database import (
    StoreUnavailable,
    create_tables,
    open_engine,
    redacted_url,
    without_password,
)
from keeper.store.reclaim.records import AgentNode, CancelSend, DrainRecord
from keeper.store.reclaim.schema import (
    cancels,
    drain_fences,
    drains,
    epochs,
    evidence,
    holdings,
    jobs,
    metadata,
    nodes,
    reads,
)

# Ids per IN (...) list and rows per executemany batch: well under SQLite's bound-parameter
# limit, and large enough that a 100,000-job first observation is a few hundred statements.
CHUNK = 500
# Bound parameters per bulk INSERT statement: psycopg caches the parse of a statement with
# at most 50 (psycopg._queries.MAX_CACHED_STATEMENT_PARAMS).
_CACHED_PARAMS = 48
# Tries of a write that lost a race for a unique key to a concurrent writer of the same rows.
WRITE_ROUNDS = 3
# The intake prunes open holdings without a workflow that no heartbeat listed for this long
# (`forget(now - FORGET_AFTER)`): spur's agent reports every 30 s, so a day of silence means
# the agent dropped the job, and a later report is a new sighting with a fresh first_seen.
FORGET_AFTER = timedelta(hours=24)
# The intake prunes lifted drains and their fences once this old (`forget_drains(now -
# DRAINS_KEPT)`). A fence refuses its run chain's drain calls still on their way after the
# chain lifted its drain: those end within the drain activity's timeout, and the intake looks
# for one that landed anyway only an hour back (LATE_DRAIN_WINDOW), so a week is far past any.
DRAINS_KEPT = timedelta(days=7)
# The outcomes of a holding released on evidence that keeps its fence (an idle node's empty
# heartbeats, the agent's completion report): a heartbeat that lists the job again within
# FORGET_AFTER reopens this holding, fence and all, rather than sighting a new one decided
# afresh (domain/reclaim/evidence.py, Release.keeps_fence).
WEAKLY_RELEASED = "released-weak"
RELEASED_BY_REPORT = "released-report"
REOPENABLE = frozenset({WEAKLY_RELEASED, RELEASED_BY_REPORT})
_EPOCH_ROW = 1
_OPEN = 1
_T = TypeVar("_T")


class UnknownHolding(LookupError):
    def __init__(self, node_id: str, job_id: int, sighting: int) -> None:
        super().__init__(
            f"no holding of job {job_id} on node {node_id!r} (sighting {sighting}) "
            "in the reclaim memory"
        )


class WorkflowConflict(ValueError):
    """A holding already watched by another workflow."""


def _utc(value: datetime, what: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{what} {value.isoformat()} has no time zone; keeper stores UTC")
    return value.astimezone(UTC)


def _maybe_utc(value: datetime | None, what: str) -> datetime | None:
    return None if value is None else _utc(value, what)


def _aware(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; everything the memory stores is UTC.
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _at(value: datetime) -> datetime:
    out = _aware(value)
    assert out is not None
    return out


_EPOCH_START = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError(f"{value.isoformat()} has no time zone; keeper stores UTC")
    return (value - _EPOCH_START) // timedelta(microseconds=1)


def _from_micros(value: int) -> datetime:
    return _EPOCH_START + timedelta(microseconds=value)


def _node_id(node_id: str) -> str:
    if not isinstance(node_id, str) or not NODE_ID_RE.match(node_id):
        raise ValueError(
            f"{node_id!r} is not a canonical node id (domain/reclaim/identity.canonical_node)"
        )
    return node_id


def _job_id(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 <= job_id < 2**32:
        raise ValueError(f"{job_id!r} is not a spur job id (0 to 2**32-1)")
    return job_id


def _chunks(items: Sequence[_T], size: int = CHUNK) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _bulk_insert(conn: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """INSERTs `rows` through the driver's executemany, a few rows per statement.

    SQLAlchemy's per-row parameter processing, and on PostgreSQL one statement per row, cost
    far more than the database on a 100,000-row write. A few rows per multi-row VALUES keeps
    the statement small enough for psycopg to cache its parse and prepare it once, and
    psycopg pipelines an executemany; sqlite3 runs it in C. Multi-row VALUES is standard SQL
    on both back ends, and the values are plain ints, bools and strings."""
    if not rows:
        return
    keys = list(rows[0])
    marker = {"qmark": "?", "format": "%s", "pyformat": "%s"}.get(conn.dialect.paramstyle)
    if marker is None:  # a driver keeper does not ship: the plain, slower way
        conn.execute(insert(table), list(rows))
        return
    quote = conn.dialect.identifier_preparer.quote
    head = f"INSERT INTO {quote(table.name)} ({','.join(quote(k) for k in keys)}) VALUES "
    one = "(" + ",".join([marker] * len(keys)) + ")"
    group = max(1, _CACHED_PARAMS // len(keys))
    whole = len(rows) - len(rows) % group
    batches = [(group, rows[:whole]), (len(rows) - whole, rows[whole:])]
    for size, part in batches:
        if not part:
            continue
        sql = head + ",".join([one] * size)
        params = [
            tuple(row[k] for row in part[i : i + size] for k in keys)
            for i in range(0, len(part), size)
        ]
        conn.exec_driver_sql(sql, params)


def open_reclaim_memory(url: str, *, create: bool = True) -> ReclaimMemory:
    """The memory at `url` (the runner store's URL by default: its tables are `reclaim_*`).
    Raises StoreUnavailable, whose message names the URL without its password."""
    engine: Engine | None = None
    try:
        engine = open_engine(url, "reclaim memory")
        memory = ReclaimMemory(engine)
        if create:
            memory.create_schema()
        else:
            memory.epoch()  # fail now, not at the first heartbeat, if the tables are missing
        return memory
    except Exception as err:
        if engine is not None:
            engine.dispose()
        # Drivers are free to quote their connection string in an error.
        detail = without_password(url, str(err))
        raise StoreUnavailable(
            f"cannot open the reclaim memory {redacted_url(url)}: {detail}"
        ) from None


class ReclaimMemory:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def describe(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def create_schema(self) -> None:
        create_tables(metadata, self.engine)
        self._retry(self._seed_epoch)

    def close(self) -> None:
        self.engine.dispose()

    def _retry(self, work: Callable[[Connection], _T]) -> _T:
        """Runs `work` in one transaction, again if a concurrent writer won a unique key."""
        for round_ in range(1, WRITE_ROUNDS + 1):
            try:
                with self.engine.begin() as conn:
                    return work(conn)
            except IntegrityError:
                if round_ == WRITE_ROUNDS:
                    raise
        raise AssertionError("unreachable")

    # ---- epochs and jobs ---------------------------------------------------------------

    @staticmethod
    def _seed_epoch(conn: Connection) -> None:
        if conn.execute(select(epochs.c.id).where(epochs.c.id == _EPOCH_ROW)).first() is None:
            conn.execute(
                insert(epochs).values(id=_EPOCH_ROW, epoch=1, high_id=0, high_submit=None,
                                      started_at=None, why="")
            )  # fmt: skip

    @staticmethod
    def _read_epoch(conn: Connection) -> EpochState:
        row = conn.execute(select(epochs).where(epochs.c.id == _EPOCH_ROW)).first()
        if row is None:
            return EpochState()
        return EpochState(
            epoch=row.epoch,
            high_id=row.high_id,
            high_submit=_aware(row.high_submit),
            started_at=_aware(row.started_at),
            why=row.why,
        )

    def epoch(self) -> EpochState:
        """The controller's current epoch (the first is epoch 1)."""
        with self.engine.connect() as conn:
            return self._read_epoch(conn)

    def record_observation(self, obs: Observation) -> None:
        """Saves what `keeper.domain.reclaim.epoch.observe` made of one view: the epoch state, and
        the jobs to remember in it. An observation older than the stored epoch (one computed
        before another caller moved the epoch on) changes nothing; the high id never falls."""
        state = obs.epoch
        rows = [self._job_row(job) for job in obs.remember if job.epoch == state.epoch]

        def work(conn: Connection) -> None:
            self._seed_epoch(conn)
            current = self._read_epoch(conn)
            if state.epoch < current.epoch:
                return
            if state.epoch > current.epoch:
                # A new epoch: the old one's ids name other jobs now, and decide never reads them.
                conn.execute(delete(jobs).where(jobs.c.epoch < state.epoch))
                high_id, high_submit = state.high_id, state.high_submit
            elif state.high_id >= current.high_id:
                high_id, high_submit = state.high_id, state.high_submit
            else:
                high_id, high_submit = current.high_id, current.high_submit
            conn.execute(
                update(epochs)
                .where(epochs.c.id == _EPOCH_ROW)
                .values(
                    epoch=state.epoch,
                    high_id=high_id,
                    high_submit=_maybe_utc(high_submit, "high_submit"),
                    started_at=_maybe_utc(state.started_at, "started_at"),
                    why=state.why,
                )
            )
            stored = self._stored_ids(conn, state.epoch, [r["job_id"] for r in rows])
            _bulk_insert(conn, jobs, [r for r in rows if r["job_id"] not in stored])
            changed = [{**r, "k_epoch": r["epoch"], "k_job": r["job_id"],
                        "k_seen": r["last_seen_us"]}
                       for r in rows if r["job_id"] in stored]  # fmt: skip
            if changed:
                # An observation run again after a later one must not bring back older news.
                conn.execute(
                    update(jobs)
                    .where(jobs.c.epoch == bindparam("k_epoch"))
                    .where(jobs.c.job_id == bindparam("k_job"))
                    .where(jobs.c.last_seen_us <= bindparam("k_seen")),
                    changed,
                )

        self._retry(work)

    @staticmethod
    def _stored_ids(conn: Connection, epoch: int, ids: Sequence[int]) -> set[int]:
        """Which of `ids` the epoch already remembers. For many ids one read of all the
        epoch's ids (plain integers) beats hundreds of IN (...) lists."""
        if not ids:
            return set()
        query = select(jobs.c.job_id).where(jobs.c.epoch == epoch)
        if len(ids) > 4 * CHUNK:
            return set(conn.execute(query).scalars()) & set(ids)
        found: set[int] = set()
        for chunk in _chunks(ids):
            found.update(conn.execute(query.where(jobs.c.job_id.in_(chunk))).scalars())
        return found

    @staticmethod
    def _job_row(job: KnownJob) -> dict[str, Any]:
        return {
            "epoch": job.epoch,
            "job_id": _job_id(job.job_id),
            "submit_us": None if job.submit_time is None else _micros(job.submit_time),
            "finalized": job.finalized,
            "last_state": int(job.last_state),
            "last_seen_us": _micros(job.last_seen),
        }

    def known_job_count(self) -> int:
        """How many job ids the current epoch remembers."""
        with self.engine.connect() as conn:
            current = self._read_epoch(conn).epoch
            query = select(func.count()).select_from(jobs).where(jobs.c.epoch == current)
            return int(conn.execute(query).scalar_one())

    def known_jobs(self, job_ids: Iterable[int] | None = None) -> dict[int, KnownJob]:
        """keeper's memory of the current epoch's jobs: those in `job_ids`, or all of them."""
        with self.engine.connect() as conn:
            current = self._read_epoch(conn).epoch
            query = select(jobs).where(jobs.c.epoch == current)
            if job_ids is None:
                found = list(conn.execute(query))
            else:
                wanted = sorted({_job_id(j) for j in job_ids})
                found = []
                for chunk in _chunks(wanted):
                    found.extend(conn.execute(query.where(jobs.c.job_id.in_(chunk))))
        # model_construct: these rows were KnownJobs when written, and validating 100,000 of
        # them again on every view would cost more than the read.
        return {
            row.job_id: KnownJob.model_construct(
                job_id=row.job_id,
                epoch=row.epoch,
                submit_time=None if row.submit_us is None else _from_micros(row.submit_us),
                finalized=bool(row.finalized),
                last_state=JobState(row.last_state),
                last_seen=_from_micros(row.last_seen_us),
            )
            for row in found
        }

    def record_full_read(self, at: datetime) -> None:
        """A read of the whole job map began at `at` (the time never moves back)."""
        at = _utc(at, "at")

        def work(conn: Connection) -> None:
            row = conn.execute(select(reads.c.full_read_at).where(reads.c.id == _EPOCH_ROW))
            found = row.first()
            if found is None:
                conn.execute(insert(reads).values(id=_EPOCH_ROW, full_read_at=at))
            elif _at(found.full_read_at) < at:
                conn.execute(update(reads).where(reads.c.id == _EPOCH_ROW).values(full_read_at=at))

        self._retry(work)

    def last_full_read(self) -> datetime | None:
        """When the last read of the whole job map began (None: never)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(reads.c.full_read_at).where(reads.c.id == _EPOCH_ROW))
            found = row.first()
        return None if found is None else _at(found.full_read_at)

    # ---- nodes -------------------------------------------------------------------------

    def register_node(
        self, node_id: str, hostname: str, address: str, port: int, boot: str, at: datetime
    ) -> AgentNode:
        """Records a RegisterAgent seen through the tap (or a node the controller lists)."""
        node_id = _node_id(node_id)
        if not hostname:
            raise ValueError(f"node {node_id!r}: the agent's hostname must not be empty")
        if not 0 <= port < 2**16:
            raise ValueError(f"node {node_id!r}: port {port} is not a TCP port")
        values = {"hostname": hostname, "address": address, "port": port, "boot": boot,
                  "registered_at": _utc(at, "registered_at")}  # fmt: skip

        def work(conn: Connection) -> None:
            found = conn.execute(select(nodes.c.node_id).where(nodes.c.node_id == node_id))
            if found.first() is None:
                conn.execute(insert(nodes).values(node_id=node_id, last_beat_at=None, **values))
            else:
                conn.execute(update(nodes).where(nodes.c.node_id == node_id).values(**values))

        self._retry(work)
        node = self.node(node_id)
        assert node is not None
        return node

    def node(self, node_id: str) -> AgentNode | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(nodes).where(nodes.c.node_id == node_id)).first()
        if row is None:
            return None
        return AgentNode(
            node_id=row.node_id,
            hostname=row.hostname,
            address=row.address,
            port=row.port,
            boot=row.boot,
            registered_at=_at(row.registered_at),
            last_beat_at=_aware(row.last_beat_at),
        )

    def known_nodes(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(select(nodes.c.node_id)).scalars())

    def touch_node(self, node_id: str, at: datetime) -> bool:
        """A heartbeat arrived. False when keeper does not know the node. The time never moves
        back (heartbeats may arrive out of order)."""
        at = _utc(at, "at")
        with self.engine.begin() as conn:
            found = conn.execute(
                select(nodes.c.last_beat_at).where(nodes.c.node_id == node_id)
            ).first()
            if found is None:
                return False
            if found.last_beat_at is None or _at(found.last_beat_at) < at:
                conn.execute(
                    update(nodes).where(nodes.c.node_id == node_id).values(last_beat_at=at)
                )
        return True

    # ---- holdings ----------------------------------------------------------------------

    @staticmethod
    def _holding(row: Any) -> Holding:
        return Holding(
            node=row.node_id,
            job_id=row.job_id,
            epoch=row.epoch,
            first_seen=_at(row.first_seen),
            sighting=row.sighting,
        )

    def sight(
        self, node_id: str, job_ids: Iterable[int], at: datetime, epoch: int
    ) -> list[Holding]:
        """The holdings one non-empty heartbeat of `node_id` reports, by job id.

        An id with an open holding gets that holding, unchanged but for last_reported_at; any
        other id a new one (first seen `at`, in `epoch`, the sighting after the last closed
        one). Ids the heartbeat omits are left alone: omission is never release evidence. An
        empty heartbeat sights nothing."""
        node_id = _node_id(node_id)
        ids = sorted({_job_id(j) for j in job_ids})
        at = _utc(at, "at")
        if epoch < 1:
            raise ValueError(f"epoch {epoch} is not a controller epoch (they start at 1)")
        if not ids:
            return []

        def work(conn: Connection) -> list[Holding]:
            open_rows: dict[int, Any] = {}
            mine = and_(holdings.c.node_id == node_id, holdings.c.is_open == _OPEN)
            for chunk in _chunks(ids):
                in_chunk = holdings.c.job_id.in_(chunk)
                for row in conn.execute(select(holdings).where(mine, in_chunk)):
                    open_rows[row.job_id] = row
                conn.execute(
                    update(holdings)
                    .where(mine, in_chunk, holdings.c.last_reported_at < at)
                    .values(last_reported_at=at)
                )
            missing = [j for j in ids if j not in open_rows]
            last: dict[int, int] = {}
            for chunk in _chunks(missing):
                query = (
                    select(holdings.c.job_id, func.max(holdings.c.sighting))
                    .where(holdings.c.node_id == node_id, holdings.c.job_id.in_(chunk))
                    .group_by(holdings.c.job_id)
                )
                last.update({job_id: top for job_id, top in conn.execute(query)})
            reopened = self._reopen(conn, node_id, last, at)
            for row in reopened:
                open_rows[row.job_id] = row
            missing = [j for j in missing if j not in open_rows]
            new = [
                {"node_id": node_id, "job_id": j, "sighting": last.get(j, 0) + 1,
                 "epoch": epoch, "first_seen": at, "last_reported_at": at, "is_open": _OPEN}
                for j in missing
            ]  # fmt: skip
            for chunk in _chunks(new):
                conn.execute(insert(holdings), list(chunk))
            out = [self._holding(r) for r in open_rows.values()]
            out.extend(
                Holding(node=node_id, job_id=r["job_id"], epoch=epoch, first_seen=at,
                        sighting=r["sighting"])
                for r in new
            )  # fmt: skip
            return sorted(out, key=lambda h: h.job_id)

        return self._retry(work)

    def _reopen(
        self, conn: Connection, node_id: str, last: dict[int, int], at: datetime
    ) -> list[Any]:
        """Reopens each job's last holding if evidence that keeps the fence closed it within
        FORGET_AFTER: the agent lists the job again, and the holding keeps the fence it had
        (first sighting, epoch). Its tally starts over. One read per chunk of ids finds them,
        the common case (no such holding) writing nothing."""
        out: list[Any] = []
        recent = at - FORGET_AFTER
        for chunk in _chunks(sorted(last)):
            query = select(holdings).where(
                holdings.c.node_id == node_id,
                holdings.c.job_id.in_(chunk),
                holdings.c.outcome.in_(sorted(REOPENABLE)),
            )
            for row in conn.execute(query):
                if row.sighting != last[row.job_id] or _at(row.closed_at) < recent:
                    continue
                key = self._key(node_id, row.job_id, row.sighting)
                conn.execute(
                    update(holdings)
                    .where(key)
                    .values(is_open=_OPEN, closed_at=None, outcome=None, workflow_id=None,
                            signalled_evidence=None, signalled_at=None, signalled_boot=None,
                            last_reported_at=at)
                )  # fmt: skip
                conn.execute(
                    delete(evidence).where(
                        evidence.c.node_id == node_id,
                        evidence.c.job_id == row.job_id,
                        evidence.c.sighting == row.sighting,
                    )
                )
                out.append(row)  # its fence (epoch, first sighting) is what stays
        return out

    def holdings(self, node_id: str | None = None, *, open_only: bool = True) -> list[Holding]:
        query = select(holdings).order_by(
            holdings.c.node_id, holdings.c.job_id, holdings.c.sighting
        )
        if node_id is not None:
            query = query.where(holdings.c.node_id == node_id)
        if open_only:
            query = query.where(holdings.c.is_open == _OPEN)
        with self.engine.connect() as conn:
            return [self._holding(r) for r in conn.execute(query)]

    @staticmethod
    def _key(node_id: str, job_id: int, sighting: int) -> Any:
        return and_(
            holdings.c.node_id == node_id,
            holdings.c.job_id == job_id,
            holdings.c.sighting == sighting,
        )

    def _row(self, conn: Connection, node_id: str, job_id: int, sighting: int) -> Any:
        return conn.execute(select(holdings).where(self._key(node_id, job_id, sighting))).first()

    def holding(self, node_id: str, job_id: int, sighting: int) -> Holding | None:
        with self.engine.connect() as conn:
            row = self._row(conn, node_id, job_id, sighting)
        return None if row is None else self._holding(row)

    def holding_closed(self, node_id: str, job_id: int, sighting: int) -> tuple[datetime, str]:
        """When and how the holding was closed; raises UnknownHolding, or ValueError if open."""
        with self.engine.connect() as conn:
            row = self._require(conn, node_id, job_id, sighting)
        if row.closed_at is None:
            raise ValueError(f"the holding of job {job_id} on {node_id!r} is still open")
        return _at(row.closed_at), row.outcome

    def _require(self, conn: Connection, node_id: str, job_id: int, sighting: int) -> Any:
        row = self._row(conn, node_id, job_id, sighting)
        if row is None:
            raise UnknownHolding(node_id, job_id, sighting)
        return row

    def close_holding(
        self, node_id: str, job_id: int, sighting: int, outcome: str, at: datetime
    ) -> bool:
        """Closes the holding with the workflow's outcome (only the holding's own workflow
        calls this). True when this call closed it; a holding already closed is left as it
        was, so a retried activity keeps the first outcome."""
        if not outcome:
            raise ValueError("a holding is closed with an outcome (domain.reclaim.steps.Outcome)")
        at = _utc(at, "at")
        with self.engine.begin() as conn:
            self._require(conn, node_id, job_id, sighting)
            done = conn.execute(
                update(holdings)
                .where(self._key(node_id, job_id, sighting), holdings.c.is_open == _OPEN)
                .values(is_open=None, closed_at=at, outcome=outcome)
            )
            return done.rowcount == 1

    def attach_workflow(self, node_id: str, job_id: int, sighting: int, workflow_id: str) -> None:
        """Marks the holding as watched by `workflow_id`; again with the same id is harmless,
        another id is refused (one durable reclaim per fence key)."""
        if not workflow_id:
            raise ValueError("workflow_id must not be empty")
        with self.engine.begin() as conn:
            row = self._require(conn, node_id, job_id, sighting)
            if row.workflow_id not in (None, workflow_id):
                raise WorkflowConflict(
                    f"the holding of job {job_id} on {node_id!r} (sighting {sighting}) is "
                    f"watched by {row.workflow_id!r}, not {workflow_id!r}"
                )
            conn.execute(
                update(holdings)
                .where(self._key(node_id, job_id, sighting), holdings.c.workflow_id.is_(None))
                .values(workflow_id=workflow_id)
            )

    def detach_workflow(self, node_id: str, job_id: int, sighting: int, workflow_id: str) -> bool:
        """The holding stays open, with its first sighting and epoch (its fence), but no
        longer watched by `workflow_id`: a spared or cancelled reclaim ends, and a later stale
        verdict starts a new one under the same fence key. True when this call detached it;
        a holding watched by another workflow, or by none, is left as it is."""
        with self.engine.begin() as conn:
            self._require(conn, node_id, job_id, sighting)
            done = conn.execute(
                update(holdings)
                .where(self._key(node_id, job_id, sighting))
                .where(holdings.c.workflow_id == workflow_id)
                .values(workflow_id=None, signalled_evidence=None, signalled_at=None)
            )
            return done.rowcount == 1

    def open_workflows_of(self, node_id: str) -> list[tuple[Holding, str]]:
        """The open holdings of `node_id` with a workflow, and that workflow's id: whom the
        intake signals each heartbeat's evidence to."""
        query = (
            select(holdings)
            .where(holdings.c.node_id == node_id, holdings.c.is_open == _OPEN)
            .where(holdings.c.workflow_id.is_not(None))
            .order_by(holdings.c.job_id)
        )
        with self.engine.connect() as conn:
            return [(self._holding(r), r.workflow_id) for r in conn.execute(query)]

    def watched_nodes(self) -> set[str]:
        """The nodes with at least one open holding a workflow watches: the only nodes whose
        empty heartbeats the intake needs to look at."""
        query = (
            select(holdings.c.node_id)
            .where(holdings.c.is_open == _OPEN, holdings.c.workflow_id.is_not(None))
            .distinct()
        )
        with self.engine.connect() as conn:
            return set(conn.execute(query).scalars())

    def forget(self, before: datetime) -> int:
        """Prunes open holdings without a workflow that no heartbeat listed since `before`
        (callers pass `now - FORGET_AFTER`); returns how many. Closed holdings stay: they
        number the next sighting, so a workflow id is never reused."""
        before = _utc(before, "before")
        with self.engine.begin() as conn:
            done = conn.execute(
                delete(holdings)
                .where(holdings.c.is_open == _OPEN, holdings.c.workflow_id.is_(None))
                .where(holdings.c.last_reported_at < before)
            )
            return int(done.rowcount)

    # ---- evidence bookkeeping ----------------------------------------------------------

    def last_signalled(self, node_id: str, job_id: int, sighting: int) -> BeatReport | None:
        with self.engine.connect() as conn:
            row = self._require(conn, node_id, job_id, sighting)
        if row.signalled_evidence is None:
            return None
        return BeatReport(
            evidence=BeatEvidence(row.signalled_evidence),
            at=_at(row.signalled_at),
            boot=row.signalled_boot or "",
        )

    def set_last_signalled(
        self, node_id: str, job_id: int, sighting: int, report: BeatReport, *, told: bool = False
    ) -> bool:
        """Records the evidence the intake signalled for an open holding. True when it differs
        from what was last recorded (evidence or boot): the intake signals only then, so a
        thousand identical heartbeats send one signal. `told`: the intake told the workflow
        again (a refresh), so the time moves on even when nothing else changed. A closed
        holding records nothing."""
        with self.engine.begin() as conn:
            row = self._require(conn, node_id, job_id, sighting)
            if row.is_open != _OPEN:
                return False
            same = (row.signalled_evidence, row.signalled_boot or "") == (
                report.evidence.value,
                report.boot,
            )
            if same and not told:
                return False
            conn.execute(
                update(holdings)
                .where(self._key(node_id, job_id, sighting))
                .values(
                    signalled_evidence=report.evidence.value,
                    signalled_at=_utc(report.at, "at"),
                    signalled_boot=report.boot,
                )
            )
            return not same

    def add_evidence(
        self, node_id: str, job_id: int, sighting: int, report: BeatReport
    ) -> ReleaseTally:
        """Folds one report into the holding's release tally (domain/reclaim/evidence.py) and
        returns it. The intake calls this for every report about a watched holding, so the
        tally is the agent's word whether or not the workflow was told (or running)."""
        key = and_(
            evidence.c.node_id == node_id,
            evidence.c.job_id == job_id,
            evidence.c.sighting == sighting,
        )

        def work(conn: Connection) -> ReleaseTally:
            self._require(conn, node_id, job_id, sighting)
            row = conn.execute(select(evidence.c.tally).where(key)).first()
            before = ReleaseTally() if row is None else ReleaseTally.model_validate_json(row.tally)
            if report.evidence is BeatEvidence.HELD and before.last is BeatEvidence.HELD:
                # Held again changes no count: a storm of duplicate heartbeats reads, never
                # writes (when the job was last listed is the holding's last_reported_at).
                return before
            after = before.add(report)
            values = {"tally": after.model_dump_json(), "updated_at": _utc(report.at, "at")}
            if row is None:
                conn.execute(
                    insert(evidence).values(
                        node_id=node_id, job_id=job_id, sighting=sighting, **values
                    )
                )
            else:
                conn.execute(update(evidence).where(key).values(**values))
            return after

        return self._retry(work)

    def tally(self, node_id: str, job_id: int, sighting: int) -> ReleaseTally:
        """The holding's release tally as the intake last folded it (empty: no report yet)."""
        query = select(evidence.c.tally).where(
            evidence.c.node_id == node_id,
            evidence.c.job_id == job_id,
            evidence.c.sighting == sighting,
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return ReleaseTally() if row is None else ReleaseTally.model_validate_json(row.tally)

    def last_listed(self, node_id: str, job_id: int, sighting: int) -> datetime | None:
        """When a report last listed the holding (None: keeper has no such holding)."""
        with self.engine.connect() as conn:
            row = self._row(conn, node_id, job_id, sighting)
        return None if row is None else _at(row.last_reported_at)

    # ---- cancels -----------------------------------------------------------------------

    def claim_send(
        self, send_key: str, node_id: str, job_id: int, sighting: int, signal: int, at: datetime
    ) -> CancelSend | None:
        """Claims the one send `send_key` stands for. None: claimed now, send it. A CancelSend:
        an earlier try claimed it (and sent it, or died before it could): never send again."""
        if not send_key:
            raise ValueError("a cancel is claimed under a non-empty key")
        at = _utc(at, "at")

        def work(conn: Connection) -> CancelSend | None:
            row = conn.execute(select(cancels).where(cancels.c.send_key == send_key)).first()
            if row is not None:
                return self._send(row)
            conn.execute(
                insert(cancels).values(
                    send_key=send_key, node_id=_node_id(node_id), job_id=_job_id(job_id),
                    sighting=sighting, signal=signal, claimed_at=at, answer=None,
                    answered_at=None,
                )
            )  # fmt: skip
            return None

        return self._retry(work)

    def answer_send(self, send_key: str, answer: str, at: datetime) -> None:
        """Records what the agent answered to the claimed send (first answer wins)."""
        with self.engine.begin() as conn:
            conn.execute(
                update(cancels)
                .where(cancels.c.send_key == send_key, cancels.c.answer.is_(None))
                .values(answer=answer, answered_at=_utc(at, "at"))
            )

    def sends(self, node_id: str, job_id: int, sighting: int) -> list[CancelSend]:
        """Every cancel claimed for the holding, oldest first: what may have reached its agent."""
        query = (
            select(cancels)
            .where(
                cancels.c.node_id == node_id,
                cancels.c.job_id == job_id,
                cancels.c.sighting == sighting,
            )
            .order_by(cancels.c.claimed_at, cancels.c.send_key)
        )
        with self.engine.connect() as conn:
            return [self._send(r) for r in conn.execute(query)]

    @staticmethod
    def _send(row: Any) -> CancelSend:
        return CancelSend(
            send_key=row.send_key,
            signal=row.signal,
            claimed_at=_at(row.claimed_at),
            answer=row.answer,
        )

    # ---- drains ------------------------------------------------------------------------

    def record_drain(
        self, node_id: str, workflow_id: str, reason: str, at: datetime, chain: str = ""
    ) -> bool:
        """keeper drained `node_id` for `workflow_id`. Again while open is harmless (the first
        time and reason stay); after a clear it opens the drain again, unless `chain` (the
        run chain asking) already lifted its drain of the node: then False, nothing opened."""
        node_id = _node_id(node_id)
        if not workflow_id:
            raise ValueError("workflow_id must not be empty")
        at = _utc(at, "at")
        key = and_(drains.c.node_id == node_id, drains.c.workflow_id == workflow_id)

        def work(conn: Connection) -> bool:
            if chain and self._fenced(conn, node_id, workflow_id, chain):
                return False
            row = conn.execute(select(drains).where(key)).first()
            if row is not None and row.cleared_at is None:
                return True
            if row is not None:
                lifted = key & drains.c.cleared_at.is_not(None)
                reopen = update(drains).where(lifted)
                values = dict(reason=reason, drained_at=at, cleared_at=None)
                if conn.execute(reopen.values(**values)).rowcount:
                    return True
                # Gone since the read: the intake forgot it (forget_drains). Recorded anew,
                # as a concurrent insert is (a lost race for the key is tried again).
            fresh = dict(node_id=node_id, workflow_id=workflow_id, reason=reason)
            conn.execute(insert(drains).values(drained_at=at, cleared_at=None, **fresh))
            return True

        return self._retry(work)

    @staticmethod
    def _fenced(conn: Connection, node_id: str, workflow_id: str, chain: str) -> bool:
        query = select(drain_fences.c.chain).where(
            drain_fences.c.node_id == node_id,
            drain_fences.c.workflow_id == workflow_id,
            drain_fences.c.chain == chain,
        )
        return conn.execute(query).first() is not None

    def drain_fenced(self, node_id: str, workflow_id: str, chain: str) -> bool:
        """Whether run chain `chain` of `workflow_id` lifted its drain of `node_id`."""
        if not chain:
            return False
        with self.engine.connect() as conn:
            return self._fenced(conn, _node_id(node_id), workflow_id, chain)

    def drains(self, node_id: str | None = None) -> list[DrainRecord]:
        """The open drains keeper made (on `node_id`, or on every node)."""
        query = select(drains).where(drains.c.cleared_at.is_(None))
        if node_id is not None:
            query = query.where(drains.c.node_id == node_id)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(drains.c.node_id, drains.c.drained_at))
            return [_drain_record(r) for r in rows]

    def fenced_drains(self, since: datetime) -> list[DrainRecord]:
        """keeper's drains lifted (and fenced) at or after `since`, on nodes no drain of
        keeper's holds now: a drain call killed between its late DrainNode and its own fence
        check leaves such a node drained with its record closed, which the intake then lifts."""
        since = _utc(since, "since")
        fenced = and_(
            drain_fences.c.node_id == drains.c.node_id,
            drain_fences.c.workflow_id == drains.c.workflow_id,
        )
        held = drains.alias("held")
        still_held = and_(held.c.node_id == drains.c.node_id, held.c.cleared_at.is_(None))
        query = (
            select(drains)
            .where(drains.c.cleared_at.is_not(None), drains.c.cleared_at >= since)
            .where(select(drain_fences.c.chain).where(fenced).exists())
            .where(~select(held.c.workflow_id).where(still_held).exists())
            .order_by(drains.c.node_id, drains.c.workflow_id)
        )
        with self.engine.connect() as conn:
            return [_drain_record(r) for r in conn.execute(query)]

    def clear_drain(
        self, node_id: str, workflow_id: str, at: datetime, chain: str = ""
    ) -> list[str]:
        """Closes `workflow_id`'s drain of `node_id` (again is harmless) and, with `chain`,
        fences that run chain's later drain calls off the node. Returns the workflows still
        holding the node drained: keeper undrains the node only when none is left."""
        at = _utc(at, "at")

        def work(conn: Connection) -> list[str]:
            conn.execute(
                update(drains)
                .where(drains.c.node_id == node_id, drains.c.workflow_id == workflow_id)
                .where(drains.c.cleared_at.is_(None))
                .values(cleared_at=at)
            )
            if chain and not self._fenced(conn, node_id, workflow_id, chain):
                fence = dict(node_id=node_id, workflow_id=workflow_id, chain=chain)
                conn.execute(insert(drain_fences).values(fenced_at=at, **fence))
            return self._holders(conn, node_id)

        return self._retry(work)

    def forget_drains(self, before: datetime) -> int:
        """Prunes the drains lifted before `before` and the fences made before it (callers
        pass `now - DRAINS_KEPT`); returns how many rows went. Open drains always stay."""
        before = _utc(before, "before")
        with self.engine.begin() as conn:
            fences = conn.execute(delete(drain_fences).where(drain_fences.c.fenced_at < before))
            # An open drain's cleared_at is NULL, which no comparison holds for.
            lifted = conn.execute(delete(drains).where(drains.c.cleared_at < before))
            return int(fences.rowcount) + int(lifted.rowcount)

    @staticmethod
    def _holders(conn: Connection, node_id: str) -> list[str]:
        query = (
            select(drains.c.workflow_id)
            .where(drains.c.node_id == node_id, drains.c.cleared_at.is_(None))
            .order_by(drains.c.workflow_id)
        )
        return list(conn.execute(query).scalars())

    def node_drain_holders(self, node_id: str) -> list[str]:
        """The workflows whose keeper drain of `node_id` is open (empty: keeper holds none)."""
        with self.engine.connect() as conn:
            return self._holders(conn, node_id)


def _drain_record(row: Any) -> DrainRecord:
    return DrainRecord(
        node_id=row.node_id,
        workflow_id=row.workflow_id,
        reason=row.reason,
        drained_at=_at(row.drained_at),
        cleared_at=_aware(row.cleared_at),
    )
