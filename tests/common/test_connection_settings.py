"""The Temporal connection from `temporalio.envconfig`: a temporal CLI profile and the
TEMPORAL_* variables over keeper's settings file, credentials kept out of every message."""

from __future__ import annotations

import datetime
import re
import textwrap
from pathlib import Path

import pytest
import yaml
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.service import TLSConfig
from temporalio.testing import WorkflowEnvironment

from keeper.runtime.settings import Settings, SettingsError, load_settings
from keeper.runtime.temporal_client import connect, connect_options

API_KEY = "tmprl_ProfileSecret0123456789abcdef"


def _keeper_file(tmp_path: Path, temporal: dict[str, object]) -> Path:
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump({"temporal": temporal}))
    return path


def _profiles(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def layered(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A keeper file, a profile file, and an environment whose config dir holds a default
    profile that must never be read unasked."""
    keeper = _keeper_file(tmp_path, {"address": "file-host:7233", "namespace": "file-ns"})
    profiles = _profiles(
        tmp_path / "profiles.toml",
        """
        [profile.default]
        address = "profile-host:7233"
        namespace = "profile-ns"

        [profile.staging]
        address = "staging-host:7233"
        """,
    )
    home = tmp_path / "config-home"
    _profiles(
        home / "temporalio" / "temporal.toml",
        """
        [profile.default]
        address = "user-default:7233"

        [profile.staging]
        address = "user-staging:7233"
        """,
    )
    return keeper, profiles, {"XDG_CONFIG_HOME": str(home), "HOME": str(tmp_path)}


def _where(settings: Settings) -> tuple[str, str]:
    return settings.temporal.address, settings.temporal.namespace


def test_the_connection_comes_from_the_file_then_an_asked_for_profile_then_the_variables(
    layered: tuple[Path, Path, dict[str, str]],
) -> None:
    keeper, profiles, env = layered
    # No profile asked for: the file, not the user's default profile.
    assert _where(load_settings(keeper, env)) == ("file-host:7233", "file-ns")
    # A profile file named: its default profile beats the file.
    named = {**env, "TEMPORAL_CONFIG_FILE": str(profiles)}
    assert _where(load_settings(keeper, named)) == ("profile-host:7233", "profile-ns")
    # TEMPORAL_PROFILE picks another; what that profile leaves unset stays the file's.
    staging = {**named, "TEMPORAL_PROFILE": "staging"}
    assert _where(load_settings(keeper, staging)) == ("staging-host:7233", "file-ns")
    # The variables beat the profile.
    on_top = {**staging, "TEMPORAL_ADDRESS": "env-host:7233", "TEMPORAL_NAMESPACE": "env-ns"}
    assert _where(load_settings(keeper, on_top)) == ("env-host:7233", "env-ns")
    # A profile named without a file comes from the temporal CLI's own file.
    user = {**env, "TEMPORAL_PROFILE": "staging"}
    assert _where(load_settings(keeper, user)) == ("user-staging:7233", "file-ns")


def test_the_settings_file_can_name_the_profile_and_the_variables_still_win(
    tmp_path: Path, layered: tuple[Path, Path, dict[str, str]]
) -> None:
    _, profiles, env = layered
    keeper = _keeper_file(
        tmp_path, {"address": "file-host:7233", "profile": "staging", "profile_file": str(profiles)}
    )
    assert load_settings(keeper, env).temporal.address == "staging-host:7233"
    chosen = {**env, "TEMPORAL_PROFILE": "default"}
    assert _where(load_settings(keeper, chosen)) == ("profile-host:7233", "profile-ns")


def test_a_missing_profile_or_profile_file_is_refused_by_name(
    tmp_path: Path, layered: tuple[Path, Path, dict[str, str]]
) -> None:
    keeper, profiles, env = layered
    absent = tmp_path / "absent.toml"
    with pytest.raises(
        SettingsError, match=re.escape(f"TEMPORAL_CONFIG_FILE: {absent}: no such file")
    ):
        load_settings(keeper, {**env, "TEMPORAL_CONFIG_FILE": str(absent)})
    unknown = {**env, "TEMPORAL_CONFIG_FILE": str(profiles), "TEMPORAL_PROFILE": "prod"}
    with pytest.raises(SettingsError, match=r"'prod'.*not found"):
        load_settings(keeper, unknown)
    nowhere = {"HOME": str(tmp_path / "nohome"), "TEMPORAL_PROFILE": "prod"}
    with pytest.raises(SettingsError, match="TEMPORAL_PROFILE asks for Temporal profile 'prod'"):
        load_settings(keeper, nowhere)


def test_an_api_key_from_a_profile_turns_tls_on_and_never_shows(tmp_path: Path) -> None:
    profiles = _profiles(
        tmp_path / "cloud.toml",
        f"""
        [profile.cloud]
        address = "ns.a1b2c.tmprl.cloud:7233"
        namespace = "ns.a1b2c"
        api_key = "{API_KEY}"
        """,
    )
    env = {"TEMPORAL_CONFIG_FILE": str(profiles), "TEMPORAL_PROFILE": "cloud"}
    env["KEEPER_CONFIG"] = str(tmp_path / "absent.yaml")  # the built-in defaults below
    settings = load_settings(None, env)
    options = connect_options(settings.temporal)
    assert options["target_host"] == "ns.a1b2c.tmprl.cloud:7233"
    assert options["api_key"] == API_KEY
    assert options["tls"] is True  # the system roots, as the temporal CLI does
    for shown in (repr(settings), str(settings.temporal), settings.model_dump_json()):
        assert API_KEY not in shown

    # TEMPORAL_TLS=false turns TLS off even with an API key (a local proxy, say).
    plain = connect_options(load_settings(None, {**env, "TEMPORAL_TLS": "false"}).temporal)
    assert plain["tls"] is False and plain["api_key"] == API_KEY


def test_a_broken_profile_file_or_key_is_refused_without_the_key(tmp_path: Path) -> None:
    broken = _profiles(
        tmp_path / "broken.toml", f'[profile.default]\napi_key = "{API_KEY}\naddress = "x:1"\n'
    )
    bare = {"KEEPER_CONFIG": str(tmp_path / "absent.yaml")}
    with pytest.raises(SettingsError, match="not valid TOML") as info:
        load_settings(None, {**bare, "TEMPORAL_CONFIG_FILE": str(broken)})
    assert API_KEY[:8] not in str(info.value)

    two_lines = _profiles(
        tmp_path / "two-lines.toml",
        f"[profile.default]\napi_key = '''{API_KEY[:10]}\n{API_KEY[10:]}'''\n",
    )
    with pytest.raises(SettingsError, match="the api_key of Temporal profile") as info:
        load_settings(None, {**bare, "TEMPORAL_CONFIG_FILE": str(two_lines)})
    assert "has 2 lines" in str(info.value)
    assert API_KEY[:8] not in str(info.value) and API_KEY[10:18] not in str(info.value)


def test_tls_comes_from_the_temporal_variables_and_a_missing_file_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    bare = {"KEEPER_CONFIG": str(tmp_path / "absent.yaml")}
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    tls = connect_options(
        load_settings(
            None,
            {
                **bare,
                "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(ca),
                "TEMPORAL_TLS_SERVER_NAME": "sni.test",
            },
        ).temporal
    )["tls"]
    assert isinstance(tls, TLSConfig)
    assert tls.server_root_ca_cert == ca.read_bytes() and tls.domain == "sni.test"
    assert connect_options(load_settings(None, bare).temporal)["tls"] is False

    missing = tmp_path / "client.pem"
    with pytest.raises(SettingsError, match="TEMPORAL_TLS_CLIENT_CERT_PATH") as info:
        load_settings(None, {**bare, "TEMPORAL_TLS_CLIENT_CERT_PATH": str(missing)})
    assert str(info.value).startswith(f"Temporal TLS file {missing} (")
    assert str(info.value).endswith("): no such file")


@pytest.mark.parametrize("key", ["tls", "api_key"])
def test_credentials_in_the_settings_file_are_refused_with_where_they_go(
    tmp_path: Path, key: str
) -> None:
    value: object = {"enabled": True} if key == "tls" else API_KEY
    keeper = _keeper_file(tmp_path, {key: value})
    with pytest.raises(
        SettingsError, match=f"temporal.{key}: keeper reads Temporal credentials"
    ) as info:
        load_settings(keeper, {})
    assert API_KEY not in str(info.value) and "TEMPORAL_CONFIG_FILE" in str(info.value)


async def test_a_profile_connects_to_a_real_server(
    tmp_path: Path, dev_env: WorkflowEnvironment
) -> None:
    target = dev_env.client.service_client.config.target_host
    # An API key with TLS disabled: the dev server ignores the key, and a client that
    # turned TLS on anyway would fail the handshake.
    profiles = _profiles(
        tmp_path / "local.toml",
        f"""
        [profile.local]
        address = "{target}"
        namespace = "{dev_env.client.namespace}"
        api_key = "{API_KEY}"

        [profile.local.tls]
        disabled = true

        [profile.local.grpc_meta]
        x-keeper-test = "profile"
        """,
    )
    keeper = _keeper_file(tmp_path, {"address": "127.0.0.1:9", "namespace": "nowhere"})
    env = {"TEMPORAL_CONFIG_FILE": str(profiles), "TEMPORAL_PROFILE": "local"}
    settings = load_settings(keeper, env)
    assert connect_options(settings.temporal)["rpc_metadata"] == {"x-keeper-test": "profile"}
    client = await connect(settings.temporal)
    described = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=settings.temporal.namespace),
        timeout=datetime.timedelta(seconds=10),
    )
    assert described.namespace_info.name == dev_env.client.namespace
