"""The procfs source's readings, taken with psutil: the baseline that
bench/bench_procfs.c compares against in the same run.

    python3 procfs_psutil.py ROOT_PID      (driven by bench_procfs)

Reads lines from stdin, each a number N: takes N samples and answers
"<cpu_seconds> <wall_seconds> <processes>" for the whole batch. One sample
reads what one procfs sample reads: CPU times overall and per core, memory
and swap, PSI (psutil has no PSI call, so the files are read directly),
disk and network counters, and for every process of the tree: CPU times,
RSS, thread count and I/O counters. Process objects are cached between
samples, as a monitor built on psutil would do.
"""
import sys
import time

try:
    import psutil
except ImportError:
    print("error psutil is not installed (pip install psutil)", flush=True)
    sys.exit(0)

PSI = ("/proc/pressure/cpu", "/proc/pressure/memory", "/proc/pressure/io")


def read_psi():
    out = []
    for path in PSI:
        try:
            with open(path) as f:
                out.append(f.read())
        except OSError:
            out.append(None)
    return out


def sample(root, cache):
    psutil.cpu_times()
    psutil.cpu_times(percpu=True)
    psutil.virtual_memory()
    psutil.swap_memory()
    read_psi()
    psutil.disk_io_counters(perdisk=True)
    psutil.net_io_counters(pernic=True)
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    n = 0
    for p in procs:
        p = cache.setdefault(p.pid, p)
        try:
            with p.oneshot():
                p.cpu_times()
                p.memory_info()
                p.num_threads()
                p.ppid()
                p.name()
                try:
                    p.io_counters()
                except psutil.AccessDenied:
                    pass
            n += 1
        except psutil.NoSuchProcess:
            cache.pop(p.pid, None)
    return n


def main():
    if len(sys.argv) != 2:
        print("error usage: procfs_psutil.py ROOT_PID", flush=True)
        return 2
    try:
        root = psutil.Process(int(sys.argv[1]))
    except (ValueError, psutil.Error) as e:
        print(f"error {e}", flush=True)
        return 0
    cache = {}
    for line in sys.stdin:
        n = int(line)
        c0, w0 = time.process_time(), time.perf_counter()
        procs = 0
        for _ in range(n):
            procs = sample(root, cache)
        print(f"{time.process_time() - c0:.9f} {time.perf_counter() - w0:.9f} {procs}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
