"""Writes constraints.txt, keeper's lock: every distribution keeper-temporal and its dev
extra need (the whole tree, not only what pyproject.toml names), each pinned at the version
installed in this interpreter's environment. `make constraints` runs it with .venv's python;
tests/common/test_constraints.py checks the file against pyproject.toml and .venv.

    python tests/constraints.py [OUT]    (default: constraints.txt at the checkout's root)
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from keeper.runtime.settings import DISTRIBUTION

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"

HEADER = """\
# keeper's pinned dependencies: every distribution keeper-temporal and its dev extra need,
# the whole tree, at the versions the tests last passed with (keeper itself is not listed).
# pip takes the file as constraints (-c): `make venv` (and so `make test`), the Dockerfile's
# install of the wheel and the clean-venv wheel test (tests/common/test_packaging.py) install
# exactly these versions, so two images built from one commit hold the same code. A
# constraint installs nothing by itself: the wheel's install takes the runtime ones only.
#
# Generated: do not edit by hand. `make constraints` rewrites it from .venv
# (tests/constraints.py). To add a dependency: add it to pyproject.toml, `make venv` (pip
# takes the newest release for a name this file does not pin yet), `make constraints`. To
# move a pin: `.venv/bin/pip install 'NAME==VERSION'` (or `-U NAME`), `make constraints`,
# then `make test`. tests/common/test_constraints.py fails while a requirement of pyproject.toml is
# missing here or pinned outside its range.
"""


def needed(distribution: str = DISTRIBUTION, extras: tuple[str, ...] = ("dev",)) -> dict[str, str]:
    """Canonical name -> installed version of every distribution `distribution[extras]`
    needs here, transitively, itself left out. Markers are evaluated for this interpreter,
    so a requirement of another platform or Python is not followed."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    todo: list[tuple[str, frozenset[str]]] = [(distribution, frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(
                f"{name} is required but not installed in {sys.prefix}; run `make venv` first"
            ) from None
        key = canonicalize_name(dist.metadata["Name"])
        version, had = found.get(key, (dist.version, frozenset()))
        if key in found and wanted <= had:
            continue
        extras_now = had | wanted
        found[key] = (version, extras_now)
        for line in dist.requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is not None and not any(
                marker.evaluate({"extra": extra}) for extra in (*extras_now, "")
            ):
                continue
            todo.append((requirement.name, frozenset(requirement.extras)))
    found.pop(canonicalize_name(distribution))
    return {name: version for name, (version, _) in sorted(found.items())}


def render(pins: dict[str, str]) -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def read(path: Path = CONSTRAINTS) -> dict[str, str]:
    """Canonical name -> pinned version of a constraints file; refuses anything but `==`."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version or any(c in version for c in "<>=!~,; "):
            raise ValueError(f"{path.name}:{number}: {raw!r} is not an exact pin (NAME==VERSION)")
        pins[canonicalize_name(name)] = version
    return pins


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else CONSTRAINTS
    pins = needed()
    out.write_text(render(pins))
    print(f"{out}: {len(pins)} pins from {sys.prefix}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
