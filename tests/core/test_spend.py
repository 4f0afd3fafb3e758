"""Money from the gateway's ledger: pricing (runner.results.prices) agrees with LiteLLM itself, the
report's cost and spend per cell and arm equal a hand computation, an unknown model is unpriced
(never $0), harbor's own figures are reconciled, and the projection (runner.results.projection)
equals a hand computation on a copy of the hand-made tree with a ledger written by the gateway's
own writer."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time

import pytest
from handmade_tree import COST, EARLY, STAMP, TASKS

from marathon.status_view import status_data
from modes import cost_map
from runner.ops.gateway.server import LedgerWriter
from runner.results import ledger as L
from runner.results.model import RunModel
from runner.results.prices import Pricer, parse_price, parse_prices
from runner.results.projection import ArmSpend, project, projection_of
from runner.results.report import build_report, render
from runner.results.tree import gateway_dir, voided_root

# (model, service tier, input, cached, output, reasoning) of one call
CALLS = [
    ("gpt-5.5", None, 1000, 400, 300, 100),
    ("openai/gpt-5.5", None, 300_000, 1000, 10, 0),  # above the 272k prompt tier
    ("gpt-5.5", "flex", 300_000, 1000, 10, 5),
    ("gpt-5.5", "priority", 5000, 1000, 10, 5),
    ("gpt-5", None, 20_000, 15_000, 2000, 1500),
    ("dashscope/qwen-turbo", None, 5000, 0, 100, 60),  # a map entry with a reasoning rate
]


def _usage(*calls: tuple) -> L.AttemptUsage:
    led = L.Ledger()
    led.add_rows(
        {"kind": L.CALL, "at": 1.0, "task": "t", "arm": "a", "stamp": "s", "outcome": L.OK,
         "params": {"model": m, "service_tier": tier},
         "usage": {"input": i, "cached": c, "output": o, "reasoning": r}}
        for m, tier, i, c, o, r in calls
    )  # fmt: skip
    return led.usage("t", "a", "s")


def test_a_price_override_parses_or_says_why_in_one_line():
    o = parse_price("scripted/solve=5,0.5,30")
    assert (o.model, o.input, o.cached, o.output) == ("scripted/solve", 5.0, 0.5, 30.0)
    assert o.text() == "scripted/solve=5,0.5,30"
    for bad in ("x", "x=1,2", "=1,2,3", "x=a,1,2", "x=-1,1,1", "x=nan,1,1", "x=inf,1,1", "x=1e9,1,1"):
        with pytest.raises(ValueError) as e:
            parse_price(bad)
        assert "\n" not in str(e.value) and "--price" in str(e.value)
    with pytest.raises(ValueError, match="given twice"):
        parse_prices(["m=1,1,1", "m=2,2,2"])


def test_a_call_is_priced_by_hand_each_token_once():
    # input includes cached, output includes reasoning (the Responses API's usage): gpt-5.5 is
    # $5 in / $0.5 cached / $30 out per million, no reasoning rate of its own
    cost = Pricer().cost(_usage(CALLS[0]))
    assert cost is not None and cost.unpriced == ()
    assert cost.usd == pytest.approx((1000 - 400) * 5e-6 + 400 * 0.5e-6 + 300 * 30e-6, rel=1e-12)
    # above 272k prompt tokens the whole call is at the higher rates ($10 / $1 / $45)
    cost = Pricer().cost(_usage(CALLS[1]))
    assert cost.usd == pytest.approx(299_000 * 10e-6 + 1000 * 1e-6 + 10 * 45e-6, rel=1e-12)


def test_a_call_with_more_cached_than_input_never_reprices_the_attempts_other_calls():
    """Found by a probe: cached was clamped to input over an attempt's sums, so one call saying
    1,000,000 cached of 10 input priced the other calls' fresh input as cached (adding the call
    lowered the attempt's cost). Each call is clamped on its own."""
    base = Pricer().cost(_usage(CALLS[0]))
    odd = ("gpt-5.5", None, 10, 1_000_000, 0, 0)
    both = Pricer().cost(_usage(CALLS[0], odd))
    assert both.usd == pytest.approx(base.usd + 10 * 0.5e-6, rel=1e-12)  # its 10 inputs, all cached
    assert both.usd > base.usd


