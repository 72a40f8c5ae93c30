#!/usr/bin/env python3
"""`trainperf report` over a large job (issue 37): wall time and peak RSS of
the report of a generated job of 8, 32 and 128 nodes x 8 ranks (tests/jobgen.py,
from one real 2-rank gloo DDP run recorded here under `trainperf run`, or
--base RUN_DIR). Baseline (same run): the report of the base run alone, so
the ratios say what a node costs beyond one run. Target at 128 nodes (1,024
ranks): < 30 s and < 1 GiB peak RSS. Then `trainperf merge` of 16 and 256
rank traces: peak RSS must not grow with the count (< 1.5x). Exit 1 on a
miss, 2 when it cannot run.

    python3 bench/bench_jobscale.py [--base RUN_DIR] [--nodes 8,32,128] [--steps 30]
"""
import argparse
import os
import pathlib
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
BUILD = pathlib.Path(os.environ.get("TRAINPERF_BUILD", ROOT / "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD

import jobgen  # noqa: E402


def record_base(out, steps):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "python"))
    env.pop("TRAINPERF_RUN_DIR", None)
    cmd = [str(BUILD / "trainperf"), "run", "--quiet", "--out", str(out), "--",
           sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(port),
           str(ROOT / "examples" / "train_ddp.py"), "--steps", str(steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(ROOT))
    if p.returncode:
        raise SystemExit("recording the base run failed: %s" % p.stderr[-2000:])


def timed(*args):
    """Wall seconds and peak RSS (bytes) of one `trainperf ARGS...` (stdout dropped)."""
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.execv(str(BUILD / "trainperf"), ["trainperf", *map(str, args)])
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("trainperf %s failed" % " ".join(map(str, args[:2])))
    return wall, ru.ru_maxrss * 1024


def timed_report(*dirs):
    return timed("report", *dirs, "--format", "json")


def bench_merge(tmp, counts):
    """`trainperf merge` of N rank traces (a real Kineto trace of HTA's test
    data, told its rank): peak RSS must not grow with N (streaming)."""
    import gzip
    import json
    src = json.load(gzip.open(ROOT / "tests" / "data" / "traces" /
                              "trace_filter_sampled_rank-0.json.gz"))
    rss = {}
    for n in counts:
        d = tmp / ("traces%d" % n)
        d.mkdir()
        for k in range(n):
            src["distributedInfo"]["rank"] = k
            (d / ("rank-%d.json" % k)).write_text(json.dumps(src))
        wall, rss[n] = timed("merge", d, "-o", tmp / "merged.json")
        size = (tmp / "merged.json").stat().st_size
        print("merge of %3d rank traces (%d events each, %.0f MiB out): %6.2f s, peak RSS %.1f MiB"
              % (n, len(src["traceEvents"]), size / 2**20, wall, rss[n] / 2**20))
        shutil.rmtree(d)
    lo, hi = min(counts), max(counts)
    print("merge peak RSS %d vs %d traces: %.2fx" % (hi, lo, rss[hi] / rss[lo]))
    return 0 if rss[hi] < 1.5 * rss[lo] else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--nodes", default="8,32,128")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--no-merge", dest="merge", action="store_false")
    a = ap.parse_args()
    if not (BUILD / "trainperf").exists():
        print("cannot run: %s/trainperf not built" % BUILD)
        return 2
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-jobscale-"))
    try:
        base = pathlib.Path(a.base) if a.base else tmp / "base"
        if not a.base:
            record_base(base, a.steps)
        w0, m0 = timed_report(base)
        print("base run (2 ranks): %.2f s, peak RSS %.1f MiB" % (w0, m0 / 2**20))
        miss = 0
        for n in [int(x) for x in a.nodes.split(",")]:
            out = tmp / ("job%d" % n)
            dirs = jobgen.generate(base, out, n, 8, slow_rank=n * 8 // 2, slow_ms=60)
            wall, rss = timed_report(out)
            size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
            print("%4d nodes x 8 = %5d ranks (%5.1f MiB of run dirs): %6.2f s (%.1fx the base), "
                  "peak RSS %6.1f MiB (%.1fx), %.1f KiB per rank over the base"
                  % (n, n * 8, size / 2**20, wall, wall / w0, rss / 2**20, rss / m0,
                     (rss - m0) / 1024 / (n * 8)))
            if n == 128 and not (wall < 30 and rss < 2**30):
                print("MISS: target < 30 s and < 1 GiB at 128 nodes")
                miss = 1
            shutil.rmtree(out)
            del dirs
        if a.merge:
            miss |= bench_merge(tmp, [16, 256])
        return miss
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
