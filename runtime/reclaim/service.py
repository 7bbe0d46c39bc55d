"""`keeper reclaim tap`: the heartbeat tap, the intake behind it and the HTTP intake, in one
process beside (not inside) the worker, so agents keep reaching their controller while
workers restart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import grpc
from aiohttp import web
from temporalio.client import Client

from keeper.domain.reclaim.identity import NodeNameError, canonical_node
from keeper.runtime import metrics
from keeper.runtime.dev_ports import split_address
from keeper.runtime.reclaim.assess import Assessor
from keeper.runtime.reclaim.deps import spur_controller
from keeper.runtime.reclaim.intake import Handled, Intake, Report
from keeper.runtime.reclaim.tap import HeartbeatTap, TapEvent
from keeper.runtime.settings import Settings
from keeper.store.database import StoreUnavailable
from keeper.store.reclaim import ReclaimMemory, open_reclaim_memory
from keeper.wire.spur import slurm_pb2

log = logging.getLogger("keeper.reclaim.tap")
# A completion report is the agent's word about its own map whatever the controller made of
# the job (NOT_FOUND for one it lost, INVALID_ARGUMENT for one it moved): only a caller the
# controller would not accept is nobody's evidence.
_REPORT_REFUSED = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
MAX_REPORTED_JOBS = 4096


def handled_json(h: Handled) -> dict[str, Any]:
    return {
        "node": h.node,
        "job_id": h.job_id,
        "verdict": h.decision.verdict.value,
        "reason": h.decision.reason.value,
        "detail": h.decision.detail,
        "workflow_id": h.workflow_id,
        "started": h.started,
    }


def _peer_host(peer: str) -> str:
    # grpc peers read "ipv4:10.0.0.7:51234" or "ipv6:[::1]:51234".
    _, _, rest = peer.partition(":")
    host, _, _ = rest.rpartition(":")
    return host.strip("[]")


async def on_tap_event(intake: Intake, event: TapEvent) -> None:
    # The tap decodes each method it observes into its own request type: the type names it.
    msg = event.message
    if isinstance(msg, slurm_pb2.ReportJobStatusRequest):
        if not msg.reporting_node:
            return  # a job-level report (spur's Kubernetes operator), not an agent's word
        if event.status in _REPORT_REFUSED:
            intake.counters.refused += 1
            return
        intake.offer(
            Report(
                hostname=msg.reporting_node,
                job_ids=(msg.job_id,),
                received_at=event.received_at,
                complete=False,
                source="report-job-status",
                finished=True,
            )
        )
        return
    if event.status is not grpc.StatusCode.OK:
        # The controller refused it (an unknown or unregistered node, a denied token, a
        # hostname its node token does not bind): what it claims is nobody's evidence, and a
        # refused registration's address is nobody's.
        intake.counters.refused += 1
        return
    if isinstance(msg, slurm_pb2.RegisterAgentRequest):
        await intake.registered(
            msg.hostname, msg.address or _peer_host(event.peer), msg.port, event.received_at
        )
    elif isinstance(msg, slurm_pb2.HeartbeatRequest):
        intake.offer(
            Report(
                hostname=msg.hostname,
                job_ids=tuple(j.job_id for j in msg.running_jobs),
                received_at=event.received_at,
                complete=True,
            )
        )


def parse_report(body: Any) -> tuple[str, tuple[int, ...]]:
    """A POST /report body: {"node": "gpu-node-07", "jobs": [1234, 1240]}."""
    if not isinstance(body, dict):
        raise ValueError('the body must be a JSON object: {"node": "...", "jobs": [...]}')
    unknown = sorted(set(body) - {"node", "jobs"})
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}; the fields are node and jobs")
    node = body.get("node")
    if not isinstance(node, str) or not node.strip():
        raise ValueError("node: a node name is required")
    try:
        canonical_node(node)  # the aliases map names, never make a bad one good
    except NodeNameError as err:
        # As `keeper reclaim report` refuses it: a 400, not a report that decides nothing.
        raise ValueError(f"node: {err}") from None
    jobs = body.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ValueError("jobs: a non-empty list of job ids is required")
    if len(jobs) > MAX_REPORTED_JOBS:
        raise ValueError(f"jobs: at most {MAX_REPORTED_JOBS} job ids per report")
    for j in jobs:
        if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < 2**32:
            raise ValueError(f"jobs: {j!r} is not a job id (an integer from 0 to 4294967295)")
    return node, tuple(jobs)


# Each keeper_reclaim_tap_* metric and the TapCounters field it shows.
TAP_COUNTERS = {
    metrics.TAP_FORWARDED: "forwarded",
    metrics.TAP_OBSERVED: "observed",
    metrics.TAP_DROPPED: "dropped",
    metrics.TAP_OBSERVER_ERRORS: "observer_errors",
    metrics.TAP_DECODE_ERRORS: "decode_errors",
}


def tap_metrics_app(tap: HeartbeatTap) -> web.Application:
    """GET /metrics: the tap's counters as keeper_reclaim_tap_* (docs/operations.md), read
    at each scrape, so each is there from the start, at 0."""

    async def scrape(_request: web.Request) -> web.Response:
        text = metrics.exposition(
            {metric: getattr(tap.counters, field) for metric, field in TAP_COUNTERS.items()}
        )
        return web.Response(
            body=text.encode(), headers={"Content-Type": metrics.EXPOSITION_CONTENT_TYPE}
        )

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    return app


@contextlib.asynccontextmanager
async def serve_tap_metrics(tap: HeartbeatTap, address: str) -> AsyncIterator[None]:
    """The tap's /metrics on `address` (reclaim.metrics_address) while the block runs."""
    runner = web.AppRunner(tap_metrics_app(tap), access_log=None)
    await runner.setup()
    try:
        host, port = split_address(address, "reclaim.metrics_address")
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as err:
            raise metrics.MetricsEndpointError(
                f"reclaim.metrics_address {address!r}: cannot serve metrics there ({err}); "
                'choose a free HOST:PORT, or set it to "" to turn the tap\'s metrics off'
            ) from None
        yield
    finally:
        await runner.cleanup()


