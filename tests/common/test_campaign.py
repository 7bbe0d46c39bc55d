"""The short fault campaign (bench/campaign.py --long is the long one): a fixed seed, a
few runs of every family with each cheap fault at least once, then the auditor and the
secrets scan, which must find nothing; and the auditor shown able to fail.
"""

from __future__ import annotations

import asyncio
import importlib
import shlex
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from bench.campaign_audit import audit_reclaim, audit_runners, audit_tpu, audit_watch
from bench.campaign_plan import FAULT_KINDS, draw
from bench.campaign_report import LEAK, WRONGFUL_KILL, ZOMBIE
from bench.campaign_run import CampaignConfig, run_campaign
from bench.campaign_secrets import scan, secrets_in
from emulators.provider import state as provider_state
from emulators.spur.config import AgentSpec
from emulators.tpu import Scenario, TpuEmulator
from emulators.tpu.testing import client_for, create_qr
from tests.diagnostics import open_runs_since
from tests.e2e_support import REPO
from tests.reclaim.world import reclaim_world, until
from tests.runners.world import SCOPE, RunnerWorld
from tests.watch.world import watch_world

pytestmark = pytest.mark.e2e

SEED = 20261201
# One run per fault kind of each family: the first runs of a family take its kinds in turn.
SHORT = CampaignConfig(
    seed=SEED,
    bootstraps=len(FAULT_KINDS["tpu"]),
    deletions=len(FAULT_KINDS["runners"]),
    reclaims=len(FAULT_KINDS["reclaim"]),
    watches=len(FAULT_KINDS["watch"]),
)


def test_the_draw_is_a_function_of_the_seed_and_covers_every_kind() -> None:
    counts = SHORT.counts()
    first, again, other = draw(SEED, counts), draw(SEED, counts), draw(SEED + 1, {"tpu": 40})
    assert [(r.label, r.faults, r.params) for r in first] == [
        (r.label, r.faults, r.params) for r in again
    ]
    for family, kinds in FAULT_KINDS.items():
        drawn = {r.faults[0] for r in first if r.family == family}
        assert drawn == set(kinds), family
    assert [r.faults for r in other] != [r.faults for r in draw(SEED, {"tpu": 40})]


async def test_short_campaign_leaks_nothing_kills_nothing_and_shows_no_secret(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
) -> None:
    # The suite's emulator is shared, and earlier tests moved its clock ahead of the wall
    # clock the dev server keeps; the auditor must compare phone-homes with close times on
    # one clock regardless, so the test moves it a year on purpose.
    emu.advance(365 * 24 * 3600)
    began = datetime.now(UTC)
    try:
        # Alone it takes 20 to 30 s. A worker kill stalls whatever activity it cut short
        # until that attempt's start-to-close (a TPU create call: 2 minutes) runs out.
        report = await asyncio.wait_for(run_campaign(SHORT, dev_env.client, emu, tmp_path), 420)
    except TimeoutError:
        pytest.fail(f"the campaign did not finish:\n{await open_runs_since(dev_env.client, began)}")
    print(report.text())
    assert report.runs_by_family() == SHORT.counts()
    unfinished = [r for r in report.runs if r.status in ("ERROR", "TIMED_OUT", "RUNNING")]
    assert unfinished == [], unfinished
    assert set(report.faults_by_kind()) == {k for ks in FAULT_KINDS.values() for k in ks} - {"none"}
    assert report.worker_kills == {"tpu": 1, "runners": 1, "reclaim": 1, "watch": 1}
    assert report.findings == [], report.text()
    assert report.histories_scanned >= sum(SHORT.counts().values())
    # Every family's histories are read: a TPU run has a supervisor and a phase child, and
    # a reclaim's closed workflow is found through visibility, not the intake's open list.
    scanned = report.histories_by_family
    assert scanned["tpu"] >= 2 * SHORT.bootstraps - 2, scanned  # late-fulfilment runs too
    for family in ("runners", "reclaim", "watch"):
        assert scanned[family] >= SHORT.counts()[family], scanned
    assert report.secrets_found == []


async def test_the_auditor_reports_resources_created_behind_keepers_back(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, world: RunnerWorld
) -> None:
    # A QR nobody's bootstrap owns, fulfilled at once so its VMs boot and phone home.
    emu.set_default_scenario(Scenario(assign_after=0, active_after=0, ips_after=0))
    tpu, channel = client_for(emu)
    stray = f"stray-{uuid.uuid4().hex[:6]}"
    try:
        await create_qr(tpu, stray)
    finally:
        await channel.close()
    await until(
        lambda: [vm for vm in emu.state()["vms"] if vm["qr"] == stray and vm["phoned_home_at"]],
        what="the stray slice's VMs to phone home",
    )
    findings = await audit_tpu(dev_env.client, emu)
    assert any(f.kind == LEAK and f"queued_resource/{stray}" in f.what for f in findings), findings
    assert any(f.kind == ZOMBIE and f"vm/{stray}" in f.what for f in findings), findings
    # A provider instance and a GitHub registration with no runner record.
    provider_state.add_instance(world.provider_config, "orphan", "set-a", provider_id="i-orphan")
    world.github.add_runner(SCOPE, "orphan-reg", labels=["self-hosted"])
    found = [f.what for f in await audit_runners(dev_env.client, world)]
    assert any("provider instance i-orphan" in w for w in found), found
    assert any("GitHub registration" in w and "orphan-reg" in w for w in found), found


