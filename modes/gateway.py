"""The model gateway's contract with the sandbox: what the runner, the gateway and the arms must spell
identically, so it lives below all three.

Why a gateway: the agent under test runs as root in its sandbox, so whatever credential enters the
sandbox is the agent's. With the gateway (``runner.ops.gateway``) the real model key stays in one
host process; a sandbox gets a random per-attempt token that the gateway accepts only for that
attempt, only while it runs, only within its model budget. On local Docker the sandbox reaches the
gateway through a unix socket bind-mounted at ``SANDBOX_SOCKET_DIR`` (one socket per attempt) and a
small relay the in-sandbox driver starts on the sandbox's own loopback (``agents.relay``); codex's
provider base URL is the relay's (``RELAY_BASE_URL``), the same for every arm, and codex's
``env_key`` names ``TOKEN_VAR``. A remote sandbox reaches the gateway's TLS URL instead, through the
same relay (the TLS client there): codex's base URL is the relay's on both routes.
"""

from __future__ import annotations

from urllib.parse import urlsplit

#: where the attempt's socket dir is bind-mounted (read-only) inside the trial's container
SANDBOX_SOCKET_DIR = "/run/marathon-gateway"
#: the socket's name in its dir (on the host: one dir per attempt)
SOCKET_NAME = "gw.sock"
SANDBOX_SOCKET = f"{SANDBOX_SOCKET_DIR}/{SOCKET_NAME}"
#: the relay listens here, on the sandbox's own loopback (the scripted model of the old route used 18080)
RELAY_HOST = "127.0.0.1"
RELAY_PORT = 18791
RELAY_BASE_URL = f"http://{RELAY_HOST}:{RELAY_PORT}/v1"
#: the variable that holds the attempt's token: in harbor's environment (the runner puts it there),
#: then in codex's (its ``env_key``); never the real key
TOKEN_VAR = "MARATHON_GATEWAY_TOKEN"
#: the variable that names, in harbor's environment, the host file the gateway writes when the attempt
#: has spent its own spend cap (``--max-spend-attempt``): the agent's host side ends the phase at it
CUT_VAR = "MARATHON_GATEWAY_CUT"
#: the gateway's refusal code for such an attempt's calls, and its receipt's ``stop_reason``
SPEND_CAP_ATTEMPT = "spend_cap_attempt"
#: the gateway's refusal code for the calls of an attempt whose model budget is spent
BUDGET_EXHAUSTED = "budget_exhausted"
#: the refusals that end an attempt's model work at the wire, scored as the deadline is. Each refusal's
#: message starts with ``<code>:``, and codex puts that message in its error text (``unexpected
#: status 402 Payment Required: spend_cap_attempt: ...``), so the harness knows the end from a failure
WIRE_ENDS = (BUDGET_EXHAUSTED, SPEND_CAP_ATTEMPT)


def names_wire_end(text: str) -> bool:
    """True when codex's error text carries the gateway's refusal of a spent budget or spend cap."""
    return any(f"{code}:" in text for code in WIRE_ENDS)


#: ``--ak gateway=local``: the relay to the mounted socket; ``--ak gateway=https://...``: a TLS URL
LOCAL = "local"
#: where a remote sandbox gets the CA of the gateway's certificate (``--ak gateway_ca=HOST_PATH``,
#: uploaded; public, not a secret): the relay's TLS client trusts it
SANDBOX_CA = "/tmp/marathon-gateway-ca.pem"
#: the header the gateway sets on every forwarded request (OpenAI's own request-tracing header):
#: ``<attempt id>.<n>``, so the upstream's records and the ledger can be joined call by call
REQUEST_ID_HEADER = "x-client-request-id"
#: the model base URL that makes the gateway start the scripted model (``agents/scripted_model``)
#: next to itself, on a unix socket, as its upstream: the demo's and the tests' provider
SCRIPTED_UPSTREAM = "scripted"


def tls_address(url: str) -> tuple[str, int]:
    """(host, port) of the gateway's ``https://HOST[:PORT]/v1`` URL (the remote route), or ValueError
    saying why not. The relay passes codex's requests as they are, so the URL's path is codex's own
    (``/v1``): a gateway behind a path prefix cannot be reached this way."""
    try:
        u = urlsplit(url)
        port = u.port or 443
    except ValueError as exc:
        raise ValueError(f"gateway {url!r}: {exc}") from None
    if u.scheme != "https" or not u.hostname:
        raise ValueError(f"gateway {url!r}: expected https://HOST[:PORT]/v1")
    if u.path.rstrip("/") not in ("", "/v1") or u.query or u.fragment or u.username or u.password:
        raise ValueError(f"gateway {url!r}: the URL must be https://HOST[:PORT]/v1, nothing after /v1")
    return u.hostname, port


def request_id(attempt: str, n: int) -> str:
    return f"{attempt}.{n}"


def attempt_of_request_id(value: str | None) -> str | None:
    """The attempt id a ``REQUEST_ID_HEADER`` value names (None when it names none)."""
    if not value or "." not in value:
        return None
    return value.rsplit(".", 1)[0] or None
