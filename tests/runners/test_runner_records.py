"""One bad runner record never wedges or stops the others: one check (domain.runners.record_check)
refuses it on add, identically on SQLite and PostgreSQL; a bad row already stored is skipped
and reported by listings, the CLI and the reconciler, and read with its problems for its own
deletion."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import insert, text
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from emulators.provider import state as provider_state
from keeper.activities.runners.reconciler import ReconcilerActivities
from keeper.cli.main import cli
from keeper.domain.runners.models import RunnerRecord, deletion_workflow_id
from keeper.domain.runners.reconcile import ReconcileRequest
from keeper.domain.runners.record_check import RecordProblem, record_problems
from keeper.domain.runners.status import AgentStatus, InstanceStatus
from keeper.store import InvalidRecord, RunnerStore
from keeper.store.runners.schema import runners
from tests.runners.world import SCOPE, runner_world

S = InstanceStatus
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LABEL = "keeper-managed"


def row(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "name": "r-1",
        "scale_set": "set-a",
        "provider_id": "i-r-1",
        "github_runner_id": 1000,
        "github_scope": "org:acme",
        "instance_status": "running",
        "agent_status": "idle",
        "version": 1,
        "created_at": NOW,
        "updated_at": NOW,
        "deleted_at": None,
    }
    values.update(overrides)
    return values


# ------------------------------------------------------------------ the one check


@pytest.mark.parametrize(
    ("overrides", "field", "problem"),
    [
        ({}, None, None),
        ({"provider_id": None, "github_runner_id": None, "github_scope": None}, None, None),
        ({"name": "bad name"}, "name", "'bad name' is not a runner name"),
        ({"name": "x" * 65}, "name", "is not a runner name"),
        ({"scale_set": "set a"}, "scale_set", "'set a' is not a scale-set name"),
        ({"provider_id": ""}, "provider_id", "is empty; leave it unset"),
        ({"provider_id": "i-\x00-1"}, "provider_id", "control character (U+0000) at position 3"),
        ({"provider_id": "i-1\n"}, "provider_id", "control character (U+000A) at position 4"),
        ({"provider_id": "i" * 255}, None, None),
        ({"provider_id": "i" * 256}, "provider_id", "has 256 characters; at most 255"),
        ({"github_runner_id": 0}, "github_runner_id", "0 is not a GitHub runner id"),
        ({"github_runner_id": 2**63}, "github_runner_id", "is not a GitHub runner id"),
        ({"github_runner_id": "12"}, "github_runner_id", "'12' is not a GitHub runner id"),
        ({"github_scope": "org:-acme"}, "github_scope", "organisation '-acme' must be"),
        ({"github_scope": "acme"}, "github_scope", "must look like 'repo:OWNER/REPO'"),
        ({"github_scope": "repo:acme/a/b"}, "github_scope", "exactly one '/'"),
        ({"instance_status": "zombie"}, "instance_status", "'zombie' is not one of"),
        ({"agent_status": "asleep"}, "agent_status", "'asleep' is not one of"),
        ({"version": 0}, "version", "0 is not a version"),
        ({"created_at": "yesterday"}, "created_at", "'yesterday' is not a timestamp"),
        ({"updated_at": None}, "updated_at", "is missing"),
        ({"deleted_at": "soon"}, "deleted_at", "'soon' is not a timestamp"),
    ],
)
def test_each_bad_field_of_a_record_is_named_with_its_problem_and_a_good_record_has_none(
    overrides: dict[str, Any], field: str | None, problem: str | None
):
    found = record_problems(row(**overrides))
    if field is None:
        assert found == ()
        return
    [only] = found
    assert only.field == field
    assert problem is not None and problem in only.problem
    assert str(only).startswith(f"{field}: ")


def test_every_problem_of_a_row_is_named_and_values_are_shown_safely() -> None:
    found = record_problems(row(provider_id="\x1b[31m" + "x" * 300, github_scope="org:"))
    assert [p.field for p in found] == ["provider_id", "github_scope"]
    assert all(isinstance(p, RecordProblem) for p in found)
    shown = record_problems(row(scale_set="\x1b[2Jset"))[0].problem
    assert "\x1b" not in shown and "\\x1b" in shown


# ------------------------------------------------------------------ refused on add, both back ends

REFUSED = [
    (
        {"github_scope": "org:-acme"},
        "runner 'r-1' refused: github_scope: scope 'org:-acme': name: organisation '-acme' must "
        "be 1-39 letters, digits or single hyphens, not starting or ending with a hyphen; "
        "nothing was written",
    ),
    (
        {"provider_id": "i-\x00-1"},
        "runner 'r-1' refused: provider_id: contains a control character (U+0000) at position "
        "3; nothing was written",
    ),
    (
        {"provider_id": "i" * 256},
        "runner 'r-1' refused: provider_id: has 256 characters; at most 255; nothing was written",
    ),
    (
        {"scale_set": "set a"},
        "runner 'r-1' refused: scale_set: 'set a' is not a scale-set name (1-64 letters, digits, "
        "'.', '_' or '-', starting with a letter or digit); nothing was written",
    ),
]


@pytest.mark.parametrize(("bad", "message"), REFUSED, ids=["scope", "nul", "256", "scale-set"])
def test_add_refuses_a_bad_record_the_same_on_both_back_ends(
    runner_store: RunnerStore, bad: dict[str, Any], message: str
) -> None:
    record = RunnerRecord(
        name="r-1",
        scale_set=bad.get("scale_set", "set-a"),
        provider_id=bad.get("provider_id", "i-r-1"),
        github_runner_id=1000,
        github_scope=bad.get("github_scope", "org:acme"),
        instance_status=S.RUNNING,
    )
    with pytest.raises(InvalidRecord) as info:
        runner_store.add(record)
    assert str(info.value) == message
    assert runner_store.get("r-1") is None and runner_store.audit("r-1") == []


def test_a_provider_id_written_later_is_checked_too(runner_store: RunnerStore) -> None:
    runner_store.add(RunnerRecord(name="r-1", scale_set="set-a", instance_status=S.CREATING))
    with pytest.raises(InvalidRecord, match=r"provider_id: has 300 characters"):
        runner_store.compare_and_set(
            "r-1", expect=S.CREATING, version=1, to=S.RUNNING, actor="t", provider_id="i" * 300
        )
    assert runner_store.require("r-1").instance_status is S.CREATING


# ------------------------------------------------------------------ bad rows already stored


def insert_raw(store: RunnerStore, **overrides: Any) -> None:
    """A row written before the check existed, or by another tool: no store method."""
    with store.engine.begin() as conn:
        conn.execute(insert(runners).values(**row(**overrides)))


def bad_rows(store: RunnerStore) -> dict[str, dict[str, Any]]:
    """Rows each back end accepts although the check refuses them."""
    found = {
        "bad-scope": {"github_scope": "org:-acme", "provider_id": "i-bad-scope"},
        "bad-status": {"instance_status": "zombie", "provider_id": "i-bad-status"},
        "bad-set": {"scale_set": "set a", "provider_id": "i-bad-set"},
    }
    if store.backend == "sqlite":  # PostgreSQL refuses these itself
        found["bad-nul"] = {"provider_id": "i-\x00-nul"}
        found["bad-long"] = {"provider_id": "i" * 256}
    return found


def test_a_bad_row_is_skipped_by_listings_and_read_with_its_problems(
    runner_store: RunnerStore,
) -> None:
    runner_store.add(RunnerRecord(name="good", scale_set="set-a", instance_status=S.RUNNING))
    bad = bad_rows(runner_store)
    for name, overrides in bad.items():
        insert_raw(runner_store, name=name, github_runner_id=None, **overrides)

    assert [r.name for r in runner_store.list()] == ["good"]
    scan = runner_store.scan(include_deleted=True)
    assert [r.name for r in scan.records] == ["good"]
    assert sorted(b.name for b in scan.bad) == sorted(bad)
    assert runner_store.status_counts()["set-a"][S.RUNNING] >= 2  # and counting did not fail

    for name, overrides in bad.items():
        record = runner_store.get(name)
        assert record is not None and record.problems, name
        [field] = {k for k in overrides if k != "provider_id"} or {"provider_id"}
        assert any(p.startswith(f"{field}: ") for p in record.problems), record.problems
        # The invalid value is kept as stored, as plain text.
        if field in ("github_scope", "scale_set", "provider_id"):
            assert getattr(record, field) == overrides[field]
    assert runner_store.get("bad-status").instance_status is S.UNKNOWN  # type: ignore[union-attr]
    assert runner_store.require("good").problems == ()


def test_the_lane_can_move_a_row_whose_status_cannot_be_read(runner_store: RunnerStore) -> None:
    insert_raw(runner_store, name="bad-status", instance_status="zombie")
    record = runner_store.require("bad-status")
    moved = runner_store.advance_lane(
        "bad-status",
        expect=record.instance_status,
        version=record.version,
        to=S.PENDING_DELETE,
        owner=deletion_workflow_id("bad-status"),
    )
    assert moved.ok and moved.record is not None
    assert moved.record.instance_status is S.PENDING_DELETE and moved.record.problems == ()


def test_rows_sqlite_lets_hold_anything_never_stop_a_listing(tmp_path: Path) -> None:
    # Only SQLite lets another tool put text in a timestamp or number column.
    from keeper.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        store.add(RunnerRecord(name="good", scale_set="set-a"))
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO runners (name, scale_set, instance_status, agent_status, "
                    "version, created_at, updated_at) VALUES ('bad-time', 'set-a', 'running', "
                    "'idle', 1, 'garbage', '2026-11-30 12:00:00.000000')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO runners (name, scale_set, provider_id, github_runner_id, "
                    "instance_status, agent_status, version, created_at, updated_at) VALUES "
                    "('bad-id', 'set-a', 5, 'abc', 'running', 'idle', 1, "
                    "'2026-11-30 12:00:00.000000', '2026-11-30 12:00:00.000000')"
                )
            )
        assert [r.name for r in store.list()] == ["good"]
        bad = {b.name: b for b in store.scan().bad}
        assert bad["bad-time"].problems == ("created_at: 'garbage' is not a timestamp",)
        assert store.require("bad-time").problems == bad["bad-time"].problems
        assert bad["bad-id"].problems == (
            "github_runner_id: 'abc' is not a GitHub runner id (a whole number from 1)",
        )
        record = store.require("bad-id")
        assert (record.provider_id, record.github_runner_id) == ("5", None)
        assert record.problems == bad["bad-id"].problems
    finally:
        store.close()


# ------------------------------------------------------------------ the CLI


def test_runner_list_prints_the_good_rows_and_warns_per_bad_row(
    runner_store: RunnerStore, store_url: str, tmp_path: Path
) -> None:
    runner_store.add(RunnerRecord(name="good", scale_set="set-a", instance_status=S.RUNNING))
    insert_raw(runner_store, name="bad-scope", github_scope="org:-acme")
    insert_raw(runner_store, name="bad-status", instance_status="zombie", provider_id="i-2")
    config = tmp_path / "keeper.yaml"
    config.write_text("temporal: {address: '127.0.0.1:1'}\n")

    def run(*args: str) -> Any:
        return CliRunner().invoke(
            cli,
            ["--config", str(config), "runner", "list", *args],
            env={"KEEPER_RUNNER_STORE_URL": store_url},
            catch_exceptions=False,
        )

    plain = run()
    assert plain.exit_code == 0, plain.output
    assert "good" in plain.stdout and "bad-" not in plain.stdout
    warnings = plain.stderr.splitlines()
    assert len(warnings) == 2
    scope_line = next(w for w in warnings if "'bad-scope'" in w)
    assert scope_line.startswith("warning: runner 'bad-scope' skipped: github_scope: ")
    assert "keeper runner delete bad-scope --force" in scope_line
    assert any("'bad-status' skipped: instance_status: 'zombie'" in w for w in warnings)

    as_json = run("--json")
    assert as_json.exit_code == 0
    payload = json.loads(as_json.stdout)
    assert [r["name"] for r in payload["runners"]] == ["good"]
    bad = {b["name"]: b for b in payload["bad_records"]}
    assert set(bad) == {"bad-scope", "bad-status"}
    assert bad["bad-status"]["provider_id"] == "i-2"
    assert bad["bad-scope"]["problems"][0].startswith("github_scope: ")
    assert "what_to_do" in bad["bad-scope"]


# ------------------------------------------------------------------ the reconciler


async def test_a_reconciler_pass_reports_bad_rows_and_goes_on(
    dev_env: WorkflowEnvironment, tmp_path: Path, store_url: str
) -> None:
    async with runner_world(tmp_path, store_url) as world:
        world.add_runner("fine")
        ghost = world.github.add_runner(SCOPE, "ghost", labels=[LABEL])
        # Bad rows whose runners are real: their registration and VM must not be taken
        # for orphans, whatever is wrong with the row.
        for name, overrides in (
            ("bad-scope", {"github_scope": "org:-acme"}),
            ("bad-status", {"instance_status": "zombie"}),
        ):
            provider_state.add_instance(
                world.provider_config, name, "set-a", provider_id=f"i-{name}"
            )
            rid = world.github.add_runner(SCOPE, name, labels=[LABEL])
            insert_raw(
                world.store,
                name=name,
                provider_id=f"i-{name}",
                github_runner_id=rid,
                **{"github_scope": SCOPE, **overrides},
            )
        activities = ReconcilerActivities(
            world.store, world.deps.github, world.deps.provider, dev_env.client
        )
        request = ReconcileRequest(scopes=[SCOPE], managed_label=LABEL, pools=["set-a"])
        env = ActivityEnvironment()
        reports = [await env.run(activities.reconcile_pass, request) for _ in range(2)]

        for report in reports:
            skipped = [e for e in report.errors if " skipped: " in e]
            assert len(skipped) == 2, report.errors
            assert any(e.startswith("record 'bad-scope' skipped: github_scope: ") for e in skipped)
            assert any("'bad-status' skipped: instance_status: 'zombie'" in e for e in skipped)
        assert reports[1].acted == [
            f"registration {SCOPE}#{ghost}: registration removed (204: runner removed)"
        ]
        registered = {r["name"] for r in world.github.state()["runners"][SCOPE]}
        assert registered == {"fine", "bad-scope", "bad-status"}
        assert {"i-fine", "i-bad-scope", "i-bad-status"} <= set(
            provider_state.instances(world.provider_config)
        )
        assert world.store.require("fine").agent_status is AgentStatus.IDLE
