#!/bin/sh
# The images' entrypoint: `python -m <role>_service ARGS`, the role being the image's ($GAUNTLET_ROLE), or
# `python -m NAME_service ARGS` when the first argument names a service (deploy/compose.yaml and deploy/k8s name it).
# exec: python becomes PID 1 and gets SIGTERM itself, so it drains its gRPC calls before it exits.
case "${1:-}" in
  *_service) exec python -m "$@" ;;
esac
exec python -m "${GAUNTLET_ROLE:?the image sets GAUNTLET_ROLE}_service" "$@"
