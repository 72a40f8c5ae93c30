#!/bin/sh
# `make bench` driver: runs every bench program in BUILD/bench/ and the Python
# benches below, from the repository root, printing their figures. Each bench
# prints its own ratios against a baseline measured in the same run and exits
# non-zero when it misses its target; this script runs them all anyway and
# exits 1 if any missed.
#
#   bench/run.sh [BUILD]        BUILD defaults to build
#
# Adding a bench: a C file in bench/ is built and run with no edit here.
# A Python bench: add one `py` line at the end of this file.
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
PYTHON=${PYTHON:-python3}
export TRAINPERF_BUILD="$BUILD" PYTHON
status=0

if [ ! -d "$BUILD/bench" ]; then
    echo "bench/run.sh: $BUILD/bench not found: run \`make BUILD=$BUILD\` first" >&2
    exit 2
fi

run() {
    echo "== $*"
    "$@"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "!! $*: exit $rc (target missed or bench failed)"
        status=1
    fi
}

py() {
    run env "PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$@"
}

for b in "$BUILD"/bench/*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    run "$b"
done

# Python benches (one line each). bench/procfs_psutil.py is not listed: it
# is the baseline that bench_procfs drives in the same run.
py bench/bench_analyze.py
py bench/bench_python.py
py bench/bench_autohook.py --all
py bench/bench_backward_hook.py
py bench/bench_comm.py
py bench/bench_exporters_e2e.py
py bench/bench_prom_flood.py
py bench/bench_attach.py
py bench/bench_jobscale.py
py bench/bench_loader.py

exit $status
