#!/usr/bin/env python3
"""Builds the hand-made run directories under tests/data/runs/ (format
version 1, docs/run-format.md). Deterministic (seeded), so the golden reports
built from them only change when this script or the analyser changes.

    python3 tests/data/runs/make_fixtures.py      # rewrites every fixture

Each fixture models one situation the diagnosis must recognise; the figures
are chosen to look like real runs (a 1 s sampling interval, noise on every
value, a slow first step) and the README beside this script lists them.
"""
import csv
import json
import math
import pathlib
import random
import shutil

HERE = pathlib.Path(__file__).resolve().parent
GiB = 1024 ** 3
MiB = 1024 ** 2
PHASES = ["data", "forward", "backward", "optimizer", "comm", "eval", "checkpoint"]
STEP_COLS = ["rank", "local_rank", "pid", "tid", "step", "start_s", "duration_ns", "interval_ns"] + \
    [p + "_ns" for p in PHASES] + ["other_ns", "samples", "tokens"]


def blank(v):
    return "" if v is None else v


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        for r in rows:
            w.writerow([blank(r.get(h)) for h in header])


def run_json(d, *, command, cpus, gpus, duration, exit_code=0, signal=None, nvml="ok",
             host="node17", root_pid=4242):
    doc = {
        "format_version": 1, "trainperf_version": "0.1.0", "mode": "run",
        "command": command, "cwd": "/home/me/project", "host": host,
        "kernel": "6.1.0-27-amd64", "cpus": cpus, "mem_total_bytes": 64 * GiB,
        "start_unix_s": 1763710000.123456, "start_mono_ns": 123456789000,
        "end_unix_s": 1763710000.123456 + duration, "duration_s": duration,
        "interval_s": 1.0, "root_pid": root_pid,
        "exit": {"code": exit_code, "signal": signal},
        "gpus": [{"index": i, "uuid": f"GPU-{i:08x}-0000", "name": g, "mem_total_bytes": 80 * GiB}
                 for i, g in enumerate(gpus)],
        "sources": {"procfs": "ok", "nvml": nvml},
        "options": {"interval_s": 1.0, "auto": True, "alerts": []},
    }
    (d / "run.json").write_text(json.dumps(doc, indent=2) + "\n")


def steps_rows(rng, *, n, phases_ms, t0=3.0, rank=None, pid=4242, tid=4242, samples=32,
               tokens=0, jitter=0.05, first_extra_ms=800.0, stop_after=None, slow=1.0):
    """Steps back to back from t0; phases_ms maps phase -> mean ms."""
    rows, t = [], t0
    for i in range(n):
        if stop_after is not None and i >= stop_after:
            break
        ph = {p: max(0.0, rng.gauss(m, m * jitter)) * slow for p, m in phases_ms.items()}
        if i == 0:
            ph["forward"] = ph.get("forward", 0) + first_extra_ms
        data = ph.get("data", 0.0)
        inside = sum(v for p, v in ph.items() if p != "data")
        other = max(0.0, rng.gauss(2.0, 0.3))
        dur = inside + other
        interval = data + dur
        start = t + data / 1000.0
        row = {"rank": rank, "local_rank": rank, "pid": pid, "tid": tid, "step": i,
               "start_s": f"{start:.6f}", "duration_ns": int(dur * 1e6),
               "interval_ns": int(interval * 1e6), "other_ns": int(other * 1e6),
               "samples": samples, "tokens": tokens}
        for p in PHASES:
            row[p + "_ns"] = int(ph.get(p, 0.0) * 1e6)
        rows.append(row)
        t += interval / 1000.0
    return rows


def metrics_rows(rng, *, duration, cpus, ngpu, f):
    """f(t) -> dict of column values (None = unknown); noise added here."""
    rows = []
    for k in range(int(duration) + 1):
        t = float(k)
        v = f(t)
        r = {"t": f"{t:.6f}"}
        for key, val in v.items():
            r[key] = val
        for c in range(cpus):
            base = v.get("_core", 10.0)
            r[f"cpu{c}_pct"] = round(min(100, max(0, rng.gauss(base, 3))), 1)
        rows.append(r)
    return rows


