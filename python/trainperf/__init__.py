"""trainperf — how fast your training runs, and why it is not faster.

The explicit API (all calls are cheap; with no collector attached they do
nothing):

    import trainperf
    trainperf.start()                       # embedded mode (not needed under `trainperf run`)
    for batch in trainperf.timed(loader):   # time waiting for data as the "data" phase
        with trainperf.step(samples=len(batch)):
            with trainperf.phase("forward"):
                loss = model(batch)
            ...
        trainperf.counter("loss", loss.item())
    trainperf.stop()

See docs/python.md for the decorator, the callbacks, the torch helpers and the
zero-code auto-instrumentation that `trainperf run` injects.
"""
import functools
import os
import warnings
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar

from trainperf import _state
from trainperf._state import TrainperfWarning

_T = TypeVar("_T")

__all__ = [
    "start", "stop", "step", "phase", "counter", "mark", "timed", "monitor",
    "attached", "dropped", "run_dir", "name", "step_begin", "step_end",
    "range_push", "range_pop", "TrainperfWarning", "IMPL", "performance_monitor", "benchmark",
    "declare_flops",
]


def _load_core():
    # The C extension when it is built for this interpreter; else ctypes over
    # libtrainperf.so; else a no-op, with one warning, so a script never breaks.
    # TRAINPERF_PY_IMPL=ctypes|noop forces a fallback (tests, debugging).
    want = os.environ.get("TRAINPERF_PY_IMPL", "")
    err = "TRAINPERF_PY_IMPL=" + want
    if want not in ("ctypes", "noop"):
        try:
            from . import _core
            return _core
        except ImportError as exc:
            err = exc
    from . import _fallback
    core, why = _fallback.load(noop=(want == "noop"))
    if core.IMPL == "noop":
        warnings.warn("trainperf: monitoring is off in this interpreter (%s; %s)" % (err, why),
                      TrainperfWarning, stacklevel=3)
    return core


_core = _load_core()
_state.bind(_core)  # every hook reaches the probe through _state.core
IMPL = _core.IMPL  # "c", "ctypes" or "noop"
__version__ = __import__("trainperf._version", fromlist=["version"]).version(_core)

# The hot calls are the extension's functions themselves: no Python frame.
phase = _core.phase
step = _core.step
counter = _core.counter
mark = _core.mark
name = _core.name
step_begin = _core.step_begin
step_end = _core.step_end
range_push = _core.range_push
range_pop = _core.range_pop
attached = _core.attached
dropped = _core.dropped
run_dir = _core.run_dir

# embedded mode: a collector thread in this process
from trainperf._embedded import start, stop  # noqa: E402


class timed:
    """Wrap an iterable (a DataLoader): the time spent waiting for each item is
    recorded as the "data" phase. Iterating is otherwise unchanged."""

    __slots__ = ("_it", "_src")

    def __init__(self, iterable: Iterable[Any]) -> None:
        self._src = iterable
        self._it = None

    def __iter__(self) -> "timed":
        self._it = iter(self._src)
        return self

    def __next__(self) -> Any:
        it = self._it
        if it is None:
            it = self._it = iter(self._src)
        _core.range_push(1)  # TPF_PHASE_DATA
        try:
            return next(it)
        finally:
            _core.range_pop()

    def __len__(self) -> int:
        return len(self._src)  # type: ignore[arg-type]

    def __getattr__(self, attr):
        return getattr(self._src, attr)


def monitor(fn: Optional[Callable[..., _T]] = None, **options: Any) -> Any:
    """Decorate a train-step function: each call is one step.

        @trainperf.monitor(samples=lambda batch: len(batch), flops_steps=[3],
                           profile=dict(wait=5, warmup=1, active=3),
                           memory_snapshot_step=10, cuda_memory_every=50)
        def train_step(batch): ...

    Options (all optional): samples / tokens — an int, or a callable taking the
    step function's arguments; flops_steps — step indices on which FLOPs are
    counted by module (FlopCounterMode) and recorded as the "flops" counter,
    with "tflops_per_s" and "mfu" (when the device's peak is known) from the
    step after; flops — a user-given FLOP count per step (used when counting
    is not possible); profile — a dict for torch_helpers.ProfilerSchedule (or
    a ProfilerSchedule); memory_snapshot_step — step index on which a CUDA
    memory snapshot is written; cuda_memory_every — N: CUDA allocator stats as
    counters every N steps; comm_log_step — the step whose collectives are
    logged; model — the model (names the FLOP table's root, gives the device);
    verbose — print what performance_monitor prints (rank 0); start — start
    an embedded collector when nothing watches the process (None: only then).
    performance_monitor's own names are accepted too: enabled (False: the
    function is returned unchanged), flop_counter_step, comm_logger_step,
    wait / warmup / active / repeat. The wrapper exposes .stats (a
    MonitorStats) with what was measured, and .close().
    """
    if fn is not None and not callable(fn) or _looks_like_module(fn):
        options.setdefault("model", fn)
        fn = None
    if fn is None:
        return lambda f: monitor(f, **options)
    from ._monitor import _wrap
    if not options.pop("enabled", True):
        return fn
    if "flop_counter_step" in options:
        n = options.pop("flop_counter_step")
        options["flops_steps"] = list(options.get("flops_steps") or ()) + \
            ([n] if n is not None else [])
    if "comm_logger_step" in options:
        options["comm_log_step"] = options.pop("comm_logger_step")
    sched = {k: options.pop(k) for k in ("wait", "warmup", "active", "repeat", "skip_first")
             if k in options}
    if sched and "profile" not in options:
        options["profile"] = sched
    return _wrap(fn, options)


def _looks_like_module(obj):
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def performance_monitor(model: Any = None, enabled: bool = True,
                        flop_counter_step: Optional[int] = 5,
                        comm_logger_step: Optional[int] = 2, wait: Optional[int] = 1,
                        warmup: int = 1, active: int = 3, repeat: int = 1,
                        **options: Any) -> Callable[[Callable[..., _T]], Callable[..., _T]]:
    """The profiling guides' step decorator (see trainperf._monitor.performance_monitor
    and docs/python.md): schedule, FLOP table by module with TFLOP/s, top-10
    operators and per-rank traces; a no-op with enabled=False."""
    from ._monitor import performance_monitor as pm
    return pm(model, enabled, flop_counter_step, comm_logger_step, wait, warmup, active,
              repeat, **options)


def declare_flops(per_step: float, peak_flops_per_s: Optional[float] = None) -> Optional[str]:
    """Declare the model FLOPs of one training step of this rank (forward,
    backward and optimizer; e.g. 6 x parameters x tokens per step for a
    transformer) and, optionally, the peak FLOP/s MFU is taken against
    (None: the GPU table, or TRAINPERF_PEAK_FLOPS / `run --peak-flops`).
    `trainperf report` then shows TFLOP/s and MFU per rank and for the job
    (docs/distributed.md). Written to RUN/flops/flops-rank<R>-declared.json;
    returns that path, or None when it could not be written. ValueError when
    per_step is not positive."""
    from ._profile_hooks import declare_flops as _declare
    return _declare(per_step, peak_flops_per_s)


def benchmark(model, dataloader, steps=50, warmup=5, optimizer=None, loss_fn=None, device=None):
    """Throughput, step-time quantiles and memory of model on dataloader
    (docs/tune.md). Forward only without an optimizer; a training step with
    one."""
    from ._bench import benchmark as _benchmark
    return _benchmark(model, dataloader, steps=steps, warmup=warmup, optimizer=optimizer,
                      loss_fn=loss_fn, device=device)
