#!/bin/sh
# Creates the three Secrets that deploy/k8s mounts, from a folder written by `gauntlet certs`:
#   gauntlet-tls    ca.crt, server.crt, server.key, client.crt, client.key  (/etc/gauntlet/tls)
#   gauntlet-token  token                                                   (/etc/gauntlet/token)
#   gauntlet-db     password (random; kept in DIR/db-password for you)
# No secret value is committed to the repository, and none passes through a command line here.
# Usage: deploy/k8s/create-secrets.sh DIR
set -eu
dir=${1:?usage: deploy/k8s/create-secrets.sh DIR  (DIR written by: gauntlet certs DIR --host ...)}
kubectl create namespace gauntlet --dry-run=client -o yaml | kubectl apply -f -
kubectl -n gauntlet create secret generic gauntlet-tls \
  --from-file=ca.crt="$dir/ca.crt" \
  --from-file=server.crt="$dir/server.crt" --from-file=server.key="$dir/server.key" \
  --from-file=client.crt="$dir/client.crt" --from-file=client.key="$dir/client.key"
kubectl -n gauntlet create secret generic gauntlet-token --from-file=token="$dir/token"
if [ ! -e "$dir/db-password" ]; then
  (umask 077 && printf '%s' "$(openssl rand -hex 24)" > "$dir/db-password")  # URL-safe: it goes into a store URL
fi
kubectl -n gauntlet create secret generic gauntlet-db --from-file=password="$dir/db-password"
