"""PyTorch Lightning callback:

    from trainperf.lightning import TrainperfCallback
    trainer = L.Trainer(callbacks=[TrainperfCallback()])

One trainperf step per optimizer step (so gradient accumulation gives one step
per accumulated update), with phases forward (training_step up to backward),
backward, optimizer, data (waiting for DataLoader batches) and eval
(validation). Samples per step come from the batch's first tensor dimension.
Under `trainperf run` the auto-instrumentation steps down; without it, call
trainperf.start()/stop() around fit() or pass start=True (when nothing
collects, it warns once).

Every log_every_n_steps optimizer steps (default: the trainer's) it logs its
figures through the trainer's loggers (CSV, TensorBoard, W&B, MLflow...):
trainperf/samples_per_s, step time, batch load time avg/p50/p95/p99, data
wait share, and the collector's CPU, iowait, memory and GPU figures.
Thresholds (fractions) become alert rules: gpu_util_threshold (below),
memory_threshold, io_wait_threshold, data_wait_threshold (above); a firing
one is logged (trainperf/alerts), warned and written to RUN/alerts.jsonl.
profile=dict(wait, warmup, active, repeat) drives a torch.profiler window
(Chrome traces in RUN/profile/), flop_counter_step counts FLOPs by module.
ThroughputMonitor, ProfilerMonitor and ResourceMonitor are the same
callback with one part each on, as the profiling guides split them.
"""
try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

import time
import warnings

import trainperf
from . import _datahooks, _state
from ._figures import MetricsTail, StepWindow, Thresholds

__all__ = ["TrainperfCallback", "ThroughputMonitor", "ProfilerMonitor", "ResourceMonitor",
           "FindGraphBreaks"]

_FORWARD, _BACKWARD, _OPTIMIZER, _EVAL = 2, 3, 4, 6


