#!/usr/bin/env bash
# Installs what the build, the tests and the demo need on a fresh Debian 12 machine.
# Idempotent: what is already there is not installed again.
#   Debian: gcc make zlib1g-dev (build); chromium (HTML report test); clang (parser fuzzing);
#           prometheus (promtool and a real scraper for the exporter tests);
#           tmux (`trainperf top` checked on a terminal against a live job);
#           gdb (native stacks of hung processes without the Python hook, docs/failures.md)
#   PyPI:   torch==2.13.0 (CPU), pytest, psutil, lightning, transformers, accelerate,
#           tensorboard (its reader checks our event files), wandb and mlflow (offline/sqlite tests),
#           py-spy (Python stacks of hung processes without the Python hook, docs/failures.md)
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
PY=${PYTHON:-python3}

# --build: only what building and the demo need (no Python packages, no browser).
BUILD_ONLY=0
[ "${1:-}" = "--build" ] && BUILD_ONLY=1
debs="gcc make zlib1g-dev"
[ $BUILD_ONLY = 1 ] || debs="$debs chromium clang pkg-config time python3-venv prometheus tmux gdb"

need_deb=()
for p in $debs; do
    dpkg -s "$p" >/dev/null 2>&1 || need_deb+=("$p")
done
# python3-venv is only needed for Debian's own python3; a pyenv/pip Python has venv built in.
if "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    need_deb=("${need_deb[@]/python3-venv}")
fi
need_deb=($(printf '%s\n' "${need_deb[@]}" | grep -v '^$' || true))
if [ ${#need_deb[@]} -gt 0 ]; then
    echo "install-deps: apt-get install ${need_deb[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_deb[@]}" >/dev/null
fi

[ $BUILD_ONLY = 1 ] && { echo "install-deps: ok (build)"; exit 0; }

# torch first and pinned: an unpinned torch (asked for by lightning) would pull CUDA wheels.
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.") else 1)' 2>/dev/null; then
    echo "install-deps: pip install torch==2.13.0"
    "$PY" -m pip install -q torch==2.13.0
fi
missing=()
for m in pytest psutil lightning transformers accelerate tensorboard wandb mlflow; do
    "$PY" -c "import $m" 2>/dev/null || missing+=("$m")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: pip install ${missing[*]}"
    "$PY" -m pip install -q "${missing[@]}"
fi
# py-spy is a program, not a module: looked for on PATH (pip puts it beside python)
pybin=$("$PY" -c 'import sys, os; print(os.path.dirname(sys.executable))')
if ! command -v py-spy >/dev/null && [ ! -x "$pybin/py-spy" ]; then
    echo "install-deps: pip install py-spy"
    "$PY" -m pip install -q py-spy
fi
echo "install-deps: ok"
