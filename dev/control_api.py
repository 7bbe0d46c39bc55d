"""The emulators' control APIs as `keeper-dev emulator` calls them: one HTTP request each,
every failure a CommandFailed that says what to do next, and their state as tables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from keeper.cli.local_stack import other_base_advice
from keeper.cli.output import CommandFailed, Output, table
from keeper.domain.common.untrusted import terminal_text
from keeper.runtime.dev_ports import PORT_OFFSETS, dial_host
from keeper.runtime.settings import Settings

HTTP_TIMEOUT = 10.0


def _error_text(response: httpx.Response) -> str:
    """What the emulator said: every control API answers a failure with {"error": ...}."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    return str(body["error"]) if isinstance(body, Mapping) and "error" in body else str(body)


@dataclass(frozen=True)
class ControlAPI:
    """One emulator's control API."""

    emulator: str  # as messages name it: "TPU emulator"
    base: str  # http://host:port
    # The settings (or option) that gave `base`, and what to do when nothing answers there.
    origin: str
    hint: str
    # What to do when it refuses a call (a 4xx), unless the call says better for a status.
    refused_hint: str | None = None
    prefix: str = ""  # the control API's path on `base`

    def call(
        self, method: str, path: str, body: Any = None, refused: Mapping[int, str] | None = None
    ) -> Any:
        """The decoded JSON answer (None when empty), or CommandFailed."""
        url = f"{self.base}{self.prefix}{path}"
        try:
            response = httpx.request(method, url, json=body, timeout=HTTP_TIMEOUT)
        except httpx.ConnectError as err:
            raise CommandFailed(
                f"The {self.emulator} is not running at {self.base} ({self.origin}): {err}",
                hint=self.hint,
                url=self.base,
            ) from err
        except httpx.HTTPError as err:
            raise CommandFailed(f"{method} {url} failed: {err}") from err
        status = response.status_code
        if 400 <= status < 500:
            raise CommandFailed(
                f"the {self.emulator} refused {method} {path}: {_error_text(response)}",
                hint=(refused or {}).get(status, self.refused_hint),
                url=self.base,
                http_status=status,
            )
        if status >= 300:
            raise CommandFailed(f"{method} {url}: HTTP {status}: {_error_text(response)}")
        return response.json() if response.content else None


def at_stack(
    settings: Settings, emulator: str, setting: str, start: str, also: str = "", **kw: Any
) -> ControlAPI:
    """The control API where the dev stack runs `emulator`: emulator.host and the port
    `setting` names, which the port base moves. `start`: how to get it running there."""
    port = getattr(settings.emulator, setting.removeprefix("emulator."))
    base = settings.dev.port_base
    if base is not None:
        origin = f"dev.port_base {base} + {PORT_OFFSETS[setting]}"
    else:
        origin = f"emulator.host/{setting}"
    url = f"http://{dial_host(settings.emulator.host)}:{port}"
    return ControlAPI(emulator, url, origin, f"{start}; {other_base_advice(settings)}{also}.", **kw)


def indented_table(headers: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    """Aligned columns under their headers, indented; each value as one inert line."""
    cells = [tuple(terminal_text(str(c)) for c in row) for row in rows]
    return ["  " + line for line in table(headers, cells)]


def show(out: Output, data: Any, text: str) -> None:
    """A command's answer: `data` under --json, else `text`."""
    if out.json:
        out.data(data)
    else:
        out.line(text)
