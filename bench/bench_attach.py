#!/usr/bin/env python3
"""The sampler's own CPU: `trainperf attach PID` against `py-spy record` at the same rate.

A Python process that computes in a loop (no torch: nothing to wait for) is
watched for --seconds by

  A: trainperf attach PID --duration S --rate R   (trainperf itself: procfs, sched and
     the run directory every second, and its py-spy samplers, rotated every 10 s and
     folded into the run directory, and the report at the end)
  B: py-spy record --pid PID --duration S --rate R --nonblocking --idle --format raw
     (py-spy alone, the baseline: what one would run by hand)

interleaved, --rounds times. Then the other way to drive py-spy: `py-spy dump`
once per sample (10 calls), its CPU per sample against record's. The CPU of each is its children's rusage after it
exits (trainperf's includes its py-spy processes). Prints CPU seconds per
wall second (share of one core) for each and the ratio A/B per round and
median. The watched process pays nothing in its own threads either way (py-spy
reads its memory with process_vm_readv, --nonblocking: no stop); its CPU is
printed as a check.

Target: A/B <= 1.5 (the collector and the folding cost at most half of
py-spy's own sampling). Exits 1 on a miss.

    bench/bench_attach.py [--build build] [--seconds 12] [--rate 100] [--rounds 3]
"""
import argparse
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORK = "import time\nwhile True:\n    s = sum(i * i for i in range(5000)); time.sleep(0.002)\n"


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(argv):
    before, t0 = children_cpu(), time.monotonic()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return children_cpu() - before, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("TRAINPERF_BUILD", "build"))
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tp = ROOT / a.build / "trainperf"
    if not tp.exists() or not shutil.which("py-spy"):
        print("bench_attach: needs BUILD/trainperf and py-spy", file=sys.stderr)
        return 2
    watched = subprocess.Popen([sys.executable, "-c", WORK])
    time.sleep(1.0)
    ratios = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(a.rounds):
                w0 = proc_cpu(watched.pid)
                out = pathlib.Path(tmp) / f"att{r}"
                ca, wa = measure([str(tp), "attach", str(watched.pid), "--duration",
                                  str(a.seconds), "--rate", str(a.rate), "--out", str(out),
                                  "--quiet"])
                cb, wb = measure(["py-spy", "record", "--pid", str(watched.pid), "--duration",
                                  str(int(a.seconds)), "--rate", str(a.rate), "--nonblocking",
                                  "--idle", "--format", "raw", "-o",
                                  str(pathlib.Path(tmp) / f"raw{r}.txt")])
                w1 = proc_cpu(watched.pid)
                ratio = (ca / wa) / (cb / wb) if cb > 0 else float("inf")
                ratios.append(ratio)
                print(f"round {r + 1}: attach {ca:.2f} s CPU in {wa:.1f} s "
                      f"({100 * ca / wa:.1f}% of a core), py-spy record {cb:.2f} s in {wb:.1f} s "
                      f"({100 * cb / wb:.1f}%), ratio {ratio:.2f}; watched process "
                      f"{100 * (w1 - w0) / (wa + wb):.0f}% of a core")
        # py-spy dump per sample: what driving it periodically would cost
        before = children_cpu()
        for _ in range(10):
            subprocess.run(["py-spy", "dump", "--nonblocking", "--pid", str(watched.pid)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dump = (children_cpu() - before) / 10
        per_record = cb / (a.rate * wb)
        print(f"py-spy dump: {1e3 * dump:.1f} ms CPU a sample, record {1e3 * per_record:.2f} ms a "
              f"sample ({dump / per_record:.0f}x): attach drives record")
    finally:
        watched.kill()
        watched.wait()
    med = statistics.median(ratios)
    print(f"bench_attach: attach / py-spy record CPU at {a.rate} Hz: median {med:.2f} "
          f"(target <= 1.5)")
    return 0 if med <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
