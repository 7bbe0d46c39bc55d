"""The #854 interleave and the other interleavings from the runner-deletion reference, each
replayed through the real store, the real workflow, the GitHub emulator and the provider
executable on the dev server."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import timedelta

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from emulators.provider import state as provider_state
from keeper.activities.runners.deletion import RunnerStoreActivities
from keeper.domain.runners.calls import FinishDeletion
from keeper.domain.runners.deletion_view import DeletionView
from keeper.domain.runners.models import (
    BusyTimeoutAction,
    DeletionOutcome,
    DeletionStep,
    Requester,
    deletion_workflow_id,
)
from keeper.domain.runners.scale_set import ScalePolicy, plan_scaling
from keeper.domain.runners.status import AgentStatus, InstanceStatus
from keeper.runtime.runners.garm_provider import ExternalProvider
from keeper.store import RunnerStore
from keeper.workflows.runners.deletion import RunnerDeletion
from tests.runners.world import (
    FAST_POLICY,
    RunnerWorld,
    eventually,
    force_write,
    lane_history,
    runner_worker,
)

S = InstanceStatus


def activity_env(workflow_id: str) -> ActivityEnvironment:
    """Runs an activity as if the workflow `workflow_id` had called it."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=workflow_id)
    return env


def provider_started(world: RunnerWorld, name: str) -> bool:
    return provider_state.attempts(world.provider_config, f"i-{name}") >= 1


async def view_of(client: Client, name: str) -> DeletionView:
    handle = client.get_workflow_handle_for(RunnerDeletion.run, deletion_workflow_id(name))
    view = await handle.query(RunnerDeletion.status)
    assert view is not None
    return view


async def view_until(
    client: Client, name: str, condition: Callable[[DeletionView], bool], what: str
) -> DeletionView:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not condition(view := await view_of(client, name)):
        assert loop.time() < deadline, f"{name}: {what} not seen; last {view}"
        await asyncio.sleep(0.05)
    return view


