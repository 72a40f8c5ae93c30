#!/usr/bin/env bash
# The GPU check (docs/gpu.md): on a machine with one NVIDIA GPU, PyTorch with
# CUDA and nvcc, builds what it needs and runs tests/gpu/check.py -- a dozen
# short GPU runs with a known truth, checked figure by figure -- in about 6
# minutes. Writes into OUT (default ./gpu-check-out):
#   gpu-check.log   every check, ok or FAIL, with its value
#   gpu-check.json  the same with each run's figures
#   gpu-runs.tar.gz the run directories, trimmed (tests/data/gpu-runs/ takes them)
#   env.txt         nvidia-smi, torch, libcupti, `trainperf doctor`
#   build.log
# Exit 0 when every check passed, 1 when one failed, 2 when the build failed, 77 when there
# is no NVIDIA GPU.
# Exit 77 (skipped) at once on a machine without an NVIDIA GPU, saying so in one line.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1 && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    doc=""
    [ -x "$BUILD/trainperf" ] && doc=$("$BUILD/trainperf" doctor 2>/dev/null | sed -n 's/^NVML  *[a-z]*  *//p' | head -1)
    echo "gpu-check: no NVIDIA GPU on this machine (no /dev/nvidia0, nvidia-smi lists none${doc:+; trainperf doctor: NVML $doc}): nothing checked, exit 77" >&2
    exit 77
fi
OUT=$(mkdir -p "${1:-gpu-check-out}" && cd "${1:-gpu-check-out}" && pwd)
PY=${PYTHON:-python3}
echo "gpu-check: writing to $OUT"
{
    date; uname -a; nvidia-smi; nvidia-smi -q | sed -n 1,40p
    "$PY" -c 'import torch, sys; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
    command -v nvcc && nvcc --version | tail -2
    echo "libcupti:"; find / -xdev -name 'libcupti.so*' 2>/dev/null | head -20
} >"$OUT/env.txt" 2>&1
echo "gpu-check: building (make -j$(nproc))"
# Warnings stay warnings here: another compiler (the GPU machine's gcc
# flagged a maybe-uninitialized that Debian's gcc 12 did not) must not cost
# a short loan of a GPU; they are counted in the log, and CI keeps -Werror.
export CFLAGS="${CFLAGS:-} -Wno-error"
if ! make -j"$(nproc)" BUILD="$BUILD" lib "$BUILD/trainperf" "$BUILD/libtrainperf-cupti.so" >"$OUT/build.log" 2>&1 ||
   ! make BUILD="$BUILD" PYTHON="$PY" python >>"$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"
    exit 2
fi
echo "gpu-check: $(grep -c 'warning:' "$OUT/build.log") compiler warnings (build.log)"
"$BUILD/trainperf" doctor >>"$OUT/env.txt" 2>&1
echo "gpu-check: running the scenarios"
PYTHONUNBUFFERED=1 "$PY" tests/gpu/check.py --build "$BUILD" --out "$OUT" 2>&1 | tee "$OUT/gpu-check.log"
rc=${PIPESTATUS[0]}
# `trainperf profile --steps N --memory` asked of a CUDA run while it goes
echo "gpu-check: trainperf profile on a running CUDA job" | tee -a "$OUT/gpu-check.log"
if OUT="$OUT/live" timeout 180 bash tests/gpu/live_check.sh >>"$OUT/gpu-check.log" 2>&1; then
    echo "ok   live_profile       window and memory snapshot of a running job" | tee -a "$OUT/gpu-check.log"
else
    echo "FAIL live_profile       see above" | tee -a "$OUT/gpu-check.log"
    rc=1
fi
rm -rf "$OUT/gpu-runs"
"$PY" tests/gpu/trim.py "$OUT/runs" "$OUT/gpu-runs" && tar czf "$OUT/gpu-runs.tar.gz" -C "$OUT" gpu-runs
echo "gpu-check: exit $rc ($OUT)"
exit "$rc"
