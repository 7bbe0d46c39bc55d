"""The steps an operator approved: stop a job, relaunch it with its original request.

Both are idempotent, so a retried activity (or a watch replayed after a crash) never acts
twice: a job already finished or gone counts as stopped, and a relaunch has a name fixed by
the restart's number, so a second try finds the job the first one made (ALREADY_EXISTS).
"""

from __future__ import annotations

import re

from temporalio import activity
from temporalio.exceptions import ApplicationError

from domain.watch.calls import RelaunchCall, RelaunchResult, StopCall, StopResult
from domain.watch.names import phase_of
from runtime.watch.iris_client import IrisController
from runtime.watch.iris_errors import (
    IrisAlreadyExists,
    IrisAuthError,
    IrisInvalidArgument,
    JobNotFound,
)

_RESTART_SUFFIX = re.compile(r"-r\d+$")


def relaunch_name(name: str, restart: int) -> str:
    """`tokenize` -> `tokenize-r1`; a restart of `tokenize-r1` is `tokenize-r2`."""
    return f"{_RESTART_SUFFIX.sub('', name)}-r{restart}"


def sibling_id(job_id: str, name: str) -> str:
    """The id iris gives a job named `name` launched by the owner of `job_id`."""
    if name.startswith("/"):
        return name
    return f"{job_id.rsplit('/', 1)[0]}/{name}"


def _refused(err: Exception, what: str) -> ApplicationError:
    """A refusal retrying cannot fix: the proposal fails, loudly, and the watch goes on."""
    kind = "IrisAuthError" if isinstance(err, IrisAuthError) else "IrisRefused"
    return ApplicationError(f"{what}: {err}", type=kind, non_retryable=True)


class WatchActions:
    def __init__(self, iris: IrisController, *, call_timeout_s: float) -> None:
        self._iris = iris
        self._deadline = call_timeout_s

    @activity.defn(name="watch.stop")
    async def stop(self, call: StopCall) -> StopResult:
        try:
            status, _ = await self._iris.get_job_status(call.job_id, deadline_s=self._deadline)
        except JobNotFound:
            return StopResult(job_state="missing", detail="already gone", already_gone=True)
        phase = phase_of(status.state)
        if phase.is_terminal:
            return StopResult(
                job_state=phase.value, detail=f"already {phase.value}", already_gone=True
            )
        try:
            # Cascades: the coordinators and workers are stopped before the job.
            await self._iris.terminate_job(call.job_id, deadline_s=self._deadline)
        except JobNotFound:
            return StopResult(job_state="missing", detail="already gone", already_gone=True)
        except (IrisAuthError, IrisInvalidArgument) as err:
            raise _refused(err, f"TerminateJob {call.job_id}") from None
        activity.logger.warning("stopped %s (%s)", call.job_id, call.proposal)
        return StopResult(job_state="killed", detail=f"stopped by keeper ({call.proposal})")

    async def _made_before(self, call: RelaunchCall, name: str) -> RelaunchResult:
        """A job of the relaunch's name exists: this relaunch's own first try (live), or an
        older job of that name (finished), which is not ours to adopt."""
        job_id = sibling_id(call.job_id, name)
        try:
            status, _ = await self._iris.get_job_status(job_id, deadline_s=self._deadline)
        except JobNotFound:
            raise ApplicationError(
                f"iris says a job named {name} exists but does not know {job_id}: relaunch "
                "by hand (keeper job run)",
                type="IrisRefused",
                non_retryable=True,
            ) from None
        if phase_of(status.state).is_terminal:
            raise ApplicationError(
                f"{job_id} already exists and has finished ({phase_of(status.state).value}): "
                "an older job of that name, not this restart's; relaunch by hand (keeper job "
                "run --name ...)",
                type="IrisRefused",
                non_retryable=True,
            )
        return RelaunchResult(job_id=job_id, reused=True)

    @activity.defn(name="watch.relaunch")
    async def relaunch(self, call: RelaunchCall) -> RelaunchResult:
        try:
            _, request = await self._iris.get_job_status(call.job_id, deadline_s=self._deadline)
        except JobNotFound:
            raise ApplicationError(
                f"{call.job_id} is gone, and its launch request with it: relaunch it by hand",
                type="IrisRefused",
                non_retryable=True,
            ) from None
        if request is None:
            raise ApplicationError(
                f"the controller did not return {call.job_id}'s launch request: relaunch it "
                "by hand (keeper job run)",
                type="IrisRefused",
                non_retryable=True,
            )
        name = relaunch_name(request.name or call.job_id.rsplit("/", 1)[-1], call.restart)
        # Every field as iris stored it, known to keeper or not; only the name differs.
        fresh = request.model_copy(update={"name": name})
        try:
            job_id = await self._iris.launch_job(fresh, deadline_s=self._deadline)
        except IrisAlreadyExists:
            return await self._made_before(call, name)
        except (IrisAuthError, IrisInvalidArgument) as err:
            raise _refused(err, f"LaunchJob {name}") from None
        activity.logger.warning("relaunched %s as %s (%s)", call.job_id, job_id, call.proposal)
        return RelaunchResult(job_id=job_id)
