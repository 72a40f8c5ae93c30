#!/usr/bin/env bash
# Installs what the build, the tests and the demo need on a fresh Debian 12 machine.
# Idempotent: what is already there is not installed again.
#   Debian: gcc make zlib1g-dev (build); chromium (HTML report test); clang (parser fuzzing);
#           prometheus (promtool and a real scraper for the exporter tests);
#           tmux (`trainperf top` checked on a terminal against a live job);
#           gdb (native stacks of hung processes without the Python hook, docs/failures.md)
#   PyPI:   torch==2.13.0 (CPU), pytest, pytest-xdist (the suite on every core), psutil, lightning, transformers, accelerate,
#           tensorboard (its reader checks our event files), wandb and mlflow (offline/sqlite tests),
#           jsonschema (the speedscope file checked against its schema),
#           py-spy (Python stacks of hung processes without the Python hook, docs/failures.md)
#
#   scripts/install-deps.sh           install what is missing
#   scripts/install-deps.sh --build   only what building and the demo need (no Python packages)
#   scripts/install-deps.sh --check   say what is missing, install nothing (exit 1 if anything is)
#
# What is installed is read from the package databases (dpkg, importlib.metadata), never by
# importing a package: importing torch, lightning or transformers takes seconds each.
set -euo pipefail

say() { echo "install-deps: $*"; }

MODE=all
case "${1:-}" in
    "") ;;
    --build) MODE=build ;;
    --check) MODE=check ;;
    *) echo "install-deps: unknown option '$1' (use --build, --check or nothing)" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
PY=${PYTHON:-python3}
missing_any=0

debs="gcc make zlib1g-dev"
[ $MODE = build ] || debs="$debs chromium clang pkg-config time python3-venv prometheus tmux gdb"
need_deb=()
if command -v dpkg-query >/dev/null; then
    # one query for all: "name installed" for each one dpkg knows as installed
    installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' $debs 2>/dev/null || true)
    for p in $debs; do
        grep -qx "$p installed" <<<"$installed" || need_deb+=("$p")
    done
else
    say "no dpkg here (not Debian): make sure these are installed: $debs"
fi
# python3-venv is only needed for Debian's own python3; a pyenv/pip Python has venv built in.
if "$PY" -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("venv") and u.find_spec("ensurepip") else 1)' 2>/dev/null; then
    need_deb=($(printf '%s\n' "${need_deb[@]}" | grep -vx 'python3-venv' || true))
fi
if [ ${#need_deb[@]} -eq 0 ]; then
    say "Debian packages: all present ($debs)"
elif [ $MODE = check ]; then
    say "Debian packages missing: ${need_deb[*]}"
    missing_any=1
else
    say "apt-get update (reading the package lists)"
    $SUDO apt-get update -q
    say "apt-get install ${need_deb[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_deb[@]}"
fi

[ $MODE = build ] && { say "ok (build)"; exit 0; }

# The Python packages missing, as pip requirements, from importlib.metadata (one interpreter,
# nothing imported). torch comes first and pinned: torch==2.13.0 when absent, else the version
# installed, so that no other package's requirement (lightning's) swaps it for CUDA wheels.
say "checking Python packages for $PY (importlib.metadata)"
reqs=$("$PY" - <<'EOF'
import os, shutil, sys
from importlib.metadata import version, PackageNotFoundError

def have(dist):
    try:
        return version(dist)
    except PackageNotFoundError:
        return None

torch = have("torch")
want = []
if not (torch and torch.startswith("2.")):
    want.append("torch==2.13.0")
want += [d for d in ("pytest", "pytest-xdist", "psutil", "lightning", "transformers", "accelerate",
                     "tensorboard", "wandb", "mlflow", "jsonschema") if not have(d)]
# py-spy is a program: looked for on PATH and beside the interpreter (where pip puts it)
if not (shutil.which("py-spy") or os.access(os.path.join(os.path.dirname(sys.executable), "py-spy"), os.X_OK)):
    want.append("py-spy")
if want and torch and torch.startswith("2."):
    want.insert(0, "torch==" + torch)
print(" ".join(want))
EOF
)
if [ -z "$reqs" ]; then
    say "Python packages: all present (torch $("$PY" -c 'from importlib.metadata import version; print(version("torch"))'))"
elif [ $MODE = check ]; then
    say "Python packages missing, would run: $PY -m pip install $reqs"
    missing_any=1
else
    say "$PY -m pip install $reqs (one call; pip shows its progress)"
    "$PY" -m pip install $reqs
fi
[ $missing_any = 0 ] || exit 1
say "ok"
