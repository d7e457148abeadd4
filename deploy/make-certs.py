"""Development certificates for the compose cluster's TLS override (docker-compose.tls.yml).

Run once by the one-shot `certs` service into the shared `certs` volume, with the code of
`minikafka dev --tls` (minikafka_cli.dev_certs): a CA (`ca.crt`), one certificate per process
named after its compose service (`controller-1.crt` ...; subject `CN=<service>`, SANs the
service name, localhost and 127.0.0.1, usable as server and as client certificate for mutual
TLS) and `client.crt` / `client.key` for clients. Files that exist are kept, so a restart finds
the same CA. With --owner UID:GID (the service runs as root) everything is handed to the
processes' user; keys stay unreadable to anyone else.

    python3 make-certs.py --dir /certs --owner 10001:10001 controller-1 broker-1 ... client
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from minikafka_cli.dev_certs import CertificateError, CertPaths, make_ca, make_certificate

CA_DAYS = 365
CERT_DAYS = 365


def ensure(directory: Path, names: list[str]) -> list[Path]:
    """The CA and one certificate per name in `directory` (made when missing); all paths."""
    ca = CertPaths(cert=directory / "ca.crt", key=directory / "ca.key")
    if not (ca.cert.exists() and ca.key.exists()):
        ca = make_ca(directory, common_name="minikafka-compose-ca", days=CA_DAYS)
    paths = [ca.cert, ca.key]
    for name in names:
        cert = CertPaths(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
        if not (cert.cert.exists() and cert.key.exists()):
            cert = make_certificate(
                ca, directory, name, common_name=name, hosts=(name,), days=CERT_DAYS
            )
        paths += [cert.cert, cert.key]
    return paths


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="where the PEM files go")
    parser.add_argument("--owner", help="UID:GID to hand the files to (needs root)")
    parser.add_argument("names", nargs="+", help="one certificate per name (CN and SAN)")
    args = parser.parse_args(argv)
    owner: tuple[int, int] | None = None
    if args.owner:
        uid, _, gid = args.owner.partition(":")
        if not (uid.isdigit() and gid.isdigit()):
            parser.error(f"--owner must be UID:GID (numbers), got {args.owner!r}")
        owner = (int(uid), int(gid))
    try:
        paths = ensure(args.dir, args.names)
    except CertificateError as exc:
        print(f"make-certs: {exc}", file=sys.stderr)
        return 1
    (args.dir / "ca.srl").unlink(missing_ok=True)
    for path in [args.dir, *paths]:
        if owner is not None:
            os.chown(path, *owner)
        if path.suffix == ".key":
            path.chmod(0o600)
        elif path.is_file():
            path.chmod(0o644)
    print(f"make-certs: {len(paths) // 2 - 1} certificates and the CA in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
