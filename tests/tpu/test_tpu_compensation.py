"""Compensation that finishes however the slice name was used before, and that is loud when
it cannot finish: bounded windows, a stuck status with the last error, bounded history."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.api_core.exceptions import NotFound
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.activities.tpu.cloud import DELETES_SENT, TpuActivities
from keeper.activities.tpu.policy import PolicyActivities
from keeper.domain.tpu.models import (
    BootstrapFailure,
    BootstrapResult,
    BootstrapRunInput,
    BootstrapStatus,
    CompensationPolicy,
    CreateSliceInput,
    DeleteSliceInput,
    DeletionReport,
    Owner,
    SliceRef,
    TeardownRequest,
    TpuPolicy,
)
from keeper.domain.tpu.naming import (
    bootstrap_run_workflow_id,
    bootstrap_workflow_id,
    teardown_workflow_id,
)
from keeper.domain.tpu.outcome import cleanup_summary
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.main import build_worker
from keeper.workflows.tpu.activity_options import COMPENSATION_FIRST_WINDOW
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.teardown import TpuSliceTeardown
from tests import harness
from tests.e2e_support import REPO, write_config
from tests.harness import assert_no_leaks, running_worker, slice_request
from tests.metrics_support import metered_client, scrape_until, value

# The demo's demo-stockout: the QR fails while queued, within seconds.
STOCKOUT = Scenario(
    assign_after=None,
    terminal={"state": "FAILED", "after": 8, "message": "no more capacity in zone"},
)


async def start(
    env: WorkflowEnvironment, queue: str, request: SliceRequest
) -> WorkflowHandle[TpuSliceBootstrap, BootstrapResult]:
    return await env.client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=BootstrapResult,
    )


async def failure_of(
    handle: WorkflowHandle[TpuSliceBootstrap, BootstrapResult],
) -> BootstrapFailure:
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError), cause
    return BootstrapFailure.model_validate(cause.details[0])


async def test_a_slice_name_reused_after_a_failure_is_compensated_again(
    time_env, clocked_emu: TpuEmulator
):
    request = slice_request("demo-stockout")
    clocked_emu.set_scenario(request.slice_name, STOCKOUT)
    qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}"
    async with running_worker(time_env.client, clocked_emu) as worker:
        for run in ("first", "second"):
            handle = await start(time_env, worker.task_queue, request)
            # A compensation sending the first run's request id again never ends: bounded.
            failure = await asyncio.wait_for(failure_of(handle), 60)
            assert failure.kind == "terminal", run
            assert failure.compensation is not None
            assert failure.compensation.deleted == [qr], run
    records = [q for q in clocked_emu.state()["queued_resources"] if q["id"] == request.slice_name]
    assert len(records) == 2
    assert all(record["deleted_at"] is not None for record in records)
    assert_no_leaks(clocked_emu)


async def test_a_stuck_compensation_is_reported_keeps_history_bounded_and_finishes(
    time_env, clocked_emu: TpuEmulator, caplog: pytest.LogCaptureFixture, tmp_path: Path
):
    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, STOCKOUT)
    # Every delete of this QR is refused until the test clears the fault, 2 hours on.
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    caplog.set_level(logging.WARNING)
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await start(time_env, worker.task_queue, request)
        # Awaiting the result is what lets the test server skip time.
        result = asyncio.create_task(failure_of(handle))
        stuck = await wait_for_status(handle, lambda s: s.compensation_stuck)
        assert stuck.compensation_started_at is not None
        assert stuck.compensation_stuck_since is not None
        assert stuck.compensation_stuck_since - stuck.compensation_started_at >= timedelta(
            minutes=15
        )
        assert "PermissionDenied" in (stuck.compensation_last_error or "")
        assert stuck.compensation is not None and stuck.compensation.startswith("stuck for")
        assert "grant roles/tpu.admin" in stuck.compensation
        assert any(
            "compensation of" in r.getMessage() and "stuck for" in r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING
        )
        # Time stands still (skipping off) while the CLI reads the stuck status.
        result.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await result
        config = write_config(tmp_path / "keeper.yaml", time_env, clocked_emu, worker.task_queue)
        code, out, err = await keeper(config, "tpu", "status", request.slice_name, "--json")
        assert code == 0, err
        shown = json.loads(out)
        assert {"workflow_id", "run_id", "status", "progress", "ui_url"} <= set(shown)
        assert shown["status"] == "RUNNING"
        assert shown["progress"]["compensation_stuck"] is True
        assert "PermissionDenied" in shown["progress"]["compensation_last_error"]
        code, out, err = await keeper(config, "tpu", "status", request.slice_name)
        assert code == 0, err
        # The status is data: on stdout.
        assert "compensation stuck" in out and "grant roles/tpu.admin" in out, out

        result = asyncio.create_task(failure_of(handle))
        two_hours_on = stuck.compensation_started_at + timedelta(hours=2)
        while await time_env.get_current_time() < two_hours_on:
            assert not result.done(), "compensation gave up while deletes were refused"
            await asyncio.sleep(0.05)
        clocked_emu.clear_faults()
        failure = await asyncio.wait_for(result, 120)
        history = await handle.fetch_history()
        final = await handle.query("status", result_type=BootstrapStatus)
    qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}"
    assert failure.compensation is not None
    assert (failure.compensation.deleted, failure.compensation.not_ours) == ([qr], [])
    assert not final.compensation_stuck
    assert final.compensation == f"deleted {request.slice_name}"
    # Windows double up to an hour: dozens of attempts, yet a few events per window,
    # however long it stays stuck. Two hours of 5, 10+, 30 and 60 minute windows are 4 or 5
    # (one more when the test clears the fault after a boundary has passed).
    deletes = [
        e for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "tpu.delete_slice"
    ]  # fmt: skip
    attempts = sum(
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    )
    assert 4 <= len(deletes) <= 7, len(deletes)
    assert attempts >= 50, attempts
    assert len(history.events) < 20 * len(deletes) + 20, len(history.events)
    assert_no_leaks(clocked_emu)


async def keeper(config: Path, *args: str) -> tuple[int, str, str]:
    """The keeper CLI in a process of its own, with lines wide enough not to wrap."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.cli.main", "--config", str(config), *args,
        cwd=REPO, env={**os.environ, "COLUMNS": "400"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


async def wait_for_status(
    handle: WorkflowHandle[TpuSliceBootstrap, BootstrapResult],
    condition: object,
    within: float = 60.0,
    *,
    skipping: WorkflowEnvironment | None = None,
) -> BootstrapStatus:
    """The bootstrap's status once `condition` holds. With `skipping` (a time-skipping
    environment), time is moved on 5 s between looks, so timers pass however the machine
    is loaded (a workflow task the test server failed is retried only after its timeout)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    seen: BootstrapStatus | None = None
    while loop.time() < end:
        try:
            seen = await handle.query("status", result_type=BootstrapStatus)
        except Exception:  # the first workflow task may not have run yet
            seen = None
        if seen is not None and condition(seen):  # type: ignore[operator]
            return seen
        if skipping is not None:
            await skipping.sleep(timedelta(seconds=5))
            continue
        # Not faster: the test server skips time only between queries, so a tight loop of
        # them on a loaded machine holds back the timers the condition waits for.
        await asyncio.sleep(0.25)
    raise AssertionError(f"{handle.id}: condition not met; last seen {seen}")


async def test_a_cancelled_bootstraps_stuck_compensation_shows_in_its_status_and_counts_once(
    time_env, clocked_emu: TpuEmulator, tmp_path: Path
):
    """A cancel reaches the phase child first, which compensates while its supervisor waits
    for it. The supervisor is what `keeper tpu status` reads and what counts a cancel's
    compensation, so that compensation turning stuck shows there, with its last error, and is
    counted stuck once, in the series the failure path counts into."""
    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    metered, metrics_url = await metered_client(time_env)
    queue = f"keeper-test-{uuid.uuid4().hex[:8]}"
    tpu = emulator_client(clocked_emu.grpc_target)
    # The worker publishes both stuck series at 0 (supervisor's and child's) as it starts.
    async with build_worker(metered, harness.settings_for_tests(), tpu, queue):
        handle = await start(time_env, queue, request)
        await wait_for_status(handle, lambda s: s.phase.value == "assign")
        await handle.cancel()
        # Time is moved on between looks (nothing else skips it meanwhile); it stands still
        # while the CLI reads the stuck status.
        stuck = await wait_for_status(handle, lambda s: s.compensation_stuck, skipping=time_env)
        assert stuck.phase.value == "compensate", stuck
        assert "PermissionDenied" in (stuck.compensation_last_error or ""), stuck
        assert stuck.compensation_stuck_since is not None
        assert stuck.compensation is not None and "grant roles/tpu.admin" in stuck.compensation
        config = write_config(tmp_path / "keeper.yaml", time_env, clocked_emu, queue)
        code, out, err = await keeper(config, "tpu", "status", request.slice_name, "--json")
        assert code == 0, err
        shown = json.loads(out)["progress"]
        assert shown["compensation_stuck"] is True, shown
        assert "PermissionDenied" in shown["compensation_last_error"], shown
        scraped = await scrape_until(
            metrics_url,
            {
                "keeper_compensations_total": {
                    "event": "stuck",
                    "workflow_type": "TpuSliceBootstrap",
                }
            },
        )
        assert stuck_series(scraped, queue) == [
            ("TpuSliceBootstrap", 1),
            ("TpuSliceBootstrapRun", 0),
        ]

        # More windows run out while it stays stuck (they double up to an hour); none is
        # counted again.
        result = asyncio.create_task(cancellation_of(handle))
        two_hours_on = stuck.compensation_stuck_since + timedelta(hours=2)
        while await time_env.get_current_time() < two_hours_on:
            assert not result.done(), "compensation gave up while deletes were refused"
            await asyncio.sleep(0.05)
        clocked_emu.clear_faults()
        cause = await asyncio.wait_for(result, 120)
        final = await handle.query("status", result_type=BootstrapStatus)
        scraped = await scrape_until(
            metrics_url, {"keeper_compensations_total": {"event": "finished"}}
        )
    assert isinstance(cause, CancelledError), cause
    # The child finished its compensation once the deletes went through; nothing is stuck.
    qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}"
    assert final.phase.value == "cancelled" and not final.compensation_stuck, final
    assert final.child_compensation is not None and final.child_compensation.deleted == [qr]
    assert stuck_series(scraped, queue) == [("TpuSliceBootstrap", 1), ("TpuSliceBootstrapRun", 0)]
    for event in ("started", "finished"):
        assert value(scraped, "keeper_compensations_total", family="tpu", event=event) == 1, event
    assert_no_leaks(clocked_emu)


async def cancellation_of(handle: WorkflowHandle[TpuSliceBootstrap, BootstrapResult]) -> object:
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    return caught.value.cause


def stuck_series(scraped: dict, queue: str) -> list[tuple[str, float]]:
    """Every series of the stuck counter on `queue`, by workflow type: the two the worker
    published at 0, unless something counted into a series of its own."""
    return sorted(
        (labels.get("workflow_type", ""), v)
        for (name, pairs), v in scraped.items()
        if name == "keeper_compensations_total"
        for labels in [dict(pairs)]
        if labels.get("event") == "stuck" and labels.get("task_queue") == queue
    )


async def test_a_long_stuck_compensation_continues_as_new_and_keeps_its_owner(
    time_env, clocked_emu: TpuEmulator, monkeypatch: pytest.MonkeyPatch
):
    from temporalio import workflow

    # The server suggests continue-as-new only past thousands of events; here, at once.
    monkeypatch.setattr(workflow.Info, "is_continue_as_new_suggested", lambda self: True)
    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, STOCKOUT)
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await start(time_env, worker.task_queue, request)
        first_run = handle.result_run_id
        latest = time_env.client.get_workflow_handle(handle.id)
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        # The test moves the server's time on itself, 5 s between looks: a background wait
        # for the result let it skip time only as fast as a loaded machine answered.
        while (await latest.describe()).run_id == first_run:
            assert loop.time() < end, "the supervisor never continued as new"
            await time_env.sleep(timedelta(seconds=5))
        carried = await wait_for_status(
            latest, lambda s: s.compensation_started_at is not None, skipping=time_env
        )
        clocked_emu.clear_faults()
        failure = await asyncio.wait_for(failure_of(handle), 120)
    assert carried.phase.value == "compensate"
    assert carried.compensation_last_error and "PermissionDenied" in carried.compensation_last_error
    # The QR's labels name the first run: the later run deleted it as its owner.
    qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}"
    assert failure.compensation is not None
    assert (failure.compensation.deleted, failure.compensation.not_ours) == ([qr], [])
    assert failure.kind == "terminal"
    assert_no_leaks(clocked_emu)


async def test_each_run_reads_the_workers_settings_once_and_a_change_reaches_the_next_run(
    time_env, clocked_emu: TpuEmulator, monkeypatch: pytest.MonkeyPatch
):
    """`tpu.policy` is read at the start of each run, never carried: the supervisor's first
    run reads a stuck threshold of 2 h, the worker's settings then change to 1 min, and the
    run that continues its compensation as new turns stuck by the new threshold."""
    from temporalio import workflow

    reads: list[tuple[str, str, timedelta]] = []  # workflow type, run id, stuck_after

    class ChangedAfterTheFirstRead(PolicyActivities):
        @activity.defn(name="tpu.policy")
        async def policy(self) -> TpuPolicy:
            stuck_after = timedelta(hours=2) if not reads else timedelta(minutes=1)
            info = activity.info()
            reads.append((info.workflow_type or "", info.workflow_run_id or "", stuck_after))
            compensation = CompensationPolicy(stuck_after=stuck_after)
            return (await super().policy()).model_copy(update={"compensation": compensation})

    monkeypatch.setattr("keeper.workers.families.tpu.PolicyActivities", ChangedAfterTheFirstRead)

    def supervisor_reads() -> int:
        return sum(1 for kind, _, _ in reads if kind == "TpuSliceBootstrap")

    # The server suggests continue-as-new only past thousands of events. Here it does once,
    # in the middle of the first run's compensation: after the first failed delete and
    # before the next run has read the policy.
    monkeypatch.setattr(
        workflow.Info,
        "is_continue_as_new_suggested",
        lambda self: supervisor_reads() == 1 and clocked_emu.calls["DeleteQueuedResource"] > 0,
    )
    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, STOCKOUT)
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await start(time_env, worker.task_queue, request)
        result = asyncio.create_task(failure_of(handle))
        latest = time_env.client.get_workflow_handle(handle.id)
        # The roll-over comes at the end of the first compensation window (5 min of skipped
        # time). The test server then runs retries in real time, so waiting out a window of
        # the continued run would take minutes; turning stuck at its start takes none.
        stuck = await wait_for_status(latest, lambda s: s.compensation_stuck, within=120)
        clocked_emu.clear_faults()
        # The test server runs the delete's retries in real time here, each up to a minute
        # apart (COMPENSATION_RETRY): a few of them on a loaded machine.
        await asyncio.wait_for(result, 300)
        runs = await runs_of(time_env.client, handle.id)
    assert stuck.compensation_started_at is not None and stuck.compensation_stuck_since
    # The first run's 2 h would have kept it retrying for two hours; the new 1 min turned it
    # stuck as the continued run started, not at the end of the window the first run planned.
    took = stuck.compensation_stuck_since - stuck.compensation_started_at
    assert took <= COMPENSATION_FIRST_WINDOW, took
    supervisor = [(run, after) for kind, run, after in reads if kind == "TpuSliceBootstrap"]
    # The first run read 2 h; it continued its compensation as new once, and that run read
    # the changed 1 min: once per run, never per window, and never carried.
    assert runs == 2, (runs, reads)
    assert [after for _, after in supervisor] == [timedelta(hours=2), timedelta(minutes=1)]
    assert len({run for run, _ in supervisor}) == 2, reads
    assert_no_leaks(clocked_emu)


async def runs_of(client: Client, workflow_id: str) -> int:
    """How many runs a workflow id has had, walked back from the latest run."""
    runs, run_id = 0, (await client.get_workflow_handle(workflow_id).describe()).run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs += 1
        run_id = history.events[
            0
        ].workflow_execution_started_event_attributes.continued_execution_run_id
    return runs


async def continued_input(child: WorkflowHandle[Any, Any]) -> BootstrapRunInput:
    """What the latest run of a phase child started from: the state the run before carried."""
    history = await child.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (inp,) = await pydantic_data_converter.decode(started.input.payloads, [BootstrapRunInput])
    return inp


async def test_a_stuck_teardown_continues_as_new_and_finishes_the_delete(
    time_env, clocked_emu: TpuEmulator, monkeypatch: pytest.MonkeyPatch
):
    from temporalio import workflow

    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, Scenario(assign_after=0, active_after=0))
    async with running_worker(time_env.client, clocked_emu) as worker:
        await time_env.client.execute_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=worker.task_queue,
            result_type=BootstrapResult,
        )
        clocked_emu.inject_fault(
            "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
        )
        # The server suggests continue-as-new only past thousands of events; here, at once.
        monkeypatch.setattr(workflow.Info, "is_continue_as_new_suggested", lambda self: True)
        handle = await time_env.client.start_workflow(
            TpuSliceTeardown.run,
            TeardownRequest(
                slice_name=request.slice_name, project=request.project, zone=request.zone
            ),
            id=teardown_workflow_id(request.slice_name),
            task_queue=worker.task_queue,
            result_type=DeletionReport,
        )
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        # Time moved on by the test, 5 s between looks, as in the supervisor's case above.
        while await runs_of(time_env.client, handle.id) < 2:
            assert loop.time() < end, "the teardown never continued as new"
            await time_env.sleep(timedelta(seconds=5))
        monkeypatch.undo()
        clocked_emu.clear_faults()
        report = await asyncio.wait_for(handle.result(), 120)
    qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}"
    assert report.deleted == [qr]
    assert_no_leaks(clocked_emu)


@pytest.mark.e2e
async def test_a_stuck_cancel_path_compensation_continues_as_new_and_finishes(
    dev_env, emu: TpuEmulator, monkeypatch: pytest.MonkeyPatch
):
    """The phase child compensates by itself when its supervisor is terminated; stuck, it
    too continues as new, the owner in its input, until the slice is gone. On the dev
    server: the time-skipping server cannot continue a child workflow as new."""
    from temporalio import workflow

    settings = harness.settings_for_tests()
    # The first window is then the shortest there is (a minute), not five.
    settings.bootstrap.compensation_stuck_after = timedelta(seconds=1)
    request = slice_request(poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    queue = f"keeper-test-{uuid.uuid4().hex[:8]}"
    # The worker counts into a Prometheus endpoint of its own, read back below.
    metered, metrics_url = await metered_client(dev_env)
    worker = build_worker(metered, settings, emulator_client(emu.grpc_target), queue)
    async with worker:
        handle = await start(dev_env, queue, request)
        await wait_for_status(handle, lambda s: s.phase.value == "assign")
        monkeypatch.setattr(workflow.Info, "is_continue_as_new_suggested", lambda self: True)
        # The parent close policy (REQUEST_CANCEL) cancels the child, which compensates.
        await handle.terminate(reason="test: the supervisor is lost")
        child = dev_env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        loop = asyncio.get_running_loop()
        end = loop.time() + 150
        while await runs_of(dev_env.client, child.id) < 2:
            assert loop.time() < end, "the child never continued as new"
            await asyncio.sleep(0.2)
        monkeypatch.undo()
        # The continued run starts as stuck as the run before, and knows what it counted.
        continued = await wait_for_status(child, lambda s: s.compensation_stuck)
        carry = (await continued_input(child)).carry
        assert carry is not None and carry.orphaned, continued
        assert sorted(carry.counted) == ["started", "stuck"], (carry.counted, continued)
        emu.clear_faults()
        with pytest.raises(WorkflowFailureError) as closed:
            await asyncio.wait_for(child.result(), 150)
        scraped = await scrape_until(
            metrics_url, {"keeper_compensations_total": {"family": "tpu", "event": "finished"}}
        )
    # Nobody else counts it (the supervisor was terminated): the child counts its compensation
    # once across its two runs, stuck included, though the second run starts stuck.
    for event in ("started", "stuck", "finished"):
        assert value(scraped, "keeper_compensations_total", family="tpu", event=event) == 1, event
    # The child counted into the stuck series its worker published at 0 when it started (the
    # supervisor's stays at 0): an alert's increase() saw 0 -> 1. A series born at 1, labelled
    # otherwise, would be a third one here, and fire nothing.
    stuck = sorted(
        v
        for (name, pairs), v in scraped.items()
        if name == "keeper_compensations_total" and ("event", "stuck") in pairs
    )
    assert stuck == [0, 1], stuck
    # The run that finished the compensation says what it did; the first run was cancelled.
    cause = closed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "BootstrapCancelled", cause
    assert "compensation" in cause.message and "finished" in cause.message
    assert_no_leaks(emu)


@pytest.mark.e2e
async def test_a_cancelled_bootstraps_child_continued_as_new_keeps_its_supervisor_informed(
    dev_env, emu: TpuEmulator, monkeypatch: pytest.MonkeyPatch
):
    """A cancel's compensation stuck long enough continues the phase child as new while its
    supervisor, alive, waits for it. The supervisor takes only a progress signal of a higher
    revision than the last: the continued run goes on from the status the run before sent, so
    `keeper tpu status` keeps following it, and its last report reaches the supervisor, which
    closes the bootstrap as cancelled saying the phase workflow deleted the slice. On the dev
    server: the time-skipping server cannot continue a child workflow as new."""
    from temporalio import workflow

    settings = harness.settings_for_tests()
    # The first window is then the shortest there is (a minute, which the server ends early
    # at about 30 s, when its next retry would not fit), not five.
    settings.bootstrap.compensation_stuck_after = timedelta(seconds=1)
    request = slice_request(poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    queue = f"keeper-test-{uuid.uuid4().hex[:8]}"
    metered, metrics_url = await metered_client(dev_env)
    worker = build_worker(metered, settings, emulator_client(emu.grpc_target), queue)
    async with worker:
        handle = await start(dev_env, queue, request)
        await wait_for_status(handle, lambda s: s.phase.value == "assign")
        # The server suggests continue-as-new only past thousands of events; here, at once.
        monkeypatch.setattr(workflow.Info, "is_continue_as_new_suggested", lambda self: True)
        await handle.cancel()
        result = asyncio.create_task(cancellation_of(handle))
        child = dev_env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        loop = asyncio.get_running_loop()
        end = loop.time() + 150
        while await runs_of(dev_env.client, child.id) < 2:
            assert loop.time() < end, "the child never continued as new"
            assert not result.done(), "the supervisor closed before its child"
            await asyncio.sleep(0.2)
        monkeypatch.undo()
        continued_at = (await child.describe()).start_time
        # What the supervisor shows comes from the continued run: the run before could not
        # have sent a status made after this run started.
        heard = await wait_for_status(
            handle, lambda s: s.updated_at is not None and s.updated_at >= continued_at, 30
        )
        assert heard.phase.value == "compensate" and heard.compensation_stuck, heard
        assert "PermissionDenied" in (heard.compensation_last_error or ""), heard
        # The bootstrap's view carries on across the runs: where it stopped, its timings.
        assert heard.failed_phase is not None and heard.failed_phase.value == "assign", heard
        assert [t.phase.value for t in heard.timings][:2] == ["submit", "assign"], heard
        emu.clear_faults()
        cause = await asyncio.wait_for(result, 120)
        final = await handle.query("status", result_type=BootstrapStatus)
        with pytest.raises(WorkflowFailureError) as closed:
            await child.result()
        scraped = await scrape_until(
            metrics_url, {"keeper_compensations_total": {"family": "tpu", "event": "finished"}}
        )
    qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}"
    # The continued run's last report reached the supervisor, which closed as cancelled.
    assert isinstance(cause, CancelledError), cause
    assert final.phase.value == "cancelled" and not final.compensation_stuck, final
    assert final.revision > heard.revision, (final, heard)
    assert final.child_compensation is not None and final.child_compensation.deleted == [qr]
    assert final.compensation == (
        f"the phase workflow deleted {request.slice_name} when it was cancelled"
    ), final
    # The continued run closes as the cancel it carried on, for its supervisor to take.
    child_cause = closed.value.cause
    assert isinstance(child_cause, CancelledError), child_cause
    assert f"has finished: deleted {request.slice_name}" in child_cause.message, child_cause
    assert handle.id in child_cause.message and "lost" not in child_cause.message, child_cause
    # The supervisor counted the compensation stuck once across the child's two runs; the
    # child, whose supervisor never went, counted nothing of its own.
    assert stuck_series(scraped, queue) == [("TpuSliceBootstrap", 1), ("TpuSliceBootstrapRun", 0)]
    for event in ("started", "finished"):
        assert value(scraped, "keeper_compensations_total", family="tpu", event=event) == 1, event
    assert_no_leaks(emu)


async def test_a_retry_after_an_attempt_cut_short_says_the_compensation_deleted_it(
    emu: TpuEmulator,
):
    name = f"cut-{uuid.uuid4().hex[:6]}"
    # Waits for capacity, so it is the QR alone; its delete takes a moment to finish.
    emu.set_scenario(name, Scenario(assign_after=None, delete_duration=1.0))
    tpu = emulator_client(emu.grpc_target)
    activities = TpuActivities(tpu, call_timeout=timedelta(seconds=5))
    request = slice_request(name)
    owner = Owner(workflow_id=bootstrap_workflow_id(name), run_id=str(uuid.uuid4()))
    created = await ActivityEnvironment().run(
        activities.create_slice,
        CreateSliceInput(request=request, owner=owner, request_id=str(uuid.uuid4()),
                         valid_until=timedelta(hours=1)),
    )  # fmt: skip
    qr = created.name
    inp = DeleteSliceInput(
        slice=SliceRef.of(request),
        owner_workflow_id=owner.workflow_id,
        owner_run_id=owner.run_id,
        reason="test",
    )

    # The first attempt sends the force delete, heartbeats, and its worker is gone.
    first = ActivityEnvironment()
    beats: list[tuple[object, ...]] = []
    sent = asyncio.Event()

    def heard(*details: object) -> None:
        beats.append(details)
        if any(isinstance(d, dict) and d.get(DELETES_SENT) == [qr] for d in details):
            sent.set()

    first.on_heartbeat = heard
    attempt = asyncio.ensure_future(first.run(activities.delete_slice, inp))
    await asyncio.wait_for(sent.wait(), 30)
    first.cancel()
    with contextlib.suppress(BaseException):
        await attempt
    for _ in range(300):  # the delete it sent finishes without it
        try:
            await tpu.get_queued_resource(name=qr)
        except NotFound:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"{qr} was never deleted")

    # The next attempt gets the last heartbeat, as Temporal hands it to a retry.
    second = ActivityEnvironment()
    second.info = dataclasses.replace(second.info, attempt=2, heartbeat_details=list(beats[-1]))
    report = await second.run(activities.delete_slice, inp)
    assert report.deleted == [qr] and report.deleted_earlier == [qr], report
    said = cleanup_summary(report, kind="error", slice_name=name)
    assert said == (
        f"deleted {name} (an earlier attempt of the compensation sent the delete and was cut "
        "short; the next attempt found it gone)"
    )

    # Without that heartbeat, nothing says who deleted it: it was gone, named once.
    unknown = await ActivityEnvironment().run(activities.delete_slice, inp)
    assert unknown.deleted == [] and qr in unknown.already_gone, unknown
    assert cleanup_summary(unknown, kind="error", slice_name=name) == (
        f"nothing was left to delete: {name} was already gone when compensation looked "
        "(never created, or deleted before it ran)"
    )
