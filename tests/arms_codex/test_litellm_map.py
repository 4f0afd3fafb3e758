"""agents.litellm_map reads LiteLLM's model map as data and must agree with LiteLLM itself on the
names the arms take, without importing it (the import is what it saves: docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agents import litellm_map

REPO = Path(__file__).resolve().parents[2]
NAMES = [
    "openai/gpt-5.5",
    "openai/gpt-4o",
    "openai/o3",
    "gpt-4o",
    "gpt-5",
    "o3",
    "anthropic/claude-3-5-sonnet-20240620",
    "scripted/solve",
    "scripted/demo",
    "nosuchprovider/some-model",
    "some-unknown-model",
]


@pytest.fixture(scope="module")
def litellm_says() -> dict[str, tuple[str | None, str]]:
    """LiteLLM's own answers, in a child process (so this test process never imports it)."""
    code = (
        "import json, sys, litellm\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try:\n"
        "        m, p, _, _ = litellm.get_llm_provider(model=n)\n"
        "        out[n] = [p, m, n in litellm.model_cost or n.split('/', 1)[-1] in litellm.model_cost]\n"
        "    except Exception:\n"
        "        out[n] = [None, n, n in litellm.model_cost or n.split('/', 1)[-1] in litellm.model_cost]\n"
        "print(json.dumps(out))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *NAMES], capture_output=True, text=True, timeout=300,
                       env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    return {k: (v[0], v[1], v[2]) for k, v in json.loads(r.stdout.splitlines()[-1]).items()}


@pytest.mark.parametrize("name", NAMES)
def test_the_split_and_the_price_check_agree_with_litellm(litellm_says, name):
    provider, model, priced = litellm_says[name]
    assert litellm_map.split_model_name(name) == (provider, model)
    assert litellm_map.priceable(name) is priced


def test_reading_the_map_does_not_import_litellm():
    code = (
        "import sys; from agents import litellm_map as m\n"
        "assert m.cost_map_models() and m.providers() and m.split_model_name('openai/gpt-4o')[0] == 'openai'\n"
        "print('litellm' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
