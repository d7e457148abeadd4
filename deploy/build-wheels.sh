#!/usr/bin/env bash
# Build, on the host, every wheel the minikafka image installs, so that the image build needs no
# network (CI machines cannot pull images and the build container need not reach PyPI):
#
#     deploy/build-wheels.sh            # deploy/wheels/{app,deps}: minikafka + runtime deps
#     deploy/build-wheels.sh --spark    # also deploy/spark/wheels: minikafka[spark] + deps
#
# Uses the project virtualenv's Python (PYTHON=... overrides), which must be 3.11 like the image.
# Versions are those CI tested (requirements-ci.lock, as constraints).
# Dependency wheels already present are reused without asking an index; only a missing or changed
# requirement goes to PyPI. The minikafka wheel is rebuilt every time with a fixed timestamp, so
# an unchanged tree gives a byte-identical wheel and Docker's layer cache stays warm.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
SPARK=0
for arg in "$@"; do
    case "$arg" in
        --spark) SPARK=1 ;;
        -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-wheels: unknown argument '$arg' (expected --spark)" >&2; exit 2 ;;
    esac
done
log() { echo "build-wheels: $*" >&2; }

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
    log "$PYTHON is not Python 3.11 (the image's Python); run 'make install' or set PYTHON"
    exit 1
fi
export SOURCE_DATE_EPOCH=315532800  # 1980-01-01: reproducible wheel zip timestamps
export PIP_DISABLE_PIP_VERSION_CHECK=1

# wheels_for TARGET_DIR REQUIREMENT: all wheels REQUIREMENT needs (minikafka itself excluded),
# replacing TARGET_DIR's content only with the freshly resolved set (stale versions disappear).
wheels_for() {
    local target="$1" requirement="$2" fresh
    fresh="$(mktemp -d)"
    mkdir -p "$target"
    if ! "$PYTHON" -m pip wheel --quiet --no-index --find-links "$target" --find-links "$APP" \
        -c requirements-ci.lock -w "$fresh" "$requirement" 2>/dev/null; then
        log "resolving $requirement from the package index"
        rm -rf "$fresh" && fresh="$(mktemp -d)"
        "$PYTHON" -m pip wheel --quiet --find-links "$target" --find-links "$APP" \
            -c requirements-ci.lock -w "$fresh" "$requirement"
    fi
    rm -f "$fresh"/minikafka-*.whl
    find "$target" -maxdepth 1 -name '*.whl' -delete
    cp -p "$fresh"/*.whl "$target"/
    rm -rf "$fresh"
}

APP=deploy/wheels/app
rm -rf "$APP" && mkdir -p "$APP"
rm -rf build/lib build/bdist.* # setuptools' scratch dir: a stale copy would leak deleted modules
# --no-build-isolation: build with the venv's setuptools instead of downloading one. The build
# backend's chatter is shown only when the build fails.
BUILD_LOG="$(mktemp)"
if ! "$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation -w "$APP" . >"$BUILD_LOG" 2>&1 \
    && ! "$PYTHON" -m pip wheel --quiet --no-deps -w "$APP" . >>"$BUILD_LOG" 2>&1; then
    cat "$BUILD_LOG" >&2
    rm -f "$BUILD_LOG"
    log "building the minikafka wheel failed"
    exit 1
fi
rm -f "$BUILD_LOG"
rm -rf build/lib build/bdist.*
WHEEL="$(ls "$APP"/minikafka-*.whl)"
wheels_for deploy/wheels/deps "$WHEEL"
log "$(ls deploy/wheels/deps | wc -l) dependency wheels + $(basename "$WHEEL") in deploy/wheels"

if [[ "$SPARK" == 1 ]]; then
    wheels_for deploy/spark/wheels "$WHEEL[spark]"
    cp -p "$WHEEL" deploy/spark/wheels/
    log "$(ls deploy/spark/wheels | wc -l) wheels in deploy/spark/wheels"
fi
