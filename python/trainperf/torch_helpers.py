"""PyTorch helpers: profiler windows, FLOPs and MFU, CUDA allocator stats,
memory snapshots, torch.compile graph breaks.

Each helper says why when it cannot do its job (no CUDA, an old torch, an
unknown device) instead of returning a made-up number. torch is imported when
a helper is used, not when this module is imported.
"""
import json
import os
import re
import time
from typing import Any, Callable, Dict, Optional, Tuple

from trainperf import _exporters, _state

__all__ = ["PEAK_FLOPS", "CUDA_MEM_COUNTERS", "device_key", "math_type", "peak_flops", "mfu",
           "count_flops", "ProfilerSchedule", "cuda_memory_stats", "CudaMemoryStats",
           "memory_history_supported", "MemorySnapshot", "graph_break_report"]

# Dense (no structured sparsity) peak FLOP/s of one GPU, per math type, from
# NVIDIA's datasheets (sources in docs/python.md; the datasheets print the
# tensor-core figures "with sparsity": the dense figure is half of that).
PEAK_FLOPS = {
    "H100 SXM": {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12,
                 "fp8": 1978.9e12},
    "H100 PCIe": {"fp32": 51e12, "tf32": 378e12, "bf16": 756.5e12, "fp16": 756.5e12,
                  "fp8": 1513e12},
    "H100 NVL": {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12,
                 "fp8": 1670.5e12},
    "H200 SXM": {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12,
                 "fp8": 1978.9e12},
    "H200 NVL": {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12,
                 "fp8": 1670.5e12},
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
    "L40S": {"fp32": 91.6e12, "tf32": 183e12, "bf16": 362.05e12, "fp16": 362.05e12,
             "fp8": 733e12},
    "L4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12},
    "A10": {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 125e12, "fp16": 125e12},
    "V100 SXM2": {"fp32": 15.7e12, "fp16": 125e12},
    "V100 PCIe": {"fp32": 14e12, "fp16": 112e12},
    "T4": {"fp32": 8.1e12, "fp16": 65e12},
}

# torch.cuda.get_device_name() -> table key. First match wins, so the more
# specific patterns come first ("H100 PCIe" before "H100", "L40S" before "L4").
_DEVICE_PATTERNS = [
    (r"H100.*PCIe", "H100 PCIe"),
    (r"H100.*NVL", "H100 NVL"),
    (r"H100", "H100 SXM"),
    (r"H200.*NVL", "H200 NVL"),
    (r"H200", "H200 SXM"),
    (r"A100", "A100"),
    (r"L40S", "L40S"),
    (r"\bL4\b", "L4"),
    (r"\bA10\b", "A10"),
    (r"V100.*PCIE", "V100 PCIe"),
    (r"V100", "V100 SXM2"),
    (r"\bT4\b", "T4"),
]


def device_key(name: str) -> Optional[str]:
    """The PEAK_FLOPS key for a device name, or None when the device is unknown."""
    for pat, key in _DEVICE_PATTERNS:
        if re.search(pat, name, re.IGNORECASE):
            return key
    return None


def math_type(dtype: Any = None) -> str:
    """The PEAK_FLOPS math type for a torch dtype (fp32 matmuls on TF32 tensor
    cores count as tf32 when torch allows it)."""
    import torch
    if dtype is None:
        dtype = torch.get_default_dtype()
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    if "float8" in str(dtype):
        return "fp8"
    if dtype == torch.float32:
        return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"
    return str(dtype).replace("torch.", "")


def peak_flops(device: Any = None, dtype: Any = None) -> Tuple[Optional[float], str]:
    """(peak FLOP/s or None, reason). device: a torch.device, an index or a
    device name string; dtype: the training math dtype."""
    import torch
    name = device if isinstance(device, str) and not device.startswith(("cuda", "cpu")) else None
    if name is None:
        dev = torch.device(device) if device is not None else None
        if dev is not None and dev.type != "cuda":
            return None, "no peak table for %s devices (MFU is defined here for NVIDIA GPUs)" % dev.type
        if not torch.cuda.is_available():
            return None, "CUDA is not available: no GPU peak to compare against"
        name = torch.cuda.get_device_name(dev)
    key = device_key(name)
    if key is None:
        return None, "device %r is not in the peak FLOP/s table (docs/python.md)" % name
    mt = math_type(dtype) if not isinstance(dtype, str) else dtype
    peak = PEAK_FLOPS[key].get(mt)
    if peak is None:
        return None, "no %s peak for %s in the table" % (mt, key)
    return peak, "%s %s dense peak %.1f TFLOP/s" % (key, mt, peak / 1e12)


