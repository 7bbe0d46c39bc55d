"""What every section of keeper's settings shares: the model base, the address check, the
floor of a schedule's interval, and the error a bad setting raises."""

from __future__ import annotations

import re
from datetime import timedelta

from pydantic import BaseModel, ConfigDict

from keeper.runtime import dev_ports


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


# A schedule's interval: Temporal refuses one under a second ("interval is too small"), which
# a worker would only learn when it starts.
SCHEDULE_MIN_INTERVAL = timedelta(seconds=1)


def checked_host_port(value: str, setting: str, least_port: int = 1) -> str:
    """A listen or dial address, HOST:PORT, or a ValueError naming the setting."""
    if value != value.strip() or any(c.isspace() for c in value):
        raise ValueError(f"{setting} {value!r} is not HOST:PORT (it contains a space)")
    _, port = dev_ports.split_address(value, setting)
    if not least_port <= port <= 65535:
        raise ValueError(f"{setting} {value!r}: port {port} is not between {least_port} and 65535")
    return value


# A store URL whose verdict is known without SQLAlchemy: a SQLite file path, as the shipped
# settings give. Anything else is read by keeper.store.database (tests/common/
# test_cli_startup.py checks that SQLAlchemy accepts every URL this does).
_PLAIN_SQLITE = re.compile(r"sqlite:///[^?#\s]*")


def checked_store_url(value: str, what: str) -> str:
    """A store URL keeper can open (store/database.py's normalise_url), or a ValueError that
    names `what` ("reclaim memory") and hides a password."""
    if not _PLAIN_SQLITE.fullmatch(value):
        # SQLAlchemy, a tenth of a second to import, only for a URL that needs it.
        from keeper.store.database import normalise_url

        normalise_url(value, what)
    return value


class SettingsError(Exception):
    """A configuration problem, phrased for the operator who has to fix it."""


class SettingsConflict(SettingsError):
    """Two settings that must agree do not (dev_ports.PortConflict)."""
