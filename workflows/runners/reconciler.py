"""RunnerReconciler: one pass over the store, GitHub and the provider, on a Schedule.

Each pass counts mismatches in the store; the reconciler acts only on those that two
consecutive passes saw, so it never races a runner that is being created.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from keeper.activities.runners.reconciler import ReconcilerActivities
    from keeper.domain.common.untrusted import md_text
    from keeper.domain.runners.reconcile import ReconcileReport, ReconcileRequest
    from keeper.workflows.runners.activity_options import ONE_ATTEMPT

PASS_START_TO_CLOSE = timedelta(minutes=30)
# Above the longest single call of a pass (a provider call is capped at 2 min).
PASS_HEARTBEAT = timedelta(minutes=3)


@workflow.defn(name="RunnerReconciler", versioning_behavior=VersioningBehavior.PINNED)
class RunnerReconciler:
    @workflow.run
    async def run(self, request: ReconcileRequest) -> ReconcileReport:
        # Deletions it requests run on its own task queue, with the workers that serve it.
        request = request.model_copy(update={"task_queue": workflow.info().task_queue})
        workflow.set_current_details("reconciling: listing the store, GitHub and the provider")
        report: ReconcileReport = await workflow.execute_activity_method(
            ReconcilerActivities.reconcile_pass,
            request,
            start_to_close_timeout=PASS_START_TO_CLOSE,
            heartbeat_timeout=PASS_HEARTBEAT,
            retry_policy=ONE_ATTEMPT,
            summary="one reconcile pass",
        )
        lines = [f"## runner reconciler\n\n{report.summary()}"]
        # Runner names, GitHub and provider messages: outside text, shown as text.
        lines += [f"- {md_text(line)}" for line in report.acted[:20]]
        if report.errors:
            lines += ["", "**Errors** (the pass went on):"]
            lines += [f"- {md_text(e)}" for e in report.errors[:20]]
        workflow.set_current_details("\n".join(lines))
        return report
