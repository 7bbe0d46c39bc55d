"""An emulated GARM external provider, with failure modes for DeleteInstance.

It is an executable like any GARM provider, so `keeper.runtime.runners.garm_provider` drives it
exactly as it drives a real one:

    from emulators.provider import WRAPPER, launcher_env
    from emulators.provider.state import write_config, add_instance

    config = write_config(tmp / "provider.json")
    add_instance(config, "runner-1", "pool-a", provider_id="i-1")
    provider = ExternalProvider(WRAPPER, config, "controller-1", extra_env=launcher_env())

See docs/provider.md. This package is imported on every provider call, so it stays on the
standard library (not even pathlib).
"""

from __future__ import annotations

import os
import sys

# The executable to configure: a shell script running `python -m emulators.provider`.
WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keeper-emulated-provider")

# The interpreter the wrapper runs. GARM passes a provider no arguments and keeper passes it
# a minimal environment, so the interpreter travels as a variable.
PYTHON_ENV = "KEEPER_PROVIDER_PYTHON"


def launcher_env(python: str | None = None) -> dict[str, str]:
    """extra_env for ExternalProvider so the wrapper runs this interpreter (or `python`)."""
    return {PYTHON_ENV: python or sys.executable}
