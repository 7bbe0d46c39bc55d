"""Runner records with compare-and-set status writes, on SQLite or PostgreSQL.

Rules the store enforces, whoever calls it:
- every status write is a compare-and-set on (status, version) and must be a valid
  transition in `keeper.domain.runners.status.TRANSITIONS`;
- deletion-lane statuses are written only by the runner's own deletion workflow;
- the one forced write, `recover_to_deleted`, is audited and logged with its reason;
- every record it adds passes `keeper.domain.runners.record_check`, the same on both back ends,
  and a row that fails it (written before the check, or by another tool) is read with
  its problems attached, never a reason for a read of other rows to fail.

The API is synchronous (SQLAlchemy Core); async callers run it in a thread. No method holds
a transaction across anything but its own SQL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    Connection,
    Engine,
    Select,
    String,
    delete,
    func,
    insert,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.exc import IntegrityError

from keeper.domain.runners.models import RUNNER_NAME_RE, RunnerRecord, deletion_workflow_id, utcnow
from keeper.domain.runners.record_check import provider_id_problem, record_problems
from keeper.domain.runners.status import (
    LIVE,
    AgentStatus,
    InstanceStatus,
    check_transition,
    on_lane,
)
from keeper.store.database import (
    StoreUnavailable,
    create_tables,
    open_engine,
    redacted_url,
    without_password,
)
from keeper.store.database import normalise_url as _normalise_url
from keeper.store.runners.schema import (
    audit,
    instance_leases,
    leaks,
    metadata,
    reconcile_marks,
    runners,
)

log = logging.getLogger("keeper.store")

S = InstanceStatus
# Reads and writes of one lease before acquire_lease gives up on a key changing hands.
MAX_LEASE_ROUNDS = 10


class UnknownRunner(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no runner named {name!r} in the runner store")
        self.name = name


class RunnerExists(ValueError):
    def __init__(self, name: str, status: str) -> None:
        super().__init__(f"runner {name!r} already exists (status {status})")


class LaneWriteRefused(PermissionError):
    """A deletion-lane status written by anyone but the runner's deletion workflow."""


class InvalidRecord(ValueError):
    """A record the store refuses to add or write; the message names every bad field."""

    def __init__(self, name: str, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            f"runner {name!r} refused: {'; '.join(self.problems)}; nothing was written"
        )


@dataclass(frozen=True)
class BadRow:
    """A stored row that fails domain.runners.record_check, as far as it can be read."""

    name: str
    problems: tuple[str, ...]
    # As stored, so a reconciler never takes this runner's instance for an orphan.
    scale_set: str | None
    provider_id: str | None


@dataclass(frozen=True)
class RecordScan:
    """Every row a listing matched: the valid records, and the rows that failed the check."""

    records: list[RunnerRecord]
    bad: list[BadRow]


@dataclass(frozen=True)
class LeaseResult:
    """The answer to acquire_lease: taken (by `holder`), or held by someone else."""

    acquired: bool
    key: str
    holder: str  # who holds it now: the caller when acquired
    expires_at: datetime
    # When an expired lease was taken over: whose it was.
    taken_over_from: str | None = None


@dataclass(frozen=True)
class CasResult:
    ok: bool
    # After a successful write, the new row; after a refusal, the row as it is now
    # (None if it no longer exists), so the caller can decide on fresh data.
    record: RunnerRecord | None


@dataclass(frozen=True)
class AuditEntry:
    runner: str
    at: datetime
    actor: str
    from_status: str | None
    to_status: str
    from_version: int | None
    to_version: int
    forced: bool
    reason: str


@dataclass(frozen=True)
class Leak:
    provider_id: str
    runner: str
    scale_set: str
    recorded_at: datetime
    reason: str
    resolved_at: datetime | None


