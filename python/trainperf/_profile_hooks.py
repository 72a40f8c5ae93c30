"""Per-step profiling hooks shared by `trainperf run --profile/--flops-step/
--memory-every/--comm-log-step` (zero-code, through _autohook) and
trainperf.performance_monitor / @trainperf.monitor (through _monitor).

One StepHooks object is told when step i begins and ends; on the steps the
settings name it drives a torch.profiler window (traces per rank and step in
RUN/profile/), counts FLOPs by module (RUN/flops/), records CUDA allocator
stats (and a memory snapshot on OOM), and turns the communication log on for
one step. Whatever fails says why once and the training goes on.

The zero-code settings come from environment variables set by `trainperf run`
(docs/cli.md): TRAINPERF_PROFILE=W,WU,A,R, TRAINPERF_PROFILE_MEMORY=1,
TRAINPERF_RECORD_SHAPES=1, TRAINPERF_WITH_STACK=1, TRAINPERF_MEMORY_EVERY=N,
TRAINPERF_FLOPS_STEP=N, TRAINPERF_COMM_LOG_STEP=N; TRAINPERF_PEAK_FLOPS=X|measure
(the peak FLOP/s that MFU is taken against).
"""
import json
import os
import sys
import time

from trainperf import _exporters, _state
from trainperf._state import out_dir as _out_dir, rank, unique_path

__all__ = ["StepHooks", "from_env", "rank", "flop_table", "peak_for", "declare_flops"]

ENV_VARS = ("TRAINPERF_PROFILE", "TRAINPERF_PROFILE_MEMORY", "TRAINPERF_RECORD_SHAPES",
            "TRAINPERF_WITH_STACK", "TRAINPERF_MEMORY_EVERY", "TRAINPERF_FLOPS_STEP",
            "TRAINPERF_COMM_LOG_STEP")  # TRAINPERF_PEAK_FLOPS alone starts no hooks

# Rows of the FLOP table printed and written (the JSON keeps every module).
_TABLE_ROWS = 40


def _note(name, value):
    """Hand a figure to the W&B/MLflow exporter (trainperf._exporters), if any."""
    try:
        _exporters.note(name, value)
    except Exception:
        pass


_measured_peak = None  # this process's measured matmul rate, once measured


def measure_matmul_peak(n=512, reps=10):
    """FLOP/s of the best of reps n x n float32 matmuls on the CPU, with the
    threads torch uses here (the peak this rank can reach as configured)."""
    global _measured_peak
    if _measured_peak is None:
        import torch
        with torch.no_grad():
            a, b = torch.randn(n, n), torch.randn(n, n)
            torch.mm(a, b)  # warm: first-call allocation and dispatch
            best = None
            for _ in range(reps):
                t0 = time.perf_counter()
                torch.mm(a, b)
                dt = time.perf_counter() - t0
                if dt > 0 and (best is None or dt < best):
                    best = dt
        _measured_peak = (2.0 * n ** 3 / best if best else None,
                          "measured: best of %d float32 %dx%d matmuls on the CPU, %d thread%s"
                          % (reps, n, n, torch.get_num_threads(),
                             "" if torch.get_num_threads() == 1 else "s"))
    return _measured_peak


def peak_for(device=None, dtype=None):
    """(peak FLOP/s or None, where it comes from or why there is none) for
    MFU in this process: TRAINPERF_PEAK_FLOPS (a number: declared; "measure":
    a CPU matmul measured here), else the GPU table (torch_helpers.peak_flops).
    A CPU has no default peak: a spec sheet figure for a CPU is rarely what a
    training process with its thread count can reach. Never raises."""
    env = os.environ.get("TRAINPERF_PEAK_FLOPS", "").strip()
    if env and env != "measure":
        try:
            v = float(env)
        except ValueError:
            v = 0.0
        if not 0 < v < float("inf"):
            return None, "TRAINPERF_PEAK_FLOPS=%r is not a number of FLOP/s or 'measure'" % env
        return v, "declared (TRAINPERF_PEAK_FLOPS)"
    try:
        import torch
        on_cpu = (str(device).startswith("cpu") if device is not None
                  else not torch.cuda.is_available())
        if env == "measure":
            if not on_cpu:
                # a CPU matmul says nothing of a GPU's peak
                return None, ("--peak-flops measure times a CPU matmul, and this rank trains "
                              "on a GPU: the GPU table or a declared number gives its peak")
            return measure_matmul_peak()
        from .torch_helpers import peak_flops
        peak, why = peak_flops(device, dtype)
        if peak is None:
            why += "; a CPU or unlisted device: --peak-flops X|measure (TRAINPERF_PEAK_FLOPS)"
        return peak, why
    except Exception as exc:
        return None, "no peak FLOP/s: %s" % (exc,)


