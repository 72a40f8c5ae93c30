"""bench_exporters_e2e — the exporters against the run without them, end to end.

The bundled trainer at full speed under `trainperf run --interval 0.1` (ten
samples a second, to make the per-sample cost visible), in three modes run
interleaved (A B C, B C A, C A B ...):

  none        --no-tensorboard, no endpoint (the baseline)
  tensorboard the event file (default)
  prometheus  --prometheus 127.0.0.1:0 --no-tensorboard, scraped at 10 Hz

Figures: trainperf's own CPU time (the collector and the server thread; read
from /proc/PID/stat while it runs), its extra CPU per sample and per scrape
over the baseline, and the trainer's median step time as a ratio to the
baseline's (the trainee must not notice).

    bench_exporters_e2e.py [--rounds N] [--steps N]

Reported, not judged: on a shared box the trainer's step time moves by 10-20%
between runs for reasons of its own (the exporters run in trainperf, not in the
trainer), so a ratio threshold here would judge the neighbours. The budget
is judged by bench_exporters (CPU per sample and per scrape, same run).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("TRAINPERF_BUILD", "build"))
CLI = os.path.join(BUILD, "trainperf")
TRAINER = os.path.join(BUILD, "examples", "trainer")
TICK = os.sysconf("SC_CLK_TCK")


def own_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def one(mode, steps, tmp):
    out = os.path.join(tmp, "%s-%d" % (mode, time.monotonic_ns()))
    args = [CLI, "run", "--quiet", "--interval", "0.1", "--out", out]
    if mode != "tensorboard":
        args.append("--no-tensorboard")
    if mode == "prometheus":
        args += ["--prometheus", "127.0.0.1:0"]
    args += ["--", TRAINER, "--steps", str(steps), "--quiet"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scrapes = [0]
    stop = threading.Event()

    def scraper():
        url_file = os.path.join(out, "prometheus.url")
        while not stop.is_set() and not os.path.exists(url_file):
            time.sleep(0.01)
        if stop.is_set():
            return
        url = open(url_file).read().strip()
        while not stop.wait(0.1):
            try:
                urllib.request.urlopen(url, timeout=5).read()
                scrapes[0] += 1
            except OSError:
                pass

    th = threading.Thread(target=scraper) if mode == "prometheus" else None
    if th:
        th.start()
    cpu = 0.0
    while p.poll() is None:
        c = own_cpu(p.pid)
        if c is not None:
            cpu = c
        time.sleep(0.02)
    stop.set()
    if th:
        th.join()
    ivs = []
    with open(os.path.join(out, "steps.csv")) as f:
        hdr = f.readline().strip().split(",")
        k = hdr.index("interval_ns")
        for line in f:
            ivs.append(int(line.split(",")[k]))
    with open(os.path.join(out, "metrics.csv")) as f:
        samples = sum(1 for _ in f) - 1
    return {"cpu": cpu, "p50": statistics.median(ivs) / 1e6, "samples": samples, "scrapes": scrapes[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1500)
    a = ap.parse_args()
    modes = ["none", "tensorboard", "prometheus"]
    res = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = modes[r % 3:] + modes[:r % 3]
            for m in order:
                res[m].append(one(m, a.steps, tmp))
    base = res["none"]
    b_cpu_per_sample = statistics.median(x["cpu"] / max(1, x["samples"]) for x in base)
    b_p50 = statistics.median(x["p50"] for x in base)
    print("bench_exporters_e2e: trainer --steps %d under trainperf run --interval 0.1, %d interleaved rounds"
          % (a.steps, a.rounds))
    ok = True
    for m in modes:
        cps = statistics.median(x["cpu"] / max(1, x["samples"]) for x in res[m])
        p50 = statistics.median(x["p50"] for x in res[m])
        line = "  %-12s trainperf CPU %6.1f ms/run, %6.3f ms/sample (+%.3f over none)  trainer step p50 %.3f ms " \
               "(ratio %.3f)" % (m, statistics.median(x["cpu"] for x in res[m]) * 1e3, cps * 1e3,
                                (cps - b_cpu_per_sample) * 1e3, p50, p50 / b_p50)
        if m == "prometheus":
            sc = sum(x["scrapes"] for x in res[m])
            extra = sum(x["cpu"] for x in res[m]) - sum(x["cpu"] for x in base) * \
                sum(x["samples"] for x in res[m]) / max(1, sum(x["samples"] for x in base))
            line += "\n  %-12s %d scrapes: %.3f ms of trainperf CPU per scrape (render included)" % (
                "", sc, extra / max(1, sc) * 1e3)
        print(line)
    print("  (reported, not judged: bench_exporters judges the per-sample and per-scrape CPU)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
