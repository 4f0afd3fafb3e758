"""The output tree's layout: where every file of a run lives, in one place.

    <out>/<task>/<arm>/<stamp>/<arm>/result.json        harbor job (jobs dir = <out>/<task>/<arm>/<stamp>,
    <out>/<task>/<arm>/<stamp>/<arm>/<trial>/...        job name = <arm>); trials below it
    <out>/<task>/<arm>/<stamp>@r<k>/<arm>/...           repeat k >= 2 of the pair (``marathon run --repeats``)
    <out>/.claims/<task>__<arm>.claim                   in-progress claim (repeat k >= 2: ``<task>__<arm>@r<k>.claim``)
    <out>/.driver_env                                   the runner's effective configuration
    <out>/.runner/                                      lock, PID registry, events.jsonl
    <out>/.runner/gateway/                              the model gateway: ledger.jsonl (one line per model
                                                        call), attempts/<id>.json, outages.jsonl, state.json
    <out>/.runner/images/<task>.json                    each task's image, built once (+ <task>-<id12>.tar
                                                        on a cluster: the image shipped to every host)
    <out>/.runner/tasks/<key>/<task>/                   the run-local copy of a task harbor runs: its
                                                        task.toml names that image (docker_image)
    <out>/<task>/<arm>/<stamp>/image.json               the task image an attempt was given
    <out>/.marathon/index.sqlite                        the scan index (a cache: runner.results.index)
    <out>/.marathon/view/jobs/<task>__<arm>__attempt-<n>/  harbor's viewer's jobs folder (runner.ops.viewjobs)
    <out>/.runner/tree_id                               the tree's own id, made at its first runner start
    <out>/../marathon-voided/<out-name>@<tree id>/...   voided trials, moved (never deleted), with README
                                                        (``<out-name>/`` for a tree older than its id)

Everything that names a path or derives a name from one is here, so that no reader scans the
wrong depth (the field's monitors did, and reported "OK" all night).
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

from modes import safeio
from modes.trial_files import SCORED_INPUTS

CLAIMS_DIR = ".claims"
DRIVER_ENV = ".driver_env"
RUNNER_DIR = ".runner"
#: what marathon leaves at a tree's root: a dir with one is an output tree, whatever else it holds
MARKERS = (RUNNER_DIR, CLAIMS_DIR, DRIVER_ENV)
EVENTS_FILE = "events.jsonl"
INDEX_DIR = ".marathon"
INDEX_FILE = "index.sqlite"
GATEWAY_DIR = "gateway"  # under RUNNER_DIR: the model gateway's ledger, attempts, outages, state
LEDGER_FILE = "ledger.jsonl"
OUTAGES_FILE = "outages.jsonl"  # under GATEWAY_DIR: each dead gateway found and replaced
VIEW_DIR = "view"  # under INDEX_DIR: the web viewer's jobs folder, lock and access file
IMAGES_DIR = "images"  # under RUNNER_DIR: runner.schedule.task_images
TASK_COPIES_DIR = "tasks"  # under RUNNER_DIR: the run-local task copies harbor runs
ATTEMPT_IMAGE = "image.json"  # in an attempt's stamp dir
VOIDED_DIR = "marathon-voided"
VOID_README = "README.md"
#: The output tree when none is given (the same as `marathon run`).
DEFAULT_OUT = "marathon-out"
#: Files harbor writes at the job level (everything else in a job dir is a trial dir).
JOB_FILES = frozenset({"result.json", "config.json", "lock.json", "job.log"})
#: Files inside a trial dir that the results model reads (relative parts; modes.trial_files names them).
TRIAL_FILES = frozenset(tuple(rel.split("/")) for rel in SCORED_INPUTS)

# An "<arm>-<pid>" dir: the field's driver made one when "<arm>" was not writable.
_ARM_PID = re.compile(r"^(?P<arm>.+)-(?P<pid>\d+)$")

#: how a repeat is named: the stamp dir and the claim of repeat k >= 2 end in ``@r<k>``; repeat 1 has
#: no mark, so every tree of one attempt per pair (every tree before repeats) is repeat 1 throughout.
#: ``@`` never occurs in an arm name (``runner.schedule.config.parse_arm``) nor in the runner's stamps.
REPEAT_MARK = "@r"
#: the most repeats a run may plan (``marathon run --repeats``)
MAX_REPEATS = 100
_REPEAT = re.compile(r"^(?P<base>.+)@r(?P<k>[1-9][0-9]{0,2})$")


def repeat_of(name: str) -> int:
    """The repeat a stamp (or a claim's ``<task>__<arm>@r<k>``) belongs to: ``k`` of an ``@r<k>`` end
    with 2 <= k <= ``MAX_REPEATS``, else 1."""
    m = _REPEAT.match(name)
    if m is None:
        return 1
    k = int(m.group("k"))
    return k if 2 <= k <= MAX_REPEATS else 1


def with_repeat(name: str, repeat: int) -> str:
    """``name`` marked as repeat ``repeat``: unchanged for repeat 1, ``<name>@r<k>`` otherwise."""
    return name if repeat == 1 else f"{name}{REPEAT_MARK}{repeat}"


def unit_label(task: str, arm: str | None = None, repeat: int = 1) -> str:
    """How one repeat of a pair is named in events, claims and messages: ``task`` / ``task@r2``
    (with ``arm``: ``task__arm`` / ``task__arm@r2``)."""
    return with_repeat(task if arm is None else f"{task}__{arm}", repeat)


def job_dir(out: Path, task: str, arm: str, stamp: str) -> Path:
    """The harbor job dir of one attempt: jobs dir ``<out>/<task>/<arm>/<stamp>``, job name ``<arm>``."""
    return out / task / arm / stamp / arm


def jobs_dir(out: Path, task: str, arm: str, stamp: str) -> Path:
    return out / task / arm / stamp


def claim_path(out: Path, task: str, arm: str, repeat: int = 1) -> Path:
    """``<out>/.claims/<task>__<arm>.claim`` (repeat k >= 2: ``<task>__<arm>@r<k>.claim``)."""
    return out / CLAIMS_DIR / f"{unit_label(task, arm, repeat)}.claim"


def runner_dir(out: Path) -> Path:
    return out / RUNNER_DIR


def images_dir(out: Path) -> Path:
    """``<out>/.runner/images``: the record of each task's image (and its shipped archive)."""
    return out / RUNNER_DIR / IMAGES_DIR


def task_copies_dir(out: Path) -> Path:
    """``<out>/.runner/tasks``: the run-local task copies whose task.toml names the image built once."""
    return out / RUNNER_DIR / TASK_COPIES_DIR


def events_path(out: Path) -> Path:
    return out / RUNNER_DIR / EVENTS_FILE


def gateway_dir(out: Path) -> Path:
    """``<out>/.runner/gateway``: what the model gateway and the runner's side of it keep (no agent
    mount reaches ``.runner``)."""
    return out / RUNNER_DIR / GATEWAY_DIR


def ledger_path(out: Path, host: str | None = None) -> Path:
    """The ledger of one host's gateway: ``ledger.jsonl`` (this host), ``ledger.<host>.jsonl`` (a
    cluster host's: one writer per file)."""
    return gateway_dir(out) / (LEDGER_FILE if not host else f"ledger.{host}.jsonl")


def outages_path(out: Path) -> Path:
    return gateway_dir(out) / OUTAGES_FILE


def ledger_paths(out: Path) -> list[Path]:
    """Every host's ledger of the tree, sorted by name."""
    try:
        names = sorted(
            n for n in os.listdir(gateway_dir(out)) if n.startswith("ledger") and n.endswith(".jsonl")
        )
    except OSError:
        return []
    return [gateway_dir(out) / n for n in names]


def driver_env_path(out: Path) -> Path:
    return out / DRIVER_ENV


def view_dir(out: Path) -> Path:
    """``<out>/.marathon/view``: what ``marathon view`` keeps (no agent mounts reach ``.marathon``)."""
    return out / INDEX_DIR / VIEW_DIR


#: under RUNNER_DIR: the tree's id (``tree_id``)
TREE_ID_FILE = "tree_id"
_TREE_ID = re.compile(r"[0-9a-f]{16}")


def tree_id(out: Path) -> str | None:
    """The tree's own id (``<out>/.runner/tree_id``, 16 hex digits), None for a tree made before
    trees had one (or whose file is not one: a symlink, another owner's, garbage)."""
    raw = safeio.read_own(out / RUNNER_DIR / TREE_ID_FILE, 64)
    if isinstance(raw, safeio.Refused):
        return None
    text = raw.decode("ascii", "replace").strip()
    return text if _TREE_ID.fullmatch(text) else None


def make_tree_id(out: Path) -> str | None:
    """Give a fresh tree (no runner has started on it: no events.jsonl) its id; an older tree keeps
    none, so its voided trials stay where they are. Returns the tree's id either way."""
    have = tree_id(out)
    if have is not None or events_path(out).exists():
        return have
    tid = os.urandom(8).hex()
    (out / RUNNER_DIR).mkdir(parents=True, exist_ok=True)
    safeio.write_atomic(out / RUNNER_DIR / TREE_ID_FILE, tid + "\n")
    return tid


def voided_root(out: Path) -> Path:
    """Where voided trials of ``out`` go: a sibling ``marathon-voided/<out name>@<tree id>/``
    (``<out name>/`` for a tree without an id). By name alone, a new tree made where an old one
    was removed (`rm -rf marathon-out` and a new run) took the old tree's voided attempts for its
    own: arms it never ran showed a void rate of 1.0 (found by a probe)."""
    out = out.resolve()
    tid = tree_id(out)
    return out.parent / VOIDED_DIR / (f"{out.name}@{tid}" if tid else out.name)


def arm_of_dir(dirname: str) -> str:
    """The arm an arm-level dir holds results for: ``<arm>`` or the field's ``<arm>-<pid>``."""
    m = _ARM_PID.match(dirname)
    return m.group("arm") if m else dirname


def default_out() -> Path:
    """``$MARATHON_OUT`` or ``./marathon-out`` (as `marathon run`)."""
    return Path(os.environ.get("MARATHON_OUT") or DEFAULT_OUT)


def list_dirs(path: str | os.PathLike, links: list[str] | None = None) -> list[str]:
    """Names of the non-hidden subdirs of ``path``, sorted; [] when it cannot be listed.

    ``os.scandir`` answers "is a dir" from the directory entry itself (no stat per entry), which is
    what lets the model cold-load 10,000 trials in well under a second. A symlink is never a dir
    here (it is not followed); ``links``, when given, receives the names of the non-hidden symlinks.
    """
    try:
        with os.scandir(path) as it:
            if links is None:
                names = [e.name for e in it if e.name[0] != "." and _entry_is_dir(e)]
            else:
                names = []
                for e in it:
                    if e.name[0] == ".":
                        continue
                    if _entry_is_dir(e):
                        names.append(e.name)
                    elif e.is_symlink():
                        links.append(e.name)
    except OSError:
        return []
    names.sort()
    return names


def _entry_is_dir(e: os.DirEntry) -> bool:
    try:
        return e.is_dir(follow_symlinks=False)
    except OSError:
        return False


#: what ``excluded_owner`` returns for an arm dir that cannot be looked at (gone, no permission)
UNREADABLE_DIR = -1


def excluded_owner(
    arm_path: str | os.PathLike, owner: int | None, st: os.stat_result | None = None
) -> int | None:
    """The one rule for which arm dirs belong to a tree: an arm dir owned by another uid than the
    tree's owner is a leftover of an earlier round (another user's run in a reused path) and is left
    out everywhere. Returns that uid, ``UNREADABLE_DIR`` when the dir cannot be stat'ed, or None when
    the dir counts. ``owner``: the tree's owner uid (None: not known, every readable dir counts);
    ``st``: the dir's stat when the caller has it."""
    try:
        uid = (st or os.stat(arm_path)).st_uid
    except OSError:
        return UNREADABLE_DIR
    return uid if owner is not None and uid != owner else None


def job_name_in(stamp_dir: str | os.PathLike, arm_dir_name: str) -> str | None:
    """The job dir name under a stamp dir: ``<arm dir>`` or (for ``<arm>-<pid>`` dirs) ``<arm>``."""
    arm = arm_of_dir(arm_dir_name)
    for name in (arm_dir_name,) if arm == arm_dir_name else (arm_dir_name, arm):
        if os.path.isdir(f"{os.fspath(stamp_dir)}/{name}"):
            return name
    return None


def claim_key(filename: str) -> tuple[str, str] | None:
    """``<task>__<arm>.claim`` (or ``...@r<k>.claim``) -> (task, arm); None for anything else."""
    unit = claim_unit(filename)
    return unit[:2] if unit is not None else None


def claim_unit(filename: str) -> tuple[str, str, int] | None:
    """``<task>__<arm>.claim`` -> (task, arm, 1), ``<task>__<arm>@r<k>.claim`` -> (task, arm, k);
    None for anything else."""
    if not filename.endswith(".claim"):
        return None
    stem = filename[: -len(".claim")]
    repeat = repeat_of(stem)
    if repeat != 1:
        stem = stem[: stem.rindex(REPEAT_MARK)]
    task, sep, arm = stem.rpartition("__")
    return (task, arm, repeat) if sep and task and arm else None


#: the runner's stamps (``runner.schedule.attempt.new_stamp``): sorted as text, they sort in time
STAMP_FORMAT = "%Y-%m-%d__%H-%M-%S"
_STAMP_FORMATS = (
    "%Y%m%dT%H%M%SZ",
    "%Y%m%dT%H%M%S%fZ",
    "%Y%m%d-%H%M%S",
    "%Y%m%d_%H%M%S",
    STAMP_FORMAT,
)


def stamp_time(stamp: str) -> datetime | None:
    """The UTC time a stamp names (written by the runner's clock), or None.

    Used for run scoping together with the runner's own ``runner_start`` stamps: both come from the
    runner, never from file mtimes (NFS mtimes lag the host by minutes). A repeat's mark
    (``@r<k>``) is not part of the time.
    """
    if repeat_of(stamp) != 1:
        stamp = stamp[: stamp.rindex(REPEAT_MARK)]
    for fmt in _STAMP_FORMATS:
        try:
            return datetime.strptime(stamp, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    try:
        t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def voided_trial_dir(out: Path, task: str, arm_dir: str, stamp: str, job_name: str, trial: str) -> Path:
    """Where a voided trial goes: ``voided_root(out)/<task>/<arm dir>/<stamp>/<job>/<trial>``.

    Its ``README.md`` (``VOID_README``) inside the moved trial dir says why it was voided.
    """
    return voided_root(out) / task / arm_dir / stamp / job_name / trial


def iter_job_dirs(out: Path):
    """Yield ``(task, arm, arm_dir_name, stamp, job_dir)`` for every job dir of an output tree.

    Exactly depth 4: ``<out>/<task>/<arm dir>/<stamp>/<job name>``. The job name is the arm dir's
    arm (``<arm>`` or, for the field's ``<arm>-<pid>`` dirs, ``<arm>``). Hidden dirs are skipped.
    """
    out = Path(out)
    for task in list_dirs(out):
        tdir = out / task
        for arm_dir in list_dirs(tdir):
            adir = tdir / arm_dir
            for stamp in list_dirs(adir):
                name = job_name_in(adir / stamp, arm_dir)
                if name is not None:
                    yield task, arm_of_dir(arm_dir), arm_dir, stamp, adir / stamp / name


def iter_trial_dirs(job: Path):
    """Yield the trial dirs of one job dir (every subdir that is not hidden)."""
    for name in list_dirs(job):
        yield Path(job) / name
