"""The tap's own counters (forwarded, observed, dropped, observer and decode errors) where an
operator reads them: the intake's `/healthz` JSON beside the intake's counters, and the
`keeper_reclaim_tap_*` Prometheus metrics of `keeper reclaim tap` on
`reclaim.metrics_address`, each at 0 from the start, so a rule that watches one fires on its
first increase."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import httpx
import pytest
import yaml
from google.protobuf import empty_pb2

from emulators.spur import SpurEmulator, SpurEmulatorConfig
from emulators.spur.config import AgentSpec
from keeper.runtime import metrics as m
from keeper.runtime.reclaim.service import run_tap
from keeper.runtime.reclaim.tap import HeartbeatTap, TapCounters
from keeper.runtime.settings import Settings, SettingsError, load_settings
from keeper.runtime.settings.reclaim import ReclaimSettings
from keeper.wire.spur import slurm_pb2_grpc
from tests.metrics_support import samples
from tests.reclaim.test_reclaim_cli import keeper_now, offline_config
from tests.reclaim.world import free_port, until

TAP_FIELDS = {"forwarded", "observed", "dropped", "observer_errors", "decode_errors"}


def tap_settings(tmp_path: Path, controller_port: int, **reclaim: object) -> Settings:
    fields: dict[str, object] = {
        "controller_address": f"127.0.0.1:{controller_port}",
        "tap_address": "127.0.0.1:0",
        "intake_address": "127.0.0.1:0",
        "store_url": f"sqlite:///{tmp_path / 'reclaim.db'}",
        "batch_window": timedelta(milliseconds=20),
    }
    settings = Settings()
    settings.reclaim = ReclaimSettings.model_validate({**fields, **reclaim})
    return settings


@contextlib.asynccontextmanager
async def agents_through(tap: HeartbeatTap, controller_port: int) -> AsyncIterator[SpurEmulator]:
    emu = SpurEmulator(
        SpurEmulatorConfig(
            controller_port=controller_port,
            agents=[AgentSpec(node="gpu-node-01")],
            controller_address=f"127.0.0.1:{tap.port}",
        )
    )
    await emu.start()
    try:
        yield emu
    finally:
        await emu.stop()


def tap_series(text: str) -> dict[str, float]:
    return {name: v for (name, _), v in samples(text).items() if name.startswith("keeper_")}


async def scrape(url: str) -> str:
    async with httpx.AsyncClient(timeout=5) as http:
        answer = await http.get(url)
        answer.raise_for_status()
        assert answer.headers["content-type"].startswith("text/plain"), answer.headers
        return answer.text


async def test_healthz_and_metrics_show_the_taps_counters_from_zero(tmp_path: Path) -> None:
    controller_port, metrics_port = free_port(), free_port()
    settings = tap_settings(tmp_path, controller_port, metrics_address=f"127.0.0.1:{metrics_port}")
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    async with run_tap(settings, None) as (tap, intake, intake_port):
        # Nothing has reached the tap yet: every counter is there, at 0.
        first = await scrape(metrics_url)
        assert tap_series(first) == {metric.name: 0.0 for metric in m.TAP_METRICS}
        for metric in m.TAP_METRICS:
            assert f"# TYPE {metric.name} counter" in first
            assert f"# HELP {metric.name} {metric.help}" in first

        async with agents_through(tap, controller_port) as emu:
            await emu.beat_now("gpu-node-01")
            await emu.beat_now("gpu-node-01")
            await tap.drained()
            await intake.idle()
        # A call the proto does not declare is forwarded and counted, never observed.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{tap.port}") as channel:
            stub = slurm_pb2_grpc.SlurmControllerStub(channel)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await stub.Ping(empty_pb2.Empty(), timeout=5)
        await until(lambda: tap.counters.forwarded >= 4, what="the forwarded calls")

        counted = tap.counters
        assert counted.observed >= 3  # a registration and two heartbeats
        series = tap_series(await scrape(metrics_url))
        assert series == {
            "keeper_reclaim_tap_forwarded_total": counted.forwarded,
            "keeper_reclaim_tap_observed_total": counted.observed,
            "keeper_reclaim_tap_dropped_total": counted.dropped,
            "keeper_reclaim_tap_observer_errors_total": counted.observer_errors,
            "keeper_reclaim_tap_decode_errors_total": counted.decode_errors,
        }

        async with httpx.AsyncClient(timeout=5) as http:
            health = (await http.get(f"http://127.0.0.1:{intake_port}/healthz")).json()
        assert health["status"] == "ok"
        assert set(health["tap"]) == TAP_FIELDS | {"queued"}
        assert health["tap"]["forwarded"] == counted.forwarded
        assert health["tap"]["observed"] == counted.observed
        assert health["intake"]["reports"] >= 2 and "bad_names" in health["intake"]


async def test_metrics_are_served_while_the_store_cannot_open(tmp_path: Path) -> None:
    # The tap forwards before (and without) its intake: its counters must show that too.
    controller_port, metrics_port = free_port(), free_port()
    settings = tap_settings(
        tmp_path,
        controller_port,
        metrics_address=f"127.0.0.1:{metrics_port}",
        store_url="postgresql://keeper@127.0.0.1:1/nowhere",
    )
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"

    async def serve() -> None:
        async with run_tap(settings, None):
            await asyncio.Event().wait()

    serving = asyncio.create_task(serve())
    try:
        first = await until(lambda: _try_scrape(metrics_url), within=20, what="the endpoint")
        assert tap_series(first)["keeper_reclaim_tap_forwarded_total"] == 0
        assert not serving.done()  # still retrying the store, still forwarding
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


async def _try_scrape(url: str) -> str | None:
    try:
        return await scrape(url)
    except httpx.HTTPError:
        return None


async def test_a_taken_metrics_address_stops_the_tap_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = tap_settings(tmp_path, free_port(), metrics_address=f"127.0.0.1:{port}")
        with pytest.raises(m.MetricsEndpointError, match=r"reclaim\.metrics_address"):
            async with run_tap(settings, None):
                pass


def test_keeper_reclaim_tap_on_a_taken_metrics_address_exits_1_naming_it(tmp_path: Path) -> None:
    # In the main thread: the command installs its SIGTERM handler as it would in a shell.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = offline_config(tmp_path)
        tree = yaml.safe_load(config.read_text())
        tree["reclaim"]["metrics_address"] = f"127.0.0.1:{port}"
        tree["reclaim"]["tap_address"] = "127.0.0.1:0"
        tree["reclaim"]["intake_address"] = "127.0.0.1:0"
        config.write_text(yaml.safe_dump(tree))
        done = keeper_now(config, "reclaim", "tap")
    assert done.code == 1 and done.out == "", done
    assert f"reclaim.metrics_address '127.0.0.1:{port}': cannot serve metrics" in done.err, done
    assert "KEEPER_RECLAIM_METRICS_ADDRESS" in done.err and "Traceback" not in done.err, done


def test_the_taps_metrics_address_is_off_until_its_variable_sets_it_and_a_bad_one_is_named(
    tmp_path: Path,
) -> None:
    file = tmp_path / "keeper.yaml"
    file.write_text("{}\n")
    assert load_settings(file, env={}).reclaim.metrics_address == ""
    env = {"KEEPER_RECLAIM_METRICS_ADDRESS": "0.0.0.0:9466"}
    assert load_settings(file, env=env).reclaim.metrics_address == "0.0.0.0:9466"
    with pytest.raises(SettingsError, match=r"reclaim\.metrics_address"):
        load_settings(file, env={"KEEPER_RECLAIM_METRICS_ADDRESS": "nine"})


def test_every_tap_counter_has_its_metric() -> None:
    assert {metric.name for metric in m.TAP_METRICS} == {
        f"keeper_reclaim_tap_{name}_total" for name in TAP_FIELDS
    }
    assert set(TapCounters.__dataclass_fields__) == TAP_FIELDS
