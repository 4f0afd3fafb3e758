"""Record the real harbor output trees the fast test tier reads (tests/data/trees/<name>/).

    uv run --frozen python tests/data/record.py            # every tree in tests/real_trees.TREES
    uv run --frozen python tests/data/record.py mini       # one tree

Needs the Docker engine and the demo tasks' images (as the Docker tier does). It runs the trees'
harbor jobs for real, then replaces each recording with the files harbor and the agents wrote,
unchanged, and writes MANIFEST.json (harbor version, jobs, the empty dirs git cannot keep). Run it
after upgrading harbor or changing a demo task or a test agent, and commit the result: the Docker
test tests/core/test_recorded_trees.py fails until the recording matches what harbor writes today.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: real_trees, harbor_agents

import real_trees  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "names", nargs="*", help=f"trees to record (default: all of {', '.join(real_trees.TREES)})"
    )
    names = ap.parse_args(argv).names or list(real_trees.TREES)
    unknown = [n for n in names if n not in real_trees.TREES]
    if unknown:
        ap.error(f"unknown tree {', '.join(unknown)} (known: {', '.join(real_trees.TREES)})")
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with tempfile.TemporaryDirectory(prefix="marathon-record-") as tmp:
        outs = {n: Path(tmp) / n / "out" for n in names}
        t0 = time.monotonic()
        real_trees.build_trees(outs)
        print(f"harbor jobs done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        man = (
            real_trees.manifest()
            if real_trees.MANIFEST.exists()
            else {"about": "recorded by tests/data/record.py; do not edit by hand", "trees": {}}
        )
        for n, out in outs.items():
            dst = real_trees.TREES_DIR / n
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(out, dst, symlinks=True)
            spec = real_trees.TREES[n]
            man["trees"][n] = {
                "about": spec.about,
                "harbor": version("harbor"),
                "jobs": [list(j) for j in spec.jobs],
                "harbor_run_extra": list(spec.extra),
                "harbor_run_extra_arms": list(spec.extra_arms) if spec.extra_arms is not None else None,
                "harbor_run_others_extra": list(spec.others_extra),
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "empty_dirs": real_trees.empty_dirs(out),
            }
        man["trees"] = dict(sorted(man["trees"].items()))
        real_trees.MANIFEST.write_text(json.dumps(man, indent=2) + "\n")
    for n in names:
        size = sum(p.stat().st_size for p in (real_trees.TREES_DIR / n).rglob("*") if p.is_file())
        print(f"recorded {real_trees.TREES_DIR / n}: {size / 1024:.0f} KiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