def metric_header(cpus, ngpu):
    h = ["t", "cpu_pct", "cpu_iowait_pct", "mem_total_bytes", "mem_used_bytes",
         "mem_available_bytes", "swap_used_bytes", "psi_cpu_some_pct", "psi_mem_some_pct",
         "psi_mem_full_pct", "psi_io_some_pct", "psi_io_full_pct", "disk_read_bps",
         "disk_write_bps", "net_rx_bps", "net_tx_bps", "tree_procs", "tree_threads",
         "tree_cpu_pct", "tree_rss_bytes", "tree_read_bps", "tree_write_bps", "main_cpu_pct",
         "steps", "step_rate", "sample_rate", "token_rate", "data_wait_pct"]
    h += [f"cpu{c}_pct" for c in range(cpus)]
    for g in range(ngpu):
        h += [f"gpu{g}_{x}" for x in ["util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes",
                                       "temp_c", "power_w", "energy_j", "sm_mhz", "mem_mhz",
                                       "throttle", "pcie_rx_bps", "pcie_tx_bps", "proc_mem_bytes",
                                       "proc_sm_pct"]]
    return h


def step_counts(steps, t):
    done = [s for s in steps if float(s["start_s"]) + s["duration_ns"] / 1e9 <= t]
    recent = [s for s in done if float(s["start_s"]) + s["duration_ns"] / 1e9 > t - 1]
    iv = sum(s["interval_ns"] for s in recent)
    dw = sum(s["data_ns"] for s in recent)
    return len(done), len(recent), sum(s["samples"] for s in recent), (100.0 * dw / iv if iv else None)


def host_cols(rng, t, *, cpu, tree_cpu, main_cpu, procs, rss, used=20 * GiB, swap=0, iowait=0.5,
              psi_io=0.5, psi_mem=0.0, read_bps=2e6, steps=None):
    n, rate, srate, dw = steps if steps else (None, None, None, None)
    mem_total = 64 * GiB
    u = used + rng.gauss(0, 40 * MiB)
    return {
        "cpu_pct": round(max(0, rng.gauss(cpu, 2)), 1), "cpu_iowait_pct": round(max(0, rng.gauss(iowait, iowait * 0.2)), 2),
        "mem_total_bytes": mem_total, "mem_used_bytes": int(u), "mem_available_bytes": int(mem_total - u),
        "swap_used_bytes": int(swap), "psi_cpu_some_pct": round(max(0, rng.gauss(2, 0.5)), 2),
        "psi_mem_some_pct": round(max(0, rng.gauss(psi_mem, psi_mem * 0.2 + 0.01)), 2),
        "psi_mem_full_pct": round(max(0, psi_mem * 0.3), 2),
        "psi_io_some_pct": round(max(0, rng.gauss(psi_io, psi_io * 0.2)), 2), "psi_io_full_pct": round(psi_io * 0.4, 2),
        "disk_read_bps": int(max(0, rng.gauss(read_bps, read_bps * 0.1))), "disk_write_bps": int(abs(rng.gauss(1e6, 2e5))),
        "net_rx_bps": int(abs(rng.gauss(2e4, 5e3))), "net_tx_bps": int(abs(rng.gauss(1e4, 3e3))),
        "tree_procs": procs, "tree_threads": procs * 12,
        "tree_cpu_pct": round(max(0, rng.gauss(tree_cpu, 3)), 1), "tree_rss_bytes": int(rss),
        "tree_read_bps": int(max(0, rng.gauss(read_bps * 0.9, read_bps * 0.1))), "tree_write_bps": 0,
        "main_cpu_pct": round(max(0, rng.gauss(main_cpu, 1.5)), 1),
        "steps": n, "step_rate": rate, "sample_rate": srate, "token_rate": 0 if n is not None else None,
        "data_wait_pct": None if dw is None else round(dw, 2), "_core": cpu,
    }


def gpu_cols(rng, g, *, util, mem, temp=62, power=280, throttle=""):
    return {
        f"gpu{g}_util_pct": round(min(100, max(0, rng.gauss(util, 4))), 0),
        f"gpu{g}_mem_util_pct": round(min(100, max(0, rng.gauss(util * 0.6, 3))), 0),
        f"gpu{g}_mem_used_bytes": int(mem), f"gpu{g}_mem_total_bytes": 80 * GiB,
        f"gpu{g}_temp_c": round(rng.gauss(temp, 1)), f"gpu{g}_power_w": round(rng.gauss(power, 10), 1),
        f"gpu{g}_energy_j": round(rng.gauss(power, 10), 1), f"gpu{g}_sm_mhz": 1980 if not throttle else 1410,
        f"gpu{g}_mem_mhz": 2619, f"gpu{g}_throttle": throttle,
        f"gpu{g}_pcie_rx_bps": int(abs(rng.gauss(3e8, 3e7))), f"gpu{g}_pcie_tx_bps": int(abs(rng.gauss(1e8, 1e7))),
        f"gpu{g}_proc_mem_bytes": int(mem * 0.98), f"gpu{g}_proc_sm_pct": round(min(100, max(0, util)), 0),
    }


