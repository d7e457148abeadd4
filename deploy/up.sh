#!/usr/bin/env bash
# Start the compose cluster and wait until every service is healthy:
#
#     deploy/up.sh                          # controller-1..3 (a quorum) + broker-1..3
#     deploy/up.sh --profile monitoring     # + Prometheus on http://127.0.0.1:9090
#     deploy/up.sh --profile spark          # + Spark master, 2 workers, the example job
#     deploy/up.sh --tls                    # TLS everywhere (docker-compose.tls.yml); copies the
#                                           # client files to deploy/certs/
#
# Builds the wheels on the host (deploy/build-wheels.sh), then the image on python:3.11-slim, or,
# when that image cannot be pulled (no registry access), on the local Debian image of
# deploy/ci-base-image.sh. MINIKAFKA_PYTHON_IMAGE forces a base image. Arguments are Compose's
# global options (profiles), plus --tls; MINIKAFKA_UP_TIMEOUT_S bounds the
# health wait (default 180).
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/compose.sh
log() { echo "up: $*" >&2; }

TLS=0
ARGS=()
for arg in "$@"; do
    if [[ "$arg" == "--tls" ]]; then TLS=1; else ARGS+=("$arg"); fi
done
if [[ "$TLS" == 1 ]]; then ARGS=(-f deploy/docker-compose.tls.yml "${ARGS[@]}"); fi
set -- "${ARGS[@]}"

if [[ -z "${MINIKAFKA_PYTHON_IMAGE:-}" ]]; then
    if docker image inspect python:3.11-slim >/dev/null 2>&1 \
        || docker pull -q python:3.11-slim >/dev/null 2>&1; then
        MINIKAFKA_PYTHON_IMAGE=python:3.11-slim
    else
        log "cannot pull python:3.11-slim: using a locally built Debian base image"
        MINIKAFKA_PYTHON_IMAGE="$(deploy/ci-base-image.sh)"
    fi
fi
export MINIKAFKA_PYTHON_IMAGE

WHEEL_ARGS=()
if [[ " $* " == *" spark "* || " $* " == *"--profile=spark"* ]]; then WHEEL_ARGS=(--spark); fi
deploy/build-wheels.sh "${WHEEL_ARGS[@]}"

compose "$@" build
compose "$@" up -d

deadline=$((SECONDS + ${MINIKAFKA_UP_TIMEOUT_S:-180}))
while :; do
    waiting=()
    for id in $(compose "$@" ps -q); do
        state="$(docker inspect --format '{{.Name}} {{.State.Status}} {{.State.ExitCode}} {{if
            .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id")"
        read -r name status code health <<<"$state"
        case "$status/$code/$health" in
            running/*/healthy | running/*/none | exited/0/none) ;;  # one-shot jobs exit 0
            */unhealthy | dead/* | exited/*)
                compose "$@" logs --tail 50 >&2 || true
                log "${name#/} is $status (exit code $code, health $health)"
                exit 1
                ;;
            *) waiting+=("${name#/}") ;;
        esac
    done
    if [[ ${#waiting[@]} == 0 ]]; then break; fi
    if ((SECONDS > deadline)); then
        log "not healthy in time: ${waiting[*]}"
        exit 1
    fi
    sleep 1
done
compose "$@" ps
log "cluster is up: bootstrap from the host with 127.0.0.1:19091 (also :19092, :19093)"
if [[ "$TLS" == 1 ]]; then
    certs="$(deploy/tls-client-files.sh deploy/certs)"
    log "TLS: clients pass --ssl-cafile $certs/ca.crt --ssl-certfile $certs/client.crt" \
        "--ssl-keyfile $certs/client.key (Python: security_protocol='SSL', ssl_cafile=...)"
fi
