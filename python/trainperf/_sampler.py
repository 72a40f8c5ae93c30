"""Low-rate sampler of the training thread's Python stack (in-process).

Why in-process: reading another process's stacks (py-spy) needs ptrace
rights; a thread of the process itself needs none. Two readers:
- on CPython 3.11, a native thread of the extension (_pystack.c) reads the
  training thread's frames at 94 Hz without the GIL, wherever the thread is:
  also in the short stretches of Python between torch calls, which a reader
  that must win the GIL never sees (it wins it at the next torch call). This
  daemon thread then only collects those samples, 4 a tick, and looks at the
  process's other threads;
- elsewhere (or TRAINPERF_NATIVE_STACKS=0), this daemon thread samples the
  training thread with sys._current_frames() at 47 Hz (a prime rate, so it
  does not lock onto a periodic step), holding the GIL for tens of µs.
Either costs a fraction of a percent of the training thread, measured in
bench/bench_python.py.

Each sample is classified by the frames on the stack: inside torch's
DataLoader (data), a module call (forward, or eval while the eval phase is
open), autograd (backward), an optimizer (optimizer), torch.distributed
(comm), torch.compile (compile), saving (checkpoint), torch's Python code or
a line of the user's code computing with tensors (compute); anything else is
"other": the user's own code outside known phases. For that the profile
names the innermost frame of the user's code (not the stdlib or a package)
and what kind of work it is.

Output in the run directory (docs/run-format.md):
  pyprof/stacks-<pid>.folded  flame-graph-ready folded stacks, the phase as
                              the root frame: "[other];main (train.py:30);..."
  pyprof/events-<pid>.json    the profile's summary plus the figures of the
                              snapshot given to start() (_evalhooks')
Both are rewritten every few seconds and at exit, atomically.
"""
import array
import atexit
import json
import linecache
import os
import re
import sys
import sysconfig
import threading
import time

from trainperf import _cuda, _state

MAX_STACKS = 5000      # distinct stacks kept; the rest are counted as truncated
MAX_DEPTH = 48
FLUSH_EVERY_S = 3.0
READ_THREADS_EVERY_S = 0.5  # the threads' schedstat (a file read per thread)

_pid = os.getpid()
_started = False
_stop = threading.Event()
_ticks = ()             # called every half second once training began (start())
_snapshot = [None]      # the events file's figures (start())
_thread = [None]
_tid = [None]
_stacks = {}            # tuple of (code, line) outer->inner, phase -> count
_by_phase = {}
_truncated = [0]
_nsamples = [0]
_cost_s = [0.0]
_hz = [47.0]
_cls_cache = {}
_bg = {}                # (code, line) of other threads' user code -> samples
_thr_code = {}          # (thread ident, (code, line)) -> samples, training started
_thr_cpu = {}           # thread ident -> schedstat readings (_read_threads)
_thr_t0 = [None]        # the first reading
MAX_BG = 2000
_native = [False]       # the training thread's stacks come from _core's native reader
_native_stats = [0, 0, 0, 0.0]  # samples taken, lost, failed reads, reader CPU s
_ncodes = {}            # native code id -> _NCode
_nshape = {}            # a native sample's frames (bytes) -> _shape()
_ncount = {}            # (phase, a native sample's frames) -> samples
_NATIVE_RATE = 2        # the native reader samples at twice the configured rate
_NATIVE_X = 4           # native samples per tick of the Python sampler
_tick_hz = [47.0]       # this thread's ticks a second
_nproxy = {}            # (file, function, first line) -> _NCode
_BLOCKED = ("/threading.py", "/queue.py", "/selectors.py", "/socket.py")

_LIB_DIRS = tuple(sorted({os.path.realpath(p) + os.sep for p in (
    sysconfig.get_paths().get("stdlib", ""), sysconfig.get_paths().get("purelib", ""),
    sysconfig.get_paths().get("platlib", "")) if p}))
_HERE = os.path.dirname(os.path.realpath(__file__)) + os.sep