def mfu(flops_per_step: Optional[float], step_time_s: Optional[float], device: Any = None,
        dtype: Any = None, n_devices: int = 1) -> Tuple[Optional[float], str]:
    """Model FLOPs utilisation: (value in 0..1 or None, reason)."""
    if not flops_per_step or flops_per_step <= 0:
        return None, "no FLOP count for the step"
    if not step_time_s or step_time_s <= 0:
        return None, "no step time"
    peak, why = peak_flops(device, dtype)
    if peak is None:
        return None, why
    return flops_per_step / step_time_s / (peak * n_devices), why


def count_flops(fn: Callable[..., Any], *args: Any, user_flops: Optional[int] = None,
                **kwargs: Any) -> Tuple[Any, Optional[int], Optional[str]]:
    """Run fn(*args, **kwargs) once, counting its FLOPs.

    Returns (result, flops, method): method is "FlopCounterMode", "profiler"
    (torch.profiler's with_flops estimate, which covers matmul/conv only),
    "user" (user_flops) or None with flops None when nothing could count."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        FlopCounterMode = None
    if FlopCounterMode is not None:
        mode = FlopCounterMode(display=False)
        with mode:
            out = fn(*args, **kwargs)
        return out, int(mode.get_total_flops()), "FlopCounterMode"
    ran = False
    try:
        import torch.profiler as tp
        prof = tp.profile(activities=[tp.ProfilerActivity.CPU], with_flops=True)
    except Exception:  # no usable profiler: just run the step
        prof = None
    if prof is not None:
        with prof:
            out = fn(*args, **kwargs)  # the step's own errors propagate
            ran = True
        total = sum(getattr(e, "flops", 0) or 0 for e in prof.key_averages())
        if total > 0:
            return out, int(total), "profiler"
    if not ran:
        out = fn(*args, **kwargs)
    if user_flops:
        return out, int(user_flops), "user"
    return out, None, None


def _default_dir(sub):
    d = _state.run_dir()
    base = d if d else os.path.join(os.getcwd(), "trainperf-profiler")
    return os.path.join(base, sub) if d else base


open_schedules = 0  # ProfilerSchedules started and not stopped


class ProfilerSchedule:
    """Drive torch.profiler over chosen steps; call .step() after every step.

    wait/warmup/active/repeat/skip_first have torch.profiler.schedule's
    meaning. Each finished window writes a Chrome/Kineto trace
    (trace-rank<R>-step<S>.json, S the window's first recorded step counted
    from the first .step(); readable by `trainperf analyze`) and the top-k
    table of operators (top-rank<R>-step<S>.txt and .json) into out_dir, by
    default RUN_DIR/profile/ (-pid<pid> is added when a name is taken). rank:
    default torch.distributed's rank, else $RANK, else 0. on_window(trace
    path, key_averages, sort_by) is called after each window. A "profiler"
    mark is recorded when a window ends.
    """

    def __init__(self, wait=1, warmup=1, active=3, repeat=1, skip_first=0, out_dir=None,
                 top_k=20, activities=None, record_shapes=False, profile_memory=False,
                 with_stack=False, with_flops=False, sort_by=None, rank=None, on_window=None):
        self.wait, self.warmup, self.active = wait, warmup, active
        self.rank = rank
        self.on_window = on_window
        self.repeat, self.skip_first = repeat, skip_first
        self.out_dir = out_dir
        self.top_k = top_k
        self._kw = dict(record_shapes=record_shapes, profile_memory=profile_memory,
                        with_stack=with_stack, with_flops=with_flops)
        self._activities = activities
        self._sort_by = sort_by
        self._prof = None
        self.windows = []  # (trace path, top-k path) per finished window
        self.steps = 0

    def start(self):
        import torch
        import torch.profiler as tp
        if self.out_dir is None:
            self.out_dir = _default_dir("profile")
        os.makedirs(self.out_dir, exist_ok=True)
        acts = self._activities
        if acts is None:
            acts = [tp.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(tp.ProfilerActivity.CUDA)
        if self._sort_by is None:
            self._sort_by = ("self_cuda_time_total" if tp.ProfilerActivity.CUDA in acts
                             else "self_cpu_time_total")
        sched = tp.schedule(wait=self.wait, warmup=self.warmup, active=self.active,
                            repeat=self.repeat, skip_first=self.skip_first)
        self._prof = tp.profile(activities=acts, schedule=sched, on_trace_ready=self._ready,
                                **self._kw)
        global open_schedules
        open_schedules += 1  # its windows are asked for: not "left on" (_evalhooks)
        try:
            self._prof.__enter__()  # a window from step 0 begins recording here
        except BaseException:
            open_schedules -= 1
            self._prof = None
            raise
        return self

    def _ready(self, prof):
        from ._state import rank as _rank, unique_path
        n = len(self.windows)
        r = self.rank if self.rank is not None else _rank()
        # on_trace_ready runs in the .step() that follows the last active step
        first = max(0, self.steps - self.active)
        stem = "rank%d-step%d" % (r, first)
        trace = unique_path(os.path.join(self.out_dir, "trace-%s.json" % stem))
        stem = os.path.basename(trace)[len("trace-"):-len(".json")]
        prof.export_chrome_trace(trace)
        _exporters.tensorboard_profile(trace)  # where TensorBoard's profiler plugin looks
        top_txt = os.path.join(self.out_dir, "top-%s.txt" % stem)
        avgs = prof.key_averages()
        try:
            table = avgs.table(sort_by=self._sort_by, row_limit=self.top_k)
        except Exception:
            table = avgs.table(sort_by="self_cpu_time_total", row_limit=self.top_k)
        with open(top_txt, "w") as f:
            f.write(table)
        rows = []
        key = "self_device_time_total" if "cuda" in self._sort_by else "self_cpu_time_total"
        for e in sorted(avgs, key=lambda e: getattr(e, key, 0) or 0, reverse=True)[:self.top_k]:
            rows.append({"name": e.key, "count": e.count,
                         "self_cpu_us": e.self_cpu_time_total,
                         "cpu_total_us": e.cpu_time_total,
                         "self_device_us": getattr(e, "self_device_time_total", None),
                         "flops": getattr(e, "flops", None) or None})
        with open(os.path.join(self.out_dir, "top-%s.json" % stem), "w") as f:
            json.dump({"window": n, "rank": r, "first_step": first, "sort_by": self._sort_by,
                       "ops": rows}, f, indent=1)
        self.windows.append((trace, top_txt))
        _state.core.mark("profiler")
        if self.on_window is not None:
            self.on_window(trace, avgs, self._sort_by)

    def step(self):
        if self._prof is None:
            self.start()
        self.steps += 1
        self._prof.step()

    def stop(self):
        if self._prof is not None:
            global open_schedules
            open_schedules -= 1
            self._prof.__exit__(None, None, None)
            self._prof = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


# Counter names of CudaMemoryStats (recorded through trainperf.counter).
CUDA_MEM_COUNTERS = ("cuda_mem_allocated_bytes", "cuda_mem_reserved_bytes",
                     "cuda_mem_peak_bytes", "cuda_mem_fragmentation",
                     "cuda_alloc_retries", "cuda_ooms")


def cuda_memory_stats(device: Any = None) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(dict of CUDA_MEM_COUNTERS, None) or (None, reason)."""
    import torch
    if not torch.cuda.is_available():
        return None, "CUDA is not available (CPU run): no allocator stats"
    s = torch.cuda.memory_stats(device)
    alloc = s.get("allocated_bytes.all.current", 0)
    reserved = s.get("reserved_bytes.all.current", 0)
    return {
        "cuda_mem_allocated_bytes": alloc,
        "cuda_mem_reserved_bytes": reserved,
        "cuda_mem_peak_bytes": s.get("allocated_bytes.all.peak", 0),
        # Share of reserved memory not holding tensors; unknown with nothing reserved.
        "cuda_mem_fragmentation": (1.0 - alloc / reserved) if reserved else None,
        "cuda_alloc_retries": s.get("num_alloc_retries", 0),
        "cuda_ooms": s.get("num_ooms", 0),
    }, None


