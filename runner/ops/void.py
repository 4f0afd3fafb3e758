"""Infrastructure failures: reading a trial for the voiding table (``runner.results.rules.VOIDING``), and
voiding (move aside with a README, never delete).

Why: a failure that hits one arm more than another reverses the comparison's conclusion (runbook
pitfall 1). An environment that never started, an exhausted address pool, a Docker error or an
agent that could not even be set up says nothing about the agent: such a trial is moved under
``voided_root(out)`` with the reason and the evidence, and the pair is run again. A build failure
in the verifier (``BUILD FAILED``, ``phase: build_failed``) is the agent's code failing to build:
it is a scored result and is never voided (runbook pitfall 4).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from modes import safeio, safetext
from modes.naming import compose_project
from modes.trial_files import TrialFiles
from runner.errors import EXIT_FAILED, UserError
from runner.results import rules
from runner.results.events import last_run_id, utc_now
from runner.results.records import RESULT_JSON, parse_time, read_trial, verifier_finished
from runner.results.tree import VOID_README, arm_of_dir, iter_trial_dirs, voided_root, voided_trial_dir

if TYPE_CHECKING:
    from datetime import datetime

    from runner.results.deaths import Deaths

VOID_JSON = "void.json"
#: the way out for an attempt refused as running that in fact died (harbor killed before its
#: result.json): the runner voids such an attempt when it resumes
DIED_HINT = " (one that died without it is voided when the run resumes: `marathon health --fix`)"


@dataclass(frozen=True)
class Verdict:
    """What a finished job's trials say: ``done``, ``infra`` (void and rerun) or ``errored`` (scored
    attempt that is not done, e.g. the agent crashed; kept, rerun in the next pass)."""

    kind: str
    reason: str
    evidence: list[str] = field(default_factory=list)
    trial: str | None = None
    rule: str | None = None  # the row of runner.results.rules.VOIDING that decided it


def _root_of(path: Path) -> Path:
    """The trial dir a tree file must stay in: ``verifier/`` and ``agent/`` files belong to their trial."""
    parent = path.parent
    return parent.parent if parent.name in ("verifier", "agent") else parent


_TAIL_BYTES = 64 * 1024


def _tail(path: Path, n: int = 15) -> list[str]:
    """The last ``n`` lines, from at most the last 64 KiB (the file may be any size, or a FIFO)."""
    fd = safeio.open_tree_file(path, _root_of(path), safeio.STREAM)
    if isinstance(fd, safeio.Refused):
        return []
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, _TAIL_BYTES, max(0, size - _TAIL_BYTES))
    except OSError:
        return []
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").splitlines()
    if size > _TAIL_BYTES and lines:
        lines = lines[1:]  # read from the middle of a line: its start (a quote's marker) is not here
    return lines[-n:]


def trial_facts(
    trial_dir: Path, stopped_by: str | None = None, deaths: Deaths | None = None
) -> tuple[rules.TrialFacts, list[str]]:
    """Read what ``rules.voiding_rule`` needs from a trial dir, and the evidence to keep;
    ``deaths``: the engine's account of container deaths, when there is one (the runner's own
    watch, or a cluster job's record of its host: ``runner.results.deaths``)."""
    rec = read_trial(trial_dir)  # the one reader of a trial's result.json (runner.results.records)
    cut = spend_cut(trial_dir)
    if not rec.finished:
        return rules.TrialFacts(has_result=False, stopped_by=stopped_by, spend_cut=cut), [cut] if cut else []
    gw = gateway_outage(trial_dir)
    if not rec.errored:
        # a clean result of a trial the runner stopped is a score only when its verifier finished
        # (harbor has recorded a trial it was cancelling as completed without an exception)
        verified = stopped_by is None or _verifier_finished_at(trial_dir) is not None
        if gw or cut:
            return rules.TrialFacts(
                stopped_by=stopped_by, gateway_failed=gw, spend_cut=cut, verified=verified
            ), [x for x in (gw, cut) if x]
        return rules.TrialFacts(stopped_by=stopped_by, verified=verified), []
    etype = rec.exception_type or "UnknownException"
    msg = rec.exception_message or ""
    evidence = [f"exception_type: {etype}", f"exception_message: {msg[:2000]}"]
    evidence += [x for x in (gw, cut) if x]
    evidence += [f"{TrialFiles.EXCEPTION}: {ln}" for ln in _tail(trial_dir / TrialFiles.EXCEPTION, 8)]
    try:
        from harbor.models.trial.error_policy import policy_for

        cause = str(policy_for(etype).cause.value)
    except Exception:  # noqa: BLE001 - harbor missing or changed: fall back to the other signals
        cause = ""
    evidence.append(f"harbor failure cause: {cause or 'unknown'}")
    text = _harness_words(msg, _tail(trial_dir / TrialFiles.EXCEPTION, 60)).lower()
    died = ""
    ended = parse_time(rec.finished_at)
    if deaths is not None and ended is not None and ended.tzinfo is not None:
        under = _verifier_finished(trial_dir)
        death = deaths.death_before(
            compose_project(trial_dir.name), ended.timestamp(), under.timestamp() if under else None
        )
        if death is not None:
            # a stop counts only under the verifier: say so, with the verifier's end
            what, at = (
                ("the verifier finished", under) if death.stopped and under else ("the trial ended", ended)
            )
            died = f"{death.describe()}, before {what} at {at:%H:%M:%S} UTC"
            evidence.append(died)
        else:
            lost_near = getattr(deaths, "engine_lost_near", None)  # the live watch; a record has none
            if lost_near is not None:
                # harbor's own command in the container SIGKILLed once the verifier phase began: wait
                # a moment for the engine's loss to show (the trial can end before the stream breaks)
                killed = under is not None and "exit code 137" in text
                died = lost_near(ended.timestamp(), killed=killed) or ""
                if died:
                    evidence.append(died)
    facts = rules.TrialFacts(
        exception_type=etype,
        text=text,
        agent_started=rec.agent_started,
        cause=cause,
        stopped_by=stopped_by,
        container_died=died,
        gateway_failed=gw,
        spend_cut=cut,
    )
    if not facts.agent_started:
        evidence.append("failed in: " + ("agent setup" if rec.agent_setup_started else "environment start"))
    return facts, evidence


