"""Runs import-linter over keeper's import contracts (pyproject.toml).

Installed, the design card's folders are the package `keeper` (keeper.domain, keeper.cli, ...);
in a checkout that package exists only through the editable install's import hook, which
import-linter cannot walk. So this lays out a real `keeper/` of links to the checkout's
folders and runs lint-imports with it first on the path. `make lint` and tests/common/test_layers.py
run it: python tests/lint_imports.py [ROOT]."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def _setup_runtime() -> tuple[str, ...]:
    """setup.py's RUNTIME, the folders the wheel installs under keeper/ (read, not run:
    running setup.py builds)."""
    tree = ast.parse((Path(__file__).resolve().parent.parent / "setup.py").read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "RUNTIME"
    ]
    return tuple(ast.literal_eval(value))


RUNTIME = _setup_runtime()
LINT = Path(sys.executable).parent / "lint-imports"


def keeper_links(root: Path, into: Path) -> Path:
    """`into`/keeper/, a package whose subpackages are links to `root`'s folders."""
    package = into / "keeper"
    package.mkdir(parents=True)
    (package / "__init__.py").touch()
    for name in RUNTIME:
        if (root / name).is_dir():
            (package / name).symlink_to(root / name, target_is_directory=True)
    return into


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="keeper-lint-") as tmp:
        links = keeper_links(root.resolve(), Path(tmp))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(links), str(root)))}
        return subprocess.run(
            [str(LINT), "--no-cache", "--no-logo", "pyproject.toml"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )


if __name__ == "__main__":
    done = lint(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)
