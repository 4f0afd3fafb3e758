"""Shared fixtures. Real Docker, real harbor: nothing here mocks them.

Two tiers (docs/testing.md): tests marked ``docker`` need the engine; the others read real harbor
output trees recorded in tests/data/trees/ and must not touch Docker at all. Two guards keep the
marker honest: a test whose fixtures reach ``docker_engine`` fails unless it is marked ``docker``, and
a session that selected no ``docker`` test points DOCKER_HOST at a socket that does not exist, so any
Docker call of an unmarked test fails at once with that socket's name in the error.

With CI=true or MARATHON_REQUIRE_DOCKER=1 a missing Docker engine fails the session instead of
skipping the tests that need it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import ci_profile
import pytest
import real_trees

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# harbor 0.25.0 sends telemetry when a job finishes: it imports litellm and tries the network, which
# keeps every `harbor run` alive ~30 s after its results are written. Tests never send it.
os.environ.setdefault("HARBOR_TELEMETRY", "0")

REQUIRE_DOCKER = os.environ.get("CI") == "true" or os.environ.get("MARATHON_REQUIRE_DOCKER") == "1"


def docker_available() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


#: What DOCKER_HOST is in a session without docker tests: the name says what to do about the error.
NO_ENGINE = "unix:///nonexistent/fast-tier-has-no-docker--mark-the-test-pytest.mark.docker.sock"


def pytest_configure(config: pytest.Config) -> None:
    ci_profile.register(config)  # MARATHON_CI_PROFILE=<file>: per-test wall and CPU (docs/testing.md)


# ------------------------------------------------------------------ the Docker tier in parallel
#
# `.ci/run` runs the Docker tier in xdist workers with ``--dist loadscope`` (docs/testing.md): each
# module is one scope, so its module and session fixtures (the shared real runs) are made once, in
# one worker; modules that share a session fixture share a scope (``pytest_xdist_make_scheduler``). The longest groups are
# collected first, so they start first and the short ones fill the gaps (xdist is told not to
# reorder: ``--no-loadscope-reorder``). Tests marked ``alone`` need the machine's engine to
# themselves (they read the shared address pool as a whole) and run after the parallel part.

#: Docker modules whose tests share a session fixture: one group, so the fixture runs once
SHARED_GROUPS = {
    "tests/core/test_recorded_trees.py": "live_trees",
    "tests/console/test_snapshots.py": "live_trees",
    "tests/runner/test_equal_budgets.py": "five_arm_run",
    "tests/runner/test_runner_secret_leak.py": "five_arm_run",
    "tests/runner/test_gateway_wire.py": "five_arm_run",
    "tests/console/test_demo_varied.py": "demo_varied_run",
    "tests/viewer/test_view_browser.py": "demo_varied_run",
}
#: the Docker tier's longest groups, longest first (benchmarks/ci_cost.py measures them)
LONGEST_FIRST = [
    "tests/envs/test_sandbox_driver_trials.py",
    "tests/runner/test_chaos.py",
    "tests/fleet/test_fleet_run.py",
    "tests/console/test_demo_varied.py",
    "tests/arms_loopx/test_loopx_arm_trials.py",
    "tests/runner/test_hostile_scenario.py",
    "tests/runner/test_equal_budgets.py",
    "tests/runner/test_runner_secret_leak.py",
    "tests/arms_codex/test_codex_arm_trials.py",
    "tests/runner/test_demo_resume.py",
]


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadscope``: one scope per module (xdist's own), except that the modules sharing a
    session fixture are one scope. (xdist 3.8's ``loadgroup`` cannot group under pytest 9.2: it
    renames ``item._nodeid``, which pytest no longer reads.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED_GROUPS.get(module, module)

    return ModuleGroups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        if not item.get_closest_marker("docker"):
            return len(rank) + 1
        return rank.get(item.nodeid.split("::", 1)[0], len(rank))

    items.sort(key=order)  # stable: within a module the written order stays


def pytest_collection_finish(session: pytest.Session) -> None:
    """Hide the engine from a session that selected no docker test (``-m "not docker"``, or only
    Docker-free modules): an unmarked test that talks to Docker then fails instead of passing on
    the machine's engine and breaking the fast tier on a machine without one."""
    if not any(item.get_closest_marker("docker") for item in session.items):
        os.environ["DOCKER_HOST"] = NO_ENGINE


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """On a failure in a session without the engine, say so next to the traceback (the Docker SDK's
    own error names no socket)."""
    report = yield
    if report.failed and os.environ.get("DOCKER_HOST") == NO_ENGINE:
        report.sections.append(
            (
                "Docker hidden",
                f"This session selected no docker test, so DOCKER_HOST={NO_ENGINE}.\n"
                "If this test needs the Docker engine, mark it `pytest.mark.docker`.",
            )
        )
    return report


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that reaches ``docker_engine`` (directly or through any fixture) must be marked docker."""
    if "docker_engine" in getattr(item, "fixturenames", ()) and item.get_closest_marker("docker") is None:
        pytest.fail(
            f"{item.nodeid} needs Docker (its fixtures use docker_engine) but is not marked "
            "`pytest.mark.docker`: mark it, or give it a recorded tree (tests/real_trees.py)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Require a reachable Docker engine: fail under CI, skip on a laptop without one."""
    if docker_available():
        return
    if REQUIRE_DOCKER:
        pytest.fail("no Docker engine reachable (CI requires one; run .ci/setup-machine)")
    pytest.skip("no Docker engine reachable")