def _verifier_finished(trial_dir: Path) -> datetime | None:
    """``verifier.finished_at`` of the trial's result.json (harbor sets it whatever the verifier did,
    before it stops the environment), when it names its time zone; None when there is none (no
    verifier, a multi-step trial)."""
    got = _verifier_finished_at(trial_dir)
    return got if got is not None and got.tzinfo is not None else None


def _verifier_finished_at(trial_dir: Path) -> datetime | None:
    """``verifier.finished_at`` of the trial's result.json as written (None: no verifier finished)."""
    raw = safeio.read_capped(trial_dir / RESULT_JSON, trial_dir)
    if isinstance(raw, safeio.Refused):
        return None
    return verifier_finished(raw)


def gateway_outage(trial_dir: Path) -> str:
    """The runner's record of the model gateway dying while this trial's attempt was live at it
    (``runner.results.ledger.outage_of``), described; "" when there is none."""
    from runner.results.ledger import outage_of

    at = _attempt_of(trial_dir)
    o = outage_of(*at) if at is not None else None
    return o.describe() if o is not None else ""


def spend_cut(trial_dir: Path) -> str:
    """The runner's record of a spend cap stopping this trial's attempt (``runner.results.caps.cut_of``),
    described; "" when there is none."""
    from runner.results.caps import cut_of

    at = _attempt_of(trial_dir)
    return cut_of(*at) if at is not None else ""


def _attempt_of(trial_dir: Path) -> tuple[Path, str, str, str] | None:
    """(out, task, arm, stamp) of a trial dir in the tree's layout (``<out>/<task>/<arm>/<stamp>/<job>/<trial>``)."""
    p = Path(trial_dir)
    if len(p.parents) < 5:
        return None
    return p.parents[4], p.parents[3].name, p.parents[2].name, p.parents[1].name


def classify_trial(trial_dir: Path, stopped_by: str | None = None, deaths: Deaths | None = None) -> Verdict:
    """Void or score one trial by the one table, ``runner.results.rules.VOIDING`` (never by arm).

    A verifier ``BUILD FAILED`` is not an exception at all, so it is a scored result here.
    """
    facts, evidence = trial_facts(trial_dir, stopped_by, deaths)
    rule = rules.voiding_rule(facts)
    if rule.verdict == rules.VOID:
        why = rule.what
        if rule.name in ("stopped_by_runner", "stopped_unverified"):
            why = f"{rule.what} ({stopped_by})"
        elif rule.name == "no_result" and stopped_by is not None:
            why = f"{rule.what}; stopped by the runner ({stopped_by})"
        reason = f"{facts.exception_type}: {why}" if facts.exception_type else why
        return Verdict("infra", reason, evidence, trial_dir.name, rule.name)
    if rule.name == "finished":
        return Verdict("done", rule.what, trial=trial_dir.name, rule=rule.name)
    msg = evidence[1].removeprefix("exception_message: ")
    return Verdict("errored", f"{facts.exception_type}: {msg[:200]}", evidence, trial_dir.name, rule.name)