class TrainperfCallback(Callback):
    def __init__(self, start=False, run_dir=None, interval_s=1.0, log=True,
                 log_every_n_steps=None, profile=None, flop_counter_step=None,
                 gpu_util_threshold=None, memory_threshold=None, io_wait_threshold=None,
                 data_wait_threshold=None, resources=True, throughput=True, verbose=True):
        super().__init__()
        self._thresholds = Thresholds(run_dir=None, gpu_util_threshold=gpu_util_threshold,
                                      memory_threshold=memory_threshold,
                                      io_wait_threshold=io_wait_threshold,
                                      data_wait_threshold=data_wait_threshold)
        self._log = log
        self._every = log_every_n_steps
        self._profile = profile
        self._flop_step = flop_counter_step
        self._resources = resources
        self._throughput = throughput
        self._verbose = verbose
        self._hooks = None
        self._win = StepWindow()
        self._tail = None
        self._t_step = None
        self._t_batch_end = None
        self._warned = False
        self._records = True
        self.logged = []   # what was logged, per interval (for tests and users)
        self.alerts = self._thresholds.events
        self._start = start
        self._run_dir = run_dir
        self._interval = interval_s
        self._open = False
        self._phase = 0
        self._gs0 = 0
        self._samples = 0
        self._tokens = 0
        self.steps = 0  # steps recorded (for tests and logs)

    # -- helpers -------------------------------------------------------
    def _set_phase(self, ph):
        if not self._records:
            return
        if self._phase:
            trainperf.range_pop()
        self._phase = ph
        if ph:
            trainperf.range_push(ph)

    # -- lifecycle -----------------------------------------------------
    def _say(self, line):
        from ._profile_hooks import rank
        if self._verbose and rank() == 0:
            print(line, flush=True)

    def on_fit_start(self, trainer, pl_module):
        # Of several trainperf callbacks (the family), the first one records
        # steps and phases; the others only add their figures.
        mine = [cb for cb in trainer.callbacks if isinstance(cb, TrainperfCallback)]
        self._records = not mine or mine[0] is self
        if self._start:
            trainperf.start(self._run_dir, interval_s=self._interval)
        trainperf._core.disable_auto_steps()
        if self._records:
            # The auto hook's optimizer range would enclose the closure
            # (training_step, backward) and its eval range (opened by
            # model.eval(), closed by the next training forward: Lightning
            # restores train mode without model.train()) would stay open into
            # our step; both interleave with our ranges on one stack.
            _state.set_opt_phase(False)
            _state.ev.ranges = False
        _datahooks.patch_dataloader()
        d = trainperf.run_dir()
        self._tail = MetricsTail(d)
        self._thresholds.run_dir = d
        if self._every is None:
            self._every = max(1, int(getattr(trainer, "log_every_n_steps", 50) or 50))
        if self._profile is not None or self._flop_step is not None:
            from ._profile_hooks import StepHooks
            self._hooks = StepHooks(profile=self._profile, flops_step=self._flop_step,
                                    say=self._say, top_k_print=10 if self._verbose else 0,
                                    module_root=type(pl_module).__name__)

    def _end(self):
        self._set_phase(0)
        if self._records:
            _state.set_opt_phase(True)
            _state.ev.ranges = True
        if self._hooks is not None:
            self._hooks.close()
            self._hooks = None
        if self._start:
            trainperf.stop()

    def on_fit_end(self, trainer, pl_module):
        self._end()

    def on_exception(self, trainer, pl_module, exception):
        self._end()

    # -- figures -------------------------------------------------------
    def _check_collecting(self):
        if self._warned or trainperf.attached():
            return
        self._warned = True
        warnings.warn("trainperf: nothing is collecting: steps and resources are not recorded "
                      "(run under `trainperf run`, call trainperf.start(), or pass "
                      "TrainperfCallback(start=True)); only the callback's own figures are "
                      "logged", trainperf.TrainperfWarning, stacklevel=2)

    def _log_interval(self, trainer):
        figs = self._win.figures() if self._throughput else {}
        rows = self._tail.read() if self._tail is not None else []
        if self._resources:
            figs.update(MetricsTail.figures(rows))
        self._win.reset()
        events = self._thresholds.check(figs, t=self._tail.last_t if self._tail else None)
        fired = [e for e in events if e["state"] == "fired"]
        figs["trainperf/alerts"] = float(len(self._thresholds.active))
        for e in fired:
            warnings.warn("trainperf alert: " + e["message"], trainperf.TrainperfWarning,
                          stacklevel=2)
        step = _log_step(trainer)
        self.logged.append(dict(figs, step=step))
        if self._log:
            for lg in getattr(trainer, "loggers", None) or []:
                try:
                    lg.log_metrics(figs, step=step)
                except Exception as exc:  # a logger's failure is not the training's
                    self._say("trainperf: logging to %s failed: %s" % (type(lg).__name__, exc))

    # -- training steps ------------------------------------------------
    # A step begins where its data wait begins, as the zero-code hook's does
    # at the loader's next(): at the end of the step before it (Lightning
    # fetches the next batch, prefetched or not, between on_train_batch_end
    # and on_train_batch_start) and, for the first, at the epoch's start. So
    # steps.csv's phases add up to duration_ns in every mode (issue 32).
    # What runs between two batches (validation, a checkpoint) is inside the
    # next step, as its phases say; the step open when training ends never
    # ends and is not counted.
    def _begin(self, trainer):
        if self._open:
            return
        if self._records:
            trainperf.step_begin()
        self._open = True
        self._gs0 = trainer.global_step
        if self._t_step is None:
            self._t_step = time.perf_counter()
        if self._hooks is not None:
            self._hooks.begin(trainer.global_step)

    def on_train_epoch_start(self, trainer, pl_module):
        self._begin(trainer)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        import torch
        now = time.perf_counter()
        if self._t_batch_end is not None:
            # from the end of the last batch: waiting for this one
            self._win.add_load(now - self._t_batch_end)
        self._begin(trainer)
        s, t = _datahooks._batch_size(batch, torch.Tensor)
        self._samples += s
        self._tokens += t
        self._set_phase(_FORWARD)

    def on_before_backward(self, trainer, pl_module, loss):
        self._set_phase(_BACKWARD)

    def on_after_backward(self, trainer, pl_module):
        self._set_phase(0)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._set_phase(_OPTIMIZER)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._set_phase(0)
        # global_step counts optimizer steps: it moved, so this batch ended one.
        if self._open and trainer.global_step != self._gs0:
            if self._records:
                trainperf.step_end(self._samples, self._tokens)
            now = time.perf_counter()
            self._win.add_step(now - self._t_step, self._samples, self._tokens)
            self._t_step = now
            self._samples = self._tokens = 0
            self._open = False
            self.steps += 1
            if self._hooks is not None:
                self._hooks.end(self._gs0)
            if self.steps == 1:
                self._check_collecting()
            if trainer.global_step % self._every == 0:
                self._log_interval(trainer)
            self._begin(trainer)
        self._t_batch_end = time.perf_counter()

    # -- validation ----------------------------------------------------
    def on_validation_start(self, trainer, pl_module):
        if self._records:
            trainperf.range_push(_EVAL)

    def on_validation_end(self, trainer, pl_module):
        if self._records:
            trainperf.range_pop()


