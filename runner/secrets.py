"""No credential by value, anywhere a run writes or passes things on.

Why: the runner's flags end up in harbor's argv (visible to every user in ``/proc/*/cmdline``), in
``<out>/.driver_env``, in ``registry.json``, in ``events.jsonl``, in receipts and on the console. A
key given by value in any flag would be copied to all of them and kept for as long as the output
tree lives. So a credential travels only by NAME: ``--ae KEY=${NAME}`` (harbor resolves it from the
environment it inherits) or ``--ak api_key_var=NAME`` (the arm reads it and forwards it by name).

Rules, one function each, all pure:

- ``agent_env_ref``: an ``--ae`` item is a pure reference ``${NAME}`` -- no ``${NAME:-default}``
  (the default is a literal) and no literal, whatever the key is called;
- ``agent_env_literal``: a literal agent env value needs ``--ae-literal NAME=VALUE`` and NAME must be
  one of ``LITERAL_KNOBS`` (known non-secret knobs), each with a check of its value's shape;
- ``url_userinfo``, ``key_prefixes``, ``high_entropy_tokens``: what a credential looks like by
  value; ``screen`` refuses a value with any of them, naming the flag, never echoing the value;
- ``redact`` / ``redact_argv``: the same findings replaced by ``***``, for what is stored anyway.

The detection is a safety net, not the mechanism: values that merely look random are refused only
when they are long, mix character classes and do not read like words; hex strings (digests, ids),
UUIDs, paths, model names and URLs without a user part pass.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from runner.errors import UserError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_ANY_TEMPLATE = re.compile(r"\$\{")
HOW = "pass secrets by name: export the variable and give its name (--ae KEY or --ak api_key_var=NAME)"


@dataclass(frozen=True)
class Finding:
    """Where in a value something credential-shaped sits, and what it looks like (never the text)."""

    kind: str
    start: int
    end: int


# --- what a credential looks like -------------------------------------------------------------------

#: one match tried per run of scheme characters, from its start: starting at every letter made a
#: long word quadratic (a 100 KB flag value took 18 s to screen); the run may begin with a digit or
#: punctuation (``...https://u:p@h``, ``1.https://…``), which is still a credential in a URL. The
#: user part is anything up to the host's ``@`` but a space, a double quote (a JSON string's end:
#: ``{"u":"http://h","img":"x@sha256:…"}`` is no credential) or the URL's delimiters: a tab, a
#: newline or a single quote in it still make a URL with credentials (``urlsplit`` drops the first
#: two and keeps the quote; a probe passed ``http://user:<hex>\t@host`` through every flag)
_USERINFO = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z0-9+.\-]+://(?P<info>[^/?#@ \"]+)@")


def url_userinfo(text: str) -> list[Finding]:
    """A URL with a user part (``https://user:password@host``, ``https://token@host``): the
    credential rides along wherever the URL is printed or stored."""
    return [
        Finding("a URL with credentials (user:password@host)", m.start("info"), m.end("info"))
        for m in _USERINFO.finditer(text)
    ]


_B = r"(?<![A-Za-z0-9])"  # a token boundary: not in the middle of a word ("task-", "disk-")
_PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an API key (sk-...)", re.compile(_B + r"sk-(?=[A-Za-z0-9_-]*[A-Z0-9])[A-Za-z0-9_-]{16,}")),
    ("an API key (sk_live_/sk_test_...)", re.compile(_B + r"[sr]k_(?:live|test)_[A-Za-z0-9]{10,}")),
    ("a GitHub token (ghp_/gho_/ghs_...)", re.compile(_B + r"gh[pousr]_[A-Za-z0-9]{20,}")),
    ("a GitHub token (github_pat_...)", re.compile(_B + r"github_pat_[A-Za-z0-9_]{20,}")),
    ("a Slack token (xox...)", re.compile(_B + r"xox[abposre]-[A-Za-z0-9-]{10,}")),
    ("an AWS access key (AKIA...)", re.compile(_B + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")),
    ("a Google API key (AIza...)", re.compile(_B + r"AIza[A-Za-z0-9_-]{30,}")),
    ("a JWT (eyJ...)", re.compile(_B + r"eyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
)


def key_prefixes(text: str) -> list[Finding]:
    """Well-known credential formats, recognised by their prefix and shape."""
    return [Finding(kind, m.start(), m.end()) for kind, rx in _PREFIXES for m in rx.finditer(text)]


#: the commonest English letter pairs: identifiers made of words are full of them, random text is not
_BIGRAMS = frozenset(
    "th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le ve co me "
    "de hi ri ro ic ne ea ra ce li ch ll be ma si om ur ca el ta la ns di fo ho pe ec pr no ct us ac ot "
    "il tr ly nc et ut ss so rs un lo wa ge ie wh ee wi em ad ol rt po we na ul ni ts mo ow pa im mi ai "
    "sh ir su id os iv ia am fi ci vi pl ig tu ev ld ry mp fe bl ab gh ty op wo sa ay ex ke fr oo av ag "
    "if ap gr od bo sp rd do uc bu ei ov by rm ep tt oc fa ef cu rn sc gi da yo cr cl du ga qu ue ff ba "
    "ey ls va um pp ua up lu go ht".split()
)
_SEGMENT = re.compile(r"[A-Za-z0-9]{20,}")  # between any separators
_RUN = re.compile(r"[A-Za-z0-9+_\-]{32,}={0,2}")  # base64(url) keeps '-', '_', '+' inside a token
# standard base64 keeps '/' too; a leading '/' is a path, not a token
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_.\-])[A-Za-z0-9+_\-][A-Za-z0-9+/_\-]{31,}={0,2}")
_HEXLIKE = re.compile(r"[0-9a-fA-F\-]+")  # digests, container ids, UUIDs: recorded by the product


def _entropy_ratio(s: str) -> float:
    """Shannon entropy per character over its maximum for this length (1.0 = all distinct)."""
    n = len(s)
    h = -sum(c / n * math.log2(c / n) for c in Counter(s).values())
    return h / math.log2(n)


def _wordiness(s: str) -> float | None:
    """Share of adjacent letter pairs that are common English pairs inside a word (a lower-to-upper
    step is a word boundary, not a pair); None when there are too few pairs to judge."""
    pairs = [s[i : i + 2] for i in range(len(s) - 1) if s[i : i + 2].isalpha()]
    if len(pairs) < 6:
        return None
    inside = [p for p in pairs if not (p[0].islower() and p[1].isupper())]
    return sum(p.lower() in _BIGRAMS for p in inside) / len(pairs)


def _random_looking(s: str) -> bool:
    if _HEXLIKE.fullmatch(s):
        return False
    classes = sum(bool(re.search(p, s)) for p in ("[A-Z]", "[a-z]", "[0-9]"))
    if classes < 2:
        return False
    w = _wordiness(s)
    return w is not None and w < 0.55 and _entropy_ratio(s) >= 0.7


def _random_run(s: str) -> bool:
    """A base64url-like run, judged without its hex pieces (``run-<uuid>``, ``job_<sha>``)."""
    rest = "".join(p for p in re.split(r"[-_]", s) if not _HEXLIKE.fullmatch(p))
    return len(rest) >= 20 and _random_looking(rest)


def _random_b64(s: str) -> bool:
    """A standard-base64 run (with '/'): judged whole unless a piece is hex (a digest in a path)."""
    pieces = [p for p in s.split("/") if p]
    if any(len(p) >= 7 and _HEXLIKE.fullmatch(p) for p in pieces):
        return False
    return _random_looking(s)


def high_entropy_tokens(text: str) -> list[Finding]:
    """Long tokens that look random (mixed classes, high entropy, not made of words): a pasted key
    in a format we do not know by prefix."""
    found = [m for m in _SEGMENT.finditer(text) if _random_looking(m.group())]
    found += [m for m in _RUN.finditer(text) if _random_run(m.group())]
    found += [m for m in _B64_RUN.finditer(text) if "/" in m.group() and _random_b64(m.group())]
    return [Finding("a long random token (an API key?)", m.start(), m.end()) for m in found]


RULES: tuple[Callable[[str], list[Finding]], ...] = (url_userinfo, key_prefixes, high_entropy_tokens)


def findings(text: str) -> list[Finding]:
    """Everything credential-shaped in ``text``, in order of position."""
    return sorted((f for rule in RULES for f in rule(text)), key=lambda f: (f.start, -f.end))


def screen(label: str, value: str) -> None:
    """Refuse a value that carries a credential. The message names ``label`` (the flag), never the value."""
    found = findings(value)
    if found:
        raise UserError(
            f"{label}: the value looks like {found[0].kind}; refused so it is not stored or shown; {HOW}"
        )


def screen_all(items: Iterable[tuple[str, str]]) -> None:
    """``screen`` each (label, value) pair; the first offender is refused."""
    for label, value in items:
        screen(label, value)


def redact(text: str) -> str:
    """``text`` with every finding replaced by ``***`` (for what must be stored anyway)."""
    found = findings(text)
    if not found:
        return text
    out, pos = [], 0
    for f in found:
        if f.end <= pos:
            continue
        out.append(text[pos : max(pos, f.start)])
        out.append("***")
        pos = f.end
    out.append(text[pos:])
    return "".join(out)


#: a variable named for a credential (``OPENAI_API_KEY``, ``GITHUB_TOKEN``, ``DB_PASSWORD``,
#: ``MARATHON_DEMO_MODEL_KEY``, ``SSH_AUTH_SOCK``): a word of its name between underscores
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|KEYS|TOKEN|TOKENS|SECRET|SECRETS|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)(?:_|$)",
    re.IGNORECASE,
)


def without_secrets(env: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """``env`` without every variable named for a credential or whose value looks like one
    (``findings``), but those named in ``keep``: the environment of a process that needs no
    credential (the viewer, the gateway's helpers), which a copy of the operator's shell would give
    every key exported in it."""
    kept = set(keep)
    return {
        k: v for k, v in env.items() if k in kept or not (_SECRET_NAME.search(k) or findings(v))
    }  # fmt: skip


def redact_argv(argv: Sequence[str]) -> list[str]:
    """An argv as it may be stored (registry, events): each argument redacted."""
    return [redact(str(a)) for a in argv]


# --- agent env: references, and literals for known non-secret knobs ---------------------------------


def agent_env_ref(item: str) -> str:
    """An ``--ae`` item as ``KEY=${NAME}`` (``KEY`` alone means ``KEY=${KEY}``). Anything else is
    refused: a literal or a ``${NAME:-default}`` would put a value into argv, ``.driver_env`` and
    harbor's config.json, and harbor's own scrubbing only knows names that look sensitive."""
    key, sep, val = item.partition("=")
    if not NAME.match(key):
        raise UserError("--ae: expected KEY or KEY=${NAME} with KEY a variable name")
    if not sep:
        return f"{key}=${{{key}}}"
    if _REF.match(val):
        return f"{key}={val}"
    if val.startswith("${") and ":-" in val:
        why = "a default (${NAME:-...}) is a literal value"
    else:
        why = "the value is not a pure reference ${NAME}"
    raise UserError(
        f"--ae {key}=...: {why}; export the variable and pass --ae {key} or --ae {key}='${{NAME}}'; "
        f"a non-secret knob goes in --ae-literal NAME=VALUE ({', '.join(LITERAL_KNOBS)})"
    )


def ref_name(item: str) -> str | None:
    """The variable an ``--ae KEY=${NAME}`` item refers to."""
    m = _REF.match(item.partition("=")[2])
    return m.group(1) if m else None


def _positive_number(value: str) -> bool:
    return re.fullmatch(r"[0-9]{1,9}(\.[0-9]{1,3})?", value) is not None and float(value) > 0


def _loopx_arm(value: str) -> bool:
    from modes.profiles import ARMS

    return value in {a for a, m in ARMS.items() if m.loopx}


#: Names that look like credentials but whose one allowed value is public: the demo's stand-in model
#: key (the scripted model accepts any key and records only a hash). Carried in .driver_env as a
#: literal so that a restarted demo runner (health --fix, --resume, the console) has it.
DECLARED_NON_SECRETS: dict[str, str] = {"MARATHON_DEMO_MODEL_KEY": "scripted-demo-placeholder"}

#: literal agent env values allowed, with the shape each value must have (nothing secret fits)
LITERAL_KNOBS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "GOAL_TIMEOUT_SEC": ("a positive number of seconds", _positive_number),
    "WEN_MODE": ("a LoopX arm (ssh-goal, codex-cli, heartbeat)", _loopx_arm),
    **{
        name: (f"the public placeholder {value!r}", lambda v, value=value: v == value)
        for name, value in DECLARED_NON_SECRETS.items()
    },
}


def agent_env_literal(item: str) -> str:
    """An ``--ae-literal NAME=VALUE`` item, checked: NAME is a known non-secret knob and VALUE has
    its shape. Why an allow-list: a name says nothing about what a value holds (``FOO=sk-...``)."""
    key, sep, val = item.partition("=")
    if not NAME.match(key) or not sep:
        raise UserError("--ae-literal: expected NAME=VALUE with NAME a variable name")
    if key not in LITERAL_KNOBS:
        raise UserError(
            f"--ae-literal {key}: not a known non-secret knob (allowed: {', '.join(LITERAL_KNOBS)}); "
            f"pass it by reference instead: export {key} and give --ae {key}"
        )
    what, ok = LITERAL_KNOBS[key]
    if not ok(val):
        raise UserError(f"--ae-literal {key}: the value must be {what}")
    return f"{key}={val}"


def duplicate_env_keys(items: Iterable[str]) -> list[str]:
    """Keys given more than once across ``--ae`` and ``--ae-literal`` (harbor would keep one silently)."""
    seen = Counter(i.partition("=")[0] for i in items)
    return sorted(k for k, n in seen.items() if n > 1)


def kwarg_label(item: str) -> str:
    """How an ``--ak`` item is named in a message: its key when it has one, never its value."""
    key, sep, _ = item.partition("=")
    return f"--ak {key}" if sep and NAME.match(key) else "--ak"
