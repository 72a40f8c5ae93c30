"""Collective communication in zero-code mode: every torch.distributed
collective and point-to-point op timed as the "comm" phase, with a per-op log
and a per-step summary in the run directory.

Installed by the auto hook (_autohook.patch_torch) when torch loads; nothing
here imports torch.distributed before the script does.

What is measured, per op (issued through the Python functions of
torch.distributed, which is also how FSDP2 and DDP comm hooks issue theirs):

- duration: from issue to completion. A blocking call completes when it
  returns; async work (async_op=True) when wait() returns (a future callback
  per op costs more than a small gloo op); DDP's buckets when the future DDP
  waits on completes;
- wait: the time the calling thread spends blocked on it (the whole blocking
  call, or Work.wait()). Only this is the "comm" phase of the step (a range on
  the calling thread), so async comm overlapped with compute is not counted
  against the step, and a collective inside backward is comm, not backward
  (the collector takes comm out of any phase it is nested in);
- op, dtype, elements, bytes (nccl-tests convention: all_gather counts the
  output, reduce_scatter the input), group size, algbw = bytes / duration and
  busbw = algbw x factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter,
  all_to_all (n-1)/n; others 1).

DDP issues its gradient all-reduces from C++: at the first forward of a
DistributedDataParallel module that has no comm hook, an all-reduce hook that
does what DDP's built-in one does (divide by the group size, all-reduce) is
registered, so those ops pass through here too; a hook the user registers
replaces it. The time from the last bucket's hook to the end of backward is
the exposed tail of DDP's communication (the reducer waits for every bucket
there) and is recorded as a comm wait.

Files (docs/run-format.md): comm/ops-<who>.csv (one row per op; every op up
to TRAINPERF_COMM_LOG_MAX rows per process, then only the steps chosen with
log_step()), comm/steps-<who>.csv (one row per step: ops, bytes, comm time,
exposed and overlapped comm). <who> is rank<R>, or pid<P> without a rank.
Written by a background thread about once a second and at exit: the training
thread only appends to bounded lists.
"""
import atexit
import functools
import itertools
import os
import sys
import threading
import time

from trainperf import _state

COMM = 5  # TPF_PHASE_COMM

_mono = time.monotonic_ns
_lock = threading.Lock()
_installed = False


class _Tls(threading.local):
    # Defaults as class attributes: getattr(tls, name, 0) on a missing
    # attribute raises and catches AttributeError inside, several µs per
    # backward in a training loop (issue 12 item 9).
    depth = 0
    tail = 0
    tail_t0 = 0
    in_backward = 0


_tls = _Tls()

_seq = {}          # group key -> ops issued so far
_inflight = {}     # id(record) -> record, ops issued and not completed
_works = {}        # id(Work) -> record, async ops whose wait() is not seen yet
_WORKS_CAP = 4096
_gsize = {}        # id(group) -> (key, size)

_pending_ops = []       # finished records not yet written
_PENDING_CAP = 100000   # beyond this, records are counted as dropped
_dropped = [0]
_logged = [0]
_log_max = 200000
_log_steps = set()      # steps whose every op is logged beyond the cap
_log_only = [False]     # log only _log_steps
_step = [0]             # optimizer steps seen in this process
_steps_acc = {}         # step -> [ops, bytes, busy_ns, wait_ns, by_op dict, busy_end_ns]
_STEPS_CAP = 4096
_start_mono = [None]
_writer = [None]


class _Op(object):
    __slots__ = ("op", "seq", "group", "group_size", "dtype", "elements", "bytes", "factor",
                 "issue_ns", "end_ns", "wait_ns", "is_async", "step", "done", "logged")

    def as_dict(self):
        t0 = _start_mono[0]
        return {"op": self.op, "seq": self.seq, "group_size": self.group_size,
                "bytes": self.bytes, "dtype": self.dtype, "elements": self.elements,
                "step": self.step, "async": self.is_async,
                "started_s": (self.issue_ns - t0) / 1e9 if t0 is not None else self.issue_ns / 1e9,
                "age_s": (_mono() - self.issue_ns) / 1e9}


