"""The folders are the architecture: imports point one way, and this test says which way.

    runner.commands (CLI only, reached through runner.cli)
        -> runner.schedule -> runner.ops -> runner.results -> runner.errors/secrets -> modes
    console -> the runner's public names          agents -> modes

Every import of every module is read with ``ast`` (function-level ones too: a lazy import is still a
dependency), so a new arrow that runs back up fails here with the file and line that made it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("runner", "console", "agents", "modes")
OURS = PACKAGES  # what counts as an arrow of ours


@dataclass(frozen=True)
class Edge:
    src: str  # importing module, dotted
    dst: str  # imported module (or module.name for `from m import name`), dotted
    names: tuple[str, ...]  # the names taken (from-imports)
    where: str  # file:line

    def __str__(self) -> str:
        return f"{self.where}: {self.src} imports {self.dst} {list(self.names) or ''}".rstrip()


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _edges() -> list[Edge]:
    out: list[Edge] = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO)
            if rel.parts[:2] == ("runner", "demo"):  # task data run inside harbor's containers
                continue
            src = _module_of(path)
            for node in ast.walk(ast.parse(path.read_text(), str(rel))):
                where = f"{rel}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Import):
                    out += [Edge(src, a.name, (), where) for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = tuple(a.name for a in node.names)
                    if node.module in PACKAGES or node.module in (
                        "runner.results",
                        "runner.ops",
                        "runner.schedule",
                    ):
                        # `from runner import model`: the dependency is on the submodule
                        out += [Edge(src, f"{node.module}.{n}", (), where) for n in names]
                    else:
                        out.append(Edge(src, node.module, names, where))
                elif isinstance(node, ast.ImportFrom) and node.level:
                    pytest.fail(f"{where}: relative import; the layer test reads absolute ones only")
    return out


EDGES = _edges()


def _top(name: str) -> str:
    return name.split(".")[0]


def _in(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _violations(src_prefix: str, allowed: tuple[str, ...]) -> list[str]:
    return [
        str(e)
        for e in EDGES
        if _in(e.src, src_prefix) and _top(e.dst) in OURS and not _in(e.dst, src_prefix, *allowed)
    ]


def test_the_edges_are_read():
    # the reader sees both top-level and function-level imports (a silent parser would pass all below)
    assert any(e.src == "runner.schedule.driver" and e.dst == "runner.results.tree" for e in EDGES)
    assert any(e.src == "runner.schedule.health" and e.dst == "runner.schedule.start" for e in EDGES)


def test_modes_is_the_leaf():
    assert _violations("modes", ()) == []


def test_agents_import_only_modes():
    assert _violations("agents", ("modes",)) == []


def test_results_read_and_never_act():
    assert _violations("runner.results", ("runner.errors", "runner.secrets", "modes")) == []


def test_ops_build_on_results_and_never_on_schedule():
    assert _violations("runner.ops", ("runner.results", "runner.errors", "runner.secrets", "modes")) == []


#: The arms own the layout of their staged binaries (which files of ~/.cache/marathon a trial
#: mounts, and the codex version staged); the scheduler reads it to mount them and its preflight to
#: refuse a run whose staging is missing. agents/ imports only modes/, so this arrow points down.
SCHEDULE_READS_ARM_STAGING = ("agents.staging", "agents.loopx_staging")


#: ``verify-envs`` runs each arm's own install code up to the first model call, here and (through
#: the cluster probe) on every Docker host: only its module, ``runner.schedule.envcheck``, may.
SCHEDULE_CHECKS_ARMS = ("agents.scripted_model", "agents.loopx_gates", "agents.transport")


def test_schedule_builds_on_ops_and_results():
    allowed = ("runner.ops", "runner.results", "runner.errors", "runner.secrets", "modes")
    assert _violations("runner.schedule", allowed + SCHEDULE_READS_ARM_STAGING + SCHEDULE_CHECKS_ARMS) == []
    checkers = {e.src for e in EDGES if _in(e.src, "runner.schedule") and _in(e.dst, *SCHEDULE_CHECKS_ARMS)}
    assert checkers == {"runner.schedule.envcheck"}


def test_errors_and_secrets_are_below_everything_in_runner():
    assert _violations("runner.errors", ()) == []
    assert _violations("runner.secrets", ("runner.errors", "modes")) == []


def test_commands_are_reached_only_through_the_cli():
    bad = [
        str(e)
        for e in EDGES
        if _in(e.dst, "runner.commands") and e.src != "runner.cli" and not _in(e.src, "runner.commands")
    ]
    assert bad == []


def test_commands_do_not_import_each_other():
    bad = [
        str(e)
        for e in EDGES
        if _in(e.src, "runner.commands") and _in(e.dst, "runner.commands") and e.src != "runner.commands"
    ]
    assert bad == []


#: The CLI entries that open the console: the only places the runner reaches up into console/.
OPENS_THE_CONSOLE = ("runner.commands.console", "runner.commands.demo")


def test_runner_reaches_console_only_to_open_it():
    bad = [
        str(e)
        for e in EDGES
        if _in(e.src, "runner")
        and _in(e.dst, "console")
        and not (e.src in OPENS_THE_CONSOLE and e.dst == "console.app")
    ]
    assert bad == []


def test_runner_never_imports_textual():
    assert [str(e) for e in EDGES if _in(e.src, "runner") and _top(e.dst) == "textual"] == []


def test_console_uses_only_public_runner_names():
    bad = [
        str(e)
        for e in EDGES
        if _in(e.src, "console")
        and _in(e.dst, "runner")
        and (
            any(part.startswith("_") for part in e.dst.split("."))
            or any(n.startswith("_") for n in e.names)
            or _in(e.dst, "runner.commands", "runner.cli")
        )
    ]
    assert bad == []


def test_every_subpackage_says_what_it_holds():
    for pkg in ("modes", "runner.results", "runner.ops", "runner.schedule"):
        init = REPO / pkg.replace(".", "/") / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} has no docstring"
