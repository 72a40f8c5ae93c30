"""Zero-code instrumentation of PyTorch training, injected by `trainperf run`.

install() only adds an import hook: nothing is patched and torch is not
imported until the script imports torch itself. Then:

- step boundaries come from optimizer steps (a global optimizer step post-hook):
  each step of the primary optimizer (the first one that steps; another one
  takes over when it steps twice in a row, as in a second training stage)
  ends a step and begins the next, so gradient accumulation gives one step per
  optimizer step;
  a loop that updates its parameters by hand (no torch.optim optimizer made
  or stepped yet) gets its boundaries from backward instead: the end of each
  backward() ends a step and begins the next; the first optimizer made or
  stepped turns this off for good, so its steps take over with none split;
  the first step begins at the first DataLoader batch, the first module
  forward, the first backward or the first optimizer step, whichever comes
  first;
- data wait: DataLoader iterators' __next__ runs inside the "data" phase, and
  the first dimension of the batch's first tensor counts as samples (tokens:
  numel of a dict batch's "input_ids", or of a first tensor of token ids:
  signed integers, [batch, length, ...]);
- phases: "optimizer" around every optimizer step (global pre/post hooks),
  "backward" around torch.autograd.backward, "forward" around the top-level
  module (the first module called outside data loading, found by swapping
  nn.Module.__call__ for that one call; then hooks on that module only, so
  submodule calls cost nothing).

The installer is the top of the package's layers (docs/architecture.md):
the hooks of each surface (_datahooks, _modelhooks, _gradhooks, _opthooks,
_comm, _evalhooks, _failhooks, _workerhooks, _profile_hooks) know only
_state, not each other; this module installs them in order and wires what
one hands another (the sampler and the failure hooks at the first step, the
collectives in flight for the hang stacks, the tune trial, the profiling
hooks).

Nothing returns a value into torch's code paths, so results do not change.
The first explicit trainperf.step() turns the automatic step boundaries off
(the phases stay: nested same-name ranges are not counted twice). Opt out:
`trainperf run --no-auto`, or TRAINPERF_AUTO=0 in the environment.
"""
import importlib.abc
import importlib.machinery
import sys

from trainperf import _evalhooks, _state

_installed = False
_patched = False


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Lets the normal finders find torch, then patches after it has loaded."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or _patched:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        try:
            patch_torch(module)
        except Exception as exc:  # never break the watched program
            sys.stderr.write("trainperf: auto-instrumentation disabled: %r\n" % (exc,))

    def __getattr__(self, attr):
        return getattr(self._inner, attr)


def install():
    """Add the import hook (or patch at once when torch is already loaded)."""
    global _installed
    if _installed:
        return
    _installed = True
    try:  # stacks on hang, checkpoint phase (_failhooks.py); the hang stacks
        # name the collectives in flight (_comm.py)
        from trainperf import _comm, _failhooks
        _failhooks.in_flight = _comm.in_flight
        _failhooks.install()
    except Exception:
        pass
    if "torch" in sys.modules:
        patch_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())


def _start_sampler():
    try:
        from trainperf import _cuda, _ondemand, _sampler
        # every half second once training began: the settings the eval hooks
        # watch, the CUDA hook's figures, `trainperf profile RUN` requests
        _sampler.start(ticks=(_evalhooks.settings_tick, _cuda.tick, _ondemand.tick),
                       snapshot=_evalhooks.snapshot)
    except Exception as exc:  # never break the watched program
        sys.stderr.write("trainperf: stack sampler off: %r\n" % (exc,))


def _at_training_start():
    from trainperf import _failhooks
    _failhooks.at_training_start()


def _setup_hooks():
    try:
        from trainperf import _comm, _profile_hooks
        _state.step_hooks = _profile_hooks.from_env(comm=_comm)
    except Exception as exc:
        sys.stderr.write("trainperf: profiling hooks disabled: %r\n" % (exc,))
        _state.step_hooks = None
    if _state.step_hooks is not None:
        import atexit
        atexit.register(_state.step_hooks.close)  # an open window and the FLOP file end cleanly


def patch_torch(torch):
    """Install the hooks on a loaded torch module. Idempotent."""
    global _patched
    if _patched:
        return
    _patched = True
    for i, f in enumerate(sys.meta_path):
        if isinstance(f, _TorchFinder):
            del sys.meta_path[i]
            break

    from trainperf import _datahooks, _failhooks, _gradhooks, _knobs, _modelhooks, _opthooks
    st = _state.st
    _state.auto_steps = True
    # the first step starts the stack sampler, then the failure hooks' end
    # of the training loop at exit
    _state.training_start[:] = [_start_sampler, _at_training_start]
    if _state.c_hooks() is not None:
        st.auto = True
        st.opt_phase = _state.opt_phase
    _setup_hooks()
    if _knobs.setup():
        _state.tune = _knobs
        _knobs.apply_global(torch)
    _datahooks.patch_dataloader(torch)
    _opthooks.install(torch)

    # collectives as the comm phase (python/trainperf/_comm.py); its backward
    # wrapper goes inside the "backward" one (_state.insert_backward)
    try:
        from trainperf import _comm
        _comm.install(torch)
    except Exception as exc:  # never break the watched program
        sys.stderr.write("trainperf: communication not timed: %r\n" % (exc,))
    _gradhooks.patch_backward(torch)
    _evalhooks.install(torch)
    try:  # how busy DataLoader workers are (_workerhooks.py)
        from trainperf import _workerhooks
        _workerhooks.install(torch)
    except Exception as exc:  # never break the watched program
        sys.stderr.write("trainperf: DataLoader workers not timed: %r\n" % (exc,))

    # forward: find the top-level module once, then hook only it
    _modelhooks.install(torch)

    try:
        _failhooks.patch_torch(torch)
    except Exception:
        pass