def _classify(code):
    """(phase or None, is_user_code) of one code object, cached."""
    if code is None:
        return (None, False)
    r = _cls_cache.get(code)
    if r is not None:
        return r
    fn = code.co_filename.replace("\\", "/")
    name = code.co_name
    ph = None
    if "/torch/utils/data/" in fn:
        ph = "data"
    elif _is_profiler_file(fn):
        ph = None  # the profiler's own work (_profiler_samples), not the step's phases
    elif fn.endswith("/torch/nn/modules/module.py") and name in ("_call_impl", "_wrapped_call_impl"):
        ph = "forward"
    elif "/torch/autograd/" in fn or fn.endswith("/torch/_tensor.py") and name == "backward":
        ph = "backward"
    elif "/torch/optim/" in fn:
        ph = "optimizer"
    elif "/torch/distributed/" in fn and "checkpoint" not in fn:
        ph = "comm"
    elif ("/torch/_dynamo/" in fn or "/torch/_inductor/" in fn) and not (
            # the wrappers that disable dynamo (optimizer.zero_grad has one)
            # or run what was compiled: not compiling
            fn.endswith(("/eval_frame.py", "/output_code.py")) or "/_inductor/runtime/" in fn):
        ph = "compile"
    elif fn.endswith("/torch/serialization.py") and name in ("save", "_save") or \
            "/torch/distributed/checkpoint/" in fn:
        ph = "checkpoint"
    elif fn.endswith("/torch/_tensor_str.py") or fn.endswith("/torch/_tensor.py") and \
            name in ("__repr__", "__str__", "__format__"):
        # a tensor turned into text (print, an f-string): Python walking its
        # elements on the host, whatever torch ops it calls inside
        ph = "format"
    elif fn.endswith(_LOG_FILES) and name in ("log", "log_dict"):
        # a framework's metric logging (Lightning's self.log): its Python,
        # not tensor ops, whatever torch calls it makes
        ph = "host"
    elif "/torch/" in fn and "/torch/utils/" not in fn:
        # tensor ops called outside the model (the loss, metrics): compute
        ph = "compute"
    real = fn
    user = not (fn.startswith("<") or real.startswith(_LIB_DIRS) or real.startswith(_HERE)
                or "/site-packages/" in fn or "/dist-packages/" in fn)
    r = (ph, user)
    if len(_cls_cache) < 20000:
        _cls_cache[code] = r
    return r


# phases that win over ones further out on the stack (compile inside forward)
_INNER_WINS = {"compile", "checkpoint", "comm", "format", "host"}
_LOG_FILES = ("/lightning/pytorch/core/module.py", "/pytorch_lightning/core/module.py",
              "/lightning/fabric/fabric.py")

_LOADS = ("LOAD_NAME", "LOAD_GLOBAL", "LOAD_FAST", "LOAD_DEREF", "LOAD_FAST_CHECK",
          "LOAD_FAST_LOAD_FAST", "LOAD_CLASSDEREF")
_line_names_cache = {}   # code -> {line: names loaded on it}
_tensor_line_cache = {}  # (file, function, first line, line) -> the line computes with tensors


def _line_names(code):
    """{line: names the line loads} of one code object, cached."""
    m = _line_names_cache.get(code)
    if m is not None:
        return m
    m = {}
    try:
        import dis
        cur = None
        for ins in dis.get_instructions(code):
            pos = getattr(ins, "positions", None)
            ln = pos.lineno if pos is not None and pos.lineno else None
            if ln is None and type(ins.starts_line) is int:
                cur = ins.starts_line
            ln = ln or cur
            if ln is None or ins.opname not in _LOADS:
                continue
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            m.setdefault(ln, set()).update(n for n in names if isinstance(n, str))
    except Exception:
        pass
    if len(_line_names_cache) < 5000:
        _line_names_cache[code] = m
    return m


def _fn_key(code):
    """A function as the caches know it (a code object or a native _NCode)."""
    return (code.co_filename, code.co_name, code.co_firstlineno)


