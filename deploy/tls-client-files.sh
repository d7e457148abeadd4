#!/usr/bin/env bash
# Copy what a host client of the TLS compose cluster (docker-compose.tls.yml) needs out of its
# `certs` volume: ca.crt (to verify the brokers), client.crt and client.key (User:client):
#
#     deploy/tls-client-files.sh [DIR]        # default deploy/certs (git-ignored)
#     minikafka topic list --bootstrap-server 127.0.0.1:19091 --ssl-cafile DIR/ca.crt \
#         --ssl-certfile DIR/client.crt --ssl-keyfile DIR/client.key
#
# COMPOSE_PROJECT_NAME picks the project (default: deploy/.env's). The files belong to the
# calling user; client.key is readable by that user only.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/compose.sh
DIR="${1:-deploy/certs}"
container="$(compose -f deploy/docker-compose.tls.yml ps -a -q certs | head -n 1)"
if [[ -z "$container" ]]; then
    echo "tls-client-files: no certs container: start the cluster with deploy/up.sh --tls" >&2
    exit 1
fi
mkdir -p "$DIR"
for name in ca.crt client.crt client.key; do
    docker cp "$container:/etc/minikafka/certs/$name" "$DIR/$name"
done
chmod 0644 "$DIR/ca.crt" "$DIR/client.crt"
chmod 0600 "$DIR/client.key"
echo "$DIR"
