"""`keeper job` speaks as every keeper command does (cli/output.py, docs/cli.md) against a
real Temporal dev server: a watch starts once per job, bad job ids start nothing, status
shows the view in text and JSON, approve and deny reach the workflow's updates (by id and
by kind) and a refusal is exit 1 with the workflow's own words, unwatch cancels, list
filters on the search attributes.

The JobWatch workflow is stood in for here by a small one with the same names (type, query,
updates, search attributes): the test sets what it shows through signals of its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from aiohttp import web
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from keeper.cli.watch import launch
from keeper.cli.watch.commands import job
from keeper.domain.watch.calls import JobWatchInput, JobWatchResult
from keeper.domain.watch.models import (
    APPROVE_UPDATE,
    DENY_UPDATE,
    STATUS_QUERY,
    WATCH_WORKFLOW_TYPE,
    AttemptView,
    Decision,
    ProgressView,
    Proposal,
    ProposalKind,
    ProposalState,
    TimelineEntry,
    WatchOutcome,
    WatchPhase,
    WatchView,
    watch_id,
)
from keeper.runtime.watch import search_attributes as sa
from keeper.store.watch import open_launch_store
from keeper.wire.iris import connect
from tests.e2e_support import REPO, dev_address
from tests.harness import tool_path
from tests.reclaim.test_reclaim_cli import Done, keeper, keeper_now
from tests.reclaim.test_reclaim_secrets import assert_absent
from tests.reclaim.world import free_port, until

pytestmark = pytest.mark.e2e
RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def verdict_value(view: WatchView) -> Any:
    """The Verdict attribute's value: a one-value keyword list (SQL visibility has ten
    Keyword columns, and keeper's families fill them)."""
    return [view.verdict]


# ---- the stand-in JobWatch -------------------------------------------------------------


@workflow.defn(name=WATCH_WORKFLOW_TYPE, sandboxed=False)
class StandInWatch:
    """JobWatch's public surface and nothing else: it shows what the test signals, decides
    proposals as the real one's validator would allow, and runs until cancelled (then ends
    as unwatched) or told how to end."""

    @workflow.init
    def __init__(self, request: JobWatchInput) -> None:
        self.view = WatchView(job_id=request.job_id, requested_by=request.requested_by)
        self.result: JobWatchResult | None = None
        self.failure: str | None = None

    @workflow.run
    async def run(self, request: JobWatchInput) -> JobWatchResult:
        try:
            await workflow.wait_condition(lambda: self.result is not None or bool(self.failure))
        except asyncio.CancelledError:
            return JobWatchResult(
                job_id=request.job_id,
                outcome=WatchOutcome.UNWATCHED,
                job_state=self.view.job_state,
                verdicts=len(self.view.timeline),
            )
        if self.failure:
            raise ApplicationError(self.failure, non_retryable=True)
        assert self.result is not None
        return self.result

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> WatchView:
        return self.view

    @workflow.signal
    def show(self, view: WatchView) -> None:
        self.view = view
        workflow.upsert_search_attributes(
            [sa.KEEPER_STEP.value_set(view.job_state), sa.VERDICT.value_set(verdict_value(view))]
        )

    @workflow.signal
    def end(self, result: JobWatchResult) -> None:
        self.result = result

    @workflow.signal
    def fail(self, message: str) -> None:
        self.failure = message

    def _check(self, decision: Decision) -> None:
        found = {p.id: p for p in self.view.proposals}.get(decision.proposal)
        if found is None:
            raise ValueError(f"no proposal {decision.proposal} in the watch of {self.view.job_id}")
        if found.state is not ProposalState.PENDING:
            raise ValueError(f"proposal {found.id} is {found.state.value}, not pending")

    def _decide(self, decision: Decision, state: ProposalState, outcome: str) -> Proposal:
        decided: Proposal | None = None
        proposals = []
        for p in self.view.proposals:
            if p.id == decision.proposal:
                p = decided = p.model_copy(
                    update={
                        "state": state,
                        "decided_by": decision.by,
                        "decided_at": workflow.now(),
                        "note": decision.note or None,
                        "outcome": outcome,
                    }
                )
            proposals.append(p)
        self.view = self.view.model_copy(update={"proposals": proposals})
        assert decided is not None
        return decided

    @workflow.update(name=APPROVE_UPDATE)
    def approve(self, decision: Decision) -> Proposal:
        # The real watch answers once the step is carried out.
        return self._decide(decision, ProposalState.DONE, "carried out")

    @approve.validator
    def _approve_valid(self, decision: Decision) -> None:
        self._check(decision)

    @workflow.update(name=DENY_UPDATE)
    def deny(self, decision: Decision) -> Proposal:
        return self._decide(decision, ProposalState.DENIED, "left alone")

    @deny.validator
    def _deny_valid(self, decision: Decision) -> None:
        self._check(decision)


# ---- the world: a worker for the stand-in, and settings that point keeper at it -----------


