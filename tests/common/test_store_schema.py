"""Two processes opening one of keeper's databases at once (the dev stack's worker and
reclaim tap do) both create its tables: the loser of that race opens it all the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, event, inspect
from sqlalchemy.exc import OperationalError

from keeper.store.database import create_tables, open_engine


def raced(url: str) -> tuple[MetaData, list[int]]:
    """A table another process creates between create_all's existence check and its CREATE
    (the first time only)."""
    metadata = MetaData()
    table = Table("raced", metadata, Column("id", Integer, primary_key=True))
    creates: list[int] = []

    def someone_else_first(target: Table, connection: Any, **_: Any) -> None:
        creates.append(1)
        if len(creates) == 1:
            connection.exec_driver_sql("CREATE TABLE raced (id INTEGER PRIMARY KEY)")

    event.listen(table, "before_create", someone_else_first)
    return metadata, creates


def test_a_schema_created_meanwhile_by_another_process_is_taken_as_it_is(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'keeper.db'}"
    metadata, _ = raced(url)
    engine = open_engine(url)
    try:
        # Plain create_all loses the race...
        with pytest.raises(OperationalError, match="already exists"):
            metadata.create_all(engine)
    finally:
        engine.dispose()

    url2 = f"sqlite:///{tmp_path / 'keeper2.db'}"
    metadata2, creates2 = raced(url2)
    engine2 = open_engine(url2)
    try:
        create_tables(metadata2, engine2)  # ... create_tables finds the tables and goes on
        assert inspect(engine2).has_table("raced")
        assert creates2 == [1]  # the second look found it: nothing created twice
    finally:
        engine2.dispose()


def test_any_other_schema_error_is_raised(tmp_path: Path) -> None:
    metadata = MetaData()
    table = Table("broken", metadata, Column("id", Integer, primary_key=True))

    def fail(target: Table, connection: Any, **_: Any) -> None:
        connection.exec_driver_sql("SELECT * FROM no_such_table")

    event.listen(table, "before_create", fail)
    engine = open_engine(f"sqlite:///{tmp_path / 'k.db'}")
    try:
        with pytest.raises(OperationalError, match="no such table"):
            create_tables(metadata, engine)
    finally:
        engine.dispose()