def declare_flops(per_step, peak_flops_per_s=None, out_dir=None, peak=None):
    """Write this rank's declared FLOPs per step (and the peak FLOP/s MFU is
    taken against; None: peak_for(), or peak=(value, source) already found) to
    RUN/flops/flops-rank<R>-declared.json, where `trainperf report` finds
    them. Returns the path, or None when it could not be written."""
    per_step = float(per_step)
    if not per_step > 0:
        raise ValueError("FLOPs per step must be positive, not %r" % (per_step,))
    if peak_flops_per_s is not None:
        peak, src = float(peak_flops_per_s), "declared"
        if not peak > 0:
            raise ValueError("peak FLOP/s must be positive, not %r" % (peak_flops_per_s,))
    elif peak is not None:
        peak, src = peak
    else:
        peak, src = peak_for()
    r = rank()
    d = _out_dir("flops", out_dir)
    path = os.path.join(d, "flops-rank%d-declared.json" % r)
    try:
        os.makedirs(d, exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as fh:
            json.dump({"step": None, "rank": r, "method": "declared", "total_flops": per_step,
                       "peak_flops_per_s": peak, "peak_source": src}, fh, indent=1)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def _fmt_flops(v):
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6),
                        ("KFLOP", 1e3)):
        if v >= scale:
            return "%.2f %s" % (v / scale, unit)
    return "%d FLOP" % v


def flop_table(by_module, total, root=None, rows=_TABLE_ROWS):
    """The FLOP-by-module table as text: module, FLOPs, share of the step.
    by_module: {module name: flops} as FlopCounterMode names them (the root
    module's class first); root: the name shown for the root module."""
    lines = ["%-48s %14s %7s" % ("module", "FLOPs", "share")]
    shown = 0
    for name, fl in by_module.items():
        if name == "Global":
            continue
        if shown == rows:
            lines.append("... %d more modules in the JSON file" % (len(by_module) - 1 - rows))
            break
        depth = name.count(".")
        label = name
        if root is not None:
            label = root + name[name.index("."):] if "." in name else root
        label = "  " * depth + label
        share = 100.0 * fl / total if total else 0.0
        lines.append("%-48s %14s %6.1f%%" % (label[:48], _fmt_flops(fl), share))
        shown += 1
    lines.append("%-48s %14s %6.1f%%" % ("total (forward, backward, optimizer)",
                                         _fmt_flops(total), 100.0 if total else 0.0))
    return "\n".join(lines)


