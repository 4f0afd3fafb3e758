"""Scanning the output tree into attempts, in full (``scan_all``) or by changed path (``update_main``).

Why a module of its own: the tree is hostile input (agents write into their trial dirs), so how its
dirs and files are read is one job with its own rules, kept apart from what the attempts then
score (``runner.results.cells``) and which run they belong to (``runner.results.runs``):
- arm dirs owned by another uid than the tree's owner are excluded (``excluded``); ``<arm>-<pid>``
  dirs count as ``<arm>``; a symlinked job or trial dir is never followed;
- a half-written file never raises and never erases a value: the record keeps its last good value
  and is marked ``stale`` (``_merge_trial``, ``_set_job``);
- an attempt belongs to the repeat its stamp names (``<stamp>@r<k>``, ``tree.repeat_of``);
- finished attempts go through the scan index (``runner.results.index``), a cache that never
  changes a figure.
An attempt the scanner changes is replaced by a copy (``_get_attempt``: cells already handed out
keep their own) and its key is put in ``dirty`` for the matrix (``runner.results.matrix``).
"""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from modes import safeio
from modes.trial_files import TrialFiles
from runner.procid import record_live
from runner.results import records as results
from runner.results import tree
from runner.results.attempts import NO_FIGURES, Attempt, AttemptKey, Key, VoidedTrial
from runner.results.hosts import read_host
from runner.results.records import JobRecord, TrialRecord


@dataclass(frozen=True, slots=True)
class Excluded:
    """A dir the scan leaves out (a leftover arm dir of another owner), shown so that none goes unseen."""

    path: str
    reason: str
    task: str | None = None
    arm: str | None = None


