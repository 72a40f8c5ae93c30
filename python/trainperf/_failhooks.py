"""Failure hooks of the zero-code mode (`trainperf run`), installed by _autohook.

- Stacks on demand, for the hang watch of `trainperf run` (docs/failures.md):
  faulthandler is registered on a real-time signal, writing every thread's
  Python stack to RUN/live/pystack-PID.txt (C code: it works while the main
  thread is blocked or holds the GIL); a daemon thread blocked on the FIFO
  RUN/live/ctl-PID answers a request with RUN/live/state-PID.json: every
  thread's stack with its name, the main thread's innermost frame of the user's
  code and the torch.distributed collective it is in (with its sequence number
  when the distributed hooks track collectives: `in_flight`, which the
  installer sets to trainperf._comm.in_flight). The supervisor signals only
  processes that announced themselves this way.
- The checkpoint phase: torch.save, torch.distributed.checkpoint.save /
  async_save, Lightning's Trainer.save_checkpoint and Hugging Face's
  Trainer._save_checkpoint run inside the "checkpoint" phase (nested calls
  count once), and mark RUN/live/busy-PID while they last, as do an
  evaluation (the model switched to eval mode) and the interpreter's shutdown:
  the hang watch does not count that time as a stall.

Nothing here may break or slow the watched program: every hook is guarded,
and the thread costs nothing until asked.
"""
import os
import sys
import threading

from trainperf import _state

_CHECKPOINT = 7  # TPF_PHASE_CHECKPOINT

_installed = False
_live = None
_sig = None
_fh_file = None
_lock = threading.Lock()
_busy = {}           # kind -> depth, for this process
_busy_pid = None
_tls = threading.local()
in_flight = None     # the collectives in flight (wired by the installer: _comm.in_flight)


def _live_path(kind, ext=""):
    return os.path.join(_live, "%s-%d%s" % (kind, os.getpid(), ext))


# --- stacks on demand --------------------------------------------------------

def _register_faulthandler():
    global _fh_file, _sig
    import faulthandler
    import signal
    if not hasattr(signal, "SIGRTMIN"):
        return
    # A real-time signal nobody else uses; its default action would end the
    # process, so the supervisor sends it only to those named in a pystack file.
    _sig = int(signal.SIGRTMIN) + 6
    old = _fh_file
    f = open(_live_path("pystack", ".txt"), "w")
    f.write("# trainperf faulthandler signal=%d pid=%d\n" % (_sig, os.getpid()))
    f.flush()
    faulthandler.register(_sig, file=f, all_threads=True, chain=False)
    _fh_file = f
    if old is not None:
        try:
            old.close()
        except Exception:
            pass


def _user_frame(frame):
    """The innermost frame of the user's own code (not the library's)."""
    first = None
    here = os.path.dirname(os.path.abspath(__file__))
    f = frame
    while f is not None:
        fn = f.f_code.co_filename
        if first is None:
            first = f
        lib = ("site-packages" in fn or "dist-packages" in fn or fn.startswith("<")
               or fn.startswith(here) or "/lib/python" in fn)
        if not lib:
            return f
        f = f.f_back
    return first


_COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast",
    "broadcast_object_list", "reduce", "gather", "scatter", "barrier", "monitored_barrier",
    "send", "recv", "batch_isend_irecv",
    # set-up that waits for every rank: a rank missing from the rendezvous
    # holds the others here
    "init_process_group", "new_group",
}


def _collective(frame):
    f = frame
    while f is not None:
        if "torch/distributed/" in f.f_code.co_filename.replace("\\", "/") and \
                f.f_code.co_name in _COLLECTIVES:
            return f.f_code.co_name
        f = f.f_back
    return None


def _where(f):
    if f is None:
        return None
    return "%s (%s:%d)" % (f.f_code.co_name, os.path.basename(f.f_code.co_filename), f.f_lineno)