def classify_job(
    job_dir: Path,
    log_path: Path | None = None,
    stopped_by: str | None = None,
    deaths: Deaths | None = None,
) -> Verdict:
    """Classify a finished harbor job (one trial per job in marathon's layout); ``stopped_by`` is
    the runner's stop reason when the runner itself ended the job; ``deaths`` the engine's account of
    container deaths (``runner.results.deaths``)."""
    verdicts = [classify_trial(t, stopped_by, deaths) for t in iter_trial_dirs(job_dir)]
    infra = [v for v in verdicts if v.kind == "infra"]
    if infra:
        return infra[0]
    errored = [v for v in verdicts if v.kind == "errored"]
    if errored:
        return errored[0]
    if not verdicts:
        ev = [f"harbor output: {ln}" for ln in (_tail(log_path, 20) if log_path else [])]
        return Verdict("infra", "harbor ended without starting a trial", ev)
    return Verdict("done", "all trials finished without exception")


# --- voiding ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VoidPlan:
    """Move ``source`` (a job's stamp dir, or one trial dir) to ``dest`` with a README (a
    ``runner.ops.plan.Plan``; the operator's void of a trial, and the runner's of an attempt)."""

    out: str
    source: str
    dest: str
    task: str
    arm: str
    stamp: str
    trial: str | None
    reason: str
    evidence: list[str]
    empty = False
    listed = True

    def render(self) -> str:
        c = safetext.clean  # each on its one line: a name with a newline faked lines of this plan
        return (
            f"void {c(self.source, None)}\n  -> {c(self.dest, None)}\n  reason: {c(self.reason, None)}\n\n"
            "The trial is moved (never deleted) with a README; the runner reruns the pair in its next pass."
        )

    def to_json(self) -> dict:
        return asdict(self)

    def act(self) -> VoidReport:
        """Move it aside, recorded under the tree's last run (the one that made the trial), and
        journalled as the operator's."""
        return VoidReport(act_void(self, run_id=last_run_id(Path(self.out)), by="operator"))


def _journal(plan: VoidPlan, dest: Path, by: str) -> None:
    """A ``void`` event for a void made outside the runner (`marathon void`, `health --fix`): the
    runner journals its own, and the console's progress is folded from the journal (after an
    operator's void it still said 20/20 pairs done beside a voided cell; found by a probe). No
    ``run_id``: the event says nothing about which run made the attempt. A journal that cannot
    be written loses only this line: the void itself is done and its README says why."""
    from runner.results.events import EventKind, append_event
    from runner.results.scan import pair_done
    from runner.results.tree import repeat_of

    arm = arm_of_dir(plan.arm)
    # whether the pair is still done without it (another done attempt): the console's progress takes
    # it from here (a void of an errored attempt beside a done retry took the pair out of its count)
    still = pair_done(plan.out, plan.task, arm, repeat_of(plan.stamp))
    rec = {"ts": utc_now(), "event": EventKind.VOID, "task": plan.task, "arm": arm, "arm_dir": plan.arm,
           "stamp": plan.stamp, "reason": plan.reason, "dest": str(dest), "by": by, "pair_done": still}  # fmt: skip
    with contextlib.suppress(OSError):
        append_event(Path(plan.out), rec)


@dataclass(frozen=True)
class VoidReport:
    dest: Path
    ok = True

    def render(self) -> str:
        return (
            f"moved to {safetext.clean(self.dest, None)}\nthe runner reruns the pair in its next pass "
            "(start it if it is not running: R in the console, `marathon run OUT --resume`)"
        )

    def to_json(self) -> dict:
        return {"dest": str(self.dest), "ok": True}


