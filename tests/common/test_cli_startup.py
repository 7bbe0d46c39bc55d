"""`keeper` starts light: `--help`, `--version` and a shell's TAB import neither the Temporal
SDK nor SQLAlchemy nor any family's commands (cli/lazy.py, runtime/settings_file.py), and the
lazy table they read says what the commands themselves say.

Checked by the modules a process loaded, never by timings (bench/cli_startup.py has those)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.shell_completion import ZshComplete
from hypothesis import given
from hypothesis import strategies as st

from keeper.cli.lazy import COMPLETION_HELP_LIMIT, LazyGroup, short_help
from keeper.cli.main import COMMANDS, cli
from keeper.cli.meta import COMPLETE_VAR, PROG_NAME
from keeper.runtime import temporal_env
from keeper.runtime.settings import ENV_OVERRIDES, load_settings, package_build_id
from keeper.runtime.settings.base import _PLAIN_SQLITE as PLAIN_SQLITE
from keeper.runtime.settings.base import checked_store_url
from keeper.runtime.settings_file import (
    BUILD_ID_ENV,
    DEFAULT_DEPLOYMENT,
    build_identity_is_default,
)
from keeper.store.database import normalise_url
from tests.common.test_cli_conventions import clean_env
from tests.e2e_support import REPO

# What a command that only answers from the table must not load. Prefixes: a module or any
# module below it.
HEAVY = (
    "temporalio",
    "sqlalchemy",
    "grpc",
    "aiohttp",
    "google.cloud",
    "google.protobuf",
    "opentelemetry",
    "rich",
    "pydantic",
    "asyncio",
    "httpx",
    "emulators",
    "keeper.activities",
    "keeper.workflows",
    "keeper.workers",
    "keeper.store",
    "keeper.runtime.settings",  # the package: the full parse (settings_file is apart)
    "keeper.runtime.tracing",
    "keeper.cli.tpu",
    "keeper.cli.runners",
    "keeper.cli.reclaim",
    "keeper.cli.watch",
    "keeper.cli.worker",
    "keeper.cli.admin",
    "keeper.cli.connect",
)


def loaded_by(args: list[str] | None, tmp_path: Path, **env: str) -> dict[str, Any]:
    """The modules a fresh process holds after importing keeper.cli.main and, with `args`,
    running that command line; its exit code and stdout."""
    report = tmp_path / "modules.json"
    script = (
        "import json, sys\n"
        "from keeper.cli.main import run\n"
        f"code = run({args!r}) if {args is not None} else 0\n"
        f"open({str(report)!r}, 'w').write(json.dumps({{'code': code, "
        "'modules': sorted(sys.modules)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.exists(), f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return {**json.loads(report.read_text()), "stdout": done.stdout, "stderr": done.stderr}


def heavy_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY)]


def complete_env(words: str) -> dict[str, str]:
    return {
        COMPLETE_VAR: "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }


# -- what each answer loads ----------------------------------------------------------------


def test_importing_the_cli_loads_nothing_heavy(tmp_path: Path) -> None:
    got = loaded_by(None, tmp_path)
    assert heavy_in(got["modules"]) == []
    # The probe sees what it should: a command module is there once its command ran.
    assert "keeper.cli.main" in got["modules"]


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--help"], {}, "Usage: keeper"),
        (["--version"], {}, "keeper "),
        (["--version", "--json"], {}, '"build_id"'),
        ([], {}, "Commands:"),
        ([], complete_env("keeper t"), "plain,tpu"),
        ([], complete_env("keeper "), "plain,worker"),
        ([], complete_env("keeper tpu st"), "plain,status"),
        ([], complete_env("keeper job "), "plain,approve"),
        ([], complete_env("keeper --"), "plain,--version"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_help_version_and_completion_load_nothing_heavy(
    tmp_path: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    got = loaded_by(args, tmp_path, **env)
    assert got["code"] == 0, got
    assert says in got["stdout"], got
    assert heavy_in(got["modules"]) == [], got["stdout"]


def test_a_command_that_runs_loads_its_family_and_no_other(tmp_path: Path) -> None:
    # `keeper tpu --help`: the tpu module is imported to run; the other families are not.
    got = loaded_by(["tpu", "--help"], tmp_path)
    assert got["code"] == 0 and "Usage: keeper tpu" in got["stdout"], got
    assert "keeper.cli.tpu.commands" in got["modules"]
    others = ("keeper.cli.runners", "keeper.cli.reclaim", "keeper.cli.watch", "sqlalchemy")
    assert [m for m in got["modules"] if m.startswith(others)] == []


def test_completion_below_a_lazy_group_loads_it(tmp_path: Path) -> None:
    # An option of `keeper tpu status`: the table cannot answer, the command module does.
    got = loaded_by([], tmp_path, **complete_env("keeper tpu status x --fo"))
    assert got["code"] == 0
    assert got["stdout"].splitlines() == ["plain,--follow"]
    assert "keeper.cli.tpu.commands" in got["modules"]


# -- the table says what the commands say --------------------------------------------------


def fresh() -> LazyGroup:
    """`keeper` as a new process has it: nothing in the table loaded yet."""
    assert isinstance(cli, LazyGroup)
    return LazyGroup(
        name=cli.name,
        lazy=COMMANDS,
        commands=[command for name, command in cli.commands.items() if name not in COMMANDS],
        params=cli.params,
        callback=cli.callback,
        help=cli.help,
        invoke_without_command=True,
        context_settings=cli.context_settings,
    )


def eager() -> click.Group:
    """`keeper` with every command imported, as it was before the table."""
    commands = [entry.load() for entry in COMMANDS.values()]
    extra = [command for name, command in cli.commands.items() if name not in COMMANDS]
    return click.Group(
        name=cli.name,
        commands=[*commands, *extra],
        params=cli.params,
        callback=cli.callback,
        help=cli.help,
        invoke_without_command=True,
        context_settings=cli.context_settings,
    )


def test_the_table_names_every_command_and_each_groups_subcommands() -> None:
    for name, entry in COMMANDS.items():
        command = entry.load()
        assert command.name == name
        if isinstance(command, click.Group):
            assert sorted(entry.commands) == sorted(command.commands), name
            # Completion walks through the group from the table: it has no options of its own
            # that the table would hide.
            assert [p.name for p in command.params] == ["help"] or command.params == [], name
        else:
            assert entry.commands == {}, name
    assert set(eager().commands) == {*COMMANDS, *cli.commands}


@pytest.mark.parametrize("limit", [COMPLETION_HELP_LIMIT, 60, 74, 10_000])
def test_the_tables_help_lines_are_the_commands_own(limit: int) -> None:
    for name, entry in COMMANDS.items():
        command = entry.load()
        assert entry.short_help(limit) == command.get_short_help_str(limit), name
        if isinstance(command, click.Group):
            for sub, text in entry.commands.items():
                real = command.commands[sub].get_short_help_str(limit)
                assert short_help(text, limit) == real, f"{name} {sub}"


def test_the_root_help_is_the_one_the_imported_commands_give() -> None:
    lazy, full = fresh(), eager()
    assert lazy.get_help(click.Context(lazy, info_name=PROG_NAME)) == full.get_help(
        click.Context(full, info_name=PROG_NAME)
    )
    assert lazy.commands.keys() == {"completion"}  # rendered from the table alone


@pytest.mark.parametrize(
    ("args", "incomplete"),
    [
        ([], ""),
        ([], "t"),
        ([], "--"),
        (["tpu"], ""),
        (["tpu"], "st"),
        (["job"], "a"),
        (["runner"], ""),
        (["admin"], "s"),
        (["tpu", "status"], "--"),
        (["tpu"], "--"),
    ],
)
def test_completion_offers_what_the_imported_commands_offer(
    args: list[str], incomplete: str
) -> None:
    def offered(group: click.Group) -> list[tuple[str, str | None]]:
        complete = ZshComplete(group, {}, PROG_NAME, COMPLETE_VAR)
        return [(c.value, c.help) for c in complete.get_completions(args, incomplete)]

    assert offered(fresh()) == offered(eager())


# -- --version without the settings' full parse --------------------------------------------


@pytest.mark.parametrize(
    ("file", "env", "default"),
    [
        (None, {}, True),
        ({"temporal": {"namespace": "x"}}, {}, True),
        ({"worker": {"deployment_name": DEFAULT_DEPLOYMENT, "versioned": True}}, {}, True),
        ({"worker": {"build_id": "release-7"}}, {}, False),
        ({"worker": {"deployment_name": "other"}}, {}, False),
        ({}, {BUILD_ID_ENV: "release-7"}, False),
        ({"worker": None}, {}, False),
        (["not", "a", "mapping"], {}, False),
    ],
)
def test_the_build_identity_is_the_packages_unless_the_settings_name_it(
    tmp_path: Path, file: Any, env: dict[str, str], default: bool
) -> None:
    path = tmp_path / "settings.yaml"
    if file is not None:
        path.write_text(yaml.safe_dump(file))
    explicit = path if file is not None else None
    assert build_identity_is_default(explicit, env) is default
    if default:
        # What the full parse gives in that case: the package's build, as --version says.
        worker = load_settings(explicit, env=env).worker
        assert (worker.build_id, worker.deployment_name) == (package_build_id(), "keeper")


def test_a_missing_or_unreadable_named_file_goes_to_the_full_parse(tmp_path: Path) -> None:
    assert build_identity_is_default(tmp_path / "missing.yaml", {}) is False
    broken = tmp_path / "broken.yaml"
    broken.write_text("worker: [unclosed\n")
    assert build_identity_is_default(broken, {}) is False


def test_only_keeper_build_id_reaches_the_build_identity_from_the_environment() -> None:
    identity = {"worker.build_id", "worker.deployment_name"}
    assert {var for var, dotted in ENV_OVERRIDES.items() if dotted in identity} == {BUILD_ID_ENV}


# -- the settings without the SDK or SQLAlchemy --------------------------------------------


def test_without_a_profile_or_temporal_variable_envconfig_would_set_nothing() -> None:
    from temporalio.envconfig import ClientConfigProfile

    # What resolve() skips envconfig on: no TEMPORAL_* variable, no profile file.
    env = {"HOME": "/nonexistent", "PATH": "/usr/bin"}
    profile = ClientConfigProfile.load(disable_file=True, override_env_vars=env)
    assert (profile.address, profile.namespace, profile.api_key, profile.tls) == (
        None,
        None,
        None,
        None,
    )
    assert not profile.grpc_meta
    assert temporal_env.resolve({}, env) == temporal_env.Connection()
    resolved = temporal_env.resolve({}, {**env, "TEMPORAL_ADDRESS": "example.com:7233"})
    assert resolved.values == {"address": "example.com:7233"}


@given(st.from_regex(PLAIN_SQLITE, fullmatch=True))
def test_every_store_url_taken_without_sqlalchemy_is_one_it_accepts(url: str) -> None:
    assert checked_store_url(url, "store") == url
    assert normalise_url(url, "store").startswith("sqlite:///")


@pytest.mark.parametrize(
    "url",
    ["mysql://u@h/db", "postgresql://u@h:notaport/db", "nonsense", "sqlite:///x?mode=ro&bad"],
)
def test_a_store_url_sqlalchemy_must_read_is_read_by_it(url: str) -> None:
    try:
        normalise_url(url, "store")
    except ValueError as err:
        with pytest.raises(ValueError) as ours:
            checked_store_url(url, "store")
        assert str(ours.value) == str(err)
    else:
        assert checked_store_url(url, "store") == url
