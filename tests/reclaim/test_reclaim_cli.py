"""`keeper reclaim` speaks as every keeper command does (cli/output.py, docs/cli.md): data on
stdout, diagnostics on stderr, one JSON document with --json or -o json (errors included),
exit 0, 1 (failed, with what to do next) or 2 (a bad argument, named, before anything is
sent). The commands run in-process against a reclaim world on the suite's dev server."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from temporalio.testing import WorkflowEnvironment

from keeper.cli.main import run
from keeper.cli.reclaim.commands import reclaim
from keeper.cli.workflow_view import QUERY_TIMEOUT
from keeper.domain.reclaim.steps import Mode, Outcome
from keeper.runtime.reclaim.service import parse_report
from tests.e2e_support import REPO, dev_address
from tests.reclaim.test_reclaim_e2e import live, names, nodes, only_workflow, stale
from tests.reclaim.world import ReclaimWorld, free_port, reclaim_world, until

pytestmark = pytest.mark.e2e
RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
REPORT_FIELDS = {"node", "job_id", "verdict", "reason", "detail", "workflow_id", "started"}
LIST_FIELDS = {
    "workflow_id", "run_id", "node", "job_id", "step", "status", "mode", "verdict", "reason",
    "cancels_sent", "drained", "last_action", "started_at", "ui_url",
}  # fmt: skip


@dataclass
class Done:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def error(self) -> dict[str, Any]:
        """The error document: the one JSON value on stdout."""
        document = self.json()
        assert set(document) == {"error"}, self
        assert document["error"]["exit_code"] == self.code, self
        return dict(document["error"])


# One command line at a time: the runner swaps sys.stdout, sys.stderr and sys.argv.
_one_at_a_time = threading.Lock()


def keeper_now(
    config: Path,
    *args: str,
    env: dict[str, str] | None = None,
    entry: Callable[[list[str]], int] = run,
) -> Done:
    """`keeper --config CONFIG ARGS` in this process, through the real entry (cli.main.run;
    dev.main.run for `keeper-dev`), with no KEEPER_* or TEMPORAL_* variable but `env`."""
    argv = ["--config", str(config), *args]
    clear: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("KEEPER_", "TEMPORAL_"))
    }
    with _one_at_a_time, CliRunner().isolation(env={**clear, **(env or {})}) as (out, err, _):
        saved, sys.argv = sys.argv, ["keeper", *argv]
        try:
            # A context of its own: the JSON mode a command sets stays with that command.
            code = contextvars.copy_context().run(entry, argv)
        finally:
            sys.argv = saved
    return Done(code, out.getvalue().decode(), err.getvalue().decode())


async def keeper(
    config: Path,
    *args: str,
    env: dict[str, str] | None = None,
    entry: Callable[[list[str]], int] = run,
) -> Done:
    """keeper_now off the event loop the world (emulator, tap, worker) runs on."""
    return await asyncio.to_thread(keeper_now, config, *args, env=env, entry=entry)


def world_config(tmp_path: Path, env: WorkflowEnvironment, w: ReclaimWorld, **extra: Any) -> Path:
    """Settings that point the CLI at the world: its dev server, task queue, controller and
    reclaim memory."""
    r = w.settings.reclaim
    tree = {
        "temporal": {
            "address": dev_address(env),
            "namespace": "default",
            "task_queue": w.settings.temporal.task_queue,
        },
        "reclaim": {
            "mode": r.mode.value,
            "controller_address": r.controller_address,
            "store_url": r.store_url,
            "call_timeout": "5s",
            "batch_window": "20ms",
            "timing": json.loads(r.timing.model_dump_json()),
            **extra,
        },
    }
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def offline_config(tmp_path: Path) -> Path:
    """Settings whose Temporal and controller nobody answers at."""
    path = tmp_path / "offline.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "temporal": {"address": f"127.0.0.1:{free_port()}"},
                "reclaim": {
                    "controller_address": f"127.0.0.1:{free_port()}",
                    "store_url": f"sqlite:///{tmp_path / 'none.db'}",
                },
            }
        )
    )
    return path


@pytest.fixture
async def client(dev_env: WorkflowEnvironment) -> Any:
    return dev_env.client


# ---- a reclaim from report to release --------------------------------------------------


async def test_report_list_status_and_release_of_an_observed_reclaim(
    dev_env: WorkflowEnvironment, client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes(2), mode=Mode.OBSERVE) as w:
        node, other = names(w)
        keep = live(w, node)
        job = stale(w, node)
        config = world_config(tmp_path, dev_env, w)

        # A report decides now: the stale holding gets a reclaim, the live one nothing.
        first = await keeper(config, "reclaim", "report", node, str(keep), str(job), "--json")
        assert first.code == 0 and first.err == "", first
        assert first.json()["mode"] == "observe"
        rows = {r["job_id"]: r for r in first.json()["handled"]}
        assert set(rows) == {keep, job}
        assert all(set(r) == REPORT_FIELDS for r in rows.values()), rows
        wf = only_workflow(w, node, job)
        assert rows[job] == {**rows[job], "node": node, "verdict": "reclaim",
                             "reason": "terminal", "workflow_id": wf, "started": True}  # fmt: skip
        assert f"job {job}" in rows[job]["detail"]
        assert rows[keep]["verdict"] == "spare"
        assert rows[keep]["workflow_id"] is None and rows[keep]["started"] is False
        assert [h.job_id for h, _ in w.workflows(node)] == [job]

        # The same holding again, in another spelling of the node: the same reclaim.
        again = await keeper(config, "reclaim", "report", node.upper(), str(job))
        assert again.code == 0 and again.err == "", again
        assert again.out.startswith(f"{node} job {job}: reclaim (terminal) -> {wf}\n"), again
        assert [wf_id for _, wf_id in w.workflows(node)] == [wf]

        # The list shows what observe mode would do, and sends nothing.
        async def observing() -> dict[str, Any] | None:
            # Other tests' reclaims share this dev server: this node's only.
            done = await keeper(config, "reclaim", "list", "--node", node, "--json")
            assert done.code == 0, done
            found = done.json()["reclaims"]
            return found[0] if found and found[0]["step"] == "observing" else None

        row = await until(observing, within=30, what="the observing step in the list")
        assert set(row) == LIST_FIELDS, row
        assert (row["workflow_id"], row["node"], row["job_id"]) == (wf, node, job)
        assert (row["status"], row["mode"], row["verdict"], row["reason"]) == (
            "RUNNING", "observe", "reclaim", "terminal",
        )  # fmt: skip
        assert row["cancels_sent"] == 0 and row["drained"] is False and row["run_id"]
        assert "would send signal 0" in row["last_action"], row
        assert re.fullmatch(RFC3339, row["started_at"])
        assert row["ui_url"].endswith(f"/{wf}/{row['run_id']}/user-metadata"), row["ui_url"]
        assert w.cancels() == [] and w.emu.cluster.drains == []

        text = await keeper(config, "reclaim", "list", "--node", node)
        assert text.code == 0 and text.err == "", text
        header, line = text.out.splitlines()
        assert header.split() == ["NODE", "JOB", "STEP", "STATUS", "VERDICT", "LAST"]
        assert line.split()[:6] == [node, str(job), "observing", "RUNNING", "reclaim", "(terminal)"]
        assert "would send signal 0" in line

        # --node filters, in any spelling; a bad one is a usage error naming --node.
        mine = await keeper(
            config, "reclaim", "list", "--node", f"{node.upper()}.example.org", "-o", "json"
        )
        assert [r["workflow_id"] for r in mine.json()["reclaims"]] == [wf], mine
        theirs = await keeper(config, "reclaim", "list", "--node", other)
        assert theirs.code == 0 and theirs.out == "" and "no reclaims in flight" in theirs.err
        assert (await keeper(config, "reclaim", "list", "--node", other, "--json")).json() == {
            "mode": "observe", "reclaims": [],
        }  # fmt: skip
        bad = await keeper(config, "reclaim", "list", "--node", "bad name!")
        assert bad.code == 2 and bad.out == "" and "Error: --node: " in bad.err, bad

        # status: the details the UI shows, and the same row with the view under --json.
        shown = await keeper(config, "reclaim", "status", node, str(job))
        assert shown.code == 0 and shown.err == "", shown
        assert shown.out.startswith(f"{wf}  RUNNING  step observing\n"), shown
        assert "verdict: reclaim (terminal)" in shown.out and "mode: observe" in shown.out
        assert "would send signal 0" in shown.out and f"ui: {row['ui_url']}" in shown.out
        as_json = (await keeper(config, "reclaim", "status", node, str(job), "--json")).json()
        assert set(as_json) == LIST_FIELDS | {"view", "others"} and as_json["workflow_id"] == wf
        assert as_json["others"] == []  # one reclaim of this holding: no "shown:" line either
        assert "shown:" not in shown.out
        assert as_json["view"]["holding"]["job_id"] == job and as_json["job_id"] == job

        none = await keeper(config, "reclaim", "status", node, str(keep))
        assert none.code == 1 and none.out == "", none
        assert f"no reclaim of job {keep} on {node}" in none.err
        assert "keeper reclaim list --all" in none.err
        error = (await keeper(config, "reclaim", "status", node, str(keep), "--json")).error()
        assert (error["node"], error["job_id"]) == (node, keep)
        assert "keeper reclaim list --all" in error["hint"] and "usage" not in error

        # release: the operator vouches, the reclaim ends and answers how; then there is
        # nothing to release.
        released = await keeper(
            config, "reclaim", "release", node, str(job), "--reason", "freed by hand", "--json"
        )
        assert released.code == 0 and released.err == "", released
        result = await w.result(wf)
        assert result.outcome is Outcome.OPERATOR_RELEASED and w.cancels() == []
        assert "freed by hand" in result.detail
        assert released.json() == {
            "released": [{"workflow_id": wf, "outcome": "operator-released", "drained": False,
                          "undrained": False, "detail": result.detail}],
            "node": node, "job_id": job,
        }  # fmt: skip

        gone = await keeper(config, "reclaim", "release", node, str(job))
        assert gone.code == 1 and gone.out == "", gone
        assert f"no reclaim of job {job} on {node} is running; nothing was released" in gone.err
        error = (await keeper(config, "reclaim", "release", node, str(job), "-o", "json")).error()
        assert (error["node"], error["job_id"]) == (node, job) and error["hint"]

        # A stale holding whose reclaim cannot be started (here: no such namespace) is a
        # failure, not a quiet success.
        stranded = stale(w, other)
        tree = yaml.safe_load(config.read_text())
        tree["temporal"]["namespace"] = f"missing-{uuid.uuid4().hex[:6]}"
        (elsewhere := tmp_path / "elsewhere.yaml").write_text(yaml.safe_dump(tree))
        unstarted = await keeper(elsewhere, "reclaim", "report", other, str(stranded), "--json")
        assert unstarted.code == 1, unstarted
        error = unstarted.error()
        assert f"no reclaim could be started for job {stranded} on {other}" in error["message"]
        assert error["handled"][0]["verdict"] == "reclaim" and error["hint"]
        assert w.workflows(other) == []

        closed = await keeper(config, "reclaim", "list", "--all", "--json")
        ((listed,),) = [[r for r in closed.json()["reclaims"] if r["workflow_id"] == wf]]
        assert listed["status"] == "COMPLETED"
        running = await keeper(config, "reclaim", "list", "--node", node, "--json")
        assert running.json()["reclaims"] == []

    # No worker serves the closed reclaim any more: it is still listed, at once, without
    # what only its query could say.
    # Each command makes at most one query, bounded by QUERY_TIMEOUT; the rest is the CLI's
    # start, slow on a loaded machine. An unbounded query waits for a worker that never comes.
    bound = QUERY_TIMEOUT.total_seconds() + 10
    began = time.monotonic()
    after = await keeper(config, "reclaim", "list", "--all", "--node", node, "--json")
    assert time.monotonic() - began < bound, "a query of a run no worker serves was not bounded"
    began = time.monotonic()
    status = await keeper(config, "reclaim", "status", node, str(job))
    assert time.monotonic() - began < bound, "a query of a run no worker serves was not bounded"
    ((row,),) = [after.json()["reclaims"]]
    assert (row["workflow_id"], row["status"], row["mode"]) == (wf, "COMPLETED", None)
    assert status.code == 0 and "no details" in status.out, status


# ---- status --follow ----------------------------------------------------------------------


async def _following(config: Path, node: str, job: int, flag: str) -> asyncio.subprocess.Process:
    """`keeper reclaim status NODE JOB FLAG` in a process of its own (stderr a pipe, not a
    terminal), once it wrote its first line about the reclaim, stamped with the time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEPER_", "TEMPORAL_"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.cli.main", "--config", str(config),
        "reclaim", "status", node, str(job), flag,
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    while True:
        raw = await asyncio.wait_for(process.stderr.readline(), 60)
        assert raw, "exited before following"
        stamp, _, text = raw.decode().partition(" ")
        if text.startswith(f"{node} job {job}: step="):
            assert re.fullmatch(RFC3339, stamp), raw
            assert "mode=observe verdict=reclaim (terminal) cancels=0" in text, text
            return process