class CudaMemoryStats:
    """Record the CUDA allocator stats as counters every `every` steps."""

    def __init__(self, every=50, device=None):
        self.every = max(1, int(every))
        self.device = device
        self.reason = None
        self.last = None
        self._n = 0

    def step(self):
        n = self._n
        self._n += 1
        if n % self.every:
            return None
        stats, why = cuda_memory_stats(self.device)
        if stats is None:
            self.reason = why
            return None
        for k, v in stats.items():
            if v is not None:
                _state.core.counter(k, float(v))
        self.last = stats
        return stats


def memory_history_supported() -> Tuple[bool, Optional[str]]:
    """(True, None) or (False, reason)."""
    import torch
    if not torch.cuda.is_available():
        return False, "CUDA is not available: memory snapshots are CUDA-only"
    mem = torch.cuda.memory
    if not hasattr(mem, "_record_memory_history") or not hasattr(mem, "_dump_snapshot"):
        return False, "this torch has no torch.cuda.memory._record_memory_history"
    return True, None


class MemorySnapshot:
    """Record CUDA allocation history and dump it (a pickle for
    https://pytorch.org/memory_viz) on a chosen step and, where torch supports
    an OOM observer, when an allocation fails."""

    def __init__(self, out_dir=None, max_entries=100000, on_oom=True, rank=None):
        self.out_dir = out_dir
        self.rank = rank
        self.max_entries = max_entries
        self.on_oom = on_oom
        self.reason = None
        self.paths = []
        self._on = False

    def start(self):
        import torch
        ok, why = memory_history_supported()
        if not ok:
            self.reason = why
            return False
        if self.out_dir is None:
            self.out_dir = _default_dir("memory")
        os.makedirs(self.out_dir, exist_ok=True)
        torch.cuda.memory._record_memory_history(max_entries=self.max_entries)
        self._on = True
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if self.on_oom and attach is not None:
            def observer(device, alloc, device_alloc, device_free):
                self.dump("oom")
            attach(observer)
        elif self.on_oom:
            self.reason = "this torch has no OOM observer: no snapshot on OOM"
        return True

    def dump(self, tag="step"):
        import torch
        if not self._on:
            return None
        from ._state import rank as _rank, unique_path
        r = self.rank if self.rank is not None else _rank()
        path = unique_path(os.path.join(self.out_dir, "snapshot-rank%d-%s.pickle" % (r, tag)))
        torch.cuda.memory._dump_snapshot(path)
        self.paths.append(path)
        _state.core.mark("memory_snapshot")
        return path

    def stop(self):
        import torch
        if self._on:
            torch.cuda.memory._record_memory_history(enabled=None)
            self._on = False


