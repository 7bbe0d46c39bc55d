"""The one thing pyproject.toml cannot say statically: the wheel's package list. The design
card keeps domain/, workflows/, ... at the repository's top level; installed, they live under
the one top-level name `keeper` (keeper.domain, keeper.workflows, ...), so the wheel never
adds a `cli` or `store` of its own to site-packages. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

# keeper's runtime. dev/ (`keeper-dev`), emulators/, tests/ and bench/ are the checkout's,
# never installed.
RUNTIME = ("activities", "cli", "domain", "runtime", "store", "wire", "workers", "workflows")

packages = [
    f"keeper.{name}"
    for name in find_packages(include=[f"{top}*" for top in RUNTIME])
    if name.split(".")[0] in RUNTIME
]
setup(packages=packages, package_dir={"keeper": "."})
