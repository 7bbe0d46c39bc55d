"""The local stack's ports: one base moves them all, and the addresses that must agree with
them (where the worker dials the TPU emulator, where it finds the GitHub emulator, which
spur controller job reclaim reads) are derived from them rather than repeated.

With `dev.port_base` N (or KEEPER_DEV_PORT_BASE, or `keeper-dev up --port-base N`):

| port | setting |
|---|---|
| N   | Temporal gRPC, the port of `temporal.address` |
| N+1 | Temporal UI, `temporal.ui_port` |
| N+2 | TPU emulator gRPC, `emulator.grpc_port` |
| N+3 | TPU emulator control API, `emulator.control_port` |
| N+4 | GitHub emulator, `emulator.github_port` |
| N+5 | emulated VMs' health endpoints, `emulator.vm_health_port` |
| N+6 | spur emulator's controller gRPC, `emulator.spur_controller_port` |
| N+7 | spur emulator's control API, `emulator.spur_control_port` |
| N+8 | job reclaim's heartbeat tap, the port of `reclaim.tap_address` |
| N+9 | job reclaim's HTTP intake, the port of `reclaim.intake_address` |
| N+10 | iris emulator's Connect endpoint and control API, `emulator.iris_port` |
| N+11 | the dev stack worker's Prometheus metrics, the port of `dev.metrics_address` |

Without a base: 7233, 8233, 8470, 8471, 8472, 8080, then spur's own controller port 6817,
6821, 6819 and 6820, then iris's own 10000, then 9464 (the metrics port of a deployed
worker, too). `reclaim.controller_address` follows the spur
emulator's controller when it is unset, and `watch.controller_url` the iris emulator.

A port set explicitly must equal the one the base gives; a contradiction is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from keeper.runtime.settings import Settings

PORT_BASE_ENV = "KEEPER_DEV_PORT_BASE"
PORT_OFFSETS = {
    "temporal.address": 0,
    "temporal.ui_port": 1,
    "emulator.grpc_port": 2,
    "emulator.control_port": 3,
    "emulator.github_port": 4,
    "emulator.vm_health_port": 5,
    "emulator.spur_controller_port": 6,
    "emulator.spur_control_port": 7,
    "reclaim.tap_address": 8,
    "reclaim.intake_address": 9,
    "emulator.iris_port": 10,
    "dev.metrics_address": 11,
}
# HOST:PORT settings among them: the base moves only their port.
_ADDRESS_KEYS = frozenset(
    {"temporal.address", "reclaim.tap_address", "reclaim.intake_address", "dev.metrics_address"}
)
PORT_SPAN = max(PORT_OFFSETS.values()) + 1
# Below 1024 needs root; the top leaves room for every offset.
PORT_BASE_MIN = 1024
PORT_BASE_MAX = 65536 - PORT_SPAN

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""})
_WILDCARD = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}


class PortConflict(ValueError):
    """Two settings that must agree do not."""


def split_address(address: str, setting: str = "temporal.address") -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{setting} {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def is_local(host: str) -> bool:
    return host in LOCAL_HOSTS or host.startswith("127.")


def dial_host(host: str) -> str:
    """The address a client on this host dials to reach a server listening on `host`."""
    host = _WILDCARD.get(host, host)
    return f"[{host}]" if ":" in host else host


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _same_place(a_host: str, a_port: int, b_host: str, b_port: int) -> bool:
    return a_port == b_port and (a_host == b_host or (is_local(a_host) and is_local(b_host)))


def _explicit(settings: Settings, dotted: str) -> bool:
    section, key = dotted.split(".")
    return key in getattr(settings, section).model_fields_set


def _source(sources: dict[str, str], dotted: str) -> str:
    return sources.get(dotted, "the config file")


def derive(settings: Settings, sources: dict[str, str]) -> None:
    """Fills the ports and addresses left unset from the base and from each other; raises
    PortConflict when explicit values contradict."""
    base = settings.dev.port_base
    if base is not None:
        _apply_base(settings, base, sources)
    emu = settings.emulator
    emulator_fixed = base is not None or any(
        _explicit(settings, f"emulator.{key}") for key in ("host", "grpc_port")
    )
    served = f"{dial_host(emu.host)}:{emu.grpc_port}"
    tpu = settings.tpu
    if "emulator_address" not in tpu.model_fields_set:
        tpu.emulator_address = served
    elif emulator_fixed and tpu.endpoint == "emulator":
        host, port = split_address(tpu.emulator_address, "tpu.emulator_address")
        if not _same_place(host, port, emu.host, emu.grpc_port):
            raise PortConflict(
                f"tpu.emulator_address is {tpu.emulator_address} "
                f"({_source(sources, 'tpu.emulator_address')}) but the TPU emulator serves "
                f"{served} ({_emulator_origin(base, 'emulator.grpc_port')}): leave "
                "tpu.emulator_address unset to derive it, or make the two agree"
            )
    github = settings.runners.github
    if "api_url" not in github.model_fields_set:
        github.api_url = f"http://{dial_host(emu.host)}:{emu.github_port}"
    elif base is not None or _explicit(settings, "emulator.github_port"):
        url = urlsplit(github.api_url)
        local_http = url.scheme == "http" and is_local(url.hostname or "")
        if local_http and (url.port or 80) != emu.github_port:
            raise PortConflict(
                f"runners.github.api_url is {github.api_url} "
                f"({_source(sources, 'runners.github.api_url')}) but the GitHub emulator "
                f"serves port {emu.github_port} ({_emulator_origin(base, 'emulator.github_port')})"
                ": leave runners.github.api_url unset to derive it, or make the two agree"
            )
    _derive_spur_controller(settings, base, sources)
    _derive_iris_controller(settings, base, sources)


def _derive_iris_controller(settings: Settings, base: int | None, sources: dict[str, str]) -> None:
    """watch.controller_url follows the iris emulator when unset; a local URL on another
    port contradicts it (a remote URL is a real iris controller: no emulator)."""
    emu = settings.emulator
    watch = settings.watch
    served = f"http://{dial_host(emu.host)}:{emu.iris_port}"
    if "controller_url" not in watch.model_fields_set:
        watch.controller_url = served
        return
    if base is None and not _explicit(settings, "emulator.iris_port"):
        return
    url = urlsplit(watch.controller_url)
    if url.scheme == "http" and is_local(url.hostname or "") and url.port != emu.iris_port:
        raise PortConflict(
            f"watch.controller_url is {watch.controller_url} "
            f"({_source(sources, 'watch.controller_url')}) but the iris emulator serves "
            f"{served} ({_emulator_origin(base, 'emulator.iris_port')}): leave "
            "watch.controller_url unset to derive it, or make the two agree"
        )


def _derive_spur_controller(settings: Settings, base: int | None, sources: dict[str, str]) -> None:
    """reclaim.controller_address follows the spur emulator's controller when unset; a local
    address on another port contradicts it (a remote controller is a real spur: no emulator)."""
    emu = settings.emulator
    reclaim = settings.reclaim
    served = f"{dial_host(emu.host)}:{emu.spur_controller_port}"
    if "controller_address" not in reclaim.model_fields_set:
        reclaim.controller_address = served
        return
    if base is None and not _explicit(settings, "emulator.spur_controller_port"):
        return
    host, port = split_address(reclaim.controller_address, "reclaim.controller_address")
    if is_local(host) and port != emu.spur_controller_port:
        raise PortConflict(
            f"reclaim.controller_address is {reclaim.controller_address} "
            f"({_source(sources, 'reclaim.controller_address')}) but the spur emulator's "
            f"controller serves {served} "
            f"({_emulator_origin(base, 'emulator.spur_controller_port')}): leave "
            "reclaim.controller_address unset to derive it, or make the two agree"
        )


def _emulator_origin(base: int | None, dotted: str) -> str:
    return f"dev.port_base {base} + {PORT_OFFSETS[dotted]}" if base is not None else dotted


def _apply_base(settings: Settings, base: int, sources: dict[str, str]) -> None:
    for dotted, offset in PORT_OFFSETS.items():
        want = base + offset
        section_name, key = dotted.split(".")
        section = getattr(settings, section_name)
        if dotted in _ADDRESS_KEYS:
            if not getattr(section, key):
                continue  # set to "": nothing served, so no port to move
            host, have = split_address(getattr(section, key), dotted)
            if not _explicit(settings, dotted):
                # Temporal's address is dialled; the tap, the intake and the metrics
                # endpoint listen on theirs.
                shown = dial_host(host) if dotted == "temporal.address" else _bracketed(host)
                setattr(section, key, f"{shown}:{want}")
                continue
            if not is_local(host):
                continue  # a remote server: the stack starts nothing there, so no port to move
        else:
            have = getattr(section, key)
            if not _explicit(settings, dotted):
                setattr(section, key, want)
                continue
        if have != want:
            raise PortConflict(
                f"{dotted} gives port {have} ({_source(sources, dotted)}) but dev.port_base "
                f"{base} puts it at {want} (base + {offset}): remove one of the two"
            )
