"""The engine behind @trainperf.monitor: one call of the wrapped function is
one step; on chosen steps it also counts FLOPs, drives a profiler window and
takes a memory snapshot (through trainperf.torch_helpers)."""
import time

import trainperf

from . import _exporters


class MonitorStats:
    """What the decorator measured (read it as wrapper.stats)."""

    def __init__(self):
        self.steps = 0
        self.samples = 0
        self.tokens = 0
        self.flops = {}        # step index -> FLOPs counted
        self.flops_method = None
        self.step_time_s = {}  # step index -> seconds, on FLOP-counting steps' neighbours
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


class StepMonitor:
    def __init__(self, fn, samples=None, tokens=None, flops_steps=(), flops=None,
                 profile=None, memory_snapshot_step=None, cuda_memory_every=None,
                 device=None, dtype=None):
        self.fn = fn
        self.samples, self.tokens = samples, tokens
        self.flops_steps = set(flops_steps or ())
        self.user_flops = flops
        self.device, self.dtype = device, dtype
        self.stats = MonitorStats()
        self.profiler = None
        if profile is not None:
            from .torch_helpers import ProfilerSchedule
            self.profiler = profile if isinstance(profile, ProfilerSchedule) \
                else ProfilerSchedule(**profile)
        self.snapshot_step = memory_snapshot_step
        self.snapshot = None
        self.cuda_mem = None
        if cuda_memory_every:
            from .torch_helpers import CudaMemoryStats
            self.cuda_mem = CudaMemoryStats(cuda_memory_every, device)
        self._last_end = None

    def _maybe_start_snapshot(self):
        from .torch_helpers import MemorySnapshot
        self.snapshot = MemorySnapshot()
        if not self.snapshot.start():
            self.stats.skipped["memory_snapshot"] = self.snapshot.reason

    def __call__(self, args, kwargs):
        i = self.stats.steps
        if self.snapshot_step is not None and self.snapshot is None:
            self._maybe_start_snapshot()
        s = _value(self.samples, args, kwargs)
        t = _value(self.tokens, args, kwargs)
        t0 = time.perf_counter()
        with trainperf.step(samples=s, tokens=t):
            if i in self.flops_steps:
                from .torch_helpers import count_flops
                out, fl, method = count_flops(self.fn, *args, user_flops=self.user_flops,
                                              **kwargs)
                if fl:
                    self.stats.flops[i] = fl
                    self.stats.flops_method = method
                    trainperf.counter("flops", float(fl))
                    _exporters.note("flops", float(fl))
                else:
                    self.stats.skipped["flops"] = "FLOPs could not be counted; pass flops="
            else:
                out = self.fn(*args, **kwargs)
        t1 = time.perf_counter()
        self.stats.steps += 1
        self.stats.samples += s
        self.stats.tokens += t
        self._after(i, t1 - t0)
        return out

    def _after(self, i, dt):
        st = self.stats
        # MFU from a step that ran without the FLOP counter's overhead.
        fl = st.flops.get(i - 1)
        if fl is None and self.user_flops and not st.flops:
            fl = self.user_flops
        if fl and i not in self.flops_steps:
            from .torch_helpers import mfu
            st.step_time_s[i] = dt
            v, why = mfu(fl, dt, self.device, self.dtype)
            st.mfu, st.mfu_reason = v, why
            if v is not None:
                trainperf.counter("mfu", v)
                _exporters.note("mfu", v)
        if self.profiler is not None:
            self.profiler.step()
            st.profiler_windows = list(self.profiler.windows)
        if self.cuda_mem is not None:
            self.cuda_mem.step()
            st.cuda_memory = self.cuda_mem.last
            if self.cuda_mem.reason:
                st.skipped["cuda_memory"] = self.cuda_mem.reason
        if self.snapshot is not None and i == self.snapshot_step:
            p = self.snapshot.dump("step%d" % i)
            if p:
                st.snapshots.append(p)

    def close(self):
        if self.profiler is not None:
            self.profiler.stop()
        if self.snapshot is not None:
            self.snapshot.stop()
