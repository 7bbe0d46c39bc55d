"""What is known of the settings before they are parsed: where the file is, and the build a
worker of this package polls as when nothing overrides it.

The standard library only (and PyYAML when a file is read): `keeper --version` and every
`keeper` command import this, while the full parse (runtime/settings) needs pydantic and every
family's models.

`keeper --version` prints the worker's build id and deployment name. Unless one of them is
set (`KEEPER_BUILD_ID`, or `worker.build_id` / `worker.deployment_name` in the settings
file), they are this package's own, whatever the rest of the settings say:

| the environment and the file | `--version` shows | parsed |
|---|---|---|
| no build id, no deployment name other than `keeper` | package_build_id(), `keeper` | no |
| either is set, or the file does not read as a mapping | the settings' (invalid: warns) | yes |
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_CONFIG_FILE = "temporal-dev.yaml"
CONFIG_ENV = "KEEPER_CONFIG"

# keeper's distribution name: "keeper" on the public index is an unrelated project.
DISTRIBUTION = "keeper-temporal"
# worker.build_id's variable; worker.deployment_name has none.
BUILD_ID_ENV = "KEEPER_BUILD_ID"
DEFAULT_DEPLOYMENT = "keeper"

# The packages whose code workflow tasks run: two builds that differ here are two codes.
_WORKFLOW_CODE = ("keeper.workflows", "keeper.domain")


def config_path(explicit: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(explicit or env.get(CONFIG_ENV) or DEFAULT_CONFIG_FILE)


@functools.cache
def package_build_id() -> str:
    """The build id when neither KEEPER_BUILD_ID nor the settings file sets one: the package
    version and a fingerprint of the workflow code, so a build id never names two codes
    (1.0.0+3f2a9c0d1e4b), even when the version was not bumped."""
    from importlib import metadata, util  # the email package with metadata

    digest = hashlib.sha256()
    for package in _WORKFLOW_CODE:
        # Found, not imported: the fingerprint is of the files.
        spec = util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        root = Path(next(iter(spec.submodule_search_locations)))
        for source in sorted(root.rglob("*.py")):
            digest.update(source.relative_to(root.parent).as_posix().encode())
            digest.update(source.read_bytes())
    return f"{metadata.version(DISTRIBUTION)}+{digest.hexdigest()[:12]}"


def build_identity_is_default(explicit: str | Path | None, env: Mapping[str, str]) -> bool:
    """Whether a worker with these settings polls as the package's own build (see the table
    above): nothing sets the build id or the deployment name. False when that cannot be told
    without the full parse (no such explicit file, YAML that does not read as a mapping)."""
    if env.get(BUILD_ID_ENV):
        return False
    file = config_path(explicit, env)
    if not file.exists():
        # No file: the defaults, as load_settings takes them; a named one missing is a problem.
        return explicit is None
    import yaml

    try:
        tree: Any = yaml.safe_load(file.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    if not isinstance(tree, dict):
        return False
    worker = tree.get("worker", {})
    if not isinstance(worker, dict) or "build_id" in worker:
        return False
    # Written out as the default it is (the checkout's file does), it changes nothing.
    return worker.get("deployment_name", DEFAULT_DEPLOYMENT) == DEFAULT_DEPLOYMENT
