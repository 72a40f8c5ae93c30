"""Hugging Face transformers.Trainer callback:

    from trainperf.hf import TrainperfCallback
    trainer = Trainer(..., callbacks=[TrainperfCallback()])

One trainperf step per optimizer step (Trainer's global step), with phases
data (waiting for DataLoader batches, including the Trainer's prefetch of a
whole accumulation window), forward (the model's forward), backward and
optimizer. Samples per step: the first dimension of what the model is fed in
training mode (tokens: numel of "input_ids"), so evaluation is not counted. Under `trainperf run` the auto-instrumentation steps down;
without it, call trainperf.start()/stop() around train() or pass start=True.

Figures: whenever the Trainer logs (every args.logging_steps), on_log adds
trainperf/samples_per_s, step time, batch load time avg/p50/p95/p99, data
wait share and the collector's CPU/iowait/memory/GPU figures to the logs
(and to state.log_history); thresholds (gpu_util_threshold,
memory_threshold, io_wait_threshold, data_wait_threshold) fire as alerts
(warned, logged as trainperf/alerts, written to RUN/alerts.jsonl). The
Trainer calls its report_to integrations (W&B, MLflow, TensorBoard) before
user callbacks; attach(trainer, ...) puts this callback first so they get
the figures too. TrainperfArguments holds the same settings as a dataclass
for HfArgumentParser, next to TrainingArguments.
"""
import dataclasses
import time
import warnings
from typing import Optional

from transformers import TrainerCallback

import trainperf
from . import _datahooks, _gradhooks, _modelhooks
from ._figures import MetricsTail, StepWindow, Thresholds

__all__ = ["TrainperfCallback", "TrainperfArguments", "attach", "FindGraphBreaks"]


@dataclasses.dataclass
class TrainperfArguments:
    """trainperf's settings in TrainingArguments' style (HfArgumentParser)."""
    trainperf_start: bool = dataclasses.field(
        default=False, metadata={"help": "start an embedded collector around train()"})
    trainperf_run_dir: Optional[str] = dataclasses.field(
        default=None, metadata={"help": "run directory of the embedded collector"})
    trainperf_profile: Optional[str] = dataclasses.field(
        default=None, metadata={"help": "profiler window WAIT,WARMUP,ACTIVE[,REPEAT]"})
    trainperf_flop_counter_step: Optional[int] = dataclasses.field(
        default=None, metadata={"help": "count FLOPs by module on this step"})
    gpu_util_threshold: Optional[float] = dataclasses.field(
        default=None, metadata={"help": "alert when GPU utilisation is below (0..1)"})
    memory_threshold: Optional[float] = dataclasses.field(
        default=None, metadata={"help": "alert when memory used is above (0..1)"})
    io_wait_threshold: Optional[float] = dataclasses.field(
        default=None, metadata={"help": "alert when CPU iowait is above (0..1)"})
    data_wait_threshold: Optional[float] = dataclasses.field(
        default=None, metadata={"help": "alert when data wait is above (0..1) of step time"})


def _parse_profile(spec):
    if spec is None or isinstance(spec, dict):
        return spec
    parts = [int(x) for x in str(spec).split(",")]
    if len(parts) == 3:
        parts.append(1)
    if len(parts) != 4 or min(parts) < 0 or parts[2] < 1:
        raise ValueError("profile %r: expected WAIT,WARMUP,ACTIVE[,REPEAT]" % (spec,))
    return dict(zip(("wait", "warmup", "active", "repeat"), parts))


def attach(trainer, **settings):
    """Add a TrainperfCallback(**settings) as the trainer's first callback,
    so that the report_to integrations log its figures. Returns it."""
    cb = TrainperfCallback(**settings)
    trainer.callback_handler.callbacks.insert(0, cb)
    return cb

_OPTIMIZER, _EVAL = 4, 6


