"""Tables of the runner store. Portable SQL only: the same schema runs on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

runners = Table(
    "runners",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("scale_set", String(64), nullable=False),
    Column("provider_id", String(255)),
    Column("github_runner_id", BigInteger),
    Column("github_scope", String(255)),
    Column("instance_status", String(32), nullable=False),
    Column("agent_status", String(32), nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("deleted_at", DateTime(timezone=True)),
    Index("runners_scale_set_status", "scale_set", "instance_status"),
)

# Every status write, who made it and why. Forced writes are flagged so they stand out.
audit = Table(
    "runner_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("runner", String(64), nullable=False, index=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("actor", String(255), nullable=False),
    Column("from_status", String(32)),
    Column("to_status", String(32), nullable=False),
    Column("from_version", Integer),
    Column("to_version", Integer, nullable=False),
    Column("forced", Boolean, nullable=False, default=False),
    Column("reason", Text, nullable=False, default=""),
)

# Provider ids a forced delete may have left behind, for the orphan sweep.
leaks = Table(
    "leaked_instances",
    metadata,
    Column("provider_id", String(255), primary_key=True),
    Column("runner", String(64), nullable=False),
    Column("scale_set", String(64), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("reason", Text, nullable=False),
    Column("resolved_at", DateTime(timezone=True)),
)

# Mismatches the reconciler has seen, so it acts only on those seen on two passes.
reconcile_marks = Table(
    "reconcile_marks",
    metadata,
    Column("kind", String(32), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("first_seen", DateTime(timezone=True), nullable=False),
    Column("passes", Integer, nullable=False),
)

# Who runs a provider process for an instance, and until when at the latest: a retry on
# another host waits for the lease instead of running beside a straggler.
instance_leases = Table(
    "instance_leases",
    metadata,
    Column("key", String(255), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("acquired_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)
