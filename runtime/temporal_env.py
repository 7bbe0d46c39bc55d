"""The Temporal connection as the temporal CLI configures it, resolved by `temporalio.envconfig`.

keeper's settings file gives `temporal.address` and `temporal.namespace`; a profile of the
temporal CLI's TOML file and the TEMPORAL_* variables go on top, in that order:

1. built-in defaults (127.0.0.1:7233, namespace `default`);
2. keeper's settings file (`temporal:`);
3. a profile, read only when one is asked for: TEMPORAL_PROFILE (else `temporal.profile`)
   names it, TEMPORAL_CONFIG_FILE (else `temporal.profile_file`, else the temporal CLI's own
   file, ~/.config/temporalio/temporal.toml) holds it. Naming only the file reads its
   `default` profile. Unlike the temporal CLI, keeper never reads that default profile
   unasked, so a user-wide profile cannot silently send the local stack elsewhere;
4. TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_GRPC_META_*.

Credentials (the API key, TLS, gRPC metadata) come from 3 and 4 only, never from keeper's file.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keeper.domain.common.secret_text import header_secret_problem, scrub

if TYPE_CHECKING:
    from temporalio.envconfig import ClientConfigTLS

# Every variable envconfig reads (TEMPORAL_TLS_*, TEMPORAL_GRPC_META_*, ...) starts so.
ENV_PREFIX = "TEMPORAL_"
PROFILE_ENV = "TEMPORAL_PROFILE"
PROFILE_FILE_ENV = "TEMPORAL_CONFIG_FILE"
ADDRESS_ENV = "TEMPORAL_ADDRESS"
NAMESPACE_ENV = "TEMPORAL_NAMESPACE"
API_KEY_ENV = "TEMPORAL_API_KEY"

# Keys of keeper's `temporal:` section that only a profile or the environment may set.
CREDENTIAL_KEYS = {
    "api_key": "TEMPORAL_API_KEY",
    "tls": "TEMPORAL_TLS, TEMPORAL_TLS_*",
    "rpc_metadata": "TEMPORAL_GRPC_META_*",
}

# Each TLS file a profile or the environment may name, and where it can be named.
_TLS_FILES = {
    "server_root_ca_cert": "TEMPORAL_TLS_SERVER_CA_CERT_PATH or the profile's server_ca_cert_path",
    "client_cert": "TEMPORAL_TLS_CLIENT_CERT_PATH or the profile's client_cert_path",
    "client_private_key": "TEMPORAL_TLS_CLIENT_KEY_PATH or the profile's client_key_path",
}


class ProfileError(Exception):
    """A problem with the profile or the TEMPORAL_* variables; never quotes a secret."""


@dataclass
class Connection:
    """What the profile and the environment set: the `temporal:` keys and their sources."""

    values: dict[str, Any] = field(default_factory=dict)
    # Settings key -> where its value came from, for messages ("TEMPORAL_ADDRESS").
    sources: dict[str, str] = field(default_factory=dict)
    profile_file: Path | None = None


def default_profile_file(env: Mapping[str, str]) -> Path:
    """Where the temporal CLI keeps its profiles (Go's os.UserConfigDir)."""
    home = Path(env.get("HOME") or Path.home())
    if sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        base = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return base / "temporalio" / "temporal.toml"


def _profile_source(
    file_section: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[str | None, Path | None]:
    """The profile asked for and the file that holds it; (None, None) when none is."""
    name = env.get(PROFILE_ENV) or file_section.get("profile")
    named_file = env.get(PROFILE_FILE_ENV) or file_section.get("profile_file")
    if named_file:
        path = Path(named_file)
        if not path.is_file():
            where = PROFILE_FILE_ENV if env.get(PROFILE_FILE_ENV) else "temporal.profile_file"
            raise ProfileError(f"{where}: {path}: no such file")
        return name, path
    if not name:
        return None, None
    path = default_profile_file(env)
    if not path.is_file():
        where = PROFILE_ENV if env.get(PROFILE_ENV) else "temporal.profile"
        raise ProfileError(
            f"{where} asks for Temporal profile {name!r} but there is no profile file: "
            f"{path} does not exist and {PROFILE_FILE_ENV} is not set"
        )
    return name, path


def _check_toml(path: Path) -> None:
    # The SDK's own parse errors quote the offending line, which may hold the API key;
    # tomllib's name only the line and column.
    try:
        tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(f"{path}: cannot read it: {err.__class__.__name__}") from None
    except tomllib.TOMLDecodeError as err:
        raise ProfileError(f"{path}: not valid TOML: {err}") from None


def _check_tls_files(tls: ClientConfigTLS) -> None:
    for attr, where in _TLS_FILES.items():
        source = getattr(tls, attr)
        if isinstance(source, Path) and not source.is_file():
            raise ProfileError(f"Temporal TLS file {source} ({where}): no such file")


def resolve(file_section: Mapping[str, Any], env: Mapping[str, str]) -> Connection:
    """The `temporal:` values the profile and the environment set, on top of the file."""
    name, path = _profile_source(file_section, env)
    if path is None and not any(var.startswith(ENV_PREFIX) for var in env):
        # No profile and no variable: envconfig would set nothing (and it loads the SDK's
        # core, a tenth of a second, for every `keeper` command).
        return Connection()
    from temporalio.envconfig import ClientConfigProfile

    if path is not None:
        _check_toml(path)
    try:
        profile = ClientConfigProfile.load(
            profile=name,
            config_source=path,
            disable_file=path is None,
            override_env_vars=dict(env),
        )
    except Exception as err:  # the SDK raises its own ConfigError (and ValueError)
        # Its first line names the profile or the variable; a secret it might echo is cut.
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ProfileError(
            f"Temporal profile {name or 'default'!r}"
            + (f" in {path}" if path else "")
            + f": {scrub(text, [env.get(API_KEY_ENV)])}"
        ) from None
    from_profile = f"Temporal profile {name or 'default'!r} in {path}" if path else ""
    connection = Connection(profile_file=path)

    def take(key: str, value: Any, env_name: str | None) -> None:
        connection.values[key] = value
        by_env = env_name is not None and bool(env.get(env_name))
        connection.sources[key] = env_name if by_env and env_name else from_profile

    if profile.address:
        take("address", profile.address, ADDRESS_ENV)
    if profile.namespace:
        take("namespace", profile.namespace, NAMESPACE_ENV)
    if profile.api_key is not None:
        source = API_KEY_ENV if env.get(API_KEY_ENV) else f"the api_key of {from_profile}"
        problem = header_secret_problem(profile.api_key)
        if problem:
            raise ProfileError(f"{source} {problem}; set it to the API key alone")
        take("api_key", profile.api_key, API_KEY_ENV)
    if profile.tls is not None:
        _check_tls_files(profile.tls)
        take("tls", profile.tls, None)
    if profile.grpc_meta:
        take("rpc_metadata", dict(profile.grpc_meta), None)
    return connection
