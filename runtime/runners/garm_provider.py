"""keeper's side of GARM's external-provider protocol.

A GARM provider is an executable run once per operation: the operation and its arguments
are environment variables, CreateInstance's bootstrap parameters come on stdin, answers are
JSON on stdout, and the exit code tells success (0), not found (30) or failure (anything
else, with the reason on stderr). Any provider written for GARM therefore works here
unchanged; see docs/provider.md.

Each call runs in a session of its own, so on a deadline, a cancellation or any error the
whole process group is killed: a provider's helpers (cloud CLIs, ssh) die with it instead of
finishing a delete nobody is waiting for. On Linux the provider also dies with its worker
(the parent-death signal), so a SIGKILLed worker leaves no provider running beside the
retry that Temporal starts elsewhere. The child's environment is built from nothing, never
copied from keeper's, so keeper's own credentials never reach third-party code.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from keeper.domain.runners.provider import (
    NOT_FOUND_EXIT_CODE,
    ProviderAnswer,
    ProviderInstance,
    ProviderOutcome,
    classify_exit,
    stderr_tail,
    timed_out,
)
from keeper.domain.runners.record_check import provider_id_problem, shown
from keeper.runtime.parent_death import launch_error, tied_argv

# GARM's newest interface; v0.1.1 adds GARM_POOL_ID and GARM_POOL_EXTRASPECS to
# per-instance calls, and providers built on it refuse a delete without the pool.
INTERFACE_VERSION = "v0.1.1"
# GARM sends the pool's extra specs as base64 JSON from v0.1.1 on; keeper has none of its
# own, and an empty object decodes cleanly in every provider.
NO_EXTRA_SPECS = base64.b64encode(b"{}").decode()
# From keeper's environment, only what a program needs to run at all.
PASSED_THROUGH = ("PATH", "HOME", "LANG")
# After the group is killed, how long to wait for its pipes to close before giving up on
# the rest of its output (a process that left the group could hold them open forever).
_REAP_GRACE_S = 5.0
# A provider's stderr can be endless; only its tail reaches an answer.
_STDERR_KEPT = 64 * 1024

_INSTANCES = TypeAdapter(list[ProviderInstance] | None)
_T = TypeVar("_T")

# Drain-and-reap tasks of killed providers still closing their pipes; referenced here so
# they are not garbage-collected mid-flight.
_reaping: set[asyncio.Future[None]] = set()


class ProviderError(Exception):
    """A provider call other than DeleteInstance failed, timed out or answered nonsense."""

    def __init__(
        self,
        command: str,
        message: str,
        *,
        exit_code: int | None = None,
        timed_out: bool = False,
    ) -> None:
        self.command = command
        self.message = message  # stderr tail, or what was wrong with the answer
        self.exit_code = exit_code
        self.timed_out = timed_out
        how = (
            "timed out"
            if timed_out
            else ("failed" if exit_code is None else f"exited with {exit_code}")
        )
        super().__init__(f"provider {command} {how}: {message}" if message else how)


@dataclass(frozen=True)
class _Exit:
    code: int | None  # None: killed at the deadline
    stdout: bytes
    stderr: str
    duration_s: float


class ExternalProvider:
    """One GARM external-provider executable with its config file."""

    def __init__(
        self,
        executable: str | Path,
        config_file: str | Path,
        controller_id: str,
        *,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        path = Path(executable).absolute()
        if not path.is_file():
            raise FileNotFoundError(f"GARM provider executable {path} does not exist")
        if not os.access(path, os.X_OK):
            raise PermissionError(f"GARM provider executable {path} is not executable")
        reserved = sorted(k for k in extra_env or {} if k.startswith("GARM_"))
        if reserved:
            raise ValueError(f"extra_env may not set the protocol's own variables: {reserved}")
        self.executable = path
        self.config_file = Path(config_file).absolute()
        self.controller_id = controller_id
        base = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
        base.setdefault("PATH", os.defpath)
        base.update(extra_env or {})
        base.update(
            GARM_CONTROLLER_ID=controller_id,
            GARM_PROVIDER_CONFIG_FILE=str(self.config_file),
            GARM_INTERFACE_VERSION=INTERFACE_VERSION,
        )
        self._base_env = base

    def __repr__(self) -> str:
        return f"ExternalProvider({str(self.executable)!r}, {str(self.config_file)!r})"

    async def delete_instance(
        self,
        instance_id: str,
        pool_id: str,
        *,
        timeout_s: float,
        on_tick: Callable[[float], None] | None = None,
        tick_every_s: float = 5.0,
    ) -> ProviderAnswer:
        """Delete one instance (by provider_id, or by name if it never got one).

        Never raises for what the provider did: a failed, absent or timed-out delete is an
        answer. on_tick(elapsed_s) runs every tick_every_s while the provider works, which
        is where a Temporal activity heartbeats. Cancelling the awaiting task kills the
        provider's process group and re-raises.
        """
        problem = provider_id_problem(instance_id)
        if problem:
            # GARM_INSTANCE_ID could not even be set: a bad record, not a failing provider.
            return ProviderAnswer(
                outcome=ProviderOutcome.FAILED,
                message=f"instance id {shown(instance_id)} {problem}; fix the runner record",
                duration_s=0.0,
            )
        try:
            done = await self._call(
                "DeleteInstance",
                instance_id=instance_id,
                pool_id=pool_id,
                timeout_s=timeout_s,
                on_tick=on_tick,
                tick_every_s=tick_every_s,
            )
        except OSError as exc:  # could not even start it: a broken install, not a delete
            return ProviderAnswer(
                outcome=ProviderOutcome.FAILED,
                message=stderr_tail(f"could not run {self.executable}: {exc}"),
                duration_s=0.0,
            )
        if done.code is None:
            return timed_out(timeout_s, done.stderr, done.duration_s)
        return classify_exit(done.code, done.stderr, done.duration_s)

    async def get_instance(
        self, instance_id: str, pool_id: str, *, timeout_s: float
    ) -> ProviderInstance | None:
        """The provider's view of one instance; None when it answers not found (30)."""
        done = await self._checked(
            "GetInstance",
            instance_id=instance_id,
            pool_id=pool_id,
            timeout_s=timeout_s,
            accept=(0, NOT_FOUND_EXIT_CODE),
        )
        if done.code == NOT_FOUND_EXIT_CODE:
            return None
        return _parse("GetInstance", done.stdout, ProviderInstance.model_validate_json)

    async def list_instances(self, pool_id: str, *, timeout_s: float) -> list[ProviderInstance]:
        """Every instance the provider has tagged with pool_id."""
        done = await self._checked("ListInstances", pool_id=pool_id, timeout_s=timeout_s)
        # A Go provider with nothing to list marshals its nil slice as null.
        return _parse("ListInstances", done.stdout, _INSTANCES.validate_json) or []

    async def create_instance(
        self, bootstrap: Mapping[str, Any], pool_id: str, *, timeout_s: float
    ) -> ProviderInstance:
        """Create an instance from GARM BootstrapInstance parameters (name required)."""
        params = dict(bootstrap)
        params.setdefault("pool_id", pool_id)
        done = await self._checked(
            "CreateInstance",
            pool_id=pool_id,
            stdin=json.dumps(params).encode(),
            timeout_s=timeout_s,
        )
        return _parse("CreateInstance", done.stdout, ProviderInstance.model_validate_json)

    async def get_version(self, *, timeout_s: float) -> str:
        """The provider's own version string (GetVersion; older providers lack it)."""
        done = await self._checked("GetVersion", timeout_s=timeout_s)
        return done.stdout.decode(errors="replace").strip()

    async def _checked(
        self,
        command: str,
        *,
        timeout_s: float,
        instance_id: str | None = None,
        pool_id: str | None = None,
        stdin: bytes | None = None,
        accept: tuple[int, ...] = (0,),
    ) -> _Exit:
        try:
            done = await self._call(
                command,
                instance_id=instance_id,
                pool_id=pool_id,
                stdin=stdin,
                timeout_s=timeout_s,
            )
        except OSError as exc:
            raise ProviderError(command, f"could not run {self.executable}: {exc}") from exc
        if done.code is None:
            raise ProviderError(
                command,
                timed_out(timeout_s, done.stderr, done.duration_s).message,
                timed_out=True,
            )
        if done.code in accept:
            return done
        raise ProviderError(
            command, classify_exit(done.code, done.stderr, 0.0).message, exit_code=done.code
        )

    def _env(self, command: str, instance_id: str | None, pool_id: str | None) -> dict[str, str]:
        env = dict(self._base_env)
        env["GARM_COMMAND"] = command
        if instance_id is not None:
            env["GARM_INSTANCE_ID"] = instance_id
        if pool_id is not None:
            env["GARM_POOL_ID"] = pool_id
            env["GARM_POOL_EXTRASPECS"] = NO_EXTRA_SPECS
        return env

    async def _call(
        self,
        command: str,
        *,
        timeout_s: float,
        instance_id: str | None = None,
        pool_id: str | None = None,
        stdin: bytes | None = None,
        on_tick: Callable[[float], None] | None = None,
        tick_every_s: float = 5.0,
    ) -> _Exit:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s}")
        if not tick_every_s > 0:
            raise ValueError(f"tick_every_s must be positive, not {tick_every_s}")
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            # Spawned plainly (no preexec_fn, so no library's fork handlers run in the
            # child); a launcher ties it to the worker, then execs the provider in the same
            # process: same pid and group (runtime/parent_death.py).
            *tied_argv(str(self.executable)),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env(command, instance_id, pool_id),
            # Its own session and process group, so one killpg reaches everything it started.
            start_new_session=True,
        )
        out = bytearray()
        err = bytearray()
        finished = asyncio.ensure_future(_converse(proc, stdin, out, err))
        try:
            deadline = started + timeout_s
            next_tick = started + tick_every_s
            while not finished.done():
                now = time.monotonic()
                if now >= deadline:
                    break
                wake = deadline if on_tick is None else min(deadline, next_tick)
                await asyncio.wait({finished}, timeout=wake - now)
                now = time.monotonic()
                if on_tick is not None and not finished.done() and now >= next_tick:
                    on_tick(now - started)
                    next_tick += tick_every_s * (1 + (now - next_tick) // tick_every_s)
        except BaseException:
            # Cancelled, or on_tick raised: nobody will wait for this provider any more.
            _kill_group(proc)
            _reap_later(finished)
            raise
        if finished.done():
            if finished.exception() is not None:  # a pipe broke under us: unexpected
                _kill_group(proc)
                finished.result()
            not_started = launch_error(proc.returncode, _text(err))
            if not_started is not None:
                raise not_started
            return _Exit(proc.returncode, bytes(out), _text(err), time.monotonic() - started)
        # The deadline passed. A provider that exited but left a helper holding its pipes
        # did answer; either way the group goes.
        answered = proc.returncode
        _kill_group(proc)
        await asyncio.wait({finished}, timeout=_REAP_GRACE_S)
        if not finished.done():
            _reap_later(finished)
        return _Exit(answered, bytes(out), _text(err), time.monotonic() - started)


async def _converse(
    proc: asyncio.subprocess.Process, stdin: bytes | None, out: bytearray, err: bytearray
) -> None:
    """Feed stdin, drain both pipes into out and err, and reap the process."""

    async def feed() -> None:
        assert proc.stdin is not None
        # A provider may exit without reading its input; that is its answer, not our error.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin or b"")
            await proc.stdin.drain()
            proc.stdin.close()

    async def drain(stream: asyncio.StreamReader | None, sink: bytearray, keep: int) -> None:
        assert stream is not None
        while chunk := await stream.read(65536):
            sink += chunk
            if keep and len(sink) > keep:
                del sink[:-keep]

    work: list[Awaitable[None]] = [
        drain(proc.stdout, out, 0),
        drain(proc.stderr, err, _STDERR_KEPT),
    ]
    if stdin is not None:
        work.append(feed())
    await asyncio.gather(*work)
    await proc.wait()


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    # The group id is the provider's pid (start_new_session); it may outlive the provider.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _reap_later(finished: asyncio.Future[None]) -> None:
    if finished.done():
        _consume(finished)
        return
    _reaping.add(finished)
    finished.add_done_callback(_consume)


def _consume(finished: asyncio.Future[None]) -> None:
    _reaping.discard(finished)
    if not finished.cancelled():
        finished.exception()  # retrieved, so asyncio does not log it as never retrieved


def _text(raw: bytearray) -> str:
    return raw.decode(errors="replace")


def _parse(command: str, stdout: bytes, validate: Callable[[bytes], _T]) -> _T:
    try:
        return validate(stdout)
    except ValidationError as exc:
        shown = stdout[:200].decode(errors="replace")
        raise ProviderError(command, f"unreadable answer {shown!r}: {exc}") from exc
