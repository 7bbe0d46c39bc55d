"""`keeper-dev up`, `down` and `status`: start, stop and inspect the local stack."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from dev.devstack.layout import (
    EMULATOR,
    GITHUB,
    IRIS,
    SPUR,
    TAP,
    TEMPORAL,
    TEMPORAL_MISSING,
    WORKER,
    Component,
    Port,
    emulator_address_mismatch,
    metrics_url,
    plan,
    temporal_cli_env,
)
from dev.devstack.probes import Health, Poller, Probes, own_pollers, worker_health
from dev.devstack.procs import (
    PidRecord,
    exclusive,
    is_ours,
    pid_alive,
    port_holder,
    port_problem,
    process_cwd,
    spawn_detached,
    stop_group,
    tail,
    write_pid_file,
)
from dev.devstack.runner_files import prepare_runner_files
from keeper.cli.local_stack import StackRecord, run_dir, stack_record_file
from keeper.cli.output import UsageProblem, rfc3339
from keeper.runtime.dev_ports import PORT_BASE_ENV
from keeper.runtime.search_attributes import drop_retired, register_missing
from keeper.runtime.settings import (
    CONFIG_ENV,
    DEFAULT_CONFIG_FILE,
    Settings,
    SettingsConflict,
    SettingsError,
    load_settings,
)
from keeper.runtime.tools import find_tool

# The checkout keeper runs from (the emulators ship with the source, so `keeper-dev` is a
# checkout's command): its temporal-dev.yaml is the stack's settings file when none is named
# and the working directory has none.
CHECKOUT = Path(__file__).resolve().parents[2]


def settings_file(config_file: str | None, env: Mapping[str, str]) -> Path | None:
    """The settings file `keeper-dev` reads, absolute: --config, else KEEPER_CONFIG (a
    relative name read from the working directory), else ./temporal-dev.yaml, else the
    checkout's temporal-dev.yaml; None when there is none (the built-in defaults)."""
    named = config_file or env.get(CONFIG_ENV)
    if named:
        return Path(named).expanduser().resolve()
    for candidate in (Path.cwd() / DEFAULT_CONFIG_FILE, CHECKOUT / DEFAULT_CONFIG_FILE):
        if candidate.is_file():
            return candidate.resolve()
    return None


def _home(file: Path | None) -> Path:
    """The stack's home: its settings file's directory (the working directory when there
    is no settings file at all)."""
    return file.parent if file is not None else Path.cwd().resolve()


def anchored(settings: Settings, home: Path) -> Settings:
    """The settings with the stack's own paths absolute, relative ones taken from `home`
    (the settings file's directory): the database, and with it the pid files, the logs, and
    the runner files `up` creates. The components run in `home`, so the paths they read
    themselves (stores, the scenario file) resolve there too."""

    def at_home(path: Path) -> Path:
        path = path.expanduser()
        return path if path.is_absolute() else home / path

    temporal = settings.temporal.model_copy(update={"db_file": at_home(settings.temporal.db_file)})
    worker = settings.worker.model_copy(update={"log_dir": at_home(settings.worker.log_dir)})
    runners = settings.runners
    github = runners.github
    if github.token_file is not None:
        github = github.model_copy(update={"token_file": at_home(github.token_file)})
    provider = runners.provider.model_copy(
        update={"config_file": at_home(runners.provider.config_file)}
    )
    runners = runners.model_copy(update={"github": github, "provider": provider})
    return settings.model_copy(update={"temporal": temporal, "worker": worker, "runners": runners})


def _load(config_file: str | Path | None, env: dict[str, str], port_base: int | None) -> Settings:
    try:
        return load_settings(config_file, env)
    except SettingsError as err:
        if port_base is not None and isinstance(err, SettingsConflict):
            raise UsageProblem(str(err), param_hint="--port-base") from None
        raise StackError(f"{err}\nFix the file or the variable and retry.") from None


POLL_INTERVAL = 0.25
LOCK_FILE = "dev.lock"