def graph_break_report(fn: Callable[..., Any], *args: Any, out_path: Optional[str] = None,
                       fullgraph: bool = False, log_path: Optional[str] = None,
                       **kwargs: Any) -> Dict[str, Any]:
    """Run torch._dynamo.explain over fn(*args, **kwargs): graphs, graph
    breaks with their reasons, source lines and suggested fixes, and the
    compile time. fullgraph=True also compiles fn with fullgraph=True and
    runs it once, recording whether it holds as one graph (and the error).

    Returns a dict (also written as JSON to out_path, default
    RUN_DIR/compile.json when a run directory is known, and as a readable log
    to log_path, default RUN_DIR/graph_breaks.log), or a dict with "error"
    when this torch has no torch.compile."""
    import torch
    from ._graph_breaks import parse_reason, suggest, write_log
    rep = {"torch": torch.__version__,
           "target": getattr(fn, "__qualname__", None) or repr(fn)}
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is None or not hasattr(dynamo, "explain"):
        rep["error"] = "this torch has no torch._dynamo.explain (torch.compile)"
        return rep
    dynamo.reset()
    t0 = time.perf_counter()
    out = dynamo.explain(fn)(*args, **kwargs)
    rep["compile_s"] = time.perf_counter() - t0
    breaks = []
    for r in getattr(out, "break_reasons", []) or []:
        where, code = [], None
        stack = getattr(r, "user_stack", None) or []
        for fr in stack[-3:]:
            where.append("%s:%s in %s" % (fr.filename, fr.lineno, fr.name))
        if stack:
            code = (getattr(stack[-1], "line", None) or "").strip() or None
        text = str(getattr(r, "reason", r))
        summary, expl, _ = parse_reason(text)
        breaks.append({"reason": text, "summary": summary, "explanation": expl,
                       "where": where, "code": code, "fixes": suggest(text)})
    rep.update({
        "graph_count": getattr(out, "graph_count", None),
        "graph_break_count": getattr(out, "graph_break_count", None),
        "op_count": getattr(out, "op_count", None),
        "breaks": breaks,
        "compile_times": str(getattr(out, "compile_times", "") or ""),
    })
    if fullgraph:
        dynamo.reset()
        try:
            torch.compile(fn, fullgraph=True)(*args, **kwargs)
            rep["fullgraph"] = {"ok": True}
        except Exception as exc:
            msg = "%s: %s" % (type(exc).__name__, exc)
            rep["fullgraph"] = {"ok": False, "error": msg, "fixes": suggest(str(exc))}
    d = _state.run_dir()
    if out_path is None and d:
        out_path = os.path.join(d, "compile.json")
    if log_path is None and d:
        log_path = os.path.join(d, "graph_breaks.log")
    if out_path:
        with open(out_path, "w") as f:
            json.dump(rep, f, indent=1)
        rep["path"] = out_path
    if log_path:
        rep["log_path"] = write_log(rep, log_path)
    dynamo.reset()
    return rep
