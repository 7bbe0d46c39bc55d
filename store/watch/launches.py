"""keeper's launch store: the full request of a job `keeper job run` launched with secrets.

A watch's history holds the request with its secret values redacted and this store's key
for the full one (domain/watch/relaunch.py, HeldLaunch), so an approved restart relaunches
the job as it was launched and no secret enters a workflow payload. Rows are written once
per key (a second write of the same key is a no-op, so a retried activity does no harm) and
read by key. The table is prefixed `watch_` so it may share a database with keeper's other
stores. The API is synchronous (SQLAlchemy Core); async callers run it in a thread.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import Column, DateTime, Engine, MetaData, String, Table, Text, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from keeper.store.database import (
    StoreUnavailable,
    create_tables,
    open_engine,
    redacted_url,
    without_password,
)
from keeper.wire.iris.codec import to_wire
from keeper.wire.iris.messages import LaunchJobRequest

metadata = MetaData()

launches = Table(
    "watch_launches",
    metadata,
    Column("key", String(200), primary_key=True),
    Column("job_id", String(400), nullable=False),
    # The request in iris's JSON mapping, exactly as it was sent.
    Column("request", Text, nullable=False),
    Column("stored_at", DateTime(timezone=True), nullable=False),
)


class LaunchStore:
    def __init__(self, engine: Engine, url: str) -> None:
        self._engine = engine
        self._url = url

    def describe(self) -> str:
        return redacted_url(self._url)

    def _failed(self, err: SQLAlchemyError, what: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"keeper's launch store ({self.describe()}) could not {what}: "
            f"{without_password(self._url, str(err).splitlines()[0])}"
        )

    def put(self, key: str, job_id: str, request: LaunchJobRequest) -> None:
        """Keeps `request` under `key`; a key already kept is left as it is."""
        row = {
            "key": key,
            "job_id": job_id,
            "request": json.dumps(to_wire(request), sort_keys=True),
            "stored_at": datetime.now(UTC),
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(launches).values(**row))
        except IntegrityError:
            return  # written before: the first write stands
        except SQLAlchemyError as err:
            raise self._failed(err, "keep a launch request") from None

    def get(self, key: str) -> LaunchJobRequest | None:
        try:
            with self._engine.connect() as conn:
                text = conn.execute(
                    select(launches.c.request).where(launches.c.key == key)
                ).scalar_one_or_none()
        except SQLAlchemyError as err:
            raise self._failed(err, "read a launch request") from None
        return None if text is None else LaunchJobRequest.model_validate(json.loads(text))

    def close(self) -> None:
        self._engine.dispose()


def open_launch_store(url: str) -> LaunchStore:
    """Opens (and creates, if new) the launch store at `url`: sqlite:///path or
    postgresql://user@host/db."""
    engine = open_engine(url, "launch store")
    try:
        create_tables(metadata, engine)
    except SQLAlchemyError as err:
        engine.dispose()
        raise StoreUnavailable(
            f"keeper's launch store ({redacted_url(url)}) could not be opened: "
            f"{without_password(url, str(err).splitlines()[0])}"
        ) from None
    return LaunchStore(engine, url)