def _tensor_line(f, line=None):
    """Whether the frame's current line of user code computes with tensors:
    a name it loads holds a torch.Tensor (a model of bare tensors, a
    hand-written update: `h = torch.tanh(emb @ W1 + b1)`, `p.data += -lr *
    p.grad`). Torch ops run in C, so the sampled stack ends at that line;
    without this they would read as the user's host code. Not a line that
    reads a result back (.item(), .cpu(): synchronisation), does I/O or
    waits. Cached per line (names keep their types from step to step);
    line: another line of f's function (a native sample's), read against
    f's variables."""
    code = f.f_code
    if line is None:
        line = f.f_lineno or 0
    key = _fn_key(code) + (line,)
    r = _tensor_line_cache.get(key)
    if r is not None:
        return r
    r = False
    torch = sys.modules.get("torch")
    names = _line_names(code).get(line)
    if torch is not None and names:
        src = linecache.getline(code.co_filename, line)
        if not (src and (_SYNC.search(src) or _IO.search(src) or _WAIT.search(src))):
            try:
                loc, glo = f.f_locals, f.f_globals
                tensor = torch.Tensor
                for n in names:
                    v = loc.get(n, glo.get(n))
                    if isinstance(v, tensor):
                        r = True
                        break
            except Exception:
                r = False
    if len(_tensor_line_cache) < 20000:
        _tensor_line_cache[key] = r
    return r


def _sample_once(frames, tid, gc=False):
    f = frames.get(tid)
    if f is None:
        return
    stack = []
    depth = 0
    leaf = f
    while f is not None and depth < 512:
        stack.append((f.f_code, f.f_lineno or 0))  # None while a frame is being set up
        f = f.f_back
        depth += 1
    phase = _account(_shape(stack), gc, lambda top: _tensor_line(leaf))
    if len(frames) > 2 and _state.ev.training_started:
        _sample_others(frames, tid, phase == "other")


def _outside_closure(stack):
    """The frames (innermost first) that name a sample's phase. A closure
    the optimizer's step calls (LBFGS's, Lightning's training_step under
    its optimizer-step wrapper) runs the user's code inside the step: its
    time is what that code does (forward, backward, logging), not the
    update, so only the frames inside the user's outermost one there count.
    A user's own optimizer class (its `step`) stays the optimizer's."""
    j = None
    for i, (code, _) in enumerate(stack):
        if code is not None and _classify(code)[0] == "optimizer":
            j = i  # the innermost optimizer frame
            break
    if j is None:
        return stack
    for i in range(j - 1, -1, -1):
        code = stack[i][0]
        if code is None:
            continue
        ph, user = _classify(code)
        if user:
            return stack if code.co_name == "step" else stack[:i]
        if ph in ("forward", "backward"):
            return stack[:i + 1]  # the closure's forward or backward, called by a framework
    return stack


def _shape(stack):
    """What a stack of the training thread says by itself: (the stack as
    kept, innermost first; its phase or None; whether the innermost frame is
    the user's, outside input preparation; the stack outermost first)."""
    outer = special = None
    for code, _ in _outside_closure(stack):
        ph = _classify(code)[0]
        if ph is not None:
            # the outermost known frame names the phase, unless an inner one
            # is compile/checkpoint/comm (they run inside forward or a step)
            outer = ph
            if special is None and ph in _INNER_WINS:
                special = ph
    leaf_code = stack[0][0] if stack else None
    if len(stack) > MAX_DEPTH:
        # keep the outer frames (the user's code) and the innermost few
        stack = stack[:12] + [(None, 0)] + stack[-(MAX_DEPTH - 12):]
    user_leaf = bool(stack) and _classify(leaf_code)[1] and not _input_fn(stack)
    phase = special or outer
    if phase in ("format", "host"):
        phase = None  # host code (_kind names it), inside the model or out
    return stack, phase, user_leaf, tuple(reversed(stack))


_eval_host = [0]  # samples of the eval phase outside the model and torch ops


def _account(shape, gc, tensor_line, raw=None):
    """Count one sample of the training thread (shape: _shape's), given
    whether a collection was running and how to tell a line of tensor ops;
    raw: a native sample's frames (bytes: its hash is cached), counted
    under it. The phase."""
    stack, phase, user_leaf, rev = shape
    if gc:
        # the sampler was held past its time by a collection (it holds the
        # GIL), or the native reader's sample fell in one: the stack is where
        # the collection started, not where the time went
        phase = "gc"
    elif _state.ev.active and phase in (None, "forward", "data"):
        if phase is None and not (user_leaf and tensor_line(stack[0])):
            # outside the model and torch: the evaluation runs the script's
            # own Python (a simulator collecting a rollout, not a validation)
            _eval_host[0] += 1
        phase = "eval"
    if phase is None and user_leaf and _state.ev.training_started and \
            tensor_line(stack[0]):
        # the innermost frame is the user's, on a line of tensor ops: the
        # thread is inside one of them (model compute written without nn.Module)
        phase = "compute"
    if phase is None:
        phase = "other" if _state.ev.training_started else "startup"
    _nsamples[0] += 1
    _by_phase[phase] = _by_phase.get(phase, 0) + 1
    counts, key = (_ncount, (phase, raw)) if raw is not None else (_stacks, (phase, rev))
    n = counts.get(key)
    if n is not None:
        counts[key] = n + 1
    elif len(_stacks) + len(_ncount) < MAX_STACKS:
        counts[key] = 1
    else:
        _truncated[0] += 1
    return phase