def in_flight():
    """The collectives in progress in this process now: a list of dicts
    {op, seq, group_size, bytes, started_s, ...} (started_s: seconds since the
    run began, or CLOCK_MONOTONIC seconds when the run's start is unknown;
    age_s: how long it has been in progress). Safe from any thread and from a
    signal handler's Python callback; never raises."""
    try:
        with _lock:
            ops = list(_inflight.values())
        ops.sort(key=lambda o: o.issue_ns)
        return [o.as_dict() for o in ops]
    except Exception:
        return []


def log_step(step, only=True):
    """Log every op of optimizer step `step` (0-based) in comm/ops-*.csv,
    even past the row cap. With only=True (the default) the op log then keeps
    just the chosen steps (the per-step summary keeps every step). What the
    seeds' comm logger (`--comm-log-step N`, performance_monitor(
    comm_logger_step=N)) calls."""
    with _lock:
        _log_steps.add(int(step))
        if only:
            _log_only[0] = True


def current_step():
    """Optimizer steps seen so far in this process (the step ops are filed under)."""
    return _step[0]


# --- per-op bookkeeping ---------------------------------------------------

_dtypes = {}


def _numel_bytes(t):
    n = t.numel()
    dt = t.dtype
    name = _dtypes.get(dt)
    if name is None:
        name = _dtypes[dt] = str(dt).replace("torch.", "")
    return n, n * t.element_size(), name


def _sum_tensors(ts):
    n = b = 0
    dt = ""
    for t in ts or ():
        a, c, dt = _numel_bytes(t)
        n += a
        b += c
    return n, b, dt


def _group(dist, group):
    hit = _gsize.get(id(group)) if group is not None else None
    if hit is not None:
        return hit
    g = group if group is not None else dist.group.WORLD
    hit = _gsize.get(id(g))
    if hit is None:
        try:
            size = dist.get_world_size(g)
        except Exception:
            size = 0
        try:
            key = str(g.group_name)
        except Exception:
            key = str(id(g))
        hit = (key, size)
        if len(_gsize) < 1024:
            _gsize[id(g)] = hit
    return hit


def _begin(dist, name, group, elements, nbytes, dtype, factor, is_async):
    o = _Op()
    key, size = _group(dist, group)
    o.op = name
    o.group = key
    o.group_size = size
    o.elements = elements
    o.bytes = nbytes
    o.dtype = dtype
    o.factor = factor(size) if callable(factor) else factor
    o.is_async = is_async
    o.wait_ns = o.end_ns = 0
    o.done = False
    o.step = _step[0]
    with _lock:
        o.seq = _seq.get(key, 0)
        _seq[key] = o.seq + 1
        _inflight[id(o)] = o
    o.issue_ns = _mono()
    return o


def _finish(o, end_ns):
    with _lock:
        if o.done:
            return
        o.done = True
        o.end_ns = end_ns
        del _inflight[id(o)]
        acc = _steps_acc.get(o.step)
        if acc is None:
            if len(_steps_acc) >= _STEPS_CAP:
                _dropped[0] += 1
                return
            acc = _steps_acc[o.step] = [0, 0, 0, 0, {}, 0]
        acc[0] += 1
        acc[1] += o.bytes
        # time with a collective in flight: the union of the ops' spans
        # (they complete in issue order on one process group)
        start = o.issue_ns if o.issue_ns > acc[5] else acc[5]
        if end_ns > start:
            acc[2] += end_ns - start
            acc[5] = end_ns
        acc[3] += o.wait_ns
        by = acc[4]
        by[o.op] = by.get(o.op, 0) + 1
        if (not _log_only[0] and _logged[0] < _log_max) or o.step in _log_steps:
            if len(_pending_ops) < _PENDING_CAP:
                _logged[0] += 1
                _pending_ops.append(o)
            else:
                _dropped[0] += 1


def _add_wait(o, ns):
    # a wait seen after completion (the future fired first) still counts
    with _lock:
        o.wait_ns += ns
        if o.done:
            acc = _steps_acc.get(o.step)
            if acc is not None:
                acc[3] += ns


def _ring(n):
    return 2.0 * (n - 1) / n if n > 0 else 1.0


def _frac(n):
    return (n - 1.0) / n if n > 0 else 1.0