@dataclass
class World:
    client: Client
    config: Path
    # The iris controller the config names: it knows every job but those named `nosuch-*`.
    iris_url: str = ""

    def job(self, name: str = "job") -> str:
        return f"/alice/{name}-{uuid.uuid4().hex[:8]}"

    def handle(self, job_id: str) -> Any:
        return self.client.get_workflow_handle(watch_id(job_id))

    async def show(self, job_id: str, view: WatchView) -> None:
        await self.handle(job_id).signal(StandInWatch.show, view)

    async def keeper(self, *args: str, user: str = "alice") -> Done:
        return await keeper(self.config, "job", *args, env={"USER": user})

    async def watches_of(self, job_id: str) -> list[Any]:
        query = f'WorkflowType="{WATCH_WORKFLOW_TYPE}" AND {sa.JOB_ID.name}="{job_id}"'
        return [wf async for wf in self.client.list_workflows(query)]


@pytest.fixture(scope="module")
async def watch_server() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of this module's own that registers only the watch family's search
    attributes: SQL visibility holds ten Keyword attributes, and what the other families
    register must not decide whether these tests can run."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=tool_path("temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=list(sa.WATCH_ATTRIBUTES),
        ui=False,
        dev_server_log_level="error",
    )
    async with env:
        yield env


async def known_job_status(request: web.Request) -> web.Response:
    """iris's GetJobStatus for a controller that runs every job but those named nosuch-*."""
    job_id = (await request.json())["jobId"]
    if job_id.rsplit("/", 1)[-1].startswith("private-"):
        return web.json_response(
            {"code": "permission_denied", "message": "not your job"}, status=403
        )
    if job_id.rsplit("/", 1)[-1].startswith("nosuch-"):
        return web.json_response(
            {"code": "not_found", "message": f"job {job_id} not found"}, status=404
        )
    return web.json_response({"job": {"jobId": job_id, "state": "JOB_STATE_RUNNING"}})


@contextlib.asynccontextmanager
async def http_server(*routes: tuple[str, Any]) -> AsyncIterator[str]:
    """An HTTP server on a free port serving POST `routes`; its base URL."""
    app = web.Application()
    for path, handler in routes:
        app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture(scope="module")
