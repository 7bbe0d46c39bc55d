"""The Temporal UI links keeper prints: a run's link opens its User Metadata tab (its current
details: the phase, the deadline, the failing VMs, the command to run next), not the timeline,
and it is a route the UI really has, read from the UI the temporal CLI's dev server serves."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from keeper.runtime.settings import Settings
from tests.harness import free_port, tool_path

RUN = "0193c4e2-7f1a-7c3b-9a55-3f0e2d8c1b6a"
# SvelteKit's route ids in the UI's bundle, as the UI names its pages.
USER_METADATA_ROUTE = "/(app)/namespaces/[namespace]/workflows/[workflow]/[run]/user-metadata"
WORKFLOW_ROUTE = "/(app)/namespaces/[namespace]/workflows/[workflow]"


def test_a_run_link_opens_its_user_metadata_tab() -> None:
    temporal = Settings().temporal
    assert temporal.workflow_url("tpu-bootstrap-train-a", RUN) == (
        f"http://127.0.0.1:8233/namespaces/default/workflows/tpu-bootstrap-train-a/{RUN}"
        "/user-metadata"
    )


def test_without_its_run_a_link_opens_the_workflow() -> None:
    # The UI has no User Metadata route without the run; the bare link opens the latest run.
    temporal = Settings().temporal
    assert temporal.workflow_url("tpu-bootstrap-train-a") == (
        "http://127.0.0.1:8233/namespaces/default/workflows/tpu-bootstrap-train-a"
    )


def test_a_link_keeps_a_watch_ids_slashes_in_one_path_segment() -> None:
    temporal = Settings().temporal
    temporal.ui_url = "https://temporal-ui.internal/"
    temporal.namespace = "keeper-prod"
    assert temporal.workflow_url("job-watch-/alice/train-7", RUN) == (
        "https://temporal-ui.internal/namespaces/keeper-prod/workflows/"
        f"job-watch-%2Falice%2Ftrain-7/{RUN}/user-metadata"
    )


def _route_pattern(route: str) -> re.Pattern[str]:
    """A SvelteKit route id as a path regex: the group dropped, each [param] one segment."""
    path = route.removeprefix("/(app)")
    return re.compile(re.sub(r"\\\[[a-z]+\\\]", "[^/]+", re.escape(path)) + "$")


@pytest.fixture
async def ui_base() -> str:
    """The Temporal UI of a dev server started by the temporal CLI keeper installs."""
    ui_port = free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=tool_path("temporal"),
        ui=True,
        ui_port=ui_port,
        dev_server_log_level="error",
    )
    async with env:
        yield f"http://127.0.0.1:{ui_port}"


@pytest.mark.e2e
async def test_the_dev_servers_ui_has_the_route_keeper_links_to(ui_base: str) -> None:
    async with httpx.AsyncClient(base_url=ui_base, timeout=10) as http:
        index = (await http.get("/")).raise_for_status().text
        # The single-page app's entry: its route table names every page it has.
        (entry,) = set(re.findall(r'import\("(/_app/immutable/entry/app\.[^"]+\.js)"\)', index))
        app = (await http.get(entry)).raise_for_status().text
    routes = set(re.findall(r'"(/\(app\)/namespaces/[^"]+)":\[', app))
    assert USER_METADATA_ROUTE in routes and WORKFLOW_ROUTE in routes, sorted(routes)
    temporal = Settings().temporal
    temporal.ui_url = ui_base
    for workflow_id, run_id, route in (
        ("tpu-bootstrap-train-a", RUN, USER_METADATA_ROUTE),
        ("job-watch-/alice/train-7", RUN, USER_METADATA_ROUTE),
        ("reclaim-gpu-node-01-2-e1.1", None, WORKFLOW_ROUTE),
    ):
        path = urlsplit(temporal.workflow_url(workflow_id, run_id)).path
        matching = [r for r in routes if _route_pattern(r).match(path)]
        assert matching == [route], (path, matching)