def _arg(names, args, kwargs, name, default=None):
    i = names.get(name)
    if i is not None and i < len(args):
        return args[i]
    return kwargs.get(name, default)


def _ONE(g):
    return _numel_bytes(g("tensor"))


# name -> (sizing function over (arg getter) -> (elements, bytes, dtype), busbw factor)
def _specs():
    one = _ONE
    return {
        "all_reduce": (one, _ring),
        "all_reduce_coalesced": (lambda g: _sum_tensors(g("tensors")), _ring),
        "broadcast": (one, 1.0),
        "reduce": (one, 1.0),
        "all_gather": (lambda g: _sum_tensors(g("tensor_list")), _frac),
        "all_gather_single": (lambda g: _numel_bytes(g("output_tensor")), _frac),
        "all_gather_into_tensor": (lambda g: _numel_bytes(g("output_tensor")), _frac),
        "_all_gather_base": (lambda g: _numel_bytes(g("output_tensor")), _frac),
        "reduce_scatter": (lambda g: _sum_tensors(g("input_list")), _frac),
        "reduce_scatter_single": (lambda g: _numel_bytes(g("input")), _frac),
        "reduce_scatter_tensor": (lambda g: _numel_bytes(g("input")), _frac),
        "_reduce_scatter_base": (lambda g: _numel_bytes(g("input")), _frac),
        "all_to_all_single": (lambda g: _numel_bytes(g("input")), _frac),
        "all_to_all": (lambda g: _sum_tensors(g("input_tensor_list")), _frac),
        "gather": (one, _frac),
        "scatter": (one, _frac),
        "barrier": (lambda g: (0, 0, ""), 1.0),
        "monitored_barrier": (lambda g: (0, 0, ""), 1.0),
        "send": (one, 1.0),
        "recv": (one, 1.0),
        "isend": (one, 1.0),
        "irecv": (one, 1.0),
    }


def _wrap(dist, name, orig, sizing, factor, push, pop):
    import inspect
    try:
        params = list(inspect.signature(orig).parameters)
    except (TypeError, ValueError):
        return None
    names = {p: i for i, p in enumerate(params)}
    tls = _tls
    always_async = name in ("isend", "irecv")
    gi = names.get("group", 10 ** 6)
    ai = names.get("async_op", 10 ** 6)
    # the common case, one tensor first: sized without the generic getter
    first = sizing is _ONE and params[:1] == ["tensor"]

    def timed(*args, **kwargs):
        if tls.__dict__.get("depth"):
            return orig(*args, **kwargs)  # called from another wrapped op
        try:
            na = len(args)
            if first and na:
                elements, nbytes, dtype = _numel_bytes(args[0])
            else:
                elements, nbytes, dtype = sizing(
                    lambda n, d=None: _arg(names, args, kwargs, n, d))
            is_async = always_async or bool(args[ai] if na > ai else kwargs.get("async_op"))
            o = _begin(dist, name, args[gi] if na > gi else kwargs.get("group"), elements,
                       nbytes, dtype, factor, is_async)
        except Exception:
            return orig(*args, **kwargs)
        tls.depth = 1
        if not is_async:
            push(COMM)
        try:
            res = orig(*args, **kwargs)
        except BaseException:
            end = _mono()
            if not is_async:
                o.wait_ns = end - o.issue_ns
            _finish(o, end)
            raise
        finally:
            tls.depth = 0
            if not is_async:
                pop()
        if not is_async or res is None:
            end = _mono()
            if not is_async:
                o.wait_ns = end - o.issue_ns
            _finish(o, end)
        else:
            _track(o, res)
        return res

    timed.__wrapped__ = orig
    timed.__doc__ = orig.__doc__
    timed.__name__ = getattr(orig, "__name__", name)
    return timed


def _track(o, work):
    # Completion is taken when wait() returns: a future callback per op would
    # cost more than the op itself on gloo (get_future alone is tens of us).
    with _lock:
        if len(_works) >= _WORKS_CAP:
            # a program that never waits: forget the oldest, ended now
            old = _works.pop(next(iter(_works)))
        else:
            old = None
        _works[id(work)] = o
    if old is not None:
        _finish(old, _mono())