def _answer(req):
    import json
    import traceback
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    me = threading.get_ident()
    lines = []
    order = sorted(frames, key=lambda i: (i != main, i))
    for ident in order:
        if ident == me:
            continue
        lines.append('Thread "%s" (%d), most recent call first:' % (names.get(ident, "?"), ident))
        for fs in reversed(traceback.extract_stack(frames[ident])):
            lines.append('  File "%s", line %s in %s' % (fs.filename, fs.lineno, fs.name))
            if fs.line:
                lines.append("    " + fs.line.strip())
        lines.append("")
    mf = frames.get(main)
    where = _where(_user_frame(mf)) if mf is not None else None
    coll = _collective(mf) if mf is not None else None
    seq = None
    flight = None
    try:  # the distributed hooks, when wired
        flight = list(in_flight()) if in_flight is not None else []
    except Exception:
        flight = None
    if flight:
        lines.append("Collectives in flight (op, seq, group size, bytes, started):")
        for c in flight:
            lines.append("  %s #%s group %s bytes %s started %s" % (
                c.get("op"), c.get("seq"), c.get("group_size"), c.get("bytes"),
                c.get("started_s")))
        # the oldest one in progress is the one the rank waits on (later ones
        # cannot complete before it)
        first = flight[0]
        coll = first.get("op") or coll
        seq = first.get("seq")
    rank = os.environ.get("RANK")
    doc = {"req": req, "pid": os.getpid(), "rank": int(rank) if rank and rank.isdigit() else None,
           "where": where, "collective": coll, "seq": seq, "in_flight": flight,
           "text": "\n".join(lines)}
    path = _live_path("state", ".json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, default=str)
    os.replace(tmp, path)


def _ctl_loop(path):
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)  # blocks (GIL released) until asked
        except OSError:
            return
        try:
            data = os.read(fd, 256)
        except OSError:
            data = b""
        finally:
            os.close(fd)
        for tok in data.split():
            try:
                _answer(int(tok))
            except Exception:
                pass


def _start_ctl():
    path = _live_path("ctl")
    try:
        os.unlink(path)
    except OSError:
        pass
    os.mkfifo(path, 0o600)
    t = threading.Thread(target=_ctl_loop, args=(path,), name="trainperf-stacks", daemon=True)
    t.start()


def _after_fork():
    # A forked child (a DataLoader worker) has no ctl thread; its stacks go to
    # its own file, not the parent's.
    global _busy_pid, _lock
    # another thread may have held the lock at the fork: a fresh one, or the
    # child's first checkpoint would wait forever
    _lock = threading.Lock()
    _busy.clear()
    _busy_pid = None
    try:
        _register_faulthandler()
    except Exception:
        pass


# --- busy marks and the checkpoint phase --------------------------------------

def _busy_set(kind, on):
    global _busy_pid
    if _live is None:
        return
    with _lock:
        n = _busy.get(kind, 0) + (1 if on else -1)
        _busy[kind] = max(n, 0)
        any_busy = any(_busy.values())
        path = _live_path("busy")
        try:
            if any_busy and _busy_pid != os.getpid():
                with open(path, "w") as f:
                    f.write(" ".join(k for k, v in _busy.items() if v) + "\n")
                _busy_pid = os.getpid()
            elif not any_busy and _busy_pid == os.getpid():
                os.unlink(path)
                _busy_pid = None
        except OSError:
            pass


def _wrap_checkpoint(fn):
    if getattr(fn, "_trainperf_ckpt", False):
        return fn
    core = [None]

    def checkpoint_timed(*args, **kwargs):
        if core[0] is None:
            core[0] = _state.core or False
        c = core[0]
        outer = not getattr(_tls, "depth", 0)
        _tls.depth = getattr(_tls, "depth", 0) + 1
        if outer:
            _busy_set("checkpoint", True)
        if c:
            c.range_push(_CHECKPOINT)
        try:
            return fn(*args, **kwargs)
        finally:
            if c:
                c.range_pop()
            _tls.depth -= 1
            if outer:
                _busy_set("checkpoint", False)

    checkpoint_timed.__wrapped__ = fn
    checkpoint_timed.__doc__ = getattr(fn, "__doc__", None)
    checkpoint_timed.__name__ = getattr(fn, "__name__", "checkpoint")
    checkpoint_timed._trainperf_ckpt = True
    return checkpoint_timed


def _patch_attr(owner, name):
    try:
        fn = getattr(owner, name)
    except Exception:
        return
    if callable(fn):
        setattr(owner, name, _wrap_checkpoint(fn))


def _patch_dcp(mod):
    for name in ("save", "async_save", "save_state_dict"):
        if hasattr(mod, name):
            _patch_attr(mod, name)


def _patch_lightning(mod):
    trainer = getattr(mod, "Trainer", None)
    if trainer is not None:
        _patch_attr(trainer, "save_checkpoint")


def _patch_hf(mod):
    trainer = getattr(mod, "Trainer", None)
    if trainer is not None:
        _patch_attr(trainer, "_save_checkpoint")


_TARGETS = {
    "torch.distributed.checkpoint": _patch_dcp,
    "lightning.pytorch.trainer.trainer": _patch_lightning,
    "pytorch_lightning.trainer.trainer": _patch_lightning,
    "transformers.trainer": _patch_hf,
}