def test_pricing_agrees_with_litellm_itself():
    """LiteLLM's own cost_per_token on the same usage, in a child process (this one never imports it)."""
    code = (
        "import json, sys, litellm\nout = []\n"
        "for model, tier, inp, cached, o, r in json.loads(sys.argv[1]):\n"
        "    u = litellm.Usage(prompt_tokens=inp, completion_tokens=o, total_tokens=inp + o,\n"
        "        prompt_tokens_details={'cached_tokens': cached}, completion_tokens_details={'reasoning_tokens': r})\n"
        "    a, b = litellm.cost_per_token(model=model, usage_object=u, service_tier=tier)\n"
        "    out.append(a + b)\n"
        "print(json.dumps(out))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, json.dumps(CALLS)], capture_output=True, text=True,
                       timeout=300, env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    theirs = json.loads(r.stdout.splitlines()[-1])
    ours = [Pricer().cost(_usage(c)).usd for c in CALLS]
    assert ours == pytest.approx(theirs, rel=1e-9)
    # the sum of an attempt's calls is priced per call (each its own tier), then added
    assert Pricer().cost(_usage(*CALLS)).usd == pytest.approx(sum(theirs), rel=1e-9)


def test_an_unknown_model_is_unpriced_with_its_tokens_never_zero():
    u = _usage(("scripted/solve", None, 300, 0, 20, 0))
    cost = Pricer().cost(u)
    assert cost.usd is None and (cost.input, cost.output) == (300, 20)
    assert cost.unpriced == (
        "scripted/solve: not in LiteLLM's model cost map (give --price scripted/solve=in,cached,out)",
    )
    # the model name is the agent's: the hint quotes it, so pasting it runs nothing (a probe of
    # the reports, 2026-12-06: `x$(touch /tmp/pwned)` was pasted into the hint as it was)
    (hint,) = Pricer().cost(_usage(("x$(touch /tmp/pwned)", None, 1, 0, 1, 0))).unpriced
    assert hint.endswith("(give --price 'x$(touch /tmp/pwned)=in,cached,out')")
    # one unpriced call makes the whole attempt unpriced: part of its calls is not its cost
    assert Pricer().cost(_usage(CALLS[0], ("scripted/solve", None, 300, 0, 20, 0))).usd is None
    # an override prices it (with or without the provider prefix the request sent)
    assert Pricer([parse_price("scripted/solve=1,0.1,2")]).cost(u).usd == pytest.approx(300e-6 + 40e-6)
    assert Pricer([parse_price("other/solve=1,0.1,2")]).cost(u).usd == pytest.approx(340e-6)


def test_the_map_identity_is_litellms_version_and_the_files_sha256():
    from importlib.metadata import version

    ident = cost_map.identity()
    assert ident.litellm_version == version("litellm") and ident.sha256 and len(ident.sha256) == 64
    assert ident.sha256[:12] in Pricer().source_line() and ident.litellm_version in Pricer().source_line()


# ------------------------------------------------------------------------- the report and a tree


def _model_tree(handmade, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    shutil.copytree(voided_root(handmade), voided_root(out), symlinks=True)
    return out


#: per arm, a factor of every call's tokens; task i's call has 1000 (i + 2) input tokens
FACTOR = {"plain": 1, "goal": 2, "heartbeat": 3}
PRICE = "hand/model=1,0.5,10"  # USD per million: 1 in, 0.5 cached, 10 out


def _call(w: LedgerWriter, task: str, arm: str, stamp: str, inp: int, out_tokens: int, model: str) -> None:
    w.write({
        "kind": L.CALL, "v": L.SCHEMA, "at": 1.7e9, "gateway": "g1", "host": None, "attempt": f"{arm}-{task}-{stamp}",
        "task": task, "arm": arm, "stamp": stamp, "method": "POST", "path": "/v1/responses",
        "params": {"model": model}, "outcome": L.OK, "status": 200,
        "usage": {"input": inp, "cached": 0, "output": out_tokens, "reasoning": 0},
    })  # fmt: skip


def _ledger(out, model: str = "hand/model") -> None:
    """One call per done cell (task i of an arm of factor f: 1000 (i + 2) f input and 100 f output
    tokens, so at PRICE $0.001 (i + 3) f; $0.150 f an arm), the errored heartbeat t00 attempt $0.05, the voided
    plain t01 attempt $0.02."""
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    for i, task in enumerate(TASKS):
        for arm, f in FACTOR.items():
            _call(w, task, arm, STAMP, 1000 * (i + 2) * f, 100 * f, model)
    _call(w, "t00", "heartbeat", EARLY, 40_000, 1000, model)  # 0.04 + 0.01
    _call(w, "t01", "plain", EARLY, 10_000, 1000, model)  # 0.01 + 0.01
    w.close()


def _done_cost(i: int, arm: str) -> float:
    return 0.001 * (i + 3) * FACTOR[arm]


def test_the_report_prices_cells_and_arms_from_the_ledger(handmade, tmp_path):
    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    rep = build_report(RunModel.load(out), prices=[PRICE])
    assert rep["schema"] == "marathon-report-v4"
    for i, task in enumerate(TASKS):
        for arm in FACTOR:
            c = rep["cells"][task][arm]
            assert c["ledger_cost_usd"] == pytest.approx(_done_cost(i, arm)), (task, arm)
            assert c["cost_usd"] == COST[arm]  # harbor's own figure stays what it was
    assert rep["cells"]["t00"]["heartbeat"]["ledger_spend_usd"] == pytest.approx(
        _done_cost(0, "heartbeat") + 0.05
    )
    assert rep["cells"]["t01"]["plain"]["ledger_spend_usd"] == pytest.approx(_done_cost(1, "plain") + 0.02)
    extra = {"plain": 0.02, "goal": 0.0, "heartbeat": 0.05}
    for arm, f in FACTOR.items():
        s = rep["arm_summary"][arm]
        arm_cost = 0.001 * f * sum(i + 3 for i in range(15))  # 0.150 f
        assert s["ledger_cost_usd"] == pytest.approx(arm_cost) and s["cost_unpriced"] == []
        assert s["ledger_spend_usd"] == pytest.approx(arm_cost + extra[arm])
    assert (
        rep["prices"]["overrides"] == [PRICE] and rep["prices"]["map"]["sha256"] == cost_map.identity().sha256
    )
    md = render(rep, "md")
    assert "## Cost from the gateway's ledger" in md and rep["prices"]["line"] in md
    assert "heartbeat: cost $0.4500 (scored attempts), spend $0.5000 (every attempt)" in md
    assert rep["prices"]["line"] in render(rep, "html")


def test_an_unpriced_model_shows_unpriced_in_every_format(handmade, tmp_path):
    out = _model_tree(handmade, tmp_path)
    _ledger(out, model="scripted/solve")
    rep = build_report(RunModel.load(out))
    s = rep["arm_summary"]["plain"]
    assert s["ledger_cost_usd"] is None and s["ledger_spend_usd"] is None
    assert s["cost_unpriced"] and "scripted/solve: not in LiteLLM's model cost map" in s["cost_unpriced"][0]
    assert rep["cells"]["t03"]["goal"]["ledger_cost_usd"] is None
    md = render(rep, "md")
    assert (
        "plain: cost unpriced (scored attempts), spend unpriced (every attempt); unpriced: scripted/solve"
        in md
    )
    assert "$0.0000" not in md
    priced = build_report(RunModel.load(out), prices=["scripted/solve=1,0.5,10"])
    assert priced["arm_summary"]["plain"]["ledger_cost_usd"] == pytest.approx(0.150)


def test_calls_cut_before_their_usage_are_counted_as_unmetered_never_as_free(handmade, tmp_path):
    """A call the client or the deadline cut, or a stream that ended without its usage, may be
    billed: the spend is a lower bound by those, said per arm; an error answer is not one of them."""
    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    for task, outcome, status in (
        ("t02", L.CLIENT_CLOSED, 200),
        ("t03", L.OK, 200),
        ("t04", L.UPSTREAM_ERROR, 429),
    ):
        w.write({"kind": L.CALL, "v": L.SCHEMA, "at": 1.7e9, "task": task, "arm": "goal", "stamp": STAMP,
                 "params": {"model": "hand/model"}, "outcome": outcome, "status": status})  # fmt: skip
    w.write({"kind": L.CALL, "v": L.SCHEMA, "at": 1.7e9, "task": "t01", "arm": "plain", "stamp": EARLY,
             "params": {"model": "hand/model"}, "outcome": L.CLIENT_CLOSED, "status": 200})  # fmt: skip
    w.close()
    rep = build_report(RunModel.load(out), prices=[PRICE])
    goal, plain = rep["arm_summary"]["goal"], rep["arm_summary"]["plain"]
    assert goal["ledger_unmetered_calls"] == 2 and goal["ledger_spend_usd"] == pytest.approx(0.300)
    assert plain["ledger_unmetered_calls"] == 1 and plain["ledger_spend_usd"] == pytest.approx(0.150 + 0.02)
    # `status` says so too (it said nothing: found by a review)
    lacks = status_data(RunModel.load(out), "all")["spend_lacks"]
    assert (lacks["unmetered_calls"], lacks["gateway_deaths"]) == ({"plain": 1, "goal": 2}, {})
    assert lacks["line"] == (
        "spend is a lower bound: plain 1 call(s) cut before their usage arrived; "
        "goal 2 call(s) cut before their usage arrived"
    )
    # an attempt whose only call was cut: $0 and counted, never dropped from the spend or taken as free
    led = L.Ledger()
    led.add_rows(
        [{"kind": L.CALL, "at": 1.0, "task": "t", "arm": "a", "stamp": "s", "outcome": L.CLIENT_CLOSED}]
    )
    lone = Pricer().cost(led.usage("t", "a", "s"))
    assert lone is not None and (lone.usd, lone.unmetered) == (0.0, 1)
    assert rep["arm_summary"]["heartbeat"]["ledger_unmetered_calls"] == 0
    md = render(rep, "md")
    assert "goal: cost $0.3000 (scored attempts), spend $0.3000 (every attempt); 2 call(s) cut before" in md
    assert "heartbeat: cost $0.4500 (scored attempts), spend $0.5000 (every attempt)\n" in md


def test_attempts_live_at_a_dead_gateway_make_the_spend_a_lower_bound(handmade, tmp_path):
    """A gateway killed (SIGKILL, OOM) writes no line for the calls it had in flight: those attempts'
    spend is short by them, which the money section says per arm from the outage the restarter
    recorded (``record_outage``, the runner's and `health --fix`'s writer)."""
    from runner.ops.gateway.attempts import AttemptRecord
    from runner.ops.gateway.process import GatewayState, record_outage

    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    state = dict(out=str(out), start_ticks=1, boot_id="b", instance="g", host=None, upstream="u", key_var="K")
    old = GatewayState(pid=10, started=1.7e9, at=1.7e9 + 60, **state)
    new = GatewayState(pid=11, started=1.7e9 + 90, at=1.7e9 + 90, **state)
    live = [AttemptRecord(id=f"a{i}", token_sha256="0" * 64, task=t, arm="goal", stamp=STAMP) for i, t in
            enumerate(("t02", "t03"))] + [AttemptRecord(id="x", token_sha256="1" * 64, task="t99", arm="plain",
                                                         stamp=STAMP)]  # fmt: skip
    record_outage(out, None, old, 1.7e9 + 80, new, "runner", live)
    rep = build_report(RunModel.load(out), prices=[PRICE])
    assert rep["gateway_deaths"] == {"goal": 2}  # t99 is no attempt of the tree
    md = render(rep, "md")
    assert "goal: cost $0.3000 (scored attempts), spend $0.3000 (every attempt); 2 attempt(s) live when" in md
    assert "plain: cost $0.1500 (scored attempts), spend $0.1700 (every attempt)\n" in md
    lacks = status_data(RunModel.load(out), "all")["spend_lacks"]
    assert (
        lacks["gateway_deaths"] == {"goal": 2} and "goal 2 attempt(s) live at a dead gateway" in lacks["line"]
    )


def test_the_spend_tokens_are_the_ledgers_where_the_cells_tokens_are(handmade, tmp_path):
    """Found by a probe: a cell's tokens came from the ledger and its spend tokens (every attempt)
    from harbor's reading of the agent's logs, so on the demo an arm's spend was below its cost.
    Every attempt the ledger has counts its ledger tokens, one it lacks harbor's."""
    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    rep = build_report(RunModel.load(out), prices=[PRICE])
    for i, task in enumerate(TASKS):
        for arm, f in FACTOR.items():
            c = rep["cells"][task][arm]
            if c["status"] != "done" or (task, arm) in (("t00", "heartbeat"), ("t01", "plain")):
                continue
            assert c["tokens_source"] == "ledger", (task, arm)
            assert (c["spend_input_tokens"], c["spend_output_tokens"]) == (1000 * (i + 2) * f, 100 * f)
            assert (c["n_input_tokens"], c["n_output_tokens"]) == (1000 * (i + 2) * f, 100 * f)
    # t00 x heartbeat: its done attempt and its errored one (EARLY: 40,000 + 1,000 on the ledger)
    hb = rep["cells"]["t00"]["heartbeat"]
    assert hb["spend_input_tokens"] == hb["n_input_tokens"] + 40_000
    for arm, s in rep["arm_summary"].items():
        assert s["spend_input_tokens"] >= s["n_input_tokens"], arm


def test_harbors_own_figures_are_reconciled_per_arm_naming_the_attempts(handmade, tmp_path):
    out = _model_tree(handmade, tmp_path)
    # plain's calls say what harbor says (100 in, 10 out, $0.01 at 50/0/500 per million); the other
    # arms' calls differ from harbor's figures
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    for task in TASKS:
        for arm in FACTOR:
            _call(w, task, arm, STAMP, 100 if arm == "plain" else 5000, 10, "hand/model")
    w.close()
    rep = build_report(RunModel.load(out), prices=["hand/model=50,0,500"])
    rec = rep["reconciliation"]
    assert rec["arms"]["plain"]["differ"] == [] and rec["arms"]["plain"]["compared"] == 15
    assert rec["arms"]["plain"]["ledger_usd"] == pytest.approx(0.15) == rec["arms"]["plain"]["harbor_usd"]
    assert len(rec["arms"]["goal"]["differ"]) == 15
    (line,) = [x for x in rec["arm_lines"] if x.startswith("goal:")]
    assert f"t00 ({STAMP}): input tokens: harbor 200, ledger 5000 (-4800)" in line
    assert not any(x.startswith("plain:") for x in rec["arm_lines"])
    assert "**FLAG** harbor's figures differ from the ledger: goal:" in render(rep, "md")


def test_a_cost_is_reconciled_only_where_harbor_priced_the_same_way(handmade, tmp_path):
    """harbor prices with LiteLLM's map alone: a call priced by the map is compared with harbor's cost
    (a difference is flagged), one priced by an operator's --price only by its tokens (harbor cannot
    know the override: the field's scripted model, $0 in harbor, was flagged on every attempt)."""
    out = _model_tree(handmade, tmp_path)
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    for task in TASKS:
        _call(w, task, "plain", STAMP, 200, 20, "gpt-5.5")  # harbor's tokens, its own (other) cost
        _call(w, task, "goal", STAMP, 200, 20, "hand/model")
    w.close()
    rec = build_report(RunModel.load(out), prices=["hand/model=50,0,500"])["reconciliation"]["arms"]
    assert len(rec["plain"]["differ"]) == len(TASKS) and all("cost:" in d for d in rec["plain"]["differ"])
    assert rec["goal"]["differ"] == [], rec["goal"]


def test_with_a_ledger_the_arm_tables_money_is_the_ledgers_and_harbors_cost_is_said_compared_only_where_it_was(
    handmade, tmp_path, capsys
):
    """Found on the demo: its per-arm table (report and `status`) showed harbor's cost, $0.0000 for
    every arm (harbor prices a model its map lacks at $0), beside the ledger's $10.88; and the money
    section said "harbor's own tokens and cost equal the ledger's" where an operator's --price had
    priced every call, so no cost was compared. With a ledger the table's money is the ledger's, and
    the sentence says what was compared."""
    from marathon import cli

    out = _model_tree(handmade, tmp_path)
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    for task in TASKS:  # harbor's own tokens (TOKENS), priced only by the --price below
        for arm, f in FACTOR.items():
            _call(w, task, arm, STAMP, 100 * f, 10 * f, "hand/model")
    w.close()
    rep = build_report(RunModel.load(out), prices=["hand/model=1000,0,10000"])
    s = rep["arm_summary"]["heartbeat"]
    assert s["ledger_cost_usd"] == pytest.approx(15 * 0.6) and s["cost_usd"] == pytest.approx(15 * 0.03)
    md = render(rep, "md")
    (row,) = [ln for ln in md.splitlines() if ln.startswith("| heartbeat | 15 |")]
    assert "| 9.0000 |" in row and "| 0.4500 |" not in row, row  # the ledger's $9.00, not harbor's $0.45
    assert "cost USD (ledger)" in md and "spend USD (ledger)" in md
    assert "equal the ledger's for every compared done cell" in md
    assert (
        "tokens and cost equal" not in md and "cost is not compared (45 priced by an operator's --price" in md
    )
    # a model the prices lack, no --price: not blamed on one (found by a review)
    unpriced = build_report(RunModel.load(out))
    assert unpriced["reconciliation"]["arms"]["plain"]["cost_overridden"] == 0
    line = [ln for ln in render(unpriced, "md").splitlines() if "Harbor's own tokens" in ln]
    assert line and "--price" not in line[0] and "of a model the prices lack" in line[0], line
    assert "9.0000" in render(rep, "html")
    from runner.results import plots  # the cost figure's points: the ledger's too (they sat at harbor's)

    ax = plots.cost(rep).axes[0]
    xs = sorted(float(c.lines[0].get_xdata()[0]) for c in ax.containers)
    assert xs == pytest.approx(sorted(15 * 0.2 * f for f in FACTOR.values())) and "ledger" in ax.get_xlabel()
    _journal(out, {"event": "runner_start", "run_id": "r1", "ts": time.time() - 60, "tasks": list(TASKS),
                   "arms": list(FACTOR), "config": {"model": "hand/model", "prices": ["hand/model=1000,0,10000"]}})  # fmt: skip
    assert cli.main(["status", str(out)]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("heartbeat ")]
    assert line.endswith(" 9.0000"), line
    # priced by the map as harbor prices, harbor's cost is compared and the sentence says so
    out2 = tmp_path / "two"
    shutil.copytree(handmade, out2, symlinks=True)
    w = LedgerWriter(gateway_dir(out2) / "ledger.jsonl")
    for task in TASKS:
        _call(w, task, "plain", STAMP, 100, 10, "gpt-5.5")
    w.close()
    rep2 = build_report(RunModel.load(out2))
    assert rep2["reconciliation"]["arms"]["plain"]["cost_compared"] == len(TASKS)
    assert rep["reconciliation"]["arms"]["plain"]["cost_compared"] == 0


def test_a_tree_whose_ledger_has_some_arms_only_says_which_figures_are_harbors(handmade, tmp_path, capsys):
    """Found by a review: with calls on the ledger for plain alone, `status`'s total read the ledger's
    $3.00 (the other arms, shown at harbor's figures, left out of it) and the cost figure called
    every point the ledger's. The total is the rows' sum, a line names the harbor arms, and the
    figure marks them."""
    from marathon import cli
    from runner.results import plots

    out = _model_tree(handmade, tmp_path)
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    for task in TASKS:
        _call(w, task, "plain", STAMP, 100, 10, "hand/model")  # $0.20 a call at the price below
    w.close()
    _journal(out, {"event": "runner_start", "run_id": "r1", "ts": time.time() - 60, "tasks": list(TASKS),
                   "arms": list(FACTOR), "config": {"model": "hand/model", "prices": ["hand/model=1000,0,10000"]}})  # fmt: skip
    assert cli.main(["status", str(out), "--all"]) == 0
    text = capsys.readouterr().out
    rows = {
        ln.split()[0]: ln.split()[-1]
        for ln in text.splitlines()
        if ln.split()[:1] in (["plain"], ["goal"], ["heartbeat"], ["total"])
    }
    assert rows == {"plain": "3.0000", "goal": "0.3000", "heartbeat": "0.4500", "total": "3.7500"}, rows
    assert "harbor's own for goal, heartbeat (no call of theirs on the ledger)" in text
    rep = build_report(RunModel.load(out), prices=["hand/model=1000,0,10000"])
    ax = plots.cost(rep).axes[0]
    labels = sorted(t.get_text() for t in ax.texts)
    assert (
        labels == ["goal (harbor)", "heartbeat (harbor)", "plain"]
        and "harbor's where marked" in ax.get_xlabel()
    )


# ------------------------------------------------------------------------------------ projection


def test_the_projection_of_pure_inputs_equals_a_hand_computation():
    p = project(
        {
            "a": ArmSpend(spent=10.0, done_costs=[2.0, 4.0], pending=3, running_spent=[1.0, 5.0]),
            "b": ArmSpend(spent=6.0, done_costs=[3.0, 3.0], pending=2),
            "c": ArmSpend(spent=1.0, done_costs=[1.0, math.nan, -4.0, math.inf]),  # nothing left
        },
        elapsed_sec=7200.0,
        cap=40.0,
    )
    # a: mean 3; 3 pending at 3, the running ones at max(3 - 1, 0) + max(3 - 5, 0) = 2 more
    assert p.arms["a"].projected == pytest.approx(10 + 9 + 2)
    assert p.arms["b"].projected == pytest.approx(6 + 6) and p.arms["b"].interval == pytest.approx(
        (12.0, 12.0)
    )
    assert p.arms["c"].projected == 1.0 and p.arms["c"].mean == 1.0  # NaN, negative, inf left out
    assert p.spent == 17.0 and p.rate_per_hour == pytest.approx(8.5) and p.projected == pytest.approx(34.0)
    assert p.time_to_cap_sec == pytest.approx((40 - 17) / 8.5 * 3600) and p.cap_before_completion is False
    lo, hi = p.interval
    assert 17 + 6 + 6 <= lo <= 34 <= hi <= 17 + 3 * 4 + 3 + 6  # a's mean within [2, 4]
    assert project({"a": ArmSpend(1.0, [1.0], pending=2)}).interval is None  # one done: no spread yet
    assert project({"a": ArmSpend(1.0, [], pending=2)}).projected is None  # nothing done: no projection


def test_the_projection_of_a_recorded_tree_equals_a_hand_computation(handmade, tmp_path):
    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    started = 1_796_000_000.0  # 2026-11-29, before every stamp of the tree
    (out / ".runner").mkdir(exist_ok=True)
    (out / ".runner" / "events.jsonl").write_text(json.dumps({
        "event": "runner_start", "run_id": "r1", "ts": started, "tasks": [*TASKS, "t15", "t16"],
        "arms": list(FACTOR), "config": {"model": "hand/model", "prices": [PRICE]},
    }) + "\n")  # fmt: skip
    model = RunModel.load(out)
    p = projection_of(model, model.money(), "run", cap=2.0, now=started + 4 * 3600)
    extra = {"plain": 0.02, "goal": 0.0, "heartbeat": 0.05}
    spent = sum(0.150 * f + extra[a] for a, f in FACTOR.items())  # 0.90 + 0.07
    assert p.spent == pytest.approx(spent) and p.rate_per_hour == pytest.approx(spent / 4)
    # each arm: mean of its 15 done costs (0.010 f) for each of the two pending tasks t15, t16
    for arm, f in FACTOR.items():
        assert p.arms[arm].mean == pytest.approx(0.010 * f) and p.arms[arm].left == 2
        assert p.arms[arm].projected == pytest.approx(0.150 * f + extra[arm] + 2 * 0.010 * f)
    assert p.projected == pytest.approx(spent + 2 * 0.010 * 6)
    assert p.interval[0] <= p.projected <= p.interval[1]
    assert p.time_to_cap_sec == pytest.approx((2.0 - spent) / (spent / 4) * 3600)
    assert projection_of(model, model.money(), "run", now=started + 4 * 3600) == projection_of(
        model, model.money(), "run", now=started + 4 * 3600
    )  # a fixed seed: the same tree, the same figures


def test_the_rate_is_over_the_runs_span_from_its_first_start_to_its_exit(handmade, tmp_path):
    """A runner restarted by `health --fix` is a runner start of its own (``resumed``); the spend
    rate and the time to the cap were taken since it, so the whole run's spend fell in minutes. The
    run began at its first start (a fresh start, not resumed, begins another) and ends at its exit."""
    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    started = 1_796_000_000.0
    start = {"event": "runner_start", "tasks": [*TASKS, "t15", "t16"], "arms": list(FACTOR),
             "config": {"model": "hand/model", "prices": [PRICE]}}  # fmt: skip
    events = out / ".runner" / "events.jsonl"
    events.parent.mkdir(exist_ok=True)
    events.write_text(
        json.dumps({**start, "run_id": "r1", "ts": started}) + "\n"
        + json.dumps({"event": "runner_alive", "run_id": "r1", "ts": started + 3 * 3600 - 60}) + "\n"
        + json.dumps({**start, "run_id": "r2", "ts": started + 3 * 3600, "resumed": True}) + "\n"
    )  # fmt: skip
    model = RunModel.load(out)
    p = projection_of(model, model.money(), "run", cap=2.0, now=started + 4 * 3600)
    # r1 died without its exit line: it worked until its last event (its runner_alive, a minute
    # before the restart), r2 from its start
    assert p.elapsed_sec == pytest.approx(4 * 3600 - 60) and p.rate_per_hour == pytest.approx(
        p.spent / (4 - 1 / 60)
    )
    # a run that ended: its rate is over its span, not to whenever `status` is asked (a probe's fell
    # from $40/h to $30/h in four minutes after the run)
    with events.open("a") as f:
        f.write(json.dumps({"event": "runner_exit", "run_id": "r2", "ts": started + 5 * 3600}) + "\n")
    model = RunModel.load(out)
    for now in (started + 6 * 3600, started + 60 * 3600):
        assert projection_of(model, model.money(), "run", now=now).elapsed_sec == pytest.approx(5 * 3600 - 60)
    with events.open("a") as f:
        f.write(json.dumps({**start, "run_id": "r3", "ts": started + 3.5 * 3600}) + "\n")
    model = RunModel.load(out)
    fresh = projection_of(model, model.money(), "run", now=started + 4 * 3600)
    assert fresh.elapsed_sec == pytest.approx(1800)


def _journal(out, *events: dict) -> None:
    path = out / ".runner" / "events.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def test_the_time_between_a_stop_and_its_resume_is_not_in_the_rate(handmade, tmp_path):
    """Found by a review: the run's span ran from its first start to its last exit, so a run that
    worked 1 h, stopped, and was resumed 10 h later read its 2 h of spend over 12 h ($0.08/h for
    $0.49/h, and its cap 1,225 h away instead of 204 h). The rates are over the time its runners
    ran: each start to its exit (or to the next start, for one that died without an exit)."""
    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    t0 = 1_796_000_000.0
    start = {"event": "runner_start", "tasks": ["t00"], "arms": ["plain"],
             "config": {"model": "hand/model", "prices": [PRICE]}}  # fmt: skip
    _journal(out, {**start, "run_id": "r1", "ts": t0}, {"event": "runner_exit", "run_id": "r1", "ts": t0 + 3600},
             {**start, "run_id": "r2", "ts": t0 + 11 * 3600, "resumed": True})  # fmt: skip
    m = RunModel.load(out)
    p = projection_of(m, m.money(), "run", cap=100.0, now=t0 + 12 * 3600)
    assert p.elapsed_sec == pytest.approx(2 * 3600) and p.rate_per_hour == pytest.approx(p.spent / 2)
    assert p.time_to_cap_sec == pytest.approx((100.0 - p.spent) / (p.spent / 2) * 3600)
    assert p.tokens_per_hour == pytest.approx(sum(_tokens(m).values()) / 2)
    # a runner that died without its exit line (a full disk, kill -9) worked until its last event,
    # not until the start that resumed it (found by the next review)
    _journal(out, {**start, "run_id": "r1", "ts": t0},
             {"event": "job_finish", "run_id": "r1", "ts": t0 + 3600, "task": "t00", "arm": "plain"},
             {**start, "run_id": "r2", "ts": t0 + 11 * 3600, "resumed": True})  # fmt: skip
    m = RunModel.load(out)
    assert projection_of(m, m.money(), "run", now=t0 + 12 * 3600).elapsed_sec == pytest.approx(2 * 3600)


def _tokens(m: RunModel) -> dict[str, int]:
    money = m.money()
    return {a.stamp + a.task + a.arm_dir: c.input + c.output for a in m.attempts() if (c := money.attempt(a))}


def test_a_fresh_run_on_a_finished_tree_spends_at_its_own_rate(handmade, tmp_path, capsys):
    """Found by a review: a fresh run that plans the pairs an earlier run finished (and runs none
    of them) holds their attempts in its scope, and its rates took their spend over its own first
    minute: `status` said $58/h and the cap 4 minutes away. The rates are of the current run's own
    attempts; the scope's spend is still the run's spend."""
    from marathon import cli

    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    now = time.time()
    start = {"event": "runner_start", "tasks": list(TASKS), "arms": ["plain", "goal", "heartbeat"],
             "config": {"model": "hand/model", "prices": [PRICE]}}  # fmt: skip
    _journal(out, {**start, "run_id": "r1", "ts": now - 49 * 3600},
             {"event": "runner_exit", "run_id": "r1", "ts": now - 48 * 3600}, {**start, "run_id": "r2", "ts": now - 60})  # fmt: skip
    m = RunModel.load(out)
    p = projection_of(m, m.money(), "run", cap=5.0, now=now)
    assert p.spent and p.spent > 0 and p.rate_per_hour == 0 and p.time_to_cap_sec is None
    assert m.run_spend(m.money()) == (None, None)
    assert cli.main(["status", str(out)]) == 0
    assert "($0.00/h)" in capsys.readouterr().out


def test_the_arms_and_the_total_row_summed_in_one_pass_are_each_summary_on_its_own(handmade, tmp_path):
    """`marathon status` sums every arm and the total row in one pass over the cells
    (``arm_summaries``): each is exactly ``arm_summary`` of its own cells, with a ledger, with
    repeats, in both readings, and a cell of an arm not asked for counts in the total only."""
    from core import repeats_tree

    from runner.results.report import arm_summaries, arm_summary

    priced = _model_tree(handmade, tmp_path)
    _ledger(priced)
    for out in (priced, repeats_tree.build(tmp_path / "repeats", 2)):
        m = RunModel.load(out)
        money = m.money()
        for scope in ("run", "all"):
            cells = m.scoped(scope)
            every = sorted({k[1] for k in cells})
            for arms in (every, every[1:]):
                for ef in (False, True):
                    per, total = arm_summaries(cells, arms, ef, money)
                    mine = {
                        a: arm_summary([c for k, c in cells.items() if k[1] == a], ef, money) for a in arms
                    }
                    assert per == mine and total == arm_summary(list(cells.values()), ef, money, by_task=True)
                    assert arm_summaries(cells, arms, ef, money, total=False) == (per, None)
        assert money.exists == (out == priced)


def test_a_later_runner_starts_prices_add_to_the_earlier_ones(handmade, tmp_path):
    """Every runner start's recorded --price items price the tree, oldest first, a later one winning
    for its model: a resume that named another model's price left the run's model unpriced."""
    out = _model_tree(handmade, tmp_path)
    _ledger(out)
    events = out / ".runner" / "events.jsonl"
    events.parent.mkdir(exist_ok=True)
    starts = [("r1", [PRICE]), ("r2", ["other/thing=9,9,9"])]
    events.write_text("".join(json.dumps({"event": "runner_start", "run_id": r, "ts": 1_796_000_000.0 + i,
                                          "resumed": i > 0, "config": {"prices": p}}) + "\n"
                              for i, (r, p) in enumerate(starts)))  # fmt: skip
    rep = build_report(RunModel.load(out))
    assert rep["arm_summary"]["plain"]["ledger_cost_usd"] == pytest.approx(0.150)
    with events.open("a") as f:
        f.write(json.dumps({"event": "runner_start", "run_id": "r3", "ts": 1_796_000_009.0, "resumed": True,
                            "config": {"prices": ["hand/model=2,1,20"]}}) + "\n")  # fmt: skip
    rep = build_report(RunModel.load(out))
    assert rep["arm_summary"]["plain"]["ledger_cost_usd"] == pytest.approx(0.300)  # the later price wins
    # a recorded item that no longer parses is left out, and said with the prices (it was silent)
    with events.open("a") as f:
        f.write(json.dumps({"event": "runner_start", "run_id": "r4", "ts": 1_796_000_010.0, "resumed": True,
                            "config": {"prices": ["hand/model=-1,0,0"]}}) + "\n")  # fmt: skip
    rep = build_report(RunModel.load(out))
    assert rep["arm_summary"]["plain"]["ledger_cost_usd"] == pytest.approx(0.300)
    assert rep["prices"]["dropped"] == ["hand/model=-1,0,0"]
    assert "no longer parse, left out: hand/model=-1,0,0" in rep["prices"]["line"]
