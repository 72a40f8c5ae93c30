"""Hugging Face transformers.Trainer callback:

    from trainperf.hf import TrainperfCallback
    trainer = Trainer(..., callbacks=[TrainperfCallback()])

One trainperf step per optimizer step (Trainer's global step), with phases
data (waiting for DataLoader batches, including the Trainer's prefetch of a
whole accumulation window), forward (the model's forward), backward and
optimizer. Samples per step: the first dimension of what the model is fed in
training mode (tokens: numel of "input_ids"), so evaluation is not counted. Under `trainperf run` the auto-instrumentation steps down;
without it, call trainperf.start()/stop() around train() or pass start=True.
"""
from transformers import TrainerCallback

import trainperf
from . import _autohook

_OPTIMIZER, _EVAL = 4, 6


class TrainperfCallback(TrainerCallback):
    def __init__(self, start=False, run_dir=None, interval_s=1.0):
        self._start = start
        self._run_dir = run_dir
        self._interval = interval_s
        self._open = False
        self._samples = self._tokens = 0
        self._counting = False
        self.steps = 0

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self._start:
            trainperf.start(self._run_dir, interval_s=self._interval)
        trainperf._core.disable_auto_steps()
        _autohook.patch_dataloader()
        _autohook.patch_backward()
        if model is not None:
            _autohook.hook_forward(model)
            # Count what the model is fed in training mode: the DataLoader
            # side prefetches ahead, so its counts run one batch early.
            if not self._counting:
                model.register_forward_pre_hook(self._count_inputs, with_kwargs=True)
                self._counting = True

    def _count_inputs(self, module, args, kwargs):
        if not module.training:
            return None
        import torch
        s, t = _autohook._batch_size(kwargs, torch.Tensor) if kwargs else (0, 0)
        if not s:
            s, t = _autohook._batch_size(args, torch.Tensor)
        self._samples += s
        self._tokens += t
        return None

    def on_step_begin(self, args, state, control, **kwargs):
        trainperf.step_begin()
        self._open = True

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
            self._open = False
            self.steps += 1

    def on_train_end(self, args, state, control, **kwargs):
        if self._start:
            trainperf.stop()