async def test_status_follow_shows_the_reclaim_until_it_closes_then_how_it_ended(
    dev_env: WorkflowEnvironment, client: Any, tmp_path: Path
) -> None:
    """`--follow` and `--wait` (its earlier name) alike: a line per change on stderr while
    the reclaim runs, then its status as it ended on stdout, exit 0 once it completed."""
    async with reclaim_world(client, tmp_path, agents=nodes(1), mode=Mode.OBSERVE) as w:
        (node,) = names(w)
        jobs = {"--follow": stale(w, node), "--wait": stale(w, node)}
        config = world_config(tmp_path, dev_env, w)
        reported = await keeper(config, "reclaim", "report", node, *map(str, jobs.values()))
        assert reported.code == 0, reported

        async def observing() -> bool:
            done = await keeper(config, "reclaim", "list", "--node", node, "--json")
            rows = done.json()["reclaims"]
            return len(rows) == 2 and all(r["step"] == "observing" for r in rows)

        await until(observing, within=30, what="both reclaims observing")
        wfs = {flag: only_workflow(w, node, job) for flag, job in jobs.items()}
        followers = {flag: await _following(config, node, job, flag) for flag, job in jobs.items()}
        try:
            for flag, wf in wfs.items():
                await w.release(wf, reason=f"freed by hand ({flag})")
                out, err = await asyncio.wait_for(followers[flag].communicate(), 60)
                assert followers[flag].returncode == 0, (flag, out, err)
                assert out.decode().startswith(f"{wf}  COMPLETED  step "), (flag, out)
                assert f"freed by hand ({flag})" in out.decode(), (flag, out)
        finally:
            for process in followers.values():
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        # A closed reclaim followed: shown as it ended, at once, exit 0 (it completed).
        closed = await keeper(config, "reclaim", "status", node, str(jobs["--follow"]), "--follow")
        assert closed.code == 0 and closed.err == "", closed
        assert closed.out.startswith(f"{wfs['--follow']}  COMPLETED  step "), closed