def _log_step(trainer):
    """The step Lightning's own rows of this batch carry: its logger connector
    logs with the count of batches that stepped before this one (the fit
    loop's `_batches_that_stepped`, increased after on_train_batch_end), one
    less than global_step here; global_step - 1 where that count is absent."""
    n = getattr(getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None),
                "_batches_that_stepped", None)
    return n if isinstance(n, int) else max(0, trainer.global_step - 1)


class ThroughputMonitor(TrainperfCallback):
    """Samples/s, step time and batch load time avg/p50/p95/p99, logged."""

    def __init__(self, log_every_n_steps=None, **kw):
        kw.setdefault("resources", False)
        super().__init__(log_every_n_steps=log_every_n_steps, **kw)


class ProfilerMonitor(TrainperfCallback):
    """A torch.profiler window (Chrome traces per rank and step in RUN/profile/)."""

    def __init__(self, wait=1, warmup=1, active=3, repeat=1, flop_counter_step=None, **kw):
        kw.setdefault("resources", False)
        super().__init__(profile=dict(wait=wait, warmup=warmup, active=active, repeat=repeat),
                         flop_counter_step=flop_counter_step, **kw)


class ResourceMonitor(TrainperfCallback):
    """CPU, iowait, memory and GPU figures logged, with the seed's default
    thresholds as alert rules."""

    def __init__(self, gpu_util_threshold=0.5, memory_threshold=0.9, io_wait_threshold=0.3,
                 **kw):
        kw.setdefault("throughput", False)
        super().__init__(gpu_util_threshold=gpu_util_threshold,
                         memory_threshold=memory_threshold, io_wait_threshold=io_wait_threshold,
                         **kw)


class FindGraphBreaks(Callback):
    """Find torch.compile graph breaks in the training step once, at the first
    batch, and write them readably (location, reason, suggested fix) to
    log_path (default RUN_DIR/graph_breaks.log, else
    <trainer.default_root_dir>/graph_breaks.log); fullgraph=True also tries
    torch.compile(..., fullgraph=True). target: "training_step" (default) or
    "forward". The report dict is kept as .report. The extra pass runs the
    step's forward once more (no backward, no optimizer step)."""

    def __init__(self, log_path=None, fullgraph=False, target="training_step", verbose=True):
        super().__init__()
        if target not in ("training_step", "forward"):
            raise ValueError("target must be 'training_step' or 'forward'")
        self.log_path = log_path
        self.fullgraph = fullgraph
        self.target = target
        self.verbose = verbose
        self.report = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.report is not None:
            return
        import os
        from .torch_helpers import graph_break_report
        path = self.log_path
        if path is None and not trainperf.run_dir():
            path = os.path.join(trainer.default_root_dir, "graph_breaks.log")
        if self.target == "forward":
            x = batch[0] if isinstance(batch, (list, tuple)) else batch
            fn, args = pl_module.forward, (x,)
        else:
            fn, args = pl_module.training_step, (batch, batch_idx)
        try:
            self.report = graph_break_report(fn, *args, fullgraph=self.fullgraph,
                                             log_path=path)
        except Exception as exc:  # finding breaks must never stop the training
            self.report = {"error": "%s: %s" % (type(exc).__name__, exc)}
        if self.verbose and trainer.is_global_zero:
            n = self.report.get("graph_break_count")
            print("trainperf: %s graph break%s in %s%s" % (
                n if n is not None else "?", "" if n == 1 else "s", self.target,
                "; details in %s" % self.report["log_path"] if self.report.get("log_path")
                else ""), flush=True)
