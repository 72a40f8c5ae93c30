#!/bin/sh
# Re-score saved run directories with two trainperf binaries and diff what
# they say: a change to the diagnosis that must not change behaviour (a
# refactor) shows no difference here.
#
#   scripts/rescore-diff.sh BEFORE_BIN AFTER_BIN [RUN_DIR...]
#
# Without RUN_DIRs it takes every run directory under tests/data/runs (a
# folder of node directories, two-nodes, is reported as one job). Each run
# directory is copied to the same scratch path for each binary (a report may
# recover a run from live/ and write into it), and each binary writes the
# report in every format with its exit status. Exit 0 when both binaries
# said the same everywhere, 1 with the diff otherwise.
set -u
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BIN AFTER_BIN [RUN_DIR...]" >&2; exit 2; }
before=$1 after=$2
shift 2
for b in "$before" "$after"; do
    [ -x "$b" ] || { echo "$0: $b is not an executable" >&2; exit 2; }
done
before=$(realpath "$before") after=$(realpath "$after")
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 0 ]; then
    for d in "$root"/tests/data/runs/*/; do
        set -- "$@" "${d%/}"
    done
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/rescore.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# score BIN OUTDIR: every run directory's reports into OUTDIR
score() {
    mkdir -p "$2"
    for d in "$@"; do
        case $d in "$1"|"$2") continue ;; esac
        name=$(basename "$d")
        rm -rf "$scratch/run"
        mkdir -p "$scratch/run"
        cp -r "$d" "$scratch/run/$name"
        for f in json text md html; do
            (cd "$scratch/run" && "$1" report "$name" --format "$f" \
                > "$2/$name.$f" 2> "$2/$name.$f.err"; echo "exit $?" >> "$2/$name.$f.err")
        done
    done
}
score "$before" "$scratch/before" "$@"
score "$after" "$scratch/after" "$@"
n=$(ls "$scratch/before" | wc -l)
if diff -r "$scratch/before" "$scratch/after" > "$scratch/diff"; then
    echo "rescore: $# run directories, $n outputs, no difference"
    exit 0
fi
head -n 200 "$scratch/diff"
echo "rescore: the two binaries differ (above, the first 200 lines)" >&2
exit 1
