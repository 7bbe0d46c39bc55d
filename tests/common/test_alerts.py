"""keeper's one alert channel: the table of alerts, the webhook URL's sources, the
`common.alert` activity against a real HTTP receiver, and each family's alert end to end on
the dev server: exactly one post per event, Slack's JSON, untrusted text escaped, and the
secret URL in no history.

The end-to-end cases also record their histories (tests/histories/2026-12-01-alerts/) on
demand, for tests/common/test_replay.py:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=2026-12-01-alerts \\
        pytest tests/common/test_alerts.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from temporalio.client import WorkflowHandle
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from keeper.activities.alerts import AlertActivities
from keeper.domain.common.alerts import (
    ALERT_ATTEMPTS,
    ALERT_TABLE,
    EVIDENCE_LINES,
    SUMMARY_LIMIT,
    Alert,
    AlertKind,
    alert_key,
    make_alert,
    watch_notice_kind,
)
from keeper.runtime.alerts import (
    ALERT_WEBHOOK_ENV,
    AlertChannel,
    alert_webhook_url,
)
from keeper.runtime.settings import Settings, SettingsError, load_settings
from keeper.runtime.webhook import WebhookUrl
from tests.harness import env_flag, free_port
from tests.metrics_support import metered_client, scrape_until, value
from tests.reclaim.test_reclaim_secrets import assert_absent
from tests.recording import write_recording
from tests.webhook_receiver import Receiver, webhook_receiver

# The path of a Slack webhook URL is what authorises a post: the secret.
HOOK_SECRET = "T0KEEPER/B0ALERTS/q7Wm2Xn9Lp4Rt6Vb3Kd8Hs1J"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with webhook_receiver(HOOK_SECRET) as hook:
        yield hook


async def until(check: Any, within: float = 30.0, what: str = "") -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def assert_slack_shape(post: dict[str, Any]) -> None:
    assert set(post) == {"text", "blocks"}, post
    (block,) = post["blocks"]
    assert block["type"] == "section" and block["text"]["type"] == "mrkdwn"
    assert block["text"]["text"] == post["text"][:2900]


async def assert_url_absent(handle: WorkflowHandle[Any, Any], url: str) -> None:
    text = (await handle.fetch_history()).to_json()
    for secret in (url, HOOK_SECRET):
        assert_absent(secret, text, f"the history of {handle.id}")


def maybe_record(name: str, text: str) -> None:
    if env_flag("KEEPER_RECORD_HISTORIES"):
        write_recording(name, text)


# ---- the table ---------------------------------------------------------------------------


def test_every_alert_kind_has_a_family_a_headline_and_a_next_step():
    assert set(ALERT_TABLE) == set(AlertKind)
    for family, headline, next_step in ALERT_TABLE.values():
        assert family in ("tpu", "runners", "reclaim", "watch")
        assert headline and next_step


def test_an_alert_key_is_stable_per_workflow_episode_and_kind():
    key = alert_key("runner-delete-r1", "run-1", AlertKind.DELETION_ESCALATED)
    assert key == alert_key("runner-delete-r1", "run-1", AlertKind.DELETION_ESCALATED)
    assert key != alert_key("runner-delete-r1", "run-2", AlertKind.DELETION_ESCALATED)
    assert key != alert_key("runner-delete-r2", "run-1", AlertKind.DELETION_ESCALATED)
    assert len(alert_key("w", "x" * 5000, AlertKind.NODE_DRAINED)) <= 400


def test_an_alert_with_untrusted_text_past_its_limits_is_cut_not_refused():
    alert = make_alert(AlertKind.NODE_DRAINED, "reclaim-n1", "drain", "x" * 1000, ["line"] * 50)
    assert len(alert.summary) == SUMMARY_LIMIT and alert.summary.endswith("…")
    assert len(alert.evidence) == EVIDENCE_LINES
    assert alert.lines[-1].startswith("next: free the node")
    assert alert.footer("reclaim-n1") == "keeper reclaim reclaim-n1"


@pytest.mark.parametrize(
    ("notice_key", "kind"),
    [
        ("proposal/p1", AlertKind.PROPOSAL_AWAITING),
        ("stuck_stage:a0:tokenize", AlertKind.VERDICT_STALLED),
        ("zombie_coordinator:a0", AlertKind.VERDICT_STALLED),
        ("finished", AlertKind.WATCH_NOTICE),
        ("p1/failed", AlertKind.WATCH_NOTICE),
    ],
)
def test_a_watch_notice_is_the_alert_its_key_names(notice_key: str, kind: AlertKind):
    assert watch_notice_kind(notice_key) is kind


# ---- where the URL comes from --------------------------------------------------------------


def test_the_alert_url_comes_from_its_variable_then_its_file_and_nowhere_else(tmp_path: Path):
    alert_file = tmp_path / "alert-url"
    alert_file.write_text("https://hooks.example/alert\n")
    settings = Settings()
    settings.alerts.webhook_url_file = alert_file
    env = {ALERT_WEBHOOK_ENV: "https://hooks.example/env"}
    assert alert_webhook_url(settings, env).current() == "https://hooks.example/env"
    assert alert_webhook_url(settings, {}).current() == "https://hooks.example/alert"
    settings.alerts.webhook_url_file = None
    # The watch's own webhook from before 1.0 is gone: its variable reaches nothing.
    gone = {"KEEPER_WATCH_WEBHOOK_URL": "https://hooks.example/watch"}
    assert alert_webhook_url(settings, gone).current() is None


def test_the_watchs_webhook_setting_from_before_1_0_is_refused_by_name(tmp_path: Path):
    config = tmp_path / "keeper.yaml"
    config.write_text("watch:\n  webhook_url_file: /etc/keeper/watch-url\n")
    with pytest.raises(SettingsError, match=r"watch\.webhook_url_file was retired .* alerts"):
        load_settings(config, env={})
    config.write_text("{}\n")
    for old in ("KEEPER_WATCH_WEBHOOK_URL", "KEEPER_WATCH_WEBHOOK_URL_FILE"):
        with pytest.raises(SettingsError, match=rf"{old} was retired .*KEEPER_ALERT_WEBHOOK_URL"):
            load_settings(config, env={old: "https://hooks.example/w"})


def test_the_alerts_section_is_read_from_the_file_and_its_variable(tmp_path: Path):
    config = tmp_path / "keeper.yaml"
    config.write_text("alerts:\n  webhook_url_file: /etc/keeper/alert-url\n  timeout: 3s\n")
    settings = load_settings(config, env={})
    assert settings.alerts.webhook_url_file == Path("/etc/keeper/alert-url")
    assert settings.alerts.timeout == timedelta(seconds=3)
    env = {"KEEPER_ALERT_WEBHOOK_URL_FILE": "/run/secrets/alert-url"}
    assert load_settings(config, env=env).alerts.webhook_url_file == Path("/run/secrets/alert-url")
    config.write_text("alerts:\n  webhook_url_file: ''\n")
    with pytest.raises(SettingsError, match=r"alerts\.webhook_url_file"):
        load_settings(config, env={})


def test_the_url_is_in_no_repr_of_the_channel_source():
    url = alert_webhook_url(Settings(), {ALERT_WEBHOOK_ENV: f"https://h/{HOOK_SECRET}"})
    assert HOOK_SECRET not in repr(url) and HOOK_SECRET not in str(url)
    assert ALERT_WEBHOOK_ENV in url.setting


# ---- the activity, against a real receiver --------------------------------------------------


def _activity(url: str | None) -> AlertActivities:
    env = {ALERT_WEBHOOK_ENV: url} if url else {}
    return AlertActivities(AlertChannel(WebhookUrl(env_var=ALERT_WEBHOOK_ENV, environ=env), 5.0))


UNTRUSTED = make_alert(
    AlertKind.WATCH_NOTICE,
    "job-watch-alice-x",
    "finished",
    "<!channel> job & <http://evil.example|click>",
    ["log: <@U123> said > hi"],
)


async def test_the_activity_posts_slack_json_once_per_key_with_untrusted_text_escaped(
    receiver: Receiver,
):
    acts = _activity(receiver.url)
    env = ActivityEnvironment()
    assert await env.run(acts.alert, UNTRUSTED) is True
    # A retry after a lost answer, or the same event raised again: no second post.
    assert await env.run(acts.alert, UNTRUSTED) is True
    (post,) = receiver.posts
    assert_slack_shape(post)
    text = post["text"]
    assert "<!channel>" not in text and "<@U123>" not in text and "<http" not in text
    assert "&lt;!channel&gt; job &amp; &lt;http://evil.example|click&gt;" in text
    assert "next: see `keeper job status`" in text
    assert "keeper watch" in text  # the footer names the family and the workflow


async def test_without_a_webhook_the_alert_is_logged_and_the_activity_returns_false(
    caplog: pytest.LogCaptureFixture,
):
    assert await ActivityEnvironment().run(_activity(None).alert, UNTRUSTED) is False
    assert any("no alert webhook is configured" in r.getMessage() for r in caplog.records)


async def test_a_failing_webhook_is_retried_then_given_up_without_failing(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
):
    acts = _activity(receiver.url)
    env = ActivityEnvironment()
    receiver.answers = [503, 503]
    with pytest.raises(Exception, match="HTTP 503"):
        await env.run(acts.alert, UNTRUSTED)
    env.info = dataclasses.replace(env.info, attempt=ALERT_ATTEMPTS)
    assert await env.run(acts.alert, UNTRUSTED) is False
    assert any("given up after" in r.getMessage() for r in caplog.records)
    # A refusal (4xx) is not worth retrying: given up at once, on the first attempt.
    receiver.answers = [404]
    other = UNTRUSTED.model_copy(update={"key": "job-watch-alice-x/other/watch_notice"})
    env.info = dataclasses.replace(env.info, attempt=1)
    assert await env.run(acts.alert, other) is False
    assert receiver.posts == []
    text = caplog.text
    assert HOOK_SECRET not in text and receiver.url not in text


def test_every_family_serves_keeper_alert_and_a_worker_of_all_of_them_registers_it_once():
    from temporalio import activity

    from keeper.runtime.tpu.client import emulator_client
    from keeper.workers.alerts import alert_activity, distinct_activities
    from keeper.workers.families.tpu import TpuDeps, tpu_activities

    def names(fns: list[Any]) -> list[str]:
        return [activity._Definition.must_from_callable(fn).name or "" for fn in fns]

    settings = Settings()
    tpu = tpu_activities(settings, None, TpuDeps(emulator_client("127.0.0.1:9")))  # type: ignore[arg-type]
    assert "common.alert" in names(tpu)
    every = distinct_activities([*tpu, *(alert_activity(settings) for _ in range(3))])
    assert names(every).count("common.alert") == 1
    assert len(every) == len(tpu)
    for family in ("runners", "reclaim", "watch"):
        source = Path(__file__).parents[2] / "workers" / "families" / f"{family}.py"
        assert "alert_activity(settings)" in source.read_text(), family


def test_an_alert_is_a_small_model_with_no_room_for_a_url():
    assert set(Alert.model_fields) == {"kind", "key", "summary", "evidence"}


# ---- the counters the alert rules watch: at 0 from a worker's start -------------------------

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "keeper-alerts.yaml"
_INCREASE = re.compile(r"increase\(\s*(\w+)\s*(?:\{([^}]*)\})?\s*\[")
_MATCHER = re.compile(r'(\w+)\s*=\s*"([^"]*)"')

# What a fresh worker serves at 0, spelled out: (metric, the labels a rule selects on, the
# family whose queue runs the workflows that count it, those workflows).
AT_ZERO = [
    (
        "keeper_compensations_total",
        {"family": "tpu", "event": "stuck"},
        "tpu",
        ("TpuSliceBootstrap", "TpuSliceBootstrapRun"),
    ),
    ("keeper_runner_deletion_escalations_total", {}, "runners", ("RunnerDeletion",)),
    ("keeper_reclaim_drained_nodes_total", {}, "reclaim", ("JobReclaim",)),
    ("keeper_watch_verdicts_total", {"verdict": "stalled"}, "watch", ("JobWatch",)),
]


def _watched_by_rules() -> set[tuple[str, frozenset[tuple[str, str]]]]:
    """Each `increase(name{selector}[...])` of the rules: (name, its equality matchers)."""
    rules = yaml.safe_load(RULES.read_text())
    found = set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            for name, selector in _INCREASE.findall(rule["expr"]):
                found.add((name, frozenset(_MATCHER.findall(selector))))
    return found


def test_every_counter_a_rule_watches_for_an_increase_is_published_at_zero():
    from keeper.runtime import metrics as m
    from keeper.workers.families import FAMILIES

    declared = {
        (c.metric.name, frozenset(c.labels.items()))
        for family in FAMILIES.values()
        for c in family.alerted_counters
    }
    # The tap's counters are its own exposition, every one at 0 from its start
    # (tests/reclaim/test_reclaim_tap_metrics.py); the worker's need publishing.
    tap = {metric.name for metric in m.TAP_METRICS}
    watched = {(name, labels) for name, labels in _watched_by_rules() if name not in tap}
    # A rule may select on fewer labels than a series has (event="stuck", any family); each
    # series it selects needs publishing, and each one published is one a rule watches.
    for name, matchers in watched:
        assert any(n == name and matchers <= labels for n, labels in declared), (name, matchers)
    for name, labels in declared:
        assert any(n == name and matchers <= labels for n, matchers in watched), (name, labels)
    assert {(name, frozenset(labels.items())) for name, labels, _, _ in AT_ZERO} == declared
    assert {name for name, _ in _watched_by_rules()} & tap, "the tap rule no longer watches"


@pytest.mark.e2e
async def test_a_fresh_worker_serves_every_counter_an_alert_watches_at_zero(
    dev_env: WorkflowEnvironment, tmp_path: Path
):
    """`keeper worker` as a process, scraped over HTTP before any workflow ran: each series a
    rule's `increase(...) > 0` watches is there at 0, on each family's queue and on the stem
    queue (whose worker runs every family), labelled as the workflows count into it."""
    from tests.metrics_support import samples

    metrics_port, health_port = free_port(), free_port()
    base = f"keeper-zero-{uuid.uuid4().hex[:8]}"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEPER_", "OTEL_"))
    }
    env.update(
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        KEEPER_TASK_QUEUE=base,
        KEEPER_METRICS_ADDRESS=f"127.0.0.1:{metrics_port}",
        KEEPER_HEALTH_ADDRESS=f"127.0.0.1:{health_port}",
        KEEPER_WORKER_VERSIONED="false",
        KEEPER_RUNNER_STORE_URL=f"sqlite:///{tmp_path / 'runners.db'}",
        KEEPER_RECLAIM_STORE_URL=f"sqlite:///{tmp_path / 'reclaim.db'}",
        KEEPER_WATCH_STORE_URL=f"sqlite:///{tmp_path / 'watch.db'}",
    )
    log = tmp_path / "worker.log"
    with log.open("w") as stderr:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "keeper.cli.main", "worker"),
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            deadline = asyncio.get_running_loop().time() + 60
            while True:
                assert process.returncode is None, log.read_text()
                assert asyncio.get_running_loop().time() < deadline, log.read_text()
                try:
                    if (await http.get(f"http://127.0.0.1:{health_port}/readyz")).is_success:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
            # Ready: every queue's worker is polling, so each has published what it will.
            text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 30)
    scraped = samples(text)
    for name, labels, family, workflow_types in AT_ZERO:
        for queue in (f"{base}-{family}",):
            for workflow_type in workflow_types:
                want = {
                    *labels.items(),
                    ("namespace", "default"),
                    ("task_queue", queue),
                    ("workflow_type", workflow_type),
                }
                found = [v for (n, pairs), v in scraped.items() if n == name and want <= pairs]
                assert found == [0.0], (name, want, found, text)


# ---- end to end, one family at a time ------------------------------------------------------


@pytest.mark.e2e
async def test_an_escalated_runner_deletion_alerts_once_and_the_url_is_in_no_history(
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    from tests.runners.world import FAST_POLICY, runner_worker, runner_world

    monkeypatch.setenv(ALERT_WEBHOOK_ENV, receiver.url)
    name = "alert-busy-runner"
    # A roll-over while escalated: the next run resumes the escalation and must not alert.
    policy = FAST_POLICY.model_copy(update={"history_events_limit": 100})
    async with runner_world(tmp_path) as world, runner_worker(dev_env.client, world, policy):
        world.add_runner(name, busy=True)
        handle = await world.request(dev_env.client, name)
        await until(lambda: receiver.of("Runner deletion escalated"), what="the escalation alert")
        first_run = handle.result_run_id
        for i in range(40):
            await world.request(dev_env.client, name, reason=f"again {i}")
        latest = dev_env.client.get_workflow_handle(handle.id)
        deadline = asyncio.get_running_loop().time() + 30
        while (await latest.describe()).run_id == first_run:
            assert asyncio.get_running_loop().time() < deadline, "never rolled over"
            await asyncio.sleep(0.1)
        await world.request(dev_env.client, name, force=True)
        await asyncio.wait_for(latest.result(), 60)
        first = dev_env.client.get_workflow_handle(handle.id, run_id=first_run)
        for run in (first, latest):
            await assert_url_absent(run, receiver.url)
    (post,) = receiver.of("Runner deletion escalated")
    assert_slack_shape(post)
    assert f"{name}: runner still busy" in post["text"], post["text"]
    assert f"keeper runners runner-delete-{name}" in post["text"]
    assert len(receiver.posts) == 1, receiver.posts


@pytest.mark.e2e
async def test_a_node_drained_by_reclaim_alerts_once_and_the_url_is_in_no_history(
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    from tests.reclaim.test_reclaim_e2e import live, names, nodes, only_workflow
    from tests.reclaim.world import reclaim_world
    from tests.reclaim.world import until as world_until

    monkeypatch.setenv(ALERT_WEBHOOK_ENV, receiver.url)
    client, metrics_url = await metered_client(dev_env)
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        live(w, node)
        # An id the controller never stored, held by the agent: quarantined by a drain.
        parent = w.emu.submit(array_size=1)[0].job_id - 1
        w.emu.hold(node, parent)
        await w.beat(node)
        wf = only_workflow(w, node, parent)
        await world_until(lambda: w.emu.cluster.drains, what="the drain")
        await until(lambda: receiver.of("Node drained by reclaim"), what="the drain alert")
        await w.release(wf, by="oncall", reason="freed by hand")
        await w.result(wf)
        await assert_url_absent(w.handle(wf), receiver.url)
        scraped = await scrape_until(
            metrics_url, {"keeper_reclaims_total": {"outcome": "operator-released"}}
        )
    # The worker's counters, read back over HTTP: one drain, one reclaim an operator closed.
    assert value(scraped, "keeper_reclaim_drained_nodes_total") == 1
    assert value(scraped, "keeper_reclaims_total", outcome="operator-released") == 1
    assert value(scraped, "keeper_reclaims_total") == 1
    (post,) = receiver.posts
    assert_slack_shape(post)
    assert f"{node} drained: its agent still holds job {parent}" in post["text"], post["text"]
    assert "keeper reclaim release" in post["text"]


@pytest.mark.e2e
async def test_a_stalled_watch_alerts_its_stall_and_its_proposal_once_each(
    dev_env: WorkflowEnvironment,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    from tests.watch.world import watch_world

    monkeypatch.setenv(ALERT_WEBHOOK_ENV, receiver.url)
    client, metrics_url = await metered_client(dev_env)
    async with watch_world(client) as w:
        # A zombie coordinator: the runbook's quickest stall, with a restart proposal.
        job = w.launch("zombie-coordinator")
        handle = await w.watch(job)
        await until(
            lambda: receiver.of("Job stalled") and receiver.of("Proposal awaiting approval"),
            within=60,
            what="the stall and the proposal alerts",
        )
        await handle.cancel()
        await w.result(handle)
        final = await handle.query("status")
        await assert_url_absent(handle, receiver.url)
        scraped = await scrape_until(
            metrics_url, {"keeper_watch_verdicts_total": {"verdict": "running"}}
        )
    # One count per check, each under the liveness verdict that check reached. A zombie
    # coordinator is an escalation on its own evidence: its workers' CPU still advances, so
    # the checks read running (and unknown before the first delta), never stalled.
    counted = {
        v: value(scraped, "keeper_watch_verdicts_total", verdict=v)
        for v in ("running", "stalled", "unknown")
    }
    assert counted["running"] >= 1 and counted["stalled"] == 0, counted
    assert sum(counted.values()) == final["checks"], (counted, final["checks"])
    (stall,) = receiver.of("Job stalled")
    (proposal,) = receiver.of("Proposal awaiting approval")
    for post in (stall, proposal):
        assert_slack_shape(post)
        assert f"keeper watch job-watch-{job[1:]}" in post["text"]
    assert f"keeper job approve {job}" in proposal["text"]
    keys = [json.dumps(p, sort_keys=True) for p in receiver.posts]
    assert len(keys) == len(set(keys)), receiver.posts


@pytest.mark.e2e
async def test_a_stuck_tpu_compensation_alerts_once(
    time_env: WorkflowEnvironment,
    clocked_emu: Any,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
):
    from tests.harness import assert_no_leaks, running_worker, slice_request
    from tests.tpu.test_tpu_compensation import STOCKOUT, failure_of, start, wait_for_status

    monkeypatch.setenv(ALERT_WEBHOOK_ENV, receiver.url)
    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, STOCKOUT)
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await start(time_env, worker.task_queue, request)
        result = asyncio.create_task(failure_of(handle))
        stuck = await wait_for_status(handle, lambda s: s.compensation_stuck)
        assert stuck.compensation_started_at is not None
        await until(lambda: receiver.of("TPU compensation stuck"), what="the stuck alert")
        # Hours more of refused deletes in later windows: still one alert.
        two_hours_on = stuck.compensation_started_at + timedelta(hours=2)
        while await time_env.get_current_time() < two_hours_on:
            assert not result.done(), "compensation gave up while deletes were refused"
            await asyncio.sleep(0.05)
        clocked_emu.clear_faults()
        await asyncio.wait_for(result, 120)
        await assert_url_absent(handle, receiver.url)
    (post,) = receiver.posts
    assert_slack_shape(post)
    assert f"deleting {request.slice_name} in us-central2-b" in post["text"], post["text"]
    assert "PermissionDenied" in post["text"] and "stuck for" in post["text"]
    assert_no_leaks(clocked_emu)
