"""Opening keeper's database: one URL rule, one set of drivers and pragmas, for every store.

The runner store and the reclaim memory may share one database (each with its own tables),
so both open their engine here. Nothing here prints or logs a URL with its password: use
`redacted_url` for messages, and `without_password` for a driver's error text, which is
free to quote its connection string.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from sqlalchemy import Engine, MetaData, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, ProgrammingError

from keeper.domain.common.secret_text import scrub

# user:password@ in a URL SQLAlchemy cannot parse; greedy, since a password may hold '@'.
_USERINFO = re.compile(r"(//[^/:@]*:)(.*)@")
_URL_HINT = "use sqlite:///path/to/keeper.db or postgresql://user@host:5432/db"


class StoreUnavailable(RuntimeError):
    """A store could not be opened. The message shows the URL with its password replaced by
    ***, and never the password itself."""


def _url_passwords(url: str) -> list[str]:
    """The password as SQLAlchemy reads it, and as the widest user:...@ match reads it: a
    password with an unescaped '/' or '@' is split differently by the two."""
    found = [unquote(m.group(2)) for m in [_USERINFO.search(url)] if m]
    with contextlib.suppress(Exception):
        found.append(make_url(url).password or "")
    return [p for p in found if p]


def redacted_url(url: str) -> str:
    """The URL as it may be printed or logged: its password replaced by ***."""
    widest = _USERINFO.search(url)
    try:
        parsed = make_url(url)
    except Exception:
        parsed = None
    if parsed is not None and (widest is None or unquote(widest.group(2)) == parsed.password):
        return parsed.render_as_string(hide_password=True)
    # SQLAlchemy cannot read it, or reads less of it as the password than is there.
    return _USERINFO.sub(r"\1***@", url) if widest else url


def without_password(url: str, text: str) -> str:
    """`text` (a driver's error, say) with the URL's password cut out, plain or URL-quoted."""
    passwords = _url_passwords(url)
    return scrub(text, [*passwords, *(quote(p, safe="") for p in passwords)])


def normalise_url(url: str, what: str = "store") -> str:
    """Accepts plain `postgresql://` and `sqlite:///` URLs; picks the drivers keeper ships.
    `what` names the store in the error ("runner store", "reclaim memory")."""
    try:
        parsed = make_url(url)
    except Exception as err:
        raise ValueError(
            f"{what} url {redacted_url(url)!r} cannot be read "
            f"({without_password(url, str(err))}); {_URL_HINT}"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif not parsed.drivername.startswith(("postgresql", "sqlite")):
        raise ValueError(f"{what} url {parsed.render_as_string(hide_password=True)!r}: {_URL_HINT}")
    return parsed.render_as_string(hide_password=False)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    # WAL lets the CLI read while a worker writes; busy_timeout makes writers queue
    # instead of failing when several worker threads write at once.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def open_engine(url: str, what: str = "store") -> Engine:
    """An engine for `url` (see normalise_url). Raises ValueError for a URL keeper cannot use;
    connecting is lazy, so an unreachable server fails at first use."""
    url = normalise_url(url, what)
    parsed = make_url(url)
    kwargs: dict[str, Any] = {"future": True}
    sqlite = parsed.drivername.startswith("sqlite")
    if sqlite:
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 10, "check_same_thread": False}
    else:
        kwargs.update(pool_size=10, max_overflow=20, pool_pre_ping=True)
    engine = create_engine(url, **kwargs)
    if sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


# Tries of a schema creation that lost a race to another process creating the same tables.
_CREATE_ROUNDS = 3


def create_tables(metadata: MetaData, engine: Engine) -> None:
    """`metadata.create_all`, safe against another process creating the same tables at once
    (the dev stack's worker and reclaim tap open one database together): the existence check
    and the CREATE are not one step, so the loser's CREATE fails "already exists"; its next
    try finds the tables and creates nothing."""
    for round_ in range(_CREATE_ROUNDS):
        try:
            metadata.create_all(engine)
            return
        except (OperationalError, ProgrammingError) as err:
            if "already exists" not in str(err) or round_ == _CREATE_ROUNDS - 1:
                raise