def plan_void(out: Path, trial_or_job: Path, reason: str, evidence: list[str] | None = None) -> VoidPlan:
    """Plan voiding a trial dir (or a job dir) of ``out``.

    When the job holds only this trial, the whole stamp dir (job result.json, harbor log) moves, so
    the pair no longer shows the errored attempt; otherwise only the trial dir moves.
    """
    out = Path(out).resolve()
    p = Path(trial_or_job).resolve()
    if not p.is_relative_to(out):
        raise ValueError(f"{p} is not inside the output tree {out}")
    rel = p.relative_to(out).parts
    # <task>/<arm dir>/<stamp>/<job>[/<trial>], none hidden (the runner's own .runner, .marathon,
    # .claims), and the job named for its arm dir as harbor names it: any other dir four or five
    # deep (the runner's task copies, a source tree) was planned as an attempt, and moved
    if (
        len(rel) not in (4, 5)
        or any(part.startswith(".") for part in rel)
        or rel[3] not in {rel[1], arm_of_dir(rel[1])}
    ):
        raise ValueError(f"{p} is not a job or trial dir of {out} (<task>/<arm>/<stamp>/<arm>[/<trial>])")
    task, arm_dir, stamp = rel[0], rel[1], rel[2]
    trial = rel[4] if len(rel) == 5 else None
    job = out / task / arm_dir / stamp / rel[3]
    if trial is not None:
        if not (p / TrialFiles.RESULT).exists():
            raise ValueError(f"{p} is still running (no result.json): stop it before voiding{DIED_HINT}")
        siblings = [t.name for t in iter_trial_dirs(job)]
        whole = siblings == [trial]
    else:
        whole = True
    if whole:
        src, dest = out / task / arm_dir / stamp, voided_root(out) / task / arm_dir / stamp
    else:
        src, dest = p, voided_trial_dir(out, task, arm_dir, stamp, rel[3], trial)
    if any((d / VOID_JSON).exists() for d in (out / task / arm_dir / stamp, src)):
        # a voided attempt (its tree given as OUT): voided again, its record was overwritten (a probe)
        raise ValueError(f"{src} is voided already (its {VOID_JSON} says why)")
    if dest.exists():
        dest = dest.with_name(dest.name + f"-{os.getpid()}")
    return VoidPlan(str(out), str(src), str(dest), task, arm_dir, stamp, trial, reason, list(evidence or []))


class VoidFailed(UserError):
    """A void that could not be carried out; the message says whether anything moved."""

    exit_code = EXIT_FAILED


