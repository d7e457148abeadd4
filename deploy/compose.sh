# Sourced by up.sh and down.sh: COMPOSE=(the Compose tool) and compose() for our file.
# MINIKAFKA_COMPOSE picks the tool ("docker compose" or "docker-compose"); else the first that works.
if [[ -n "${MINIKAFKA_COMPOSE:-}" ]]; then
    read -r -a COMPOSE <<<"$MINIKAFKA_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
else
    echo "neither 'docker compose' nor 'docker-compose' is available" >&2
    exit 1
fi
COMPOSE_FILE_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/docker-compose.yml"
compose() { "${COMPOSE[@]}" -f "$COMPOSE_FILE_PATH" "$@"; }
