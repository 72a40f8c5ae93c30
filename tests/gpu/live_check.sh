#!/usr/bin/env bash
# `trainperf profile RUN --steps N --memory` on a GPU (docs/cli.md): a CUDA
# training script (tests/data/scripts/live_train.py --device cuda) under
# `trainperf run`, asked for a window and a memory snapshot while it goes.
# Prints the answers and checks: the snapshot loads and holds segments, the
# window's trace holds CUDA kernels. Exit 0 when both hold.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/live-check}
rm -rf "$OUT" && mkdir -p "$OUT"
make -j"$(nproc)" lib build/trainperf >"$OUT/build.log" 2>&1 && make python >>"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 2; }
build/trainperf run --quiet --out "$OUT/run" -- python3 tests/data/scripts/live_train.py \
    "$OUT/STOP" --device cuda >"$OUT/run.log" 2>&1 &
for _ in $(seq 600); do
    [ "$(wc -l <"$OUT/run/steps.csv" 2>/dev/null || echo 0)" -gt 60 ] && break
    sleep 0.2
done
build/trainperf profile "$OUT/run" --steps 3 --memory --json | tee "$OUT/answer.json"
touch "$OUT/STOP"
wait
python3 - "$OUT" <<'PY'
import json, pickle, sys, os
out = sys.argv[1]
a = json.load(open(out + "/answer.json"))["processes"][0]
mem, prof = a["memory"], a["profile"]
assert mem["state"] == "done", mem
snap = pickle.load(open(os.path.join(out, "run", mem["files"][0]), "rb"))
assert snap["segments"], "no segments"
print("snapshot: %d segments, %d bytes reserved" % (len(snap["segments"]), mem["reserved_bytes"]))
assert prof["state"] == "done", prof
tr = json.load(open(os.path.join(out, "run", prof["files"][0])))
kern = [e for e in tr["traceEvents"] if e.get("cat") == "kernel"]
assert kern, "no CUDA kernels in the window"
print("window: steps %d-%d, %d kernels" % (prof["first_step"], prof["last_step"], len(kern)))
PY