def _patch_work(dist, push, pop):
    try:
        Work = dist.Work
    except AttributeError:
        from torch._C._distributed_c10d import Work
    orig_wait = Work.wait
    tls = _tls

    def wait(self, *args, **kwargs):
        o = _works.pop(id(self), None)
        if o is None or getattr(tls, "depth", 0):
            return orig_wait(self, *args, **kwargs)
        t0 = _mono()
        push(COMM)
        try:
            return orig_wait(self, *args, **kwargs)
        finally:
            pop()
            t1 = _mono()
            _add_wait(o, t1 - t0)
            if not o.done:
                _finish(o, t1)

    wait.__wrapped__ = orig_wait
    Work.wait = wait


# --- DDP ------------------------------------------------------------------

def _patch_ddp(torch, dist, push, pop):
    from torch.nn.parallel import distributed as ddpmod
    DDP = ddpmod.DistributedDataParallel
    orig_reg = DDP.register_comm_hook
    orig_builtin = getattr(DDP, "_register_builtin_comm_hook", None)
    orig_forward = DDP.forward
    tls = _tls
    from torch.distributed import distributed_c10d as c10d
    orig_allreduce = [getattr(c10d.all_reduce, "__wrapped__", c10d.all_reduce)]

    def register_comm_hook(self, state, hook):
        self._trainperf_has_hook = True
        return orig_reg(self, state, hook)

    def register_builtin(self, *a, **k):
        self._trainperf_has_hook = True
        return orig_builtin(self, *a, **k)

    def allreduce_mean(pg, bucket):
        # what DDP's built-in reduction does: mean over the group
        t = bucket.buffer()
        g = pg if pg is not None else dist.group.WORLD
        t.div_(g.size())
        if bucket.is_last() and getattr(tls, "in_backward", 0) and not getattr(tls, "tail", 0):
            # the reducer waits for every bucket at the end of backward: from
            # here to there the thread is waiting on communication
            tls.tail = 1
            tls.tail_t0 = _mono()
            push(COMM)
        n, nbytes, dtype = _numel_bytes(t)
        o = _begin(dist, "all_reduce", g, n, nbytes, dtype, _ring, True)
        tls.depth = 1
        try:
            fut = orig_allreduce[0](t, group=g, async_op=True).get_future()
        except BaseException:
            _finish(o, _mono())
            raise
        finally:
            tls.depth = 0

        def done(f):
            # on the backend's thread when the all-reduce completes
            _finish(o, _mono())
            return f.value()[0]
        return fut.then(done)

    def forward(self, *args, **kwargs):
        if not getattr(self, "_trainperf_has_hook", False):
            self._trainperf_has_hook = True
            try:
                if not getattr(self, "_comm_hooks", None) and \
                        getattr(self, "process_group", None) is not None and \
                        not getattr(self, "mixed_precision", None):
                    orig_reg(self, self.process_group, allreduce_mean)
                    _wrap_backward(torch, push, pop)  # its tail ends with backward
            except Exception:
                pass  # DDP keeps its built-in reduction, untimed
        if not getattr(self, "require_backward_grad_sync", True):
            _state.ev.ddp_no_sync = True  # accumulating already
        return orig_forward(self, *args, **kwargs)

    forward.__wrapped__ = orig_forward
    register_comm_hook.__wrapped__ = orig_reg
    DDP.register_comm_hook = register_comm_hook
    if orig_builtin is not None:
        DDP._register_builtin_comm_hook = register_builtin
    DDP.forward = forward


_backward_wrapped = [False]


def _wrap_backward(torch, push, pop):
    """Wrap torch.autograd.backward (inside the auto hook's "backward" phase
    wrapper) to close DDP's exposed comm tail. Called at the first forward of
    a DDP module that gets our all-reduce hook, the only thing that opens a
    tail: a run without one pays no Python frame per backward."""
    if _backward_wrapped[0]:
        return
    _backward_wrapped[0] = True
    tls = _tls

    def make(orig):
        def backward(*args, **kwargs):
            tls.in_backward = getattr(tls, "in_backward", 0) + 1
            try:
                return orig(*args, **kwargs)
            finally:
                tls.in_backward -= 1
                if getattr(tls, "tail", 0):
                    tls.tail = 0
                    pop()
                    _tail_done(_mono() - tls.tail_t0)

        backward.__wrapped__ = orig
        backward.__doc__ = orig.__doc__
        return backward

    _state.insert_backward(make, torch)


