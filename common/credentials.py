"""Secrets and client credentials: bearer tokens and store URLs from files or the environment, never from argv.

A command line is world-readable (`ps`, /proc/<pid>/cmdline), so a token or a database password given as a flag
leaks to every user of the machine. Tokens come from `--token-file PATH`, `$GAUNTLET_TOKEN_FILE` or
`$GAUNTLET_TOKEN`; a store URL with a password from `$GAUNTLET_STORE_URL_FILE` or `$GAUNTLET_STORE_URL`. The flags
that would carry the secret itself refuse it with a message naming the file/environment way.

`ClientCredentials` is what every client side (service to service, CLI to service) presents: the CA bundle that
verifies the server (TLS on when set), a client certificate for servers that require mTLS, and the token.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import grpc

TOKEN_ENV = "GAUNTLET_TOKEN"
TOKEN_FILE_ENV = "GAUNTLET_TOKEN_FILE"
CA_ENV = "GAUNTLET_CA"
CLIENT_CERT_ENV = "GAUNTLET_CLIENT_CERT"
CLIENT_KEY_ENV = "GAUNTLET_CLIENT_KEY"
STORE_URL_ENV = "GAUNTLET_STORE_URL"
STORE_URL_FILE_ENV = "GAUNTLET_STORE_URL_FILE"
MAX_SECRET_BYTES = 64 * 1024  # a token or URL file larger than this is not one


class CredentialError(ValueError):
    """A secret or credential file that cannot be used; the message names the flag or variable and the fix."""


@dataclass(frozen=True)
class ClientCredentials:
    """What a client presents to the services it calls. Empty = plaintext, no token (the local default)."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    token: str | None = field(default=None, repr=False)  # repr=False: never in a log line or a traceback

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials (with the client certificate when set), or None for a plaintext channel."""
        if self.ca is None:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=_read_pem(self.ca, "CA bundle"),
            private_key=_read_pem(self.key, "client key") if self.key else None,
            certificate_chain=_read_pem(self.cert, "client certificate") if self.cert else None,
        )


def _read_pem(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CredentialError(f"cannot read the {what} {path}: {exc.strerror}") from None


class _RefuseSecretOnArgv(argparse.Action):
    """A flag that would put a secret on the command line: refuse it and say where the secret goes instead."""

    def __init__(self, option_strings: list[str], dest: str, remedy: str = "", **kwargs: object) -> None:
        self.remedy = remedy
        super().__init__(option_strings, dest, **kwargs)  # type: ignore[arg-type]

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        parser.error(f"{option_string} would show the secret to every user of this machine (ps); {self.remedy}")


def add_token_arguments(group: argparse._ArgumentGroup | argparse.ArgumentParser, role: str) -> None:
    """--token-file (and a --token that refuses). `role` says what the token does for this program."""
    group.add_argument(
        "--token-file",
        type=Path,
        help=f"file holding the bearer token that {role} (default ${TOKEN_FILE_ENV}, else ${TOKEN_ENV})",
    )
    group.add_argument(
        "--token",
        action=_RefuseSecretOnArgv,
        remedy=f"put the token in a file and pass --token-file PATH, or set ${TOKEN_FILE_ENV} or ${TOKEN_ENV}",
        help=argparse.SUPPRESS,
    )


def add_client_arguments(parser: argparse.ArgumentParser, title: str = "calls to other services") -> None:
    """--ca, --client-cert and --client-key: how this program's outgoing calls authenticate the server and itself."""
    g = parser.add_argument_group(title)
    g.add_argument(
        "--ca",
        type=Path,
        help=f"PEM CA bundle that signed the called services' certificates: call them over TLS (default ${CA_ENV})",
    )
    g.add_argument(
        "--client-cert",
        type=Path,
        help=f"PEM client certificate for services that require mTLS (default ${CLIENT_CERT_ENV})",
    )
    g.add_argument("--client-key", type=Path, help=f"PEM private key of --client-cert (default ${CLIENT_KEY_ENV})")


def read_token(token_file: Path | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token: --token-file, else $GAUNTLET_TOKEN_FILE, else $GAUNTLET_TOKEN; None when none is set."""
    env = os.environ if environ is None else environ
    if token_file is None and env.get(TOKEN_FILE_ENV):
        token_file = Path(env[TOKEN_FILE_ENV])
    if token_file is not None:
        token = _read_secret_file(token_file, "token file")
    elif env.get(TOKEN_ENV):
        token = env[TOKEN_ENV].strip()
    else:
        return None
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise CredentialError(
            "the bearer token must be one line of printable characters without spaces "
            f"(from --token-file, ${TOKEN_FILE_ENV} or ${TOKEN_ENV})"
        )
    return token


def client_credentials(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ClientCredentials:
    """ClientCredentials from add_client_arguments' flags (and --token-file), each defaulting to its variable."""
    env = os.environ if environ is None else environ

    def path(flag_value: Path | None, variable: str) -> Path | None:
        return flag_value if flag_value is not None else (Path(env[variable]) if env.get(variable) else None)

    ca = path(getattr(args, "ca", None), CA_ENV)
    cert = path(getattr(args, "client_cert", None), CLIENT_CERT_ENV)
    key = path(getattr(args, "client_key", None), CLIENT_KEY_ENV)
    if (cert is None) != (key is None):
        raise CredentialError(f"--client-cert and --client-key (${CLIENT_CERT_ENV}, ${CLIENT_KEY_ENV}) go together")
    if cert is not None and ca is None:
        raise CredentialError(f"--client-cert needs --ca (${CA_ENV}): a client certificate is only sent over TLS")
    return ClientCredentials(ca, cert, key, read_token(getattr(args, "token_file", None), env))


def store_url(flag_value: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The campaign store URL: --store-url (refused when it carries a password), else $GAUNTLET_STORE_URL_FILE's
    content, else $GAUNTLET_STORE_URL; None = the caller's default (SQLite under runs/)."""
    env = os.environ if environ is None else environ
    if flag_value:
        if _has_password(flag_value):
            raise CredentialError(
                "--store-url carries a password, which every user of this machine can read with ps; "
                f"put the URL in a file and set ${STORE_URL_FILE_ENV}, or set ${STORE_URL_ENV}"
            )
        return flag_value
    if env.get(STORE_URL_FILE_ENV):
        return _read_secret_file(Path(env[STORE_URL_FILE_ENV]), f"${STORE_URL_FILE_ENV}")
    return env.get(STORE_URL_ENV) or None


def _has_password(url: str) -> bool:
    try:
        return bool(urlsplit(url).password)
    except ValueError:  # a malformed port: not ours to judge here, the store reports it
        return "@" in url


def _read_secret_file(path: Path, what: str) -> str:
    """First line of a small file; the error names the file and never echoes what it holds."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise CredentialError(f"cannot read the {what} {path}: {exc.strerror}") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise CredentialError(f"the {what} {path} is larger than {MAX_SECRET_BYTES} bytes: not a secret file")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise CredentialError(f"the {what} {path} is not UTF-8 text") from None
    lines = text.strip().splitlines()
    if len(lines) != 1:
        raise CredentialError(f"the {what} {path} must hold exactly one line")
    return lines[0].strip()
