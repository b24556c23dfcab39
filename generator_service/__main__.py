"""python -m generator_service: run testing campaigns."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from common.credentials import (
    CA_ENV,
    CLIENT_CERT_ENV,
    CLIENT_KEY_ENV,
    STORE_URL_ENV,
    STORE_URL_FILE_ENV,
    TOKEN_FILE_ENV,
    CredentialError,
    store_url,
)
from common.endpoints import endpoint_type, endpoints_type
from common.server import add_outgoing_arguments, add_service_arguments, options_from_args, outgoing_credentials, serve
from generator_service.ownership import DEFAULT_LEASE_SECONDS, OWNER_ENV
from generator_service.protected import ProtectedPaths, own_log_files
from generator_service.simulators import (
    SIMULATOR_ENDPOINT_ENV,
    SIMULATOR_STREAMS_ENV,
    streams_from_env,
)
from generator_service.store import CampaignStore, default_store_url

ARTIFACT_ROOT_ENV = "GAUNTLET_ARTIFACT_ROOT"


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m generator_service",
        description="Runs testing campaigns (strategy -> simulator -> oracle -> store) and serves their progress "
        "(gauntlet.v1.GeneratorService). Campaigns a previous process left running, or interrupted by its "
        "shutdown, are resumed on start (--no-resume-interrupted: not).",
    )
    parser.add_argument(
        "--simulator-endpoint",
        type=endpoints_type("--simulator-endpoint"),
        default=os.environ.get(SIMULATOR_ENDPOINT_ENV),
        required=not os.environ.get(SIMULATOR_ENDPOINT_ENV),
        help="host:port of the simulator service, or several comma-separated (host1:port,host2:port), or "
        "dns:///name:port (every replica the name resolves to, resolved again when a connection breaks); one "
        f"campaign's batches are split into shards run on all of them at once (default ${SIMULATOR_ENDPOINT_ENV})",
    )
    parser.add_argument(
        "--simulator-streams",
        type=int,
        help="RunEpisodes streams (shards) per batch, spread round-robin over the simulator endpoints (1..256; "
        f"default ${SIMULATOR_STREAMS_ENV}, else one per listed endpoint and 4 per dns:/// name)",
    )
    parser.add_argument(
        "--oracle-endpoint",
        type=endpoint_type("--oracle-endpoint"),
        required=True,
        help="host:port of the oracle service",
    )
    parser.add_argument(
        "--store-url",
        default=None,
        help=f"SQLAlchemy URL of the campaign store without a password (default ${STORE_URL_FILE_ENV}'s content, "
        f"else ${STORE_URL_ENV}, else sqlite:///runs/store/gauntlet.db); a PostgreSQL URL with its password, "
        "postgresql+psycopg://user:pass@host/db, goes in one of those variables, never on the command line. "
        "No strategy parameter may name the store's files, its logs or its credentials",
    )
    parser.add_argument(
        "--retry-seconds",
        type=float,
        default=60.0,
        help="how long to retry an unavailable simulator/oracle before interrupting (default 60)",
    )
    parser.add_argument(
        "--no-resume-interrupted",
        "--no-resume",
        dest="no_resume",
        action="store_true",
        help="do not resume, on start, the campaigns a previous generator left running or interrupted by its "
        "shutdown (they wait for `gauntlet resume ID`)",
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=DEFAULT_LEASE_SECONDS,
        help="how long a campaign's ownership lasts unless this generator renews it (every third of it); another "
        "replica on the same store takes a campaign over once its owner's lease ran out (2..3600, default "
        f"{DEFAULT_LEASE_SECONDS:g}; owner id ${OWNER_ENV}, else host/pid/random)",
    )
    parser.add_argument(
        "--artifact-root",
        type=Path,
        default=Path(os.environ.get(ARTIFACT_ROOT_ENV) or "runs"),
        help="folder that campaigns' surrogate and log strategy parameters are relative to; a path outside it is "
        f"refused (default ${ARTIFACT_ROOT_ENV}, else runs)",
    )
    add_service_arguments(parser, port=50054, metrics_port=9104)
    add_outgoing_arguments(parser)
    args = parser.parse_args()
    if not 2.0 <= args.lease_seconds <= 3600.0:
        raise SystemExit(f"error: --lease-seconds must be in [2, 3600], got {args.lease_seconds:g}")
    options = options_from_args(args)
    credentials = outgoing_credentials(args)
    try:
        url = store_url(args.store_url)
    except CredentialError as exc:
        raise SystemExit(f"error: {exc}") from None
    from common.errors import InvalidArgument
    from generator_service.server import GeneratorServicer, register
    from generator_service.strategies import strategies

    store = CampaignStore(url or default_store_url())
    try:
        streams = args.simulator_streams if args.simulator_streams is not None else streams_from_env()
        servicer = GeneratorServicer(
            store,
            args.simulator_endpoint,
            args.oracle_endpoint,
            args.retry_seconds,
            credentials=credentials,
            artifact_root=args.artifact_root,
            simulator_streams=streams,
            protected=protected_paths(store, args),
            lease_seconds=args.lease_seconds,
        )
    except InvalidArgument as exc:
        raise SystemExit(f"error: {exc}") from None
    # import every strategy plug-in now: the first campaign after a start should not pay for it (0.3 s here)
    strategies()
    if not args.no_resume:
        # before serving: a client that reconnects to this generator then finds the campaign running again. Their
        # first calls may meet a simulator that is still starting; the campaign retries them.
        servicer.resume_unfinished()
    servicer.start_ownership(adopt=not args.no_resume)
    serve(
        "generator", options, lambda server: register(server, servicer), on_stop=servicer.stop_all, ready=servicer.ready
    )


def protected_paths(store: CampaignStore, args: argparse.Namespace) -> ProtectedPaths:
    """What no strategy parameter may name: the store's files and folder, the files this process logs to and their
    folder, and every credential it reads, with its folder (runs/secure/<suite> in a local --secure suite)."""
    files, folders = store.own_files()
    logs = own_log_files()
    secrets = [
        Path(p)
        for p in (
            args.tls_cert,
            args.tls_key,
            args.tls_client_ca,
            getattr(args, "token_file", None) or os.environ.get(TOKEN_FILE_ENV),
            os.environ.get(STORE_URL_FILE_ENV),
            getattr(args, "ca", None) or os.environ.get(CA_ENV),
            getattr(args, "client_cert", None) or os.environ.get(CLIENT_CERT_ENV),
            getattr(args, "client_key", None) or os.environ.get(CLIENT_KEY_ENV),
        )
        if p
    ]
    return ProtectedPaths.of(
        [*files, *logs, *secrets], [*folders, *(f.parent for f in logs + secrets)], args.artifact_root
    )


if __name__ == "__main__":
    main()