# ---- bad input: exit 2, naming it, before anything is sent -------------------------------


USAGE = [
    (["report", "bad name!", "1"], "NODE"),
    (["status", "bad name!", "1"], "NODE"),
    (["release", "bad name!", "1"], "NODE"),
    (["report", "gpu-node-07", "1", "abc"], "JOB..."),
    (["report", "gpu-node-07", "4294967296"], "JOB..."),
    (["status", "gpu-node-07", "--", "-1"], "JOB"),
    (["status", "gpu-node-07", "1.5"], "JOB"),
    (["release", "gpu-node-07", "4294967296"], "JOB"),
    (["report", "gpu-node-07"], "JOB..."),
    (["status", "gpu-node-07"], "JOB"),
    (["release", "gpu-node-07"], "JOB"),
    (["release", "gpu-node-07", "7", "--reason", "x" * 501], "--reason"),
    (["release", "gpu-node-07", "7", "--by", ""], "--by"),
    (["release", "gpu-node-07", "7", "--by", "x" * 201], "--by"),
    (["list", "--node", "bad name!"], "--node"),
    (["list", "--limit", "0"], "--limit"),
]


@pytest.mark.parametrize(("args", "param"), USAGE, ids=[" ".join(a)[:40] for a, _ in USAGE])
def test_bad_input_is_a_usage_error_naming_it_before_anything_is_sent(
    tmp_path: Path, args: list[str], param: str
) -> None:
    # Temporal is unreachable here: had the command got as far as connecting, it would have
    # exited 1 saying so.
    config = offline_config(tmp_path)
    text = keeper_now(config, "reclaim", *args)
    assert text.code == 2 and text.out == "", text
    assert "Usage: keeper reclaim" in text.err and "Error:" in text.err, text
    assert param in text.err and "cannot reach Temporal" not in text.err, text
    # The command's own --json, before any `--`.
    error = keeper_now(config, "reclaim", args[0], "--json", *args[1:]).error()
    assert error["usage"] is True and error["param"] == param, error
    assert error["command"].startswith("keeper reclaim")


