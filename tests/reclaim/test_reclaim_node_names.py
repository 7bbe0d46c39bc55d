"""One rule for node names at every entrance (domain/reclaim/identity.py): the CLI's NODE
exits 2 naming it, `POST /report` answers 400 naming `node`, and the tap forwards whatever
an agent sends while the intake counts a name that is no node's as a bad name and decides
nothing for it. Before, a 129-character name was an internal error in the CLI and a 500 at
the intake, and a 128-character one was taken as a node."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from emulators.spur.config import AgentSpec
from tests.reclaim.test_reclaim_cli import keeper, keeper_now, offline_config, world_config
from tests.reclaim.test_reclaim_e2e import ended_long_ago, live, names, nodes
from tests.reclaim.world import reclaim_world, until

TOO_LONG = "a" * 129  # longer than the memory's column
LONG_LABEL = "b" * 128  # fits the column, but no host name has a 128-character label
BAD = [TOO_LONG, LONG_LABEL, "-gpu-node-07", "gpu..rack", "x" * 63 + "." + "y" * 190]


@pytest.mark.parametrize("command", ["report", "status", "release"])
@pytest.mark.parametrize("name", BAD, ids=["129", "label-128", "hyphen", "empty-label", "254"])
def test_a_bad_node_is_a_usage_error_naming_node(tmp_path: Path, command: str, name: str) -> None:
    config = offline_config(tmp_path)
    done = keeper_now(config, "reclaim", command, "--", name, "7")
    assert done.code == 2 and done.out == "", done
    assert "Error: NODE: " in done.err and "is not a host name" in done.err, done
    assert "nothing was done" in done.err and "Traceback" not in done.err, done
    assert "internal error" not in done.err and "cannot reach Temporal" not in done.err
    error = keeper_now(config, "reclaim", command, "--json", "--", name, "7").error()
    assert error["usage"] is True and error["param"] == "NODE", error
    assert error["command"] == f"keeper reclaim {command}"


async def test_a_bad_node_reaches_nothing_from_the_cli_or_http(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with reclaim_world(dev_env.client, tmp_path, agents=nodes(2), worker=False) as w:
        config = world_config(tmp_path, dev_env, w)
        before = w.intake.counters.errors
        for name in (TOO_LONG, LONG_LABEL):
            done = await keeper(config, "reclaim", "report", name, "7")
            assert done.code == 2 and "Error: NODE: " in done.err, done
            assert "internal error" not in done.err and "Traceback" not in done.err, done

        url = f"http://127.0.0.1:{w.intake_port}/report"
        async with httpx.AsyncClient() as http:
            for name in (TOO_LONG, LONG_LABEL, "-gpu"):
                answer = await http.post(url, json={"node": name, "jobs": [7]})
                assert answer.status_code == 400, answer.text
                error = answer.json()["error"]
                assert error.startswith("node: ") and "is not a host name" in error, error
            good = await http.post(url, json={"node": names(w)[0].upper(), "jobs": [7]})
            assert good.status_code == 200, good.text

        assert w.memory.known_nodes() == set(names(w))
        assert [h.node for h in w.memory.holdings()] == [names(w)[0]]
        assert w.intake.counters.errors == before


async def test_the_tap_forwards_a_bad_hostname_and_the_intake_counts_it(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with reclaim_world(dev_env.client, tmp_path, agents=nodes(1), worker=False) as w:
        (good,) = names(w)
        forwarded = w.tap.counters.forwarded
        bad_names = w.intake.counters.bad_names
        errors = w.intake.counters.errors
        for name in (TOO_LONG, LONG_LABEL):
            # spur takes the name as it is: the agent registers, and its beats are answered.
            await w.emu.add_agent(AgentSpec(node=name))
            (job,) = w.emu.submit(nodes=[name])
            w.emu.complete(job.job_id, leak=True)
            ended_long_ago(w, job.job_id)
            assert await w.beat(name) == [job.job_id]
        live(w, good)
        await w.beat(good)

        # Every call went through, answered by the controller (registrations and beats).
        assert w.tap.counters.forwarded >= forwarded + 5
        assert w.tap.counters.observer_errors == 0 and w.tap.counters.decode_errors == 0
        # Each name's registration and beat counted as a bad name, nothing failed.
        await until(lambda: w.intake.counters.bad_names >= bad_names + 4, what="bad names")
        assert w.intake.counters.errors == errors
        assert w.memory.known_nodes() == {good}
        assert all(h.node == good for h in w.memory.holdings())
        assert w.workflows() == []
