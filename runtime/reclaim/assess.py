"""One read of the controller, folded into keeper's memory and decided: the step the intake
takes for a batch of heartbeats and the workflow takes before every destructive step."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable
from datetime import UTC, datetime

from keeper.domain.reclaim.decide import decide
from keeper.domain.reclaim.epoch import observe
from keeper.domain.reclaim.identity import canonical_node
from keeper.domain.reclaim.jobs import ACTIVE
from keeper.domain.reclaim.models import ControllerView, Decision, EpochState, Holding
from keeper.runtime.reclaim.controller_client import SpurController
from keeper.runtime.reclaim.views import controller_view
from keeper.runtime.settings.reclaim import ReclaimSettings
from keeper.store.reclaim import ReclaimMemory


class Assessor:
    def __init__(
        self, controller: SpurController, memory: ReclaimMemory, settings: ReclaimSettings
    ) -> None:
        self.controller = controller
        self.memory = memory
        self.settings = settings

    def canonical(self, name: str) -> str:
        return canonical_node(name, self.settings.node_aliases)

    async def read(
        self, job_ids: Collection[int], *, everything: bool = False
    ) -> tuple[ControllerView, EpochState]:
        """A view of `job_ids` (or of every job) read now, after every heartbeat it will
        decide, folded into memory: the epoch it shows, with the jobs it shows remembered."""
        began = datetime.now(UTC)
        if everything:
            infos = await self.controller.get_jobs()
        elif job_ids:
            infos = await self.controller.get_jobs(job_ids=sorted(set(job_ids)))
        else:
            infos = []
        # In a thread: a full read is 100,000 jobs, and the tap forwards on this event loop.
        view = await asyncio.to_thread(
            controller_view, infos, datetime.now(UTC), self.settings.node_aliases
        )
        epoch = await asyncio.to_thread(self._fold, view)
        if everything:
            await asyncio.to_thread(self.memory.record_full_read, began)
        return view, epoch

    async def active_by_node(self) -> dict[str, set[int]]:
        """node -> the jobs the controller has running there (allocation committed): what
        a complete heartbeat of that node must list."""
        infos = await self.controller.get_jobs(states=sorted(ACTIVE))
        view = await asyncio.to_thread(
            controller_view, infos, datetime.now(UTC), self.settings.node_aliases
        )
        by_node: dict[str, set[int]] = {}
        for job in view.jobs.values():
            for node in job.nodes:
                by_node.setdefault(node, set()).add(job.job_id)
        return by_node

    def _fold(self, view: ControllerView) -> EpochState:
        epoch = self.memory.epoch()
        known = self.memory.known_jobs(view.jobs)
        observation = observe(view, epoch, known, self.settings.timing.clock_skew)
        if observation.new_epoch or observation.remember or observation.epoch != epoch:
            self.memory.record_observation(observation)
        return observation.epoch

    async def decide(
        self, holdings: Iterable[Holding], view: ControllerView, epoch: EpochState
    ) -> list[tuple[Holding, Decision]]:
        holdings = list(holdings)
        return await asyncio.to_thread(self._decide, holdings, view, epoch)

    def _decide(
        self, holdings: list[Holding], view: ControllerView, epoch: EpochState
    ) -> list[tuple[Holding, Decision]]:
        known = self.memory.known_jobs([h.job_id for h in holdings])
        nodes = self.memory.known_nodes()
        policy = self.settings.timing
        return [(h, decide(h, view, epoch, known.get(h.job_id), nodes, policy)) for h in holdings]

    async def assess(self, holding: Holding, *, everything: bool = False) -> Decision:
        """The holding decided on a fresh read of its job (of every job: `everything`)."""
        view, epoch = await self.read([holding.job_id], everything=everything)
        ((_, decision),) = await self.decide([holding], view, epoch)
        return decision
