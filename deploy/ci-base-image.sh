#!/usr/bin/env bash
# Build a local Debian bookworm base image with python3 + venv, for machines that cannot pull
# from any image registry (CI). The project image is then built FROM it:
#
#     deploy/ci-base-image.sh                      # prints the tag: minikafka-base:bookworm
#     MINIKAFKA_PYTHON_IMAGE=minikafka-base:bookworm docker compose -f deploy/docker-compose.yml up
#
# Idempotent: if the image already exists it is reused (a second run takes well under a second);
# `--force` rebuilds it. The Debian mirror is read from this machine's apt sources (one-line
# `deb ...` entries and deb822 `.sources` files), never hard-coded; MINIKAFKA_DEBIAN_MIRROR
# overrides it. Needs root (debootstrap) and a Docker engine. Only stdout carries the tag.
set -euo pipefail

TAG="${MINIKAFKA_BASE_IMAGE:-minikafka-base:bookworm}"
SUITE=bookworm
FORCE=0
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "ci-base-image: unknown argument '$arg' (expected --force)" >&2; exit 2 ;;
    esac
done

log() { echo "ci-base-image: $*" >&2; }

if ! docker info >/dev/null 2>&1; then
    log "no usable Docker engine (docker info failed)"
    exit 1
fi
if [[ "$FORCE" == 0 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
    log "reusing existing image $TAG"
    echo "$TAG"
    exit 0
fi

if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        exec sudo -n --preserve-env=MINIKAFKA_BASE_IMAGE,MINIKAFKA_DEBIAN_MIRROR,http_proxy \
            "$0" "$@"
    fi
    log "debootstrap needs root: run as root or with passwordless sudo"
    exit 1
fi

# One build at a time (a test and `make up` may race); re-check the image under the lock.
LOCK_FILE="${TMPDIR:-/tmp}/minikafka-base-image.lock"
exec 9>"$LOCK_FILE"
if command -v flock >/dev/null 2>&1; then
    flock -w 900 9 || { log "timed out waiting for $LOCK_FILE"; exit 1; }
fi
if [[ "$FORCE" == 0 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
    log "image $TAG was built meanwhile"
    echo "$TAG"
    exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q debootstrap >&2 \
        || { apt-get update -q >&2 && apt-get install -y -q debootstrap >&2; }
fi

# Print "URI SUITE" for every Debian-style entry in the apt sources (one-line and deb822).
apt_entries() {
    local file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f "$file" ]] || continue
        # deb [opts] URI SUITE COMPONENTS...
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$file" \
            | awk '$1 == "deb" && NF >= 3 { print $2, $3 }'
    done
    for file in /etc/apt/sources.list.d/*.sources; do
        [[ -f "$file" ]] || continue
        # Stanzas separated by blank lines; a stanza may list several URIs and suites.
        # (whole-line comments are dropped first: they do not end a stanza).
        sed -e '/^[[:space:]]*#/d' -e 's/#.*//' "$file" | awk '
            function flush(   i, j) {
                if (index(types, " deb ") > 0 && enabled != "no")
                    for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print uris[i], suites[j]
                nu = 0; ns = 0; types = ""; enabled = ""
            }
            /^[[:space:]]*$/ { flush(); next }
            tolower($1) == "types:" { types = " " substr($0, index($0, ":") + 1) " "; gsub(/\t/, " ", types) }
            tolower($1) == "enabled:" { enabled = tolower($2) }
            tolower($1) == "uris:" { for (k = 2; k <= NF; k++) uris[++nu] = $k }
            tolower($1) == "suites:" { for (k = 2; k <= NF; k++) suites[++ns] = $k }
            END { flush() }'
    done
}

pick_mirror() {
    # Prefer an entry for bookworm itself, then any plain Debian suite (not -security, -updates,
    # -backports), so a trixie host still yields its Debian mirror.
    local entries
    entries="$(apt_entries)"
    awk -v s="$SUITE" '$2 == s { print $1; exit }' <<<"$entries" | grep . \
        || awk '$2 !~ /-/ && $1 !~ /security/ { print $1; exit }' <<<"$entries"
}

MIRROR="${MINIKAFKA_DEBIAN_MIRROR:-$(pick_mirror || true)}"
if [[ -z "$MIRROR" ]]; then
    log "found no Debian mirror in /etc/apt/sources.list{,.d/*}; set MINIKAFKA_DEBIAN_MIRROR"
    exit 1
fi
MIRROR="${MIRROR%/}"
SECURITY_MIRROR="$(apt_entries | awk -v s="$SUITE-security" '$2 == s { print $1; exit }')"
log "building $TAG from $MIRROR ($SUITE)"

KEYRING_ARGS=()
if [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
    KEYRING_ARGS=(--keyring=/usr/share/keyrings/debian-archive-keyring.gpg)
fi

WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/minikafka-base.XXXXXX")"
trap 'rm -rf --one-file-system "$WORK"' EXIT
ROOTFS="$WORK/rootfs"

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "${KEYRING_ARGS[@]}" "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 40 "$WORK/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }

# apt inside images built on this base (the monitoring profile) uses the same mirror.
{
    echo "deb $MIRROR $SUITE main"
    echo "deb $MIRROR $SUITE-updates main"
    if [[ -n "$SECURITY_MIRROR" ]]; then echo "deb ${SECURITY_MIRROR%/} $SUITE-security main"; fi
} >"$ROOTFS/etc/apt/sources.list"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
    "$ROOTFS"/var/log/*.log "$ROOTFS"/var/log/apt/*

"$ROOTFS/usr/bin/python3" --version >&2 2>/dev/null || chroot "$ROOTFS" python3 --version >&2

tar --numeric-owner -C "$ROOTFS" -c . \
    | docker import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL org.opencontainers.image.title=minikafka-base org.minikafka.mirror=$MIRROR" \
        - "$TAG" >&2
log "built $TAG"
echo "$TAG"
