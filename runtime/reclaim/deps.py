"""The clients the job-reclaim family uses, built from settings in one place."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.reclaim.agent_client import SpurAgents
from runtime.reclaim.assess import Assessor
from runtime.reclaim.controller_client import SpurController
from runtime.reclaim.credentials import SpurToken
from runtime.settings import ReclaimSettings
from store.reclaim import ReclaimMemory, open_reclaim_memory


@dataclass
class ReclaimDeps:
    settings: ReclaimSettings
    controller: SpurController
    agents: SpurAgents
    memory: ReclaimMemory

    @property
    def assessor(self) -> Assessor:
        return Assessor(self.controller, self.memory, self.settings)

    async def aclose(self) -> None:
        await self.controller.aclose()
        await self.agents.aclose()
        self.memory.close()


def spur_token(settings: ReclaimSettings) -> SpurToken:
    return SpurToken(file=settings.token_file)


def open_reclaim_deps(settings: ReclaimSettings) -> ReclaimDeps:
    token = spur_token(settings)
    return ReclaimDeps(
        settings=settings,
        controller=SpurController(
            settings.controller_address,
            timeout=settings.call_timeout.total_seconds(),
            token=token,
        ),
        agents=SpurAgents(timeout=settings.cancel_timeout.total_seconds(), token=token),
        memory=open_reclaim_memory(settings.store_url),
    )
