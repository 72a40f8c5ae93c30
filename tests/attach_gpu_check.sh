#!/usr/bin/env bash
# `trainperf attach PID` on a GPU (docs/cli.md): an input-bound CUDA training
# script (a costly __getitem__, num_workers=0: the GPU idles while the
# training thread waits) under `trainperf run`, then the same script started
# without trainperf and attached to for 20 s. Prints both verdicts and what
# the attached run directory says of the GPU (run.json gpus, the tree's GPU
# memory in procs.csv, NVML utilisation). Exit 0 when the attached run
# directory has the GPU, the process's GPU memory and the run's verdict.
#   OUT=/tmp/attach-gpu tests/attach_gpu_check.sh      (py-spy on PATH)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attach-gpu}
mkdir -p "$OUT"
make -j"$(nproc)" lib build/trainperf >"$OUT/build.log" 2>&1 && make python >>"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 2; }
command -v py-spy >/dev/null || { echo "py-spy not on PATH"; exit 2; }
cat >"$OUT/train_gpu.py" <<'EOF'
import sys, time
import torch

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 1000000
    def __getitem__(self, i):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0015:  # decoding, augmenting...
            pass
        return torch.randn(512), i % 10

model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters())
dl = torch.utils.data.DataLoader(Slow(), batch_size=32, num_workers=0)
end = time.time() + float(sys.argv[1])
first = True
for x, y in dl:
    x = x.cuda()
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if first:
        print("ready", flush=True)
        first = False
    if time.time() > end:
        break
EOF
timeout 150 build/trainperf run --quiet --out "$OUT/run" -- python3 "$OUT/train_gpu.py" 20 \
    >"$OUT/run.log" 2>&1
echo "run rc=$?"
python3 "$OUT/train_gpu.py" 90 >"$OUT/train.out" 2>&1 &
P=$!
for _ in $(seq 240); do grep -q ready "$OUT/train.out" && break; sleep 0.25; done
timeout 150 build/trainperf attach "$P" --duration 20 --out "$OUT/att" >"$OUT/att.log" 2>&1
echo "attach rc=$?"
kill "$P"
wait
rm -f "$OUT"/*/trace.json "$OUT"/*/events.out.tfevents.*
python3 - "$OUT" "$P" <<'PY'
import csv, json, sys
out, pid = sys.argv[1], sys.argv[2]
def first(d):
    s = json.load(open(f"{out}/{d}/summary.json"))["diagnosis"]
    return [s["primary"]["id"]] + [f["id"] for f in s["secondary"]], s
run_ids, _ = first("run")
att_ids, att = first("att")
print("run verdicts:", run_ids)
print("attach verdicts:", att_ids)
print("attached:", {k: v for k, v in att.get("attached", {}).items() if k != "unavailable"})
rj = json.load(open(f"{out}/att/run.json"))
print("attach run.json gpus:", rj["gpus"], "sources:", rj["sources"])
mem = [float(r["gpu_mem_bytes"]) for r in csv.DictReader(open(f"{out}/att/procs.csv"))
       if r["pid"] == pid and r["gpu_mem_bytes"]]
util = [float(r["gpu0_util_pct"]) for r in csv.DictReader(open(f"{out}/att/metrics.csv"))
        if r.get("gpu0_util_pct")]
print("attached process GPU memory samples:", len(mem), "max", max(mem) if mem else None)
print("gpu0 util mean", sum(util) / len(util) if util else None)
ok = bool(rj["gpus"]) and mem and max(mem) > 0 and att_ids[0] == run_ids[0]
print("CHECK", "ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
