"""The engine behind @trainperf.monitor and trainperf.performance_monitor: one
call of the wrapped function is one step; on chosen steps the shared
profiling hooks (_profile_hooks.StepHooks, also used by `trainperf run
--profile ...`) count FLOPs by module, drive a profiler window, record CUDA
memory stats and snapshots, and log one step's collectives."""
import sys
import time

from trainperf import _state

__all__ = ["MonitorStats", "StepMonitor", "performance_monitor"]


class MonitorStats:
    """What the decorator measured (read it as wrapper.stats)."""

    def __init__(self):
        self.steps = 0
        self.samples = 0
        self.tokens = 0
        self.flops = {}        # step index -> FLOPs counted
        self.flops_by_module = {}  # step index -> {module: FLOPs}
        self.flops_method = None
        self.step_time_s = {}  # step index -> seconds, of the step after a FLOP step
        self.tflops_per_s = None
        self.mfu = None
        self.mfu_reason = None
        self.profiler_windows = []
        self.snapshots = []
        self.cuda_memory = None
        self.skipped = {}      # feature -> reason it did not run

    def __repr__(self):
        return "MonitorStats(%r)" % self.__dict__


def _value(spec, args, kwargs):
    if spec is None:
        return 0
    if callable(spec):
        v = spec(*args, **kwargs)
    else:
        v = spec
    return int(v or 0)


def _print_rank0(line):
    if _state.rank() == 0:
        print(line, flush=True)


class StepMonitor:
    def __init__(self, fn, samples=None, tokens=None, flops_steps=(), flops=None,
                 profile=None, memory_snapshot_step=None, cuda_memory_every=None,
                 device=None, dtype=None, model=None, comm_log_step=None, verbose=False,
                 top_k=10, start=False, profile_kwargs=None):
        from . import _comm
        from ._profile_hooks import StepHooks
        self.fn = fn
        self.samples, self.tokens = samples, tokens
        self.user_flops = flops
        self.device, self.dtype = device, dtype
        self.stats = MonitorStats()
        self.model = model
        self._start = start
        self._started_here = False
        if device is None and model is not None:
            try:
                self.device = next(model.parameters()).device
            except Exception:
                pass
        self.hooks = StepHooks(
            profile=profile, profile_kwargs=profile_kwargs,
            flops_step=sorted(flops_steps or ()), memory_every=cuda_memory_every,
            snapshot_step=memory_snapshot_step, comm_log_step=comm_log_step,
            say=_print_rank0 if verbose else None, device=self.device, dtype=dtype,
            top_k_print=top_k if verbose else 0, oom_snapshot=False,
            module_root=type(model).__name__ if model is not None else None, comm=_comm)

    def _maybe_start_collector(self):
        # start=None: an embedded collector when nothing watches this process.
        self._start, start = False, self._start
        core = _state.core
        if start is False or core.attached() or core.run_dir():
            return
        import os
        if start is None and os.environ.get("TRAINPERF_RUN_DIR"):
            return
        from ._embedded import start as start_collector
        d = start_collector()
        if d:
            self._started_here = True
            self.hooks.say("trainperf: recording to %s" % d)

    def __call__(self, args, kwargs):
        i = self.stats.steps
        if self._start is not False:
            self._maybe_start_collector()
        s = _value(self.samples, args, kwargs)
        t = _value(self.tokens, args, kwargs)
        h = self.hooks
        h.begin(i)
        t0 = time.perf_counter()
        try:
            with _state.core.step(samples=s, tokens=t):
                out = self.fn(*args, **kwargs)
        except BaseException:
            h.abort_step()
            raise
        dt = time.perf_counter() - t0
        self.stats.steps += 1
        self.stats.samples += s
        self.stats.tokens += t
        h.end(i)
        self._after(i, dt)
        return out

    def _after(self, i, dt):
        st, h = self.stats, self.hooks
        if self.user_flops and i == 0:
            # the report's MFU per rank reads the declared count (RUN/flops/)
            from ._profile_hooks import declare_flops, peak_for
            try:
                declare_flops(self.user_flops, out_dir=h.out_dir,
                              peak=peak_for(self.device, self.dtype))
            except (ValueError, OSError):
                pass
        f = h.flops_by_step.get(i)
        if f is not None:
            st.flops[i] = f["total_flops"]
            st.flops_by_module[i] = f["by_module"]
            st.flops_method = f["method"]
        prev = h.flops_by_step.get(i - 1)
        if prev is not None and prev.get("step_time_s") is not None and f is None:
            st.step_time_s[i] = prev["step_time_s"]
            st.tflops_per_s = prev["tflops_per_s"]
            st.mfu, st.mfu_reason = prev["mfu"], prev["mfu_reason"]
        elif self.user_flops and not h.flops_by_step and dt > 0:
            # no count: the user's FLOPs per step give the rate
            from .torch_helpers import mfu
            st.step_time_s[i] = dt
            st.tflops_per_s = self.user_flops / dt / 1e12
            st.mfu, st.mfu_reason = mfu(self.user_flops, dt, self.device, self.dtype)
            if st.mfu is not None:
                _state.core.counter("mfu", st.mfu)
                from ._profile_hooks import _note
                _note("mfu", st.mfu)
        if h.prof is not None:
            st.profiler_windows = list(h.prof.windows)
        if h.cuda_mem is not None:
            st.cuda_memory = h.cuda_mem.last
        if h.snapshot is not None:
            st.snapshots = list(h.snapshot.paths)
        st.skipped = dict(h.skipped)

    def close(self):
        self.hooks.close()
        st = self.stats
        st.skipped = dict(self.hooks.skipped)
        if self.hooks.prof is not None:
            st.profiler_windows = list(self.hooks.prof.windows)
        if self._started_here:
            self._started_here = False
            from ._embedded import stop
            stop()