class TreeScan:
    """The attempts of one output tree as its files say, with the dirs, claims and markers around them."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._out_s = str(out)
        self._voided_s = str(tree.voided_root(out))
        self.attempts: dict[AttemptKey, Attempt] = {}
        self.by_pair: dict[Key, set[AttemptKey]] = {}
        self.excluded: dict[str, Excluded] = {}  # by the arm dir's absolute path
        self.owner: int | None = None
        self.task_dirs: set[str] = set()
        self.claims: set[Key] = set()
        #: per pair, the repeats with a claim file (``tree.claim_unit``)
        self.claimed: dict[Key, frozenset[int]] = {}
        self.repeat_n: dict[int, int] = {}  # attempts per repeat number (for the matrix's ``repeats``)
        self.arms_seen: set[str] = set()  # every arm with an attempt (for the matrix's ``task_measures``)
        self.markers: set[str] = set()
        self.dirty: set[AttemptKey] = set()  # attempts (re)read since the matrix's last rebuild
        self.prev: TreeScan | None = None  # during a refresh: the scan whose last good values to keep
        #: (attempts taken from the scan index, attempts read) of the last scan; None without one
        self.index_hits: tuple[int, int] | None = None
        #: every record was read or taken from an index entry whose files ``lstat`` the same (False:
        #: some were taken unchecked, ``scan_all``'s ``trust_index``)
        self.checked = True

    def scan_all(self, use_index: bool, trust_index: bool = False) -> None:
        """Scan the whole tree (and its voided trials); ``use_index``: through the scan index;
        ``trust_index``: take its entries without checking their files (``checked`` says so)."""
        self.markers = {n for n in tree.MARKERS if os.path.exists(self.out / n)}
        try:
            self.owner = os.stat(self._out_s).st_uid
        except OSError:
            self.owner = None
        self._read_claims()
        index = None
        if use_index and self.owner is not None:
            from runner.results.index import ScanIndex

            index = ScanIndex.open(self._out_s)
            if index is not None:
                index.trusting = trust_index
        todo: list[tuple[str, str, str]] = []
        out, owner, lstat, isdir = self._out_s, self.owner, os.lstat, stat.S_ISDIR
        for task in tree.list_dirs(out):
            self.task_dirs.add(task)
            for arm_dir in self._subdirs(index, task):
                adir = f"{out}/{task}/{arm_dir}"
                try:
                    st = lstat(adir)
                except OSError:
                    continue
                if not isdir(st.st_mode):
                    continue
                if owner is not None and st.st_uid == owner:  # the usual arm dir (``_arm_excluded``'s rule)
                    if self.excluded:
                        self.excluded.pop(adir, None)
                elif self._arm_excluded(task, arm_dir, adir, st):
                    continue
                todo += [(task, arm_dir, stamp) for stamp in self._subdirs(index, f"{task}/{arm_dir}", st)]
        for key, got in zip(todo, _read_stamps(self._out_s, todo, index), strict=True):
            self._scan_stamp(*key, pre=got)
        self.index_hits = (index.hits, index.misses) if index is not None else None
        self.checked = not (index is not None and index.unchecked)
        self._scan_voided()

    def _scan_task(self, task: str) -> None:
        self.task_dirs.add(task)
        tdir = os.path.join(self._out_s, task)
        for arm_dir in tree.list_dirs(tdir):
            self._scan_arm(task, arm_dir)

    def _subdirs(self, index: Any, rel: str, st: os.stat_result | None = None) -> list[str]:
        """``tree.list_dirs`` of ``<out>/<rel>``, from the scan index while the dir ``lstat``s the
        same (``runner.results.index.ScanIndex.listing``)."""
        if index is None:
            return tree.list_dirs(f"{self._out_s}/{rel}")
        if st is None:
            try:
                st = os.lstat(f"{self._out_s}/{rel}")
            except OSError:
                return []
        got = index.listing(rel, st)
        if got is None:
            got = tree.list_dirs(f"{self._out_s}/{rel}")
            index.put_listing(rel, st, got)
        return got

    def _arm_excluded(self, task: str, arm_dir: str, adir: str, st: os.stat_result | None = None) -> bool:
        uid = tree.excluded_owner(adir, self.owner, st)
        if uid == tree.UNREADABLE_DIR:
            return True
        if uid is not None:
            where = os.path.relpath(adir, self._out_s)
            self._exclude_foreign(adir, where, "", uid, task, arm_dir, " (leftover of an earlier round)")
            return True
        self.excluded.pop(adir, None)
        return False

    def _exclude_foreign(
        self, key: str, where: str, what: str, uid: int, task: str, arm_dir: str, why: str = ""
    ) -> None:
        """List a dir another user owns as excluded: one rule for arm dirs and voided attempts."""
        self.excluded[key] = Excluded(
            path=where,
            reason=f"{what}owned by uid {uid}, not the tree's owner uid {self.owner}{why}",
            task=task,
            arm=tree.arm_of_dir(arm_dir),
        )

    def _scan_arm(self, task: str, arm_dir: str) -> None:
        adir = os.path.join(self._out_s, task, arm_dir)
        if self._arm_excluded(task, arm_dir, adir):
            for k in [k for k in self.attempts if k[0] == task and k[1] == arm_dir]:
                self._drop_attempt(k)
            return
        stamps = tree.list_dirs(adir)
        for k in [k for k in self.attempts if k[0] == task and k[1] == arm_dir and k[2] not in stamps]:
            if not self.attempts[k].voided_trials:
                self._drop_attempt(k)
        for stamp in stamps:
            self._scan_stamp(task, arm_dir, stamp)

    def _get_attempt(self, task: str, arm_dir: str, stamp: str) -> Attempt:
        """The attempt to modify: a copy, so cells already handed out keep their own (copy on write)."""
        key = (task, arm_dir, stamp)
        a = self.attempts.get(key)
        if a is None:
            arm = _arm_of_dir(arm_dir)
            rep = _repeat_of(stamp)
            # (the figures ``refresh_attempt`` sets: none until then, without a new empty ``Figures`` each)
            a = self.attempts[key] = Attempt(
                task=task, arm=arm, arm_dir=arm_dir, stamp=stamp, repeat=rep, figures=NO_FIGURES
            )
            self.by_pair.setdefault((task, arm), set()).add(key)
            self.repeat_n[rep] = self.repeat_n.get(rep, 0) + 1
            self.arms_seen.add(arm)
            self.dirty.add(key)
            return a
        a = self.attempts[key] = replace(a, trials=dict(a.trials), voided_trials=dict(a.voided_trials))
        self.dirty.add(key)
        return a

    def _drop_attempt(self, key: AttemptKey) -> None:
        a = self.attempts.pop(key, None)
        if a is not None:
            self.by_pair.get((a.task, a.arm), set()).discard(key)
            n = self.repeat_n.get(a.repeat, 0) - 1
            if n > 0:
                self.repeat_n[a.repeat] = n
            else:
                self.repeat_n.pop(a.repeat, None)

    def _scan_stamp(self, task: str, arm_dir: str, stamp: str, pre: _Stamp | None | bool = False) -> None:
        sdir = f"{self._out_s}/{task}/{arm_dir}/{stamp}"
        got = _read_stamp(sdir, arm_dir) if pre is False else pre
        if got is None:
            key = (task, arm_dir, stamp)
            a = self.attempts.get(key)
            if a is not None and not a.voided_trials:
                self._drop_attempt(key)
            elif a is not None:
                a = self._get_attempt(task, arm_dir, stamp)
                a.job_dir, a.job, a.trials = None, None, {}
            return
        name, job, trials = got
        a = self._get_attempt(task, arm_dir, stamp)
        a.job_dir = f"{sdir}/{name}"
        a.host = read_host(sdir) or a.host
        self._set_job(a, job)
        old = a.trials
        if not old and self.prev is None:  # a new attempt: no last good value to keep (``_merge_trial``)
            a.trials = dict(trials)
        else:
            a.trials = {n: _merge_trial(t, old.get(n) or self._prev_trial(a, n)) for n, t in trials.items()}

    def _prev_trial(self, a: Attempt, name: str) -> TrialRecord | None:
        if self.prev is None:
            return None
        pa = self.prev.attempts.get(a.key)
        return pa.trials.get(name) if pa else None

    def _read_job(self, a: Attempt) -> None:
        assert a.job_dir is not None
        self._set_job(a, results.read_job(a.job_dir))

    def _set_job(self, a: Attempt, rec: JobRecord) -> None:
        """Set the job record; one unreadable now keeps the last good one (marked stale)."""
        old = a.job
        if old is None:
            pa = self.prev.attempts.get(a.key) if self.prev is not None else None
            old = pa.job if pa else None
        if rec.state in (results.UNREADABLE, results.EMPTY) and old is not None and old.state == results.OK:
            rec = replace(old, stale=True, error=rec.error)
        a.job = rec

    @staticmethod
    def _read_trial(tdir: str, old: TrialRecord | None) -> TrialRecord:
        return _merge_trial(results.read_trial(tdir), old)

    # ---------------------------------------------------------------- voided

    def _scan_voided(self) -> None:
        root = self._voided_s
        for task in tree.list_dirs(root):
            for arm_dir in tree.list_dirs(os.path.join(root, task)):
                for stamp in tree.list_dirs(os.path.join(root, task, arm_dir)):
                    self._scan_voided_stamp(task, arm_dir, stamp)

    def _voided_excluded(self, task: str, arm_dir: str, sdir: str) -> bool:
        """The owner rule of the tree's arm dirs, for its voided root and each voided stamp dir: the
        root sits beside the tree, where another user may write (a probe planted 18 "voided
        attempts" owned by nobody there, and the bias alarm rang against one arm)."""
        for d in (self._voided_s, sdir):
            uid = tree.excluded_owner(d, self.owner)
            if uid is None:
                continue
            if uid == tree.UNREADABLE_DIR:  # gone (or unreadable): nothing of it to list any more
                self.excluded.pop(sdir, None)
            else:
                self._exclude_foreign(sdir, sdir, "a voided attempt ", uid, task, arm_dir)
            return True
        self.excluded.pop(sdir, None)
        return False

    def _scan_voided_stamp(self, task: str, arm_dir: str, stamp: str) -> None:
        sdir = os.path.join(self._voided_s, task, arm_dir, stamp)
        found: dict[str, VoidedTrial] = {}
        for job in () if self._voided_excluded(task, arm_dir, sdir) else tree.list_dirs(sdir):
            jdir = os.path.join(sdir, job)
            for trial in tree.list_dirs(jdir):
                tdir = os.path.join(jdir, trial)
                reason = _void_reason(tdir, jdir, sdir)
                found[trial] = VoidedTrial(trial, tdir, reason, results.read_trial(tdir))
        key = (task, arm_dir, stamp)
        if found:
            a = self._get_attempt(task, arm_dir, stamp)
            a.voided_trials = found
            a.host = read_host(sdir) or a.host
        elif key in self.attempts:
            a = self._get_attempt(task, arm_dir, stamp)
            a.voided_trials = {}
            if a.job_dir is None:
                self._drop_attempt(key)

    def retarget_voided(self, root: str, pairs: set[Key]) -> None:
        """The voided root moved (a fresh tree got its id: ``tree.voided_root``): read it anew."""
        if root == self._voided_s:
            return
        self._voided_s = root
        self.update_voided((), pairs)

    def update_voided(self, parts: tuple[str, ...], pairs: set[Key]) -> None:
        if len(parts) < 3:
            # The voided root or a task/arm dir of it appeared or went: re-scan the voided side (the
            # attempts that had voided trials looked at again: gone ones are no longer shown)
            for k in [k for k, a in self.attempts.items() if a.voided_trials]:
                pairs.add((k[0], tree.arm_of_dir(k[1])))
                self._scan_voided_stamp(*k)
            self._scan_voided()
            return
        task, arm_dir, stamp = parts[:3]
        self._scan_voided_stamp(task, arm_dir, stamp)
        pairs.add((task, tree.arm_of_dir(arm_dir)))

    # ---------------------------------------------------------- incremental

    def update_main(self, parts: tuple[str, ...], pairs: set[Key]) -> bool:
        """Apply one changed path under ``out``; True when run scoping must be recomputed."""
        if not parts:
            self.markers = {n for n in tree.MARKERS if os.path.exists(self.out / n)}
            present = set(tree.list_dirs(self._out_s))
            for task in present - self.task_dirs:
                self._scan_task(task)
                pairs.update(k for k in self.by_pair if k[0] == task)
            for task in self.task_dirs - present:
                self._drop_task(task, pairs)
            return True
        head = parts[0]
        if head == tree.CLAIMS_DIR:
            self.markers.add(head)
            before = self.claimed
            self._read_claims()
            pairs.update(k for k in set(before) | set(self.claimed) if before.get(k) != self.claimed.get(k))
            return False
        if head.startswith("."):
            if head == tree.DRIVER_ENV:
                self.markers.add(head)
            return False
        if len(parts) == 1:
            if os.path.isdir(os.path.join(self._out_s, head)):
                before = {k for k in self.by_pair if k[0] == head}
                self._scan_task(head)
                pairs.update(before | {k for k in self.by_pair if k[0] == head})
            else:
                self._drop_task(head, pairs)
            return True
        task, arm_dir = parts[0], parts[1]
        if arm_dir.startswith("."):
            return False
        if not os.path.isdir(os.path.join(self._out_s, task)):
            # a change below a task dir that is gone: ``rm -r`` reports its children's deletions in
            # the same batch, in any order, and one read after the task's own put it back as pending
            self._drop_task(task, pairs)
            return True
        arm = tree.arm_of_dir(arm_dir)
        pairs.add((task, arm))
        self.task_dirs.add(task)
        if len(parts) == 2:
            self._scan_arm(task, arm_dir)
            return True
        adir = os.path.join(self._out_s, task, arm_dir)
        if adir in self.excluded:
            return False
        stamp = parts[2]
        if stamp.startswith("."):
            return False
        if len(parts) <= 4:
            self._scan_stamp(task, arm_dir, stamp)
            return True
        key = (task, arm_dir, stamp)
        a = self.attempts.get(key)
        job = parts[3]
        if a is None or a.job_dir is None or os.path.basename(a.job_dir) != job:
            self._scan_stamp(task, arm_dir, stamp)
            return True
        name = parts[4]
        if len(parts) == 5 and name in tree.JOB_FILES:
            if name == results.RESULT_JSON:
                self._read_job(self._get_attempt(task, arm_dir, stamp))
            return False
        if name.startswith("."):
            return False
        tdir = f"{a.job_dir}/{name}"
        rest = parts[5:]
        if len(parts) == 5 or name not in a.trials:
            a = self._get_attempt(task, arm_dir, stamp)
            if os.path.isdir(tdir):
                a.trials[name] = self._read_trial(tdir, a.trials.get(name))
            else:
                a.trials.pop(name, None)
        elif (
            rest in tree.TRIAL_FILES
            or len(rest) == 1
            and rest[0] in (TrialFiles.VERIFIER_DIR, TrialFiles.AGENT_DIR)
        ):
            a = self._get_attempt(task, arm_dir, stamp)
            a.trials[name] = self._read_trial(tdir, a.trials.get(name))
        # else: trial.log, sessions, test output: nothing the model shows
        return False

    def _drop_task(self, task: str, pairs: set[Key]) -> None:
        self.task_dirs.discard(task)
        for k in [k for k in self.attempts if k[0] == task]:
            if not self.attempts[k].voided_trials:
                self._drop_attempt(k)
            else:
                a = self._get_attempt(*k)
                a.job_dir, a.job, a.trials = None, None, {}
        for p in [p for p in self.excluded.values() if p.task == task]:
            self.excluded.pop(os.path.join(self._out_s, p.path), None)
        pairs.update(k for k in self.by_pair if k[0] == task)

    # ---------------------------------------------------------------- claims

    def _read_claims(self) -> None:
        claimed: dict[Key, set[int]] = {}
        try:
            with os.scandir(self.out / tree.CLAIMS_DIR) as it:
                for e in it:
                    u = tree.claim_unit(e.name)
                    if u and _claim_runs(e.path):
                        claimed.setdefault(u[:2], set()).add(u[2])
        except OSError:
            pass
        self.claimed = {k: frozenset(v) for k, v in claimed.items()}
        self.claims = set(claimed)


#: a claim file is a few hundred bytes (``runner.schedule.lock.RECORD_CAP``)
_CLAIM_CAP = 64 << 10


def _claim_runs(path: str) -> bool:
    """Whether a claim's pair runs: its holder (the runner) or its harbor job lives (the claim's own
    state, ``runner.schedule.claims.Claim.state``: live or orphan). A stale claim (a runner killed
    hard, nothing running) read as running in ``status`` and the console while ``health`` said
    stale (found by a probe). A claim that does not read is counted as running: never fewer."""
    d = safeio.load_own_json(path, _CLAIM_CAP)
    if isinstance(d, safeio.Refused) and d.missing:
        return False  # released meanwhile
    host = d.get("host") if isinstance(d, dict) else None
    if not isinstance(host, str):
        return True
    job = d.get("job")
    return record_live(d, host) or (isinstance(job, dict) and record_live(job, host))


def _void_reason(*dirs: str) -> str:
    """The first meaningful line of the README next to a voided trial (trial, job or stamp dir)."""
    for d in dirs:
        raw = safeio.read_own(os.path.join(d, tree.VOID_README), 4096 * 16)  # a FIFO there never blocks
        if isinstance(raw, safeio.Refused):
            if raw.missing:
                continue
            return f"voided (README {raw.reason})"
        text = raw[:4096].decode("utf-8", "replace")
        for line in text.splitlines():
            line = line.strip().lstrip("#").strip()
            if line.lower().startswith("voided:"):  # runner.ops.void writes "# Voided: <reason>"
                line = line[len("voided:") :].strip()
            if line and line.lower() not in ("voided", "voided trial"):
                return line[:200]
        return "voided (README empty)"
    return "voided (no README)"


_Stamp = tuple[str, JobRecord, dict[str, TrialRecord]]

# ``tree.arm_of_dir`` and ``tree.repeat_of`` remembered by name: a tree has a few arm dir names,
# and a run's attempts often share their stamp (two regex matches per attempt otherwise)
_arm_of_dir = functools.lru_cache(maxsize=4096)(tree.arm_of_dir)
_repeat_of = functools.lru_cache(maxsize=4096)(tree.repeat_of)


def _merge_trial(rec: TrialRecord, old: TrialRecord | None) -> TrialRecord:
    """The fresh record, except that a file unreadable now keeps its last good value (marked stale)."""
    if old is None:
        return rec
    stale = False
    # harbor writes result.json last: once it reads clean, the verifier's files are final, and one
    # unreadable now is a hole (the hole rule), not a half-written file to wait for
    settled = rec.state == results.OK
    if rec.state in (results.UNREADABLE, results.EMPTY) and old.state == results.OK:
        rec = replace(old, metrics=rec.metrics, receipt=rec.receipt, error=rec.error)
        stale = True
    m_old, m_new = old.metrics, rec.metrics
    if m_old.is_score and m_new.state in (results.UNREADABLE, results.EMPTY) and not settled:
        rec = replace(rec, metrics=replace(m_old, error=m_new.error))
        stale = True
    elif m_old.is_score and m_new.state == results.IN_PROGRESS:
        rec = replace(rec, metrics=m_old)  # a verifier rerun started: not a score, keep the last one
    if stale:
        rec = replace(rec, stale=True)
    return rec


def _read_stamp(sdir: str, arm_dir: str) -> _Stamp | None:
    """Read one attempt's job dir (job record and trials) without touching the model; None if no job dir."""
    arm = tree.arm_of_dir(arm_dir)
    for name in (arm_dir,) if arm == arm_dir else (arm_dir, arm):
        jdir = f"{sdir}/{name}"
        if os.path.islink(jdir):  # never followed: it would bring in results from anywhere
            return name, results.JobRecord(state=results.REFUSED, error=f"job dir: {results.LINKED_DIR}"), {}
        loaded = results.load_json(f"{jdir}/{results.RESULT_JSON}")
        if loaded.state == results.MISSING and not os.path.isdir(jdir):
            continue  # (a stat only when the job result is missing)
        job = results.job_from_loaded(loaded)
        # A finished one-trial job summarises its trial (harbor's own stats): skip listing the job
        # dir and parsing the trial's result.json. Incremental updates read the trial in full.
        summary = results.trial_from_job_summary(loaded.data, jdir) if loaded.data is not None else None
        if summary is not None:
            return name, job, {summary.name: summary}
        links: list[str] = []  # trial dirs that are symlinks: listed as refused, never read
        trials = {n: results.read_trial(f"{jdir}/{n}") for n in tree.list_dirs(jdir, links)}
        for n in links:
            if n not in tree.JOB_FILES:
                trials[n] = results.read_trial(f"{jdir}/{n}")
        return name, job, trials
    return None


def _read_stamps(out: str, todo: list[tuple[str, str, str]], index: Any = None) -> list[_Stamp | None]:
    """``_read_stamp`` for many attempts, through the scan index (``runner.results.index``) when given.

    One thread: reader threads were measured slower (GIL).
    """
    if index is None:
        return [_read_stamp(f"{out}/{t}/{a}/{s}", a) for t, a, s in todo]
    got: list[_Stamp | None] = []
    for key in todo:
        sdir = f"{out}/{key[0]}/{key[1]}/{key[2]}"
        hit = index.get(key, sdir)
        if hit is None:
            hit = _read_stamp(sdir, key[1])
            if hit is not None:
                index.put(key, sdir, hit)
        got.append(hit)
    index.save(scanned_all=True, create=any(g is not None and g[1].state == results.OK for g in got))
    return got


def pair_done(out: Path | str, task: str, arm: str, repeat: int = 1) -> bool:
    """True when some attempt of (task, arm) -- of its repeat ``repeat`` -- is done, read the way
    the model reads it.

    For the runner's skip decision without loading the whole tree: the same dirs count (``<arm>``
    and ``<arm>-<pid>``), leftover arm dirs owned by another uid than the tree's owner do not, an
    attempt is of the repeat its stamp names (``tree.repeat_of``), and done is
    ``runner.results.rules.is_done`` of the job's stats (via ``results.read_job``).
    """
    base = os.path.abspath(out)
    try:
        owner = os.stat(base).st_uid
    except OSError:
        return False
    for arm_dir in tree.list_dirs(f"{base}/{task}"):
        if tree.arm_of_dir(arm_dir) != arm:
            continue
        adir = f"{base}/{task}/{arm_dir}"
        if tree.excluded_owner(adir, owner) is not None:
            continue
        for stamp in tree.list_dirs(adir):
            if tree.repeat_of(stamp) != repeat:
                continue
            name = tree.job_name_in(f"{adir}/{stamp}", arm_dir)
            if name is not None and results.read_job(f"{adir}/{stamp}/{name}").done:
                return True
    return False