async def world(
    watch_server: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    dev_env = watch_server
    stem = f"keeper-test-{uuid.uuid4().hex[:8]}"
    config = tmp_path_factory.mktemp("watch-cli") / "keeper.yaml"
    async with http_server((connect.GET_JOB_STATUS, known_job_status)) as iris_url:
        config.write_text(
            yaml.safe_dump(
                {
                    "temporal": {
                        "address": dev_address(dev_env),
                        "namespace": "default",
                        "task_queue": stem,
                    },
                    "watch": {"controller_url": iris_url, "call_timeout": "5s"},
                }
            )
        )
        async with Worker(dev_env.client, task_queue=f"{stem}-watch", workflows=[StandInWatch]):
            yield World(dev_env.client, config, iris_url)


def offline_config(tmp_path: Path) -> Path:
    """Settings whose Temporal nobody answers at: a command that connects exits 1."""
    path = tmp_path / "offline.yaml"
    path.write_text(yaml.safe_dump({"temporal": {"address": f"127.0.0.1:{free_port()}"}}))
    return path


def proposal(kind: ProposalKind, number: int, **extra: Any) -> Proposal:
    return Proposal(
        id=f"{kind.value}-{number}",
        kind=kind,
        reason=f"{kind.value} it: stuck behind one shard",
        why=f"a {kind.value} is what clears it",
        evidence=["4999/5000 complete, 1 in-flight, 0 queued for 40m"],
        key=f"stuck-stage-{number}",
        created_at=T0,
        **extra,
    )


def stalled_view(job_id: str, *proposals: Proposal) -> WatchView:
    return WatchView(
        job_id=job_id,
        phase=WatchPhase.ESCALATED,
        job_state="running",
        verdict="stalled",
        verdict_reason="no shard progress for 40m and no CPU delta",
        evidence=["cpu delta 0 over 3s on host w-3", "progress 4999/5000 unchanged for 8 checks"],
        attempt=AttemptView(
            pipeline=0,
            attempt=1,
            coordinator=f"{job_id}/zephyr-tok-1a2b3c4d-p0-a1-coord",
            workers=f"{job_id}/zephyr-tok-1a2b3c4d-p0-a1-workers",
            coordinator_state="running",
            workers_running=7,
            workers_total=8,
        ),
        progress=ProgressView(
            stage="stage1-Reduce → Scatter",
            done=4999,
            total=5000,
            in_flight=1,
            queued=0,
            workers_alive=7,
            at=T0,
        ),
        stale_coordinators=[f"{job_id}/zephyr-tok-0f0f0f0f-p0-a0-coord"],
        escalations=["stragglers: 1 in-flight, 0 queued, 7 of 8 workers idle"],
        proposals=list(proposals),
        timeline=[
            TimelineEntry(at=T0, phase=WatchPhase.SMOKE, verdict="unknown", reason="first look"),
            TimelineEntry(
                at=T0 + timedelta(minutes=5),
                phase=WatchPhase.STEADY,
                verdict="running",
                reason="progress advancing",
                attempt="p0-a1",
            ),
            TimelineEntry(
                at=T0 + timedelta(minutes=45),
                phase=WatchPhase.ESCALATED,
                verdict="stalled",
                reason="no shard progress for 40m",
                attempt="p0-a1",
            ),
        ],
        checks=12,
        last_check_at=T0 + timedelta(minutes=45),
        requested_by="alice",
    )


async def started(w: World, job_id: str) -> None:
    done = await w.keeper("watch", job_id, "--json")
    assert done.code == 0 and done.json()["started"] is True, done


# ---- watch ------------------------------------------------------------------------------


async def test_watch_starts_one_watch_and_a_second_call_shows_it_without_starting_another(
    world: World,
) -> None:
    job_id = world.job("tokenize")
    first = await world.keeper("watch", job_id, "--by", "bob", "--json")
    assert first.code == 0, first
    body = first.json()
    assert body["started"] is True and body["status"] == "RUNNING" and body["view"] is None
    assert (body["job_id"], body["workflow_id"]) == (job_id, watch_id(job_id))
    assert body["run_id"] and body["ui_url"].endswith(
        "/workflows/" + watch_id(job_id).replace("/", "%2F") + f"/{body['run_id']}/user-metadata"
    )

    description = await world.handle(job_id).describe()
    assert description.task_queue.endswith("-watch")
    assert description.typed_search_attributes.get(sa.JOB_ID) == job_id
    assert description.typed_search_attributes.get(sa.VERDICT) == ["unknown"]
    assert await description.static_summary() == f"watch {job_id}"
    assert "keeper job approve" in (await description.static_details() or "")
    view = await world.handle(job_id).query(StandInWatch.status)
    assert view.requested_by == "bob"

    # Again, in text: the running watch is shown, with its status, and nothing is started.
    again = await world.keeper("watch", job_id)
    assert again.code == 0, again
    assert again.out.startswith(
        f"already watching {job_id}: {watch_id(job_id)} RUNNING (phase smoke"
    )
    assert "verdict unknown" in again.out and "ui: http" in again.out
    as_json = (await world.keeper("watch", job_id, "--json")).json()
    assert as_json["started"] is False and as_json["run_id"] == body["run_id"]
    assert as_json["view"]["job_id"] == job_id
    assert [wf.run_id for wf in await world.watches_of(job_id)] == [body["run_id"]]


async def test_a_closed_watch_of_the_same_job_is_started_afresh(world: World) -> None:
    job_id = world.job()
    await started(world, job_id)
    first = await world.handle(job_id).describe()
    done = await world.keeper("unwatch", job_id)
    assert done.code == 0, done
    text = await world.keeper("watch", job_id)
    assert text.code == 0 and text.out.startswith(f"watching {job_id}: {watch_id(job_id)} (run "), (
        text
    )
    second = await world.handle(job_id).describe()
    assert second.run_id != first.run_id and second.status is WorkflowExecutionStatus.RUNNING
    # The requester defaults to $USER.
    assert (await world.handle(job_id).query(StandInWatch.status)).requested_by == "alice"


async def test_watch_of_a_job_iris_does_not_know_exits_1_naming_it_and_starts_nothing(
    world: World,
) -> None:
    job_id = world.job("nosuch-tokenize")
    text = await world.keeper("watch", job_id)
    assert text.code == 1 and text.out == "", text
    assert f"iris at {world.iris_url} knows no job {job_id}; nothing is watched" in text.err
    assert "check the job id" in text.err.lower() and "keeper job run" in text.err
    assert "Traceback" not in text.err and "internal error" not in text.err
    error = (await world.keeper("watch", job_id, "--json")).error()
    assert (error["job_id"], error["controller_url"]) == (job_id, world.iris_url), error
    assert error["exit_code"] == 1 and "usage" not in error
    assert await world.watches_of(job_id) == []


async def test_watch_whose_check_iris_refuses_this_shell_says_so_and_starts_the_watch(
    world: World,
) -> None:
    # The worker reads iris with its own token; the operator's shell may have none.
    job_id = world.job("private-tokenize")
    text = await world.keeper("watch", job_id)
    assert text.code == 0 and text.out.startswith(f"watching {job_id}: "), text
    assert f"warning: could not check that iris knows {job_id}" in text.err, text
    assert "ends `missing` if the job is not there" in text.err
    assert len(await world.watches_of(job_id)) == 1


async def test_watch_when_iris_does_not_answer_exits_1_saying_so_and_starts_nothing(
    world: World,
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    config = with_iris(world.config, nobody)
    job_id = world.job("tokenize")
    text = await keeper(config, "job", "watch", job_id, env={"USER": "alice"})
    assert text.code == 1 and text.out == "", text
    assert f"iris at {nobody} did not answer" in text.err and "nothing is watched" in text.err
    assert "knows no job" not in text.err  # unreachable is not "no such job"
    assert "watch.controller_url" in text.err
    assert await world.watches_of(job_id) == []


BAD_IDS = ["alice/tokenize", "/alice", "/alice/bad name", "/alice/-x", "/alice/" + "x" * 400, ""]


@pytest.mark.parametrize(
    "bad", BAD_IDS, ids=["no-slash", "no-job", "space", "dash", "long", "empty"]
)
def test_a_bad_job_id_exits_2_naming_job_id_before_anything_is_sent(
    tmp_path: Path, bad: str
) -> None:
    # Temporal is unreachable here: had the command got as far as connecting, it would have
    # exited 1 saying so.
    config = offline_config(tmp_path)
    for command in (
        ["watch"],
        ["status"],
        ["unwatch"],
        ["approve", "--by", "a"],
        ["deny", "--by", "a"],
    ):
        extra = ["restart-1"] if command[0] in ("approve", "deny") else []
        text = keeper_now(config, "job", *command, "--", bad, *extra)
        assert text.code == 2 and text.out == "", text
        assert "Error: JOB_ID: " in text.err and "nothing was done" in text.err, text
        assert "cannot reach Temporal" not in text.err, text
    error = keeper_now(config, "job", "watch", "--json", "--", bad).error()
    assert error["usage"] is True and error["param"] == "JOB_ID", error


async def test_a_bad_job_id_starts_no_watch_on_a_live_server(world: World) -> None:
    done = await world.keeper("watch", "alice/no-leading-slash")
    assert done.code == 2 and done.out == "", done
    assert await world.watches_of("alice/no-leading-slash") == []


# ---- status -----------------------------------------------------------------------------


async def test_status_shows_verdict_evidence_progress_and_the_commands_that_answer_a_proposal(
    world: World,
) -> None:
    job_id = world.job("tokenize")
    await started(world, job_id)
    decided = proposal(ProposalKind.STOP, 1, state=ProposalState.DENIED, decided_by="carol")
    await world.show(job_id, stalled_view(job_id, proposal(ProposalKind.RESTART, 2), decided))

    text = await world.keeper("status", job_id)
    assert text.code == 0 and text.err == "", text
    lines = text.out.splitlines()
    assert lines[0] == f"{job_id}  watch RUNNING"
    assert lines[1].startswith(
        "phase: escalated  job: running  checks: 12  last check: 2026-12-01T12:45:00Z"
    )
    assert lines[2] == "verdict: stalled (no shard progress for 40m and no CPU delta)"
    assert "  - cpu delta 0 over 3s on host w-3" in lines
    assert (
        f"attempt: p0 a1: coordinator {job_id}/zephyr-tok-1a2b3c4d-p0-a1-coord (running), "
        f"workers {job_id}/zephyr-tok-1a2b3c4d-p0-a1-workers 7/8 running"
    ) in lines
    assert (
        "progress: [stage1-Reduce → Scatter] 4999/5000 complete, 1 in-flight, 0 queued, "
        "7 workers alive (at 2026-12-01T12:00:00Z)"
    ) in lines
    assert "zephyr-tok-0f0f0f0f-p0-a0-coord" in text.out and "stale coordinators" in text.out
    assert "  - stragglers: 1 in-flight, 0 queued, 7 of 8 workers idle" in lines
    assert "    why: a restart is what clears it" in lines
    assert f"    approve: keeper job approve {job_id} restart-2" in lines
    assert f"    deny:    keeper job deny {job_id} restart-2" in lines
    assert "  stop-1 (stop): denied by carol" in lines
    assert f"keeper job approve {job_id} stop-1" not in text.out  # decided: nothing to answer
    assert "timeline (last 3 of 3):" in lines
    assert "  2026-12-01T12:45:00Z  escalated  stalled [p0-a1]  no shard progress for 40m" in lines
    run_id = (await world.handle(job_id).describe()).run_id
    assert lines[-1].startswith("ui: http") and lines[-1].endswith(
        watch_id(job_id).replace("/", "%2F") + f"/{run_id}/user-metadata"
    )

    body = (await world.keeper("status", job_id, "-o", "json")).json()
    shown = WatchView.model_validate(body["view"])
    assert shown == stalled_view(job_id, proposal(ProposalKind.RESTART, 2), decided)
    assert body["view"]["last_check_at"] == "2026-12-01T12:45:00Z"
    assert [p["id"] for p in body["view"]["proposals"]] == ["restart-2", "stop-1"]
    assert all(re.fullmatch(RFC3339, e["at"]) for e in body["view"]["timeline"])
    assert (body["workflow_id"], body["status"], body["result"]) == (
        watch_id(job_id),
        "RUNNING",
        None,
    )
    assert (
        body["run_id"] and re.fullmatch(RFC3339, body["started_at"]) and body["closed_at"] is None
    )


async def test_status_of_a_job_nobody_watches_exits_1_saying_how_to_start_one(world: World) -> None:
    job_id = world.job("nobody")
    text = await world.keeper("status", job_id)
    assert text.code == 1 and text.out == "", text
    assert f"no watch of {job_id}; start one with `keeper job watch {job_id}`" in text.err
    error = (await world.keeper("status", job_id, "--json")).error()
    assert error["job_id"] == job_id and "keeper job list --all" in error["hint"]
    assert "usage" not in error


async def test_status_of_a_closed_watch_shows_its_result(world: World) -> None:
    job_id = world.job()
    await started(world, job_id)
    await world.show(
        job_id, WatchView(job_id=job_id, phase=WatchPhase.FINISHED, job_state="failed")
    )
    ended = JobWatchResult(
        job_id=job_id, outcome=WatchOutcome.FAILED, job_state="failed",
        cause="RuntimeError: CUDA out of memory", verdicts=4,
    )  # fmt: skip
    await world.handle(job_id).signal(StandInWatch.end, ended)
    await world.handle(job_id).result()

    text = await world.keeper("status", job_id)
    assert text.code == 0, text
    assert text.out.startswith(f"{job_id}  watch COMPLETED\nresult: failed: job failed, cause: ")
    assert "RuntimeError: CUDA out of memory; 4 verdicts" in text.out
    assert "phase: finished  job: failed" in text.out
    body = (await world.keeper("status", job_id, "--json")).json()
    assert body["status"] == "COMPLETED" and body["result"] == ended.model_dump(mode="json")
    assert re.fullmatch(RFC3339, body["closed_at"]) and body["view"]["phase"] == "finished"


async def stamped_line(stream: asyncio.StreamReader) -> str:
    """The next line `--follow` printed, without its RFC 3339 stamp (checked)."""
    raw = await asyncio.wait_for(stream.readline(), 60)
    stamp, _, text = raw.decode().rstrip("\n").partition(" ")
    assert re.fullmatch(RFC3339, stamp), raw
    return text


# `--wait` is the flag's earlier name: the same follow.
@pytest.mark.parametrize(("how", "code", "flag"), [("end", 0, "--follow"), ("fail", 1, "--wait")])
async def test_status_follow_prints_a_line_per_change_and_exits_by_how_the_watch_ended(
    world: World, how: str, code: int, flag: str
) -> None:
    job_id = world.job(f"follow-{how}")
    await started(world, job_id)
    # A real process with its stdout a pipe, read line by line as the watch changes.
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.cli.main", "--config", str(world.config),
        "job", "status", job_id, flag,
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        first = await stamped_line(process.stdout)
        assert first == f"{job_id} phase=smoke job=unknown verdict=unknown (not checked yet)"
        await world.show(job_id, stalled_view(job_id, proposal(ProposalKind.RESTART, 1)))
        second = await stamped_line(process.stdout)
        assert second == (
            f"{job_id} phase=escalated job=running verdict=stalled (no shard progress for 40m "
            "and no CPU delta) progress=[stage1-Reduce → Scatter] 4999/5000 q=0 f=1 "
            "escalations=1 pending=restart-1"
        )
        if how == "end":
            ended = JobWatchResult(
                job_id=job_id, outcome=WatchOutcome.SUCCEEDED, job_state="succeeded"
            )
            await world.handle(job_id).signal(StandInWatch.end, ended)
        else:
            await world.handle(job_id).signal(StandInWatch.fail, "controller unreachable for 2h")
        out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    # No line for a picture that did not change; the last one says how the watch ended.
    assert process.returncode == code, (out, err)
    if how == "end":
        assert out.decode() == f"{job_id}: watch COMPLETED; succeeded: job succeeded; 0 verdicts\n"
    else:
        assert out.decode().startswith(f"{job_id}: watch FAILED; ")
        assert "controller unreachable for 2h" in out.decode()


# ---- approve and deny -------------------------------------------------------------------


async def test_approve_by_id_and_deny_by_kind_reach_the_workflow_and_print_the_proposal(
    world: World,
) -> None:
    job_id = world.job()
    await started(world, job_id)
    await world.show(
        job_id,
        stalled_view(job_id, proposal(ProposalKind.RESTART, 1), proposal(ProposalKind.STOP, 2)),
    )
    approved = await world.keeper("approve", job_id, "restart-1", "--by", "bob", "--note", "go")
    assert approved.code == 0 and approved.err == "", approved
    assert re.fullmatch(
        rf"restart-1 \(restart\): done by bob at {RFC3339}, note: go; carried out\n",
        approved.out,
    ), approved

    denied = await world.keeper("deny", job_id, "stop", "--json", user="carol")
    assert denied.code == 0, denied
    body = denied.json()
    assert (body["workflow_id"], body["job_id"], body["status"]) == (
        watch_id(job_id),
        job_id,
        "RUNNING",
    )
    assert body["proposal"]["id"] == "stop-2" and body["proposal"]["state"] == "denied"
    assert body["already_decided"] is False
    assert body["proposal"]["decided_by"] == "carol" and body["proposal"]["outcome"] == "left alone"
    assert re.fullmatch(RFC3339, body["proposal"]["decided_at"])

    view = await world.handle(job_id).query(StandInWatch.status)
    assert {p.id: p.state for p in view.proposals} == {
        "restart-1": ProposalState.DONE, "stop-2": ProposalState.DENIED,
    }  # fmt: skip


async def test_a_refused_decision_exits_1_with_the_workflows_message_and_a_hint(
    world: World,
) -> None:
    job_id = world.job()
    await started(world, job_id)
    denied = proposal(
        ProposalKind.RESTART, 1, state=ProposalState.DENIED, decided_by="bob", decided_at=T0
    )
    await world.show(job_id, stalled_view(job_id, denied, proposal(ProposalKind.STOP, 2)))

    # Decided already: the answer is the proposal as it stands, plainly, and exit 1 (it
    # was not approved).
    again = await world.keeper("approve", job_id, "restart-1")
    assert again.code == 1, again
    assert again.out == "restart-1 (restart): denied by bob at 2026-12-01T12:00:00Z\n", again
    assert (
        "proposal restart-1 was already denied by bob at 2026-12-01T12:00:00Z; this approve "
        "changed nothing" in again.err
    ), again
    body = (await world.keeper("approve", job_id, "restart-1", "--json")).json()
    assert body["already_decided"] is True and body["proposal"]["state"] == "denied", body

    unknown = (await world.keeper("deny", job_id, "stop-9", "--json")).error()
    assert f"no proposal stop-9 in the watch of {job_id}" in unknown["message"]
    assert unknown["hint"] == f"`keeper job status {job_id}` shows the pending proposals."
    assert unknown["proposal"] == "stop-9" and unknown["workflow_id"] == watch_id(job_id)

    # A kind that no pending proposal has is refused before any update is sent.
    kind = await world.keeper("approve", job_id, "restart")
    assert kind.code == 1 and "no pending restart proposal" in kind.err, kind
    assert "(pending: stop-2)" in kind.err
    view = await world.handle(job_id).query(StandInWatch.status)
    assert [p.state for p in view.proposals] == [ProposalState.DENIED, ProposalState.PENDING]


async def test_a_kind_two_pending_proposals_share_is_ambiguous(world: World) -> None:
    job_id = world.job()
    await started(world, job_id)
    await world.show(
        job_id, stalled_view(job_id, proposal(ProposalKind.STOP, 1), proposal(ProposalKind.STOP, 2))
    )
    error = (await world.keeper("approve", job_id, "stop", "--json")).error()
    assert "more than one pending stop proposal" in error["message"], error
    assert error["pending"] == ["stop-1", "stop-2"]


async def test_deciding_on_a_closed_watch_exits_1(world: World) -> None:
    job_id = world.job()
    await started(world, job_id)
    await world.keeper("unwatch", job_id)
    done = await world.keeper("approve", job_id, "restart-1")
    assert done.code == 1 and "is closed (COMPLETED); nothing was approved" in done.err, done


# ---- unwatch ----------------------------------------------------------------------------


async def test_unwatch_cancels_the_watch_waits_for_it_and_leaves_the_job_running(
    world: World,
) -> None:
    job_id = world.job()
    await started(world, job_id)
    await world.show(job_id, stalled_view(job_id))
    done = await world.keeper("unwatch", job_id)
    assert done.code == 0, done
    assert (
        done.out.splitlines()[0] == f"{job_id}: unwatched (COMPLETED); the job itself keeps running"
    )
    assert "result: unwatched: job running" in done.out
    description = await world.handle(job_id).describe()
    assert description.status is WorkflowExecutionStatus.COMPLETED

    # Again: nothing to cancel, and that is no failure.
    again = await world.keeper("unwatch", job_id, "--json")
    assert again.code == 0, again
    body = again.json()
    assert body["cancelled"] is False and body["status"] == "COMPLETED"
    assert body["result"]["outcome"] == "unwatched"

    missing = await world.keeper("unwatch", world.job("nobody"))
    assert missing.code == 1 and "no watch of" in missing.err, missing


# ---- list -------------------------------------------------------------------------------


async def test_list_filters_by_verdict_and_state_from_the_search_attributes(world: World) -> None:
    stalled, healthy, gone = world.job("stalled"), world.job("healthy"), world.job("gone")
    for job_id in (stalled, healthy, gone):
        await started(world, job_id)
    await world.show(stalled, stalled_view(stalled))
    await world.show(healthy, WatchView(job_id=healthy, job_state="running", verdict="running"))
    await world.keeper("unwatch", gone)
    ours = {stalled, healthy, gone}

    async def listed(*args: str) -> dict[str, dict[str, Any]]:
        done = await world.keeper("list", *args, "--json")
        assert done.code == 0, done
        return {r["job_id"]: r for r in done.json()["watches"] if r["job_id"] in ours}

    async def settled() -> dict[str, dict[str, Any]] | None:
        rows = await listed("--verdict", "stalled")
        return rows if set(rows) == {stalled} else None

    rows = await until(settled, within=30, what="the stalled watch alone in --verdict stalled")
    row = rows[stalled]
    assert (row["job_state"], row["verdict"], row["status"]) == ("running", "stalled", "RUNNING")
    assert row["workflow_id"] == watch_id(stalled) and row["run_id"] and row["closed_at"] is None
    assert re.fullmatch(RFC3339, row["started_at"]) and row["ui_url"].startswith("http")

    assert set(await listed("--verdict", "RUNNING")) == {healthy}
    assert set(await listed("--state", "running")) == {stalled, healthy}
    assert set(await listed()) == {stalled, healthy}
    everything = await listed("--all")
    assert set(everything) == ours and everything[gone]["status"] == "COMPLETED"

    text = await world.keeper("list", "--verdict", "stalled")
    assert text.code == 0, text
    header, *lines = text.out.splitlines()
    assert header.split() == ["JOB", "JOB", "STATE", "VERDICT", "STATUS", "STARTED"]
    (line,) = [row for row in lines if row.startswith(stalled)]
    assert line.split()[:4] == [stalled, "running", "stalled", "RUNNING"]

    bad = await world.keeper("list", "--verdict", "dead")
    assert bad.code == 2 and "--verdict" in bad.err and "running, stalled, unknown" in bad.err


# ---- --help -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(job.commands))
def test_every_job_command_has_help_with_an_example_and_every_option(
    name: str, tmp_path: Path
) -> None:
    command = job.commands[name]
    result = keeper_now(tmp_path / "none.yaml", "job", name, "--help")
    assert result.code == 0 and result.err == "", result
    assert result.out.startswith(f"Usage: keeper job {name} [OPTIONS]")
    assert f"  Example:\n    keeper job {name} " in result.out, result.out
    for param in command.params:
        if isinstance(param, click.Argument):
            assert param.human_readable_name in result.out, (name, param.name)
            continue
        assert isinstance(param, click.Option) and param.help, (name, param.opts)
        for opt in param.opts:
            assert opt in result.out, f"keeper job {name} --help lacks {opt}"
    assert "--json" in result.out


def test_the_job_group_lists_its_commands_and_an_example(tmp_path: Path) -> None:
    result = keeper_now(tmp_path / "none.yaml", "job", "--help")
    assert result.code == 0 and result.out.startswith("Usage: keeper job [OPTIONS]")
    for name in ("watch", "status", "list", "approve", "deny", "unwatch", "run"):
        assert f"  {name}" in result.out
    assert "Example:" in result.out


# ---- run: launch through iris, then watch -----------------------------------------------

IRIS_TOKEN = "iris-test-token-0123456789"


@dataclass
class LaunchServer:
    """iris's LaunchJob on a real HTTP server: it records each request and answers as told."""

    url: str = ""
    seen: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    refuse: tuple[int, dict[str, Any]] | None = None

    async def launch(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append((dict(request.headers), body))
        if self.refuse is not None:
            status, error = self.refuse
            return web.json_response(error, status=status)
        return web.json_response({"jobId": f"/alice/{body['name']}"})


@pytest.fixture
async def iris() -> AsyncIterator[LaunchServer]:
    server = LaunchServer()
    app = web.Application()
    app.router.add_post(connect.LAUNCH_JOB, server.launch)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


def with_iris(config: Path, url: str) -> Path:
    tree = yaml.safe_load(config.read_text())
    store = f"sqlite:///{config.parent / f'watch-{uuid.uuid4().hex[:6]}.db'}"
    tree["watch"] = {"controller_url": url, "call_timeout": "5s", "store_url": store}
    path = config.with_name(f"iris-{uuid.uuid4().hex[:6]}.yaml")
    path.write_text(yaml.safe_dump(tree))
    return path


async def test_run_launches_the_command_through_iris_and_watches_the_new_job(
    world: World, iris: LaunchServer
) -> None:
    config = with_iris(world.config, iris.url)
    name = f"tokenize-{uuid.uuid4().hex[:6]}"
    done = await keeper(
        config, "job", "run", "--name", name, "--memory", "5GB", "--region", "us-central1",
        "--json", "--", "python", "tokenize.py", "--shards", "5000",
        env={"USER": "alice", "KEEPER_IRIS_TOKEN": IRIS_TOKEN},
    )  # fmt: skip
    assert done.code == 0, done
    job_id = f"/alice/{name}"
    body = done.json()
    assert (body["job_id"], body["name"], body["started"]) == (job_id, name, True)
    assert body["workflow_id"] == watch_id(job_id) and body["controller_url"] == iris.url
    assert f"launched {job_id} at {iris.url}" in done.err and IRIS_TOKEN not in done.err

    ((headers, sent),) = iris.seen
    assert headers["Authorization"] == f"Bearer {IRIS_TOKEN}"
    argv = ["python", "tokenize.py", "--shards", "5000"]
    assert sent == {
        "name": name,
        "entrypoint": {"runCommand": {"argv": argv}},
        "submitArgv": argv,
        "replicas": 1,
        "maxRetriesPreemption": 1000,
        "resources": {"memoryBytes": str(5 * 2**30)},
        "constraints": [
            {"key": "region", "op": "CONSTRAINT_OP_EQ", "value": {"stringValue": "us-central1"}}
        ],
    }
    view = await world.handle(job_id).query(StandInWatch.status)
    assert (view.job_id, view.requested_by) == (job_id, "alice")


async def test_run_with_a_secret_keeps_the_request_whole_in_the_store_and_redacted_in_history(
    world: World, iris: LaunchServer
) -> None:
    config = with_iris(world.config, iris.url)
    secret = "hf_Zq3Lm7Rt2Vb5Nc8Kd1Hs4Jx9Wp6Yt0Qa2Sd4Fg"
    name = f"secret-{uuid.uuid4().hex[:6]}"
    done = await keeper(
        config, "job", "run", "--name", name, "--env", "HF_TOKEN", "--env", "STAGE=tokenize",
        "--json", "--", "python", "train.py",
        env={"USER": "alice", "HF_TOKEN": secret},
    )  # fmt: skip
    assert done.code == 0, done
    assert done.json()["secrets_kept"] == ["environment.envVars.HF_TOKEN"]
    ((_, sent),) = iris.seen
    # iris gets the job as given, the secret included.
    assert sent["environment"] == {"envVars": {"HF_TOKEN": secret, "STAGE": "tokenize"}}
    job_id = f"/alice/{name}"
    # The watch holds it redacted, with the launch store's key for the whole request.
    history = await world.handle(job_id).fetch_history()
    assert_absent(secret, history.to_json(), "the watch's history")
    started = history.events[0].workflow_execution_started_event_attributes
    (payload,) = started.input.payloads
    held = json.loads(payload.data)["launch"]
    assert held["request"]["environment"]["envVars"] == {
        "HF_TOKEN": "[REDACTED]", "STAGE": "tokenize",
    }  # fmt: skip
    assert held["secrets"] == ["environment.envVars.HF_TOKEN"]
    store_url = yaml.safe_load(config.read_text())["watch"]["store_url"]
    store = open_launch_store(store_url)
    try:
        kept = store.get(held["stored"])
    finally:
        store.close()
    assert kept is not None and kept.environment is not None
    assert kept.environment.env_vars == {"HF_TOKEN": secret, "STAGE": "tokenize"}


async def test_run_with_no_secret_holds_the_request_in_the_watch_and_needs_no_store(
    world: World, iris: LaunchServer
) -> None:
    config = with_iris(world.config, iris.url)
    name = f"plain-{uuid.uuid4().hex[:6]}"
    done = await keeper(
        config, "job", "run", "--name", name, "--env", "STAGE=t", "--", "python", "t.py",
        env={"USER": "alice"},
    )  # fmt: skip
    assert done.code == 0, done
    history = await world.handle(f"/alice/{name}").fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    held = json.loads(started.input.payloads[0].data)["launch"]
    assert held["stored"] is None and held["secrets"] == []
    assert held["request"] == iris.seen[0][1]
    store_url = yaml.safe_load(config.read_text())["watch"]["store_url"]
    assert not await asyncio.to_thread(os.path.exists, store_url.removeprefix("sqlite:///"))


async def test_run_that_iris_refuses_exits_1_and_starts_no_watch(
    world: World, iris: LaunchServer
) -> None:
    config = with_iris(world.config, iris.url)
    name = f"taken-{uuid.uuid4().hex[:6]}"
    iris.refuse = (409, {"code": "already_exists", "message": f"job /alice/{name} exists"})
    done = await keeper(config, "job", "run", "--name", name, "--", "true", env={"USER": "alice"})
    assert done.code == 1 and done.out == "", done
    assert f"iris already has a job named {name}; nothing was launched" in done.err
    assert "Choose another --name" in done.err
    assert "Authorization" not in iris.seen[0][0]  # no token set: an anonymous call
    assert await world.watches_of(f"/alice/{name}") == []


async def test_run_launches_nothing_when_temporal_is_unreachable(
    tmp_path: Path, iris: LaunchServer
) -> None:
    config = with_iris(offline_config(tmp_path), iris.url)
    done = await keeper(config, "job", "run", "--name", "x", "--", "true")
    assert done.code == 1 and "cannot reach Temporal" in done.err, done
    assert iris.seen == []


RUN_USAGE = [
    (["--memory", "lots", "--", "true"], "--memory"),
    (["--memory", "0GB", "--", "true"], "--memory"),
    (["--name", "bad name", "--", "true"], "--name"),
    (["--region", "US Central", "--", "true"], "--region"),
    (["--"], "CMD"),
    (["--env", "1BAD=x", "--", "true"], "--env"),
    (["--env", "KEEPER_TEST_NEVER_SET", "--", "true"], "--env"),
    (["--env", "A=1", "--env", "A=2", "--", "true"], "--env"),
]


@pytest.mark.parametrize(("args", "param"), RUN_USAGE, ids=[" ".join(a) for a, _ in RUN_USAGE])
def test_a_bad_run_flag_exits_2_naming_it_before_anything_is_launched(
    tmp_path: Path, args: list[str], param: str
) -> None:
    text = keeper_now(offline_config(tmp_path), "job", "run", *args)
    assert text.code == 2 and text.out == "", text
    assert param in text.err and "cannot reach Temporal" not in text.err, text


def test_the_request_fields_follow_the_flags() -> None:
    now = datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)
    assert launch.job_name(None, ["/usr/bin/python3", "x.py"], now) == "python3-20261201-120005"
    assert launch.memory_bytes("512MB") == 512 * 2**20 and launch.memory_bytes("8Gi") == 8 * 2**30
    assert launch.memory_bytes("1073741824") == 2**30
    bare = launch.launch_request("n", ["true"], None, None)
    assert bare.resources is None and bare.constraints == []
