"""Text keeper did not write, made safe to show.

Reasons, runner and scale-set names, GitHub and provider messages, GCP errors, QR states and
VM names all reach the Temporal UI (as markdown) and a terminal. Each of them is data, never
structure: it must not add a line, a table cell, a link, an image, HTML, a colour or a cursor
move to what keeper renders around it. Both functions are pure and total: any value comes
back as one line of inert text.
"""

from __future__ import annotations

import re
import unicodedata

MD_LIMIT = 300
ELLIPSIS = "…"
LINE_BREAK = " ⏎ "

_LINE_BREAKS = re.compile(r"(?:[ \t]*(?:\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]))+[ \t]*")
# Characters that reorder or hide text without being control characters (Trojan Source).
_INVISIBLE = frozenset("\u061c\u200b\u200c\u200d\u200e\u200f\u2060\ufeff") | frozenset(
    chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
)

# How each markdown-significant character is neutralised. Entities for HTML (they stay
# literal in every renderer, raw HTML allowed or not); a backslash for the rest (CommonMark
# lets any ASCII punctuation be escaped, and renders the character itself).
_MD_REPLACE = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD_BACKSLASHED = frozenset("\\`*_[]()!|~#$")
# Bare URLs, `www.` hosts and e-mail addresses, which GFM turns into links by itself.
_AUTOLINK = re.compile(r"(?<=[A-Za-z0-9])(://)|(?i:\b(www)\.)|(@)")
# A value placed at the start of a line (a list item, say) must not open a block.
_BLOCK_START = re.compile(r"^(?:([-+=])|(\d+)([.)]))")
# What rich reads as a markup tag (rich.markup.RE_TAGS); an odd number of backslashes before
# it makes it literal, and backslashes anywhere else are shown as they are.
_RICH_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def _one_line(value: object, limit: int | None) -> str:
    text = value if isinstance(value, str) else str(value)
    text = _LINE_BREAKS.sub(LINE_BREAK, text.strip()).replace("\t", " ")
    text = "".join(_visible(ch) for ch in text)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)].rstrip() + ELLIPSIS
    return text


def _visible(ch: str) -> str:
    """Control and invisible characters are shown as escapes (\\x1b, \\u202e) so that what
    was there can still be read, while the terminal or the browser acts on none of it."""
    if ch in _INVISIBLE or unicodedata.category(ch) == "Cc":
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return ch


def md_text(value: object, limit: int = MD_LIMIT) -> str:
    """`value` as inert markdown text, safe in a table cell, a heading or a list item.

    | input                        | becomes                         |
    |------------------------------|---------------------------------|
    | line breaks                  | " ⏎ " (one line, one cell)      |
    | control, bidi, zero-width    | visible escapes: \\x1b, \\u202e |
    | & < >                        | &amp; &lt; &gt; (no HTML)       |
    | \\ ` * _ [ ] ( ) ! pipe ~ # $ | backslash-escaped (no emphasis, code, links, images, cells) |
    | "://", "www.", "@"           | escaped so GFM autolinks nothing |
    | leading "-", "+", "=", "1."  | escaped so no list or heading starts |
    | more than `limit` characters | cut, ending in "…"              |
    """
    text = _one_line(value, limit)
    out = []
    for ch in text:
        if ch in _MD_REPLACE:
            out.append(_MD_REPLACE[ch])
        elif ch in _MD_BACKSLASHED:
            out.append("\\" + ch)
        else:
            out.append(ch)
    text = _AUTOLINK.sub(_defuse_autolink, "".join(out))
    return _BLOCK_START.sub(_defuse_block_start, text, count=1)


def _defuse_autolink(match: re.Match[str]) -> str:
    if match.group(1):
        return "\\://"
    if match.group(2):
        return match.group(2) + "\\."
    return "\\@"


def _defuse_block_start(match: re.Match[str]) -> str:
    if match.group(1):
        return "\\" + match.group(1)
    return match.group(2) + "\\" + match.group(3)


def terminal_text(value: object, *, markup: bool = False, limit: int | None = None) -> str:
    """`value` as one line a terminal shows and acts on none of.

    | input                     | becomes                                       |
    |---------------------------|-----------------------------------------------|
    | line breaks               | " ⏎ " (no forged lines)                       |
    | ESC, C0 and C1 controls   | visible escapes, so no ANSI sequence runs     |
    | bidi and zero-width chars | visible escapes                               |
    | "[tag]" with markup=True  | "\\[tag]", literal in rich markup             |
    | trailing "\\", markup=True | followed by a space, so it escapes no tag     |

    Pass markup=True for text that goes into rich markup (console.print, table cells and
    titles); click.echo and rich Text objects need the default.
    """
    text = _one_line(value, limit)
    if not markup:
        return text
    text = _RICH_TAG.sub(lambda m: m.group(1) * 2 + "\\" + m.group(2), text)
    # A trailing backslash would escape the tag keeper's own markup puts after the value.
    return text + " " if text.endswith("\\") else text