def _all_stacks():
    """{(phase, stack outer->inner): samples} of both readers."""
    out = dict(_stacks)
    for (phase, raw), n in list(_ncount.items()):
        k = (phase, _nshape[raw][3])
        out[k] = out.get(k, 0) + n
    return out


class _NCode:
    """A function as the native reader names it: what _classify, _kind and
    the folded stacks read of a code object."""
    __slots__ = ("co_filename", "co_name", "co_firstlineno")

    def __init__(self, filename, name, firstlineno):
        self.co_filename, self.co_name, self.co_firstlineno = filename, name, firstlineno


def _ncode(filename, name, firstlineno):
    k = (filename, name, firstlineno)
    c = _nproxy.get(k)
    if c is None:
        c = _nproxy[k] = _NCode(filename, name, firstlineno)
    return c


def _in_gc(t):
    for a, b in reversed(_state.gc_recent):
        if a <= t <= b:
            return True
        if b < t:
            return False
    return False


def _take_native(frames, tid):
    """Count the native reader's samples of the training thread since the
    last tick. They were taken when the reader woke, wherever the thread
    was, holding the GIL or not; the live frames only tell tensor lines
    apart and give the other threads' samples."""
    samples, codes, stats = _state.core.pystack_take()
    for i, (fn, name, first) in codes.items():
        _ncodes[i] = _ncode(fn, name, first)
    _native_stats[:] = stats
    live = []

    def tensor_line(top):
        code, line = top
        if code is None:
            return False
        k = _fn_key(code)
        r = _tensor_line_cache.get(k + (line,))
        if r is not None:
            return r
        # the same function is live now: its variables tell (their types
        # hold from step to step); otherwise unknown, not cached. The walk
        # makes a frame object per level: only on a miss, once a tick
        if not live:
            m = {}
            f = frames.get(tid)
            while f is not None and len(m) < 64:
                c = f.f_code
                if _classify(c)[1]:
                    m.setdefault(_fn_key(c), f)
                f = f.f_back
            live.append(m)
        lf = live[0].get(k)
        return _tensor_line(lf, line) if lf is not None else False

    phase = None
    for t, raw in samples:
        if not raw:
            continue
        shape = _nshape.get(raw)
        key = raw
        if shape is None:
            a = array.array("i", raw)  # (code id, line) pairs, innermost first
            shape = _shape([(_ncodes.get(a[k]), a[k + 1] if a[k + 1] > 0 else 0)
                            for k in range(0, len(a) - 1, 2)])
            if len(_nshape) < 20000:
                _nshape[raw] = shape
            else:
                key = None  # counted by its stack
        phase = _account(shape, _in_gc(t), tensor_line, key)
    if len(frames) > 2 and _state.ev.training_started:
        # each tick's look at the other threads stands for _NATIVE_X samples
        _sample_others(frames, tid, phase == "other", _NATIVE_X)


def _sample_others(frames, tid, outside, weight=1):
    """Where the process's other threads run the user's code: per thread
    (_thr_code, for the threads' CPU of _read_threads) and, while the
    training thread is outside every phase (perhaps waiting for a
    producer), in _bg. A thread blocked in a queue or lock, or in no user
    code, is skipped."""
    me = threading.get_ident()
    for t, f in frames.items():
        if t == tid or t == me:
            continue
        blocked = False
        depth = 0
        while f is not None and depth < 64:
            code = f.f_code
            if _classify(code)[1]:
                if not blocked:
                    key = (code, f.f_lineno or 0)
                    if outside and (key in _bg or len(_bg) < MAX_BG):
                        _bg[key] = _bg.get(key, 0) + weight
                    tk = (t, key)
                    if tk in _thr_code or len(_thr_code) < MAX_BG:
                        _thr_code[tk] = _thr_code.get(tk, 0) + weight
                break
            fn = code.co_filename.replace("\\", "/")
            if fn.endswith(_BLOCKED) or "/multiprocessing/" in fn:
                blocked = True
            f = f.f_back
            depth += 1


