"""Requests made while the run goes: `trainperf profile RUN --steps N | --memory`
(docs/cli.md).

The CLI leaves one request in RUN/live/request.json; the stack sampler's
thread (_sampler.py) stats it at most once a second (nothing else happens
while no one asks) and each process with the zero-code hook that trains
takes it once:

- a profiler window of N steps: a step listener (trainperf._core
  set_step_listener) starts torch.profiler on the training thread at its next
  step boundary, through the same ProfilerSchedule as `--profile`, and stops
  it N steps later; the trace lands in RUN/profile/ as
  trace-rank<R>-step<S>.json (S the first recorded step, as in steps.csv) with
  its top-k tables, where the report analyses it;
- a CUDA memory snapshot now (torch.cuda.memory._snapshot, from this thread:
  the allocator has its own lock), to RUN/memory/snapshot-rank<R>-now-<id>.pickle
  (https://pytorch.org/memory_viz), only where CUDA is already up: a process
  that has not initialised CUDA is not made to.

Each process answers in RUN/live/answer-<pid>.json (the request's id, per
kind its state: accepted | recording | done | skipped, the files, and why when
skipped), which the CLI reads. Nothing here may slow or break the training:
every step is guarded, and a failure is an answer, not an exception.
"""
import json
import os
import sys
import threading
import time

from trainperf import _state

POLL_S = 1.0           # the request file is stat'ed at most this often
MAX_STEPS = 1000       # a window longer than this is refused (traces grow with it)

_next_poll = [0.0]
_seen = [None]         # (mtime_ns, size, inode) of the request last read
_done_ids = set()      # requests this process took
_answer = {}           # the answer document, rewritten as it changes
_win = [None]          # the window being recorded, or None
_lock = threading.Lock()
_exit_hook = [False]


def _run_dir():
    return _state.run_dir()


def _write_answer():
    d = _run_dir()
    if not d:
        return
    path = os.path.join(d, "live", "answer-%d.json" % os.getpid())
    tmp = path + ".tmp"
    try:
        with _lock:
            doc = json.dumps(_answer, default=str)
        with open(tmp, "w") as f:
            f.write(doc)
        os.replace(tmp, path)
    except OSError:
        pass


def _set(kind, **kw):
    with _lock:
        _answer.setdefault(kind, {}).update(kw)
    _write_answer()


def _rank():
    return _state.rank()


