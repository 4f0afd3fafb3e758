"""The one sanitizer for a string read from an output tree, before it reaches any output.

Task, arm, stamp and trial dir names, exception types and messages, test ids from a verifier's
output, goal statuses, notes made of them: all come from files or names an agent or another user
could write. Printed raw, an ESC starts a terminal escape sequence (OSC 52 writes the operator's
clipboard), a bidi override reorders what the operator reads, a lone surrogate (a dir name that is
not UTF-8) makes ``print`` raise, ``<img onerror=…>`` runs in an HTML report, ``=HYPERLINK(…)``
runs in a spreadsheet, and a C0 byte makes an SVG screenshot invalid XML. So:

- ``clean``: every character that is not safe to show is replaced by its escape (``\\x1b``,
  ``\\u202e``; a byte that was not UTF-8 by ``\\xNN``), and a long string is cut with ``…``. It is
  the base of every other function here;
- ``md``, ``csv_cell``, ``html``/``xml``: ``clean`` plus that format's own escaping (the console
  needs none of its own: it shows tree strings as ``rich.text.Text``, never parsed as markup);
- ``json_text``: the same characters made ``\\uXXXX`` escapes in a JSON document already dumped
  (the decoded strings are unchanged, except undecodable bytes, shown as ``\\xNN``).

Stdlib only and no IO, so everything (runner, console, the arms) can use it.
"""

from __future__ import annotations

import re

#: C0 and C1 controls, DEL, bidi embeddings/overrides/isolates and marks, line/paragraph
#: separators, interlinear annotations, lone surrogates (a name that was not UTF-8 comes back from
#: os.listdir as U+DC80..U+DCFF), the XML non-characters U+FFFE/U+FFFF, and every character Unicode
#: calls default-ignorable (DerivedCoreProperties: zero-width characters, BOM, the Hangul fillers,
#: variation selectors, the tag characters U+E0000..U+E0FFF): shown nowhere, so text hidden in them
#: (an agent's instructions to a reviewer, two arm names that look the same) would pass unseen.
_REST = (
    "\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffe\uffff"
    "\ud800-\udfff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_UNSAFE = re.compile(f"[\x00-\x1f{_REST}]")
_UNSAFE_KEEP_NL = re.compile(f"[\x00-\x09\x0b-\x1f{_REST}]")
#: what JSON text may still hold after ``json.dumps(ensure_ascii=False)``, which escapes C0 itself
_UNSAFE_JSON = re.compile(f"[{_REST}]")

#: the longest string shown by default (a note made of several parts can be longer: pass cap)
CAP = 500


def _escape(ch: str) -> str:
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # surrogateescape: the byte that was not UTF-8
        return f"\\x{o - 0xDC00:02x}"
    if o < 0x100:
        return f"\\x{o:02x}"
    if o > 0xFFFF:
        return f"\\U{o:08x}"
    return f"\\u{o:04x}"


def _sub(m: re.Match[str]) -> str:
    return _escape(m.group())


def clean(s: object, cap: int | None = CAP, newlines: bool = False) -> str:
    """``s`` (made a string) with every unsafe character shown as its escape, cut at ``cap``
    characters (None: never cut). ``newlines``: keep ``\\n`` (multi-line text: a log, a message)."""
    if not isinstance(s, str):
        s = str(s)
    rx = _UNSAFE_KEEP_NL if newlines else _UNSAFE
    if rx.search(s) is not None:
        s = rx.sub(_sub, s)
    if cap is not None and len(s) > cap:
        s = s[: max(0, cap - 1)] + "…"
    return s


def is_clean(s: str) -> bool:
    """True when ``s`` holds no character ``clean`` would escape (tests and assertions use it)."""
    return _UNSAFE.search(s) is None


#: what can start Markdown markup inside a line: code, emphasis, links/images, HTML, table cells,
#: strikethrough, entities (a line's start is never a tree string in marathon's reports)
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|~&])|(?<![A-Za-z0-9_])(_+)|(_+)(?![A-Za-z0-9_])")


def _md_sub(m: re.Match[str]) -> str:
    return "".join("\\" + ch for ch in m.group())


#: what starts a block at a line's start (a heading, a list item, a quote, a setext underline): a
#: name at the start of a list item (``- <task>``) made a heading of itself (a probe)
_MD_BLOCK_START = re.compile(r"^([ \t]*)(#|[+\-=]|\d{1,9}(?=[.)]))")


