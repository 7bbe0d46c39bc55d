"""The layout's rules, as import-linter contracts in pyproject.toml: the layers point one
way (cli > workers > workflows > activities > runtime > store | emulators > domain), each
family keeps to its own packages, domain/ imports nothing that does I/O, and keeper never
imports the checkout's development tooling (dev/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lint_imports import lint

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "workers", "workflows", "activities", "runtime", "store", "wire", "domain")


def test_keepers_imports_keep_every_contract() -> None:
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


FAMILY_DIRS = (
    "tpu", "runners", "reclaim", "watch", "families", "families/tpu", "families/runners",
    "families/reclaim", "families/watch", "settings", "settings/tpu", "settings/runners",
    "settings/reclaim", "settings/watch",
)  # fmt: skip


def _tree(tmp: Path, modules: dict[str, str]) -> Path:
    """A copy of keeper's contracts over a made-up tree of the same packages."""
    (tmp / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    for package in (*PACKAGES, "emulators", "dev"):
        for sub in ("", *FAMILY_DIRS):
            d = tmp / package / sub
            d.mkdir(parents=True, exist_ok=True)
            (d / "__init__.py").touch()
    for name, source in modules.items():
        (tmp / (name.removeprefix("keeper.").replace(".", "/") + ".py")).write_text(source)
    return tmp


@pytest.mark.parametrize(
    ("modules", "broken"),
    [
        ({"domain.tpu.rules": "import httpx\n"}, "domain is pure"),
        ({"domain.tpu.rules": "import temporalio.workflow\n"}, "domain is pure"),
        ({"domain.tpu.rules": "import os\n"}, "domain is pure"),
        ({"domain.tpu.rules": "import keeper.domain.runners\n"}, "own domain packages"),
        ({"workflows.runners.w": "import keeper.workflows.tpu\n"}, "own workflow packages"),
        ({"activities.tpu.a": "import keeper.workflows.tpu\n"}, "layers point one way"),
        ({"runtime.x": "import keeper.activities.tpu\n"}, "layers point one way"),
        ({"store.s": "import emulators.tpu\n"}, "layers point one way"),
        ({"domain.reclaim.r": "import keeper.domain.runners\n"}, "own domain packages"),
        ({"emulators.e": "import keeper.runtime.settings\n"}, "layers point one way"),
        ({"cli.c": "import dev.d\n", "dev.d": ""}, "does not import the development tooling"),
        ({"runtime.r": "import dev\n"}, "does not import the development tooling"),
        ({"cli.c": "import keeper.workflows.tpu\n"}, "cli names workflows by type"),
        ({"cli.tpu.c": "from keeper.workflows import w\n", "workflows.w": ""}, "cli names"),
        (
            {"runtime.settings.watch.w": "import keeper.runtime.settings.reclaim\n"},
            "own settings modules",
        ),
        (
            {
                "runtime.tpu.c": "import keeper.runtime.common\n",
                "runtime.common": "import keeper.runtime.runners\n",
            },
            "own runtime packages",
        ),
    ],
)
def test_a_broken_rule_is_caught(tmp_path: Path, modules: dict[str, str], broken: str) -> None:
    done = lint(_tree(tmp_path, modules))
    assert done.returncode != 0, done.stdout
    broken_lines = [line for line in done.stdout.splitlines() if line.endswith("BROKEN")]
    assert len(broken_lines) == 1 and broken in broken_lines[0], done.stdout
