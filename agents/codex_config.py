"""codex ``config.toml``, built as one dict and serialised once with tomli_w.

Why one piece: TOML assigns every bare key after a ``[table]`` header to that table, so the field's
two ``cat >>`` appends silently turned ``web_search`` into ``model_providers.harbor.web_search``.
tomli_w writes all root keys before any table; app-server also runs with ``--strict-config`` so an
unknown key fails at start-up instead of being ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import tomli_w

#: Our provider id: a custom id (not the reserved ``openai``), so codex neither tries WebSockets
#: first nor sends ``internal_chat_message_metadata_passthrough``.
PROVIDER_ID = "marathon"


@dataclass(frozen=True)
class ProviderSettings:
    """Where the model is and which variable holds its key (the name only, never the value)."""

    base_url: str
    api_key_var: str
    model: str
    request_max_retries: int = 2
    stream_max_retries: int = 2
    stream_idle_timeout_ms: int | None = None
    #: codex model catalog (same format as ``codex debug models --bundled``), path in the container;
    #: declaring a custom slug there removes codex's fallback-metadata warning and sets its tool mode
    model_catalog_json: str | None = None


def build_config(provider: ProviderSettings, workdir: str) -> dict:
    """The whole config as data: same for every arm; only the harness around it differs."""
    prov: dict = {
        "name": "marathon provider",
        "base_url": provider.base_url,
        "wire_api": "responses",
        "env_key": provider.api_key_var,
        "request_max_retries": provider.request_max_retries,
        "stream_max_retries": provider.stream_max_retries,
    }
    if provider.stream_idle_timeout_ms is not None:
        prov["stream_idle_timeout_ms"] = provider.stream_idle_timeout_ms
    root: dict = {"model_catalog_json": provider.model_catalog_json} if provider.model_catalog_json else {}
    return root | {
        "model": provider.model,
        "model_provider": PROVIDER_ID,
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "web_search": "disabled",
        "check_for_update_on_startup": False,
        "model_providers": {PROVIDER_ID: prov},
        "projects": {workdir: {"trust_level": "trusted"}},
        # bounded retries: without this codex retries an unreachable endpoint forever
        "features": {"unbounded_connection_retries": False},
        "analytics": {"enabled": False},
    }


def render(config: dict) -> str:
    return tomli_w.dumps(config)
