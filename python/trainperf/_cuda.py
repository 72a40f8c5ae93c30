"""CUDA caching-allocator figures, read from the sampler thread (never the
training thread, never a synchronisation, never CUDA's initialisation: a
process that has not started CUDA is left alone).

Every READ_EVERY_S the sampler calls tick(): one torch.cuda.memory_stats() of
the current device goes into a bounded series (allocated, reserved, peak,
allocator retries, OOMs, inactive split bytes); snapshot() gives the series
and the run's extremes for pyprof/events-<pid>.json (docs/run-format.md,
"cuda"). On the first tick with CUDA up, an out-of-memory observer is
attached: an OOM writes the allocator's snapshot (torch.cuda.memory._snapshot)
to RUN/memory/oom-<pid>-<n>.pickle, as the memory profiler's snapshots are
written, so the report can say what held the memory when it ran out.

cupti_pause() / cupti_resume(): a script's torch.profiler borrows CUPTI for
its window (Kineto registers its own activity callbacks, and at the end
disables the kinds or tears CUPTI down); the profiler hook
(_evalhooks._patch_profiler) calls these around it, so trainperf's kernel
records (libtrainperf-cupti.so, loaded by the CUDA driver from
CUDA_INJECTION64_PATH) are flushed to trainperf before and taken back after.

Imports nothing of trainperf's: a leaf below the sampler."""
import os
import sys
import time

MAX_POINTS = 512      # the series halves (every other point kept) when full
MAX_OOM_SNAPSHOTS = 3

_series = []          # [t_mono_s, allocated, reserved, active, inactive_split, retries, ooms]
_stride = [1]
_ticks = [0]
_peak = {"allocated": 0, "reserved": 0}
_state = {"device": None, "name": None, "total": None, "observer": False, "oom_snapshots": 0,
          "oom_events": 0, "errors": 0}


def _torch_cuda():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
    except Exception:
        return None
    return torch


def _on_oom(device, alloc, device_allocated, device_free):
    """The allocator's out-of-memory observer (called before the error is
    raised, on the allocating thread). Writes at most MAX_OOM_SNAPSHOTS."""
    _state["oom_events"] += 1
    if _state["oom_snapshots"] >= MAX_OOM_SNAPSHOTS:
        return
    try:
        import pickle
        torch = sys.modules.get("torch")
        rd = os.environ.get("TRAINPERF_RUN_DIR")
        if torch is None or not rd:
            return
        d = os.path.join(rd, "memory")
        os.makedirs(d, exist_ok=True)
        _state["oom_snapshots"] += 1
        path = os.path.join(d, "oom-%d-%d.pickle" % (os.getpid(), _state["oom_snapshots"]))
        snap = torch.cuda.memory._snapshot()
        snap["trainperf_oom"] = {"device": device, "alloc_bytes": alloc,
                                 "device_allocated": device_allocated, "device_free": device_free}
        with open(path + ".tmp", "wb") as f:
            pickle.dump(snap, f)
        os.replace(path + ".tmp", path)
    except Exception:
        _state["errors"] += 1


def _attach_observer(torch):
    _state["observer"] = True
    try:
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            attach(_on_oom)
    except Exception:
        _state["errors"] += 1


def tick():
    """One reading (from the sampler thread). Never raises."""
    torch = _torch_cuda()
    if torch is None:
        return
    _ticks[0] += 1
    try:
        dev = torch.cuda.current_device()
        if _state["device"] is None:
            _state["device"] = dev
            props = torch.cuda.get_device_properties(dev)
            _state["name"] = props.name
            _state["total"] = props.total_memory
        if not _state["observer"]:
            _attach_observer(torch)
        if _ticks[0] % _stride[0]:
            return
        s = torch.cuda.memory_stats(dev)
        al = s.get("allocated_bytes.all.current", 0)
        rs = s.get("reserved_bytes.all.current", 0)
        _peak["allocated"] = max(_peak["allocated"], s.get("allocated_bytes.all.peak", 0))
        _peak["reserved"] = max(_peak["reserved"], s.get("reserved_bytes.all.peak", 0))
        _series.append([round(time.monotonic(), 3), al, rs, s.get("active_bytes.all.current", 0),
                        s.get("inactive_split_bytes.all.current", 0),
                        s.get("num_alloc_retries", 0), s.get("num_ooms", 0)])
        if len(_series) >= MAX_POINTS:
            del _series[1::2]
            _stride[0] *= 2
    except Exception:
        _state["errors"] += 1


def snapshot():
    """The figures so far (a dict for events-<pid>.json), or None when this
    process never had CUDA up."""
    if _state["device"] is None:
        return None
    last = _series[-1] if _series else None
    return {"device": _state["device"], "name": _state["name"], "total_bytes": _state["total"],
            "peak_allocated_bytes": _peak["allocated"], "peak_reserved_bytes": _peak["reserved"],
            "alloc_retries": last[5] if last else 0, "ooms": last[6] if last else 0,
            "oom_events": _state["oom_events"], "oom_snapshots": _state["oom_snapshots"],
            "columns": ["t_mono_s", "allocated", "reserved", "active", "inactive_split",
                        "alloc_retries", "ooms"],
            "series": list(_series), "errors": _state["errors"]}


_inject = [None]      # the injection library's two functions, or False


def _injection():
    """libtrainperf-cupti.so as the driver loaded it (the same path: dlopen
    gives the same copy), or None when trainperf does not trace the GPU."""
    if _inject[0] is None:
        _inject[0] = False
        path = os.environ.get("CUDA_INJECTION64_PATH", "")
        if path.endswith("libtrainperf-cupti.so") and os.environ.get("TRAINPERF_RUN_DIR"):
            try:
                import ctypes
                lib = ctypes.CDLL(path)
                _inject[0] = (lib.trainperf_cupti_pause, lib.trainperf_cupti_resume)
            except (OSError, AttributeError):
                _state["errors"] += 1
    return _inject[0] or None


def cupti_pause():
    """Before a torch.profiler that records CUDA activity takes CUPTI."""
    f = _injection()
    if f:
        f[0]()


def cupti_resume():
    """After it let CUPTI go."""
    f = _injection()
    if f:
        f[1]()