def _aware(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; everything keeper stores is UTC.
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


_TIME_COLUMNS = ("created_at", "updated_at", "deleted_at")
_UNREADABLE_TIME = datetime(1970, 1, 1, tzinfo=UTC)
# Stand-ins for bad values a RunnerRecord cannot carry as they are; the record's problems
# say what is really stored. Text stays text. An unreadable status reads as unknown, and a
# write expecting unknown matches it (see _cas), so the deletion lane can move the row on.
_STAND_INS: dict[str, Callable[[Any], Any]] = {
    "scale_set": str,
    "provider_id": str,
    "github_scope": str,
    "github_runner_id": lambda _: None,
    "instance_status": lambda _: InstanceStatus.UNKNOWN,
    "agent_status": lambda _: AgentStatus.PENDING,
    "version": lambda _: 0,
    "created_at": lambda _: _UNREADABLE_TIME,
    "updated_at": lambda _: _UNREADABLE_TIME,
    "deleted_at": lambda _: None,
}


def _runner_columns() -> Select[Any]:
    # Timestamps are read as the driver hands them over: SQLite keeps whatever text
    # another tool wrote, and SQLAlchemy's own parsing would fail the whole result.
    return select(
        *(
            type_coerce(column, String).label(column.name)
            if column.name in _TIME_COLUMNS
            else column
            for column in runners.columns
        )
    )


def _time(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    return _aware(value) if isinstance(value, datetime) else value


def _values(row: Any) -> dict[str, Any]:
    m = row._mapping
    values = {column.name: m[column.name] for column in runners.columns}
    for column in _TIME_COLUMNS:
        values[column] = _time(values[column])
    return values


def _record(row: Any) -> RunnerRecord:
    """The row as a record, with problems attached when it fails the check; bad values are
    kept as stored wherever the record can carry them."""
    values = _values(row)
    problems = record_problems(values)
    values["problems"] = tuple(map(str, problems))
    try:
        return RunnerRecord.model_validate(values)
    except ValidationError:
        for problem in problems:
            if problem.field in _STAND_INS:
                values[problem.field] = _STAND_INS[problem.field](values[problem.field])
        return RunnerRecord.model_validate(values)


def _bad_row(values: Mapping[str, Any], problems: Iterable[object]) -> BadRow:
    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    return BadRow(
        name=str(values["name"]),
        problems=tuple(map(str, problems)),
        scale_set=text(values["scale_set"]),
        provider_id=text(values["provider_id"]),
    )


def _without_password(url: str, text: str) -> str:
    return without_password(url, text)


def normalise_url(url: str) -> str:
    """Accepts plain `postgresql://` and `sqlite:///` URLs; picks the drivers keeper ships."""
    return _normalise_url(url, "runner store")


def open_store(url: str, *, create: bool = True) -> RunnerStore:
    """Raises StoreUnavailable, whose message names the URL without its password."""
    try:
        return _open(url, create=create)
    except Exception as err:
        # Drivers are free to quote their connection string in an error.
        detail = _without_password(url, str(err))
        raise StoreUnavailable(
            f"cannot open the runner store {redacted_url(url)}: {detail}"
        ) from None


def _open(url: str, *, create: bool) -> RunnerStore:
    engine = open_engine(url, "runner store")
    store = RunnerStore(engine)
    if create:
        try:
            store.create_schema()
        except Exception:
            engine.dispose()
            raise
    return store


class RunnerStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def describe(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def create_schema(self) -> None:
        create_tables(metadata, self.engine)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    # ---- reads -------------------------------------------------------------------------

    def get(self, name: str) -> RunnerRecord | None:
        """The record, with its problems attached if the row fails the check: a bad row
        is still returned for its own deletion. None when there is no such runner; a row
        keyed by something that is not a runner name is never a runner (scan reports it)."""
        if not RUNNER_NAME_RE.match(name):
            return None
        with self.engine.connect() as conn:
            row = conn.execute(_runner_columns().where(runners.c.name == name)).first()
        return _record(row) if row else None

    def require(self, name: str) -> RunnerRecord:
        record = self.get(name)
        if record is None:
            raise UnknownRunner(name)
        return record

    def list(
        self, scale_set: str | None = None, *, include_deleted: bool = False
    ) -> list[RunnerRecord]:
        """The valid records; a row that fails the check is logged and left out (`scan`
        returns it too)."""
        found = self.scan(scale_set, include_deleted=include_deleted)
        for bad in found.bad:
            log.warning("runner %s skipped: %s", bad.name, "; ".join(bad.problems))
        return found.records

    def scan(self, scale_set: str | None = None, *, include_deleted: bool = False) -> RecordScan:
        """Every matching row: the valid records, and apart from them the rows that fail
        the check, so one bad row never stops a listing."""
        query = _runner_columns().order_by(runners.c.scale_set, runners.c.name)
        if scale_set is not None:
            query = query.where(runners.c.scale_set == scale_set)
        if not include_deleted:
            query = query.where(runners.c.instance_status != S.DELETED.value)
        records: list[RunnerRecord] = []
        bad: list[BadRow] = []
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                values = _values(row)
                problems = record_problems(values)
                if problems:
                    bad.append(_bad_row(values, problems))
                else:
                    records.append(RunnerRecord.model_validate(values))
        return RecordScan(records=records, bad=bad)

    def live_runner_count(self, scale_set: str) -> int:
        """Runners that can take jobs. The deletion lane is never capacity."""
        query = (
            select(func.count())
            .select_from(runners)
            .where(runners.c.scale_set == scale_set)
            .where(runners.c.instance_status.in_([s.value for s in LIVE]))
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def status_counts(self) -> dict[str, dict[InstanceStatus, int]]:
        query = select(runners.c.scale_set, runners.c.instance_status, func.count()).group_by(
            runners.c.scale_set, runners.c.instance_status
        )
        counts: dict[str, dict[InstanceStatus, int]] = {}
        with self.engine.connect() as conn:
            for scale_set, status, n in conn.execute(query):
                if status in InstanceStatus._value2member_map_:  # a bad row is scan's to report
                    counts.setdefault(scale_set, {})[InstanceStatus(status)] = int(n)
        return counts

    def audit(self, name: str) -> list[AuditEntry]:
        query = select(audit).where(audit.c.runner == name).order_by(audit.c.id)
        with self.engine.connect() as conn:
            return [
                AuditEntry(
                    runner=m["runner"],
                    at=_aware(m["at"]) or utcnow(),
                    actor=m["actor"],
                    from_status=m["from_status"],
                    to_status=m["to_status"],
                    from_version=m["from_version"],
                    to_version=m["to_version"],
                    forced=bool(m["forced"]),
                    reason=m["reason"],
                )
                for m in (row._mapping for row in conn.execute(query))
            ]

    # ---- writes ------------------------------------------------------------------------

    def add(self, record: RunnerRecord, *, actor: str = "scale-set") -> RunnerRecord:
        """Registers a new runner. A tombstone of the same name is replaced, keeping the
        version counting up so a stale writer from the old runner can never match."""
        if on_lane(record.instance_status):
            raise LaneWriteRefused(
                f"runner {record.name!r}: a new record cannot start on the deletion lane"
            )
        problems = record_problems(record.model_dump())
        if problems:
            raise InvalidRecord(record.name, map(str, problems))
        now = utcnow()
        with self._tx() as conn:
            existing = conn.execute(
                select(runners.c.instance_status, runners.c.version).where(
                    runners.c.name == record.name
                )
            ).first()
            version = 1
            if existing is not None:
                if existing.instance_status != S.DELETED.value:
                    raise RunnerExists(record.name, existing.instance_status)
                version = existing.version + 1
                conn.execute(delete(runners).where(runners.c.name == record.name))
            values = record.model_dump(exclude={"version", "created_at", "updated_at", "problems"})
            values.update(
                instance_status=record.instance_status.value,
                agent_status=record.agent_status.value,
                version=version,
                created_at=now,
                updated_at=now,
                deleted_at=None,
            )
            try:
                conn.execute(insert(runners).values(**values))
            except IntegrityError as err:
                # Another writer added the same name between the read and the insert.
                raise RunnerExists(record.name, "just added by another writer") from err
            self._audit(
                conn,
                record.name,
                actor,
                None,
                record.instance_status,
                None,
                version,
                reason="created",
            )
            return _record(
                conn.execute(_runner_columns().where(runners.c.name == record.name)).one()
            )

    def compare_and_set(
        self,
        name: str,
        *,
        expect: InstanceStatus,
        version: int,
        to: InstanceStatus,
        actor: str,
        reason: str = "",
        provider_id: str | None = None,
    ) -> CasResult:
        """Moves a record off the deletion lane's writes: create, run, stop, error.

        Deletion-lane statuses go through `advance_lane`, which only a runner's deletion
        workflow calls; everyone else asks for a deletion instead.
        """
        if on_lane(to):
            raise LaneWriteRefused(
                f"runner {name!r}: {to} is written only by the runner's deletion workflow "
                f"({deletion_workflow_id(name)}); request a deletion instead"
            )
        return self._cas(name, expect, version, to, actor, reason, provider_id=provider_id)

    def advance_lane(
        self,
        name: str,
        *,
        expect: InstanceStatus,
        version: int,
        to: InstanceStatus,
        owner: str,
        reason: str = "",
    ) -> CasResult:
        """The deletion workflow's compare-and-set along the lane. `owner` must be the
        runner's deletion workflow id: one owner per runner."""
        if owner != deletion_workflow_id(name):
            raise LaneWriteRefused(
                f"runner {name!r}: only {deletion_workflow_id(name)} writes its lane, not {owner}"
            )
        if not on_lane(to):
            raise LaneWriteRefused(f"advance_lane writes lane statuses only, not {to}")
        return self._cas(name, expect, version, to, owner, reason)

    def set_agent_status(
        self, name: str, *, status: AgentStatus, version: int, actor: str = "agent"
    ) -> CasResult:
        """Records what the agent reported. The instance status is untouched; the version
        still moves, so a writer holding an older read must re-read."""
        with self._tx() as conn:
            result = conn.execute(
                update(runners)
                .where(runners.c.name == name)
                .where(runners.c.version == version)
                .where(runners.c.instance_status != S.DELETED.value)
                .values(agent_status=status.value, version=version + 1, updated_at=utcnow())
            )
            row = conn.execute(_runner_columns().where(runners.c.name == name)).first()
        return CasResult(ok=result.rowcount == 1, record=_record(row) if row else None)

    def recover_to_deleted(self, name: str, *, actor: str, reason: str) -> RunnerRecord:
        """The one forced write: a record whose compute is confirmed gone, but whose row
        was moved by another writer so the compare-and-set to deleted was refused.

        It is audited (forced=True, with the reason) and logged at WARNING.
        """
        if not reason:
            raise ValueError("recover_to_deleted needs a reason; it is the audited recovery path")
        now = utcnow()
        for _ in range(20):
            with self._tx() as conn:
                row = conn.execute(_runner_columns().where(runners.c.name == name)).first()
                if row is None:
                    raise UnknownRunner(name)
                current = _record(row)
                if current.instance_status is S.DELETED:
                    return current
                # Forced on the status, not on the version: a concurrent agent report
                # makes this re-read rather than lose a version number.
                result = conn.execute(
                    update(runners)
                    .where(runners.c.name == name)
                    .where(runners.c.version == current.version)
                    .values(
                        instance_status=S.DELETED.value,
                        version=current.version + 1,
                        updated_at=now,
                        deleted_at=now,
                    )
                )
                if result.rowcount != 1:
                    continue
                self._audit(
                    conn,
                    name,
                    actor,
                    current.instance_status,
                    S.DELETED,
                    current.version,
                    current.version + 1,
                    reason=reason,
                    forced=True,
                )
                updated = _record(
                    conn.execute(_runner_columns().where(runners.c.name == name)).one()
                )
            break
        else:
            raise RuntimeError(f"runner {name!r}: the row kept moving during recovery; retry")
        log.warning(
            "forced write: runner %s %s(v%d) -> deleted by %s: %s",
            name,
            current.instance_status,
            current.version,
            actor,
            reason,
        )
        return updated

    def _cas(
        self,
        name: str,
        expect: InstanceStatus,
        version: int,
        to: InstanceStatus,
        actor: str,
        reason: str,
        *,
        provider_id: str | None = None,
    ) -> CasResult:
        check_transition(expect, to)
        if provider_id is not None:
            problem = provider_id_problem(provider_id)
            if problem:
                raise InvalidRecord(name, [f"provider_id: {problem}"])
        now = utcnow()
        values: dict[str, Any] = {
            "instance_status": to.value,
            "version": version + 1,
            "updated_at": now,
        }
        if to is S.DELETED:
            # The tombstone is written by the same statement that ends the lane, so no
            # later notification is needed for the record to be finished.
            values["deleted_at"] = now
        if provider_id is not None:
            values["provider_id"] = provider_id
        with self._tx() as conn:
            status_matches = runners.c.instance_status == expect.value
            if expect is S.UNKNOWN:
                # A status keeper cannot read is read as unknown (_record); a write that
                # expects unknown must match it, or the row could never leave it.
                status_matches = or_(
                    status_matches, runners.c.instance_status.not_in([s.value for s in S])
                )
            result = conn.execute(
                update(runners)
                .where(runners.c.name == name)
                .where(status_matches)
                .where(runners.c.version == version)
                .values(**values)
            )
            if result.rowcount == 1:
                self._audit(conn, name, actor, expect, to, version, version + 1, reason=reason)
            row = conn.execute(_runner_columns().where(runners.c.name == name)).first()
        return CasResult(ok=result.rowcount == 1, record=_record(row) if row else None)

    @staticmethod
    def _audit(
        conn: Connection,
        name: str,
        actor: str,
        from_status: InstanceStatus | None,
        to_status: InstanceStatus,
        from_version: int | None,
        to_version: int,
        *,
        reason: str = "",
        forced: bool = False,
    ) -> None:
        conn.execute(
            insert(audit).values(
                runner=name,
                at=utcnow(),
                actor=actor,
                from_status=from_status.value if from_status else None,
                to_status=to_status.value,
                from_version=from_version,
                to_version=to_version,
                forced=forced,
                reason=reason,
            )
        )

    def purge_tombstones(self, older_than: timedelta) -> int:
        cutoff = utcnow() - older_than
        with self._tx() as conn:
            result = conn.execute(
                delete(runners)
                .where(runners.c.instance_status == S.DELETED.value)
                .where(runners.c.deleted_at < cutoff)
            )
        return int(result.rowcount)

    # ---- leaks (orphan sweep) ----------------------------------------------------------

    def record_leak(self, *, provider_id: str, runner: str, scale_set: str, reason: str) -> None:
        with self._tx() as conn:
            exists = conn.execute(
                select(leaks.c.provider_id).where(leaks.c.provider_id == provider_id)
            ).first()
            if exists:
                conn.execute(
                    update(leaks)
                    .where(leaks.c.provider_id == provider_id)
                    .values(reason=reason, resolved_at=None)
                )
            else:
                conn.execute(
                    insert(leaks).values(
                        provider_id=provider_id,
                        runner=runner,
                        scale_set=scale_set,
                        recorded_at=utcnow(),
                        reason=reason,
                    )
                )
        log.warning("leak recorded: provider id %s of runner %s: %s", provider_id, runner, reason)

    def leaks(self, *, unresolved_only: bool = True) -> list[Leak]:
        query = select(leaks).order_by(leaks.c.recorded_at)
        if unresolved_only:
            query = query.where(leaks.c.resolved_at.is_(None))
        with self.engine.connect() as conn:
            return [
                Leak(
                    provider_id=m["provider_id"],
                    runner=m["runner"],
                    scale_set=m["scale_set"],
                    recorded_at=_aware(m["recorded_at"]) or utcnow(),
                    reason=m["reason"],
                    resolved_at=_aware(m["resolved_at"]),
                )
                for m in (row._mapping for row in conn.execute(query))
            ]

    def resolve_leak(self, provider_id: str) -> None:
        with self._tx() as conn:
            conn.execute(
                update(leaks).where(leaks.c.provider_id == provider_id).values(resolved_at=utcnow())
            )

    # ---- instance leases ---------------------------------------------------------------

    def acquire_lease(self, key: str, *, holder: str, ttl: timedelta) -> LeaseResult:
        """Takes the lease on `key` for `ttl` unless another holder has it unexpired. An
        expired lease is taken over (logged). Not re-entrant: `holder` names one call."""
        if not 0 < len(holder) <= 255:
            raise ValueError(f"lease holder must be 1-255 characters, not {len(holder)}")
        for _ in range(MAX_LEASE_ROUNDS):
            now = utcnow()
            expires = now + ttl
            with self.engine.connect() as conn:
                row = conn.execute(
                    select(instance_leases).where(instance_leases.c.key == key)
                ).first()
            if row is None:
                try:
                    with self._tx() as conn:
                        conn.execute(
                            insert(instance_leases).values(
                                key=key, holder=holder, acquired_at=now, expires_at=expires
                            )
                        )
                except IntegrityError:
                    continue  # taken between the read and the insert: read it again
                return LeaseResult(acquired=True, key=key, holder=holder, expires_at=expires)
            held_until = _aware(row.expires_at) or now
            if held_until > now:
                return LeaseResult(
                    acquired=False, key=key, holder=row.holder, expires_at=held_until
                )
            # Holders name one call each, so matching the old holder is the compare-and-set.
            with self._tx() as conn:
                taken = conn.execute(
                    update(instance_leases)
                    .where(instance_leases.c.key == key)
                    .where(instance_leases.c.holder == row.holder)
                    .values(holder=holder, acquired_at=now, expires_at=expires)
                ).rowcount
            if taken == 1:
                log.warning(
                    "lease %s: took over the lease %s let expire at %s",
                    key,
                    row.holder,
                    held_until.isoformat(),
                )
                return LeaseResult(
                    acquired=True,
                    key=key,
                    holder=holder,
                    expires_at=expires,
                    taken_over_from=row.holder,
                )
        raise RuntimeError(f"lease {key!r} kept changing hands; retry")

    def release_lease(self, key: str, *, holder: str) -> bool:
        """Gives the lease back; False when `holder` no longer has it (it expired and was
        taken over, which the new holder's log line shows)."""
        with self._tx() as conn:
            gone = conn.execute(
                delete(instance_leases)
                .where(instance_leases.c.key == key)
                .where(instance_leases.c.holder == holder)
            ).rowcount
        return gone == 1

    def lease(self, key: str) -> LeaseResult | None:
        """The lease on `key` as stored, expired or not; None when nobody holds one."""
        with self.engine.connect() as conn:
            row = conn.execute(select(instance_leases).where(instance_leases.c.key == key)).first()
        if row is None:
            return None
        return LeaseResult(
            acquired=False,
            key=key,
            holder=row.holder,
            expires_at=_aware(row.expires_at) or utcnow(),
        )

    # ---- reconciler marks --------------------------------------------------------------

    def mark_pass(self, kind: str, keys: Iterable[str]) -> dict[str, int]:
        """Counts how many consecutive passes saw each mismatch of `kind`; mismatches not
        seen this pass are forgotten. Returns key -> passes (1 on first sight)."""
        seen = set(keys)
        now = utcnow()
        counts: dict[str, int] = {}
        with self._tx() as conn:
            known = {
                m.key: m.passes
                for m in conn.execute(
                    select(reconcile_marks.c.key, reconcile_marks.c.passes).where(
                        reconcile_marks.c.kind == kind
                    )
                )
            }
            gone = [k for k in known if k not in seen]
            if gone:
                conn.execute(
                    delete(reconcile_marks)
                    .where(reconcile_marks.c.kind == kind)
                    .where(reconcile_marks.c.key.in_(gone))
                )
            for key in sorted(seen):
                if key in known:
                    counts[key] = known[key] + 1
                    conn.execute(
                        update(reconcile_marks)
                        .where(reconcile_marks.c.kind == kind)
                        .where(reconcile_marks.c.key == key)
                        .values(passes=counts[key])
                    )
                else:
                    counts[key] = 1
                    conn.execute(
                        insert(reconcile_marks).values(kind=kind, key=key, first_seen=now, passes=1)
                    )
        return counts

    def clear_mark(self, kind: str, key: str) -> None:
        with self._tx() as conn:
            conn.execute(
                delete(reconcile_marks)
                .where(reconcile_marks.c.kind == kind)
                .where(reconcile_marks.c.key == key)
            )
