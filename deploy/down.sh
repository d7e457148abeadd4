#!/usr/bin/env bash
# Stop the compose cluster (every profile, with or without TLS) and delete its volumes, i.e. all
# topic data and the TLS certificates.
# MINIKAFKA_KEEP_DATA=1 keeps the volumes.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/compose.sh
ARGS=(-v)
if [[ "${MINIKAFKA_KEEP_DATA:-0}" == 1 ]]; then ARGS=(); fi
compose -f deploy/docker-compose.tls.yml --profile monitoring --profile spark down "${ARGS[@]}" --remove-orphans --timeout 30
