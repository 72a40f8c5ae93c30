"""PyTorch Lightning callback:

    from trainperf.lightning import TrainperfCallback
    trainer = L.Trainer(callbacks=[TrainperfCallback()])

One trainperf step per optimizer step (so gradient accumulation gives one step
per accumulated update), with phases forward (training_step up to backward),
backward, optimizer, data (waiting for DataLoader batches) and eval
(validation). Samples per step come from the batch's first tensor dimension.
Under `trainperf run` the auto-instrumentation steps down; without it, call
trainperf.start()/stop() around fit() or pass start=True.
"""
try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

import trainperf
from . import _autohook

_FORWARD, _BACKWARD, _OPTIMIZER, _EVAL = 2, 3, 4, 6


class TrainperfCallback(Callback):
    def __init__(self, start=False, run_dir=None, interval_s=1.0):
        super().__init__()
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
        if self._phase:
            trainperf.range_pop()
        self._phase = ph
        if ph:
            trainperf.range_push(ph)

    # -- lifecycle -----------------------------------------------------
    def on_fit_start(self, trainer, pl_module):
        if self._start:
            trainperf.start(self._run_dir, interval_s=self._interval)
        trainperf._core.disable_auto_steps()
        _autohook.patch_dataloader()

    def on_fit_end(self, trainer, pl_module):
        self._set_phase(0)
        if self._start:
            trainperf.stop()

    def on_exception(self, trainer, pl_module, exception):
        self._set_phase(0)
        if self._start:
            trainperf.stop()

    # -- training steps ------------------------------------------------
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        import torch
        if not self._open:
            trainperf.step_begin()
            self._open = True
            self._gs0 = trainer.global_step
        s, t = _autohook._batch_size(batch, torch.Tensor)
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
            trainperf.step_end(self._samples, self._tokens)
            self._samples = self._tokens = 0
            self._open = False
            self.steps += 1

    # -- validation ----------------------------------------------------
    def on_validation_start(self, trainer, pl_module):
        trainperf.range_push(_EVAL)

    def on_validation_end(self, trainer, pl_module):
        trainperf.range_pop()
