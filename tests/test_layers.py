"""The folders are the architecture: imports point one way, and this test says which way.

    marathon (the `marathon` command: marathon.cli and its marathon.commands)
      -> console (the runner's public names only)
        -> runner.schedule -> runner.ops -> runner.results -> runner.errors/secrets/procid
          -> agents -> modes

Every import of every module is read with ``ast`` (function-level ones too: a lazy import is still a
dependency, and so is a subcommand the CLI loads by name), so a new arrow that runs back up, or that
closes a cycle, fails here with the file and line that made it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("marathon", "runner", "console", "agents", "modes")
OURS = PACKAGES  # what counts as an arrow of ours

#: The layers, top first. An import may point down or stay in its own layer; never up.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("marathon",),
    ("console",),
    ("runner.schedule",),
    ("runner.ops",),
    ("runner.results",),
    ("runner.errors", "runner.secrets", "runner.procid", "runner.version", "runner"),
    ("agents",),
    ("modes",),
)


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
                    subs = [n for n in names if _is_module(f"{node.module}.{n}")]
                    # `from runner.results import model`: the dependency is on the submodule
                    out += [Edge(src, f"{node.module}.{n}", (), where) for n in subs]
                    rest = tuple(n for n in names if n not in subs)
                    if rest or not subs:
                        out.append(Edge(src, node.module, rest, where))
                elif isinstance(node, ast.ImportFrom) and node.level:
                    pytest.fail(f"{where}: relative import; the layer test reads absolute ones only")
    return out


def _is_module(dotted: str) -> bool:
    path = REPO / dotted.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _command_edges() -> list[Edge]:
    """The subcommands ``marathon.cli`` loads by name (``importlib``): arrows all the same."""
    from marathon.cli import COMMANDS

    return [Edge("marathon.cli", f"marathon.commands.{n.replace('-', '_')}", (), "marathon/cli.py:COMMANDS")
            for n in COMMANDS]  # fmt: skip


EDGES = _edges() + _command_edges()


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
    # `from package import submodule` is an arrow to the submodule
    assert any(e.src == "runner.schedule.driver" and e.dst == "runner.schedule.claims" for e in EDGES)
    assert any(e.src == "marathon.cli" and e.dst == "marathon.commands.console" for e in EDGES)


def _layer(module: str) -> int:
    best = (-1, len(LAYERS))  # (length of the matching prefix, layer)
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if _in(module, p) and len(p) > best[0]:
                best = (len(p), i)
    return best[1]


def test_every_module_has_a_layer():
    assert [e.src for e in EDGES if _layer(e.src) == len(LAYERS)] == []


def test_no_import_runs_up_a_layer():
    up = [
        f"{e} (layer {LAYERS[_layer(e.src)][0]} -> {LAYERS[_layer(e.dst)][0]})"
        for e in EDGES
        if _top(e.dst) in OURS and _layer(e.dst) < _layer(e.src)
    ]
    assert up == []


def _module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for e in EDGES:
        if _top(e.dst) not in OURS:
            continue
        dst = e.dst
        while dst and not _is_module(dst):  # `import a.b.name` or a from-import of a module's name
            dst = dst.rpartition(".")[0]
        if dst and dst != e.src:
            graph.setdefault(e.src, set()).add(dst)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    cycles = _cycles(_module_graph())
    assert cycles == [], sorted(sorted(c) for c in cycles)


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_modes_is_the_leaf():
    assert _violations("modes", ()) == []


def test_agents_import_only_modes():
    assert _violations("agents", ("modes",)) == []


def test_results_read_and_never_act():
    assert (
        _violations(
            "runner.results", ("runner.errors", "runner.secrets", "runner.procid", "runner.version", "modes")
        )
        == []
    )


def test_ops_build_on_results_and_never_on_schedule():
    allowed = ("runner.results", "runner.errors", "runner.secrets", "runner.procid", "modes")
    assert _violations("runner.ops", allowed) == []


#: The arms own the layout of their staged binaries (which files of ~/.cache/marathon a trial
#: mounts, and the codex version staged); the scheduler reads it to mount them and its preflight to
#: refuse a run whose staging is missing. agents/ imports only modes/, so this arrow points down.
SCHEDULE_READS_ARM_STAGING = ("agents.staging", "agents.loopx_staging")


#: ``verify-envs`` runs each arm's own install code up to the first model call, here and (through
#: the cluster probe) on every Docker host: only its module, ``runner.schedule.envcheck``, may.
SCHEDULE_CHECKS_ARMS = ("agents.scripted_model", "agents.loopx_gates", "agents.transport")


def test_schedule_builds_on_ops_and_results():
    allowed = (
        "runner.ops",
        "runner.results",
        "runner.errors",
        "runner.secrets",
        "runner.procid",
        "runner.version",
        "modes",
    )
    assert _violations("runner.schedule", allowed + SCHEDULE_READS_ARM_STAGING + SCHEDULE_CHECKS_ARMS) == []
    checkers = {e.src for e in EDGES if _in(e.src, "runner.schedule") and _in(e.dst, *SCHEDULE_CHECKS_ARMS)}
    assert checkers == {"runner.schedule.envcheck"}


def test_errors_and_secrets_are_below_everything_in_runner():
    assert _violations("runner.errors", ()) == []
    assert _violations("runner.secrets", ("runner.errors", "modes")) == []
    assert _violations("runner.procid", ("modes",)) == []
    assert _violations("runner.version", ()) == []


def test_commands_are_reached_only_through_the_cli():
    bad = [
        str(e)
        for e in EDGES
        if _in(e.dst, "marathon.commands") and e.src != "marathon.cli" and not _in(e.src, "marathon.commands")
    ]
    assert bad == []


def test_commands_do_not_import_each_other():
    # what they share is marathon.options
    bad = [str(e) for e in EDGES if _in(e.src, "marathon.commands") and _in(e.dst, "marathon.commands")]
    assert bad == []


def test_nothing_imports_the_command():
    assert [str(e) for e in EDGES if _in(e.dst, "marathon") and not _in(e.src, "marathon")] == []


#: The CLI entries that open the console: the only places that import console.app.
OPENS_THE_CONSOLE = ("marathon.commands.console", "marathon.commands.demo")


def test_runner_never_imports_the_console():
    assert [str(e) for e in EDGES if _in(e.src, "runner") and _in(e.dst, "console")] == []
    opens = {e.src for e in EDGES if e.dst == "console.app" and not _in(e.src, "console")}
    assert opens == set(OPENS_THE_CONSOLE)


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
            or _in(e.dst, "marathon")
        )
    ]
    assert bad == []


def test_every_subpackage_says_what_it_holds():
    for pkg in ("marathon", "modes", "runner.results", "runner.ops", "runner.schedule"):
        init = REPO / pkg.replace(".", "/") / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} has no docstring"