def intake_app(intake: Intake, tap: HeartbeatTap | None = None) -> web.Application:
    async def report(request: web.Request) -> web.Response:
        try:
            node, jobs = parse_report(await request.json())
        except ValueError as err:
            return web.json_response({"error": str(err)}, status=400)
        handled = await intake.process(
            [Report(node, jobs, datetime.now(UTC), complete=False, source="http")]
        )
        return web.json_response({"handled": [handled_json(h) for h in handled]})

    async def health(_request: web.Request) -> web.Response:
        body: dict[str, Any] = {"status": "ok", "intake": asdict(intake.counters)}
        if tap is not None:
            # The tap's counters, and the copies waiting for the intake.
            body["tap"] = {**asdict(tap.counters), "queued": tap.queued}
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/report", report)
    app.router.add_get("/healthz", health)
    return app


@contextlib.asynccontextmanager
async def open_intake(
    settings: Settings,
    client: Client | None,
    connect: Callable[[], Awaitable[Client]] | None = None,
) -> AsyncIterator[Intake]:
    """An intake on its own controller client and memory, closed on exit."""
    controller = spur_controller(settings.reclaim)
    memory: ReclaimMemory = open_reclaim_memory(settings.reclaim.store_url)
    try:
        yield Intake(
            Assessor(controller, memory, settings.reclaim), client, settings, connect=connect
        )
    finally:
        await controller.aclose()
        memory.close()


STORE_RETRY_S = 5.0


async def _open_intake_retrying(
    stack: contextlib.AsyncExitStack,
    settings: Settings,
    client: Client | None,
    connect: Callable[[], Awaitable[Client]] | None,
) -> Intake:
    """Opens the intake's memory, again every STORE_RETRY_S until it opens: the tap
    forwards all the while, since agents must reach their controller whatever keeper's own
    store does."""
    while True:
        try:
            return await stack.enter_async_context(open_intake(settings, client, connect))
        except StoreUnavailable as err:
            log.error(
                "reclaim memory unavailable (%s); forwarding goes on, the intake starts when "
                "it opens (retrying every %.0fs)", err, STORE_RETRY_S,
            )  # fmt: skip
            await asyncio.sleep(STORE_RETRY_S)


@contextlib.asynccontextmanager
async def run_tap(
    settings: Settings,
    client: Client | None,
    connect: Callable[[], Awaitable[Client]] | None = None,
) -> AsyncIterator[tuple[HeartbeatTap, Intake, int]]:
    """The tap, its intake loop and the HTTP intake, serving until the block exits. The tap
    starts first (after its metrics endpoint, when reclaim.metrics_address is set) and
    forwards from then on, whether or not the intake ever can."""
    ready: list[Intake] = []

    async def observer(event: TapEvent) -> None:
        if ready:
            await on_tap_event(ready[0], event)

    tap_host, tap_port = split_address(settings.reclaim.tap_address, "reclaim.tap_address")
    tap = HeartbeatTap(
        upstream=settings.reclaim.controller_address,
        host=tap_host,
        port=tap_port,
        observer=observer,
    )
    async with contextlib.AsyncExitStack() as stack:
        if settings.reclaim.metrics_address:
            await stack.enter_async_context(
                serve_tap_metrics(tap, settings.reclaim.metrics_address)
            )
        await tap.start()
        stack.push_async_callback(tap.stop)
        intake = await _open_intake_retrying(stack, settings, client, connect)
        ready.append(intake)
        runner = web.AppRunner(intake_app(intake, tap), access_log=None)
        await runner.setup()
        host, port = split_address(settings.reclaim.intake_address, "reclaim.intake_address")
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = port or runner.addresses[0][1]
        loop = asyncio.create_task(intake.run(), name="reclaim-intake")
        try:
            yield tap, intake, bound
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
            await runner.cleanup()