def act_void(plan: VoidPlan, *, run_id: str | None = None, by: str | None = None) -> Path:
    """Move the source aside with its README.md + void.json. Never deletes an attempt, never leaves
    one half moved or without its reason.

    The reason is written into the source first and moves with it, so a voided attempt always says
    why; across filesystems (the voided root is a sibling of the tree, which may be a mount of its
    own) the source is copied to a hidden name beside its destination (the scan skips it), renamed
    into place, and only then removed. A failure before the move is complete (a full or read-only
    disk) leaves the tree as it was and raises ``VoidFailed`` in one line. ``by``: a void made
    outside the runner (which journals its own) is journalled as whose (``_journal``)."""
    src, dest = Path(plan.source), Path(plan.dest)
    record = asdict(plan) | {"voided_at": utc_now(), "run_id": run_id}
    md = safetext.md  # the names and the evidence quote the tree: never markup, never raw bytes
    attempt = " / ".join(md(x) for x in (plan.task, plan.arm, plan.stamp, plan.trial) if x)
    lines = [
        f"# Voided: {safetext.clean(plan.reason, None)}",  # read back as the reason (scan._void_reason)
        "",
        f"- attempt: {attempt}",
        f"- voided at: {record['voided_at']}" + (f" (run {md(run_id)})" if run_id else ""),
        f"- moved from: {md(plan.source, None)}",
        "",
        "This attempt failed for a reason outside the agent (infrastructure), so it is not a result",
        "of the arm. It was moved here, not deleted; the pair is run again.",
        "",
        "## Evidence",
        "",
        # an indented block: no line inside can close it (a fence could be, by a line of ```)
        *("    " + safetext.clean(line, None) for e in plan.evidence for line in str(e).split("\n")),
        "",
    ]
    written: list[Path] = []
    _own_voided_root(Path(plan.out), src)
    try:
        # one void of an attempt at a time (an flock on its dir): two at once wrote one's reason and
        # the other's record into it, and the one that "moved nothing" had moved its record (a probe)
        held = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise VoidFailed(f"void {src}: nothing moved ({_why(exc)})") from None
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not src.is_dir() or (src / VOID_JSON).exists():
            raise VoidFailed(f"void {src}: nothing moved (voided meanwhile)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        for name, text in ((VOID_JSON, json.dumps(record, indent=1) + "\n"), (VOID_README, "\n".join(lines))):
            safeio.write_atomic(src / name, text)
            written.append(src / name)
        copied = _move(src, dest)
    except OSError as exc:
        for p in written:
            with contextlib.suppress(OSError):
                p.unlink()
        raise VoidFailed(f"void {src}: nothing moved ({_why(exc)})") from None
    finally:
        os.close(held)  # (the lock goes with it)
    if copied:
        try:
            shutil.rmtree(src)
        except OSError as exc:
            raise VoidFailed(
                f"void {src}: copied to {dest}, but the source could not be removed "
                f"({_why(exc)}): remove it by hand, or the attempt counts twice"
            ) from None
    if by is not None:
        _journal(plan, dest, by)
    return dest


#: harbor's failed command of an installed agent (``NonZeroAgentExitCodeError`` and its kin):
#: "Command failed (exit N): <command>" then the agent's own ``stdout:`` and ``stderr:``
_HARBOR_AGENT_OUTPUT = "\nstdout: "


def _harness_words(msg: str, tail: list[str]) -> str:
    """What the voiding rules may read of a failure: the exception message and the tail of
    exception.txt, without the agent's words in them (``rules``: a verdict must not be decided by
    words the agent could have printed). Those are what marathon's arms quote
    (``safetext.quote_agent``: a tool's output, the in-sandbox driver's error) and what harbor adds
    to an installed agent's failed command (its stdout and stderr, which carry every tool output of
    the session: a model that ran ``docker ps`` in its sandbox read "Cannot connect to the Docker
    daemon", and its failure was voided as an engine outage and rerun). exception.txt repeats such a
    message over many lines: then only the message's own first line is read."""
    if _HARBOR_AGENT_OUTPUT in msg:
        return safetext.without_agent_quotes(msg.split(_HARBOR_AGENT_OUTPUT, 1)[0])
    return safetext.without_agent_quotes(msg + "\n" + "\n".join(tail))


def _own_voided_root(out: Path, src: Path) -> None:
    """The voided root and its ``marathon-voided`` parent must be real dirs of this user's own that
    no one else may write (made so here when missing): beside a tree in a shared dir (``/tmp``),
    another user could make them first (or a symlink in their place), or plant a symlink in one
    that others may write, and receive every attempt voided there. Refused in one line, nothing
    moved."""
    root = voided_root(out)
    euid = os.geteuid()
    for d in (root.parent, root):
        try:
            os.mkdir(d, 0o755)  # (not group- or world-writable, whatever the umask)
        except FileExistsError:
            pass
        except OSError as exc:
            raise VoidFailed(f"void {src}: nothing moved ({d}: {_why(exc)})") from None
        try:
            st = os.lstat(d)
        except OSError as exc:
            raise VoidFailed(f"void {src}: nothing moved ({d}: {_why(exc)})") from None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != euid or st.st_mode & 0o022:
            raise VoidFailed(
                f"void {src}: nothing moved ({d} is not a dir of this user's own that only it may write: "
                "a symlink, another user's, or group- or world-writable; move it away)"
            )


def _why(exc: OSError) -> str:
    """An error in a few words: a copy's ``shutil.Error`` lists every file that failed (one line of
    hundreds of paths); its first, and how many."""
    errors = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(errors, list) and errors and isinstance(errors[0], tuple):
        more = f" and {len(errors) - 1} more" if len(errors) > 1 else ""
        return f"{errors[0][-1]}{more}"
    return exc.strerror or str(exc)


def _move(src: Path, dest: Path) -> bool:
    """Rename ``src`` to ``dest``; across filesystems copy it to a hidden name beside ``dest`` and
    rename that into place (a partial copy is removed, never left for the scan). True when copied:
    the caller removes the source."""
    try:
        os.rename(src, dest)
        return False
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    tmp = dest.with_name(f".{dest.name}.partial-{os.urandom(4).hex()}")
    try:
        # symlinks copied as links (an agent's link is never followed); a FIFO, socket or device
        # node an agent planted is made again, never opened (opening a FIFO would wait forever)
        shutil.copytree(src, tmp, symlinks=True, copy_function=_copy_entry)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def _copy_entry(src: str, dst: str) -> None:
    st = os.lstat(src)
    if stat.S_ISREG(st.st_mode):
        shutil.copy2(src, dst, follow_symlinks=False)
        return
    try:
        os.mknod(dst, st.st_mode, st.st_rdev)
    except PermissionError:
        # a device node (root in its container may make one) cannot be made again without root:
        # a placeholder file says so, rather than an attempt that can never be voided
        with open(dst, "x") as fh:
            fh.write(
                f"marathon void: {safeio.kind_name(st.st_mode)} was here; not copied across filesystems\n"
            )
