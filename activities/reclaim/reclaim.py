"""Activities of a job reclaim: the policy, the controller's view, the agent's cancel, the
drain, and closing the holding in keeper's memory (each named `reclaim.<verb>`).

Thin adapters over injected clients. Each destructive activity is idempotent: a cancel for a
job the agent no longer holds does nothing on spur's side, a drain keeper already made is
found and kept, and an undrain leaves a node alone unless the drain on it is keeper's and no
other keeper reclaim still needs it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from keeper.domain.reclaim.calls import (
    AssessCall,
    Assessment,
    CancelCall,
    CancelResult,
    CloseCall,
    DrainCall,
    DrainResult,
    NodeView,
    UndrainCall,
    UndrainResult,
)
from keeper.domain.reclaim.evidence import BeatEvidence
from keeper.domain.reclaim.models import Holding, Verdict
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.steps import Mode, Outcome
from keeper.runtime.reclaim.agent_client import AgentCancelError, AgentCancelTimedOut, SpurAgents
from keeper.runtime.reclaim.assess import Assessor
from keeper.runtime.reclaim.controller_client import SpurController
from keeper.runtime.reclaim.views import drained_by_keeper, node_state_name
from keeper.runtime.settings.reclaim import ReclaimSettings
from keeper.store.reclaim import RELEASED_BY_REPORT, WEAKLY_RELEASED, ReclaimMemory
from keeper.wire.spur import slurm_pb2

# Only evidence closes a holding: after an operator's release the holding keeps its fence
# (first sighting, epoch), so an agent that still reports it is decided as before, never as a
# new holding of whatever job the id names now.
RELEASED_OUTCOMES = frozenset({Outcome.RELEASED})


class ReclaimActivities:
    def __init__(
        self,
        settings: ReclaimSettings,
        controller: SpurController,
        agents: SpurAgents,
        memory: ReclaimMemory,
    ) -> None:
        self.settings = settings
        self.controller = controller
        self.agents = agents
        self.memory = memory
        self.assessor = Assessor(controller, memory, settings)

    async def _controller_name(self, node: str) -> str:
        """The name the controller knows the node by: the one its agent registered with."""
        record = await asyncio.to_thread(self.memory.node, node)
        return record.hostname if record is not None and record.hostname else node

    async def _node(self, node: str) -> NodeView:
        name = await self._controller_name(node)
        for info in await self.controller.get_nodes():
            if info.name == name:
                return NodeView(
                    name=info.name,
                    state=node_state_name(info.state),
                    reason=info.state_reason,
                    drained_by_keeper=drained_by_keeper(info),
                )
        return NodeView(name=name, state="not listed")

    @activity.defn(name="reclaim.policy")
    async def policy(self) -> ReclaimPolicy:
        """The timing rules in this worker's settings (`reclaim.timing`): a local activity each
        run reads once, so a settings change reaches a running reclaim at its next
        continue-as-new, and a run started by hand gets the deployment's rules."""
        return self.settings.timing

    @activity.defn(name="reclaim.assess")
    async def assess(self, call: AssessCall) -> Assessment:
        """Reads the controller now and decides the holding afresh (never from history), with
        what keeper's memory holds of the agent's word on it."""
        h = call.holding
        decision = await self.assessor.assess(h)
        tally = await asyncio.to_thread(self.memory.tally, h.node, h.job_id, h.sighting)
        listed = await asyncio.to_thread(self.memory.last_listed, h.node, h.job_id, h.sighting)
        return Assessment(
            decision=decision,
            mode=self.settings.mode,
            node=await self._node(h.node),
            read_at=datetime.now(UTC),
            listed_at=listed,
            released=tally.release(self.settings.timing),
        )

    @activity.defn(name="reclaim.cancel")
    async def cancel(self, call: CancelCall) -> CancelResult:
        """One cancel on the holding's agent, at the address it registered last, decided
        afresh in this same call: the controller is read and the holding decided right
        before the send, so a retry after a crash, or a task that waited in the queue, never
        sends on an older read. Anything but `reclaim` (or observe mode) sends nothing.

        Two more checks make it one cancel per step, not one per retry: the release evidence
        keeper's memory holds (the intake folds every heartbeat into it, whether or not the
        workflow heard) stops the send once the agent let go, and the send is claimed under
        a key of this scheduled activity first, so a retried attempt finds the claim of the
        attempt that died and never sends again."""
        h = call.holding
        # A holding first seen after the last read of the whole job map has met none yet: a
        # wipe that reissued its id would not show in a read of that id alone. One full read
        # before its cancel finds the new epoch, which fences it (domain/reclaim/decide.py).
        last_full = await asyncio.to_thread(self.memory.last_full_read)
        unchecked = last_full is None or last_full <= h.first_seen
        decision = await self.assessor.assess(h, everything=unchecked)

        async def result(**kw: Any) -> CancelResult:
            sent = await asyncio.to_thread(self._sent, h)
            return CancelResult(decision=decision, cancels_sent=sent, **kw)

        if self.settings.mode is not Mode.ACT or decision.verdict is not Verdict.RECLAIM:
            why = (
                "observe mode"
                if self.settings.mode is not Mode.ACT
                else f"a fresh read says {decision.verdict.value} ({decision.reason.value})"
            )
            return await result(delivered=False, error=f"not sent: {why}", skipped=True)
        tally = await asyncio.to_thread(self.memory.tally, h.node, h.job_id, h.sighting)
        release = tally.release(self.settings.timing)
        if release is not None:
            return await result(
                delivered=False, error=f"not sent: the agent let go: {release.why}",
                released=release, skipped=True,
            )  # fmt: skip
        timing = self.settings.timing
        if (
            tally.last is BeatEvidence.IDLE
            and tally.last_at is not None
            and datetime.now(UTC) - tally.last_at < timing.idle_release_window
        ):
            # The agent's heartbeats have been empty since it last listed the job, while
            # the controller runs nothing there: the job looks gone. Another cancel would
            # only repeat the last; the idle window decides (a listing resets it). An agent
            # that went silent since is no such evidence: the escalation goes on.
            window = timing.idle_release_window.total_seconds()
            return await result(
                delivered=False, skipped=True,
                error=f"not sent: {tally.idle_in_a_row} empty heartbeats while the controller "
                f"runs nothing on {h.node}: the job looks gone (released after "
                f"{timing.idle_release_beats} over {window:g}s)",
            )  # fmt: skip
        node = await asyncio.to_thread(self.memory.node, h.node)
        if node is None or not node.address:
            return await result(
                delivered=False, skipped=False,
                error=f"keeper knows no address for {h.node}'s agent: it has not "
                "registered through the tap since keeper started",
            )  # fmt: skip
        agent = f"{node.address}:{node.port}"
        info = activity.info()
        key = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"
        earlier = await asyncio.to_thread(
            self.memory.claim_send, key, h.node, h.job_id, h.sighting, call.signal,
            datetime.now(UTC),
        )  # fmt: skip
        if earlier is not None:
            at = earlier.claimed_at.isoformat(timespec="seconds")
            return await result(
                delivered=earlier.answer == "delivered", sent=True, agent=agent, skipped=False,
                error=f"sent at {at} by an earlier try of this step (answer "
                f"{earlier.answer or 'lost'}); not sent again",
            )  # fmt: skip
        try:
            await self.agents.cancel_job(node.address, node.port, h.job_id, call.signal)
        except AgentCancelTimedOut as err:
            await self._answer(key, "timed-out")
            return await result(delivered=False, error=f"timed out (it may have acted): {err}",
                                agent=agent, sent=True, skipped=False)  # fmt: skip
        except AgentCancelError as err:
            # Unreachable, refused: an answer for the escalation to count, never a failure
            # of the workflow (which would leave its drain behind).
            await self._answer(key, "not-delivered")
            return await result(
                delivered=False, error=f"not delivered: {err}", agent=agent, skipped=False
            )
        await self._answer(key, "delivered")
        return await result(delivered=True, agent=agent, sent=True, skipped=False)

    def _sent(self, h: Holding) -> int:
        """Cancels that may have reached the agent: every claimed send not refused outright."""
        sends = self.memory.sends(h.node, h.job_id, h.sighting)
        return sum(1 for s in sends if s.answer != "not-delivered")

    async def _answer(self, key: str, answer: str) -> None:
        await asyncio.to_thread(self.memory.answer_send, key, answer, datetime.now(UTC))

    @activity.defn(name="reclaim.drain")
    async def drain(self, call: DrainCall) -> DrainResult:
        """Drains the holding's node, after deciding afresh in the same call: a holding the
        controller now runs on that node (or anything but stale) is never drained, and no
        operator is told to free it."""
        node = call.holding.node
        name = await self._controller_name(node)
        decision = await self.assessor.assess(call.holding)
        if not decision.stale:
            # Nothing to drain now; but a try of this call that died after draining (its
            # answer lost) left keeper's drain on the node: lifted here, in the same call.
            state = "not drained"
            mine = await asyncio.to_thread(self.memory.drains, node)
            if any(d.workflow_id == call.workflow_id for d in mine):
                undone = await self.undrain(
                    UndrainCall(holding=call.holding, workflow_id=call.workflow_id)
                )
                state = f"not drained: {undone.why}"
            return DrainResult(node=name, actual_state=state, drained=False, decision=decision)
        opened = await asyncio.to_thread(
            self.memory.record_drain,
            node, call.workflow_id, call.reason, datetime.now(UTC), call.chain,
        )  # fmt: skip
        if not opened:
            # The run ended (cancelled) and lifted its drain while this call was on its way.
            return DrainResult(
                node=name, actual_state="not drained: the reclaim already ended and lifted "
                "its drain", drained=False, decision=decision,
            )  # fmt: skip
        current = await self._node(node)
        if current.drained_by_keeper and current.reason == call.reason:
            return DrainResult(node=name, actual_state=current.state, decision=decision)
        if current.state in ("drain", "draining") and not current.drained_by_keeper:
            # Someone else's drain already stops dispatch; rewriting its reason would make it
            # look like keeper's, and keeper would later lift it.
            return DrainResult(
                node=name, actual_state=f"{current.state} already ({current.reason})",
                decision=decision,
            )  # fmt: skip
        answer = await self.controller.drain_node(name, call.reason)
        if await asyncio.to_thread(self.memory.drain_fenced, node, call.workflow_id, call.chain):
            # A cancel does not wait for this call: the run's undrain may have come and gone
            # before this drain landed. Lifted here, so no drain outlives its reclaim.
            undone = await self.undrain(
                UndrainCall(holding=call.holding, workflow_id=call.workflow_id, chain=call.chain)
            )
            return DrainResult(
                node=name, actual_state=f"not drained: the reclaim ended first; {undone.why}",
                drained=False, decision=decision,
            )  # fmt: skip
        return DrainResult(node=name, actual_state=answer.actual_state, decision=decision)

    @activity.defn(name="reclaim.undrain")
    async def undrain(self, call: UndrainCall) -> UndrainResult:
        node = call.holding.node
        await asyncio.to_thread(
            self.memory.clear_drain, node, call.workflow_id, datetime.now(UTC), call.chain
        )
        others = await asyncio.to_thread(self.memory.node_drain_holders, node)
        if others:
            return UndrainResult(
                resumed=False, why=f"keeper still holds {node} drained for {', '.join(others)}"
            )
        current = await self._node(node)
        if not current.drained_by_keeper:
            why = (
                f"{node} is {current.state}"
                + (f" ({current.reason})" if current.reason else "")
                + ": not a drain keeper made, so keeper leaves it"
            )
            return UndrainResult(resumed=False, why=why)
        await self.controller.update_node(current.name, state=slurm_pb2.NODE_IDLE, reason="")
        return UndrainResult(resumed=True, why=f"{node} resumed: keeper's drain lifted")

    @activity.defn(name="reclaim.close")
    async def close(self, call: CloseCall) -> None:
        """A released holding is closed (the agent let go: a later listing is a new sighting,
        or, after weak evidence or a report on a quarantined holding, the same holding
        reopened). A spared or cancelled one stays open with its fence, only without this
        workflow, so its first sighting and epoch keep guarding it."""
        h = call.holding
        if call.outcome in RELEASED_OUTCOMES:
            outcome = str(call.outcome)
            if call.release is not None and call.release.keeps_fence(call.fenced):
                outcome = WEAKLY_RELEASED if call.release.weak else RELEASED_BY_REPORT
            await asyncio.to_thread(
                self.memory.close_holding,
                h.node, h.job_id, h.sighting, outcome, datetime.now(UTC),
            )  # fmt: skip
        else:
            await asyncio.to_thread(
                self.memory.detach_workflow, h.node, h.job_id, h.sighting, call.workflow_id
            )
