"""The clients the job-reclaim family uses, built from settings in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from keeper.runtime.reclaim.agent_client import SpurAgents
from keeper.runtime.reclaim.controller_client import SpurController
from keeper.runtime.reclaim.credentials import TOKEN_ENV, SpurToken
from keeper.runtime.settings.reclaim import ReclaimSettings
from keeper.store.reclaim import ReclaimMemory, open_reclaim_memory


@dataclass
class ReclaimDeps:
    settings: ReclaimSettings
    controller: SpurController
    agents: SpurAgents
    memory: ReclaimMemory

    async def aclose(self) -> None:
        await self.controller.aclose()
        await self.agents.aclose()
        self.memory.close()


def spur_token(settings: ReclaimSettings, env: Mapping[str, str] | None = None) -> SpurToken:
    """KEEPER_SPUR_TOKEN wins over reclaim.token_file; with neither, calls go anonymous."""
    env = os.environ if env is None else env
    if env.get(TOKEN_ENV, "").strip() or settings.token_file is None:
        return SpurToken(environ=env)
    return SpurToken(path=settings.token_file)


def spur_controller(settings: ReclaimSettings, token: SpurToken | None = None) -> SpurController:
    """The controller client the worker and the intake both use."""
    return SpurController(
        settings.controller_address,
        timeout=settings.call_timeout.total_seconds(),
        token=token if token is not None else spur_token(settings),
    )


def open_reclaim_deps(settings: ReclaimSettings) -> ReclaimDeps:
    token = spur_token(settings)
    return ReclaimDeps(
        settings=settings,
        controller=spur_controller(settings, token),
        agents=SpurAgents(timeout=settings.cancel_timeout.total_seconds(), token=token),
        memory=open_reclaim_memory(settings.store_url),
    )
