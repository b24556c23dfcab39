"""A throwaway certificate authority, server and client certificates and a bearer token (`--secure`, `gauntlet certs`).

The CA's private key is never written: once the certificates exist nobody can issue more, so the files only serve
the suite they were made for. Every file is created 0600 in a folder that only its owner can enter.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common.credentials import (
    CA_ENV,
    CLIENT_CERT_ENV,
    CLIENT_KEY_ENV,
    TOKEN_FILE_ENV,
    ClientCredentials,
    read_token,
)

LOCAL_HOSTS = ("localhost", "127.0.0.1")  # what the local launcher's endpoints name
VALID_DAYS = 30


@dataclass(frozen=True)
class SuiteCredentials:
    """The files of one secured suite: every service serves with the server certificate and requires client
    certificates signed by the CA plus the token; every client (services and CLI) presents the client certificate
    and the token."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    @property
    def token_file(self) -> Path:
        return self.folder / "token"

    def files(self) -> list[Path]:
        return [self.ca, self.server_cert, self.server_key, self.client_cert, self.client_key, self.token_file]

    def hosts(self) -> list[str]:
        """The names and addresses the server certificate is valid for."""
        cert = x509.load_pem_x509_certificate(self.server_cert.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return [str(n.value) for n in names]

    def server_args(self) -> list[str]:
        """Flags that make a service serve mTLS (the token comes from the environment, see env())."""
        return _flags(("--tls-cert", self.server_cert), ("--tls-key", self.server_key), ("--tls-client-ca", self.ca))

    def client_args(self) -> list[str]:
        """Flags for a service's calls to the others."""
        return _flags(("--ca", self.ca), ("--client-cert", self.client_cert), ("--client-key", self.client_key))

    def env(self) -> dict[str, str]:
        """The variables a client needs (also how services find the token file: never on their command line)."""
        return {
            CA_ENV: str(self.ca.resolve()),
            CLIENT_CERT_ENV: str(self.client_cert.resolve()),
            CLIENT_KEY_ENV: str(self.client_key.resolve()),
            TOKEN_FILE_ENV: str(self.token_file.resolve()),
        }

    def client_credentials(self) -> ClientCredentials:
        return ClientCredentials(self.ca, self.client_cert, self.client_key, read_token(self.token_file))


def _flags(*pairs: tuple[str, Path]) -> list[str]:
    return [part for flag, path in pairs for part in (flag, str(path.resolve()))]


def create_suite_credentials(parent: Path, hosts: Iterable[str] = LOCAL_HOSTS) -> SuiteCredentials:
    """A fresh folder under `parent` (mode 0700) with a new CA, certificates for `hosts` and a random token."""
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="suite-", dir=parent))  # mkdtemp: 0700, a name no other run has
    write_credentials(folder, hosts)
    return SuiteCredentials(folder)


def write_credentials(folder: Path, hosts: Iterable[str]) -> SuiteCredentials:
    """ca.crt, server.crt/.key (for `hosts`, serverAuth), client.crt/.key (clientAuth) and token in `folder`."""
    names = list(dict.fromkeys([*LOCAL_HOSTS, *hosts]))
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gauntlet throwaway CA {now:%Y-%m-%d %H:%M:%S}")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    creds = SuiteCredentials(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _write(creds.ca, ca_cert.public_bytes(serialization.Encoding.PEM))
    for cert_path, key_path, common_name, usage, alt_names in (
        (creds.server_cert, creds.server_key, "gauntlet-server", ExtendedKeyUsageOID.SERVER_AUTH, names),
        (creds.client_cert, creds.client_key, "gauntlet-client", ExtendedKeyUsageOID.CLIENT_AUTH, []),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]), ca_name, key.public_key(), now)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(_alt_names(alt_names)), critical=False)
        _write(cert_path, builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        _write(
            key_path,
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
    _write(creds.token_file, (secrets.token_urlsafe(32) + "\n").encode())
    return creds


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a little clock skew
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=not cert_sign,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _alt_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _write(path: Path, data: bytes) -> None:
    """Created 0600 from the start (never briefly readable by others), replacing an older file."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
