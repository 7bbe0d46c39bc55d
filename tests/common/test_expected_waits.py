"""An activity that waits reads as a wait where operators look: the pending activity in the
Temporal UI and `temporal workflow describe` shows a summary, a last failure of keeper's
WAITING type saying what it waits for and when it looks next, and no stack trace
(runtime/waiting.py, on keeper's data converter)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.activities.watch.observe import raise_unless_due
from keeper.domain.tpu.models import BootstrapResult
from keeper.domain.tpu.naming import bootstrap_run_workflow_id, bootstrap_workflow_id
from keeper.domain.watch.calls import ObserveCall
from keeper.runtime.temporal_client import DATA_CONVERTER, connect
from keeper.runtime.waiting import WAITING, next_look_in, waiting
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests import harness
from tests.harness import assert_no_leaks, running_worker, slice_request

NEXT_LOOK = re.compile(r"next look at (\d\d):(\d\d):(\d\d) UTC")


def _env(attempt: int, policy: RetryPolicy | None) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt, retry_policy=policy)
    return env


def test_the_next_look_follows_the_retry_policy() -> None:
    steady = RetryPolicy(initial_interval=timedelta(seconds=30), backoff_coefficient=1.0)
    growing = RetryPolicy(
        initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=60)
    )
    default_cap = RetryPolicy(initial_interval=timedelta(seconds=1))
    for attempt, policy, want in (
        (243, steady, timedelta(seconds=30)),
        (1, growing, timedelta(seconds=2)),
        (3, growing, timedelta(seconds=8)),
        (40, growing, timedelta(seconds=60)),
        # Temporal's default ceiling: 100 initial intervals.
        (10_000, default_cap, timedelta(seconds=100)),
    ):
        assert next_look_in(_env(attempt, policy).info) == want
    assert next_look_in(_env(1, None).info) is None


def test_a_wait_says_what_it_waits_for_and_when_it_looks_next() -> None:
    env = _env(5, RetryPolicy(initial_interval=timedelta(minutes=10), backoff_coefficient=1.0))
    before = datetime.now(UTC)
    err = env.run(lambda: waiting("capacity to be assigned", 7, seen="QR WAITING_FOR_RESOURCES"))
    assert err.type == WAITING and err.category is ApplicationErrorCategory.BENIGN
    assert err.message.startswith("waiting for capacity to be assigned, next look at ")
    assert err.message.endswith(" UTC; last look: QR WAITING_FOR_RESOURCES")
    assert _apart(err.message, before + timedelta(minutes=10)) in (0, 1)
    assert err.details == (7,)
    # The policy decides the delay; a wait with a time of its own tells Temporal.
    assert err.next_retry_delay is None
    due = env.run(lambda: waiting("the check to be due", next_look=timedelta(seconds=3)))
    assert due.next_retry_delay == timedelta(seconds=3)


def test_a_watch_check_that_is_not_due_is_a_wait_with_its_own_delay() -> None:
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(raise_unless_due, ObserveCall(job_id="/alice/train", wait_s=90))
    err = raised.value
    assert err.type == WAITING and err.next_retry_delay == timedelta(seconds=90)
    assert err.message.startswith("waiting for the check of /alice/train to be due, next look")


def _raised(err: Exception) -> Exception:
    try:
        raise err
    except Exception as caught:
        return caught


def test_keepers_converter_drops_the_stack_trace_of_a_wait_only() -> None:
    from temporalio.api.failure.v1 import Failure

    env = _env(2, RetryPolicy(initial_interval=timedelta(seconds=1)))
    wait = _raised(env.run(lambda: waiting("capacity to be assigned")))
    other = _raised(ApplicationError("the API refused", type="PermissionDenied"))
    converter = DATA_CONVERTER.failure_converter
    shown = {}
    for name, err in (("wait", wait), ("other", other)):
        failure = Failure()
        converter.to_failure(err, DATA_CONVERTER.payload_converter, failure)
        shown[name] = failure
    assert shown["wait"].application_failure_info.type == WAITING
    assert shown["wait"].message.startswith("waiting for capacity to be assigned")
    assert shown["wait"].stack_trace == ""
    # Any other failure keeps its trace: that one is worth reading.
    assert "_raised" in shown["other"].stack_trace


def test_keepers_converter_never_formats_the_trace_it_drops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Formatting a trace reads the source of every frame: paid on every poll and check, it
    was the largest part of a waiting attempt's conversion. A wait's is never formatted."""
    import temporalio.converter._failure_converter as sdk_failures
    from temporalio.api.failure.v1 import Failure

    formatted: list[object] = []
    real = sdk_failures.traceback.format_tb

    def counting(tb: object, *args: object) -> list[str]:
        formatted.append(tb)
        return real(tb, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sdk_failures.traceback, "format_tb", counting)
    env = _env(2, RetryPolicy(initial_interval=timedelta(seconds=1)))
    converter = DATA_CONVERTER.failure_converter
    wait = _raised(env.run(lambda: waiting("capacity to be assigned")))
    assert wait.__traceback__ is not None
    converter.to_failure(wait, DATA_CONVERTER.payload_converter, Failure())
    assert formatted == []
    other = _raised(ApplicationError("the API refused", type="PermissionDenied"))
    converter.to_failure(other, DATA_CONVERTER.payload_converter, Failure())
    assert len(formatted) == 1


