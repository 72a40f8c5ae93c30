"""The GPU check: short GPU training runs with a known truth, each under
`trainperf run`, checked figure by figure and verdict by verdict.

    python3 tests/gpu/check.py --build build --out DIR [--only a,b]

Needs one NVIDIA GPU, PyTorch with CUDA, and (for the C scenario) nvcc.
Writes DIR/runs/<scenario>/ (the run directories), DIR/gpu-check.json (every
check with its value) and prints one line per check; exits 1 when a check
failed. scripts/gpu-check.sh builds what it needs and calls this; `make
gpu-check OUT=DIR` calls that."""
import argparse
import csv
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = sys.executable
MiB = 1 << 20


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def findings(report):
    d = (report or {}).get("diagnosis") or {}
    out = []
    if d.get("primary"):
        out.append(d["primary"])
    for k in ("secondary", "findings", "other"):
        for f in d.get(k) or []:
            if isinstance(f, dict):
                out.append(f)
    return out


def gather(build, run_dir, rc, wall_s):
    """What the checks read from a run directory."""
    r = {"rc": rc, "wall_s": round(wall_s, 1), "dir": run_dir}
    s = load_json(os.path.join(run_dir, "summary.json")) or {}
    r["gpu"] = (s.get("steps") or {}).get("gpu") or {}
    r["gpu_windows"] = (s.get("steps") or {}).get("gpu_windows") or {}
    r["steps"] = (s.get("steps") or {}).get("count", 0)
    r["step_p50_ms"] = ((s.get("steps") or {}).get("step_time_ms") or {}).get("p50")
    r["data_share"] = ((s.get("steps") or {}).get("phase_share") or {}).get("data") \
        if isinstance((s.get("steps") or {}).get("phase_share"), dict) else None
    r["nvml"] = [{"util_mean": (g.get("util_pct") or {}).get("mean"),
                  "mem_used_max": (g.get("mem_used_bytes") or {}).get("max"),
                  "power_mean": (g.get("power_w") or {}).get("mean"), "name": g.get("name")}
                 for g in s.get("gpus") or []]
    rep = subprocess.run([os.path.join(build, "trainperf"), "report", "--format", "json", run_dir],
                         capture_output=True, text=True, timeout=120)
    report = None
    try:
        report = json.loads(rep.stdout)
    except ValueError:
        pass
    fs = findings(report)
    r["primary"] = fs[0]["id"] if fs else None
    r["ids"] = sorted({f.get("id") for f in fs if f.get("id")})
    r["summaries"] = [f.get("summary") for f in fs][:6]
    ev = {}
    for p in glob.glob(os.path.join(run_dir, "pyprof", "events-*.json")):
        e = load_json(p) or {}
        if e.get("cuda"):
            ev = e["cuda"]
    r["cuda"] = {k: v for k, v in ev.items() if k != "series"}
    ser = ev.get("series") or []
    r["alloc_first_mb"] = ser[0][1] / MiB if ser else None
    r["alloc_last_mb"] = ser[-1][1] / MiB if ser else None
    r["oom_files"] = len(glob.glob(os.path.join(run_dir, "memory", "oom-*.pickle")))
    rows = []
    try:
        with open(os.path.join(run_dir, "gpu_steps.csv")) as f:
            rows = list(csv.DictReader(f))
    except OSError:
        pass
    r["gpu_rows"] = len(rows)
    # --gpu-trace windows: rows from kernel records (the windows), from CUDA
    # events (the rest), and how many have the events' GPU span
    src = {}
    for row in rows:
        if row.get("tid") != "0":
            src[row.get("source") or "cupti"] = src.get(row.get("source") or "cupti", 0) + 1
    r["gpu_sources"] = src
    steps_rows = [row for row in rows if row.get("tid") != "0"]
    r["span_share"] = (sum(1 for row in steps_rows if row.get("gpu_span_ns")) / len(steps_rows)
                       if steps_rows else None)
    r["event_gpu_ms"] = r["gpu"].get("gpu_ms_mean")
    marks = []
    try:
        with open(os.path.join(run_dir, "trace.json")) as f:
            for line in f:
                if "gpu.cupti" in line:
                    i = line.find("gpu.cupti")
                    marks.append(line[i:line.find('"', i)])
    except OSError:
        pass
    r["cupti"] = sorted(set(marks))
    return r