async def next_ask_after(handle: WorkflowHandle) -> timedelta:
    """How long after its last attempt the pending GitHub call is next tried, once it is
    waiting between attempts."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        waiting = [p for p in pending if p.HasField("next_attempt_schedule_time")]
        if waiting:
            (activity,) = waiting
            return (
                activity.next_attempt_schedule_time.ToDatetime()
                - activity.last_attempt_complete_time.ToDatetime()
            )
        assert loop.time() < deadline, f"no attempt of {handle.id} waiting for its retry"
        await asyncio.sleep(0.05)


# ---- #854 -----------------------------------------------------------------------------


class LegacyManager:
    """#854's design, step for step: a cached status, forced writes by any actor, and a
    final validated write that gives up when refused."""

    def __init__(self, store: RunnerStore, provider: ExternalProvider) -> None:
        self.store = store
        self.provider = provider
        self.cached: S | None = None

    async def delete(self, name: str, notification_lost: asyncio.Event) -> bool:
        record = self.store.require(name)
        force_write(self.store, name, S.PENDING_DELETE)  # the scale set marks it
        force_write(self.store, name, S.DELETING)  # the manager force-writes deleting
        self.cached = S.DELETING
        answer = await self.provider.delete_instance(
            record.provider_id or name, record.scale_set, timeout_s=30
        )
        assert answer.gone
        # The status update hand-off timed out while the mutex was held: dropped.
        notification_lost.set()
        current = self.store.require(name)
        if current.instance_status is not S.DELETING:
            # pending_delete -> deleted is not a valid transition: refused, and the cached
            # `deleting` had no case in the manager's loop, so nothing ever retries it.
            return False
        return self.store.advance_lane(
            name,
            expect=current.instance_status,
            version=current.version,
            to=S.DELETED,
            owner=deletion_workflow_id(name),
        ).ok


async def test_854_interleave_strands_the_record_under_a_force_write_design(
    world: RunnerWorld,
) -> None:
    world.add_runner("phantom", mode="slow", mode_seconds=1.0)
    manager = LegacyManager(world.store, world.deps.provider)
    lost = asyncio.Event()
    deleting = asyncio.create_task(manager.delete("phantom", lost))
    await eventually(lambda: provider_started(world, "phantom"), what="provider delete")
    # The agent reports terminated mid-delete: a forced pending_delete moves the row back.
    force_write(world.store, "phantom", S.PENDING_DELETE)
    finished = await deleting
    assert lost.is_set() and not finished
    assert not world.instance_exists("phantom")  # the compute is gone...
    assert world.status("phantom") is S.PENDING_DELETE  # ...and the record stays, forever
    # The wedge: counting every record, the phantom pins a quiet set (one queued job).
    stuck = world.store.list("set-a")
    old = plan_scaling(stuck, ScalePolicy(min_idle_runners=0), 1, count=len)
    assert old.create == 0
    assert plan_scaling(stuck, ScalePolicy(min_idle_runners=0), 1).create == 1


async def test_854_interleave_converges_under_keeper(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r854", mode="slow", mode_seconds=1.5)
    client = dev_env.client
    async with runner_worker(client, world):
        handle = await world.request(client, "r854", Requester.SCALE_DOWN)
        await eventually(lambda: provider_started(world, "r854"), what="provider delete")
        assert world.status("r854") is S.DELETING
        # Mid-delete: the agent reports terminated, and a racing pending_delete request
        # arrives from a second scale-down. Both only ask; neither writes the lane.
        await asyncio.gather(
            world.agent_terminated(client, "r854"),
            world.request(client, "r854", Requester.SCALE_DOWN, reason="racing scale-down"),
        )
        assert world.status("r854") is S.DELETING  # nothing moved it backwards
        # The notification of the racing request is lost: the workflow does not need it,
        # since every step re-reads the store.
        result = await handle.result()
    assert result.outcome is DeletionOutcome.DELETED and not result.recovered
    assert world.status("r854") is S.DELETED
    assert not world.instance_exists("r854")
    assert all(not forced for *_, forced in lane_history(world, "r854"))
    assert len(result.requests) == 3
    assert provider_state.attempts(world.provider_config, "i-r854") == 1


async def test_a_legacy_forced_write_mid_delete_is_recovered_and_audited(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleavings 1 and 2: a stale snapshot is written back while the provider delete
    runs past its timeout. The final compare-and-set is refused; the record still ends
    deleted, through the audited recovery path."""
    world.add_runner("stale", mode="succeeds-after-timeout", mode_seconds=5)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "stale")
        await eventually(lambda: provider_started(world, "stale"), what="provider delete")
        force_write(world.store, "stale", S.PENDING_DELETE)  # a stale snapshot returns
        result = await handle.result()
    assert result.outcome is DeletionOutcome.DELETED and result.recovered
    assert world.status("stale") is S.DELETED
    forced = [e for e in world.store.audit("stale") if e.forced]
    assert len(forced) == 1 and "moved to pending_delete" in forced[0].reason
    assert forced[0].actor == "runner-delete-stale"
    # The first attempt timed out while the instance was already gone; the retry's
    # not-found confirmed it.
    assert provider_state.attempts(world.provider_config, "i-stale") == 2


# ---- provider answers -----------------------------------------------------------------


async def test_failing_provider_is_retried_and_never_marked_deleted_meanwhile(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleaving 3: the provider fails (and there is no revert to lose)."""
    world.add_runner("flaky", mode="failing", fail_times=5)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "flaky")
        await eventually(
            lambda: provider_state.attempts(world.provider_config, "i-flaky") >= 2,
            what="two failed attempts",
        )
        assert world.status("flaky") is S.DELETING and world.instance_exists("flaky")
        view = await view_of(dev_env.client, "flaky")
        assert view.step is DeletionStep.PROVIDER_DELETE and view.waiting
        # The retries are Temporal's: the pending activity carries the attempt and the error.
        pending = (await handle.describe()).raw_description.pending_activities
        assert [p.activity_type.name for p in pending] == ["runners.provider_delete"]
        assert pending[0].attempt >= 2 and "failed" in pending[0].last_failure.message
        result = await handle.result()
        view = await view_of(dev_env.client, "flaky")
    assert result.outcome is DeletionOutcome.DELETED and result.leaked_provider_id is None
    assert provider_state.attempts(world.provider_config, "i-flaky") == 6
    assert view.provider_attempts == 6


@pytest.mark.parametrize("mode", ["not-found", "slow"])
async def test_not_found_and_slow_providers_converge(
    dev_env: WorkflowEnvironment, world: RunnerWorld, mode: str
) -> None:
    world.add_runner(f"p-{mode}", mode=mode, mode_seconds=1.0)
    async with runner_worker(dev_env.client, world):
        result = await (await world.request(dev_env.client, f"p-{mode}")).result()
    assert result.outcome is DeletionOutcome.DELETED
    assert world.status(f"p-{mode}") is S.DELETED


async def test_hanging_provider_holds_the_record_until_forced_and_the_leak_is_recorded(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleavings 10 and 11: a hanging provider; a force arrives mid-flight."""
    world.add_runner("hang", mode="hanging")
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "hang")
        await eventually(
            lambda: provider_state.attempts(world.provider_config, "i-hang") >= 2,
            within=30,
            what="a timed-out attempt and its retry",
        )
        assert world.status("hang") is S.DELETING  # never deleted while it fails
        await world.request(dev_env.client, "hang", force=True, reason="operator gives up")
        result = await handle.result()
    assert result.forced and result.leaked_provider_id == "i-hang"
    assert world.status("hang") is S.DELETED
    leaks = world.store.leaks()
    assert [(leak.provider_id, leak.runner) for leak in leaks] == [("i-hang", "hang")]
    assert "gave up" in (result.busy_decision or "")