def _apart(message: str, at: datetime) -> int:
    """Seconds from `at` to the time of day the message's "next look at" names."""
    match = NEXT_LOOK.search(message)
    assert match, message
    h, m, s = (int(g) for g in match.groups())
    t = at.astimezone(UTC)
    apart = (h * 3600 + m * 60 + s - (t.hour * 3600 + t.minute * 60 + t.second)) % 86400
    return apart - 86400 if apart > 43200 else apart


async def _waiting_poll(handle: WorkflowHandle) -> PendingActivityInfo:
    """The phase child's poll once it waits for its next attempt after a failed one."""
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        try:
            described = await handle.describe()
        except RPCError as err:
            # The supervisor starts its phase child a moment after it starts itself.
            assert err.status is RPCStatusCode.NOT_FOUND, err
            await asyncio.sleep(0.1)
            continue
        for pending in described.raw_description.pending_activities:
            if (
                pending.activity_type.name == "tpu.observe_slice"
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
                and pending.HasField("last_failure")
                and pending.HasField("next_attempt_schedule_time")
            ):
                return pending
        assert asyncio.get_running_loop().time() < deadline, "the poll never waited"
        await asyncio.sleep(0.1)


@pytest.mark.e2e
async def test_a_waiting_poll_reads_as_a_wait_in_its_pending_activity(
    dev_env: WorkflowEnvironment, emu: TpuEmulator
) -> None:
    settings = harness.settings_for_tests()
    settings.temporal.address = dev_env.client.service_client.config.target_host
    # keeper's own client, as `keeper worker` connects: its data converter is the one that
    # encodes the worker's activity failures.
    client = await connect(settings.temporal)
    request = slice_request(poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    async with running_worker(client, emu) as worker:
        handle = await client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=worker.task_queue,
            result_type=BootstrapResult,
        )
        child = client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        pending = await _waiting_poll(child)
        scheduled = [
            event.user_metadata.summary
            async for event in child.fetch_history_events()
            if event.activity_task_scheduled_event_attributes.activity_id == pending.activity_id
        ]
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
    failure = pending.last_failure
    assert failure.application_failure_info.type == WAITING, failure
    assert failure.message.startswith("waiting for capacity to be assigned, next look at "), failure
    assert re.search(r"; last look: QR [A-Z_]+, 0/4 VMs with IP$", failure.message), failure
    assert failure.stack_trace == "", failure.stack_trace
    # The next look it names is when the server schedules the next attempt (to the second).
    next_attempt = pending.next_attempt_schedule_time.ToDatetime(tzinfo=UTC)
    assert _apart(failure.message, next_attempt) in (-2, -1, 0, 1, 2), (failure, next_attempt)
    # Bounded by the phase's deadline, not "No Expiration".
    assert pending.HasField("expiration_time")
    (summary,) = scheduled
    text = PayloadConverter.default.from_payloads([summary])[0]
    assert re.fullmatch(r"assign: wait for capacity to be assigned \(deadline .* UTC\)", text)
    assert_no_leaks(emu)