class StepHooks:
    """What to do around steps. All arguments optional:

    profile: dict(wait, warmup, active, repeat[, skip_first]) for a
    torch.profiler window (profile_kwargs: record_shapes, profile_memory,
    with_stack); flops_step: the step whose FLOPs are counted by module;
    memory_every: CUDA allocator stats every N steps (with a snapshot on OOM);
    snapshot_step: a CUDA memory snapshot on that step; comm_log_step: the
    step whose collectives are logged one by one, through comm (the
    distributed hooks, trainperf._comm, handed in by the caller: None, no
    communication log); say: a function taking one
    line for people (None: silent); out_dir: the run directory (default: the
    attached run's); device, dtype: for MFU; top_k_print: operators printed
    after each window (0: none)."""

    def __init__(self, profile=None, profile_kwargs=None, flops_step=None, memory_every=None,
                 snapshot_step=None, comm_log_step=None, say=None, out_dir=None, device=None,
                 dtype=None, top_k_print=0, module_root=None, oom_snapshot=None, comm=None):
        self.profile = profile
        self._comm_hooks = comm
        self.profile_kwargs = dict(profile_kwargs or {})
        if flops_step is None:
            self.flops_steps = frozenset()
        elif isinstance(flops_step, int):
            self.flops_steps = frozenset([flops_step])
        else:
            self.flops_steps = frozenset(flops_step)
        self.memory_every = memory_every
        self.oom_snapshot = bool(memory_every) if oom_snapshot is None else oom_snapshot
        self.snapshot_step = snapshot_step
        self.comm_log_step = comm_log_step
        self._say = say
        self.out_dir = out_dir
        self.device, self.dtype = device, dtype
        self.top_k_print = top_k_print
        self.module_root = module_root
        self.started = False
        self.prof = None
        self.cuda_mem = None
        self.snapshot = None
        self._flop_mode = None
        self._flop_t0 = None
        self.flops = None       # the last FLOP step's figures (dict), once known
        self.flops_by_step = {}  # step -> those figures
        self.flop_files = []
        self.skipped = {}       # feature -> why it did not run
        self._comm = None
        self._t_begin = None
        self.closed = False

    # -- saying things -----------------------------------------------------
    def say(self, line):
        if self._say is not None:
            try:
                self._say(line)
            except Exception:
                pass

    _LABELS = {"profile": "profiler window", "cuda_memory": "CUDA memory stats",
               "memory_snapshot": "memory snapshot", "oom_snapshot": "memory snapshot on OOM",
               "flops": "FLOP count", "flops_file": "FLOP table file",
               "comm_log": "communication log"}

    def skip(self, feature, why):
        """Record (and say once) why a feature does not run."""
        if feature in self.skipped:
            return
        self.skipped[feature] = why
        self.say("trainperf: %s skipped: %s" % (self._LABELS.get(feature, feature), why))

    # -- lifecycle -----------------------------------------------------------
    def start(self):
        """Before the first step: start what runs for the whole run."""
        self.started = True
        if self.profile is not None:
            try:
                from .torch_helpers import ProfilerSchedule
                if isinstance(self.profile, ProfilerSchedule):
                    self.prof = self.profile
                    if self.prof.on_window is None:
                        self.prof.on_window = self._window
                else:
                    kw = dict(self.profile)
                    kw.update(self.profile_kwargs)
                    kw.setdefault("out_dir", _out_dir("profile", self.out_dir))
                    self.prof = ProfilerSchedule(rank=rank(), on_window=self._window, **kw)
                self.prof.start()
                p = self.prof
                first = p.skip_first + p.wait + p.warmup
                self.say("trainperf: profiler schedule: skip_first %d, wait %d, warmup %d, "
                         "active %d, repeat %s: steps %d-%d recorded%s; traces in %s"
                         % (p.skip_first, p.wait, p.warmup, p.active,
                            p.repeat if p.repeat else "until the end", first,
                            first + p.active - 1,
                            " (then every %d steps)" % (p.wait + p.warmup + p.active)
                            if p.repeat != 1 else "", p.out_dir))
            except Exception as exc:
                self.prof = None
                self.skip("profile", "torch.profiler could not start: %s" % (exc,))
        if self.memory_every:
            from .torch_helpers import CudaMemoryStats, cuda_memory_stats
            stats, why = cuda_memory_stats()
            if stats is None:
                self.skip("cuda_memory", why)
            else:
                self.cuda_mem = CudaMemoryStats(self.memory_every, self.device)
        # an OOM snapshot goes with the CUDA stats (skipped, with them, on a CPU)
        if (self.oom_snapshot and self.cuda_mem is not None) or self.snapshot_step is not None:
            self._start_snapshot()

    def _start_snapshot(self):
        from .torch_helpers import MemorySnapshot
        snap = MemorySnapshot(out_dir=_out_dir("memory", self.out_dir), rank=rank(),
                              on_oom=self.oom_snapshot)
        try:
            ok = snap.start()
        except Exception as exc:
            ok, snap.reason = False, str(exc)
        if ok:
            self.snapshot = snap
            if snap.reason:
                self.skip("oom_snapshot", snap.reason)
        else:
            self.skip("memory_snapshot", snap.reason)

    def begin(self, i):
        """Step i is about to begin."""
        if not self.started:
            self.start()
        if i in self.flops_steps:
            self._flops_begin()
        if self.comm_log_step is not None and self._comm is None and i <= self.comm_log_step:
            self._comm_begin(i)
        self._t_begin = time.perf_counter()

    def end(self, i):
        """Step i has ended."""
        dt = time.perf_counter() - self._t_begin if self._t_begin is not None else None
        self._t_begin = None
        if self._flop_mode is not None and i in self.flops_steps:
            self._flops_end(i)
        elif self.flops is not None and self.flops.get("step_time_s") is None \
                and i == self.flops["step"] + 1 and dt:
            self._flops_rate(dt)
        if self._comm is not None and i == self.comm_log_step:
            try:
                self._comm_end(i)
            except Exception:
                pass
        if self.prof is not None:
            try:
                self.prof.step()
            except Exception as exc:
                self.prof = None
                self.skip("profile", "torch.profiler failed: %s" % (exc,))
        if self.cuda_mem is not None:
            try:
                self.cuda_mem.step()
            except Exception as exc:
                self.cuda_mem = None
                self.skip("cuda_memory", str(exc))
        if self.snapshot is not None and i == self.snapshot_step:
            self.snapshot.dump("step%d" % i)

    def abort_step(self):
        """The step raised: leave the FLOP counter so nothing stays patched."""
        if self._flop_mode is not None:
            try:
                self._flop_mode.__exit__(None, None, None)
            except Exception:
                pass
            self._flop_mode = None
            self.skip("flops", "the step raised before it ended")

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.abort_step()
        if self.flops is not None and self.flops.get("step_time_s") is None:
            self._flops_write()  # no uninstrumented step followed: no rate
            self.say("trainperf: step %d: %s per step; no uncounted step followed it: no "
                     "TFLOP/s" % (self.flops["step"], _fmt_flops(self.flops["total_flops"])))
        if self.prof is not None:
            try:
                self.prof.stop()
            except Exception:
                pass
        if self.snapshot is not None:
            try:
                self.snapshot.stop()
            except Exception:
                pass

    # -- profiler ------------------------------------------------------------
    def _window(self, trace, avgs, sort_by):
        self.say("trainperf: profiler window written: %s" % trace)
        if not self.top_k_print:
            return
        try:
            table = avgs.table(sort_by=sort_by, row_limit=self.top_k_print)
        except Exception:
            table = avgs.table(sort_by="self_cpu_time_total", row_limit=self.top_k_print)
        self.say("trainperf: top %d operators (by %s):\n%s" % (self.top_k_print, sort_by, table))

    # -- FLOPs ----------------------------------------------------------------
    def _flops_begin(self):
        try:
            from torch.utils.flop_counter import FlopCounterMode
        except ImportError:
            self.skip("flops", "this torch has no torch.utils.flop_counter")
            return
        try:
            mode = FlopCounterMode(display=False)
            mode.__enter__()
        except Exception as exc:
            self.skip("flops", "FlopCounterMode failed: %s" % (exc,))
            return
        self._flop_mode = mode
        self._flop_t0 = time.perf_counter()

    def _flops_end(self, i):
        mode, self._flop_mode = self._flop_mode, None
        try:
            mode.__exit__(None, None, None)
            total = int(mode.get_total_flops())
            by_mod = {name: int(sum(ops.values())) for name, ops in mode.get_flop_counts().items()}
            by_op = {}
            for ops in (mode.get_flop_counts().get("Global") or {}).items():
                by_op[str(ops[0])] = int(ops[1])
        except Exception as exc:
            self.skip("flops", "FlopCounterMode failed: %s" % (exc,))
            return
        if self.flops is not None and self.flops.get("step_time_s") is None:
            self._flops_write()  # the previous FLOP step was followed by this one
        counted_s = time.perf_counter() - self._flop_t0
        # the peak is measured (on a CPU) here, in the step counting already slows
        peak, peak_src = peak_for(self.device, self.dtype)
        self.flops = self.flops_by_step[i] = {"step": i, "rank": rank(), "method": "FlopCounterMode",
                      "total_flops": total, "by_module": by_mod, "by_op": by_op,
                      "counted_step_time_s": counted_s,
                      "step_time_s": None, "tflops_per_s": None, "mfu": None,
                      "mfu_reason": None, "peak_flops_per_s": peak, "peak_source": peak_src}
        try:
            _state.core.counter("flops", float(total))
        except Exception:
            pass
        _note("flops", float(total))
        self.say("trainperf: FLOPs by module on step %d (rank %d):\n%s"
                 % (i, self.flops["rank"], flop_table(by_mod, total, self.module_root)))

    def _flops_rate(self, dt):
        """The FLOP rate from the step after the counted one (counting slows
        the counted step down)."""
        f = self.flops
        f["step_time_s"] = dt
        f["tflops_per_s"] = f["total_flops"] / dt / 1e12
        peak = f.get("peak_flops_per_s")
        if peak:
            f["mfu"], f["mfu_reason"] = f["total_flops"] / dt / peak, f["peak_source"]
        else:
            f["mfu"], f["mfu_reason"] = None, f.get("peak_source") or "no peak FLOP/s"
        try:
            _state.core.counter("tflops_per_s", f["tflops_per_s"])
            if f["mfu"] is not None:
                _state.core.counter("mfu", f["mfu"])
        except Exception:
            pass
        if f["mfu"] is not None:
            _note("mfu", f["mfu"])
        line = "trainperf: step %d: %s per step, %.3g TFLOP/s at %.1f ms per step" % (
            f["step"], _fmt_flops(f["total_flops"]), f["tflops_per_s"], dt * 1e3)
        if f["mfu"] is not None:
            line += ", MFU %.1f%%" % (100 * f["mfu"])
        else:
            line += ", MFU unknown (%s)" % f["mfu_reason"]
        # one step's time: the report's TFLOP/s and MFU use the run's mean
        # step time, so the two differ when steps do (warm-up, data waits)
        line += " (the step after the counted one alone; the report's figures cover every step)"
        self.say(line)
        self._flops_write()

    def _flops_write(self):
        f = self.flops
        d = _out_dir("flops", self.out_dir)
        try:
            os.makedirs(d, exist_ok=True)
            base = unique_path(os.path.join(d, "flops-rank%d-step%d.json" % (f["rank"], f["step"])))
            with open(base, "w") as fh:
                json.dump(f, fh, indent=1)
            txt = base[:-5] + ".txt"
            with open(txt, "w") as fh:
                fh.write(flop_table(f["by_module"], f["total_flops"], self.module_root) + "\n")
            self.flop_files = [base, txt]
        except OSError as exc:
            self.skip("flops_file", str(exc))

    # -- communication log -----------------------------------------------------
    def _comm_begin(self, i):
        """Ask the distributed hooks (trainperf._comm) to log every op of
        step i; installed here when the auto hook has not (a decorator outside
        `trainperf run`), before the model's first forward so DDP is covered."""
        if self._comm is not None:
            return
        dist = sys.modules.get("torch.distributed")
        try:
            on = dist is not None and dist.is_available() and dist.is_initialized()
        except Exception:
            on = False
        if not on:
            self.skip("comm_log", "not a distributed run (torch.distributed is not initialised)")
            return
        _comm = self._comm_hooks
        if _comm is None:
            self.skip("comm_log", "this trainperf has no communication hooks (trainperf._comm)")
            return
        try:
            if not getattr(_comm, "_installed", False):
                _comm.install(sys.modules["torch"])
            _comm.log_step(self.comm_log_step)
            self._comm = _comm
        except Exception as exc:
            self.skip("comm_log", str(exc))

    def _comm_end(self, i):
        d = _state.run_dir() or "RUN"
        self.say("trainperf: every collective of step %d is logged in %s (rank %d)"
                 % (i, os.path.join(d, "comm", "ops-rank%d.csv" % rank()), rank()))


