"""`keeper-dev emulator spur ...` and `keeper-dev demo reclaim` against an in-process spur
emulator.

The emulator runs on an event loop of its own thread (the commands are synchronous HTTP
clients of its control API). The demo's release end to end runs in tests/common/test_dev_stack.py,
on the stack that test already starts.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner

from dev.demos import demo
from dev.emulator import emulator
from dev.emulator_spur import render_spur_state
from emulators.spur import SpurEmulator, SpurEmulatorConfig
from emulators.spur.config import numbered_agents
from keeper.cli.context import KeeperContext
from keeper.cli.output import use_json
from keeper.runtime.settings import Settings
from keeper.wire.spur import slurm_pb2

T = TypeVar("T")

# A group invoked on its own gets the context settings keeper-dev gives it: click keeps the
# help option a command first built, so `-h` would be missing from a later `keeper-dev` help.
AS_UNDER_KEEPER_DEV: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


class Spur:
    """A spur emulator serving on its own loop in a thread, and settings that point at it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        # A graceful cancel stays "terminating" for the whole test: two reads see one state.
        self.emu = SpurEmulator(SpurEmulatorConfig(agents=numbered_agents(2), kill_grace=60.0))
        self.run(self.emu.start)

    def run(self, func: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await func()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout=20)

    def settings(self, **reclaim: Any) -> Settings:
        settings = Settings()
        port = int(self.emu.control_url.rsplit(":", 1)[1])
        settings.emulator.spur_control_port = port
        for key, value in reclaim.items():
            setattr(settings.reclaim, key, value)
        return settings

    def close(self) -> None:
        self.run(self.emu.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


@pytest.fixture
def spur() -> Iterator[Spur]:
    s = Spur()
    try:
        yield s
    finally:
        s.close()


def keeper(settings: Settings, group: Any, *args: str) -> Any:
    use_json(False)  # each `keeper-dev` is a process of its own; here they share a thread
    return CliRunner().invoke(
        group, list(args), obj=KeeperContext(_settings=settings), **AS_UNDER_KEEPER_DEV
    )


def test_spur_state_json_has_every_job_node_agent_cancel_and_drain(spur: Spur) -> None:
    settings = spur.settings()
    leaked = json.loads(keeper(settings, emulator, "spur", "leak", "gpu-node-01", "--json").output)
    assert leaked["state"] == "JOB_COMPLETED"
    running = json.loads(
        keeper(settings, emulator, "spur", "submit", "gpu-node-02", "--json").output
    )
    agent = spur.emu.agent("gpu-node-02")

    async def cancel_and_drain() -> None:
        request = slurm_pb2.AgentCancelJobRequest(job_id=running["job_id"], signal=0)
        await agent.CancelJob(request, None)
        spur.emu.cluster.drain("gpu-node-02", "keeper-reclaim: test")

    spur.run(cancel_and_drain)

    result = keeper(settings, emulator, "spur", "state", "--json")
    assert result.exit_code == 0, result.output
    state = json.loads(result.output)
    assert {"clock", "jobs", "nodes", "agents", "cancels", "drains"} <= set(state)
    jobs = {j["job_id"]: j for j in state["jobs"]}
    assert jobs[leaked["job_id"]]["state"] == "JOB_COMPLETED"
    assert jobs[running["job_id"]]["allocated_nodes"] == ["gpu-node-02"]
    assert {a["node"]: [h["job_id"] for h in a["holdings"]] for a in state["agents"]}[
        "gpu-node-01"
    ] == [leaked["job_id"]]
    (cancel,) = state["cancels"]
    assert cancel["job_id"] == running["job_id"] and cancel["node"] == "gpu-node-02"
    assert cancel["live_here"] is True and cancel["signal"] == 0
    assert cancel["at"].endswith("Z")  # keeper's one timestamp format
    (drain,) = state["drains"]
    assert drain["name"] == "gpu-node-02" and drain["reason"] == "keeper-reclaim: test"

    text = keeper(settings, emulator, "spur", "state").output

    # Two reads of a running emulator: only its clock may have moved between them.
    def clockless(out: str) -> str:
        return re.sub(r"^clock \S+Z", "clock -", out, count=1)

    assert clockless(text) == clockless(render_spur_state(state) + "\n")
    assert "cancels received (1, 1 of a job live there)" in text
    assert "YES" in text and "keeper-reclaim: test" in text


def test_spur_commands_name_what_is_wrong(spur: Spur) -> None:
    settings = spur.settings()
    unknown = keeper(settings, emulator, "spur", "leak", "gpu-node-99")
    assert unknown.exit_code == 1
    assert "no agent on node 'gpu-node-99'" in unknown.output
    assert "gpu-node-01, gpu-node-02" in unknown.output
    assert spur.emu.cluster.jobs == {}  # nothing was submitted
    missing = keeper(settings, emulator, "spur", "complete", "4242")
    assert missing.exit_code == 1 and "4242" in missing.output


def test_the_demo_in_observe_mode_refuses_before_leaking_anything(spur: Spur) -> None:
    result = keeper(spur.settings(), demo, "reclaim")  # the code default: observe
    assert result.exit_code == 1
    assert "reclaim.mode is observe" in result.output
    assert "KEEPER_RECLAIM_MODE=act" in result.output
    assert spur.emu.cluster.jobs == {}


def test_the_demo_names_a_node_the_emulator_does_not_have(spur: Spur) -> None:
    from keeper.domain.reclaim.steps import Mode

    result = keeper(spur.settings(mode=Mode.ACT), demo, "reclaim", "--node", "gpu-node-99")
    assert result.exit_code == 1
    # Its agents registered with the emulator's own controller here: no tap in between.
    assert "no registered agent on node 'gpu-node-99'" in result.output
    assert "gpu-node-01, gpu-node-02" in result.output
    assert spur.emu.cluster.jobs == {}


def test_the_demo_without_a_stack_says_to_start_one() -> None:
    from keeper.domain.reclaim.steps import Mode

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings()
    settings.emulator.spur_control_port = port
    settings.reclaim.mode = Mode.ACT
    result = keeper(settings, demo, "reclaim")
    assert result.exit_code == 1
    assert f"The spur emulator is not running at http://127.0.0.1:{port}" in result.output
    assert "emulator.spur_control_port" in result.output
    # As every emulator command's: how to start it, and how to reach a stack on another base.
    assert "Start it with `keeper-dev up`; a stack on another port base" in result.output


@pytest.mark.parametrize(
    ("group", "args"),
    [
        (emulator, ["spur"]),
        (emulator, ["spur", "state"]),
        (emulator, ["spur", "leak"]),
        (emulator, ["spur", "submit"]),
        (emulator, ["spur", "complete"]),
        (demo, ["reclaim"]),
    ],
)
def test_every_new_command_has_help(group: Any, args: list[str]) -> None:
    result = CliRunner().invoke(
        group, [*args, "--help"], obj=KeeperContext(), **AS_UNDER_KEEPER_DEV
    )
    assert result.exit_code == 0, result.output
    assert len(result.output.split("\n\n", 2)[1]) > 20
