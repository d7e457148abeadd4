"""TLS settings are checked once with specific errors: servers (`load_tls`) and clients
(`client_tls`, kafka-python's names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.errors import KafkaConfigurationError
from client.security import client_tls
from minikafka.config import ConfigError
from minikafka.tls import TlsMaterial, load_tls

CERT = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, str]:
    paths = {"cert": tmp_path / "c.crt", "key": tmp_path / "c.key", "ca": tmp_path / "ca.crt"}
    paths["cert"].write_bytes(CERT)
    paths["key"].write_bytes(KEY)
    paths["ca"].write_bytes(CERT)
    (tmp_path / "junk").write_text("hello")
    return {name: str(path) for name, path in paths.items()} | {"junk": str(tmp_path / "junk")}


def test_no_tls_flags_is_plaintext() -> None:
    assert load_tls(None, None, None) is None


def test_all_three_load(pem: dict[str, str]) -> None:
    tls = load_tls(pem["cert"], pem["key"], pem["ca"])
    assert tls is not None
    assert (tls.cert_pem, tls.key_pem, tls.ca_pem) == (CERT, KEY, CERT)


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        pytest.param({"cert": "cert"}, "missing --tls-key, --tls-ca", id="cert alone"),
        pytest.param({"cert": "cert", "key": "key"}, "missing --tls-ca", id="no ca"),
        pytest.param({"ca": "ca"}, "missing --tls-cert, --tls-key", id="ca alone"),
        pytest.param({"cert": "junk", "key": "key", "ca": "ca"}, "not a PEM cert", id="not pem"),
        pytest.param({"cert": "cert", "key": "cert", "ca": "ca"}, "not a PEM private", id="key"),
        pytest.param({"cert": "cert", "key": "key", "ca": "nope"}, "cannot read", id="missing"),
    ],
)
def test_bad_server_tls_is_refused(
    pem: dict[str, str], given: dict[str, str], fragment: str
) -> None:
    paths = {name: pem.get(which, which) for name, which in given.items()}
    with pytest.raises(ConfigError, match=fragment):
        load_tls(paths.get("cert"), paths.get("key"), paths.get("ca"))


def _client(**settings: object) -> TlsMaterial | None:
    base: dict[str, object] = {
        "security_protocol": "PLAINTEXT",
        "ssl_cafile": None,
        "ssl_certfile": None,
        "ssl_keyfile": None,
        "ssl_check_hostname": True,
    }
    return client_tls(**(base | settings))  # type: ignore[arg-type]


def test_client_plaintext_by_default() -> None:
    assert _client() is None


def test_client_ssl(pem: dict[str, str]) -> None:
    tls = _client(security_protocol="SSL", ssl_cafile=pem["ca"])
    assert tls is not None
    assert (tls.ca_pem, tls.cert_pem, tls.key_pem) == (CERT, None, None)
    mutual = _client(security_protocol="SSL", ssl_certfile=pem["cert"], ssl_keyfile=pem["key"])
    assert mutual is not None
    assert (mutual.ca_pem, mutual.cert_pem, mutual.key_pem) == (None, CERT, KEY)


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        pytest.param({"security_protocol": "TLS"}, "must be 'PLAINTEXT' or 'SSL'", id="unknown"),
        pytest.param({"security_protocol": "SASL_SSL"}, "SASL is not supported", id="sasl"),
        pytest.param({"ssl_cafile": "ca"}, "security_protocol is 'PLAINTEXT'", id="ssl unused"),
        pytest.param(
            {"security_protocol": "SSL", "ssl_certfile": "cert"}, "go together", id="no key"
        ),
        pytest.param(
            {"security_protocol": "SSL", "ssl_check_hostname": False},
            "ssl_check_hostname=False is not supported",
            id="no hostname check",
        ),
        pytest.param(
            {"security_protocol": "SSL", "ssl_cafile": "junk"}, "ssl_cafile .*not a PEM", id="pem"
        ),
    ],
)
def test_bad_client_tls_is_refused(
    pem: dict[str, str], settings: dict[str, object], fragment: str
) -> None:
    resolved = {
        name: pem.get(value, value)
        if isinstance(value, str) and name != "security_protocol"
        else value
        for name, value in settings.items()
    }
    with pytest.raises(KafkaConfigurationError, match=fragment):
        _client(**resolved)