def test_the_job_id_range_is_the_one_spur_uses(tmp_path: Path) -> None:
    config = offline_config(tmp_path)
    top = keeper_now(config, "reclaim", "status", "n1", "4294967296")
    assert "0<=x<=4294967295" in top.err, top
    # The largest id is accepted: the command goes on, and finds Temporal unreachable.
    assert keeper_now(config, "reclaim", "status", "n1", "4294967295").code == 1


@pytest.mark.parametrize(
    "args",
    [["list"], ["status", "n1", "5"], ["report", "n1", "5"], ["release", "n1", "5"]],
    ids=["list", "status", "report", "release"],
)
def test_temporal_unreachable_exits_1_saying_what_to_do(tmp_path: Path, args: list[str]) -> None:
    config = offline_config(tmp_path)
    address = yaml.safe_load(config.read_text())["temporal"]["address"]
    text = keeper_now(config, "reclaim", *args)
    assert text.code == 1 and text.out == "", text
    assert f"cannot reach Temporal at {address}" in text.err, text
    assert "keeper-dev up" in text.err and "Traceback" not in text.err
    error = keeper_now(config, "reclaim", *args, "--json").error()
    assert f"cannot reach Temporal at {address}" in error["message"], error
    assert "keeper-dev up" in error["hint"] and "usage" not in error, error
    assert error["address"] == address, error


