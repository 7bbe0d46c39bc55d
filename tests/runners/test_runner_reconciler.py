"""The runner reconciler: three kinds of mismatch plus unowned lane records, each confirmed
on two passes, and a pass that survives a bad record."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from emulators.provider import state as provider_state
from keeper.domain.runners.github import GitHubRunner
from keeper.domain.runners.models import RunnerRecord, deletion_workflow_id
from keeper.domain.runners.provider import ProviderInstance
from keeper.domain.runners.reconcile import (
    MismatchKind,
    ReconcileReport,
    ReconcileRequest,
    find_mismatches,
)
from keeper.domain.runners.status import InstanceStatus
from keeper.workflows.runners.reconciler import RunnerReconciler
from tests.runners.world import SCOPE, RunnerWorld, eventually, runner_worker

S = InstanceStatus
LABEL = "keeper-managed"


def rec(name: str, status: S = S.RUNNING, pool: str = "p") -> RunnerRecord:
    return RunnerRecord(name=name, scale_set=pool, provider_id=f"i-{name}", instance_status=status)


def reg(rid: int, name: str, labels: list[str] | None = None) -> GitHubRunner:
    return GitHubRunner(id=rid, name=name, status="online", busy=False, labels=labels or [LABEL])


def inst(name: str) -> ProviderInstance:
    return ProviderInstance(provider_id=f"i-{name}", name=name, status="running")


def kinds(found) -> dict[str, str]:
    return {m.key: m.kind.value for m in found}


def test_only_orphans_instanceless_records_and_unowned_lane_records_are_mismatches() -> None:
    records = [
        rec("ok"),
        rec("vm-gone"),
        rec("young", S.CREATING),
        rec("lane", S.DELETING),
        rec("owned-lane", S.PENDING_DELETE),
        rec("dead", S.DELETED),
    ]
    found = find_mismatches(
        records,
        {
            "org:acme": [
                reg(1, "ok"),
                reg(2, "orphan-reg"),
                reg(3, "not-ours", ["x"]),
                reg(4, "dead"),
            ]
        },
        {"p": [inst("ok"), inst("orphan-vm"), inst("lane"), inst("dead")]},
        managed_label=LABEL,
        lane_owned=["owned-lane"],
    )
    assert kinds(found) == {
        "org:acme#2": "registration",
        "org:acme#4": "registration",  # a tombstone is not a live owner
        "p#i-orphan-vm": "instance",
        "p#i-dead": "instance",  # e.g. a leak a forced delete recorded
        "vm-gone": "record",
        "lane": "unowned-lane",
    }


def test_a_source_that_did_not_answer_says_nothing() -> None:
    found = find_mismatches(
        [rec("a"), rec("b", pool="q")], {}, {"q": [inst("b")]}, managed_label=LABEL
    )
    assert found == []


async def reconcile(env: WorkflowEnvironment, world: RunnerWorld) -> ReconcileReport:
    return await env.client.execute_workflow(
        RunnerReconciler.run,
        ReconcileRequest(scopes=[SCOPE, "org:flaky"], managed_label=LABEL),
        id=f"reconcile-{uuid.uuid4().hex[:6]}",
        task_queue=world.task_queue,
    )


async def test_acts_only_on_mismatches_seen_twice_and_survives_a_bad_one(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("fine")
    world.add_runner("vanished")
    provider_state.remove_instance(world.provider_config, "i-vanished")
    world.add_runner("unowned")
    world.leave_in_deleting("unowned")
    ghost = world.github.add_runner(SCOPE, "ghost-reg", labels=[LABEL])
    stubborn = world.github.add_runner(SCOPE, "stubborn-reg", labels=[LABEL])
    foreign = world.github.add_runner(SCOPE, "someone-elses", labels=["self-hosted"])
    provider_state.add_instance(world.provider_config, "ghost-vm", "set-a", provider_id="i-ghost")
    blip = world.github.add_runner(SCOPE, "blip", labels=[LABEL])

    world.github.inject(502, scope="org:flaky", method="GET", times=100)  # a scope that fails
    async with runner_worker(dev_env.client, world):
        first = await reconcile(dev_env, world)
        assert first.acted == [] and first.confirmed == {}
        assert first.seen == {"registration": 3, "instance": 1, "record": 1, "unowned-lane": 1}
        assert any("org:flaky" in e for e in first.errors)  # and the pass went on

        world.github.set_gone(blip)  # seen once only: never acted on
        world.github.inject(502, runner_id=stubborn, times=5)  # one bad mismatch
        second = await reconcile(dev_env, world)
        assert second.confirmed == {
            "registration": 2,
            "instance": 1,
            "record": 1,
            "unowned-lane": 1,
        }
        acted = "\n".join(second.acted)
        assert f"registration {SCOPE}#{ghost}" in acted
        assert "instance set-a#i-ghost" in acted
        assert "record vanished" in acted and "unowned-lane unowned" in acted
        assert any(f"{SCOPE}#{stubborn}" in e and "502" in e for e in second.errors)

        await eventually(lambda: world.status("vanished") is S.DELETED, what="vanished deleted")
        await eventually(lambda: world.status("unowned") is S.DELETED, what="unowned deleted")

    runners = {r["name"] for r in world.github.state()["runners"].get(SCOPE, [])}
    assert runners == {"fine", "stubborn-reg", "someone-elses"}
    assert foreign and "i-ghost" not in provider_state.instances(world.provider_config)
    assert world.status("fine") is S.RUNNING and world.instance_exists("fine")
    assert MismatchKind.RECORD.value == "record"


async def test_leaks_outlive_their_pool_and_its_deletions_follow_the_worker_policy(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """A leak in a pool no record names any more is still swept; the deletions the
    reconciler requests read the worker's policy (runners.deletion), as every deletion does,
    and carry none in their input."""
    provider_state.add_instance(
        world.provider_config, "old-vm", "retired-pool", provider_id="i-old"
    )
    world.store.record_leak(
        provider_id="i-old", runner="old", scale_set="retired-pool", reason="forced delete"
    )
    world.add_runner("vm-gone")
    provider_state.remove_instance(world.provider_config, "i-vm-gone")
    policy = world.policy.model_copy(update={"busy_wait": timedelta(minutes=7)})
    request = ReconcileRequest(scopes=[SCOPE], managed_label=LABEL)
    async with runner_worker(dev_env.client, world, policy):
        for _ in range(2):
            report = await dev_env.client.execute_workflow(
                RunnerReconciler.run,
                request,
                id=f"reconcile-{uuid.uuid4().hex[:6]}",
                task_queue=world.task_queue,
            )
        assert "instance retired-pool#i-old" in "\n".join(report.acted)
        await eventually(lambda: world.status("vm-gone") is S.DELETED, what="vm-gone deleted")
        history = await dev_env.client.get_workflow_handle(
            deletion_workflow_id("vm-gone")
        ).fetch_history()
    assert "i-old" not in provider_state.instances(world.provider_config)
    assert world.store.leaks() == []
    started = history.events[0].workflow_execution_started_event_attributes
    assert "policy" not in json.loads(started.input.payloads[0].data)
    (read,) = [
        json.loads(event.marker_recorded_event_attributes.details["result"].payloads[0].data)
        for event in history.events
        if event.HasField("marker_recorded_event_attributes")
    ]
    assert read["busy_wait"] == 420.0
