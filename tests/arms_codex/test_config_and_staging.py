"""config.toml in one piece, accepted by the real codex with --strict-config; staging from an empty cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib

from agents.codex_config import ProviderSettings, build_config, render
from agents.staging import SIDECAR, StagingError, check_tree, stage_codex

SETTINGS = ProviderSettings("http://127.0.0.1:18080/v1", "MY_KEY", "scripted/solve")


def _startup(staged, home, config_text: str) -> subprocess.CompletedProcess:
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(config_text)
    env = dict(os.environ, CODEX_HOME=str(home))
    return subprocess.run([str(staged.binary), "app-server", "--strict-config", "--print-startup-config"],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip


def test_config_is_one_piece_with_root_keys_first(staged_codex, tmp_path):
    text = render(build_config(SETTINGS, "/srv/work"))
    data = tomllib.loads(text)
    assert data["sandbox_mode"] == "danger-full-access" and data["approval_policy"] == "never"
    assert data["web_search"] == "disabled" and data["features"]["unbounded_connection_retries"] is False
    assert data["model_providers"]["marathon"]["env_key"] == "MY_KEY"
    assert data["projects"]["/srv/work"]["trust_level"] == "trusted"
    lines = text.splitlines()
    first_table = next(i for i, line in enumerate(lines) if line.startswith("["))
    root_keys = [
        i for i, line in enumerate(lines) if line.split(" = ")[0] in ("model", "sandbox_mode", "web_search")
    ]
    assert len(root_keys) == 3 and max(root_keys) < first_table
    assert _startup(staged_codex, tmp_path / "ok", text).returncode == 0


def test_strict_config_rejects_a_root_key_appended_after_a_table(staged_codex, tmp_path):
    """The field's two-append bug: a root key after a table header lands inside that table."""
    text = render(build_config(SETTINGS, "/app")) + 'sandbox_mode = "danger-full-access"\n'
    proc = _startup(staged_codex, tmp_path / "bad", text)
    assert proc.returncode != 0 and "unknown configuration field `analytics.sandbox_mode`" in proc.stdout


def test_stage_from_an_empty_cache_keeps_the_whole_vendor_tree(tmp_path):
    staged = stage_codex(cache=tmp_path / "cache")
    assert staged.root == tmp_path / "cache" / "codex" / staged.version
    assert (staged.root / "bin" / SIDECAR).is_file() and (staged.root / "codex-path" / "rg").is_file()
    assert staged.version in staged.reported_version
    assert stage_codex(cache=tmp_path / "cache").root == staged.root  # cached: no second fetch
    (staged.root / "bin" / SIDECAR).unlink()
    try:
        check_tree(staged.root)
    except StagingError as exc:
        assert SIDECAR in str(exc)
    else:
        raise AssertionError("a tree without the sidecar passed the check")
    finally:
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # 450 MB: do not keep it in pytest's tmp


def test_other_environments_fail_fast_naming_what_is_missing():
    """``--ak transport=docker-exec`` needs harbor's local Docker environment: anything else (a
    cloud sandbox, a Podman or kata subclass of DockerEnvironment) is refused before any turn,
    naming the default transport that works there."""
    from harbor.environments.docker.docker import DockerEnvironment
    from harbor.environments.kata import KataEnvironment
    from harbor.environments.podman import PodmanEnvironment

    from agents.transport import UnsupportedEnvironment, is_local_docker, transport_for

    class CloudSandbox:  # stands for a non-Docker harbor environment (Modal, Daytona, ...)
        pass

    try:
        transport_for(CloudSandbox(), "calc-partial__abc1234")
    except UnsupportedEnvironment as exc:
        assert "CloudSandbox is not one" in str(exc) and "sandbox-driver" in str(exc)
    else:
        raise AssertionError("a non-Docker environment was accepted")
    # the class tree alone is not the engine: instances without their constructor are enough here
    assert is_local_docker(object.__new__(DockerEnvironment))
    for other in (PodmanEnvironment, KataEnvironment):
        assert not is_local_docker(object.__new__(other)), other