# ------------------------------------------------------------------ filesystems of a test's own


@pytest.fixture
def mount_tmpfs():
    """``mount_tmpfs(dir, size)``: a tmpfs of ``size`` (``"64k"``, ``"1100m"``) mounted at ``dir``
    for this test alone, unmounted after it: a disk that fills, a second filesystem (root: CI's
    machine is). A mount, not a mock: the kernel's own short writes, ENOSPC and EXDEV."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(d: Path, size: str) -> Path:
        d.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(d)],
                           capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stderr
        mounted.append(d)
        return d

    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


# ------------------------------------------------------------------ real output trees


@pytest.fixture(scope="session")
def mini_tree(tmp_path_factory) -> Path:
    """A real output tree, recorded (tests/data/trees/mini): harbor's oracle and nop over the 4 demo
    tasks, one job per task x arm. No Docker needed.

    Read-only for tests (copy it if you need to change it). Oracle scores 1 everywhere; nop gives
    calc-partial partial 0.2, words-passrate pass rate 0.4, build-gate build_failed, two-stage
    partial 0.0 with a test pass rate above 0.
    """
    return real_trees.copy_recorded("mini", tmp_path_factory.mktemp("mini_tree") / "out")


@pytest.fixture(scope="session")
def live_trees(docker_engine, tmp_path_factory) -> dict[str, Path]:
    """Every recorded tree made again by real harbor jobs now (all at once), for the tests that
    check the recordings still match what harbor writes. Read-only."""
    base = tmp_path_factory.mktemp("live_trees")
    outs = {name: base / name / "out" for name in real_trees.TREES}
    real_trees.build_trees(outs)
    return outs


@pytest.fixture(scope="session")
def harbor_jobs() -> SimpleNamespace:
    """``start``/``wait``/``run`` of real harbor jobs in the output-tree layout, for any area's fixtures."""
    return SimpleNamespace(
        start=real_trees.start_harbor_jobs, wait=real_trees.wait_harbor_jobs, run=real_trees.run_harbor_jobs
    )


@pytest.fixture(scope="session")
def demo_varied_run(docker_engine, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One completed varied ``marathon demo --headless`` run (the README's main job: five real arms,
    20 pairs, one setup failure voided and rerun; its voided root beside it) and what the command
    printed, made once per session and read by many tests (tests/console/test_demo_varied.py,
    tests/viewer/test_view_browser.py: one xdist scope). Read-only: copy the tree to change it."""
    import sys

    out = tmp_path_factory.mktemp("demo_varied") / "out"
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(repo))
    # more harbor agent time than the demo's 2 x 120 s: on a loaded 2-core machine the LoopX arms'
    # install alone can outlast it, and harbor's timeout is an errored attempt, not under test here
    r = subprocess.run(
        [sys.executable, "-m", "marathon.cli", "demo", "--headless", "--agent-timeout-mult", "5", "--out", str(out)],
        cwd=repo, env=env, capture_output=True, text=True, timeout=3000,
    )  # fmt: skip
    return out, r


@pytest.fixture(scope="session")
def demo_varied_tree(demo_varied_run) -> Path:
    """The out tree of ``demo_varied_run``, which must have finished every pair."""
    out, r = demo_varied_run
    assert r.returncode == 0 and "20/20 pairs done" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    return out
