"""SpurEmulator: the controller (leader, optional follower), its agents and the control API.

The controller's timestamps (submit, start, end, slurmd start) and terminal aging read the
emulator clock, so a test can age a job past retention without waiting an hour. Agent kill
grace and heartbeat intervals are real asyncio timers: they model delays a caller actually
waits on.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import grpc
from aiohttp import web

from emulators.clock import Clock, EmulatorClock, iso
from emulators.lifecycle import Served, serve_until_signal, start_site
from emulators.spur.agent import Agent
from emulators.spur.config import AgentSpec, SpurEmulatorConfig
from emulators.spur.control import make_app
from emulators.spur.controller import ControllerService
from emulators.spur.holdings import AgentState, CancelRecord, ContentionMode, HoldingKind
from emulators.spur.state import Cluster, Job, NotFound, job_state
from keeper.wire.spur import slurm_pb2_grpc

log = logging.getLogger("emulators.spur")


class SpurEmulator(Served):
    def __init__(self, config: SpurEmulatorConfig | None = None, clock: Clock | None = None):
        self.config = config or SpurEmulatorConfig()
        self.clock: Clock = clock or EmulatorClock()
        self.cluster = Cluster(
            self.clock, first_job_id=self.config.first_job_id, retention=self.config.retention
        )
        self.agents: dict[str, Agent] = {}
        self._servers: list[grpc.aio.Server] = []
        self._runner: web.AppRunner | None = None
        self._controller_port: int | None = None
        self._follower_port: int | None = None
        self._control_port: int | None = None

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._controller_port = await self._serve_controller(self.config.controller_port, None)
        if self.config.follower_port is not None:
            self._follower_port = await self._serve_controller(
                self.config.follower_port, self.controller_target
            )
        for spec in self.config.agents:
            await self.add_agent(spec)

        site = await start_site(make_app(self), self.config.host, self.config.control_port)
        self._runner, self._control_port = site
        log.info(
            "spur emulator: controller on %s, control API on %s, %d agents",
            self.controller_target,
            self.control_url,
            len(self.agents),
        )

    async def _serve_controller(self, port: int, leader: str | None) -> int:
        server = grpc.aio.server()
        service = ControllerService(
            self.cluster,
            resolve=self._resolve,
            boot_time_of=self._boot_time_of,
            token=self.config.token,
            leader=leader,
        )
        slurm_pb2_grpc.add_SlurmControllerServicer_to_server(service, server)
        bound = server.add_insecure_port(f"{self.config.host}:{port}")
        await server.start()
        self._servers.append(server)
        return bound

    async def stop(self) -> None:
        for agent in self.agents.values():
            await agent.stop()
        self.agents.clear()
        for server in self._servers:
            await server.stop(grace=0)
        self._servers.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------- addresses

    @property
    def controller_target(self) -> str:
        if self._controller_port is None:
            raise RuntimeError("emulator not started")
        return f"{self.config.host}:{self._controller_port}"

    @property
    def follower_target(self) -> str:
        if self._follower_port is None:
            raise RuntimeError("no follower: set follower_port in the config")
        return f"{self.config.host}:{self._follower_port}"

    @property
    def control_url(self) -> str:
        if self._control_port is None:
            raise RuntimeError("emulator not started")
        return f"http://{self.config.host}:{self._control_port}"

    def agent(self, node: str) -> Agent:
        try:
            return self.agents[node]
        except KeyError:
            raise NotFound(f"no agent on node {node}") from None

    def agent_target(self, node: str) -> str:
        return self.agent(node).target

    def _agent_address(self) -> str:
        return self.config.controller_address or self.controller_target

    def _named(self, hostname: str) -> AgentState | None:
        return next((a.state for a in self.agents.values() if a.state.hostname == hostname), None)

    def _resolve(self, hostname: str) -> str:
        # The emulator knows which physical node each agent is; anyone else is taken by name.
        state = self._named(hostname)
        return hostname if state is None else state.node

    def _boot_time_of(self, hostname: str) -> float | None:
        state = self._named(hostname)
        return None if state is None else state.boot_time

    # ------------------------------------------------------------- agents

    async def add_agent(self, spec: AgentSpec) -> Agent:
        if spec.node in self.agents:
            raise ValueError(f"node {spec.node} already has an agent")
        if any(a.state.hostname == spec.reported_hostname for a in self.agents.values()):
            raise ValueError(f"hostname {spec.reported_hostname} is already taken")
        base = self.config.agent_base_port
        port = base + len(self.agents) if base else 0
        resources = (spec.cpus, spec.memory_mb, spec.gpus)
        state = AgentState(spec.node, spec.reported_hostname, self.clock.now(), *resources)
        agent = Agent(
            state, self.config, port, self.clock, self._agent_address, self.cluster.live_on
        )
        self.agents[spec.node] = agent
        await agent.start()
        return agent

    async def beat_now(self, node: str) -> list[int]:
        return await self.agent(node).beat_now()

    async def beat_all(self) -> dict[str, list[int]]:
        return {
            node: await agent.beat_now()
            for node, agent in self.agents.items()
            if not agent.state.knobs.down
        }

    async def restart_agent(self, node: str, keep_holdings: bool = True) -> Agent:
        agent = self.agent(node)
        await agent.restart(keep_holdings)
        return agent

    def set_contention(
        self, node: str, mode: ContentionMode, omit: list[int] | None = None
    ) -> None:
        if mode not in ("off", "empty", "partial"):
            raise ValueError(f"invalid field mode: {mode!r}")
        knobs = self.agent(node).state.knobs
        knobs.contention = mode
        knobs.omit = list(omit or [])

    def set_cancel_timeout(self, node: str, seconds: float, acts: bool = True) -> None:
        if seconds < 0:
            raise ValueError("invalid field seconds: must not be negative")
        knobs = self.agent(node).state.knobs
        knobs.cancel_delay = seconds
        knobs.cancel_acts = acts

    def set_down(self, node: str, down: bool = True) -> None:
        self.agent(node).state.knobs.down = down

    def set_reports(self, node: str, reports: bool = True) -> None:
        """Whether the agent's completion reports (ReportJobStatus) reach the controller."""
        self.agent(node).state.knobs.reports = reports

    def hold(
        self, node: str, job_id: int, run_attempt: int = 1, kind: HoldingKind = "process"
    ) -> None:
        """Make an agent hold an id the controller may know nothing about."""
        self.agent(node).state.hold(job_id, run_attempt, kind)

    def holdings(self, node: str) -> dict[int, int]:
        """job id -> run_attempt the agent on `node` holds."""
        return {h.job_id: h.run_attempt for h in self.agent(node).state.holdings.values()}

    def cancels(self, node: str | None = None) -> list[CancelRecord]:
        agents = [self.agent(node)] if node else list(self.agents.values())
        return sorted((r for a in agents for r in a.state.cancels), key=lambda r: r.at)

    # ------------------------------------------------------------- jobs

    def submit(
        self,
        name: str = "job",
        user: str = "alice",
        *,
        array_size: int = 0,
        nodes: list[str] | None = None,
        commit: bool = True,
        kind: HoldingKind = "process",
    ) -> list[Job]:
        """Submit a job (or array tasks); with `nodes`, dispatch each at once."""
        jobs = self.cluster.submit(name, user, array_size)
        for job in jobs if nodes else []:
            self.dispatch(job.job_id, nodes or [], commit=commit, kind=kind)
        return jobs

    def dispatch(
        self,
        job_id: int,
        nodes: list[str],
        *,
        commit: bool = True,
        kind: HoldingKind = "process",
    ) -> Job:
        """RUNNING plus a new run_attempt, the agents hold it, then (optionally) the commit."""
        for node in nodes:
            self.agent(node)
        job = self.cluster.start(job_id, nodes)
        for node in nodes:
            self.agents[node].state.hold(job_id, job.run_attempt, kind)
        if commit:
            self.cluster.commit(job_id)
        return job

    def commit(self, job_id: int) -> Job:
        return self.cluster.commit(job_id)

    def complete(self, job_id: int, state: str | int = "COMPLETED", leak: bool = False) -> Job:
        """End the job; with leak the agents keep holding it (the bug reclaim exists for)."""
        job = self.cluster.finish(job_id, job_state(state))
        if not leak:
            self._release(job_id, job.dispatched_to)
        return job

    def requeue(
        self,
        job_id: int,
        to_nodes: list[str] | None = None,
        *,
        commit: bool = True,
        leak: bool = False,
    ) -> Job:
        """End the current run (PENDING, no nodes); with to_nodes, dispatch the next one."""
        job, previous = self.cluster.requeue(job_id)
        if not leak:
            self._release(job_id, previous)
        if to_nodes:
            self.dispatch(job_id, to_nodes, commit=commit)
        return job

    def wrong_eviction(self, job_id: int, to_nodes: list[str], *, commit: bool = True) -> Job:
        """The controller marks the job's nodes DOWN and reruns it elsewhere, while the old
        agents keep holding (and running) their attempt."""
        job = self.cluster.job(job_id)
        for node in job.allocated_nodes or job.dispatched_to:
            self.cluster.mark_down(node)
        self.requeue(job_id, leak=True)
        return self.dispatch(job_id, to_nodes, commit=commit)

    def _release(self, job_id: int, nodes: list[str]) -> None:
        for node in nodes:
            agent = self.agents.get(node)
            if agent is not None:
                agent.state.release(job_id)

    # ------------------------------------------------------------- controller life

    def advance(self, seconds: float) -> list[int]:
        """Move the clock, then run the scheduler tick: age out jobs, mark silent nodes DOWN."""
        self.clock.advance(seconds)
        if self.config.heartbeat_timeout is not None:
            self.cluster.mark_unresponsive(self.config.heartbeat_timeout)
        return self.cluster.evict()

    def evict(self) -> list[int]:
        return self.cluster.evict()

    def wipe(self) -> None:
        """The controller forgets every job and node; agents keep what they hold."""
        # Agents are not told: their next heartbeat gets NOT_FOUND and registers again.
        self.cluster.wipe()

    async def reset(self) -> None:
        """Back to a fresh start: no jobs, no records, knobs off, every agent registered."""
        self.cluster.wipe()
        self.cluster.incarnation = 1
        self.cluster.drains.clear()
        self.cluster.updates.clear()
        for agent in self.agents.values():
            agent.state = agent.state.fresh(self.clock.now())
            agent.beats.clear()
            agent.registered = False
            with contextlib.suppress(grpc.aio.AioRpcError):
                await agent.register()

    # ------------------------------------------------------------- inspection

    def state(self) -> dict[str, Any]:
        cluster = self.cluster.to_json()
        return {
            "clock": iso(self.clock.now()),
            "controller_target": self.controller_target,
            "follower_target": self.follower_target if self._follower_port else None,
            **cluster,
            "agents": [
                {
                    **agent.state.to_json(),
                    "target": agent.target,
                    "registered": agent.registered,
                    "pending_kills": agent.pending_kills(),
                    "beats": [{**beat, "at": iso(beat["at"])} for beat in agent.beats[-10:]],
                    "reports": [{**r, "at": iso(r["at"])} for r in agent.reports[-10:]],
                }
                for agent in self.agents.values()
            ],
            "cancels": [record.to_json() for record in self.cancels()],
        }


async def serve(config: SpurEmulatorConfig) -> None:
    await serve_until_signal(SpurEmulator(config), log, "spur emulator")