def _env_int(name, minimum):
    v = os.environ.get(name, "")
    if not v:
        return None
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < minimum:
        sys.stderr.write("trainperf: ignoring %s=%r: expected an integer >= %d\n"
                         % (name, v, minimum))
        return None
    return n


def _stderr_rank0(line):
    if rank() == 0:
        sys.stderr.write(line.rstrip("\n") + "\n")
        sys.stderr.flush()


def from_env(comm=None):
    """StepHooks for the zero-code hook, or None when no setting is given (the
    common case: then the hook costs nothing). comm: the distributed hooks
    (trainperf._comm) that log one step's collectives."""
    if not any(os.environ.get(v) for v in ENV_VARS):
        return None
    profile = None
    spec = os.environ.get("TRAINPERF_PROFILE", "")
    if spec:
        try:
            parts = [int(x) for x in spec.split(",")]
            if len(parts) == 3:
                parts.append(1)
            if len(parts) != 4 or min(parts) < 0 or parts[2] < 1:
                raise ValueError(spec)
            profile = dict(zip(("wait", "warmup", "active", "repeat"), parts))
        except ValueError:
            sys.stderr.write("trainperf: ignoring TRAINPERF_PROFILE=%r: expected "
                             "WAIT,WARMUP,ACTIVE[,REPEAT]\n" % spec)
    kw = {}
    for var, key in (("TRAINPERF_PROFILE_MEMORY", "profile_memory"),
                     ("TRAINPERF_RECORD_SHAPES", "record_shapes"),
                     ("TRAINPERF_WITH_STACK", "with_stack")):
        if os.environ.get(var, "") not in ("", "0"):
            kw[key] = True
    if kw and profile is None:
        _stderr_rank0("trainperf: %s without --profile: no profiler window to apply it to"
                      % ", ".join("--" + k.replace("_", "-") for k in kw))
    return StepHooks(profile=profile, profile_kwargs=kw,
                     flops_step=_env_int("TRAINPERF_FLOPS_STEP", 0),
                     memory_every=_env_int("TRAINPERF_MEMORY_EVERY", 1),
                     comm_log_step=_env_int("TRAINPERF_COMM_LOG_STEP", 0), comm=comm,
                     say=_stderr_rank0)
