"""One round of `/health` checks across a slice's VMs.

All probes share one httpx client and run concurrently behind a semaphore: httpx's pool
slows down sharply past a few dozen concurrent connections, so the bound is what keeps a
512-VM round under a second (see bench/tpu_bootstrap.py).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import httpx
from temporalio import activity

from activities.tpu import not_yet
from domain.bootstrap_models import HealthCheckInput, HealthReport, VmFailure
from domain.observation import VmEndpoint, bucket
from runtime.tracing import tracer


class HealthProber:
    def __init__(self, concurrency: int = 32, timeout: timedelta = timedelta(seconds=2)) -> None:
        self._concurrency = concurrency
        self._timeout = timeout.total_seconds()

    async def _probe(
        self, client: httpx.AsyncClient, gate: asyncio.Semaphore, vm: VmEndpoint, url: str
    ) -> VmFailure | None:
        async with gate:
            try:
                response = await client.get(url)
            except httpx.TimeoutException:
                reason = f"no answer within {self._timeout:g}s"
            except httpx.HTTPError as err:
                reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            else:
                if response.status_code == 200:
                    return None
                reason = f"HTTP {response.status_code}"
        return VmFailure(node=vm.node, index=vm.index, ip=vm.ip, reason=reason)

    async def round(self, vms: list[VmEndpoint], port: int, path: str) -> HealthReport:
        started = time.monotonic()
        gate = asyncio.Semaphore(self._concurrency)
        limits = httpx.Limits(max_connections=self._concurrency, max_keepalive_connections=0)
        with tracer().start_as_current_span("health.round", attributes={"vms": len(vms)}):
            async with httpx.AsyncClient(timeout=self._timeout, limits=limits) as client:
                results = await asyncio.gather(
                    *(self._probe(client, gate, vm, f"http://{vm.ip}:{port}{path}") for vm in vms)
                )
        failing = [r for r in results if r is not None]
        return HealthReport(
            total=len(vms),
            healthy=len(vms) - len(failing),
            failing=failing,
            round_seconds=round(time.monotonic() - started, 3),
        )


class HealthActivities:
    def __init__(self, prober: HealthProber) -> None:
        self._prober = prober

    @activity.defn
    async def check_health(self, inp: HealthCheckInput) -> HealthReport:
        """Returns when every VM is healthy or the healthy count moved a visible step."""
        report = await self._prober.round(inp.targets, inp.port, inp.path)
        if report.all_healthy or bucket(report.healthy, report.total) != inp.last_bucket:
            return report
        raise not_yet(
            f"health: {report.healthy}/{report.total} VMs healthy; first failing: "
            + ", ".join(f"{f.ip} ({f.reason})" for f in report.failing[:5]),
            report,
        )