async def test_a_runner_whose_instance_and_registration_are_already_gone_is_deleted(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleaving 14: deleted out of band, registration auto-removed by GitHub."""
    record = world.add_runner("oob")
    provider_state.remove_instance(world.provider_config, "i-oob")
    assert record.github_runner_id is not None
    world.github.set_gone(record.github_runner_id)
    async with runner_worker(dev_env.client, world):
        result = await (await world.request(dev_env.client, "oob")).result()
    assert result.outcome is DeletionOutcome.DELETED
    assert result.registration.startswith("404") and result.provider.startswith("not-found")


# ---- GitHub answers -------------------------------------------------------------------


async def test_github_errors_are_retried_and_shown(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleavings 7 and 9: busy read false, then 422, 401, 403, 502 and 429."""
    world.add_runner("gh")
    for status in (422, 401, 403, 502, 429):
        world.github.inject(status, retry_after=0.2 if status == 429 else None)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "gh")
        await eventually(
            lambda: any(r["status"] == 401 for r in world.github.requests), what="a 401"
        )
        assert world.instance_exists("gh")  # no compute deleted before the registration
        result = await handle.result()
        view = await view_of(dev_env.client, "gh")
    assert [r["status"] for r in world.github.requests if r["method"] == "DELETE"] == [
        422,
        401,
        403,
        502,
        429,
        204,
    ]
    assert result.outcome is DeletionOutcome.DELETED
    assert view.github_attempts == 6


async def test_busy_runner_is_not_killed_and_proceeds_once_idle(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    record = world.add_runner("busy", busy=True)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "busy")
        await eventually(
            lambda: sum(r["status"] == 422 for r in world.github.requests) >= 2, what="422s"
        )
        view = await view_of(dev_env.client, "busy")
        assert view.step is DeletionStep.BUSY_WAIT and view.busy_since is not None
        assert world.instance_exists("busy") and world.status("busy") is S.PENDING_DELETE
        assert record.github_runner_id is not None
        world.github.set_busy(record.github_runner_id, False)  # the job ends
        result = await handle.result()
    assert result.outcome is DeletionOutcome.DELETED and result.busy_decision is None