def _schedstat(nid):
    """(on-CPU s, run-queue wait s) of thread nid of this process, or None."""
    try:
        with open("/proc/self/task/%d/schedstat" % nid, "rb") as f:
            a = f.read().split()
        return (int(a[0]) / 1e9, int(a[1]) / 1e9)
    except (OSError, ValueError, IndexError):
        return None


def _read_threads():
    """Take the CPU time of each Python thread of the process (schedstat),
    from the first reading after training started: the training thread's
    time off the CPU while another thread runs Python is the GIL's."""
    try:
        _read_threads_once()
    except Exception:
        pass


def _read_threads_once():
    now = time.monotonic()
    if _thr_t0[0] is None:
        _thr_t0[0] = now
    for t in threading.enumerate():
        nid = getattr(t, "native_id", None)
        if nid is None or t.name == "trainperf-sampler":
            continue
        s = _schedstat(nid)
        if s is None:
            continue
        e = _thr_cpu.get(t.ident)
        if e is None:
            if len(_thr_cpu) >= 256:
                continue
            e = _thr_cpu[t.ident] = {"name": t.name, "first": s, "last": s, "t0": now}
        e["last"] = s
        e["t1"] = now


def _threads_cpu():
    """The threads' CPU over the training window, for events-<pid>.json."""
    if _thr_t0[0] is None:
        return None
    out = []
    for ident, e in list(_thr_cpu.items()):
        span = e["t1"] - e["t0"]
        cpu = e["last"][0] - e["first"][0]
        runq = e["last"][1] - e["first"][1]
        training = ident == _state.ev.thread
        if not training and not cpu >= 0.05 * span:
            continue
        d = {"name": e["name"], "training": training, "span_s": round(span, 4),
             "cpu_s": round(cpu, 4), "runq_s": round(runq, 4)}
        top = [(k[1], n) for k, n in _thr_code.items() if k[0] == ident]
        if top:
            (code, line), n = max(top, key=lambda kv: kv[1])
            d.update({"func": code.co_name, "file": code.co_filename, "line": line,
                      "samples": sum(n for _, n in top)})
        out.append(d)
    out.sort(key=lambda d: (not d["training"], -d["cpu_s"]))
    return {"samples": _nsamples[0], "threads": out[:16]}


def _others_top():
    top = sorted(_bg.items(), key=lambda kv: -kv[1])[:5]
    return [{"func": c.co_name, "file": c.co_filename, "line": ln, "samples": n}
            for (c, ln), n in top]


def _frame_label(code, line):
    if code is None:
        return "..."
    return "%s (%s:%d)" % (code.co_name, os.path.basename(code.co_filename), line or 0)


_SYNC = re.compile(r"\.item\(\)|\.cpu\(\)|\.tolist\(\)|\.numpy\(\)|synchronize\(|\.to\(['\"]cpu")
_IO = re.compile(r"\bopen\(|\.read\w*\(|\.write\w*\(|np\.load|numpy\.load|torch\.load|"
                 r"pickle\.|json\.load|Image\.open|\.readline|requests\.|urlopen")
# a wait on the line itself (in C: no Python frame below it). get() and
# join() only as queues and threads call them: dict.get(key) and
# str.join(items) always take an argument, and are not waits
_WAIT = re.compile(r"sleep\(|\.wait\(|\.acquire\(|\.get\(\)|\.get\((?:block|timeout|True)|"
                   r"\.join\(\)|\.join\(timeout")
_HANDOVER = re.compile(r"\.get\(|\.join\(|\.wait\(")
_INPUT = re.compile(r"batch|data|load|sample|token|collat|augment|transform|prep|"
                    r"read|fetch|shard|encod|vocab", re.I)
_IO_FILES = ("/pickle.py", "/json/", "/io.py", "/_pyio.py", "/numpy/lib/_npyio", "/npyio.py",
             "/PIL/", "/h5py/", "/csv.py", "/gzip.py", "/zipfile", "/tarfile.py",
             "/torch/serialization.py", "/safetensors/")


