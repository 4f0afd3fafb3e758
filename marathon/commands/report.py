"""``marathon report``: the task x arm matrix, per-arm summary, paired comparisons, bias alarm."""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from pathlib import Path

from marathon.options import add_out, tree_out
from modes import safeio, safetext

HELP = "the comparison report: matrix, per-arm summary, paired comparisons, bias alarm (md/json/csv/html)"
DESCRIPTION = (
    "Read an output tree (never changes its results; keeps a cache in OUT/.marathon) and render the task x arm matrix with reward, partial "
    "score and test pass rate side by side and build failures marked; the per-arm summary (means over "
    "done cells, build failures as 0, flagged cells as failures: the hole rule); paired comparisons on the tasks both arms completed, with n; "
    "the infrastructure-bias alarm (Fisher's exact test on errored+voided attempts); and the arms' "
    "disclosed deviations. Beside each paired difference: the minimum detectable effect at 80 % power "
    "and the Holm-adjusted level, and the tasks needed to detect the observed difference. Tasks every "
    "arm failed alike are marked suspect with the evidence. Exit 0; 2 on bad input (not an output "
    "tree, --out inside the tree)."
)


def configure(p: argparse.ArgumentParser) -> None:
    from runner.results.report import FORMATS

    add_out(p)
    p.add_argument("--format", choices=FORMATS, default="md", help="output format (default md)")
    p.add_argument("--out", dest="out_file", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--run", action="store_true", help="only the current run (default: all time)")
    p.add_argument("--pretty", action="store_true", help="indent the JSON for a human (default: one line)")
    p.add_argument(
        "--exclude-flagged",
        action="store_true",
        help="the other reading, labelled as such: leave flagged cells (holes the agent could have made) "
        "out of the means and pairs instead of counting them as failures",
    )
    p.add_argument(
        "--price", dest="prices", action="append", default=[], metavar="MODEL=IN,CACHED,OUT",
        help="price MODEL's tokens at these USD per million (input, cached input, output) over LiteLLM's "
        "map and the run's own --price (repeatable; recorded in the report)",
    )  # fmt: skip
    p.add_argument(
        "--exclude-suspect",
        action="store_true",
        help="the other reading, labelled as such: every figure without the tasks every arm failed alike "
        "(default: they count like any task, marked with their evidence)",
    )


def run(args: argparse.Namespace) -> int:
    from runner.errors import UserError
    from runner.results.index import remembered_intervals
    from runner.results.model import open_tree
    from runner.results.prices import parse_prices
    from runner.results.report import build_report, render
    from runner.results.tree import voided_root

    out = tree_out(args, must_exist=False)
    model = open_tree(out)
    if args.out_file is not None:
        # resolved, links and all: a link to (or into) the tree is the tree; its voided root beside
        # it holds each voided attempt's only record of why (README.md, void.json)
        target = os.path.realpath(args.out_file)
        for root, what in (
            (model.out, "the output tree"),
            (voided_root(Path(model.out)), "the tree's voided attempts"),
        ):
            root = os.path.realpath(root)
            if target == root or target.startswith(root + os.sep):
                raise UserError(f"--out {args.out_file}: inside {what}; write the report elsewhere")
        if os.path.isdir(target):
            raise UserError(f"--out {args.out_file}: is a directory; give a file name")
        if args.out_file.endswith("/"):  # a shell's > says "Not a directory"; a file was replaced
            raise UserError(f"--out {args.out_file}: not a directory (a file name has no trailing /)")
    try:
        parse_prices(args.prices)
    except ValueError as exc:  # a --price that does not parse: one line, before any reading
        raise UserError(str(exc)) from None
    with remembered_intervals(model.out):
        rep = build_report(
            model,
            "run" if args.run else "all",
            exclude_flagged=args.exclude_flagged,
            exclude_suspect=args.exclude_suspect,
            prices=args.prices,
        )
    text = render(rep, args.format, args.pretty)
    if args.out_file is None:
        sys.stdout.write(text)
        return 0
    data = text.encode("utf-8")
    try:
        write_out(args.out_file, data)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the CLI's one line for a full disk, exit 6
            raise OSError(exc.errno, exc.strerror, args.out_file) from None
        raise UserError(f"--out {args.out_file}: cannot write it ({exc.strerror or exc})") from None
    print(safetext.clean(f"wrote {args.out_file} ({args.format}, {len(data)} bytes)", None), file=sys.stderr)
    return 0


def write_out(name: str, data: bytes) -> None:
    """Write the report to ``name`` as a shell's ``>`` would, except that a file is never left half
    written: a regular file (or a new name) is replaced whole by a temp file renamed over it, so a
    full disk leaves the report that was there (a new file, with the old one's permissions: a hard
    link to the old one keeps the old report); a device, FIFO or terminal the name leads to
    (``/dev/stdout``, ``/dev/null``) is written to as it is, never replaced by a file; through a
    symlink, its target is written."""
    try:
        st = os.stat(name)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(name, "wb") as fh:
            fh.write(data)
        return
    real = os.path.realpath(name)
    if st is None:
        safeio.write_atomic(real, data)
        return
    old = os.umask(0)  # the old file's mode exactly (a 0600 report stays 0600)
    try:
        safeio.write_atomic(real, data, mode=stat.S_IMODE(st.st_mode))
    finally:
        os.umask(old)
