"""`keeper-dev demo job`: on the local stack, launch a zephyr job whose workers are KILLED and
retried, and watch keeper follow it to the latest attempt and to its end, touching nothing.

The job is launched through keeper's own iris client on the dev stack's iris emulator
(`keeper-dev up` starts it), asking for its `killed-retry` scenario; the JobWatch workflow on
the worker does the watching. The emulator's action log is the judge of "touching nothing":
the only call on it that changes anything must be the demo's own launch.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import click
import httpx

from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import OK, CommandFailed, Output, exits, json_options
from keeper.cli.watch.commands import start_watch
from keeper.cli.watch.launch import launch_request
from keeper.cli.watch.lookup import query_view
from keeper.domain.watch.models import WatchOutcome, WatchView
from keeper.runtime.settings import Settings
from keeper.runtime.watch.deps import iris_controller
from keeper.runtime.watch.iris_errors import IrisError

SCENARIO = "killed-retry"
# The iris emulator reads it from a launch request's environment (emulators/iris).
SCENARIO_ENV = "IRIS_EMULATOR_SCENARIO"
POLL_INTERVAL = 0.5


def _touches(settings: Settings) -> list[dict[str, Any]]:
    """The calls the iris emulator logged that change a job, but for launches."""
    url = f"{settings.watch.controller_url}/control/actions"
    try:
        answer = httpx.get(url, timeout=5)
        answer.raise_for_status()
        return [a for a in answer.json()["actions"] if a.get("method") != "LaunchJob"]
    except (httpx.HTTPError, ValueError, KeyError) as err:
        raise CommandFailed(
            f"watch.controller_url {settings.watch.controller_url} is not the iris emulator "
            f"({type(err).__name__}): the demo plays one of its scenarios",
            hint="Start the local stack with `keeper-dev up` (it starts the iris emulator), "
            "or leave watch.controller_url unset.",
        ) from None


def _line(view: WatchView) -> str:
    attempt = f"p{view.attempt.pipeline}-a{view.attempt.attempt}" if view.attempt else "-"
    stage = view.progress.stage if view.progress else "-"
    return (
        f"{view.phase.value:<9} job {view.job_state:<9} verdict {view.verdict:<8} "
        f"attempt {attempt:<6} {stage}"
    )


@click.command()
@click.option(
    "--timeout",
    "within",
    type=click.FloatRange(10, 3600),
    default=240.0,
    show_default=True,
    help="Seconds to wait for the job and its watch to finish.",
)
@json_options
@pass_keeper
@exits
async def demo(keeper: KeeperContext, within: float, out: Output) -> int:
    """Launch a job that is KILLED and retried on the dev stack, and watch keeper follow it.

    keeper launches a zephyr job on the iris emulator (scenario killed-retry: the first
    attempt's workers are KILLED, a new attempt with a new hash runs to success and the old
    coordinator lingers), starts its JobWatch, and prints one line per change of phase,
    verdict, attempt or stage. It exits 0 once the watch has followed the retry, reported
    the stale coordinator and seen the job succeed, having stopped and relaunched nothing.
    Progress goes to stderr, one line per change.

    Exit status: 0 when all of that held, 1 otherwise (including a stack that is not up:
    `keeper-dev up` first).

    \b
    --json prints {"job_id", "workflow_id", "outcome", "followed_retry",
      "stale_coordinators", "verdicts", "actions", "seconds"}.

    \b
    Example:
      keeper-dev demo job --timeout 300     # after `keeper-dev up`
    """
    settings = keeper.settings
    touched_before = len(_touches(settings))
    began = time.monotonic()
    client = await client_for(settings)
    name = f"demo-{datetime.now(UTC).strftime('%H%M%S')}"
    argv = ["python", "-m", "pipelines.tokenize"]
    request = launch_request(name, argv, None, None, {SCENARIO_ENV: SCENARIO})
    try:
        async with iris_controller(settings.watch) as iris:
            job_id = await iris.launch_job(request)
    except IrisError as err:
        raise CommandFailed(f"iris refused the demo's launch: {err}") from None
    out.note(f"launched {job_id} on the iris emulator (scenario {SCENARIO})")
    watch, _ = await start_watch(client, settings, job_id, "keeper-demo")
    out.note(f"watching it: {watch.handle.id}; `keeper job status {job_id}` shows it too")

    last = ""
    stale_seen: list[str] = []
    view: WatchView | None = None
    while time.monotonic() - began < within:
        view = await query_view(watch.handle) or view
        if view is not None:
            if view.stale_coordinators and not stale_seen:
                stale_seen = list(view.stale_coordinators)
                out.note(f"  stale coordinator reported: {stale_seen[0]}")
            if _line(view) != last:
                last = _line(view)
                out.note(f"  {time.monotonic() - began:5.1f}s  {last}")
        description = await watch.handle.describe()
        if description.status is not None and description.status.name != "RUNNING":
            break
        await asyncio.sleep(POLL_INTERVAL)
    else:
        raise CommandFailed(
            f"the watch of {job_id} did not finish within {within:g}s",
            hint=f"See where it is with `keeper job status {job_id}` and the worker's log "
            "(.dev/logs/worker.log).",
        )
    result = await watch.handle.result()
    view = await query_view(watch.handle) or view
    touched = _touches(settings)[touched_before:]
    followed = view is not None and view.attempt is not None and view.attempt.attempt >= 1
    problems = [
        *([] if result.outcome is WatchOutcome.SUCCEEDED else [f"outcome {result.outcome}"]),
        *([] if followed else ["the watch did not follow the retry"]),
        *([] if stale_seen else ["no stale coordinator was reported"]),
        *([f"keeper acted on the job: {touched}"] if touched else []),
    ]
    summary = {
        "job_id": job_id,
        "workflow_id": watch.handle.id,
        "outcome": result.outcome.value,
        "followed_retry": followed,
        "stale_coordinators": stale_seen,
        "verdicts": result.verdicts,
        "actions": touched,
        "seconds": round(time.monotonic() - began, 1),
    }
    if problems:
        raise CommandFailed("the demo did not go as it should: " + "; ".join(problems), **summary)
    if out.json:
        out.data(summary)
    else:
        out.line(
            f"{job_id} succeeded; keeper followed the retry to attempt "
            f"{view.attempt.attempt if view and view.attempt else '?'}, reported "
            f"{len(stale_seen)} stale coordinator(s) and stopped nothing "
            f"({summary['seconds']}s)"
        )
    return OK
