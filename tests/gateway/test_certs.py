"""The preflight's check of the gateway's TLS certificate (runner.ops.gateway.certs): what codex's
TLS (rustls) refuses is named before any attempt, with certificates made here by openssl as an
operator makes them."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest

from runner.ops.gateway.certs import problems


def openssl(*argv: str | Path) -> None:
    subprocess.run(["openssl", *map(str, argv)], check=True, capture_output=True, timeout=60)


def ca(tmp: Path, name: str) -> tuple[Path, Path]:
    crt, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", key, "-out", crt)  # fmt: skip
    return crt, key


def leaf(tmp: Path, by: tuple[Path, Path], san: str) -> Path:
    crt, key, csr, ext = tmp / "gw.crt", tmp / "gw.key", tmp / "gw.csr", tmp / "gw.ext"
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=gw", "-keyout", key, "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", by[0], "-CAkey", by[1], "-CAcreateserial", "-days", "2",
            "-extfile", ext, "-out", crt)  # fmt: skip
    return crt


def test_a_leaf_signed_by_the_ca_for_the_urls_address_passes(tmp_path):
    root = ca(tmp_path, "root")
    cert = leaf(tmp_path, root, "IP:10.0.0.5,DNS:gw.example.org")
    assert problems(str(cert), "https://10.0.0.5:8443/v1", str(root[0])) == []
    assert problems(str(cert), "https://gw.example.org:8443/v1", None) == []


def test_what_codex_would_refuse_is_named_one_line_each(tmp_path):
    root, other = ca(tmp_path, "root"), ca(tmp_path, "other")
    (bad,) = problems(str(root[0]), "https://10.0.0.5/v1", None)[:1]
    assert "is a CA certificate" in bad  # the openssl req -x509 default: rustls's CaUsedAsEndEntity
    cert = leaf(tmp_path, root, "IP:10.0.0.5")
    (wrong_host,) = problems(str(cert), "https://10.0.0.6:8443/v1", None)
    assert "does not name 10.0.0.6" in wrong_host
    (wrong_ca,) = problems(str(cert), "https://10.0.0.5:8443/v1", str(other[0]))
    assert "is not signed by --gateway-ca" in wrong_ca
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    (expired,) = problems(str(cert), "https://10.0.0.5:8443/v1", None, now=later)
    assert "is not valid now" in expired
    (missing,) = problems(str(tmp_path / "nope.crt"), None, None)
    assert "nope.crt" in missing
    (tmp_path / "junk.crt").write_text("not a certificate")
    assert problems(str(tmp_path / "junk.crt"), None, None) == [
        f"--gateway-tls-cert {tmp_path / 'junk.crt'}: not a PEM certificate"
    ]


def test_the_preflight_refuses_a_run_whose_certificate_codex_would_refuse(tmp_path):
    """``marathon run --env <remote> --gateway-url ... --gateway-tls-cert <a CA certificate>``: one
    line naming the certificate, before any attempt (the run's own preflight, not a later failure)."""
    from runner.schedule import preflight
    from runner.schedule.config import resolve

    root = ca(tmp_path, "root")
    cert = leaf(tmp_path, root, "IP:127.0.0.1")
    tasks = Path(__file__).resolve().parents[2] / "runner" / "demo" / "tasks"

    def check(cert_path: Path) -> list[preflight.Problem]:
        flags = {"tasks_dir": str(tasks), "arms": ["plain"], "model": "scripted/solve",
                 "gateway_url": "https://127.0.0.1:8443/v1", "gateway_tls_listen": "127.0.0.1:8443",
                 "gateway_tls_cert": str(cert_path), "gateway_tls_key": str(tmp_path / "gw.key"),
                 "gateway_ca": str(root[0])}  # fmt: skip
        return preflight.check_model(resolve(tmp_path / f"out-{cert_path.stem}", flags, environ={}))

    assert check(cert) == []
    got = check(root[0])  # the CA's own certificate as the server's: a CA, and no name of the URL's
    assert [p.check for p in got] == ["gateway", "gateway"], got
    assert "is a CA certificate" in got[0].what and "does not name 127.0.0.1" in got[1].what, got


@pytest.mark.parametrize(
    "url",
    ["http://gw.example.org/v1", "https://", "https://gw.example.org/proxy/v1", "https://gw:notaport/v1",
     "https://user@gw.example.org/v1", "https://gw.example.org/v1?x=1"],
)  # fmt: skip
def test_a_gateway_url_the_relays_cannot_reach_is_one_line_before_anything(tmp_path, url):
    """The sandboxes' relays (``agents.relay``) pass codex's requests as they are, to HOST:PORT over
    TLS: ``--gateway-url`` must be ``https://HOST[:PORT]/v1`` (a path prefix, a user part, a query
    cannot be served), refused by ``marathon run``'s flags, not in each trial."""
    from runner.errors import UserError
    from runner.schedule.config import resolve

    tasks = Path(__file__).resolve().parents[2] / "runner" / "demo" / "tasks"
    flags = {"tasks_dir": str(tasks), "arms": ["plain"], "model": "scripted/solve", "gateway_url": url}
    with pytest.raises(UserError) as got:
        resolve(tmp_path / "out", flags, environ={})
    assert str(got.value).startswith("--gateway-url: ") and "\n" not in str(got.value), got.value
    assert resolve(tmp_path / "ok", {**flags, "gateway_url": "https://gw.example.org:8443/v1"}, environ={})


def test_a_ca_file_holding_its_private_key_is_refused_and_never_reaches_a_sandbox_whole(tmp_path):
    """``openssl req -x509 -keyout ca.pem -out ca.pem``: the key and the certificate in one file,
    which the relay's TLS loads without complaint; it was copied into every sandbox as it was."""
    from agents.sandbox_host import gateway_ca_certificates
    from agents.session import ArmFailure

    root = ca(tmp_path, "root")
    cert = leaf(tmp_path, root, "IP:10.0.0.5")
    both = tmp_path / "ca.pem"
    both.write_bytes(root[1].read_bytes() + root[0].read_bytes())
    (line,) = problems(str(cert), "https://10.0.0.5:8443/v1", str(both))
    assert "holds a private key" in line and str(both) in line
    assert problems(None, "https://10.0.0.5:8443/v1", str(both)) == [line]  # the CA alone is checked too
    assert problems(None, None, str(root[0])) == []
    sent = gateway_ca_certificates(both)
    assert b"PRIVATE KEY" not in sent and sent.strip() == root[0].read_bytes().strip()
    (tmp_path / "key-only.pem").write_bytes(root[1].read_bytes())
    with pytest.raises(ArmFailure, match="no PEM certificate"):
        gateway_ca_certificates(tmp_path / "key-only.pem")
