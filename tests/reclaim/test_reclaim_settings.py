"""The `reclaim:` settings (docs/reclaim.md#settings): read from the file and from their
KEEPER_* variables, observe by default, and every value that cannot work refused with a
message naming the setting."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from keeper.domain.reclaim.steps import Mode
from keeper.runtime.reclaim.credentials import TOKEN_ENV
from keeper.runtime.reclaim.deps import spur_token
from keeper.runtime.settings import SettingsError, load_settings
from keeper.runtime.settings.reclaim import ReclaimSettings
from tests.reclaim.test_reclaim_cli import keeper_now


def write(tmp_path: Path, tree: object) -> Path:
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_the_default_mode_is_observe(tmp_path: Path) -> None:
    assert ReclaimSettings().mode is Mode.OBSERVE
    assert load_settings(write(tmp_path, {}), env={}).reclaim.mode is Mode.OBSERVE
    assert load_settings(write(tmp_path, {"reclaim": {}}), env={}).reclaim.mode is Mode.OBSERVE


def test_the_section_is_read_from_the_file(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        {
            "reclaim": {
                "mode": "act",
                "controller_address": "spurctld.internal:6817",
                "tap_address": "0.0.0.0:6819",
                "intake_address": "127.0.0.1:0",
                "token_file": "/run/secrets/spur-token",
                "store_url": "postgresql://keeper@db.internal:5432/keeper",
                "call_timeout": "3s",
                "node_aliases": {"login-07": "gpu-node-07"},
                "timing": {"end_grace": "5m", "graceful_tries": 1, "retry_max": "PT2M"},
                "batch_window": "50ms",
            }
        },
    )
    r = load_settings(config, env={}).reclaim
    assert r.mode is Mode.ACT
    assert r.controller_address == "spurctld.internal:6817"
    assert (r.tap_address, r.intake_address) == ("0.0.0.0:6819", "127.0.0.1:0")
    assert r.token_file == Path("/run/secrets/spur-token")
    assert r.store_url == "postgresql://keeper@db.internal:5432/keeper"
    assert r.call_timeout == timedelta(seconds=3) and r.batch_window == timedelta(milliseconds=50)
    assert r.node_aliases == {"login-07": "gpu-node-07"}
    assert r.timing.end_grace == timedelta(minutes=5) and r.timing.graceful_tries == 1
    assert r.timing.retry_max == timedelta(minutes=2)
    assert r.timing.forced_tries == 2  # the rest keep their defaults


def test_the_variables_beat_the_file(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        {
            "reclaim": {
                "mode": "observe",
                "controller_address": "file:1",
                "store_url": "sqlite:///f.db",
            }
        },
    )
    env = {
        "KEEPER_RECLAIM_MODE": "act",
        "KEEPER_SPUR_CONTROLLER": "spurctld.env:6817",
        "KEEPER_SPUR_TOKEN_FILE": str(tmp_path / "token"),
        "KEEPER_RECLAIM_STORE_URL": f"sqlite:///{tmp_path / 'env.db'}",
    }
    r = load_settings(config, env=env).reclaim
    assert r.mode is Mode.ACT
    assert r.controller_address == "spurctld.env:6817"
    assert r.token_file == tmp_path / "token"
    assert r.store_url == f"sqlite:///{tmp_path / 'env.db'}"


def test_the_token_variable_wins_over_the_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-the-file\n")
    settings = ReclaimSettings(token_file=token_file)
    from_env = spur_token(settings, {TOKEN_ENV: "from-the-env"})
    assert from_env.metadata() == (("authorization", "Bearer from-the-env"),)
    assert "KEEPER_SPUR_TOKEN" in from_env.setting
    from_file = spur_token(settings, {})
    assert from_file.metadata() == (("authorization", "Bearer from-the-file"),)
    assert str(token_file) in from_file.setting
    assert spur_token(ReclaimSettings(), {}).metadata() is None  # anonymous


INVALID = [
    ({"mode": "destroy"}, "reclaim.mode", "'observe' or 'act'"),
    ({"controller_address": "spurctld.internal"}, "reclaim.controller_address", "HOST:PORT"),
    ({"controller_address": "spurctld:port"}, "reclaim.controller_address", "HOST:PORT"),
    ({"controller_address": "spurctld:99999"}, "reclaim.controller_address", "65535"),
    ({"controller_address": "spurctld:0"}, "reclaim.controller_address", "between 1 and"),
    ({"controller_address": "spur ctld:6817"}, "reclaim.controller_address", "HOST:PORT"),
    ({"tap_address": ":6819"}, "reclaim.tap_address", "HOST:PORT"),
    ({"intake_address": "127.0.0.1:70000"}, "reclaim.intake_address", "65535"),
    ({"node_aliases": {"bad name!": "gpu-node-07"}}, "reclaim.node_aliases", "bad name!"),
    ({"node_aliases": {"login-07": ""}}, "reclaim.node_aliases", "must not be empty"),
    ({"timing": {"end_grace": "-5s"}}, "reclaim.timing.end_grace", "duration"),
    ({"timing": {"end_grace": -5}}, "reclaim.timing.end_grace", "greater than or equal"),
    ({"timing": {"retry_initial": "-1m"}}, "reclaim.timing.retry_initial", "duration"),
    ({"timing": {"retry_max": 0}}, "reclaim.timing.retry_max", "greater than"),
    ({"timing": {"graceful_tries": 0}}, "reclaim.timing.graceful_tries", "greater than or equal"),
    ({"timing": {"grace": "2m"}}, "reclaim.timing.grace", "Extra inputs"),
    ({"modee": "act"}, "reclaim.modee", "Extra inputs"),
    ({"call_timeout": "0s"}, "reclaim.call_timeout", "greater than 0"),
    ({"batch_window": "-1s"}, "reclaim.batch_window", "duration"),
    ({"store_url": "mysql://keeper@db/keeper"}, "reclaim.store_url", "sqlite:///"),
    ({"token_file": ""}, "reclaim.token_file", "empty"),
]


@pytest.mark.parametrize(
    ("section", "setting", "says"), INVALID, ids=[f"{s}={v}"[:50] for v, s, _ in INVALID]
)
def test_a_value_that_cannot_work_is_refused_naming_the_setting(
    tmp_path: Path, section: dict[str, object], setting: str, says: str
) -> None:
    config = write(tmp_path, {"reclaim": section})
    with pytest.raises(SettingsError) as caught:
        load_settings(config, env={})
    message = str(caught.value)
    assert message.startswith(f"{config}: {setting}: "), message
    assert says in message, message


@pytest.mark.parametrize(
    ("variable", "value", "setting"),
    [
        ("KEEPER_RECLAIM_MODE", "destroy", "reclaim.mode"),
        ("KEEPER_SPUR_CONTROLLER", "spurctld.internal", "reclaim.controller_address"),
        ("KEEPER_RECLAIM_STORE_URL", "mysql://keeper@db/keeper", "reclaim.store_url"),
    ],
)
def test_a_bad_variable_stops_a_command_naming_the_variable(
    tmp_path: Path, variable: str, value: str, setting: str
) -> None:
    config = write(tmp_path, {"temporal": {"address": "127.0.0.1:1"}})
    done = keeper_now(config, "reclaim", "list", env={variable: value})
    assert done.code == 1 and done.out == "", done
    assert f"invalid settings: {config}: {setting}: " in done.err, done
    assert f"Fix the variable {variable}" in done.err, done
    error = keeper_now(config, "reclaim", "list", "--json", env={variable: value}).error()
    assert setting in error["message"] and variable in error["hint"]


def test_a_store_url_password_is_never_quoted(tmp_path: Path) -> None:
    config = write(tmp_path, {"reclaim": {"store_url": "mysql://keeper:Pw-4417-secret@db/keeper"}})
    with pytest.raises(SettingsError) as caught:
        load_settings(config, env={})
    assert "reclaim.store_url" in str(caught.value)
    assert "Pw-4417-secret" not in str(caught.value)


def test_counts_are_strict_and_the_mode_takes_any_case(tmp_path: Path) -> None:
    quoted = write(tmp_path, {"reclaim": {"timing": {"release_beats": "2"}}})
    with pytest.raises(SettingsError, match=r"reclaim\.timing\.release_beats"):
        load_settings(quoted, env={})
    plain = write(tmp_path, {})
    assert load_settings(plain, env={"KEEPER_RECLAIM_MODE": "ACT"}).reclaim.mode is Mode.ACT