def md(s: object, cap: int | None = CAP) -> str:
    """For Markdown text (tables too): ``clean``, then every character that can start Markdown
    markup backslash-escaped (CommonMark's escapes: ``<img …>`` reads as text, ``|`` never ends a
    table cell, a leading ``#``, ``-``, ``+`` or ``1.`` starts no block);
    underscores inside a word (``calc_partial``) cannot emphasize and stay as they are."""
    out = _MD_SPECIAL.sub(_md_sub, clean(s, cap))
    m = _MD_BLOCK_START.match(out)
    if m is not None:
        marker = m.group(2)
        out = m.group(1) + (f"{marker}\\" if marker[0].isdigit() else f"\\{marker}") + out[m.end() :]
    return out


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def csv_cell(s: object, cap: int | None = CAP) -> str:
    """For a CSV cell a spreadsheet may open: ``clean``, and a leading ``= + - @`` (a formula, e.g.
    ``=HYPERLINK(…)``) made text by a leading ``'`` (OWASP's advice). The csv module quotes."""
    t = clean(s, cap)
    if t.startswith(_FORMULA_START):
        t = "'" + t
    return t


def html(s: object, cap: int | None = CAP) -> str:
    """For HTML text or an attribute value: ``clean``, then ``& < > " '`` escaped."""
    t = clean(s, cap)
    return (
        t.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#x27;")
    )


#: XML (an SVG) needs the same: ``clean`` removes every character XML 1.0 forbids
xml = html


def _json_sub(m: re.Match[str]) -> str:
    o = ord(m.group())
    if 0xD800 <= o <= 0xDFFF:  # not a character: show its escape as text
        return "\\\\x" + f"{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else f"\\\\u{o:04x}"
    if o > 0xFFFF:  # JSON escapes a character beyond the BMP as its UTF-16 surrogate pair
        o -= 0x10000
        return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"
    return f"\\u{o:04x}"


def json_text(dumped: str) -> str:
    """A JSON document from ``json.dumps(..., ensure_ascii=False)`` with every unsafe character
    still in it made a ``\\uXXXX`` escape (they can only be inside strings, where such an escape
    decodes to the same character); lone surrogates, which a strict parser refuses, become text."""
    if _UNSAFE_JSON.search(dumped) is None:
        return dumped
    return _UNSAFE_JSON.sub(_json_sub, dumped)


def _finite(v: object) -> object:
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


#: JSON with every non-ASCII character as its ``\\u`` escape: set by the CLI when its output is
#: not UTF-8 (``LC_ALL=C``, ``PYTHONIOENCODING=ascii``), where a character the terminal cannot show
#: becomes ``?``; JSON keeps the name whole that way (a review found ``calc-?`` for ``calc-é``)
ASCII_JSON = False


def dumps(obj: object, *, pretty: bool = False, default=None, nonfinite_as_null: bool = False) -> str:
    """The one JSON encoder of everything marathon prints or writes: strict RFC 8259 (no ``NaN`` or
    ``Infinity``: ``allow_nan=False`` raises on one, a bug to see; ``nonfinite_as_null`` writes null
    instead, for a journal line that must never stop the runner) and ``json_text`` (no control,
    bidi or undecodable character raw in the text). ``pretty``: indented; else one line."""
    import json

    kw: dict = {"ensure_ascii": ASCII_JSON, "allow_nan": False, "default": default}
    kw.update({"indent": 2} if pretty else {"separators": (",", ":")})
    try:
        text = json.dumps(obj, **kw)
    except ValueError:
        if not nonfinite_as_null:
            raise
        text = json.dumps(_finite(obj), **kw)
    return json_text(text)


# ------------------------------------------------------------------ the agent's words in a harness message
#
# A failure message the harness writes may quote what the agent controls (a tool's output, the
# in-sandbox driver's own error). Whether an attempt is voided must never be decided by such words
# (``runner.results.rules``: an agent whose ``docker ps`` printed "Cannot connect to the Docker
# daemon" was voided as an engine outage, and rerun). So the quote says where it ends, by its
# length: the voiding rules read the message without it.

_AGENT_QUOTE = re.compile(r"\[agent text, (\d{1,9}) chars\] ")


#: the most of the agent's words a harness message quotes: harbor's exception.txt, which the voiding
#: rules read the last 64 KiB of, must hold a quote's start (a review's 70,000-character driver error
#: lost its marker there and voided its attempt)
QUOTE_CAP = 2000


def quote_agent(text: str) -> str:
    """``text`` (the agent's) as it goes into a harness message, on one line, at most ``QUOTE_CAP``
    characters of it (its end kept: where a failure says what failed), its length stated."""
    t = str(text).replace("\r", "\\r").replace("\n", "\\n")
    # a lone surrogate (JSON's "\ud800") kept harbor from writing the trial's result.json at all
    t = t.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(t) > QUOTE_CAP:
        t = "…" + t[-(QUOTE_CAP - 1) :]
    return f"[agent text, {len(t)} chars] {t}"


def without_agent_quotes(text: str) -> str:
    """A harness message without the agent's words ``quote_agent`` put in it."""
    out, i = [], 0
    while (m := _AGENT_QUOTE.search(text, i)) is not None:
        out.append(text[i : m.start()])
        i = m.end() + int(m.group(1))
    out.append(text[i:])
    return "".join(out)
