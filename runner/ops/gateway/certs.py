"""The operator's certificate for the gateway's TLS route, checked before the first attempt.

Why: in a sandbox a refused certificate is only a failed call, once per attempt, for every arm: the
run ends paused by the circuit breaker with nothing scored. Here it is one line before any attempt.
The TLS client in the sandbox is the relay (``agents.relay``, Python's ssl: OpenSSL); the checks are
the stricter ones of codex's own TLS, rustls (webpki), should codex ever call the URL itself: it
refuses a CA certificate presented as a server's (``CaUsedAsEndEntity``: the self-signed
certificate ``openssl req -x509`` makes by default), ignores the common name (only the subject
alternative names count) and refuses an expired one.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path
from urllib.parse import urlsplit


def _load(path: str, what: str) -> tuple[object | None, str | None]:
    from cryptography import x509

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return None, f"{what} {path}: {exc.strerror or exc}"
    try:
        return x509.load_pem_x509_certificate(data), None
    except ValueError:
        return None, f"{what} {path}: not a PEM certificate"


def ca_key_problem(ca_path: str) -> str | None:
    """The line for a ``--gateway-ca`` file that also holds a private key (``openssl req -x509
    -keyout ca.pem -out ca.pem`` writes both into one file): the file is copied into every remote
    sandbox, where an agent holding the CA's key could sign a certificate every relay trusts."""
    from runner.secrets import key_prefixes

    try:
        text = Path(ca_path).read_bytes().decode("latin-1")
    except OSError:
        return None  # said by the load
    if any(f.kind == "a private key" for f in key_prefixes(text)):
        return (
            f"--gateway-ca {ca_path} holds a private key besides the certificate: it is copied into every "
            "sandbox; give a file with the CA certificate alone (openssl x509 -in FILE -out ca.crt)"
        )
    return None


def problems(
    cert_path: str | None, url: str | None, ca_path: str | None, now: dt.datetime | None = None
) -> list[str]:
    """What codex would refuse in the gateway's certificate (each a line; none: it will connect):
    a CA certificate as the server's, a name of ``url`` it does not carry, a validity that is not
    now, a ``ca`` that did not sign it; and a ``ca`` file that holds a private key
    (``ca_key_problem``). ``cert_path`` None: the CA file alone is checked."""
    from cryptography import x509

    key_line = ca_key_problem(ca_path) if ca_path else None
    if key_line:
        return [key_line]
    if cert_path is None:
        if ca_path:
            got, err = _load(ca_path, "--gateway-ca")
            return [err or ca_path] if got is None else []
        return []
    cert, err = _load(cert_path, "--gateway-tls-cert")
    if cert is None:
        return [err or cert_path]
    assert isinstance(cert, x509.Certificate)
    out: list[str] = []
    try:
        if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            out.append(
                f"--gateway-tls-cert {cert_path} is a CA certificate (basicConstraints CA:TRUE): codex's TLS "
                "refuses it as the server's; give a certificate signed by that CA (docs/gateway.md)"
            )
    except x509.ExtensionNotFound:
        pass
    now = now or dt.datetime.now(dt.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        out.append(
            f"--gateway-tls-cert {cert_path} is not valid now (valid {cert.not_valid_before_utc:%Y-%m-%d %H:%M} "
            f"to {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC)"
        )
    host = urlsplit(url).hostname if url else None
    if host:
        try:
            sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            sans = None
        try:
            ip = ipaddress.ip_address(host)
            names = set(sans.get_values_for_type(x509.IPAddress)) if sans else set()
            covered = ip in names
        except ValueError:
            names = set(sans.get_values_for_type(x509.DNSName)) if sans else set()
            covered = host in names or any(
                n.startswith("*.") and host.endswith(n[1:]) and host.count(".") == n.count(".") for n in names
            )
        if not covered:
            out.append(
                f"--gateway-tls-cert {cert_path} does not name {host} (the host of --gateway-url) among its "
                "subject alternative names: codex checks those, not the common name"
            )
    if ca_path:
        ca, err = _load(ca_path, "--gateway-ca")
        if ca is None:
            out.append(err or ca_path)
        else:
            assert isinstance(ca, x509.Certificate)
            try:
                cert.verify_directly_issued_by(ca)
            except Exception as exc:  # noqa: BLE001 - InvalidSignature, or a key type it cannot check
                out.append(
                    f"--gateway-tls-cert {cert_path} is not signed by --gateway-ca {ca_path} ({type(exc).__name__})"
                )
    return out