def tick():
    """From the sampler's thread: look for a new request, at most once per
    POLL_S. Never raises."""
    now = time.monotonic()
    if now < _next_poll[0]:
        return
    _next_poll[0] = now + POLL_S
    d = _run_dir()
    if not d:
        return
    path = os.path.join(d, "live", "request.json")
    try:
        st = os.stat(path)
    except OSError:
        return
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    if key == _seen[0]:
        return
    _seen[0] = key
    try:
        with open(path) as f:
            req = json.load(f)
        rid = int(req["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if rid in _done_ids:
        return
    exp = req.get("expires_unix_s")
    if isinstance(exp, (int, float)) and time.time() > exp:
        return  # left by a `trainperf profile` that gave up, before this process started
    _done_ids.add(rid)
    with _lock:
        _answer.clear()
        _answer.update({"format": 1, "id": rid, "pid": os.getpid(), "rank": None})
    try:
        _answer["rank"] = _rank()
    except Exception:
        pass
    if req.get("memory"):
        try:
            _memory(rid)
        except Exception as exc:
            _set("memory", state="skipped", reason="the snapshot failed: %s" % (exc,))
    steps = req.get("steps")
    if steps:
        try:
            _profile(rid, req)
        except Exception as exc:
            _set("profile", state="skipped", reason="could not start: %s" % (exc,))
    _write_answer()


# --- memory snapshot -----------------------------------------------------------

def _memory(rid):
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        up = cuda is not None and cuda.is_available() and cuda.is_initialized()
    except Exception:
        up = False
    if not up:
        why = ("this process has no CUDA: torch is not imported" if torch is None else
               "this process has no CUDA: CUDA is not available to torch" if cuda is None
               or not cuda.is_available() else
               "this process has not initialised CUDA (it trains on the CPU)")
        _set("memory", state="skipped", reason=why)
        return
    import pickle
    snap = cuda.memory._snapshot()
    out = os.path.join(_run_dir(), "memory")
    os.makedirs(out, exist_ok=True)
    path = _state.unique_path(os.path.join(out, "snapshot-rank%d-now-%d.pickle" % (_rank(), rid)))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(snap, f)
    os.replace(tmp, path)
    segs = snap.get("segments", []) if isinstance(snap, dict) else []
    traces = snap.get("device_traces", []) if isinstance(snap, dict) else []
    note = None
    if not any(traces):
        note = ("no allocation history (blocks and segments only): `trainperf run "
                "--memory-every N` records it")
    _set("memory", state="done", files=[os.path.relpath(path, _run_dir())],
         segments=len(segs), reserved_bytes=sum(int(s.get("total_size", 0)) for s in segs),
         note=note)
    try:
        _state.core.mark("memory_snapshot")
    except Exception:
        pass


# --- profiler window -------------------------------------------------------------

class _Window:
    def __init__(self, rid, steps, kw):
        self.rid = rid
        self.steps = steps
        self.kw = kw
        self.thread = None
        self.sched = None
        self.calls = 0
        self.first = None


def _profile(rid, req):
    core = _state.core
    setl = getattr(core, "set_step_listener", None)
    if setl is None or not hasattr(core, "steps_ended"):
        _set("profile", state="skipped",
             reason="needs trainperf's C extension (this process uses the ctypes fallback)")
        return
    try:
        steps = int(req["steps"])
    except (TypeError, ValueError):
        steps = 0
    if not 1 <= steps <= MAX_STEPS:
        _set("profile", state="skipped", reason="steps must be 1..%d" % MAX_STEPS)
        return
    if "torch" not in sys.modules:
        _set("profile", state="skipped", reason="this process has not imported torch")
        return
    if _win[0] is not None:
        _set("profile", state="skipped", reason="a window asked for earlier is still recording")
        return
    kw = {k: bool(req.get(k)) for k in ("record_shapes", "profile_memory", "with_stack")}
    _win[0] = _Window(rid, steps, kw)
    if not _exit_hook[0]:
        import atexit
        atexit.register(at_exit)
        _exit_hook[0] = True
    _set("profile", state="accepted", steps=steps)
    setl(_on_step)


def _finish(w, state, **kw):
    _win[0] = None
    _set("profile", state=state, **kw)
    return False


def _on_step():
    """After a step ends, on the thread that ended it (trainperf._core):
    the window's first call starts the profiler, each later one steps it, the
    last stops it. Returns False when done (the listener is dropped)."""
    w = _win[0]
    if w is None:
        return False
    me = threading.get_ident()
    if w.thread is None:
        w.thread = me
        import torch
        try:
            if torch.autograd._profiler_enabled():
                return _finish(w, "skipped",
                               reason="another torch.profiler is recording in this process")
        except Exception:
            pass
        from .torch_helpers import ProfilerSchedule
        # wait 0, warmup 1, active N: the step beginning now warms the profiler up
        sched = ProfilerSchedule(wait=0, warmup=1, active=w.steps, repeat=1,
                                 out_dir=_state.out_dir("profile"), rank=_rank(), **w.kw)
        try:
            sched.start()
        except Exception as exc:
            return _finish(w, "skipped", reason="torch.profiler could not start: %s" % (exc,))
        # its files are named by steps.csv's index: the step now beginning is
        # number steps_ended(); the first recorded one follows it
        sched.steps = int(_state.core.steps_ended())
        w.sched = sched
        w.first = sched.steps + 1
        _set("profile", state="recording", first_step=w.first, last_step=w.first + w.steps - 1)
        return True
    if me != w.thread:
        return True  # another thread's steps: the window follows the one it began on
    w.calls += 1
    try:
        w.sched.step()
    except Exception as exc:
        _stop(w)
        return _finish(w, "skipped", reason="torch.profiler failed: %s" % (exc,))
    if w.sched.windows:
        _stop(w)
        d = _run_dir()
        files = [os.path.relpath(p, d) for pair in w.sched.windows for p in pair]
        return _finish(w, "done", files=files)
    return True


def _stop(w):
    try:
        w.sched.stop()
    except Exception:
        pass


def at_exit():
    """The interpreter ends inside a window: stop it, so the steps recorded
    so far are written."""
    w = _win[0]
    if w is None or w.sched is None:
        if w is not None:
            _finish(w, "skipped", reason="the process ended before its next step")
        return
    _stop(w)
    d = _run_dir()
    files = [os.path.relpath(p, d) for pair in w.sched.windows for p in pair]
    _finish(w, "done" if files else "skipped", files=files, ended_early=True,
            reason=None if files else "the process ended before the window recorded a step")