def _tail_done(ns):
    # the DDP tail has no one op to file it under: it is the step's wait
    with _lock:
        acc = _steps_acc.get(_step[0])
        if acc is None:
            if len(_steps_acc) >= _STEPS_CAP:
                return
            acc = _steps_acc[_step[0]] = [0, 0, 0, 0, {}, 0]
        acc[3] += ns


# --- steps and files ------------------------------------------------------

def _who():
    r = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or os.environ.get("PMI_RANK") \
        or os.environ.get("OMPI_COMM_WORLD_RANK")
    if r is not None and r.strip().isdigit():
        return "rank" + r.strip(), int(r)
    return "pid%d" % os.getpid(), None


def _publish_rank(dist):
    """A rank passed in code (torch.multiprocessing.spawn with
    init_process_group(rank=r)) is in no environment variable: put it in
    RANK/WORLD_SIZE for trainperf's own readers (these files, the profile,
    the exporters) and tell the probe, so this process's steps carry it."""
    if os.environ.get("RANK", "").strip().isdigit():
        return
    try:
        r, n = int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        return
    if r < 0:
        return
    os.environ["RANK"] = str(r)
    if not os.environ.get("WORLD_SIZE", "").strip().isdigit():
        os.environ["WORLD_SIZE"] = str(n)
    set_rank = getattr(_state.core, "set_rank", None)
    if set_rank is not None:
        set_rank(r, -1, n)
    w = _writer[0]
    if w is not None and w.ops_f is None:
        w.who, w.rank = _who()


def _patch_init(dist, c10d):
    orig = getattr(c10d, "init_process_group", None)
    if orig is None or getattr(orig, "_trainperf", False):
        return

    @functools.wraps(orig)
    def init_process_group(*args, **kwargs):
        out = orig(*args, **kwargs)
        try:
            _publish_rank(dist)
        except Exception:
            pass  # never disturb training
        return out

    init_process_group._trainperf = True
    setattr(c10d, "init_process_group", init_process_group)
    if getattr(dist, "init_process_group", None) is orig:
        setattr(dist, "init_process_group", init_process_group)


def _load_start(run_dir):
    try:
        import json
        with open(os.path.join(run_dir, "run.json")) as f:
            v = json.load(f).get("start_mono_ns")
        if isinstance(v, (int, float)):
            _start_mono[0] = int(v)
    except Exception:
        pass


OPS_HEADER = ("rank,step,seq,op,group,group_size,dtype,elements,bytes,async,start_s,end_s,"
              "issue_mono_ns,end_mono_ns,duration_ns,wait_ns,algbw_bps,busbw_bps\n")
STEPS_HEADER = "rank,step,ops,bytes,comm_ns,wait_ns,exposed_ns,overlapped_ns,ops_by_kind\n"


