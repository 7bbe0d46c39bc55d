"""The steps an operator approved: stop a job, relaunch it with the request keeper holds for it
(or the command the operator gave; never the redacted request iris returns).

Both are idempotent, so a retried activity (or a watch replayed after a crash) never acts
twice: a job already finished or gone counts as stopped, and a relaunch has a name fixed by
the restart's number, so a second try finds the job the first one made (ALREADY_EXISTS).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from temporalio import activity
from temporalio.exceptions import ApplicationError

from keeper.domain.watch.calls import (
    RelaunchCall,
    RelaunchReady,
    RelaunchResult,
    StopCall,
    StopResult,
)
from keeper.domain.watch.models import JobIdError, check_job_id
from keeper.domain.watch.names import phase_of
from keeper.domain.watch.relaunch import (
    Composed,
    HeldLaunch,
    IncompleteRequest,
    Request,
    approve_with_command,
    compose,
    hold,
    relaunch_problem,
)
from keeper.runtime.watch.iris_client import IrisController
from keeper.runtime.watch.iris_errors import (
    IrisAlreadyExists,
    IrisAuthError,
    IrisInvalidArgument,
    JobNotFound,
)
from keeper.store.watch import LaunchStore
from keeper.wire.iris.codec import to_wire
from keeper.wire.iris.messages import LaunchJobRequest

_RESTART_SUFFIX = re.compile(r"-r\d+$")


def relaunch_name(name: str, restart: int) -> str:
    """`tokenize` -> `tokenize-r1`; a restart of `tokenize-r1` is `tokenize-r2`."""
    return f"{_RESTART_SUFFIX.sub('', name)}-r{restart}"


def sibling_id(job_id: str, name: str) -> str:
    """The id iris gives a job named `name` launched by the owner of `job_id`."""
    if name.startswith("/"):
        return name
    return f"{job_id.rsplit('/', 1)[0]}/{name}"


def _refusal(message: str, kind: str = "IrisRefused") -> ApplicationError:
    """A refusal retrying cannot fix: the proposal fails, loudly, and the watch goes on."""
    return ApplicationError(message, type=kind, non_retryable=True)


def _refused(err: Exception, what: str) -> ApplicationError:
    kind = "IrisAuthError" if isinstance(err, IrisAuthError) else "IrisRefused"
    return _refusal(f"{what}: {err}", kind)


class WatchActions:
    def __init__(
        self,
        iris: IrisController,
        *,
        call_timeout_s: float,
        launches: Callable[[], LaunchStore],
    ) -> None:
        self._iris = iris
        self._deadline = call_timeout_s
        # keeper's launch store, opened at first use: only a restart of a job launched with
        # secrets reads it.
        self._launches = launches

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
            raise _refusal(
                f"iris says a job named {name} exists but does not know {job_id}: relaunch "
                "by hand (keeper job run)",
            ) from None
        if phase_of(status.state).is_terminal:
            raise _refusal(
                f"{job_id} already exists and has finished ({phase_of(status.state).value}): "
                "an older job of that name, not this restart's; relaunch by hand (keeper job "
                "run --name ...)",
            )
        return RelaunchResult(job_id=job_id, reused=True)

    async def _compose(self, call: RelaunchCall) -> tuple[Composed, bool]:
        """The request a relaunch sends (domain/watch/relaunch.py), and whether it was built
        on iris's shape of the job; refused when keeper holds nothing it may launch."""
        held = call.launch
        problem = relaunch_problem(call.job_id, call.proposal, held, call.command)
        if problem is not None:
            raise _refusal(problem)
        if held is not None:
            base, from_iris = await self._held_request(held, call), False
        else:
            base, from_iris = await self._iris_shape(call), True
        # One spelling (iris's JSON mapping) whatever the input used.
        canonical = to_wire(LaunchJobRequest.model_validate(base))
        # The job's own id, renamed: the relaunch belongs to the job's owner, whoever launched
        # it (a held request names it bare, and iris would prefix keeper's own user).
        name = relaunch_name(call.job_id, call.restart)
        try:
            check_job_id(name)
        except JobIdError as err:
            raise _refusal(
                f"the relaunch's name is not one iris or keeper accepts ({err}): relaunch by "
                "hand (keeper job run --name ...)",
            ) from None
        try:
            return compose(canonical, name, call.command, from_iris=from_iris), from_iris
        except IncompleteRequest as err:
            raise _refusal(str(err)) from None

    async def _held_request(self, held: HeldLaunch, call: RelaunchCall) -> Request:
        if held.stored is None:
            return held.request
        store = await asyncio.to_thread(self._launches)
        full = await asyncio.to_thread(store.get, held.stored)
        if full is None:
            raise _refusal(
                f"keeper's launch store ({store.describe()}) has no request under "
                f"{held.stored!r} for {call.job_id} (watch.store_url must be the one `keeper "
                "job run` wrote to); approve with the command: "
                + approve_with_command(call.job_id, call.proposal),
            )
        return to_wire(full)

    async def _iris_shape(self, call: RelaunchCall) -> Request:
        """The job as iris returns it: its resources and constraints, never its secrets."""
        try:
            _, request = await self._iris.get_job_status(call.job_id, deadline_s=self._deadline)
        except JobNotFound:
            raise _refusal(
                f"{call.job_id} is gone, and its shape with it: relaunch it by hand "
                "(keeper job run)",
            ) from None
        if request is None:
            raise _refusal(
                f"the controller did not return {call.job_id}'s launch request: relaunch it "
                "by hand (keeper job run)",
            )
        return to_wire(request)

    async def _held_after(self, call: RelaunchCall, composed: Composed) -> HeldLaunch:
        """What the new job's watch holds for its next restart."""
        if call.command is None and call.launch is not None:
            return call.launch  # the same request; the next relaunch renames it again
        key = f"{call.launch.stored}/r{call.restart}" if call.launch and call.launch.stored else ""
        held = hold(composed.request, key or f"{call.job_id}/r{call.restart}")
        if held.stored is not None:
            store = await asyncio.to_thread(self._launches)
            full = LaunchJobRequest.model_validate(composed.request)
            await asyncio.to_thread(store.put, held.stored, call.job_id, full)
        return held

    @activity.defn(name="watch.prepare_relaunch")
    async def prepare_relaunch(self, call: RelaunchCall) -> RelaunchReady:
        """Before the stop: what a relaunch would send, or why there is nothing it may send,
        so an approval keeper cannot carry out stops nothing."""
        composed, from_iris = await self._compose(call)
        return RelaunchReady(
            name=composed.request["name"], from_iris=from_iris, dropped_env=composed.dropped_env
        )

    @activity.defn(name="watch.relaunch")
    async def relaunch(self, call: RelaunchCall) -> RelaunchResult:
        composed, _ = await self._compose(call)
        fresh = LaunchJobRequest.model_validate(composed.request)
        held = await self._held_after(call, composed)
        try:
            job_id = await self._iris.launch_job(fresh, deadline_s=self._deadline)
        except IrisAlreadyExists:
            made = await self._made_before(call, fresh.name)
            return made.model_copy(update={"launched": held, "dropped_env": composed.dropped_env})
        except (IrisAuthError, IrisInvalidArgument) as err:
            raise _refused(err, f"LaunchJob {fresh.name}") from None
        activity.logger.warning("relaunched %s as %s (%s)", call.job_id, job_id, call.proposal)
        return RelaunchResult(job_id=job_id, launched=held, dropped_env=composed.dropped_env)