def run_one(build, out, name, cmd, env_extra=None, timeout=150):
    d = os.path.join(out, "runs", name)
    shutil.rmtree(d, ignore_errors=True)
    env = dict(os.environ)
    env.update(env_extra or {})
    t0 = time.monotonic()
    try:
        p = subprocess.run([os.path.join(build, "trainperf"), "run", "--quiet", "--out", d, "--"] + cmd,
                           env=env, capture_output=True, text=True, timeout=timeout, cwd=HERE)
        rc = p.returncode
        tail = (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        rc, tail = -9, "timed out"
    r = gather(build, d, rc, time.monotonic() - t0)
    r["tail"] = tail
    return r


def between(lo, hi):
    return lambda v: v is not None and lo <= v <= hi


def at_least(lo):
    return lambda v: v is not None and v >= lo


def at_most(hi):
    return lambda v: v is not None and v <= hi


def g(key):
    return lambda r: r["gpu"].get(key)


def has_id(i):
    return ("finding " + i, lambda r: i in r["ids"], lambda v: v)


def lacks_id(i):
    return ("no finding " + i, lambda r: i not in r["ids"], lambda v: v)


BASE = [("exit 0", lambda r: r["rc"], lambda v: v == 0),
        ("GPU records joined to steps", lambda r: r["gpu_rows"], at_least(10)),
        ("CUPTI on", lambda r: any(m.startswith("gpu.cupti on") for m in r["cupti"]), lambda v: v),
        # the CUDA events at the step boundaries, on a real driver: every
        # step read back (the last few may not be, if the GPU lagged at exit)
        ("steps with their GPU time from events (share of rows)", lambda r: r["span_share"], at_least(0.9))]

# Scenarios run with --gpu-trace full (TRAINPERF_GPU_TRACE_MODE): the
# profiler hand-over is checked on every step's records, and nonzero_sync's
# raw records are dumped for the whole run (why its CUPTI waits read 9 us).
# Every other scenario runs as shipped (windows): its kernel figures come
# from the windows' steps.
FULL_TRACE = ("profiler_clash", "nonzero_sync")

PYSCEN = {
    "healthy_item": [("busy share", g("busy_share"), at_least(0.85)),
                     ("host waits in .item() (syncs/step)", g("syncs_per_step"), at_least(0.9)),
                     has_id("gpu-bound"), lacks_id("host-code"), lacks_id("launch-bound")],
    "healthy_noitem": [("busy share", g("busy_share"), at_least(0.85)), has_id("gpu-bound"),
                       lacks_id("launch-bound")],
    "input_bound": [("busy share", g("busy_share"), at_most(0.3)),
                    ("primary", lambda r: r["primary"], lambda v: v == "input-bound"),
                    lacks_id("gpu-bound")],
    "launch_bound": [("busy share", g("busy_share"), at_most(0.4)),
                     ("kernels per step", g("kernels_per_step"), at_least(40)),
                     ("median kernel us", g("kernel_us_p50"), at_most(20)),
                     ("primary", lambda r: r["primary"], lambda v: v == "launch-bound")],
    "pageable_copy": [("pageable HtoD MiB/step", lambda r: (r["gpu"].get("h2d_pageable_bytes_per_step") or 0) / MiB,
                       at_least(60)), has_id("pageable-copies")],
    "pinned_copy": [("HtoD MiB/step", lambda r: (r["gpu"].get("h2d_bytes_per_step") or 0) / MiB, at_least(60)),
                    ("pageable HtoD MiB/step", lambda r: (r["gpu"].get("h2d_pageable_bytes_per_step") or 0) / MiB,
                     at_most(1)), lacks_id("pageable-copies"), has_id("gpu-bound")],
    "nonzero_sync": [("host waits per step", g("syncs_per_step"), at_least(0.9)), has_id("gpu-sync")],
    "matmul_fp32": [("busy share", g("busy_share"), at_least(0.8))],
    "matmul_bf16": [("busy share", g("busy_share"), at_least(0.5))],
    "compile_recompile": [("kernels per step", g("kernels_per_step"), at_least(5))],
    "leak": [("allocated grows (MiB, last - first)",
              lambda r: (r["alloc_last_mb"] or 0) - (r["alloc_first_mb"] or 0), at_least(200)),
             has_id("gpu-memory-growth")],
    "oom_caught": [("allocator OOMs", lambda r: r["cuda"].get("ooms"), at_least(1)),
                   ("OOM snapshot written", lambda r: r["oom_files"], at_least(1)), has_id("gpu-oom")],
    "profiler_clash": [("GPU records before the window (steps 5-39 with kernels)",
                        lambda r: _steps_with_kernels(r, 5, 40), at_least(30)),
                       ("GPU records after it (steps 60-299 with kernels)",
                        lambda r: _steps_with_kernels(r, 60, 300), at_least(200))],
}


def _steps_with_kernels(r, lo, hi):
    """Rows of gpu_steps.csv with step in [lo, hi) and kernels in them."""
    import csv
    try:
        with open(os.path.join(r["dir"], "gpu_steps.csv")) as f:
            return sum(1 for row in csv.DictReader(f)
                       if row["tid"] != "0" and lo <= int(row["step"]) < hi and row["kernels"]
                       and int(row["kernels"]) > 0)
    except (OSError, ValueError, KeyError):
        return 0


def find_cupti():
    import site
    dirs = site.getsitepackages() + ["/usr/local/cuda"]
    for d in dirs:
        for p in sorted(glob.glob(os.path.join(d, "**", "libcupti.so*"), recursive=True), reverse=True):
            return p
    return None


def c_scenarios(build, out):
    """The C/CUDA trainer, with and without trainperf's step markers."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        return {"cuda_loop": {"error": "nvcc not found"}}
    res = {}
    for name, flags in (("cuda_loop", []), ("cuda_loop_nosteps", ["-DNO_STEPS"])):
        exe = os.path.join(out, name)
        b = subprocess.run([nvcc, "-O2", "-I" + os.path.join(ROOT, "include")] + flags +
                           [os.path.join(HERE, "cuda_loop.cu"), os.path.join(build, "libtrainperf.a"),
                            "-o", exe, "-lz", "-lpthread", "-ldl", "-lm"], capture_output=True, text=True)
        if b.returncode != 0:
            res[name] = {"error": "nvcc: " + b.stderr[-800:]}
            continue
        res[name] = run_one(build, out, name, [exe, "300"])
    return res


C_CHECKS = {
    "cuda_loop": BASE + [("kernels per step", g("kernels_per_step"), between(19.5, 20.5)),
                         ("median kernel us", g("kernel_us_p50"), between(150, 300)),
                         ("busy share", g("busy_share"), at_least(0.8)), has_id("gpu-bound")],
    "cuda_loop_nosteps": [("exit 0", lambda r: r["rc"], lambda v: v == 0),
                          ("GPU records seen without steps", g("records"), at_least(1000)),
                          ("busy share of the windows", lambda r: r["gpu_windows"].get("busy_share"),
                           at_least(0.8))],
}


# Ways of running each overhead script: (mode, extra environment). The
# timestamp callback was measured on an H200 (2026-11-28: CUPTI's own clock
# was no cheaper); the kinds were not: kernel records alone cost 1.8 us a
# kernel on launch_bound, all four kinds 5.2 us. Which kind costs the rest:
# each beside kernel, on launch_bound, in full mode. `default` is trainperf
# run as shipped (--gpu-trace windows: the kinds on only in windows, CUDA
# events at every step boundary); its ratio against `nocupti` says whether
# disabling the kinds between windows removes their cost (CONCURRENT_KERNEL's
# instrumentation included).
OVH_MODES = {
    "healthy_noitem": ("plain", "default", "full", "nocupti", "full_kernels"),
    "launch_bound": ("plain", "default", "full", "nocupti", "full_kernels", "full_k_memcpy",
                     "full_k_memset", "full_k_sync"),
}
OVH_ENV = {"full_kernels": {"TRAINPERF_CUPTI_KINDS": "kernel"},
           "full_k_memcpy": {"TRAINPERF_CUPTI_KINDS": "kernel,memcpy"},
           "full_k_memset": {"TRAINPERF_CUPTI_KINDS": "kernel,memset"},
           "full_k_sync": {"TRAINPERF_CUPTI_KINDS": "kernel,sync"}}


def ovh_flags(mode):
    """trainperf run's options for an overhead mode."""
    if mode == "nocupti":
        return ["--gpu-trace", "off"]
    if mode.startswith("full"):
        return ["--gpu-trace", "full"]
    return []


def overhead(build, out, scripts=("healthy_noitem", "launch_bound")):
    """Each script several ways, back to back: plain, under trainperf run as
    shipped (windows), with --gpu-trace full, with --gpu-trace off, and
    in full mode with fewer kinds of CUPTI
    records (what each kind costs a launch); compared on the script's own
    step times at p10 (the least disturbed steps)."""
    res = {}
    for script in scripts:
        for mode in OVH_MODES[script]:
            tf = os.path.join(out, "times-%s-%s.json" % (script, mode))
            env = dict(os.environ, SCEN_TIMES=tf, GPU_SECONDS="4", **OVH_ENV.get(mode, {}))
            cmd = [PY, os.path.join(HERE, script + ".py")]
            if mode != "plain":
                cmd = [os.path.join(build, "trainperf"), "run", "--quiet", "--out",
                       os.path.join(out, "ovh", "%s-%s" % (script, mode))] + \
                      ovh_flags(mode) + ["--"] + cmd
            subprocess.run(cmd, env=env, capture_output=True, timeout=120, cwd=HERE)
            t = sorted((load_json(tf) or [])[5:])
            if t:
                res["%s_%s_p10_ms" % (script, mode)] = round(t[len(t) // 10] * 1e3, 4)
        base = res.get("%s_plain_p10_ms" % script)
        for mode in OVH_MODES[script][1:]:
            v = res.get("%s_%s_p10_ms" % (script, mode))
            if base and v:
                res["%s_%s_ratio" % (script, mode)] = round(v / base, 4)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    build, out = os.path.abspath(a.build), os.path.abspath(a.out)
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    only = set(x for x in a.only.split(",") if x)
    results, checks = {}, []
    t0 = time.monotonic()
    fallback = None
    for name in PYSCEN:
        if only and name not in only:
            continue
        if results and fallback is None and not os.environ.get("TRAINPERF_CUPTI_LIB"):
            first = next(iter(results.values()))
            if not any(m.startswith("gpu.cupti on") for m in first["cupti"]):
                # the library did not find CUPTI by itself: say so (a failed
                # check below) and go on with the one beside torch
                fallback = find_cupti()
                if fallback:
                    os.environ["TRAINPERF_CUPTI_LIB"] = fallback
                    checks.append({"scenario": "setup", "check": "libcupti found without help",
                                   "ok": False, "value": "%s; used %s" % (first["cupti"], fallback)})
            else:
                fallback = ""
        env = {"GPU_SECONDS": "6"}
        if name in FULL_TRACE:
            env["TRAINPERF_GPU_TRACE_MODE"] = "full"
        if name in ("healthy_item", "nonzero_sync"):
            # raw records: the decoder's fixture; nonzero_sync's, to see why its rows
            # split in two regimes and 20% of its records came late (2026-11-28 H200)
            env["TRAINPERF_CUPTI_DUMP"] = os.path.join(out, "runs", "cupti-%s.dump" % name)
        results[name] = run_one(build, out, name, [PY, os.path.join(HERE, name + ".py")], env)
        print("%-18s %5.1fs rc=%s primary=%s ids=%s" % (name, results[name]["wall_s"], results[name]["rc"],
                                                       results[name]["primary"], results[name]["ids"]), flush=True)
    if not only or "cuda_loop" in only:
        results.update(c_scenarios(build, out))
    spec = {n: BASE + c for n, c in PYSCEN.items()}
    spec.update(C_CHECKS)
    for name, r in results.items():
        if "error" in r:
            checks.append({"scenario": name, "check": "ran", "ok": False, "value": r["error"]})
            continue
        mine = []
        for label, get, ok in spec.get(name, []):
            try:
                v = get(r)
                good = bool(ok(v))
            except Exception as e:  # a missing figure is a failed check, not a crash
                v, good = "error: %s" % e, False
            mine.append({"scenario": name, "check": label, "ok": good, "value": v})
        checks += mine
        # what this run said, kept with it: tests/test_gpu_runs.py holds the
        # report to it once the run is in tests/data/gpu-runs/
        with open(os.path.join(r["dir"], "check.json"), "w") as f:
            json.dump({"scenario": name, "primary": r["primary"], "ids": r["ids"],
                       "gpu": r["gpu"], "gpu_sources": r.get("gpu_sources"),
                       "span_share": r.get("span_share"), "checks": mine}, f, indent=1, default=str)
    if "matmul_fp32" in results and "matmul_bf16" in results:
        # the GPU's time per step: the host runs ahead of it (a read-back
        # every tenth step), so its own step times say nothing of the kernels
        a32 = results["matmul_fp32"]["gpu"].get("kernel_ms_mean")
        a16 = results["matmul_bf16"]["gpu"].get("kernel_ms_mean")
        checks.append({"scenario": "matmul_bf16", "check": "bf16 GPU step >= 1.5x faster than fp32",
                       "ok": bool(a32 and a16 and a32 / a16 >= 1.5), "value": [a32, a16]})
    ovh = overhead(build, out) if not only or "overhead" in only else {}
    # NVML read for real: utilisation and memory of the GPU the runs used
    nv = [r["nvml"] for r in results.values() if isinstance(r, dict) and r.get("nvml")]
    checks.append({"scenario": "nvml", "check": "NVML utilisation read during GPU runs",
                   "ok": any(x and x[0].get("util_mean") is not None for x in nv), "value": nv[:3]})
    doc = {"elapsed_s": round(time.monotonic() - t0, 1), "checks": checks, "results": results,
           "overhead_p10_ms": ovh}
    with open(os.path.join(out, "gpu-check.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    bad = [c for c in checks if not c["ok"]]
    for c in checks:
        v = c["value"]
        v = round(v, 3) if isinstance(v, float) else v
        print("%-4s %-18s %-40s %s" % ("ok" if c["ok"] else "FAIL", c["scenario"], c["check"], str(v)[:80]))
    print("overhead p10 ms:", json.dumps(ovh))
    print("%d checks, %d failed, %.0f s" % (len(checks), len(bad), time.monotonic() - t0))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