@workflow.defn(sandboxed=False)
class CarriesThenDrops:
    """Holds its input in the first run only, then continues as new without it."""

    @workflow.run
    async def run(self, carried: str) -> str:
        if carried:
            workflow.continue_as_new("")
        return "done"


async def test_the_secrets_scan_reads_every_run_of_a_workflow_not_only_the_latest(
    dev_env: WorkflowEnvironment,
) -> None:
    queue = f"scan-{uuid.uuid4().hex[:8]}"
    workflow_id = f"scan-{uuid.uuid4().hex[:8]}"
    async with Worker(dev_env.client, task_queue=queue, workflows=[CarriesThenDrops]):
        handle = await dev_env.client.start_workflow(
            CarriesThenDrops.run, "ghp_onlyinthefirstrun", id=workflow_id, task_queue=queue
        )
        assert await asyncio.wait_for(handle.result(), 30) == "done"
    secret = {"GitHub token": "ghp_onlyinthefirstrun"}
    read, found = await scan(dev_env.client, [workflow_id], secret)
    assert read == 2, read
    assert len(found) == 1 and found[0].startswith(workflow_id), found
    assert found[0].endswith(": GitHub token")


def test_the_secrets_scan_finds_a_token_inside_a_base64_payload() -> None:
    history = {"events": [{"input": {"payloads": [{"data": "eyJ0b2tlbiI6ICJnaHBfc2VjcmV0In0="}]}}]}
    assert secrets_in(history, ["ghp_secret", "absent"]) == ["ghp_secret"]


async def test_the_auditor_reports_a_held_finished_job_and_a_stop_nobody_approved(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # A finished job the node's agent still holds, with no reclaim (no heartbeat reported it).
    node = f"pl{uuid.uuid4().hex[:6]}-01"
    async with reclaim_world(
        dev_env.client, tmp_path, agents=[AgentSpec(node=node)], worker=False
    ) as w:
        (job,) = w.emu.submit(nodes=[node])
        w.emu.complete(job.job_id, leak=True)
        found = [f.what for f in await audit_reclaim(dev_env.client, w, [node])]
    assert found == [f"{node} still holds finished job {job.job_id}, no reclaim open"]
    # A healthy job stopped behind keeper's back: a stop nobody approved.
    async with watch_world(dev_env.client) as ww:
        job_id = ww.launch("healthy")
        ww.emu.controller.terminate(job_id)
        ww.emu.controller.record("TerminateJob", job_id, "someone")
        kills = await audit_watch(dev_env.client, ww, {})
    assert [f.kind for f in kills] == [WRONGFUL_KILL], kills


@pytest.mark.parametrize(
    "argv",
    [
        ["--seed", "7"],
        ["--seed", "7", "--long"],
        ["--seed", "9", "--bootstraps", "3", "--deletions", "0", "--concurrency", "4",
         "--runner-property-examples", "50", "--runner-property-batch", "5"],
    ],
)  # fmt: skip
def test_the_replay_line_spells_out_every_count_and_option(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    campaign = importlib.import_module("campaign")
    args = campaign.parse(argv)
    replay = shlex.split(campaign.replay_command(args))
    assert replay[:2] == ["python", "bench/campaign.py"]
    again = campaign.parse(replay[2:])
    fields = [f for f in vars(args) if f not in ("json", "verbose")]
    assert {f: getattr(again, f) for f in fields} == {f: getattr(args, f) for f in fields}
    # Spelled out, not left to defaults that may change.
    assert "--bootstraps" in replay and "--runner-property-batch" in replay


def test_a_long_failing_property_report_keeps_its_error_lines_and_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's falsifying example runs to thousands of lines of reprs before the error
    hypothesis reports; the cut report must still carry that error."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    campaign = importlib.import_module("campaign")
    reprs = [f"  |     Runner(scale_set='set-a', n={i})," for i in range(3000)]
    stdout = "\n".join(
        [
            "....F",
            "=================================== FAILURES ===================================",
            "  | hypothesis.errors.FlakyFailure: Hypothesis test(batch=[",
            *reprs,
            "  | ])",
            "  +-+---------------- 1 ----------------",
            "    | AssertionError: stranded: deletions of ['r-3'] still running 150s",
            *[f"    | note {i}" for i in range(300)],
            "FAILED tests/runners/test_runner_properties.py::test_x - FlakyFailure",
            'time=2026 level=WARN msg="a dev server line"',
        ]
    )
    kept = campaign.failure_of(stdout, "")
    assert len(kept) < 600, len(kept)
    assert " FAILURES " in kept[0]
    assert any("AssertionError: stranded" in line for line in kept)
    assert kept[-1].startswith("FAILED tests/runners/test_runner_properties.py")
    assert not any("level=" in line for line in kept)
    short = "=== FAILURES ===\nE   assert 1 == 2\n"
    assert campaign.failure_of(short, "") == ["=== FAILURES ===", "E   assert 1 == 2"]
