"""The three LoopX gates. Each is a hard failure before any token is spent.

1. skills: every id of LoopX's own ``NATIVE_CODEX_PROFILE_REQUIRED_SKILL_IDS`` -- read from the package
   installed *in the container*, never written out here (0.5.3 had 7, 2.1.1 has 8; a hand-written list
   silently misses the new one) -- has a ``SKILL.md`` under the profile's skills dir.
2. doctor: ``loopx --format json doctor --agent-type <mode's>`` is ``ok`` *and* its
   ``skill_delivery.status`` is ``ready`` (doctor alone says ok with no skills installed).
3. skills/list: codex's app-server, asked before ``thread/start``, discovers every required skill
   (the cheapest gate: it proves codex itself sees them).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agents.loopx_profile import ContainerExec, InstalledProfile

REQUIRED_SKILLS_SOURCE = (
    "loopx.capabilities.benchmark_toolkit.native_codex_profile.NATIVE_CODEX_PROFILE_REQUIRED_SKILL_IDS"
)


class GateFailure(RuntimeError):
    """A LoopX gate failed; the run must stop before the first model request."""

    def __init__(self, result: GateResult):
        super().__init__(f"LoopX gate '{result.gate}' failed: {result.detail}")
        self.result = result


@dataclass(frozen=True)
class GateResult:
    gate: str  # "skills" | "doctor" | "skills/list"
    ok: bool
    detail: str
    data: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"gate": self.gate, "ok": self.ok, "detail": self.detail, "data": self.data}

    def require(self) -> GateResult:
        if not self.ok:
            raise GateFailure(self)
        return self


async def required_skill_ids(run: ContainerExec, profile: InstalledProfile) -> tuple[str, ...]:
    """LoopX's constant as the container's installed loopx has it."""
    module, _, name = REQUIRED_SKILLS_SOURCE.rpartition(".")
    code = f"import json; from {module} import {name} as S; print(json.dumps(list(S)))"
    r = await run(f"{shlex.quote(profile.paths.python)} -c {shlex.quote(code)}", profile.env, None, 60)
    if r.return_code != 0:
        raise GateFailure(
            GateResult(
                "skills", False, f"cannot read {name} from the installed loopx: {r.stderr.strip()[-200:]}"
            )
        )
    ids = json.loads(r.stdout.strip().splitlines()[-1])
    if not ids:
        raise GateFailure(GateResult("skills", False, f"{name} is empty in the installed loopx"))
    return tuple(ids)


async def gate_skills(run: ContainerExec, profile: InstalledProfile, required: Sequence[str]) -> GateResult:
    """Gate 1: a SKILL.md for every required id under the profile's skills dir."""
    skills_dir = profile.paths.skills_dir
    checks = " ".join(shlex.quote(f"{skills_dir}/{sid}/SKILL.md") for sid in required)
    r = await run(f'for f in {checks}; do test -f "$f" || echo "$f"; done', profile.env, None, 60)
    missing = [line.rsplit("/", 2)[-2] for line in r.stdout.splitlines() if line.strip()]
    data = {
        "required": list(required),
        "missing": missing,
        "skills_dir": skills_dir,
        "source": REQUIRED_SKILLS_SOURCE,
    }
    if r.return_code != 0:
        return GateResult("skills", False, f"could not check {skills_dir}: {r.stderr.strip()[-200:]}", data)
    if missing:
        return GateResult("skills", False, f"missing under {skills_dir}: {', '.join(missing)}", data)
    return GateResult("skills", True, f"{len(required)} required skills present", data)


def doctor_verdict(payload: dict | None, agent_type: str) -> GateResult:
    """Gate 2's rule on a doctor answer: ``ok`` and ``skill_delivery.status == ready``."""
    if not isinstance(payload, dict):
        return GateResult("doctor", False, f"doctor --agent-type {agent_type} gave no JSON")
    delivery = (payload.get("skill_delivery") or {}).get("status")
    failing = [
        f"{c.get('id')}: {c.get('detail')}"
        for c in payload.get("checks") or []
        if isinstance(c, dict) and c.get("ok") is False and c.get("required") is True
    ]
    data = {"agent_type": agent_type, "ok": payload.get("ok"), "skill_delivery": delivery}
    if payload.get("ok") is not True:
        data["failing_required_checks"] = failing
        return GateResult(
            "doctor",
            False,
            f"doctor --agent-type {agent_type} not ok: {'; '.join(failing[:4]) or 'no reason given'}",
            data,
        )
    if delivery != "ready":
        return GateResult(
            "doctor", False, f"doctor ok but skill_delivery.status is {delivery!r}, not 'ready'", data
        )
    return GateResult("doctor", True, f"doctor --agent-type {agent_type} ok, skill delivery ready", data)


async def gate_doctor(run: ContainerExec, profile: InstalledProfile, agent_type: str) -> GateResult:
    """Gate 2: run doctor in the profile env (Node on PATH is what it checks first)."""
    cmd = shlex.join([profile.paths.cli_bin, "--format", "json", "doctor", "--agent-type", agent_type])
    r = await run(cmd, profile.env, None, 120)
    try:
        payload = json.loads(r.stdout)
    except json.JSONDecodeError:
        payload = None
        if r.return_code != 0:
            return GateResult("doctor", False, f"doctor exited {r.return_code}: {r.stderr.strip()[-200:]}")
    return doctor_verdict(payload, agent_type)


def skills_list_verdict(result: dict | None, required: Iterable[str], cwd: str) -> GateResult:
    """Gate 3's rule on an app-server ``skills/list`` result for ``cwd``."""
    required = list(required)
    entries = (result or {}).get("data")
    if not isinstance(entries, list):
        return GateResult("skills/list", False, "skills/list answered without data")
    entry = next((e for e in entries if isinstance(e, dict) and e.get("cwd") == cwd), None)
    if entry is None:
        return GateResult("skills/list", False, f"skills/list has no entry for cwd {cwd}")
    names = sorted({s.get("name") for s in entry.get("skills") or [] if isinstance(s, dict)})
    missing = [sid for sid in required if sid not in names]
    errors = entry.get("errors") or []
    data = {
        "catalog": names,
        "catalog_count": len(names),
        "required": required,
        "missing": missing,
        "errors": errors,
    }
    if missing:
        return GateResult("skills/list", False, f"codex does not see: {', '.join(missing)}", data)
    return GateResult(
        "skills/list", True, f"codex sees all {len(required)} required skills ({len(names)} in catalog)", data
    )