class _PostImport:
    """Patches a target module right after it has been executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _TARGETS:
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        inner = spec.loader
        patch = _TARGETS[fullname]

        class _Loader:
            def create_module(self, s):
                return inner.create_module(s)

            def exec_module(self, module):
                inner.exec_module(module)
                try:
                    patch(module)
                except Exception:
                    pass

            def __getattr__(self, attr):
                return getattr(inner, attr)

        spec.loader = _Loader()
        return spec


def patch_torch(torch):
    """torch.save as the checkpoint phase, and evaluation (the model in eval
    mode) marked busy. Called by the auto hook once torch has loaded."""
    try:
        torch.save = _wrap_checkpoint(torch.save)
    except Exception:
        pass
    for name, patch in _TARGETS.items():
        mod = sys.modules.get(name)
        if mod is not None:
            try:
                patch(mod)
            except Exception:
                pass
    try:
        from torch.nn.modules import module as modmod
        Module = modmod.Module
        orig_train = Module.train
        if getattr(orig_train, "_trainperf", False):
            return

        def train(self, mode=True):
            # only the model the auto hook found (the top-level module)
            if getattr(self, "_trainperf_forward_hooked", False):
                was_eval = getattr(self, "_trainperf_eval", False)
                if was_eval != (not mode):
                    self._trainperf_eval = not mode
                    _busy_set("eval", not mode)
            return orig_train(self, mode)

        train._trainperf = True
        train.__wrapped__ = orig_train
        Module.train = train
    except Exception:
        pass


_embedded = False


def install_embedded(run_dir):
    """Embedded mode (trainperf.start(), no `trainperf run`): faulthandler on
    the real-time signal, so that the collector thread, when its `hang` alert
    fires, saves every Python thread's stack (src/watch/hangdump.c
    hd_dump_self). No answering thread and no import hooks: nothing else
    runs in this process. Never raises."""
    global _live, _embedded
    if _live is not None or not run_dir:
        return  # under `trainperf run` (install() did it), or already
    try:
        _live = os.path.join(run_dir, "live")
        os.makedirs(_live, exist_ok=True)
        _register_faulthandler()
        _embedded = True
    except Exception:
        _live = None


def uninstall_embedded():
    """After trainperf.stop(): the signal goes back to its default and the
    file is closed (the run directory may be moved)."""
    global _live, _embedded, _fh_file, _sig
    if not _embedded:
        return
    _embedded = False
    try:
        import faulthandler
        if _sig is not None:
            faulthandler.unregister(_sig)
        if _fh_file is not None:
            _fh_file.close()
            # only the header line: no hang was dumped, nothing to keep
            if os.path.getsize(_fh_file.name) <= 96:
                os.unlink(_fh_file.name)
    except Exception:
        pass
    _fh_file = None
    _sig = None
    _live = None


def _hook_excepthook():
    """Note the exception that ends the process (a rank that failed in a
    collective after another left the loop), then let it be printed."""
    prev = sys.excepthook

    def excepthook(etype, value, tb):
        try:
            import re
            text = str(value).strip()
            line = text.splitlines()[0] if text else ""
            # C++ source locations say nothing to the user; the first
            # sentence says what happened
            line = re.sub(r"\[[^\]]*\.(?:cc|cpp|cu|h|hpp):\d+\]\s*", "", line)
            line = line.split(". ", 1)[0]
            _state.exit_info["error"] = ("%s: %s" % (etype.__name__, line))[:240]
            # where it was raised: the innermost frame of the user's code
            f = None
            while tb is not None:
                f, tb = tb.tb_frame, tb.tb_next
            _state.exit_info["where"] = _where(_user_frame(f)) if f is not None else None
        except Exception:
            pass
        _loop_end(1)  # the main thread left whatever loop it was in
        prev(etype, value, tb)

    sys.excepthook = excepthook


def _loop_end(why):
    try:
        _state.core.loop_end(why)
    except Exception:
        pass


def at_training_start():
    """The first step began: from here, the interpreter's shutdown ends the
    training loop (TPF_LOOP_EXIT). Registered now, so that it runs before the
    exit handlers registered at start-up (atexit runs the last first): their
    time (a tracker's upload, a logger's flush) is shutdown, not a stall."""
    try:
        import atexit
        atexit.register(_loop_end, 2)
    except Exception:
        pass


def install():
    """Register the stack dumps and the import hooks. Idempotent; no-op
    outside `trainperf run`."""
    global _installed, _live
    if _installed:
        return
    _installed = True
    run_dir = os.environ.get("TRAINPERF_RUN_DIR")
    if not run_dir:
        return
    _live = os.path.join(run_dir, "live")
    try:
        os.makedirs(_live, exist_ok=True)
        _register_faulthandler()
        _start_ctl()
        os.register_at_fork(after_in_child=_after_fork)
        # interpreter shutdown (atexit first, then module teardown and a last
        # garbage collection, seconds with torch loaded) makes no steps either
        import atexit
        atexit.register(_busy_set, "exit", True)
        _hook_excepthook()
    except Exception as exc:
        sys.stderr.write("trainperf: stacks on hang unavailable: %r\n" % (exc,))
    sys.meta_path.insert(0, _PostImport())
