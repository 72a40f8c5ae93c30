#!/bin/sh
# The bundled C trainer under `trainperf run`, in an input-bound setting (the
# data loader sleeps longer than the model computes), ending with the report.
#
#   scripts/demo.sh [BUILD_DIR]        (make demo calls it with $(BUILD))
set -eu
BUILD=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$here/$BUILD ;; esac
cli=$BUILD/trainperf
trainer=$BUILD/examples/trainer
for f in "$cli" "$trainer"; do
    if [ ! -x "$f" ]; then
        echo "demo: $f is missing: run \`make BUILD=$(basename "$BUILD")\` first" >&2
        exit 2
    fi
done
out=$BUILD/demo-run
rm -rf "$out"
echo "demo: $trainer under trainperf run (input-bound: 25 ms of loading per step)" >&2
# The trainer's own exit status is the demo's: trainperf run passes it through.
exec "$cli" run --out "$out" --interval 0.5 -- \
    "$trainer" --steps 200 --batch 64 --hidden 64 --data-delay-ms 25 --quiet