async def test_busy_forever_escalates_then_an_operator_force_finishes_it(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleaving 8: the VM died mid-job and GitHub says "still running" for ever."""
    world.add_runner("stuck", busy=True, mode="slow", mode_seconds=1.5)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "stuck")

        await view_until(
            dev_env.client, "stuck", lambda v: v.step is DeletionStep.ESCALATED, "escalated"
        )
        # Escalated: no more busy polls; GitHub is asked again only after escalation_recheck.
        assert await next_ask_after(handle) >= FAST_POLICY.escalation_recheck
        desc = await handle.describe()
        steps = [p.value for p in desc.typed_search_attributes if p.key.name == "KeeperStep"]
        assert steps == ["escalated"]
        await world.request(dev_env.client, "stuck", force=True)
        await eventually(lambda: provider_started(world, "stuck"), what="provider delete")
        desc = await handle.describe()
        steps = [p.value for p in desc.typed_search_attributes if p.key.name == "KeeperStep"]
        assert steps == ["deregister"]  # answered: no longer found by KeeperStep=escalated
        result = await handle.result()
    assert result.forced and result.outcome is DeletionOutcome.DELETED
    assert world.status("stuck") is S.DELETED and not world.instance_exists("stuck")


async def test_busy_forever_proceeds_when_the_policy_says_so(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    record = world.add_runner("proceed", busy=True)
    policy = FAST_POLICY.model_copy(update={"on_busy_timeout": BusyTimeoutAction.PROCEED})
    async with runner_worker(dev_env.client, world, policy):
        result = await (await world.request(dev_env.client, "proceed")).result()
    assert result.outcome is DeletionOutcome.DELETED and not result.forced
    assert "proceeding" in (result.busy_decision or "")
    # Once the compute was gone the runner went offline, and its registration was removed.
    assert not world.registration_exists(record)


# ---- restarts, late messages, cancels, bursts -----------------------------------------


async def test_records_left_in_deleting_and_creating_resume(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleaving 4: a restart finds records in `deleting` and `creating`."""
    world.add_runner("was-deleting")
    world.leave_in_deleting("was-deleting")
    world.add_runner("was-creating", status=S.CREATING, registered=False)
    async with runner_worker(dev_env.client, world):
        results = await asyncio.gather(
            *[
                (await world.request(dev_env.client, name, Requester.RECONCILER)).result()
                for name in ("was-deleting", "was-creating")
            ]
        )
    assert all(r.outcome is DeletionOutcome.DELETED for r in results)
    assert world.status("was-deleting") is S.DELETED
    assert world.status("was-creating") is S.DELETED
    assert not world.instance_exists("was-creating")


async def test_worker_restart_mid_delete_resumes(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("restart", mode="slow", mode_seconds=2.0)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "restart")
        await eventually(lambda: provider_started(world, "restart"), what="provider delete")
    assert world.status("restart") is S.DELETING
    async with runner_worker(dev_env.client, world):
        result = await handle.result()
    assert result.outcome is DeletionOutcome.DELETED
    assert world.status("restart") is S.DELETED


async def test_final_step_is_idempotent_when_its_completion_is_lost(
    world: RunnerWorld,
) -> None:
    """Interleaving 5: the tombstone is written by the final step itself, so a retry of
    that step (its completion lost) finds the record finished and changes nothing."""
    world.add_runner("lost-final")
    record = world.leave_in_deleting("lost-final")
    owner = deletion_workflow_id("lost-final")
    call = FinishDeletion(runner="lost-final", incarnation=record.created_at)
    env = activity_env(owner)
    acts = RunnerStoreActivities(world.store)
    first = await env.run(acts.finish_deleted, call)
    again = await env.run(acts.finish_deleted, call)
    assert first.record.instance_status is S.DELETED and not first.recovered
    assert again.found_status is S.DELETED and again.record.version == first.record.version
    # Anyone but the runner's own deletion workflow is refused.
    other = activity_env("someone-else")
    with pytest.raises(Exception, match="only runner-delete-lost-final"):
        await other.run(acts.finish_deleted, call)


async def test_job_completed_after_deletion_changes_nothing(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleaving 6: a late job-completed message during and after the deletion."""
    world.add_runner("late", mode="slow", mode_seconds=1.0)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "late")
        await eventually(lambda: provider_started(world, "late"), what="provider delete")
        current = world.store.require("late")
        during = world.store.set_agent_status(
            "late", status=AgentStatus.IDLE, version=current.version
        )
        assert during.ok and during.record and during.record.instance_status is S.DELETING
        await handle.result()
    done = world.store.require("late")
    after = world.store.set_agent_status("late", status=AgentStatus.IDLE, version=done.version)
    assert not after.ok and world.status("late") is S.DELETED


async def test_cancel_does_not_abandon_a_started_deletion(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("cancel-me", mode="slow", mode_seconds=1.0)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "cancel-me")
        await eventually(lambda: provider_started(world, "cancel-me"), what="provider delete")
        await handle.cancel()
        await handle.cancel()
        result = await handle.result()
        view = await view_of(dev_env.client, "cancel-me")
    assert result.outcome is DeletionOutcome.DELETED
    assert world.status("cancel-me") is S.DELETED and not world.instance_exists("cancel-me")
    assert view.cancel_requested


async def test_150_deletions_at_once_each_finish_and_leave_nothing_behind(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Interleaving 12: hundreds at once, each with its own owner."""
    names = [f"burst-{i:03d}" for i in range(150)]
    for name in names:
        world.add_runner(name)
    async with runner_worker(dev_env.client, world):
        handles = await asyncio.gather(*(world.request(dev_env.client, n) for n in names))
        results = await asyncio.gather(*(h.result() for h in handles))
    assert all(r.outcome is DeletionOutcome.DELETED for r in results)
    assert world.store.list("set-a") == []
    assert provider_state.instances(world.provider_config) == {}
    assert world.github.state()["runners"] == {}


# ---- review findings, each pinned ------------------------------------------------------


async def test_escalated_deletion_finishes_by_itself_when_the_job_ends(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    record = world.add_runner("ends-later", busy=True)
    policy = FAST_POLICY.model_copy(update={"escalation_recheck": timedelta(seconds=1)})
    async with runner_worker(dev_env.client, world, policy):
        handle = await world.request(dev_env.client, "ends-later")
        view = await view_until(
            dev_env.client, "ends-later", lambda v: v.step is DeletionStep.ESCALATED, "escalated"
        )
        assert view.error
        await handle.cancel()  # shown while it runs, not obeyed
        view = await view_until(
            dev_env.client, "ends-later", lambda v: v.cancel_requested, "the cancel shown"
        )
        assert view.step is DeletionStep.ESCALATED
        assert record.github_runner_id is not None
        world.github.set_busy(record.github_runner_id, False)  # the job ends; no one forces
        result = await handle.result()
        desc = await handle.describe()
    assert result.outcome is DeletionOutcome.DELETED and not result.forced
    assert "resolved while escalated" in (result.busy_decision or "")
    steps = [p.value for p in desc.typed_search_attributes if p.key.name == "KeeperStep"]
    assert steps == ["done"]


async def test_a_github_refusal_escalates_instead_of_looping(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("refused")
    world.github.inject(400, message="Validation Failed", times=2)
    policy = FAST_POLICY.model_copy(update={"escalation_recheck": timedelta(seconds=1)})
    async with runner_worker(dev_env.client, world, policy):
        handle = await world.request(dev_env.client, "refused")
        view = await view_until(
            dev_env.client, "refused", lambda v: v.step is DeletionStep.ESCALATED, "escalated"
        )
        assert "Validation Failed" in (view.error or "")
        assert world.instance_exists("refused")
        result = await handle.result()  # the cause went away (faults used up): it finishes
    assert result.outcome is DeletionOutcome.DELETED
    assert [r["status"] for r in world.github.requests] == [400, 400, 204]


async def test_a_forced_deletion_stays_forced_when_another_run_resumes_it(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("was-forced", mode="hanging")
    owner = deletion_workflow_id("was-forced")
    world.store.advance_lane(
        "was-forced", expect=S.RUNNING, version=1, to=S.PENDING_FORCE_DELETE, owner=owner
    )
    async with runner_worker(dev_env.client, world):
        # The reconciler resumes it with a plain request; the record says it was forced.
        handle = await world.request(dev_env.client, "was-forced", Requester.RECONCILER)
        result = await handle.result()
    assert result.forced and result.leaked_provider_id == "i-was-forced"
    assert world.status("was-forced") is S.DELETED


async def test_start_request_shows_in_the_view(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("seen", mode="slow", mode_seconds=1.0)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "seen", force=True, reason="why")
        await eventually(lambda: provider_started(world, "seen"), what="provider delete")
        view = await view_of(dev_env.client, "seen")
        await handle.result()
    assert view.force and view.requests == ["operator (force): why"]


async def test_a_retried_final_step_leaves_a_new_runner_with_the_name_alone(
    world: RunnerWorld,
) -> None:
    """The tombstone was written but the step's completion was lost; before the retry, a
    new runner took the name. The retry must not tombstone the new runner."""
    world.add_runner("reused", registered=False)
    old = world.leave_in_deleting("reused")
    owner = deletion_workflow_id("reused")
    env = activity_env(owner)
    acts = RunnerStoreActivities(world.store)
    call = FinishDeletion(runner="reused", incarnation=old.created_at)
    first = await env.run(acts.finish_deleted, call)
    assert first.record.instance_status is S.DELETED
    provider_state.remove_instance(world.provider_config, "i-reused")
    world.add_runner("reused", registered=False)  # a new incarnation
    again = await env.run(acts.finish_deleted, call)
    assert again.replaced and again.record.instance_status is S.RUNNING
    assert world.status("reused") is S.RUNNING
    assert not any(e.forced for e in world.store.audit("reused"))
