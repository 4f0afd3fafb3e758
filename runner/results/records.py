"""Typed records read from harbor, verifier and receipt files: each file becomes a record once, here.

Every reader here is total: a missing, empty, half-written (harbor's writes are not atomic) or
corrupt file gives a record that says so (``state``), never an exception. The scoring rules are
``runner.results.rules``; this module only feeds them.

Files read:
    <job>/result.json               -> JobRecord      (harbor JobResult, ``stats`` block)
    <trial>/result.json             -> TrialRecord    (harbor TrialResult)
    <trial>/verifier/metrics.json   -> Metrics        (task convention; partial score, pass rate)
    <trial>/agent/goal_receipt.json -> Receipt        (marathon's arms: continuations, unblocks, ...)

Records are slotted dataclasses, deliberately not frozen: a frozen ``__init__`` was measured ~7x
slower, and a 10,000-trial tree builds ~40,000 records on a cold load. Treat them as read-only; the
model replaces records (``dataclasses.replace``) instead of changing them.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from modes import safeio
from modes.receipt import ReceiptFigures, read_figures
from modes.trial_files import VERIFIER_WRITTEN, TrialFiles
from modes.values import COUNT, SECONDS_CAP, USD, Bad, number, text
from runner.results import rules

RESULT_JSON = TrialFiles.RESULT  # the job's result.json has the same name

# File states.
OK = "ok"
MISSING = "missing"
EMPTY = "empty"
UNREADABLE = "unreadable"  # truncated mid-write, corrupt, not an object, or a permission error
REFUSED = "refused"  # broke a safe-open rule (modes.safeio): a FIFO, a symlink out, too large
TAMPERED = "tampered"  # a verifier file changed after the verifier finished (metrics only)
#: read and parsed, but a value makes no sense (modes.values: not a number, not finite, out of its
#: field's range, the wrong type); ``error`` names the field and why. Not transient: never a score.
INVALID = "invalid"


@dataclass(slots=True)  # not frozen: see the module docstring
class Loaded:
    """A JSON file read without raising: its object (or None) and what state it was in."""

    data: dict | None
    state: str
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.state == OK


def read_bytes(path: str | os.PathLike, root: str | os.PathLike | None = None) -> bytes:
    """A whole small tree file by the safe-open rules (``modes.safeio``); OSError when refused.

    ``root`` is the dir the file must stay inside (default: the file's own dir).
    """
    got = safeio.read_capped(path, root if root is not None else os.path.dirname(os.fspath(path)))
    if isinstance(got, safeio.Refused):
        if got.missing:
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        raise OSError(got.reason)
    return got


def _read(path: Path | str, root: str | None = None) -> bytes | Loaded:
    """The file's bytes, or the ``Loaded`` that says why there are none (missing, refused).

    A file that breaks a safe-open rule (not a regular file, a symlink out of the trial dir, over
    the size cap) is ``REFUSED``: unlike a half-written file it is not transient, so no last good
    value is kept for it and it is never a score.
    """
    path = os.fspath(path)
    got = safeio.read_capped(path, root if root is not None else os.path.dirname(path))
    if isinstance(got, bytes):
        return got
    if got.missing:
        return Loaded(None, MISSING)
    return Loaded(None, REFUSED if got.rule else UNREADABLE, got.reason)


def load_json(path: Path | str, root: str | None = None) -> Loaded:
    """Read a JSON object file; never raises. Non-objects count as unreadable.

    ``root``: the trial (or job) dir the file must stay inside; default the file's own dir.
    """
    raw = _read(path, root)
    return raw if isinstance(raw, Loaded) else _parse_json(raw)


def _parse_json(raw: bytes) -> Loaded:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        # JSONDecodeError and UnicodeDecodeError are ValueErrors.
        if not raw.strip():
            return Loaded(None, EMPTY, "empty file")
        return Loaded(None, UNREADABLE, f"{type(exc).__name__}: {str(exc)[:120]}")
    if not isinstance(data, dict):
        return Loaded(None, UNREADABLE, f"not a JSON object ({type(data).__name__})")
    return Loaded(data, OK)


def _count(v: Any, field: str, bad: list[Bad]) -> int | None:
    """A count field (``modes.values.COUNT``); a bad one is kept in ``bad`` and reads None."""
    got = number(v, COUNT, field)
    if isinstance(got, Bad):
        bad.append(got)
        return None
    return got  # type: ignore[return-value]


def _usd(v: Any, field: str, bad: list[Bad]) -> float | None:
    got = number(v, USD, field)
    if isinstance(got, Bad):
        bad.append(got)
        return None
    return got


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def parse_time(v: Any) -> datetime | None:
    """harbor timestamps: ISO 8601, trial ones with ``Z``; job ``started_at`` is naive local time."""
    if not isinstance(v, str) or not v:
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None


def _span_sec(start: Any, end: Any) -> float | None:
    return _span(parse_time(start), parse_time(end))


def _span(a: datetime | None, b: datetime | None) -> float | None:
    """Seconds from ``a`` to ``b``; None when either is missing, they mix naive and aware times, the
    end is before the start, or the span is past ``SECONDS_CAP`` (a probe's finish in the year 9999
    read as 8,000 years of wall time, one before its start as 0 s)."""
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return None
    sec = (b - a).total_seconds()
    return sec if 0.0 <= sec <= SECONDS_CAP else None


# ---------------------------------------------------------------------------------------------- job


@dataclass(slots=True)  # not frozen: see the module docstring
class JobRecord:
    """The harbor job ``result.json`` of one attempt (one task x arm x stamp)."""

    state: str
    error: str = ""
    job_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    n_total_trials: int = 0
    n_completed: int = 0
    n_errored: int = 0
    n_running: int = 0
    n_pending: int = 0
    n_cancelled: int = 0
    n_retries: int = 0
    cost_usd: float | None = None
    n_input_tokens: int | None = None
    n_output_tokens: int | None = None
    exception_types: tuple[str, ...] = ()
    done: bool = False  # runner.results.rules.is_done(stats)
    stale: bool = False  # the file is unreadable now; these are its last good values

    @property
    def finished(self) -> bool:
        return self.finished_at is not None


def read_job(job_dir: Path | str) -> JobRecord:
    """The job's result.json; a job dir that is a symlink is not followed (``REFUSED``)."""
    d = os.fspath(job_dir)
    if os.path.islink(d.rstrip("/")):
        return JobRecord(state=REFUSED, error=LINKED_DIR)
    return job_from_loaded(load_json(f"{d}/{RESULT_JSON}"))


def job_from_loaded(loaded: Loaded) -> JobRecord:
    if not loaded.ok:
        return JobRecord(state=loaded.state, error=loaded.error)
    return job_from_dict(loaded.data or {})


def job_from_dict(d: Mapping[str, Any]) -> JobRecord:
    """harbor's job result; a count or cost that makes no sense makes the record ``INVALID``
    (harbor wrote the file: the model then reads the job's state from its trials)."""
    stats = d.get("stats")
    if not isinstance(stats, dict):
        stats = {}
    exc_types: list[str] = []
    evals = stats.get("evals")
    if isinstance(evals, dict):
        for ev in evals.values():
            es = ev.get("exception_stats") if isinstance(ev, dict) else None
            if isinstance(es, dict):
                exc_types.extend(str(k) for k in es)
    bad: list[Bad] = []
    counts = rules.job_counts(stats)
    if isinstance(counts, Bad):
        bad.append(counts)
        counts = (0, 0)
    rec = JobRecord(
        state=OK,
        job_id=_str(d.get("id")),
        started_at=_str(d.get("started_at")),
        finished_at=_str(d.get("finished_at")),
        n_total_trials=_count(d.get("n_total_trials"), "n_total_trials", bad) or 0,
        n_completed=counts[0],
        n_errored=counts[1],
        n_running=_count(stats.get("n_running_trials"), "stats.n_running_trials", bad) or 0,
        n_pending=_count(stats.get("n_pending_trials"), "stats.n_pending_trials", bad) or 0,
        n_cancelled=_count(stats.get("n_cancelled_trials"), "stats.n_cancelled_trials", bad) or 0,
        n_retries=_count(stats.get("n_retries"), "stats.n_retries", bad) or 0,
        cost_usd=_usd(stats.get("cost_usd"), "stats.cost_usd", bad),
        n_input_tokens=_count(stats.get("n_input_tokens"), "stats.n_input_tokens", bad),
        n_output_tokens=_count(stats.get("n_output_tokens"), "stats.n_output_tokens", bad),
        exception_types=tuple(sorted(set(exc_types))),
        done=rules.done_of_counts(*counts),
    )
    if bad:
        return JobRecord(state=INVALID, error=str(bad[0]))
    return rec


# ------------------------------------------------------------------------------------------ metrics


@dataclass(slots=True)  # not frozen: see the module docstring
class Metrics:
    """``verifier/metrics.json`` through the rules: the two measures side by side, and the flags."""

    state: str  # ok | missing | empty | unreadable | in_progress
    error: str = ""
    partial: float | None = None  # rules.partial_score
    pass_rate: float | None = None  # rules.test_pass_rate
    build_failed: bool = False
    phase: str | None = None
    #: the file states test counts, 0 of 0 too (``rules.counts_stated``): no pass rate, and no hole
    counted: bool = False

    @property
    def is_score(self) -> bool:
        return self.state == OK


IN_PROGRESS = "in_progress"


def metrics_from_dict(d: Mapping[str, Any]) -> Metrics:
    """The verifier's metrics through the rules; a value that makes no sense is ``INVALID`` (a
    ``phase`` that is no text too: it names what the verifier did, and a list of one was once read
    as no phase, the file's 0.9 scored)."""
    phase = text(d.get("phase"), "phase")
    if isinstance(phase, Bad):
        return Metrics(state=INVALID, error=str(phase))
    if not rules.metrics_is_score(d):
        return Metrics(state=IN_PROGRESS, phase=phase)
    partial, rate = rules.partial_score(d), rules.test_pass_rate(d)
    for got in (partial, rate):
        if isinstance(got, Bad):
            return Metrics(state=INVALID, error=str(got), phase=phase)
    return Metrics(
        state=OK,
        partial=partial,  # type: ignore[arg-type]
        pass_rate=rate,  # type: ignore[arg-type]
        build_failed=rules.build_failed(d),
        phase=phase,
        counted=rules.counts_stated(d),
    )


def read_metrics(trial_dir: Path | str) -> Metrics:
    """``verifier/metrics.json``; missing because ``verifier/`` itself is not a directory (a FIFO, a
    file, a symlink planted in place of harbor's mount) is ``REFUSED``, never a trial without one."""
    d = os.fspath(trial_dir)
    loaded = load_json(f"{d}/{TrialFiles.METRICS}", d)
    if loaded.state == MISSING:
        try:
            mode = os.lstat(f"{d}/{TrialFiles.VERIFIER_DIR}").st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISDIR(mode):
            return Metrics(state=REFUSED, error=f"{TrialFiles.VERIFIER_DIR}/ is not a directory")
    if not loaded.ok:
        return Metrics(state=loaded.state, error=loaded.error)
    return metrics_from_dict(loaded.data or {})


# ------------------------------------------------------------------------------------------ receipt


#: ``agent/goal_receipt.json`` as read back: the one receipt definition is ``modes.receipt``
#: (written by the arms with ``modes.receipt.Receipt``, read with ``modes.receipt.read_figures``).
Receipt = ReceiptFigures


def receipt_from_dict(d: Mapping[str, Any]) -> Receipt:
    got = read_figures(d, OK)
    if isinstance(got, Bad):
        return Receipt(state=INVALID, error=str(got))
    return got


def read_receipt(trial_dir: Path | str) -> Receipt | None:
    """None when the trial has no receipt (harbor's own agents write none)."""
    d = os.fspath(trial_dir)
    loaded = load_json(f"{d}/{TrialFiles.RECEIPT}", d)
    if loaded.state == MISSING:
        return None
    if not loaded.ok:
        return Receipt(state=loaded.state, error=loaded.error)
    return receipt_from_dict(loaded.data or {})


# -------------------------------------------------------------------------------------------- trial


@dataclass(slots=True)  # not frozen: see the module docstring
class TrialRecord:
    """One harbor trial: its result (when finished), metrics and receipt, as far as readable.

    ``state`` is the state of ``result.json``: missing means still running (or a dead harness);
    unreadable means half-written or corrupt.
    """

    name: str
    state: str
    error: str = ""
    task_name: str | None = None
    errored: bool = False
    exception_type: str | None = None
    exception_message: str | None = None
    reward: float | None = None
    cost_usd: float | None = None
    n_input_tokens: int | None = None
    n_output_tokens: int | None = None
    n_cache_tokens: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    wall_sec: float | None = None
    agent_sec: float | None = None
    metrics: Metrics = field(default_factory=lambda: Metrics(state=MISSING))
    receipt: Receipt | None = None
    stale: bool = False  # result.json or metrics.json unreadable now; showing last good values
    agent_setup_started: bool = False  # harbor began the agent's setup (its timing block exists)
    agent_started: bool = False  # harbor began the agent's run (the environment and setup held)
    #: found through its finished job's summary, not by listing the job dir (``trial_from_job_summary``;
    #: the scan index then needs no identity of the job dir)
    from_summary: bool = False
    #: a value of result.json that makes no sense (``modes.values``: "field: why"), read as None;
    #: ``bad_side`` says who could have made it so (``rules.hole_side``: the agent or the harness)
    bad: str = ""
    bad_side: str = ""

    @property
    def finished(self) -> bool:
        return self.state == OK

    @property
    def partial(self) -> float | None:
        return self.metrics.partial

    @property
    def pass_rate(self) -> float | None:
        return self.metrics.pass_rate

    @property
    def build_failed(self) -> bool:
        return self.metrics.build_failed


def trial_from_dict(
    name: str, d: Mapping[str, Any], metrics: Metrics, receipt: Receipt | None
) -> TrialRecord:
    exc = d.get("exception_info")
    exc = exc if isinstance(exc, dict) and exc else None
    ar = d.get("agent_result")
    ar = ar if isinstance(ar, dict) else {}
    ae = d.get("agent_execution")
    ae = ae if isinstance(ae, dict) else {}

    bad: list[Bad] = []
    reward = rules.reward_of(d.get("verifier_result"))
    if isinstance(reward, Bad):
        bad.append(reward)
        reward = None
    cost = _usd(ar.get("cost_usd"), "agent_result.cost_usd", bad)
    tokens = [_count(ar.get(k), f"agent_result.{k}", bad) for k in _TOKEN_FIELDS]
    first = bad[0] if bad else None
    return TrialRecord(
        name=name,
        state=OK,
        task_name=_str(d.get("task_name")),
        errored=exc is not None,
        exception_type=_str(exc.get("exception_type")) if exc else None,
        exception_message=_str(exc.get("exception_message")) if exc else None,
        reward=reward,
        cost_usd=cost,
        n_input_tokens=tokens[0],
        n_output_tokens=tokens[1],
        n_cache_tokens=tokens[2],
        started_at=_str(d.get("started_at")),
        finished_at=_str(d.get("finished_at")),
        wall_sec=_span_sec(d.get("started_at"), d.get("finished_at")),
        agent_sec=_span_sec(ae.get("started_at"), ae.get("finished_at")),
        metrics=metrics,
        receipt=receipt,
        agent_setup_started=bool(d.get("agent_setup")),
        agent_started=d.get("agent_execution") is not None,
        bad=str(first) if first else "",
        bad_side=rules.hole_side(RESULT_JSON, first.field) if first else "",
    )


_TOKEN_FIELDS = ("n_input_tokens", "n_output_tokens", "n_cache_tokens")


# harbor writes TrialResult with indent=4 and a fixed key order; everything the model needs comes
# after "agent_info", while the bulky "config" block comes before it. A raw newline cannot occur
# inside a JSON string, so this marker can only be the top-level key.
_TAIL_MARK = b'\n    "agent_info":'
_TASK_NAME = re.compile(rb'^\s*"task_name":\s*("(?:[^"\\\n]|\\.)*")', re.MULTILINE)


def _load_trial_result(path: str) -> Loaded:
    """``load_json`` for a trial result.json that skips parsing the ``config`` block when it can."""
    raw = _read(path, os.path.dirname(path))
    if isinstance(raw, Loaded):
        return raw
    i = raw.find(_TAIL_MARK)
    if i > 0:
        try:
            data = json.loads(b"{" + raw[i + 1 :])
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            m = _TASK_NAME.search(raw, 0, i)
            if m:
                try:
                    data["task_name"] = json.loads(m.group(1))
                except ValueError:
                    pass
            return Loaded(data, OK)
    return _parse_json(raw)


def read_trial(trial_dir: Path | str) -> TrialRecord:
    """Read one trial dir (result, metrics, receipt); never raises. A trial dir that is a symlink
    is not followed (harbor makes real dirs; a link would bring in files from anywhere)."""
    d = os.fspath(trial_dir).rstrip("/")
    name = os.path.basename(d)
    if os.path.islink(d):
        return TrialRecord(name=name, state=REFUSED, error=LINKED_DIR)
    metrics = read_metrics(d)
    receipt = read_receipt(d)
    loaded = _load_trial_result(f"{d}/{RESULT_JSON}")
    if not loaded.ok:
        return TrialRecord(
            name=name, state=loaded.state, error=loaded.error, metrics=metrics, receipt=receipt
        )
    data = loaded.data or {}
    # a score, a file made nonsense, or gone; ``phase: initialized`` is a verifier (re)run's own mark
    if metrics.state not in (REFUSED, IN_PROGRESS):
        ver = data.get("verifier")
        fin = parse_time(ver.get("finished_at")) if isinstance(ver, dict) else None
        # a multi-step trial's verifier runs once a step: its files may predate the last run's start
        began = (
            None
            if data.get("step_results") or not isinstance(ver, dict)
            else parse_time(ver.get("started_at"))
        )
        why = tampered(d, fin, parse_time(data.get("finished_at")), began)
        if why:
            metrics = Metrics(state=TAMPERED, error=why)
    return trial_from_dict(name, data, metrics, receipt)


#: why a job or trial dir that is a symlink is not read
LINKED_DIR = "a symlink (not followed)"


_VERIFIER_FINISHED = re.compile(
    rb'\n    "verifier": \{\s*"started_at":\s*(?:"[^"\n]*"|null),\s*"finished_at":\s*"([^"\n]*)"'
)


def verifier_finished(raw: bytes) -> datetime | None:
    """``verifier.finished_at`` of a trial's result.json bytes (``_top_time``)."""
    return _top_time(raw, _VERIFIER_FINISHED, ("verifier", "finished_at"))


def _top_time(raw: bytes, pattern: re.Pattern[bytes], keys: tuple[str, ...]) -> datetime | None:
    """A time of a trial's result.json (``void``'s check of a stopped trial), parsing the whole file only when its place in the file
    does not give it.

    harbor writes TrialResult with indent=4 and its times among the last top-level keys, so the
    file's last 4 KiB usually hold them. Not always: a multi-step trial's ``step_results`` come
    after them, and another harbor may write the file otherwise. Missing one is never harmless (the
    tamper rule's verifier clock goes unchecked, and a trial the runner stopped reads as
    unverified), so a miss looks through the whole file, then parses it.
    """
    m = pattern.search(raw, max(0, len(raw) - 4096)) or pattern.search(raw)
    if m:
        return parse_time(m.group(1).decode("utf-8", "replace"))
    v: Any = _parse_json(raw).data
    for k in keys:
        v = v.get(k) if isinstance(v, dict) else None
    return parse_time(v)


#: Verifier files whose change after the verifier finished means someone else wrote them.
VERIFIER_FILES = VERIFIER_WRITTEN
#: Clock slack for the tamper rules: a legitimate write is never later than this.
TAMPER_SLACK_NS = 1_000_000_000


def tampered(
    trial_dir: str,
    verifier_finished: datetime | None,
    trial_finished: datetime | None = None,
    verifier_started: datetime | None = None,
) -> str:
    """Why the trial's verifier files are not the verifier's own (``""`` when they are).

    A verifier file last written before the verifier started (``verifier_started``; ``_latest_start``
    dates it by the reward file) is not the verifier's either: harbor removes the reward files before it
    verifies, not a metrics.json, so one the agent planted during its run was read as the verifier's.
    A probe planted one in a task whose verifier writes none: that arm got its partial score, and the
    hole rule then failed every other arm's cell of the task for lacking one (2026-12-07).

    harbor writes a trial's ``result.json`` last: after its verifier finished (``verifier.finished_at``
    in that file), after it stopped the environment and fixed the log dirs' owner. So a verifier
    file that was modified after the verifier finished (its mtime), or whose inode changed after
    ``result.json`` was written (its ctime, which no one can set back), was written by someone
    other than the verifier: typically a process the agent left running. The same holds for the
    verifier dir itself: an entry added, removed or renamed there after ``result.json`` (its ctime)
    means a file of the verifier's was deleted or planted (a deleted metrics.json would otherwise
    just leave its cell without a partial score). Copies of a tree (which keep mtimes and renew
    every ctime, the dir's before the files') stay consistent with these rules.

    The verifier's end is harbor's clock, a file's mtime the output disk's: on a network disk they
    differ (the field's NAS lagged its host by about two minutes), which would flag every cell of a
    disk ahead of its host and miss writes of that long after the verifier on one behind. harbor
    stamps the trial's ``finished_at`` (``trial_finished``) and writes result.json at once, so the
    file's mtime minus that stamp is the disk's offset, and the verifier's end is moved by it.
    """
    times = safeio.lstat_times(f"{trial_dir}/{RESULT_JSON}")
    if times is None:
        return ""
    res_mtime, res_ctime = times
    fin_ns = None
    if verifier_finished is not None and verifier_finished.tzinfo is not None:
        fin_ns = int(verifier_finished.timestamp() * 1e9)
        if trial_finished is not None and trial_finished.tzinfo is not None:
            fin_ns += res_mtime - int(trial_finished.timestamp() * 1e9)  # in the disk's clock
    seen = {rel: safeio.lstat_times(f"{trial_dir}/{rel}") for rel in VERIFIER_FILES}
    reward = seen.get(TrialFiles.REWARD_TXT) or seen.get(TrialFiles.REWARD_JSON)  # (a task writes one)
    start_ns = _latest_start(reward, verifier_started, verifier_finished)
    for rel, t in seen.items():
        if t is None:
            continue
        mtime, ctime = t
        if ctime > res_ctime + TAMPER_SLACK_NS:
            return f"{rel} changed {(ctime - res_ctime) / 1e9:.1f} s after harbor wrote result.json"
        if fin_ns is not None and mtime > fin_ns + TAMPER_SLACK_NS:
            return f"{rel} written {(mtime - fin_ns) / 1e9:.1f} s after the verifier finished"
        if start_ns is not None and mtime < start_ns - TAMPER_SLACK_NS:
            return f"{rel} written at least {(start_ns - mtime) / 1e9:.1f} s before the verifier started"
    t = safeio.lstat_times(f"{trial_dir}/{TrialFiles.VERIFIER_DIR}")
    if t is not None and t[1] > res_ctime + TAMPER_SLACK_NS:
        return (
            f"{TrialFiles.VERIFIER_DIR}/ changed (a file added, removed or renamed) "
            f"{(t[1] - res_ctime) / 1e9:.1f} s after harbor wrote result.json"
        )
    return ""


def _latest_start(
    reward_txt: tuple[int, int] | None, started: datetime | None, finished: datetime | None
) -> int | None:
    """The latest the verifier can have started, in the output disk's clock (ns): its reward.txt
    (or reward.json, a task's other reward file), which harbor removes before it verifies, was
    written during its run, so no later than the file's mtime less the run's length (harbor's two
    stamps; a length needs no clock of the disk's). None without a reward file or the stamps (a
    probe planted metrics.json in a reward.json task, read as the verifier's: 2026-12-07). Not the trial's end moved by the disk's offset: harbor
    may write result.json a while after its end, which would date the start too late."""
    if reward_txt is None or started is None or finished is None:
        return None
    if started.tzinfo is None or finished.tzinfo is None:
        return None
    return reward_txt[0] - max(0, int((finished - started).total_seconds() * 1e9))


def trial_from_job_summary(d: Mapping[str, Any], job_dir: str) -> TrialRecord | None:
    """The one trial of a finished one-trial job, named by the job ``result.json``; else None.

    harbor's job stats of a finished job name each trial in ``reward_stats``, so for the usual shape
    (one task per job, one attempt, no exception) the job dir need not be listed to find it. The
    trial is read by ``read_trial``, as an update reads it. Anything unexpected (more trials,
    running, a trial named twice or not at all, its dir gone, a trial that does not read clean)
    gives None and the caller lists the job dir.
    """
    stats = d.get("stats")
    if d.get("finished_at") is None or d.get("n_total_trials") != 1 or not isinstance(stats, dict):
        return None
    if stats.get("n_completed_trials") != 1 or stats.get("n_errored_trials"):
        return None
    if stats.get("n_running_trials") or stats.get("n_pending_trials"):
        return None
    evals = stats.get("evals")
    if not isinstance(evals, dict) or len(evals) != 1:
        return None
    ev = next(iter(evals.values()))
    rs = ev.get("reward_stats") if isinstance(ev, dict) else None
    es = ev.get("exception_stats") if isinstance(ev, dict) else None
    if not isinstance(rs, dict) or not isinstance(es, dict) or es:
        return None  # errored trials are few and worth their full record (exception message)
    names: set = set()
    for by_value in rs.values():
        if not isinstance(by_value, dict):
            return None
        for trials in by_value.values():
            if not isinstance(trials, list) or not all(isinstance(t, str) for t in trials):
                return None
            names.update(trials)
    if len(names) != 1:
        return None
    name = names.pop()
    if not name or "/" in name or name[0] == ".":
        return None
    # the trial itself is read as an update reads it (one reader, one verdict): the summary only
    # spares listing the job dir; a trial that does not read clean is left to the caller's listing
    rec = read_trial(f"{job_dir}/{name}")
    return replace(rec, from_summary=True) if rec.state == OK else None
