"""Development certificates: a throw-away CA and certificates it signs, made with the
`openssl` command-line tool (no Python dependency).

`make_ca(directory)` writes `ca.crt` / `ca.key`; `make_certificate(ca, directory, name,
common_name=...)` writes `NAME.crt` / `NAME.key` with the subject `CN=<common_name>` (the
principal `User:<common_name>` under the default mapping rule `RULE:^CN=(.*?)(,.*)?$/$1/`)
and subject alternative names for `localhost` and `127.0.0.1` (and any `hosts` given), so
one certificate serves as both a server and a client certificate. Keys are EC P-256,
certificates are valid for `days` days. These are for development and tests only: the CA
key sits next to the certificates.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import msgspec

#: Subject alternative names every development certificate carries.
DEFAULT_HOSTS = ("localhost", "127.0.0.1")
OPENSSL_TIMEOUT_S = 30.0


class CertificateError(Exception):
    """openssl is missing or refused to make a certificate."""


class CertPaths(msgspec.Struct, frozen=True, kw_only=True):
    """Where one certificate and its key are (PEM)."""

    cert: Path
    key: Path


def _openssl(args: Sequence[str], cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise CertificateError("the openssl command is needed to make certificates; install it")
    result = subprocess.run(
        [binary, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=OPENSSL_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _is_ip(host: str) -> bool:
    return all(part.isdigit() for part in host.split(".")) and host.count(".") == 3


def make_ca(directory: Path, *, common_name: str = "minikafka-dev-ca", days: int = 30) -> CertPaths:
    """A self-signed CA (`ca.crt`, `ca.key`) in `directory` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = CertPaths(cert=directory / "ca.crt", key=directory / "ca.key")
    _openssl(
        [
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            str(paths.key),
            "-out",
            str(paths.cert),
            "-days",
            str(days),
            "-subj",
            f"/CN={common_name}",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        directory,
    )
    return paths


def make_certificate(
    ca: CertPaths,
    directory: Path,
    name: str,
    *,
    common_name: str,
    organization: str | None = None,
    hosts: Sequence[str] = (),
    days: int = 30,
) -> CertPaths:
    """`NAME.crt` / `NAME.key` in `directory`, signed by `ca`, subject
    `CN=<common_name>[,O=<organization>]`, SANs `localhost`, `127.0.0.1` and `hosts`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = CertPaths(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    extensions = directory / f"{name}.ext"
    names = list(dict.fromkeys([*DEFAULT_HOSTS, *hosts]))
    san = ",".join(f"IP:{host}" if _is_ip(host) else f"DNS:{host}" for host in names)
    extensions.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        f"subjectAltName={san}\n"
    )
    # Most general part first, so the RFC 2253 form is `CN=<common_name>,O=<organization>`.
    subject = (f"/O={organization}" if organization else "") + f"/CN={common_name}"
    _openssl(
        [
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            str(paths.key),
            "-out",
            str(csr),
            "-subj",
            subject,
        ],
        directory,
    )
    _openssl(
        [
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(ca.cert),
            "-CAkey",
            str(ca.key),
            "-CAcreateserial",
            "-out",
            str(paths.cert),
            "-days",
            str(days),
            "-extfile",
            str(extensions),
        ],
        directory,
    )
    csr.unlink()
    extensions.unlink()
    return paths
