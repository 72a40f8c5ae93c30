"""Embedded mode: a collector thread in the training process itself
(trainperf.start() / trainperf.stop(), the decorators' and callbacks'
start=True), with the hang stacks (_failhooks) and the experiment trackers
(_exporters) it brings. Under `trainperf run` the probe is attached already
and start() only says where the run goes.
"""
import os
import warnings
from typing import Optional, Union

from trainperf import _state
from trainperf._state import TrainperfWarning

_started_here = False


def start(run_dir: "Optional[Union[str, os.PathLike]]" = None, interval_s: float = 1.0,
          procfs: bool = True, gpu: bool = True) -> Optional[str]:
    """Start a collector thread in this process, writing a run directory.

    Returns the run directory, or None when monitoring could not start (a
    TrainperfWarning says why; training goes on). Under `trainperf run` the
    probe is already attached: start() then returns that run's directory and
    stop() leaves it alone.
    """
    global _started_here
    _core = _state.core
    clk = os.environ.get("TRAINPERF_CLOCK", "")
    if clk not in ("", "mono", "tsc"):
        warnings.warn("trainperf.start: TRAINPERF_CLOCK=%r is not mono or tsc: the probe "
                      "chooses its clock itself" % clk, TrainperfWarning, stacklevel=2)
    flags = 0
    if not procfs:
        flags |= _core.START_NO_PROCFS
    if not gpu:
        flags |= _core.START_NO_GPU
    if run_dir is not None:
        run_dir = os.fspath(run_dir)
    rc = _core.start(run_dir, float(interval_s), flags)
    if rc == 0:
        _started_here = True
        from trainperf import _failhooks  # stacks on hang (docs/failures.md, embedded mode)
        _failhooks.install_embedded(_core.run_dir())
        from trainperf import _exporters  # W&B / MLflow, only when the script has a run
        _exporters.start(_core.run_dir())
        return _core.run_dir()
    if rc == _core.EBUSY:
        # Under `trainperf run` the probe attaches on its first event.
        return _core.run_dir() or os.environ.get("TRAINPERF_RUN_DIR")
    warnings.warn("trainperf.start: %s (%s)" % _core.strerror(rc)[::-1], TrainperfWarning,
                  stacklevel=2)
    return None


def stop() -> Optional[str]:
    """Stop the collector started by start(): drain, write every file of the
    run directory. Returns the run directory, or None if none was started."""
    global _started_here
    if not _started_here:
        return None
    _core = _state.core
    d = _core.run_dir()
    _started_here = False
    rc = _core.stop()
    from trainperf import _failhooks
    _failhooks.uninstall_embedded()
    if rc != 0 and rc != _core.ESTATE:
        warnings.warn("trainperf.stop: %s (%s)" % _core.strerror(rc)[::-1], TrainperfWarning,
                      stacklevel=2)
    return d
