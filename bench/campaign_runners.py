"""The runner family's runs: one RunnerDeletion per run, requested as an operator would.

| fault            | how                                                                  |
|------------------|----------------------------------------------------------------------|
| github-5xx       | GitHub answers the runner's removal 503, 1-3 times                    |
| github-429       | GitHub answers 429 with `retry-after: 1`, 1-3 times                   |
| provider-failure | the provider's DeleteInstance fails 1-3 times, then works            |
| provider-hang    | DeleteInstance hangs until tried twice (or for 15 s), then recovers  |
| worker-kill      | a slow (2 s) provider delete is under way when the worker is killed  |
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from temporalio.client import Client, WorkflowFailureError

from bench.campaign_plan import RunSpec
from bench.campaign_report import RunOutcome
from bench.campaign_workers import Killable
from emulators.provider import state as provider_state
from tests.runners.world import RunnerWorld, eventually

# Upper bounds, generous for a SIGKILL: an activity the dead worker held is retried only once
# its timeout has passed.
STEP_WITHIN_S = 300.0
HANG_AT_MOST_S = 15.0
RESULT_WITHIN_S = 600.0


async def run_runner(
    client: Client, world: RunnerWorld, worker: Killable, spec: RunSpec
) -> RunOutcome:
    name = f"cr{spec.index:04d}-{uuid.uuid4().hex[:6]}"
    faults = set(spec.faults)
    mode, seconds, fail_times = None, 0.0, None
    if "provider-failure" in faults:
        mode, fail_times = "failing", spec.params["provider-failure"]["count"]
    if "provider-hang" in faults:
        mode = "hanging"
    if "worker-kill" in faults:
        mode, seconds = "slow", 2.0
    record = await asyncio.to_thread(
        world.add_runner, name, mode=mode, mode_seconds=seconds, fail_times=fail_times
    )
    assert record.github_runner_id is not None
    if "github-5xx" in faults:
        count = spec.params["github-5xx"]["count"]
        world.github.inject(503, runner_id=record.github_runner_id, times=count)
    if "github-429" in faults:
        count = spec.params["github-429"]["count"]
        world.github.inject(429, runner_id=record.github_runner_id, times=count, retry_after=1)
    handle = await world.request(client, name, reason="campaign")
    instance = f"i-{name}"
    if "provider-hang" in faults:
        await eventually(
            lambda: provider_state.attempts(world.provider_config, instance) >= 1,
            within=STEP_WITHIN_S,
            what=f"{name}: a first DeleteInstance",
        )
        # A retry comes within seconds, unless the worker holding the hung call was killed:
        # then it waits out the activity's heartbeat timeout. The hang ends either way.
        with contextlib.suppress(AssertionError):
            await eventually(
                lambda: provider_state.attempts(world.provider_config, instance) >= 2,
                within=HANG_AT_MOST_S,
                what=f"{name}: a second DeleteInstance after the first hung",
            )
        await asyncio.to_thread(provider_state.set_mode, world.provider_config, instance, None)
    if "worker-kill" in faults:
        await eventually(
            lambda: provider_state.attempts(world.provider_config, instance) >= 1,
            within=STEP_WITHIN_S,
            what=f"{name}: the provider delete to start",
        )
        await worker.kill(since=asyncio.get_running_loop().time())
    try:
        result = await asyncio.wait_for(handle.result(), RESULT_WITHIN_S)
        detail = result.outcome.value
    except WorkflowFailureError as err:
        detail = str(err.cause)[:160]
    except TimeoutError:
        return RunOutcome("runners", spec.label, spec.faults, handle.id, "TIMED_OUT", "")
    desc = await handle.describe()
    status = desc.status.name if desc.status else "UNKNOWN"
    return RunOutcome("runners", spec.label, spec.faults, handle.id, status, detail)
