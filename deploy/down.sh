#!/usr/bin/env bash
# Stop the compose cluster (every profile) and delete its volumes, i.e. all topic data.
# MINIKAFKA_KEEP_DATA=1 keeps the volumes.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/compose.sh
ARGS=(-v)
if [[ "${MINIKAFKA_KEEP_DATA:-0}" == 1 ]]; then ARGS=(); fi
compose --profile monitoring --profile spark down "${ARGS[@]}" --remove-orphans --timeout 30