class _Writer(object):
    def __init__(self, run_dir):
        self.dir = os.path.join(run_dir, "comm")
        self.who, self.rank = _who()
        self.ops_f = self.steps_f = None
        self.stop = threading.Event()
        self.pid = os.getpid()

    def _open(self):
        if self.ops_f is None:
            os.makedirs(self.dir, exist_ok=True)
            p = os.path.join(self.dir, "ops-%s.csv" % self.who)
            new = not os.path.exists(p)
            self.ops_f = open(p, "a")
            if new:
                self.ops_f.write(OPS_HEADER)
            p = os.path.join(self.dir, "steps-%s.csv" % self.who)
            new = not os.path.exists(p)
            self.steps_f = open(p, "a")
            if new:
                self.steps_f.write(STEPS_HEADER)

    def flush(self, final=False):
        if os.getpid() != self.pid:
            return  # a forked child (DataLoader worker): the parent writes
        with _lock:
            ops = _pending_ops[:]
            del _pending_ops[:]
            cur = _step[0]
            # a step is final once the next has ended (its async ops are done)
            done = sorted(s for s in _steps_acc if final or s < cur - 1)
            rows = [(s, _steps_acc.pop(s)) for s in done]
        if not ops and not rows:
            return
        if _start_mono[0] is None:
            _load_start(os.path.dirname(self.dir))
        self._open()
        t0 = _start_mono[0]
        rk = "" if self.rank is None else str(self.rank)
        out = []
        for o in ops:
            dur = max(o.end_ns - o.issue_ns, 0)
            alg = o.bytes / (dur / 1e9) if dur > 0 and o.bytes else None
            out.append("%s,%d,%d,%s,%s,%d,%s,%d,%d,%d,%s,%s,%d,%d,%d,%d,%s,%s\n" % (
                rk, o.step, o.seq, o.op, o.group.replace(",", ";"), o.group_size, o.dtype,
                o.elements, o.bytes, 1 if o.is_async else 0,
                "%.6f" % ((o.issue_ns - t0) / 1e9) if t0 is not None else "",
                "%.6f" % ((o.end_ns - t0) / 1e9) if t0 is not None else "",
                o.issue_ns, o.end_ns, dur, o.wait_ns,
                "%.0f" % alg if alg is not None else "",
                "%.0f" % (alg * o.factor) if alg is not None else ""))
        self.ops_f.write("".join(out))
        self.ops_f.flush()
        out = []
        for s, a in rows:
            exposed = a[3]
            out.append("%s,%d,%d,%d,%d,%d,%d,%d,%s\n" % (
                rk, s, a[0], a[1], a[2], a[3], exposed, max(a[2] - exposed, 0),
                ";".join("%s:%d" % kv for kv in sorted(a[4].items()))))
        self.steps_f.write("".join(out))
        self.steps_f.flush()

    def loop(self):
        while not self.stop.wait(1.0):
            try:
                self.flush()
            except Exception:
                return  # never disturb training: stop logging

    def close(self):
        self.stop.set()
        try:
            self.flush(final=True)
        except Exception:
            pass
        for f in (self.ops_f, self.steps_f):
            try:
                if f is not None:
                    f.close()
            except Exception:
                pass


def _start_writer():
    d = _state.run_dir()
    if not d or _writer[0] is not None:
        return
    _load_start(d)
    w = _Writer(d)
    _writer[0] = w
    th = threading.Thread(target=w.loop, name="trainperf-comm", daemon=True)
    th.start()
    atexit.register(w.close)


_step_count = itertools.count(1)


def _on_opt_step(opt, args, kwargs):
    # next() on a count is atomic under the GIL: no lock per step
    _step[0] = next(_step_count)


def install(torch):
    """Patch torch.distributed, DDP and Work.wait. Idempotent; called by the
    auto hook before it wraps torch.autograd.backward."""
    global _installed, _log_max
    if _installed:
        return
    _installed = True
    mode = os.environ.get("TRAINPERF_COMM", "1")
    if mode == "0":
        return
    try:
        _log_max = max(0, int(os.environ.get("TRAINPERF_COMM_LOG_MAX", _log_max)))
    except ValueError:
        pass
    for s in os.environ.get("TRAINPERF_COMM_LOG_STEPS", "").split(","):
        if s.strip().isdigit():
            log_step(int(s))
    core = _state.core
    push, pop = core.range_push, core.range_pop
    import torch.distributed as dist
    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d as c10d
    for name, (sizing, factor) in _specs().items():
        orig = getattr(c10d, name, None)
        if orig is None:
            continue
        w = _wrap(dist, name, orig, sizing, factor, push, pop)
        if w is None:
            continue
        setattr(c10d, name, w)
        if getattr(dist, name, None) is orig:
            setattr(dist, name, w)
    _patch_work(dist, push, pop)
    try:
        _patch_init(dist, c10d)
        if dist.is_initialized():
            _publish_rank(dist)
    except Exception as exc:
        sys.stderr.write("trainperf: rank given in code not followed: %r\n" % (exc,))
    try:
        _patch_ddp(torch, dist, push, pop)
    except Exception as exc:
        sys.stderr.write("trainperf: DDP communication not timed: %r\n" % (exc,))
    from torch.optim import optimizer as optmod
    optmod.register_optimizer_step_post_hook(_on_opt_step)
    _start_writer()
