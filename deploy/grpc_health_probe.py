#!/usr/bin/env python
"""Container health check: asks a Gauntlet service's grpc.health.v1 Health/Check.

Installed in the images as /usr/local/bin/grpc-health-probe and used by deploy/compose.yaml and,
as an exec probe, by deploy/k8s (the kubelet's own gRPC probe speaks plaintext only, and the pods
there serve mTLS).

    grpc-health-probe [HOST:PORT] [--service NAME] [--timeout SECONDS]
                      [--ca PEM] [--client-cert PEM --client-key PEM]

Exit status 0 when the service answers SERVING, 1 otherwise. Plaintext unless a CA is given,
with --ca or $GAUNTLET_CA (and a client certificate for mTLS, --client-cert/--client-key or
$GAUNTLET_CLIENT_CERT/$GAUNTLET_CLIENT_KEY): the same settings as the services' own calls.
Health checks are exempt from the services' token check, so no token is needed.
"""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.credentials import ClientCredentials, CredentialError, add_client_arguments, client_credentials


def main() -> int:
    parser = argparse.ArgumentParser(prog="grpc-health-probe")
    parser.add_argument("address", nargs="?", default="127.0.0.1:50051", help="host:port (default 127.0.0.1:50051)")
    parser.add_argument("--service", default="", help="service name to check (default '': the whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    add_client_arguments(parser, "TLS")
    args = parser.parse_args()
    try:
        credentials = client_credentials(args)
    except CredentialError as exc:
        print(f"{args.address}: {exc}", file=sys.stderr)
        return 1
    try:
        with _channel(args.address, credentials) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
    except grpc.RpcError as exc:
        print(f"{args.address}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{args.address}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


def _channel(address: str, credentials: ClientCredentials) -> grpc.Channel:
    tls = credentials.channel_credentials()
    return grpc.secure_channel(address, tls) if tls else grpc.insecure_channel(address)


if __name__ == "__main__":
    sys.exit(main())
