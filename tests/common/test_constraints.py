"""constraints.txt, keeper's lock: it pins every requirement of pyproject.toml within its range
and the whole tree installed here, and every install that must be reproducible takes it:
`make venv` (so `make test`), the Dockerfile and the clean-venv wheel test."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests import constraints
from tests.common.test_packaging import wheel_install_command

ROOT = Path(__file__).resolve().parents[2]


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [
        Requirement(line)
        for line in [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    ]


def test_every_requirement_of_pyproject_is_pinned_within_its_range() -> None:
    pins = constraints.read()
    assert constraints.DISTRIBUTION not in pins, "the lock pins keeper itself"
    wrong = {}
    for requirement in _requirements():
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None or not requirement.specifier.contains(pinned, prereleases=True):
            wrong[str(requirement)] = pinned
    assert wrong == {}, (
        f"constraints.txt pins these outside pyproject.toml's range (None: not at all): {wrong}; "
        "install them in .venv and run `make constraints` (its header says how)"
    )


def test_the_lock_pins_the_whole_tree_installed_here_and_nothing_else() -> None:
    pinned = set(constraints.read())
    installed = set(constraints.needed())
    assert (installed - pinned, pinned - installed) == (set(), set()), (
        "constraints.txt and .venv disagree (missing from the lock, not needed any more); "
        "`make venv`, then `make constraints`"
    )


def test_the_lock_file_is_what_make_constraints_writes(tmp_path: Path) -> None:
    # Its header and its form: sorted, canonical names, exact pins only.
    text = constraints.CONSTRAINTS.read_text()
    assert text == constraints.render(constraints.read())


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_venv_installs_from_the_lock_and_again_when_it_changes(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # newer than every file of the checkout

    def dry_run(*flags: str) -> str:
        done = subprocess.run(
            ["make", "-n", *flags, "venv", f"VENV={venv}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "pip install" not in dry_run(), "make venv reinstalls with nothing changed"
    # -W: as if constraints.txt had just changed.
    commands = dry_run("-W", "constraints.txt")
    (install,) = [line for line in commands.splitlines() if "-e '.[dev]'" in line]
    assert "-c constraints.txt" in install.split(" -e ")[0], install


def test_the_dockerfile_builds_and_installs_the_wheel_from_the_lock() -> None:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [" ".join(line.split()) for line in text.splitlines() if not line.startswith("#")]
    copies = [line for line in lines if line.startswith("COPY ") and "--from" not in line]
    assert any("constraints.txt" in line.split()[1:-1] for line in copies), copies
    runs = [line for line in lines if line.startswith("RUN ")]
    assert any("pip install --no-cache-dir -c constraints.txt setuptools" in r for r in runs)
    assert any("--no-build-isolation" in r and "pip wheel" in r for r in runs), runs
    (install,) = [r for r in runs if "/wheels/keeper_temporal-" in r and "pip install" in r]
    assert "pip install -c /wheels/constraints.txt /wheels/keeper_temporal-*.whl" in install
    assert any("cp constraints.txt /wheels/" in r for r in runs), runs


def test_the_wheel_test_installs_the_wheel_from_the_lock() -> None:
    argv = wheel_install_command(Path("python"), Path("keeper.whl"))
    assert argv[argv.index("-c") + 1] == str(constraints.CONSTRAINTS)
    assert argv[-1] == "keeper.whl"
