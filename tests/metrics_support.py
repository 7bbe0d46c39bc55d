"""Reading back what a test's own worker counted: a client whose workers count into a
Prometheus runtime of their own, and the scrape of its /metrics endpoint."""

from __future__ import annotations

import asyncio
import re

import httpx
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keeper.runtime import metrics as m
from keeper.runtime.temporal_client import connect
from tests import harness
from tests.harness import free_port


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The exposition's samples: (name, labels) -> value."""
    found = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)
        found[(name, frozenset(pairs))] = float(value)
    return found


def value(scraped: dict, name: str, **labels: str) -> float:
    """The sum over the series of `name` that carry `labels` (other labels vary: queue)."""
    want = set(labels.items())
    return sum(v for (n, pairs), v in scraped.items() if n == name and want <= pairs)


async def scrape_until(
    url: str,
    ready: dict[str, dict[str, str]],
    within: float = 20,
    at_least: dict[str, float] | None = None,
) -> dict:
    """Scrapes until every `ready` series is above 0 (or at `at_least[name]`), or `within`
    has passed; the last scrape either way, for the test's own asserts to judge."""
    minimum = at_least or {}
    async with httpx.AsyncClient(timeout=5) as http:
        deadline = asyncio.get_running_loop().time() + within
        while True:
            scraped = samples((await http.get(url)).raise_for_status().text)
            if all(
                value(scraped, name, **labels) >= minimum.get(name, 1e-9)
                for name, labels in ready.items()
            ):
                return scraped
            if asyncio.get_running_loop().time() > deadline:
                return scraped
            await asyncio.sleep(0.2)


async def metered_client(env: WorkflowEnvironment) -> tuple[Client, str]:
    """A client whose workers count into a Prometheus runtime of their own: (client, the
    /metrics URL), so a test reads back exactly what its own worker counted."""
    address = f"127.0.0.1:{free_port()}"
    settings = harness.settings_for_tests()
    settings.temporal.address = env.client.service_client.config.target_host
    client = await connect(settings.temporal, runtime=m.prometheus_runtime(address))
    return client, f"http://{address}/metrics"
