"""`keeper-dev demo runner`: seed the local stack's emulators with a scale set, then delete a
runner through its workflow with live progress."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

import click
import httpx

from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import OK, CommandFailed, Output, UsageProblem, exits, json_options
from keeper.cli.runners.commands import _store, ask_deletion, follow_deletion
from keeper.cli.runners.render import result_text
from keeper.domain.runners.models import (
    DeletionRequest,
    Requester,
    RunnerRecord,
    deletion_workflow_id,
)
from keeper.domain.runners.status import AgentStatus, InstanceStatus
from keeper.runtime.dev_ports import is_local
from keeper.runtime.settings import Settings

DEMO_SCALE_SET = "demo"
DEMO_SCOPE = "org:keeper-demo"
MAX_COUNT = 100


def _check_local(settings: Settings) -> None:
    url = urlsplit(settings.runners.github.api_url)
    if not is_local(url.hostname or "") or settings.runners.provider.executable is not None:
        raise CommandFailed(
            "the runner demo seeds keeper's emulators: runners.github.api_url must point at the "
            "GitHub emulator and runners.provider.executable must be unset. Run `keeper-dev up` "
            "with the default temporal-dev.yaml."
        )


def seed(settings: Settings, prefix: str, count: int) -> list[RunnerRecord]:
    """A provider instance, a GitHub registration and a record for each runner."""
    from emulators.provider.state import add_instance

    scope = settings.runners.github.scopes[0] if settings.runners.github.scopes else DEMO_SCOPE
    label = settings.runners.github.managed_label
    store = _store(settings)
    records = []
    try:
        with httpx.Client(base_url=settings.runners.github.api_url, timeout=10) as http:
            for i in range(1, count + 1):
                name = f"{prefix}-{i}"
                # The one the demo deletes gets a slow provider delete (2 s), so the live
                # view shows each step.
                instance = add_instance(
                    settings.runners.provider.config_file,
                    name,
                    DEMO_SCALE_SET,
                    mode="slow" if i == 1 else None,
                    mode_seconds=2.0 if i == 1 else 0.0,
                )
                answer = http.post(
                    "/_emulator/runners",
                    json={"scope": scope, "name": name, "labels": ["self-hosted", label]},
                )
                answer.raise_for_status()
                records.append(
                    store.add(
                        RunnerRecord(
                            name=name,
                            scale_set=DEMO_SCALE_SET,
                            provider_id=instance["provider_id"],
                            github_runner_id=answer.json()["id"],
                            github_scope=scope,
                            instance_status=InstanceStatus.RUNNING,
                            agent_status=AgentStatus.IDLE,
                        )
                    )
                )
    except httpx.HTTPError as err:
        raise CommandFailed(
            f"cannot reach the GitHub emulator at {settings.runners.github.api_url}: {err}\n"
            "Start the local stack with `keeper-dev up`."
        ) from err
    finally:
        store.close()
    return records


def _check_count(_ctx: click.Context, _param: click.Parameter, count: int) -> int:
    if not 1 <= count <= MAX_COUNT:
        raise UsageProblem(
            f"seeds 1 to {MAX_COUNT} runners (the first is deleted), got {count}", "--count"
        )
    return count


@click.command()
@click.option(
    "--count",
    type=int,
    default=3,
    show_default=True,
    callback=_check_count,
    help=f"Runners to seed (1-{MAX_COUNT}).",
)
@json_options
@pass_keeper
@exits
async def demo(keeper: KeeperContext, count: int, out: Output) -> int:
    """Seed COUNT runners in scale set `demo` (emulated instance, GitHub registration and
    record), then delete the first one through its workflow, showing each step."""
    settings = keeper.settings
    _check_local(settings)
    prefix = f"demo-{datetime.now(UTC):%H%M%S}"
    records = seed(settings, prefix, count)
    out.note(
        f"Seeded {len(records)} runners in scale set {DEMO_SCALE_SET}: "
        + ", ".join(r.name for r in records)
    )
    target = records[0].name
    client = await client_for(settings)
    request = DeletionRequest(requested_by=Requester.OPERATOR, reason="keeper-dev demo runner")
    handle = (await ask_deletion(client, settings, target, request)).handle
    out.note(
        f"Deleting {target}: {settings.temporal.workflow_url(handle.id, handle.result_run_id)}"
    )
    followed = await follow_deletion(handle, out)
    store = _store(settings)
    try:
        live = store.live_runner_count(DEMO_SCALE_SET)
    finally:
        store.close()
    workflow_id = deletion_workflow_id(target)
    if out.json:
        out.data(
            {
                "seeded": [r.name for r in records],
                "scale_set": DEMO_SCALE_SET,
                "live": live,
                "workflow_id": workflow_id,
                "ui_url": settings.temporal.workflow_url(workflow_id),
                "status": followed.status,
                "result": followed.result,
            }
        )
        return OK
    out.line(result_text(followed.result, followed.background))
    out.line(f"Scale set {DEMO_SCALE_SET}: live {live}.")
    out.note("`keeper runner list` shows every runner; `keeper runner status NAME` one.")
    return OK