def _wrap(fn, options):
    import atexit
    import functools
    mon = StepMonitor(fn, **options)
    atexit.register(mon.close)  # an open profiler window / memory history ends cleanly

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return mon(args, kwargs)

    wrapper.stats = mon.stats
    wrapper.monitor = mon
    wrapper.close = mon.close
    return wrapper


def performance_monitor(model=None, enabled=True, flop_counter_step=5, comm_logger_step=2,
                        wait=1, warmup=1, active=3, repeat=1, *, skip_first=0, samples=None,
                        tokens=None, memory_every=None, memory_snapshot=True,
                        record_shapes=False, profile_memory=False, with_stack=False,
                        top_k=10, verbose=True, start=None, device=None, dtype=None,
                        flops=None):
    """Decorate a train-step function (each call is one step), as the
    profiling guides' `performance_monitor` does:

        @trainperf.performance_monitor(model, enabled=True, flop_counter_step=5,
                                       comm_logger_step=2, wait=1, warmup=1,
                                       active=3, repeat=1)
        def train_step(batch): ...

    On rank 0 it prints the profiler schedule at the first step, the FLOP
    table by module of `model` and a TFLOP/s (and MFU) line around
    flop_counter_step, and the top-`top_k` operators after each profiler
    window. Every rank writes its traces (RUN/profile/trace-rank<R>-step<S>.json),
    its FLOP table (RUN/flops/) and, on CUDA, a memory snapshot at the end of
    the first window (RUN/memory/; memory_snapshot=False: none) into the run
    directory. comm_logger_step logs that step's collectives (distributed
    runs). flop_counter_step / comm_logger_step None: not done; wait=None (or
    active=0): no profiler window. start=None starts an embedded collector
    when nothing watches the process (under `trainperf run` the run's
    directory is used). enabled=False returns the function unchanged.
    """
    def deco(fn):
        if not enabled:
            return fn
        profile = None
        if wait is not None and active:
            profile = dict(wait=wait, warmup=warmup, active=active, repeat=repeat,
                           skip_first=skip_first)
        snap = None
        if memory_snapshot and profile is not None:
            snap = skip_first + wait + warmup + active - 1
        opts = dict(samples=samples, tokens=tokens, model=model, profile=profile,
                    profile_kwargs=dict(record_shapes=record_shapes,
                                        profile_memory=profile_memory, with_stack=with_stack),
                    flops_steps=[flop_counter_step] if flop_counter_step is not None else (),
                    comm_log_step=comm_logger_step, cuda_memory_every=memory_every,
                    memory_snapshot_step=snap, verbose=verbose, top_k=top_k, start=start,
                    device=device, dtype=dtype, flops=flops)
        return _wrap(fn, opts)
    if callable(model) and not _is_module(model) and enabled is True and \
            flop_counter_step == 5 and comm_logger_step == 2:
        # used bare, @trainperf.performance_monitor, on the step function itself
        fn, model = model, None
        return deco(fn)
    return deco


def _is_module(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)