# a pool of processes started or stopped (not waited on for results: that
# is a wait, "input-pool" when it brings batches)
_POOL_FILES = ("/multiprocessing/pool.py", "/multiprocessing/context.py",
               "/multiprocessing/process.py", "/multiprocessing/popen_fork.py",
               "/multiprocessing/popen_spawn_posix.py", "/multiprocessing/popen_forkserver.py",
               "/concurrent/futures/process.py")
_POOL_LIFE = {"__init__", "Pool", "start", "_launch", "_repopulate_pool",
              "_repopulate_pool_static", "terminate", "_terminate_pool", "__exit__", "close",
              "join", "shutdown", "_start_executor_manager_thread", "_adjust_process_count",
              "_spawn_process"}


def _pool_life(stack, ui):
    """Whether the frames called from the user's (stack: outermost first, ui
    the user's innermost frame) start or stop a process pool: the outermost
    frame of multiprocessing or concurrent.futures below it says."""
    for c, _ in stack[ui + 1:]:
        if c is None:
            continue
        if c.co_filename.replace("\\", "/").endswith(_POOL_FILES):
            return c.co_name in _POOL_LIFE
    return False


def _input_fn(stack):
    """Whether the user's innermost functions (stack: innermost first) are
    named for input preparation: their tensor ops are the input's."""
    user = [c.co_name for c, _ in stack[:8] if c is not None and _classify(c)[1]]
    return any(_INPUT.search(n) for n in user[:3])


def _kind(stack, ui):
    """What kind of host work a stack of 'other' time is."""
    files = [c.co_filename.replace("\\", "/") if c is not None else "" for c, _ in stack]
    leaf_code, leaf_line = stack[ui]
    src = linecache.getline(leaf_code.co_filename, leaf_line) if ui == len(stack) - 1 else ""
    inner = files[ui + 1:]
    if any(fn.endswith("/torch/_tensor_str.py") for fn in inner):
        return "format"
    if _pool_life(stack, ui):
        return "pool-start"
    if any(any(k in fn for k in _IO_FILES) for fn in inner) or (src and _IO.search(src)):
        return "io"
    if src and _SYNC.search(src):
        return "sync"
    user_names = [c.co_name for c, _ in stack[:ui + 1] if c is not None and _classify(c)[1]]
    if src and _WAIT.search(src) or any(fn.endswith("/threading.py") or
                                        fn.endswith("/queue.py") for fn in inner):
        # a wait for the next batch (`batch = q.get()` fed by a producer
        # thread or process, in a function named for batches) is input
        usrc = src or linecache.getline(leaf_code.co_filename, leaf_line)
        if usrc and _INPUT.search(usrc) or any(_INPUT.search(n) for n in user_names[-3:]):
            # from a pool of worker processes (pool.map, futures) or a thread
            pool = any("/multiprocessing/" in fn or "/concurrent/futures/" in fn for fn in inner)
            if pool:
                return "input-pool"
            # a handover from a producer (a queue's get, a thread's join or
            # event), or a wait the batch function does itself on this thread
            # (a sleep, a lock: a synchronous fetch, nothing runs ahead)
            handover = any(fn.endswith("/queue.py") for fn in inner) or \
                (src and _HANDOVER.search(src))
            return "input-wait" if handover else "input-block"
        return "wait"
    if any(_INPUT.search(n) for n in user_names[-3:]) or \
            any("/numpy/" in fn or "/tokenizers/" in fn or "/PIL/" in fn for fn in inner):
        return "input"
    return "python"


def _summary(stacks):
    """Top functions of the 'other' samples, by innermost user frame."""
    funcs = {}
    for (phase, stack), n in stacks.items():
        if phase != "other" or not stack:
            continue
        ui = None
        for i in range(len(stack) - 1, -1, -1):
            if _classify(stack[i][0])[1]:
                ui = i
                break
        if ui is None:
            ui = len(stack) - 1
        code, line = stack[ui]
        if code is None:
            continue
        k = _kind(stack, ui)
        e = funcs.get(code)
        if e is None:
            e = funcs[code] = {"func": code.co_name, "file": code.co_filename,
                               "def_line": code.co_firstlineno, "samples": 0, "lines": {},
                               "kinds": {}}
        e["samples"] += n
        e["lines"][line] = e["lines"].get(line, 0) + n
        e["kinds"][k] = e["kinds"].get(k, 0) + n
    top = sorted(funcs.values(), key=lambda e: -e["samples"])[:10]
    out = []
    for e in top:
        line = max(e["lines"].items(), key=lambda kv: kv[1])[0]
        kind = max(e["kinds"].items(), key=lambda kv: kv[1])[0]
        out.append({"func": e["func"], "file": e["file"], "line": line,
                    "def_line": e["def_line"], "samples": e["samples"], "kind": kind})
    return out


