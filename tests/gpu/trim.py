"""Trim the GPU check's run directories for tests/data/gpu-runs/: the files
the report and the rules read, CSVs cut to their first rows, no trace.

    python3 tests/gpu/trim.py RUNS_DIR DEST_DIR"""
import os
import shutil
import sys

KEEP = ("run.json", "summary.json", "alerts.jsonl", "failures.json", "attempts.json", "report.md",
        "check.json")
CSV_ROWS = {"steps.csv": 1500, "gpu_steps.csv": 1500, "metrics.csv": 400, "procs.csv": 600}
MAX_FILE = 400 << 10


def head(src, dst, rows):
    with open(src, errors="replace") as f, open(dst, "w") as o:
        for i, line in enumerate(f):
            if i > rows:
                break
            o.write(line)


def trim(src, dst):
    os.makedirs(dst, exist_ok=True)
    for n in KEEP:
        p = os.path.join(src, n)
        if os.path.isfile(p) and os.path.getsize(p) <= MAX_FILE:
            shutil.copy(p, os.path.join(dst, n))
    for n, rows in CSV_ROWS.items():
        p = os.path.join(src, n)
        if os.path.isfile(p):
            head(p, os.path.join(dst, n), rows)
    for sub in ("pyprof", "memory"):
        d = os.path.join(src, sub)
        if not os.path.isdir(d):
            continue
        for n in sorted(os.listdir(d)):
            p = os.path.join(d, n)
            if os.path.isfile(p) and os.path.getsize(p) <= MAX_FILE and not n.endswith(".tmp"):
                os.makedirs(os.path.join(dst, sub), exist_ok=True)
                shutil.copy(p, os.path.join(dst, sub, n))


def main():
    src, dst = sys.argv[1], sys.argv[2]
    for n in sorted(os.listdir(src)):
        p = os.path.join(src, n)
        if os.path.isdir(p):
            trim(p, os.path.join(dst, n))
        elif n.endswith(".dump"):
            with open(p, "rb") as f:
                data = f.read(MAX_FILE)
            with open(os.path.join(dst, n), "wb") as o:
                o.write(data)


if __name__ == "__main__":
    main()