class TrainperfCallback(TrainerCallback):
    def __init__(self, start=False, run_dir=None, interval_s=1.0, log=True, profile=None,
                 flop_counter_step=None, gpu_util_threshold=None, memory_threshold=None,
                 io_wait_threshold=None, data_wait_threshold=None, verbose=True):
        self._thresholds = Thresholds(gpu_util_threshold=gpu_util_threshold,
                                      memory_threshold=memory_threshold,
                                      io_wait_threshold=io_wait_threshold,
                                      data_wait_threshold=data_wait_threshold)
        self.alerts = self._thresholds.events
        self._log = log
        self._profile = _parse_profile(profile)
        self._flop_step = flop_counter_step
        self._verbose = verbose
        self._hooks = None
        self._win = StepWindow()
        self._tail = None
        self._t_step = None
        self._t_end = None
        self._warned = False
        self.logged = []
        self._start = start
        self._run_dir = run_dir
        self._interval = interval_s
        self._open = False
        self._samples = self._tokens = 0
        self._counting = False
        self.steps = 0

    @classmethod
    def from_args(cls, targs, **kw):
        """From a TrainperfArguments."""
        return cls(start=targs.trainperf_start, run_dir=targs.trainperf_run_dir,
                   profile=targs.trainperf_profile,
                   flop_counter_step=targs.trainperf_flop_counter_step,
                   gpu_util_threshold=targs.gpu_util_threshold,
                   memory_threshold=targs.memory_threshold,
                   io_wait_threshold=targs.io_wait_threshold,
                   data_wait_threshold=targs.data_wait_threshold, **kw)

    def _say(self, line):
        from ._profile_hooks import rank
        if self._verbose and rank() == 0:
            print(line, flush=True)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self._start:
            trainperf.start(self._run_dir, interval_s=self._interval)
        self._tail = MetricsTail(trainperf.run_dir())
        self._thresholds.run_dir = trainperf.run_dir()
        if self._profile is not None or self._flop_step is not None:
            from ._profile_hooks import StepHooks
            self._hooks = StepHooks(profile=self._profile, flops_step=self._flop_step,
                                    say=self._say, top_k_print=10 if self._verbose else 0,
                                    module_root=type(model).__name__ if model is not None
                                    else None)
        trainperf._core.disable_auto_steps()
        _datahooks.patch_dataloader()
        _gradhooks.patch_backward()
        if model is not None:
            _modelhooks.hook_forward(model)
            # Count what the model is fed in training mode: the DataLoader
            # side prefetches ahead, so its counts run one batch early.
            if not self._counting:
                model.register_forward_pre_hook(self._count_inputs, with_kwargs=True)
                self._counting = True

    def _count_inputs(self, module, args, kwargs):
        if not module.training:
            return None
        import torch
        s, t = _datahooks._batch_size(kwargs, torch.Tensor) if kwargs else (0, 0)
        if not s:
            s, t = _datahooks._batch_size(args, torch.Tensor)
        self._samples += s
        self._tokens += t
        return None

    # A step begins where its data wait begins, as the zero-code hook's does
    # at the loader's next(): at the end of the step before it (the Trainer
    # fetches the next batches between on_step_end and on_step_begin) and,
    # for the first of an epoch, at the epoch's start. So steps.csv's phases
    # add up to duration_ns in every mode (issue 32). What runs between two
    # steps (evaluation, a save) is inside the next step; the step open when
    # training ends never ends and is not counted.
    def _begin(self, state):
        if self._open:
            return
        if self._t_step is None:
            self._t_step = time.perf_counter()
        trainperf.step_begin()
        self._open = True
        if self._hooks is not None:
            self._hooks.begin(state.global_step)

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._begin(state)

    def on_step_begin(self, args, state, control, **kwargs):
        now = time.perf_counter()
        if self._t_end is not None:
            self._win.add_load(now - self._t_end)
        self._begin(state)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        trainperf.range_push(_OPTIMIZER)

    def on_optimizer_step(self, args, state, control, **kwargs):
        trainperf.range_pop()

    def on_step_end(self, args, state, control, **kwargs):
        if self._open:
            s, t = self._samples, self._tokens
            self._samples = self._tokens = 0
            if not s:  # inputs of a type we could not size: the configured size
                s = args.per_device_train_batch_size * args.gradient_accumulation_steps
            trainperf.step_end(s, t)
            now = time.perf_counter()
            self._win.add_step(now - self._t_step, s, t)
            self._t_step = now
            self._open = False
            self.steps += 1
            if self._hooks is not None:
                self._hooks.end(state.global_step - 1)
            if self.steps == 1 and not self._warned and not trainperf.attached():
                self._warned = True
                warnings.warn("trainperf: nothing is collecting: steps and resources are not "
                              "recorded (run under `trainperf run`, call trainperf.start(), or "
                              "pass TrainperfCallback(start=True)); only the callback's own "
                              "figures are logged", trainperf.TrainperfWarning, stacklevel=2)
            self._begin(state)
        self._t_end = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self._log or logs is None or not self._win.step_s:
            return
        figs = self._win.figures()
        figs.update(MetricsTail.figures(self._tail.read() if self._tail else []))
        self._win.reset()
        for e in self._thresholds.check(figs, t=self._tail.last_t if self._tail else None):
            if e["state"] == "fired":
                warnings.warn("trainperf alert: " + e["message"], trainperf.TrainperfWarning,
                              stacklevel=2)
        figs["trainperf/alerts"] = float(len(self._thresholds.active))
        logs.update(figs)
        # the Trainer appended a copy of logs to log_history before calling us
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(figs)
        self.logged.append(dict(figs, step=state.global_step))

    def on_train_end(self, args, state, control, **kwargs):
        if self._hooks is not None:
            self._hooks.close()
            self._hooks = None
        if self._start:
            trainperf.stop()


class FindGraphBreaks(TrainerCallback):
    """Find torch.compile graph breaks in the model's forward once, on the
    first training batch (the Trainer gives callbacks no batch, so a one-shot
    forward pre-hook catches it), and write them readably (location, reason,
    suggested fix) to log_path (default RUN_DIR/graph_breaks.log, else
    <output_dir>/graph_breaks.log); fullgraph=True also tries
    torch.compile(..., fullgraph=True). The report dict is kept as .report."""

    def __init__(self, log_path=None, fullgraph=False, verbose=True):
        self.log_path = log_path
        self.fullgraph = fullgraph
        self.verbose = verbose
        self.report = None
        self._handle = None
        self._busy = False

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None or self.report is not None:
            return
        import os
        path = self.log_path
        if path is None and not trainperf.run_dir():
            path = os.path.join(args.output_dir, "graph_breaks.log")

        def pre(module, a, kw):
            if self._busy or not module.training or self.report is not None:
                return None
            self._busy = True
            try:
                from .torch_helpers import graph_break_report
                self.report = graph_break_report(module.forward, *a, fullgraph=self.fullgraph,
                                                 log_path=path, **kw)
            except Exception as exc:  # finding breaks must never stop the training
                self.report = {"error": "%s: %s" % (type(exc).__name__, exc)}
            finally:
                self._busy = False
                if self._handle is not None:
                    self._handle.remove()
                    self._handle = None
            if self.verbose and state.is_world_process_zero:
                n = self.report.get("graph_break_count")
                print("trainperf: %s graph break%s in forward%s" % (
                    n if n is not None else "?", "" if n == 1 else "s",
                    "; details in %s" % self.report["log_path"]
                    if self.report.get("log_path") else ""), flush=True)
            return None

        self._handle = model.register_forward_pre_hook(pre, with_kwargs=True)
