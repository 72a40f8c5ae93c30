"""How busy the DataLoader's worker processes are (zero-code mode).

Installed by the auto hook (_autohook.patch_torch). A worker's time is
fetching batches (its dataset's __getitem__ and collate: computing, reading,
sleeping on a slow store, or waiting for a CPU while it does) or idle (its
queue of batches is full, or it waits in the run queue to wake up). When the
main process waits for batches while the workers fetch only a small part of
their time, the loader has spare capacity: the wait is not its throughput
but the workers' scheduling (starved of CPU by other jobs, docs/diagnosis.md,
"Causes"). Slow storage or heavy batches keep the workers fetching.

Each worker writes pyprof/loader-<pid>.json (docs/run-format.md) after its
first fetch, then at most every 2 s, and when its loop ends: fetches, seconds fetching, and the
span from the loop's start to the last fetch's end. Nothing runs in the main
process per batch; in a worker, two clock reads per batch.
"""
import json
import os
import time

WRITE_EVERY_S = 2.0

_orig_loop = None  # torch's _worker_loop, in the process that patched it


def worker_loop(*args, **kwargs):
    """torch.utils.data._utils.worker._worker_loop with the fetches timed
    (runs in the worker process; a module-level function, so a `spawn`
    context pickles it by name)."""
    orig = _orig_loop
    if orig is None:  # a spawned worker whose torch was not patched
        from torch.utils.data._utils import worker as w
        orig = w._worker_loop
        if orig is worker_loop:
            orig = getattr(w, "_trainperf_orig_loop", None)
    if orig is None:
        raise RuntimeError("trainperf: the DataLoader worker loop is missing")
    stats = None
    try:
        stats = _time_fetches()
    except Exception:
        stats = None
    try:
        return orig(*args, **kwargs)
    finally:
        if stats is not None:
            stats.write()


class _Stats:
    def __init__(self, path):
        self.path = path
        self.t0 = time.monotonic()
        self.t_last = self.t0
        self.n = 0
        self.busy = 0.0
        self.next_write = self.t0
        self.every = 0.25

    def add(self, t0, t1):
        self.n += 1
        self.busy += t1 - t0
        self.t_last = t1
        if t1 >= self.next_write:
            # soon after the first fetch, then less often: a persistent
            # worker is killed with the main process, its loop never ends
            self.next_write = t1 + self.every
            self.every = min(2 * self.every, WRITE_EVERY_S)
            self.write()

    def write(self):
        try:
            d = {"pid": os.getpid(), "ppid": os.getppid(),
                 "clock": "CLOCK_MONOTONIC seconds (time.monotonic)",
                 "t0": round(self.t0, 6), "t_last": round(self.t_last, 6),
                 "fetches": self.n, "fetch_s": round(self.busy, 6),
                 "span_s": round(self.t_last - self.t0, 6)}
            tmp = "%s.tmp" % self.path
            with open(tmp, "w") as f:
                json.dump(d, f)
            os.replace(tmp, self.path)
        except Exception:
            pass


def _time_fetches():
    """Wrap the fetchers' fetch in this (worker) process; the stats, or None
    when there is no run directory to write to."""
    rd = os.environ.get("TRAINPERF_RUN_DIR")
    if not rd:
        return None
    d = os.path.join(rd, "pyprof")
    os.makedirs(d, exist_ok=True)
    st = _Stats(os.path.join(d, "loader-%d.json" % os.getpid()))
    from torch.utils.data._utils import fetch as F
    now = time.monotonic
    for cls in (F._MapDatasetFetcher, F._IterableDatasetFetcher):
        orig = cls.__dict__.get("fetch")
        if orig is None or getattr(orig, "_trainperf_fetch", False):
            continue

        def fetch(self, index, _orig=orig):
            t0 = now()
            try:
                return _orig(self, index)
            finally:
                st.add(t0, now())

        fetch._trainperf_fetch = True
        fetch.__wrapped__ = orig
        cls.fetch = fetch
    return st


def install(torch):
    """Swap torch's worker loop for worker_loop (new DataLoader iterators
    start their workers with it). Idempotent."""
    global _orig_loop
    from torch.utils.data._utils import worker as w
    cur = w._worker_loop
    if cur is worker_loop:
        return
    _orig_loop = cur
    w._trainperf_orig_loop = cur
    # the DataLoader reads _utils.worker._worker_loop when it starts workers
    w._worker_loop = worker_loop
