#!/usr/bin/env python
"""Container health check: asks a Gauntlet service's grpc.health.v1 Health/Check.

Installed in the images as /usr/local/bin/grpc-health-probe and used by deploy/compose.yaml
(Kubernetes does not need it: its kubelet speaks the gRPC health protocol itself).

    grpc-health-probe [HOST:PORT] [--service NAME] [--timeout SECONDS]

Exit status 0 when the service answers SERVING, 1 otherwise. Plaintext only, like the
kubelet's gRPC probe: a service started with --tls-cert cannot be checked this way.
Health checks are exempt from the services' --token check, so no token is needed.
"""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main() -> int:
    parser = argparse.ArgumentParser(prog="grpc-health-probe")
    parser.add_argument("address", nargs="?", default="127.0.0.1:50051", help="host:port (default 127.0.0.1:50051)")
    parser.add_argument("--service", default="", help="service name to check (default '': the whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    args = parser.parse_args()
    try:
        with grpc.insecure_channel(args.address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
    except grpc.RpcError as exc:
        print(f"{args.address}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{args.address}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