async def test_a_report_the_controller_cannot_answer_exits_1_naming_the_setting(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    path = offline_config(tmp_path)
    tree = yaml.safe_load(path.read_text())
    tree["temporal"] = {"address": dev_address(dev_env), "namespace": "default"}
    tree["reclaim"]["call_timeout"] = "1s"
    path.write_text(yaml.safe_dump(tree))
    done = await keeper(path, "reclaim", "report", "gpu-node-07", "12")
    assert done.code == 1 and done.out == "", done
    assert "nothing was started" in done.err and "Traceback" not in done.err, done
    assert "reclaim.controller_address" in done.err, done
    error = (await keeper(path, "reclaim", "report", "gpu-node-07", "12", "--json")).error()
    assert error["controller_address"] == tree["reclaim"]["controller_address"]
    assert "KEEPER_SPUR_CONTROLLER" in error["hint"]


# ---- --help ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(reclaim.commands))
def test_every_reclaim_command_documents_every_option_and_argument(
    name: str, tmp_path: Path
) -> None:
    command = reclaim.commands[name]
    result = keeper_now(tmp_path / "none.yaml", "reclaim", name, "--help")
    assert result.code == 0 and result.err == "", result
    assert result.out.startswith(f"Usage: keeper reclaim {name} [OPTIONS]")
    usage, description = result.out.split("\n\n", 2)[:2]
    assert len(description.split()) > 8, description
    for param in command.params:
        if isinstance(param, click.Argument):
            assert param.human_readable_name in usage, (name, param.name)
            continue
        assert isinstance(param, click.Option) and param.help, (name, param.opts)
        for opt in param.opts:
            assert opt in result.out, f"keeper reclaim {name} --help lacks {opt}"
    if name == "release":
        assert "at most 500 characters" in result.out and "1 to 200" in result.out


def test_the_reclaim_group_lists_its_commands(tmp_path: Path) -> None:
    result = keeper_now(tmp_path / "none.yaml", "reclaim", "--help")
    assert result.code == 0 and result.out.startswith("Usage: keeper reclaim [OPTIONS]")
    for name in ("list", "status", "report", "release", "tap"):
        assert f"  {name}" in result.out


# ---- the HTTP intake refuses what the CLI refuses --------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"node": "bad name!", "jobs": [1]}, "node: 'bad name!' is not a host name"),
        ({"node": " ", "jobs": [1]}, "node: a node name is required"),
        ({"node": "gpu-node-07", "jobs": [2**32]}, "0 to 4294967295"),
        ({"node": "gpu-node-07", "jobs": ["12"]}, "'12' is not a job id"),
        ({"node": "gpu-node-07", "jobs": [True]}, "True is not a job id"),
        ({"node": "gpu-node-07", "jobs": []}, "jobs: a non-empty list"),
        ({"node": "gpu-node-07"}, "jobs: a non-empty list"),
        ({"node": "gpu-node-07", "jobs": [1], "mode": "act"}, "unknown field 'mode'"),
        (["gpu-node-07", 1], "a JSON object"),
    ],
)
def test_a_bad_http_report_is_refused_naming_the_field(body: Any, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_report(body)
    assert says in str(caught.value)


def test_a_good_http_report_is_read_as_given() -> None:
    assert parse_report({"node": "GPU-NODE-07.cluster", "jobs": [0, 4294967295]}) == (
        "GPU-NODE-07.cluster",
        (0, 4294967295),
    )