def _lines_top(stacks):
    """The user's lines the training thread spent its samples in (the
    innermost frame of the user's code of each stack, in any phase but
    start-up), most first: where a rank that does work the others do not
    (a probe, logging, evaluation on rank 0) differs from them."""
    lines = {}
    total = 0
    for (phase, stack), n in stacks.items():
        if phase == "startup":
            continue
        total += n
        for i in range(len(stack) - 1, -1, -1):
            code, line = stack[i]
            if code is not None and _classify(code)[1]:
                k = (code.co_filename, code.co_name, line)
                e = lines.get(k)
                if e is None:
                    e = lines[k] = [0, {}]
                e[0] += n
                e[1][phase] = e[1].get(phase, 0) + n
                break
    ranked = sorted(lines.items(), key=lambda kv: -kv[1][0])
    # the six busiest, and the busiest lines of the data wait among the rest
    # (a Dataset's lines, which the loading rule names, are not crowded out
    # by the model's): still most first
    top = ranked[:6] + [kv for kv in ranked[6:]
                        if max(kv[1][1], key=kv[1][1].get) == "data"][:4]
    return {"samples": total,
            "lines": [{"func": fn, "file": f, "line": ln, "samples": n,
                       "phase": max(ph, key=ph.get),
                       "src": linecache.getline(f, ln).strip()[:80]}
                      for (f, fn, ln), (n, ph) in top]}


def _training_samples_in(stacks, frame):
    """Training samples (not start-up, not compiling) with a frame on the
    stack for which frame(code, path) holds."""
    n = 0
    for (phase, stack), c in stacks.items():
        if phase in ("startup", "compile"):
            continue
        if any(code is not None and frame(code, code.co_filename.replace("\\", "/"))
               for code, _ in stack):
            n += c
    return n


def _anomaly_samples(stacks):
    """Samples taking a traceback for an autograd op: with anomaly detection
    on, every op of a forward records the Python stack (torch calls
    torch.fx.traceback.format_stack from C++). A lower bound of what the
    mode costs: its checks of every gradient in backward are C++."""
    return _training_samples_in(stacks, lambda code, path: code.co_name == "format_stack" and
                                path.endswith("/traceback.py"))


def _is_profiler_file(path):
    """torch.profiler's own Python code (and the autograd profiler's)."""
    return "/torch/profiler/" in path or "/torch/autograd/profiler" in path


def _profiler_samples(stacks):
    """Training samples inside torch.profiler's Python code: turning its
    records into events (key_averages, tables) and writing traces. Recording
    itself is C++ and shows in the step times instead."""
    return _training_samples_in(stacks, lambda code, path: _is_profiler_file(path))


def _write():
    rd = _state.run_dir()
    if not rd or os.getpid() != _pid:
        return
    d = os.path.join(rd, "pyprof")
    os.makedirs(d, exist_ok=True)
    lines = []
    stacks = _all_stacks()  # once: the folded file, the summary and the lines
    for (phase, stack), n in sorted(stacks.items(), key=lambda kv: -kv[1]):
        fr = ";".join(_frame_label(c, ln).replace(";", ",") for c, ln in stack)
        lines.append("[%s]%s%s %d\n" % (phase, ";" if fr else "", fr, n))
    tmp = os.path.join(d, "stacks-%d.folded.tmp" % _pid)
    with open(tmp, "w") as f:
        f.writelines(lines)
    os.replace(tmp, os.path.join(d, "stacks-%d.folded" % _pid))
    ev = _snapshot[0]() if _snapshot[0] is not None else {}
    ev["profile"] = {"hz": _hz[0],
                     "samples": _nsamples[0], "truncated": _truncated[0],
                     "sampler_cost_s": round(_cost_s[0], 6),
                     "native": _native[0], "native_failed": _native_stats[2],
                     "native_lost": _native_stats[1], "native_cpu_s": round(_native_stats[3], 6),
                     "by_phase": dict(_by_phase), "other_top": _summary(stacks),
                     "threads_top": _others_top(), "threads_cpu": _threads_cpu(),
                     "lines_top": _lines_top(stacks),
                     "anomaly_samples": _anomaly_samples(stacks),
                     "eval_host_samples": _eval_host[0],
                     "profiler_samples": _profiler_samples(stacks)}
    ev["cuda"] = _cuda.snapshot()
    ev["written_at"] = round(time.monotonic(), 6)
    _write_json(os.path.join(d, "events-%d.json" % _pid), ev)