class StackError(click.ClickException):
    """Exit code 1 with a message on stderr, phrased for the person at the terminal."""


def say(name: str, message: str) -> None:
    click.echo(f"  {name:<9} {message}")


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _started_at(record: PidRecord) -> datetime | None:
    try:
        return datetime.fromisoformat(record.started_at)
    except ValueError:
        return None


@dataclass
class _Running:
    """A component process: one this invocation started (`proc` set) or an earlier one."""

    component: Component
    record: PidRecord
    proc: subprocess.Popen[bytes] | None = None
    began: float = field(default_factory=time.monotonic)

    @property
    def started_here(self) -> bool:
        return self.proc is not None

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_alive(self.record.pid)


# What the Temporal dev server's log says when a port it picked itself was taken before it
# bound it: a listener that failed, then a nil listener in the HTTP API server.
_PORT_RACE = ("address already in use", "NewHTTPAPIServer")


def lost_a_port_race(running: _Running) -> bool:
    """Whether a Temporal dev server that died while starting lost a port to another process
    (worth one more start), not a configuration or database problem (which would repeat)."""
    if running.component.name != TEMPORAL or not running.started_here:
        return False
    text = "\n".join(tail(running.component.log_file, 200))
    return any(sign in text for sign in _PORT_RACE)


@dataclass
class Stack:
    settings: Settings
    config_file: str | None
    # Variables every component is started with, so the worker reads the same settings.
    child_env: dict[str, str] = field(default_factory=dict)
    # The record of the running stack these settings were taken from, if they were.
    followed: StackRecord | None = None
    # The settings file read (absolute; None: the defaults), and the stack's home, its
    # directory: relative paths in the settings are taken from it, whatever the working
    # directory of `keeper-dev`, and the components run in it.
    settings_file: Path | None = None
    home: Path = field(default_factory=lambda: Path.cwd().resolve())
    components: dict[str, Component] = field(init=False)

    def __post_init__(self) -> None:
        self.settings = anchored(self.settings, self.home)
        try:
            # The worker and the tap read the very file read here, wherever they run.
            self.components = plan(self.settings, str(self.settings_file or "") or None)
        except ValueError as err:
            raise StackError(f"{err}. Fix it in the config file or the environment.") from err

    @classmethod
    def open(cls, config_file: str | None, port_base: int | None, *, follow_record: bool) -> Stack:
        """The stack of these settings (`--port-base` over the file and the environment).
        With `follow_record` and neither a config file nor a port base given, the settings
        the running stack was started with, as `up` recorded them in the run dir."""
        env = dict(os.environ)
        child_env = {PORT_BASE_ENV: str(port_base)} if port_base is not None else {}
        file = settings_file(config_file, env)
        named = str(file) if config_file is not None and file is not None else None

        def stack(settings: Settings, read: Path | None, named: str | None, **kw: Any) -> Stack:
            return cls(settings, named, settings_file=read, home=_home(read), **kw)

        settings = _load(file, {**env, **child_env}, port_base)
        if not follow_record or config_file is not None or env.get(PORT_BASE_ENV) or child_env:
            return stack(settings, file, named, child_env=child_env)
        record = StackRecord.load(stack_record_file(anchored(settings, _home(file))))
        if record is None or (record.config_file is None and record.port_base is None):
            return stack(settings, file, named, child_env=child_env)
        recorded_env = {PORT_BASE_ENV: str(record.port_base)} if record.port_base else {}
        recorded = Path(record.config_file) if record.config_file else file
        try:
            followed = _load(recorded, {**env, **recorded_env}, None)
        except StackError as err:
            # A config file deleted or broken since: the pid files still say what to stop.
            click.echo(
                f"warning: the running stack's settings ({record.describe()}) no longer load, "
                f"so the defaults are used: {err.message}",
                err=True,
            )
            return stack(settings, file, named, child_env=child_env)
        return stack(
            followed, recorded, record.config_file, child_env=recorded_env, followed=record
        )

    @property
    def shown_config(self) -> str:
        """The settings file, as reports name it."""
        return str(self.settings_file) if self.settings_file else "no settings file (defaults)"

    @property
    def record(self) -> StackRecord:
        """What `up` records: enough to load these settings again."""
        config = str(Path(self.config_file).resolve()) if self.config_file else None
        return StackRecord(
            config_file=config, port_base=self.settings.dev.port_base, cwd=str(Path.cwd())
        )

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return exclusive(
            run_dir(self.settings) / LOCK_FILE,
            lambda: click.echo("Waiting for another `keeper-dev up`/`down` to finish..."),
        )

    def temporal_cli_lines(self) -> list[str]:
        """How the `temporal` CLI reaches this stack's own server: it dials localhost:7233
        unless told otherwise, so a moved stack needs its address exported. A remote server
        is the operator's own setup (a profile, TLS, an API key): nothing to add."""
        if not self.components[TEMPORAL].managed:
            return []
        env = temporal_cli_env(self.settings)
        if not env:
            return ["reaches it as it is (localhost:7233)"]
        return [" ".join(["export", *(f"{key}={value}" for key, value in env.items())])]

    # -- health ---------------------------------------------------------------------------

    async def check(
        self, comp: Component, probes: Probes, running: _Running | None, promote: bool = False
    ) -> Health:
        """With `promote`, a worker whose version is not current is made current."""
        if comp.name == TEMPORAL:
            grpc = await probes.temporal_grpc()
            if not grpc.ok or not comp.managed:
                return grpc
            ui = await probes.temporal_ui()
            if not ui.ok:
                return Health(False, f"UI {ui.detail}")
            return Health(True, f"{grpc.detail}, UI {self.settings.temporal.ui_base}")
        served = {
            EMULATOR: probes.emulator,
            GITHUB: probes.github_emulator,
            SPUR: probes.spur_emulator,
            TAP: probes.reclaim_tap,
            IRIS: probes.iris_emulator,
        }
        if comp.name in served:
            return await served[comp.name]()
        if running is None:
            return Health(False, "not running")
        # Healthy once it polls the queue of every family it serves.
        queues = [self.settings.temporal.family_queue(f) for f in self.settings.worker.families]
        seen: list[Poller] = []
        for queue in queues:
            problem, pollers = await probes.workflow_pollers(queue)
            if problem:
                return Health(False, problem)
            mine = own_pollers(running.record.pid, _started_at(running.record), pollers)
            polling = worker_health(queue, mine, pollers)
            if not polling.ok:
                return polling
            seen.append(mine[0])
        queue_list = ", ".join(queues)
        polling = Health(True, f"polling task queues {queue_list} as {seen[0].identity}")
        return await self._routed(probes, seen[0], polling, promote)

    async def _routed(
        self, probes: Probes, poller: Poller, polling: Health, promote: bool
    ) -> Health:
        """A versioned worker gets tasks only while its version is current in its deployment."""
        version = poller.version
        if version is None:
            return polling
        name, build = version.deployment_name, version.build_id
        problem, current = await probes.current_build(name)
        if problem:
            return Health(False, f"{polling.detail}, build {build}; {problem}")
        if current == build:
            return Health(True, f"{polling.detail}, build {build} (current)")
        if not promote:
            return Health(
                False,
                f"{polling.detail}, build {build}, but worker deployment {name} has "
                f"{f'build {current}' if current else 'no version'} current, so no tasks "
                "reach it: `keeper-dev up` makes it current",
            )
        problem = await probes.make_current(version)
        if problem:
            return Health(False, f"{polling.detail}, build {build} not current yet: {problem}")
        was = f", was build {current}" if current else ""
        return Health(True, f"{polling.detail}, build {build} (made current{was})")

    # -- up -------------------------------------------------------------------------------

    async def up(self, budget: float, with_worker: bool = True) -> None:
        """Starts what is missing; `budget` is the total seconds to wait for health."""
        probes = Probes(self.settings)
        try:
            with self._lock():
                await self._up(probes, budget, with_worker)
        finally:
            probes.close()

    async def _up(self, probes: Probes, budget: float, with_worker: bool) -> None:
        began = time.monotonic()
        deadline = began + budget
        wanted = [
            c
            for c in self.components.values()
            if c.mode != "disabled" and (with_worker or c.name != WORKER)
        ]
        mismatch = emulator_address_mismatch(self.settings)
        if mismatch:
            click.echo(f"warning: {mismatch}", err=True)

        running: dict[str, _Running] = {}
        to_start: list[Component] = []
        drifted: list[str] = []
        for comp in wanted:
            if not comp.managed:
                continue
            record = self._live_record(comp)
            if record is None:
                to_start.append(comp)
                continue
            running[comp.name] = _Running(comp, record)
            if record.argv and record.argv[1:] != list(comp.argv[1:]):
                drifted.append(comp.name)
        self._note_leftovers(wanted)
        if drifted:
            earlier = StackRecord.load(stack_record_file(self.settings))
            started = f" (it was started with {earlier.describe()})" if earlier else ""
            raise StackError(
                f"{' and '.join(drifted)} {'is' if len(drifted) == 1 else 'are'} running with "
                f"other settings than the config now asks for{started}: ports, paths or config "
                "file changed.\n"
                "Apply the new settings with `keeper-dev down` and then `keeper-dev up`; a "
                "second stack beside it needs a directory of its own (another checkout) and "
                "another --port-base."
            )
        self._check_ports(to_start)
        if self.components[TEMPORAL] in to_start and find_tool("temporal") is None:
            raise StackError(TEMPORAL_MISSING.format(python=sys.executable))
        write_pid_file(stack_record_file(self.settings), self.record)

        temporal = self.components[TEMPORAL]
        if not temporal.managed:
            await self._check_external_temporal(probes, deadline)

        prepare_runner_files(self.settings)
        for name in (TEMPORAL, EMULATOR, GITHUB, SPUR, IRIS):
            comp = self.components[name]
            if comp in to_start:
                running[name] = self._start(comp)
        if TEMPORAL in running:
            await self._wait(running[TEMPORAL], probes, deadline, budget)
        if temporal.managed:
            await self._register_search_attributes(probes)
        # The tap reaches Temporal at start-up and forwards to the spur emulator's controller
        # lazily; the spur agents register at their next heartbeat once the tap is up. The
        # worker needs Temporal at start-up; it dials the emulators lazily, so it can start
        # while they are still coming up.
        tap = self.components[TAP]
        if tap in to_start:
            running[TAP] = self._start(tap)
        worker = self.components[WORKER]
        if with_worker and worker in to_start:
            running[WORKER] = self._start(worker)
        for name in (EMULATOR, GITHUB, TAP, SPUR, IRIS):
            if name in running:
                await self._wait(running[name], probes, deadline, budget)
        if with_worker:
            await self._wait(running[WORKER], probes, deadline, budget)
        else:
            argv = self.components[WORKER].argv
            # The worker `up` would start serves the stack's metrics: the same flag does.
            flag = argv.index("--metrics-address") if "--metrics-address" in argv else None
            metrics = f" --metrics-address {argv[flag + 1]}" if flag is not None else ""
            say(WORKER, f"not started (--no-worker): run `keeper worker{metrics}` yourself")
            worker = self.settings.worker
            if worker.versioned:
                say(
                    WORKER,
                    "then make its build current: temporal worker deployment "
                    f"set-current-version --deployment-name {worker.deployment_name} "
                    f"--build-id {worker.build_id} --address {self.settings.temporal.address} "
                    "--yes",
                )

        elapsed = time.monotonic() - began
        click.echo(f"\nThe dev stack is up ({elapsed:.1f}s).")
        click.echo(f"  Temporal UI  {self.settings.temporal.ui_base}")
        for line in self.temporal_cli_lines():
            click.echo(f"  temporal CLI {line}")
        metrics = metrics_url(self.settings)
        if metrics:
            click.echo(f"  metrics      {metrics}")
        click.echo(f"  logs         {_rel(self.settings.worker.log_dir)}/")
        click.echo("  status       keeper-dev status")
        click.echo("  stop         keeper-dev down")

    def _live_record(self, comp: Component) -> PidRecord | None:
        """The pid record of a live process started by an earlier `up`; cleans stale files."""
        record = PidRecord.load(comp.pid_file)
        if record is not None and is_ours(record):
            return record
        if comp.pid_file.exists():
            comp.pid_file.unlink(missing_ok=True)
            what = f"pid {record.pid} is not running" if record else "unreadable"
            say(comp.name, f"removed a stale pid file ({what})")
        return None

    def _note_leftovers(self, wanted: list[Component]) -> None:
        for comp in self.components.values():
            if comp in wanted or comp.mode == "external":
                continue
            record = PidRecord.load(comp.pid_file)
            if record is not None and is_ours(record):
                why = comp.disabled_because if comp.mode == "disabled" else "--no-worker"
                say(
                    comp.name,
                    f"still running from an earlier `up` (pid {record.pid}); left alone "
                    f"({why}); `keeper-dev down` stops it",
                )

    def _check_ports(self, to_start: list[Component]) -> None:
        problems: list[str] = []
        config = self.shown_config
        seen: dict[int, tuple[Component, Port]] = {}
        for comp in to_start:
            for port in comp.ports:
                if port.number in seen:
                    other_comp, other = seen[port.number]
                    problems.append(
                        f"port {port.number} is configured twice: {other_comp.name} {other.role} "
                        f"({other.setting}) and {comp.name} {port.role} ({port.setting}). "
                        "Give one of them another port in the config file."
                    )
                    continue
                seen[port.number] = (comp, port)
                why = port_problem(port.host, port.number)
                if why is None:
                    continue
                holder = port_holder(port.number)
                by = f" by pid {holder[0]} ({holder[1]})" if holder else ""
                where = process_cwd(holder[0]) if holder else None
                if where is not None and where != self.home:
                    by += f", running in {where}"
                env = f" (or set {port.env})" if port.env else ""
                problems.append(
                    f"port {port.number} ({comp.name} {port.role}, {port}) is already in use"
                    f"{by}: {why}.\n"
                    f"    Stop that process, or change {port.setting} in {config}{env}, or "
                    "move every port with --port-base (dev.port_base)."
                )
        if problems:
            raise StackError(
                "cannot start the dev stack:\n  " + "\n  ".join(problems) + "\n"
                "Nothing was started. Components that `keeper-dev up` started are tracked by "
                "pid files and never conflict; a stack started from another directory or "
                "with another config is stopped by `keeper-dev down` there."
            )

    async def _register_search_attributes(self, probes: Probes) -> None:
        """A database an older keeper made lacks the newer attributes (`--search-attribute`
        only applies to a new one) and may hold the ones keeper retired at 1.0, which the
        local stack's namespace, keeper's alone, can drop."""
        client = await probes.client()
        try:
            dropped = await drop_retired(client)
            added = await register_missing(client)
        except ValueError as err:
            raise StackError(f"{err}; or start afresh with `keeper-dev down --purge`") from None
        if dropped:
            retired = ", ".join(dropped)
            say(TEMPORAL, f"removed the search attributes keeper retired at 1.0: {retired}")
        if added:
            say(TEMPORAL, f"registered the search attributes {', '.join(added)}")

    async def _check_external_temporal(self, probes: Probes, deadline: float) -> None:
        address = self.settings.temporal.address
        say(TEMPORAL, f"{address} is not local: not starting a server, checking it is reachable")
        health = await probes.temporal_grpc()
        while not health.ok and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            health = await probes.temporal_grpc()
        if not health.ok:
            raise StackError(
                f"Temporal at {address} is not reachable: {health.detail}\n"
                "Check TEMPORAL_PROFILE / TEMPORAL_ADDRESS / TEMPORAL_TLS* / TEMPORAL_API_KEY, "
                "or use a local dev server (temporal.address: 127.0.0.1:7233)."
            )
        say(TEMPORAL, f"reachable: {health.detail}")

    def _start(self, comp: Component) -> _Running:
        cwd = self.home
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.child_env)
        if comp.name == TEMPORAL:
            self.settings.temporal.db_file.parent.mkdir(parents=True, exist_ok=True)
        proc = spawn_detached(comp.argv, comp.log_file, cwd, env)
        record = PidRecord(
            pid=proc.pid, argv=list(comp.argv), cwd=str(cwd), log_file=str(comp.log_file)
        )
        write_pid_file(comp.pid_file, record)
        say(comp.name, f"starting (pid {proc.pid}, log {_rel(comp.log_file)})")
        return _Running(comp, record, proc)

    async def _wait(
        self, running: _Running, probes: Probes, deadline: float, budget: float
    ) -> None:
        comp = running.component
        health = Health(False, "not checked yet")
        retried = False
        while True:
            if not running.alive():
                if not retried and lost_a_port_race(running):
                    # The Temporal dev server picks its HTTP API and internal ports itself
                    # (free when picked, not when bound): another process took one
                    # meanwhile. Once more, with ports picked afresh.
                    retried = True
                    say(comp.name, "lost a race for a port it picked itself; starting it again")
                    again = self._start(comp)
                    running.record, running.proc, running.began = (
                        again.record,
                        again.proc,
                        again.began,
                    )
                    continue
                code = running.proc.returncode if running.proc else None
                how = f"exited with code {code}" if code is not None else "is no longer running"
                self._fail(running, f"{how} while starting")
            health = await self.check(comp, probes, running, promote=True)
            if health.ok:
                break
            if time.monotonic() >= deadline:
                self._fail(
                    running,
                    f"not healthy within {budget:g}s (--timeout): {health.detail}",
                )
            await asyncio.sleep(POLL_INTERVAL)
        if running.started_here:
            say(comp.name, f"healthy in {time.monotonic() - running.began:.1f}s: {health.detail}")
        else:
            say(comp.name, f"already running (pid {running.record.pid}): {health.detail}")

    def _fail(self, running: _Running, reason: str) -> NoReturn:
        comp = running.component
        lines = tail(comp.log_file)
        cleanup = ""
        if running.started_here:
            if running.alive():
                stop_group(running.record.pid, grace=5)
                cleanup = " It was stopped."
            comp.pid_file.unlink(missing_ok=True)
        else:
            cleanup = (
                f" It was started by an earlier `up` (pid {running.record.pid}) and left "
                "alone: `keeper-dev down` and `keeper-dev up` restart it."
            )
        body = "\n".join(f"    {line}" for line in lines) if lines else "    (the log is empty)"
        raise StackError(
            f"{comp.name} {reason}.{cleanup}\n"
            f"  last {len(lines)} lines of {_rel(comp.log_file)}:\n{body}\n"
            "Components that are already up keep running: `keeper-dev status` shows them, "
            "`keeper-dev down` stops them."
        )

    # -- down -----------------------------------------------------------------------------

    def down(self, grace: float, purge: bool) -> None:
        with self._lock():
            self._down(grace, purge)
        with contextlib.suppress(OSError):
            (run_dir(self.settings) / LOCK_FILE).unlink()
            run_dir(self.settings).rmdir()  # only when empty

    def _down(self, grace: float, purge: bool) -> None:
        for name in (WORKER, TAP, SPUR, IRIS, GITHUB, EMULATOR, TEMPORAL):
            comp = self.components[name]
            record = PidRecord.load(comp.pid_file)
            if record is None:
                if comp.pid_file.exists():
                    comp.pid_file.unlink(missing_ok=True)
                    say(name, "removed an unreadable pid file")
                elif comp.mode == "external":
                    say(name, f"{comp.address} is not managed by keeper-dev; left alone")
                else:
                    say(name, "not running")
                continue
            if not is_ours(record):
                comp.pid_file.unlink(missing_ok=True)
                say(name, f"was not running (removed the stale pid file of pid {record.pid})")
                continue
            wait = grace
            if name == WORKER:
                # Let the worker finish its own graceful shutdown before it is killed.
                drain = self.settings.worker.graceful_shutdown.total_seconds()
                wait = max(grace, drain + 5)
            result = stop_group(record.pid, wait)
            comp.pid_file.unlink(missing_ok=True)
            if result.killed:
                say(name, f"did not stop within {wait:g}s; killed (pid {record.pid})")
            else:
                say(name, f"stopped (pid {record.pid}) in {result.seconds:.1f}s")
        stack_record_file(self.settings).unlink(missing_ok=True)
        if purge:
            self._purge()

    def _purge(self) -> None:
        db = self.settings.temporal.db_file
        if not self.components[TEMPORAL].managed:
            click.echo(
                f"--purge: Temporal at {self.settings.temporal.address} is not local; "
                f"nothing to delete"
            )
            return
        removed = []
        for path in (db, *(db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal"))):
            if path.exists():
                path.unlink()
                removed.append(_rel(path))
        if removed:
            click.echo(f"--purge: deleted {', '.join(removed)}")
        else:
            click.echo(f"--purge: no database at {_rel(db)}")

    # -- status ---------------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        probes = Probes(self.settings)
        try:
            components = {
                c.name: await self._component_status(c, probes) for c in self.components.values()
            }
        finally:
            probes.close()
        required = [c for c in components.values() if c["mode"] != "disabled"]
        return {
            "healthy": all(c["healthy"] for c in required),
            "ui_url": self.settings.temporal.ui_base,
            "temporal_address": self.settings.temporal.address,
            "temporal_env": temporal_cli_env(self.settings),
            "metrics_url": metrics_url(self.settings),
            "config_file": self.shown_config,
            "port_base": self.settings.dev.port_base,
            "recorded": self.followed is not None,
            "run_dir": str(run_dir(self.settings)),
            "components": components,
        }

    async def _component_status(self, comp: Component, probes: Probes) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "mode": comp.mode,
            "state": "stopped",
            "pid": None,
            "address": comp.address,
            "ports": {port.role: port.number for port in comp.ports},
            "healthy": False,
            "detail": "",
            "log_file": str(comp.log_file),
        }
        if comp.mode == "external":
            health = await self.check(comp, probes, None)
            entry.update(state="external", healthy=health.ok, detail=health.detail)
            return entry
        record = PidRecord.load(comp.pid_file)
        if record is not None and is_ours(record):
            running = _Running(comp, record)
            health = await self.check(comp, probes, running)
            entry.update(state="running", pid=record.pid, healthy=health.ok, detail=health.detail)
            # In the one timestamp format (RFC 3339 UTC), as long as it parses.
            entry["started_at"] = rfc3339(_started_at(record)) or record.started_at
            if comp.mode == "disabled":
                entry["detail"] += f" (not needed: {comp.disabled_because})"
            return entry
        if comp.mode == "disabled":
            entry.update(state="disabled", healthy=None, detail=comp.disabled_because)
            return entry
        notes = []
        if record is not None:
            notes.append(f"stale pid file: pid {record.pid} is not running")
        for port in comp.ports:
            if port_problem(port.host, port.number):
                holder = port_holder(port.number)
                by = f"pid {holder[0]} ({holder[1]})" if holder else "another process"
                notes.append(f"port {port.number} is held by {by}, not started by keeper-dev")
        if comp.name == WORKER and not notes:
            notes.append("start it with `keeper-dev up`")
        entry["detail"] = "; ".join(notes)
        return entry
