"""Tables of keeper's reclaim memory, all prefixed `reclaim_` so they can share the runner
store's database. Portable SQL only: the same schema runs on SQLite and PostgreSQL."""

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
    UniqueConstraint,
)

metadata = MetaData()

# One row (id 1): the controller's current epoch as keeper last observed it.
epochs = Table(
    "reclaim_epoch",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("epoch", Integer, nullable=False),
    Column("high_id", BigInteger, nullable=False),
    Column("high_submit", DateTime(timezone=True)),
    Column("started_at", DateTime(timezone=True)),
    Column("why", Text, nullable=False),
)

# Job ids keeper saw issued, per epoch: the proof an untracked id was issued and not live.
# Written in bulk (a first observation lists every job the controller tracks, 100,000 and
# more), so times are microseconds since 1970 UTC: integers cross both drivers without the
# per-value datetime formatting and parsing that would dominate such a write.
jobs = Table(
    "reclaim_jobs",
    metadata,
    Column("epoch", Integer, primary_key=True),
    Column("job_id", BigInteger, primary_key=True),
    Column("submit_us", BigInteger),
    Column("finalized", Boolean, nullable=False),
    Column("last_state", Integer, nullable=False),
    Column("last_seen_us", BigInteger, nullable=False),
)

nodes = Table(
    "reclaim_nodes",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("hostname", String(255), nullable=False),
    Column("address", String(255), nullable=False),
    Column("port", Integer, nullable=False),
    Column("boot", String(255), nullable=False),
    Column("registered_at", DateTime(timezone=True), nullable=False),
    Column("last_beat_at", DateTime(timezone=True)),
)

# The fence: one row per (node, job id, sighting). `is_open` is 1 while open and NULL once
# closed, so the unique constraint allows one open holding per (node, job id) and any number
# of closed ones (NULLs are distinct in a unique constraint on both back ends).
holdings = Table(
    "reclaim_holdings",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("job_id", BigInteger, primary_key=True),
    Column("sighting", Integer, primary_key=True),
    Column("epoch", Integer, nullable=False),
    Column("first_seen", DateTime(timezone=True), nullable=False),
    Column("last_reported_at", DateTime(timezone=True), nullable=False),
    Column("is_open", Integer),
    Column("closed_at", DateTime(timezone=True)),
    Column("outcome", String(64)),
    Column("workflow_id", String(255)),
    # The evidence last signalled to the holding's workflow (change-only signalling).
    Column("signalled_evidence", String(16)),
    Column("signalled_at", DateTime(timezone=True)),
    Column("signalled_boot", String(255)),
    UniqueConstraint("node_id", "job_id", "is_open", name="reclaim_holdings_one_open"),
    Index("reclaim_holdings_open_node", "is_open", "node_id"),
)

# Drains keeper made: a node stays drained while any of them is open.
drains = Table(
    "reclaim_drains",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("workflow_id", String(255), primary_key=True),
    Column("reason", Text, nullable=False),
    Column("drained_at", DateTime(timezone=True), nullable=False),
    Column("cleared_at", DateTime(timezone=True)),
)

# The run chains that lifted their drain of a node: a drain call of such a chain that was
# still on its way (a cancel does not wait for it) opens nothing and lifts what it made.
drain_fences = Table(
    "reclaim_drain_fences",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("workflow_id", String(255), primary_key=True),
    Column("chain", String(64), primary_key=True),
    Column("fenced_at", DateTime(timezone=True), nullable=False),
)

# The release evidence the intake has seen for each watched holding (a ReleaseTally as JSON),
# so an activity retried after a crash can see that the agent already let go.
evidence = Table(
    "reclaim_evidence",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("job_id", BigInteger, primary_key=True),
    Column("sighting", Integer, primary_key=True),
    Column("tally", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Every agent cancel keeper sent, claimed before the send under a key unique to the
# scheduled activity (workflow id, run id, activity id): a retry of that activity finds its
# claim and never sends again, and the count is what may have reached the agent.
cancels = Table(
    "reclaim_cancels",
    metadata,
    Column("send_key", String(512), primary_key=True),
    Column("node_id", String(128), nullable=False),
    Column("job_id", BigInteger, nullable=False),
    Column("sighting", Integer, nullable=False),
    Column("signal", Integer, nullable=False),
    Column("claimed_at", DateTime(timezone=True), nullable=False),
    # delivered | timed-out | not-delivered; NULL while the answer is unknown (lost).
    Column("answer", String(32)),
    Column("answered_at", DateTime(timezone=True)),
    Index("reclaim_cancels_holding", "node_id", "job_id", "sighting"),
)

# One row (id 1): when the last read of the whole job map began. A holding first seen after it
# has met no full read yet, and its cancel reads the whole map first (a wipe that reissued its
# id shows only there).
reads = Table(
    "reclaim_reads",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("full_read_at", DateTime(timezone=True), nullable=False),
)
