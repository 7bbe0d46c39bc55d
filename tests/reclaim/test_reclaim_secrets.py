"""The spur bearer token never leaves the worker's and the CLI's call metadata: a reclaim runs
end to end against a controller that requires it, from KEEPER_SPUR_TOKEN and from
reclaim.token_file, and the token is in no workflow history, input, result, details, log line
or CLI output; a wrong token fails naming the setting to check, never the token."""

from __future__ import annotations

import base64
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToJson
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keeper.domain.reclaim.steps import Outcome
from keeper.domain.reclaim.view import ReclaimView
from keeper.runtime.reclaim.credentials import TOKEN_ENV
from tests.reclaim.test_reclaim_cli import keeper, world_config
from tests.reclaim.test_reclaim_e2e import live, nodes, only_workflow, released_after_beats, stale
from tests.reclaim.world import ReclaimWorld, reclaim_world, until

pytestmark = pytest.mark.e2e
TOKEN = "spur.eyJzdWIiOiJrZWVwZXIifQ.Zq8Xw2Lm9Rt4Vb7Nc1Kd5Hs3Jf6"
WRONG = "spur.eyJzdWIiOiJub2JvZHkifQ.Wr0ngT0k3nXy7Qp2Lm4Nb8Vc1"


def forms(secret: str) -> list[str]:
    """The secret, and each way it can hide in a JSON history: base64 at every alignment."""
    found = [secret]
    for lead in range(3):
        encoded = base64.b64encode(b"\0" * lead + secret.encode()).decode()
        # Skip the characters the leading bytes touch and the padded tail.
        start = (lead * 4 + 2) // 3
        found.append(encoded[start + 1 : -4])
    return found


def assert_absent(secret: str, text: str, where: str) -> None:
    for form in forms(secret):
        assert form not in text, f"the token is in {where}"
    # Payloads are base64 in the JSON form: decode each one and look again.
    for blob in re.findall(r'"data": "([A-Za-z0-9+/=]{8,})"', text):
        with contextlib.suppress(ValueError):
            assert secret not in base64.b64decode(blob).decode("utf-8", "replace"), where


@contextlib.asynccontextmanager
async def token_world(
    client: Client, tmp_path: Path, *, token_file: Path | None = None
) -> AsyncIterator[ReclaimWorld]:
    """tests/reclaim/world.py's world, with a controller that requires TOKEN on every call."""
    async with reclaim_world(
        client, tmp_path, agents=nodes(2), token=TOKEN, token_file=token_file
    ) as world:
        yield world


async def histories_of(client: Client, w: ReclaimWorld) -> list[tuple[str, str]]:
    """(workflow id, the JSON of its history, description and view) of every run of every
    reclaim of the world's nodes (their names are the test's own)."""
    found = []
    names = ", ".join(f'"{n}"' for n in w.emu.agents)
    async for wf in client.list_workflows(f'WorkflowType="JobReclaim" AND Node IN ({names})'):
        handle = client.get_workflow_handle(wf.id, run_id=wf.run_id)
        history = (await handle.fetch_history()).to_json()
        description = MessageToJson((await handle.describe()).raw_description)
        view = await handle.query("status", result_type=ReclaimView)
        found.append((wf.id, history + description + view.model_dump_json()))
    return found


@pytest.mark.parametrize("source", ["variable", "file"])
async def test_a_reclaim_with_a_token_runs_and_the_token_is_shown_nowhere(
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    source: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    token_file: Path | None = None
    cli_env: dict[str, str] = {}
    if source == "variable":
        monkeypatch.setenv(TOKEN_ENV, TOKEN)
        cli_env = {TOKEN_ENV: TOKEN}
    else:
        monkeypatch.delenv(TOKEN_ENV, raising=False)
        token_file = tmp_path / "spur-token"
        token_file.write_text(TOKEN + "\n")
    async with token_world(dev_env.client, tmp_path, token_file=token_file) as w:
        node = next(iter(w.emu.agents))
        keep = live(w, node)
        job = stale(w, node)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: w.cancels(job), what="the graceful cancel")
        await until(lambda: job not in w.emu.holdings(node), what="the agent to let go")
        result = await released_after_beats(w, node, wf)
        assert result.outcome is Outcome.RELEASED and keep in w.emu.holdings(node)

        # The CLI, with the same token: a report decided through the controller, the list
        # and the status.
        extra = {"token_file": str(token_file)} if token_file else {}
        config = world_config(tmp_path, dev_env, w, mode="act", **extra)
        outputs: list[str] = []
        first_report: Any = None
        for args in (
            ("report", node, str(keep), "--json"),
            ("report", node, str(keep)),
            ("list", "--all", "--json"),
            ("list", "--all"),
            ("status", node, str(job)),
            ("status", node, str(job), "--json"),
        ):
            done = await keeper(config, "reclaim", *args, env=cli_env)
            assert done.code == 0, done
            outputs.append(done.out + done.err)
            first_report = first_report or done.json()
        assert first_report["handled"][0]["verdict"] == "spare"

        seen = await histories_of(dev_env.client, w)
        assert [wf_id for wf_id, _ in seen] == [wf]
        for wf_id, text in seen:
            assert_absent(TOKEN, text, f"the history or details of {wf_id}")
        assert_absent(TOKEN, result.model_dump_json(), "the workflow result")
        for out in outputs:
            assert_absent(TOKEN, out, "the CLI output")
    assert caplog.records, "nothing was logged: the check below would prove nothing"
    assert_absent(TOKEN, caplog.text, "the log")
    for record in caplog.records:
        assert_absent(TOKEN, repr(record.args) + record.getMessage(), "a log record")


async def test_a_wrong_token_names_the_setting_to_check_and_never_the_token(
    dev_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    async with token_world(dev_env.client, tmp_path) as w:
        node = next(iter(w.emu.agents))
        job = stale(w, node)
        config = world_config(tmp_path, dev_env, w)

        from_variable = await keeper(
            config, "reclaim", "report", node, str(job), env={TOKEN_ENV: WRONG}
        )
        assert from_variable.code == 1 and from_variable.out == "", from_variable
        assert "UNAUTHENTICATED" in from_variable.err and "nothing was started" in from_variable.err
        assert "KEEPER_SPUR_TOKEN environment variable" in from_variable.err, from_variable
        as_json = await keeper(
            config, "reclaim", "report", node, str(job), "--json", env={TOKEN_ENV: WRONG}
        )
        error = as_json.error()
        assert "KEEPER_SPUR_TOKEN" in error["message"] and "reclaim.token_file" in error["hint"]

        wrong_file = tmp_path / "wrong-token"
        wrong_file.write_text(WRONG + "\n")
        path = world_config(tmp_path, dev_env, w, token_file=str(wrong_file))
        from_file = await keeper(path, "reclaim", "report", node, str(job))
        assert from_file.code == 1, from_file
        assert f"the spur token file {wrong_file}" in from_file.err, from_file

        # A file that cannot be a token at all is refused before any call, naming the file.
        wrong_file.write_text(f"{WRONG}\n{WRONG}\n")
        two_lines = await keeper(path, "reclaim", "report", node, str(job))
        assert two_lines.code == 1 and "has 2 lines" in two_lines.err, two_lines
        assert str(wrong_file) in two_lines.err and "Traceback" not in two_lines.err

        for done in (from_variable, as_json, from_file, two_lines):
            assert_absent(WRONG, done.out + done.err, "the CLI output")
            assert_absent(TOKEN, done.out + done.err, "the CLI output")
        assert w.workflows(node) == [] and w.cancels() == []
