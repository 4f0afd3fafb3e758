"""A hand-made 15-task tree whose answers are known, for the report's validity tests.

Made the way tests/core/test_handmade.py makes its cases, real harbor trial files copied and
edited; here the files were recorded from a core_tree run (tests/core/recorded), so building it
needs no Docker.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

from core.treefix import verifier_wrote

from runner.results import tree

TASKS = [f"t{i:02d}" for i in range(15)]
GOAL = [0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85]
DIFF = [0.15] * 8 + [-0.15] * 2 + [0.0] * 5  # plain - goal: 8 wins, 2 losses, 5 ties, mean +0.06
PLAIN = [g + d for g, d in zip(GOAL, DIFF, strict=True)]
HEARTBEAT = [1.0] * 15  # solves everything: 15 wins over either arm
COST = {"plain": 0.01, "goal": 0.02, "heartbeat": 0.03}
TOKENS = {"plain": (100, 10), "goal": (200, 20), "heartbeat": (300, 30)}
#: wall seconds of each done cell (the time-to-finish figure), under an hour
WALL = {arm: [(600 + 997 * (i + 1) * (k + 2)) % 3000 + 120 for i in range(15)] for k, arm in enumerate(COST)}
ERRORED_COST, VOIDED_COST = 0.5, 0.25
STAMP, EARLY = "20261130T100000Z", "20261130T090000Z"


RECORDED = Path(__file__).parent / "recorded"


def _src_stamp(core: Path, task: str, arm: str) -> Path:
    return core / arm / tree.list_dirs(core / arm)[0]


def _edit(path: Path, fn) -> None:
    """Edit a job's or trial's result.json. A trial's is written last, as harbor writes it: its
    verifier's files dated first inside the verifier's run (a copy or a checkout dates them now,
    after the recorded verifier's end, which the tamper rule reads as written after it)."""
    d = json.loads(path.read_text())
    fn(d)
    if isinstance(d.get("verifier"), dict) and (path.parent / "verifier").is_dir():
        for f in (path.parent / "verifier").iterdir():
            verifier_wrote(f)
    path.write_text(json.dumps(d, indent=4))


def _copy_attempt(core: Path, out: Path, src: tuple[str, str], task: str, arm: str, stamp: str) -> Path:
    """Copy a real attempt to ``out/task/arm/stamp/arm``; return the (renamed) job dir."""
    dst = out / task / arm / stamp
    shutil.copytree(_src_stamp(core, *src), dst, symlinks=True)
    (dst / src[1]).rename(dst / arm)
    return dst / arm


def _set_money(job: Path, cost: float, tok_in: int, tok_out: int) -> None:
    (trial,) = tree.list_dirs(job)

    def trial_res(d):
        d["agent_result"].update(cost_usd=cost, n_input_tokens=tok_in, n_output_tokens=tok_out)

    _edit(job / trial / "result.json", trial_res)
    _edit(
        job / "result.json",
        lambda d: d["stats"].update(cost_usd=cost, n_input_tokens=tok_in, n_output_tokens=tok_out),
    )


def _done_cell(
    core: Path, out: Path, task: str, arm: str, partial: float, wall: int, build_failed: bool = False,
    stamp: str = STAMP,
) -> None:  # fmt: skip
    job = _copy_attempt(core, out, ("calc-partial", "partial"), task, arm, stamp)
    (trial,) = tree.list_dirs(job)
    reward = 1.0 if partial == 1.0 else 0.0
    metrics = {"phase": "build_failed"} if build_failed else {"partial_score": partial, "pass_rate": partial}
    (job / trial / "verifier/metrics.json").write_text(json.dumps(metrics))

    def trial_res(d):
        d["verifier_result"]["rewards"].update(reward=reward)
        # the cell's wall time is its trial's (the job's naive local times are not read for it)
        end = datetime.fromisoformat(d["finished_at"].replace("Z", "+00:00"))
        d["started_at"] = (end - timedelta(seconds=wall)).isoformat().replace("+00:00", "Z")

    _edit(job / trial / "result.json", trial_res)

    def job_res(d):
        (ev,) = d["stats"]["evals"].values()
        ev["reward_stats"]["reward"] = {str(reward): [trial]}
        d["started_at"], d["finished_at"] = (  # (the job's own set-up: 30 s before its trial)
            "2026-11-30T09:59:30",
            f"2026-11-30T10:{wall // 60:02d}:{wall % 60:02d}",
        )

    _edit(job / "result.json", job_res)
    _set_money(job, COST[arm], *TOKENS[arm])


def build(out: Path) -> Path:
    """15 tasks x plain/goal/heartbeat with known partials and costs, plus one errored attempt
    (heartbeat, t00, before its done one) and one voided attempt (plain, t01) that cost money."""
    out.mkdir(parents=True)
    core_tree = RECORDED
    for i, t in enumerate(TASKS):
        _done_cell(core_tree, out, t, "goal", GOAL[i], WALL["goal"][i], build_failed=i == 0)
        _done_cell(core_tree, out, t, "plain", PLAIN[i], WALL["plain"][i])
        _done_cell(core_tree, out, t, "heartbeat", HEARTBEAT[i], WALL["heartbeat"][i])
    job = _copy_attempt(core_tree, out, ("calc-partial", "crash"), "t00", "heartbeat", EARLY)
    _set_money(job, ERRORED_COST, 7, 1)
    job = _copy_attempt(core_tree, out, ("calc-partial", "crash"), "t01", "plain", EARLY)
    _set_money(job, VOIDED_COST, 9, 2)
    voided = tree.voided_root(out) / "t01" / "plain" / EARLY
    voided.parent.mkdir(parents=True)
    (out / "t01" / "plain" / EARLY).rename(voided)
    (voided / tree.VOID_README).write_text("# Voided: environment start failed\n")
    return out


#: what every trial ran, as the arms record it (the fairness audit compares these across arms)
CODEX_SHA256 = "5" * 64
IMAGE_DIGEST = "sha256:" + "1" * 64


def arm_config(workdir: str = "/app", **edit) -> str:
    """The config.toml an arm writes (agents.codex_config), with ``edit`` ({"features.goals":
    True}) set on top: a dotted key per table level."""
    from agents.codex_config import ProviderSettings, build_config, render

    cfg = build_config(
        ProviderSettings("http://127.0.0.1:8000/v1", "OPENAI_API_KEY", "scripted/solve"), workdir
    )
    for dotted, value in edit.items():
        *parents, last = dotted.split(".")
        t = cfg
        for k in parents:
            t = t.setdefault(k, {})
        t[last] = value
    return render(cfg)


def write_receipts(out: Path, configs: dict[str, str] | None = None, **changes: dict) -> None:
    """Give every done trial of ``out`` a receipt written by the arms' own writer (modes.receipt),
    all with the same setup; ``changes={"heartbeat/t05": {"model": "x"}}`` alters one trial's, and
    ``configs={"heartbeat/t05": text}`` gives one trial another config.toml (hashed as the arm does)."""
    from modes.config_digest import config_digests
    from modes.profiles import mode_for
    from modes.receipt import Receipt

    for task in TASKS:
        for arm in COST:
            job = out / task / arm / STAMP / arm
            (trial,) = tree.list_dirs(job)
            r = Receipt(
                arm=arm,
                mode=None,
                disclosures=[],
                agent=f"codex-{arm}",
                codex_version="0.130.0",
                model="scripted/solve",
                provider={
                    "id": "marathon",
                    "base_url": "http://127.0.0.1:8000/v1",
                    "api_key_var": "OPENAI_API_KEY",
                },
                transport={
                    "kind": "docker-exec",
                    "container": "0123456789ab",
                    "workdir": "/app",
                    "user": "agent",
                },
                goal_timeout_sec=600.0,
            )
            r.extra["codex_version_in_container"] = "codex-cli 0.130.0"
            r.extra["harbor_agent_timeout_sec"] = 960.0
            r.codex_sha256, r.image_digest = CODEX_SHA256, IMAGE_DIGEST
            r.config_toml = config_digests((configs or {}).get(f"{arm}/{task}") or arm_config())
            r.masked = [m.as_dict() for m in mode_for(arm).masked]
            r.prep_sec, r.budget_sec, r.budget_used_sec = 3.5 if arm == "plain" else 33.0, 600.0, 420.0
            for k, v in changes.get(f"{arm}/{task}", {}).items():
                if isinstance(v, dict):
                    getattr(r, k).update(v)
                else:
                    setattr(r, k, v)
            r.write(job / trial / "agent")