def procs_rows(rng, duration, procs):
    """procs: list of (pid, ppid, name, cpu, rss)."""
    rows = []
    for k in range(1, int(duration) + 1):
        for pid, ppid, name, cpu, rss in procs:
            rows.append({"t": f"{k:.6f}", "pid": pid, "ppid": ppid, "name": name,
                         "cpu_pct": round(max(0, rng.gauss(cpu, 2)), 1), "rss_bytes": int(rss),
                         "threads": 12, "read_bytes": k * 1000000, "write_bytes": 0, "gpu_mem_bytes": None})
    return rows


PROC_COLS = ["t", "pid", "ppid", "name", "cpu_pct", "rss_bytes", "threads", "read_bytes",
             "write_bytes", "gpu_mem_bytes"]


def summary(d, steps, duration, exit_code=0, signal=None, alerts=(), gpus=()):
    iv = [s["interval_ns"] / 1e6 for s in steps if s["step"] != 0]
    iv.sort()
    tot_iv = sum(s["interval_ns"] for s in steps) or 1

    def q(p):
        return round(iv[min(len(iv) - 1, int(p * (len(iv) - 1) + 0.5))], 3) if iv else None
    doc = {
        "format_version": 1, "duration_s": duration, "exit": {"code": exit_code, "signal": signal},
        "steps": {
            "count": len(steps), "ranks": sorted({s["rank"] for s in steps if s["rank"] is not None}),
            "step_time_ms": {"p50": q(0.5), "p95": q(0.95), "p99": q(0.99)},
            "data_wait_share": round(sum(s["data_ns"] for s in steps) / tot_iv, 4),
            "events_dropped": 0,
        },
        "resources": {"cpus": 16},
        "gpus": list(gpus),
        "alerts": [{"rule": a["rule"], "t": a["t"], "message": a["message"]} for a in alerts if a["state"] == "fired"],
        "trace": {"events_written": len(steps) * 5, "events_dropped": 0},
        "sources": {"procfs": "ok"},
    }
    (d / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")


def alerts_file(d, alerts):
    with open(d / "alerts.jsonl", "w") as f:
        for a in alerts:
            f.write(json.dumps(a) + "\n")


def fresh(name):
    d = HERE / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir()
    return d


def single_gpu_run(name, *, seed, phases, util, main_cpu, tree_cpu, procs, cpu, alerts=(),
                   command=None, gpu_name="NVIDIA H100 80GB HBM3", duration=120.0, n=1000,
                   mem_fn=None, gpu_mem=38 * GiB, throttle_fn=None, temp=62):
    rng = random.Random(seed)
    d = fresh(name)
    command = command or ["python", "train.py", "--epochs", "3"]
    run_json(d, command=command, cpus=16, gpus=[gpu_name], duration=duration)
    steps = [s for s in steps_rows(rng, n=n, phases_ms=phases) if float(s["start_s"]) < duration - 1]
    write_csv(d / "steps.csv", STEP_COLS, steps)
    rows = []
    for k in range(int(duration) + 1):
        t = float(k)
        sc = step_counts(steps, t)
        rss = mem_fn(t) if mem_fn else 3.2 * GiB
        r = host_cols(rng, t, cpu=cpu, tree_cpu=tree_cpu, main_cpu=main_cpu, procs=len(procs), rss=rss,
                      steps=sc)
        r.update(gpu_cols(rng, 0, util=util if t > 3 else 0, mem=gpu_mem, temp=temp,
                          throttle=throttle_fn(t) if throttle_fn else ""))
        r["t"] = f"{t:.6f}"
        for c in range(16):
            r[f"cpu{c}_pct"] = round(min(100, max(0, rng.gauss(cpu, 3))), 1)
        r.pop("_core", None)
        rows.append(r)
    write_csv(d / "metrics.csv", metric_header(16, 1), rows)
    write_csv(d / "procs.csv", PROC_COLS, procs_rows(rng, duration, procs))
    alerts_file(d, alerts)
    summary(d, steps, duration, alerts=alerts,
            gpus=[{"index": 0, "name": gpu_name, "mem_total_bytes": 80 * GiB}])
    return d


def main():
    # 1. input-bound: the main process loads and augments every batch itself
    #    (100% of one core, no DataLoader workers), 14 of 16 cores idle, the
    #    GPU waits. The data_wait alert fired.
    single_gpu_run(
        "input-bound", seed=1,
        phases={"data": 260.0, "forward": 45.0, "backward": 90.0, "optimizer": 12.0},
        util=28, main_cpu=99, tree_cpu=103, cpu=8, procs=[(4242, 4241, "python", 99, 3.2 * GiB)],
        alerts=[{"t": 64.0, "rule": "data_wait", "expr": "data_wait.pct > 30 for 60s", "state": "fired",
                 "severity": "warning", "value": 63.4, "message": "data-wait share of step time 63% (> 30%) for 60 s"},
                {"t": 64.0, "rule": "gpu_underused", "expr": "gpu.util < 30 for 60s", "state": "fired",
                 "severity": "warning", "value": 27.0, "message": "GPU 0 utilisation 27% (< 30%) for 60 s"}])
    # 2. compute-bound and healthy: 8 workers keep the queue full, GPU ~96%.
    workers = [(4242, 4241, "python", 100, 6 * GiB)] + \
        [(4300 + i, 4242, "pt_data_worker", 35, 1.1 * GiB) for i in range(8)]
    single_gpu_run(
        "compute-bound", seed=2,
        phases={"data": 1.5, "forward": 95.0, "backward": 190.0, "optimizer": 20.0},
        util=96, main_cpu=100, tree_cpu=380, cpu=30, procs=workers, gpu_mem=71 * GiB, temp=71)
    # 3. a CPU-only run: no GPU, NVML absent; the trainer uses 4 of 16 cores.
    rng = random.Random(3)
    d = fresh("cpu-only")
    run_json(d, command=["./trainer", "--steps", "200", "--hidden", "512"], cpus=16, gpus=[],
             duration=60.0, nvml="libnvidia-ml.so.1 not found")
    steps = [s for s in steps_rows(rng, n=400, phases_ms={"data": 4.0, "forward": 90.0, "backward": 160.0,
                                                            "optimizer": 25.0}) if float(s["start_s"]) < 59]
    write_csv(d / "steps.csv", STEP_COLS, steps)
    rows = []
    for k in range(61):
        r = host_cols(rng, k, cpu=26, tree_cpu=398, main_cpu=398, procs=1, rss=1.4 * GiB,
                      steps=step_counts(steps, k))
        r.pop("_core")
        r["t"] = f"{k:.6f}"
        for c in range(16):
            r[f"cpu{c}_pct"] = round(min(100, max(0, rng.gauss(100 if c < 4 else 2, 2))), 1)
        rows.append(r)
    write_csv(d / "metrics.csv", metric_header(16, 0), rows)
    write_csv(d / "procs.csv", PROC_COLS, procs_rows(rng, 60, [(4242, 4241, "trainer", 398, 1.4 * GiB)]))
    alerts_file(d, [])
    summary(d, steps, 60.0)
    # 4. memory growth: the tree's RSS grows ~150 MiB/s until the host runs low.
    single_gpu_run(
        "memory-growth", seed=4,
        phases={"data": 3.0, "forward": 40.0, "backward": 80.0, "optimizer": 10.0},
        util=88, main_cpu=100, tree_cpu=140, cpu=12, duration=90.0,
        procs=[(4242, 4241, "python", 100, 4 * GiB)],
        mem_fn=lambda t: 4 * GiB + 150 * MiB * t,
        alerts=[{"t": 31.0, "rule": "host_mem_growth", "expr": "mem.oom_eta_s < 10min", "state": "fired",
                 "severity": "warning", "value": 251.0,
                 "message": "process-tree memory grows 150.0 MiB/s; projected to run out of host memory in 4.2 min"}])
    # 5. hang: steps stop at ~40 s; the process sits there until killed (SIGTERM).
    rng = random.Random(5)
    d = fresh("hang")
    run_json(d, command=["python", "train.py"], cpus=16, gpus=[], duration=100.0, exit_code=None, signal=15,
             nvml="libnvidia-ml.so.1 not found")
    steps = [s for s in steps_rows(rng, n=400, phases_ms={"data": 10.0, "forward": 40.0, "backward": 60.0,
                                                            "optimizer": 10.0}) if float(s["start_s"]) < 40]
    write_csv(d / "steps.csv", STEP_COLS, steps)
    rows = []
    for k in range(101):
        busy = k < 41
        r = host_cols(rng, k, cpu=8 if busy else 1, tree_cpu=100 if busy else 0.5, main_cpu=100 if busy else 0.5,
                      procs=1, rss=2 * GiB, steps=step_counts(steps, k))
        r.pop("_core")
        r["t"] = f"{k:.6f}"
        rows.append(r)
    write_csv(d / "metrics.csv", metric_header(0, 0), rows)
    write_csv(d / "procs.csv", PROC_COLS, procs_rows(rng, 100, [(4242, 4241, "python", 50, 2 * GiB)]))
    last_end = max(float(s["start_s"]) + s["duration_ns"] / 1e9 for s in steps)
    hang_alert = {"t": round(last_end + 16, 1), "rule": "hang", "expr": "step.stall_ratio > 50 for 10s",
                  "state": "fired", "severity": "critical", "value": 132.0,
                  "message": "no step for 16 s (132x the median step time 121 ms): possible hang"}
    alerts_file(d, [hang_alert])
    summary(d, steps, 100.0, exit_code=None, signal=15, alerts=[hang_alert])
    # 6. crashed after three steps: too little data to name a bottleneck.
    rng = random.Random(6)
    d = fresh("crashed")
    run_json(d, command=["python", "train.py", "--bad-flag"], cpus=16, gpus=[], duration=4.2, exit_code=1,
             nvml="libnvidia-ml.so.1 not found")
    steps = steps_rows(rng, n=3, phases_ms={"data": 10.0, "forward": 300.0, "backward": 500.0})
    write_csv(d / "steps.csv", STEP_COLS, steps)
    rows = []
    for k in range(5):
        r = host_cols(rng, k, cpu=7, tree_cpu=100, main_cpu=100, procs=1, rss=900 * MiB, steps=step_counts(steps, k))
        r.pop("_core")
        r["t"] = f"{k:.6f}"
        rows.append(r)
    write_csv(d / "metrics.csv", metric_header(0, 0), rows)
    write_csv(d / "procs.csv", PROC_COLS, procs_rows(rng, 4, [(4242, 4241, "python", 100, 900 * MiB)]))
    alerts_file(d, [])
    summary(d, steps, 4.2, exit_code=1)
    # 7. hostile strings: the command, GPU name and an alert message carry
    #    markup; every format must show them as text.
    single_gpu_run(
        "hostile-names", seed=7, duration=30.0, n=200,
        phases={"data": 2.0, "forward": 40.0, "backward": 80.0, "optimizer": 8.0},
        util=95, main_cpu=100, tree_cpu=110, cpu=9, procs=[(4242, 4241, "python", 100, 2 * GiB)],
        command=["python", "<script>alert('cmd')</script>.py", "--name", "a|b & \"c\""],
        gpu_name="<script>alert('gpu')</script>",
        alerts=[{"t": 12.0, "rule": "user1", "expr": "cpu.util > 5", "state": "fired", "severity": "warning",
                 "value": 9.0, "message": "<img src=x onerror=alert('msg')> CPU 9%"}])
    # 8. four ranks, rank 3 is 40% slower (its GPU throttles thermally).
    rng = random.Random(8)
    d = fresh("straggler")
    run_json(d, command=["torchrun", "--nproc-per-node", "4", "train.py"], cpus=64,
             gpus=["NVIDIA A100-SXM4-80GB"] * 4, duration=60.0)
    steps = []
    for rank in range(4):
        steps += steps_rows(rng, n=200, rank=rank, pid=5000 + rank, tid=5000 + rank,
                            phases_ms={"data": 2.0, "forward": 60.0, "backward": 120.0, "optimizer": 10.0,
                                       "comm": 30.0}, slow=1.4 if rank == 3 else 1.0)
    steps = [s for s in steps if float(s["start_s"]) < 59]
    steps.sort(key=lambda s: float(s["start_s"]) + s["duration_ns"] / 1e9)
    write_csv(d / "steps.csv", STEP_COLS, steps)
    rows = []
    for k in range(61):
        r = host_cols(rng, k, cpu=10, tree_cpu=400, main_cpu=100, procs=4, rss=24 * GiB, steps=step_counts(steps, k))
        r.pop("_core")
        r["t"] = f"{k:.6f}"
        for g in range(4):
            r.update(gpu_cols(rng, g, util=93 if g < 3 else 97, mem=50 * GiB, temp=70 if g < 3 else 88,
                              throttle="" if g < 3 else ("sw_thermal" if k % 5 else "")))
        rows.append(r)
    write_csv(d / "metrics.csv", metric_header(0, 4), rows)
    write_csv(d / "procs.csv", PROC_COLS,
              procs_rows(rng, 60, [(5000 + i, 4242, "python", 100, 6 * GiB) for i in range(4)]))
    alerts_file(d, [])
    summary(d, steps, 60.0)
    # 9. damaged: run.json cut off mid-write.
    d = fresh("damaged")
    (d / "run.json").write_text('{"format_version": 1, "command": ["python", "tr')
    (d / "steps.csv").write_text(",".join(STEP_COLS) + "\n")


if __name__ == "__main__":
    main()