def _write_json(path, obj):
    tmp = "%s.tmp%d" % (path, _pid)
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


_flush_lock = threading.Lock()


def _flush():
    # the sampler thread and atexit may flush at once: one at a time, or one
    # os.replace loses the other's file
    try:
        with _flush_lock:
            _write()
    except Exception:
        if os.environ.get("TRAINPERF_DEBUG"):
            import traceback
            traceback.print_exc()


def _loop(tid):
    period = 1.0 / _tick_hz[0]
    next_flush = time.monotonic() + FLUSH_EVERY_S
    next_read = 0.0
    getframes = sys._current_frames
    perf = time.perf_counter
    gc_end = _state.gc_last_end
    native = _native[0]
    due = perf() + period
    while not _stop.wait(period):
        if os.getpid() != _pid:
            return
        t0 = perf()
        try:
            if native:
                _take_native(getframes(), tid)
            else:
                _sample_once(getframes(), tid, gc_end[0] > due)
        except Exception:
            if os.environ.get("TRAINPERF_DEBUG"):
                import traceback
                traceback.print_exc()
        _cost_s[0] += perf() - t0
        if _state.ev.training_started and (_thr_t0[0] is None or
                                               time.monotonic() >= next_read):
            _read_threads()
            for tick in _ticks:  # the installer's (_autohook._start_sampler)
                tick()
            next_read = time.monotonic() + READ_THREADS_EVERY_S
        if time.monotonic() >= next_flush:
            _flush()
            next_flush = time.monotonic() + FLUSH_EVERY_S
        due = perf() + period


def start(ticks=(), snapshot=None):
    """Start sampling the thread that calls this (the training thread).
    ticks: functions called every half second once training began, in
    order; snapshot: a function returning the dict the events file is made
    of (the profile's figures are added to it)."""
    global _started, _ticks
    if _started:
        return
    _started = True
    _ticks = tuple(ticks)
    _snapshot[0] = snapshot
    try:
        hz = float(os.environ.get("TRAINPERF_SAMPLE_HZ", "47"))
    except ValueError:
        hz = 47.0
    tid = threading.get_ident()
    _state.ev.thread = tid
    _tid[0] = tid
    atexit.register(_at_exit)
    if hz <= 0:
        return
    _hz[0] = _tick_hz[0] = min(hz, 1000.0)
    if os.environ.get("TRAINPERF_NATIVE_STACKS", "1") != "0":
        try:
            start_native = getattr(_state.core, "pystack_start", None)
            rate = min(_hz[0] * _NATIVE_RATE, 1000.0)
            _native[0] = bool(start_native and start_native(rate))
            if _native[0]:
                # this thread then only collects (a tick holds the GIL for
                # tens of µs): fewer ticks, each with several samples
                _hz[0], _tick_hz[0] = rate, rate / _NATIVE_X
        except Exception:
            _native[0] = False
    t = threading.Thread(target=_loop, args=(tid,), name="trainperf-sampler", daemon=True)
    _thread[0] = t
    t.start()


def _at_exit():
    _state.exit_info["ended"] = True  # the last write: the interpreter is shutting down
    _stop.set()
    t = _thread[0]
    if t is not None and t.is_alive():
        t.join(2.0)
    if _native[0] and os.getpid() == _pid:
        try:
            _state.core.pystack_stop()
            _take_native({}, _tid[0])
        except Exception:
            pass
    if _thr_t0[0] is not None:
        _read_threads()
    _flush()
