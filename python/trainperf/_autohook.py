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

Nothing returns a value into torch's code paths, so results do not change.
The first explicit trainperf.step() turns the automatic step boundaries off
(the phases stay: nested same-name ranges are not counted twice). Opt out:
`trainperf run --no-auto`, or TRAINPERF_AUTO=0 in the environment.
"""
import importlib.abc
import importlib.machinery
import sys
import threading
import weakref

from trainperf import _evalhooks

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
    try:  # stacks on hang, checkpoint phase (_failhooks.py)
        from trainperf import _failhooks
        _failhooks.install()
    except Exception:
        pass
    if "torch" in sys.modules:
        patch_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())


class _State(threading.local):
    """Step state of one thread (steps are per thread in the probe)."""

    def __init__(self):
        self.open = False
        self.samples = 0
        self.tokens = 0
        self.in_data = 0


# backward ends are step boundaries while no optimizer has been made or has
# stepped (the C hooks keep their own copy: _core.auto_state.bwd_steps)
_bwd_steps = False


def _set_bwd_steps(on):
    global _bwd_steps
    _bwd_steps = bool(on)
    if _core_hooks() is not None:
        _st.bwd_steps = _bwd_steps


def _state():
    import trainperf
    # the C extension keeps it per thread in C, where its hooks read it
    # without a Python frame (_core.c, auto_state)
    st = getattr(trainperf._core, "auto_state", None)
    return st if st is not None else _State()


_st = _state()
_tune = None             # trainperf._knobs while a `trainperf tune` trial runs, else None
# False while a callback records the optimizer phase itself: Lightning runs the
# training step's closure inside optimizer.step(), so the global hooks' range
# would enclose forward and backward and interleave with the callback's ranges.
_opt_phase = True
_auto_steps = False      # the full auto hook is on: DataLoader batches may begin a step


def _core_hooks():
    import trainperf
    core = trainperf._core
    if hasattr(core, "data_next") and hasattr(core, "opt_hooks") and \
            type(_st).__name__ == "AutoState":
        return core
    return None


def set_opt_phase(on):
    """Whether the optimizer hooks record the optimizer phase (a callback
    that records it itself turns it off)."""
    global _opt_phase
    _opt_phase = bool(on)
    if _core_hooks() is not None:
        _st.opt_phase = _opt_phase


_dataloader_patched = False


def _token_ids(t):
    """A [batch, length] tensor of signed integers: token ids (not floats,
    not uint8 image bytes, not bool masks)."""
    d = t.dtype
    return d.is_signed and not d.is_floating_point and not d.is_complex


def _batch_size(batch, torch_tensor, depth=0):
    """(samples, tokens) of a batch: first dim of its first tensor; tokens
    when that tensor is token ids (integers, [batch, length])."""
    if isinstance(batch, torch_tensor):
        if batch.dim() >= 2 and _token_ids(batch):
            return int(batch.shape[0]), int(batch.numel())
        return (int(batch.shape[0]) if batch.dim() > 0 else 0), 0
    if depth > 3:
        return 0, 0
    if isinstance(batch, dict):
        ids = batch.get("input_ids")
        if isinstance(ids, torch_tensor) and ids.dim() > 0:
            return int(ids.shape[0]), (int(ids.numel()) if ids.dim() >= 2 else 0)
        for v in batch.values():
            s, t = _batch_size(v, torch_tensor, depth + 1)
            if s:
                return s, t
        return 0, 0
    if isinstance(batch, (list, tuple)):
        for v in batch[:4]:
            s, t = _batch_size(v, torch_tensor, depth + 1)
            if s:
                return s, t
    return 0, 0


def take_batch_counts():
    """(samples, tokens) seen in DataLoader batches on this thread since the
    last call (callbacks use it to fill their steps)."""
    s, t = _st.samples, _st.tokens
    _st.samples = _st.tokens = 0
    return s, t


def _begin_if_closed():
    import trainperf
    core = trainperf._core
    if _auto_steps and not _st.open and not core.explicit_steps():
        if core.auto_step_begin():
            _st.open = True
            if not _evalhooks.ev.training_started:
                _evalhooks.ev.training_started = True
                _start_sampler()
                from trainperf import _failhooks
                _failhooks.at_training_start()
            if _hooks is not None:
                _hooks_call("begin")


# Profiling hooks asked for by `trainperf run --profile/--flops-step/...`
# (_profile_hooks.StepHooks), or None: then steps cost one test more.
_hooks = None
_hook_step = 0


def _hooks_call(what):
    """Tell the profiling hooks that step _hook_step begins or ends; a hook
    that fails is turned off, never the training."""
    global _hooks, _hook_step
    h = _hooks
    try:
        if what == "begin":
            h.begin(_hook_step)
        else:
            h.end(_hook_step)
            _hook_step += 1
    except Exception as exc:
        _hooks = None
        sys.stderr.write("trainperf: profiling hooks disabled: %r\n" % (exc,))
        try:
            h.close()
        except Exception:
            pass


def _setup_hooks():
    global _hooks
    try:
        from . import _profile_hooks
        _hooks = _profile_hooks.from_env()
    except Exception as exc:
        sys.stderr.write("trainperf: profiling hooks disabled: %r\n" % (exc,))
        _hooks = None
    if _hooks is not None:
        import atexit
        atexit.register(_hooks.close)  # an open window and the FLOP file end cleanly


def patch_dataloader(torch=None):
    """Time every DataLoader batch as the "data" phase and count its samples.
    Idempotent; used by the auto hook and by the Lightning / HF callbacks."""
    global _dataloader_patched
    if _dataloader_patched:
        return
    _dataloader_patched = True
    import trainperf
    if torch is None:
        import torch
    from torch.utils.data import dataloader as dl
    core = trainperf._core
    push, pop = core.range_push, core.range_pop
    st = _st
    tensor_type = torch.Tensor
    seq_types = (tuple, list)
    base_iter = dl._BaseDataLoaderIter
    orig_next = base_iter.__next__

    ev = _evalhooks.ev
    c_hooks = _core_hooks()

    if c_hooks is not None:
        # the same in C (_core.c, data_next): no Python frame per batch;
        # batches other than (tensor, ...) are counted here
        def count(batch):
            s, t = _batch_size(batch, tensor_type)
            st.samples += s
            st.tokens += t

        next_c = c_hooks.data_next(orig_next, ev, _begin_if_closed, count, tensor_type)
        next_c.__wrapped__ = orig_next
        next_c.__doc__ = orig_next.__doc__
        base_iter.__next__ = next_c
        return

    def next_timed(self):
        if not st.open and _auto_steps:
            _begin_if_closed()
        if ev.active:
            # an evaluation's batches are the evaluation's time, not a
            # training data wait, and not training samples
            return orig_next(self)
        st.in_data += 1
        push(1)  # TPF_PHASE_DATA
        try:
            batch = orig_next(self)
        except StopIteration:
            core.loop_end(1)  # TPF_LOOP_DONE: the training data ran out
            raise
        finally:
            pop()
            st.in_data -= 1
        try:
            # the common batch, (tensor, ...): no call into _batch_size
            if type(batch) in seq_types and batch and isinstance(batch[0], tensor_type) \
                    and batch[0].dim() == 1:
                st.samples += batch[0].shape[0]
            else:
                s, t = _batch_size(batch, tensor_type)
                st.samples += s
                st.tokens += t
        except Exception:
            pass
        return batch

    next_timed.__wrapped__ = orig_next
    base_iter.__next__ = next_timed


_backward_patched = False
_backward_inner = None   # what the "backward" phase wrapper calls


def _bwd_boundary():
    """A backward ended while its ends are step boundaries (a hand-written
    update loop): end this thread's step and begin the next, as an optimizer
    step does (opt_post in patch_torch). Never raises."""
    import trainperf
    core = trainperf._core
    st = _st
    try:
        if _evalhooks.ev.active:
            _evalhooks.step_in_eval()
        if core.auto_step_end(st.samples, st.tokens):
            st.samples = st.tokens = 0
            if _hooks is not None:
                _hooks_call("end")
            st.open = core.auto_step_begin()
            if st.open and _hooks is not None:
                _hooks_call("begin")
        else:
            st.open = False
    except Exception:
        pass


def _backward_wrapper(torch, inner):
    """The "backward" phase around inner (push, call, pop); under the auto
    hook also the first step's begin and, while no optimizer was made or
    stepped, the step boundary at its end."""
    import trainperf
    core = trainperf._core
    push, pop = core.range_push, core.range_pop
    timed = getattr(core, "timed", None)
    c_hooks = _core_hooks()
    st = _st
    if _auto_steps and _tune is None and _hooks is None and c_hooks is not None and \
            hasattr(c_hooks, "backward_hook"):
        # the same in C (_core.c, bwd_vectorcall): no Python frame per backward
        backward_timed = c_hooks.backward_hook(inner, _evalhooks.ev, _begin_if_closed,
                                               _evalhooks.step_in_eval)
    elif _auto_steps:
        def backward_timed(*args, **kwargs):
            if _tune is not None:
                _tune.on_backward(args)
            if not st.open:
                _begin_if_closed()
            push(3)  # TPF_PHASE_BACKWARD
            try:
                r = inner(*args, **kwargs)
            finally:
                pop()
            if _bwd_steps and st.open:
                _bwd_boundary()
            return r
    elif _tune is None and timed is not None:
        # push, call, pop in C: no Python frame per backward (a callback's
        # phases; the auto hook's step boundaries are not on)
        backward_timed = timed(inner, 3)  # TPF_PHASE_BACKWARD
    else:
        def backward_timed(*args, **kwargs):
            if _tune is not None:
                _tune.on_backward(args)
            push(3)  # TPF_PHASE_BACKWARD
            try:
                return inner(*args, **kwargs)
            finally:
                pop()
    backward_timed.__wrapped__ = inner
    backward_timed.__doc__ = inner.__doc__
    return backward_timed


def insert_backward(make, torch=None):
    """Put make(inner) inside the "backward" phase wrapper, around what it
    calls (the range of a wrapper added later must nest inside it: _comm's DDP
    tail, added at the first DDP forward); wraps torch.autograd.backward
    itself when the phase wrapper is not installed."""
    global _backward_inner
    if torch is None:
        import torch
    autograd = torch.autograd
    if not _backward_patched or _backward_inner is None:
        autograd.backward = make(autograd.backward)
        return
    _backward_inner = make(_backward_inner)
    autograd.backward = _backward_wrapper(torch, _backward_inner)


def patch_backward(torch=None):
    """Time torch.autograd.backward (so also Tensor.backward) as the
    "backward" phase. Idempotent."""
    global _backward_patched
    if _backward_patched:
        return
    _backward_patched = True
    global _backward_inner
    if torch is None:
        import torch
    _backward_inner = torch.autograd.backward
    torch.autograd.backward = _backward_wrapper(torch, _backward_inner)


def _start_sampler():
    try:
        from trainperf import _sampler
        _sampler.start()
    except Exception as exc:  # never break the watched program
        sys.stderr.write("trainperf: stack sampler off: %r\n" % (exc,))


def hook_forward(module):
    """Time module's forward calls as the "forward" phase (hooks on this one
    module, not its children); a call with grad off or the module in eval
    mode is evaluation (_evalhooks). Returns False when hooks cannot be
    added."""
    if getattr(module, "_trainperf_forward_hooked", False):
        return False
    import trainperf
    import torch
    core = trainperf._core
    push, pop = core.range_push, core.range_pop
    grad_on = torch.is_grad_enabled
    ev = _evalhooks.ev
    eval_enter, training_forward = _evalhooks.eval_enter, _evalhooks.training_forward
    eval_forward = _evalhooks.eval_forward

    def fwd_pre(mod, args):
        if mod.training and grad_on():
            if ev.active:
                training_forward(mod)
            push(2)  # TPF_PHASE_FORWARD
        elif getattr(mod, "_trainperf_frozen", False) or (
                mod.training and getattr(mod, "_trainperf_instep", False)):
            # a frozen helper inside the step (_evalhooks.step_in_eval), or
            # inference inside the step (_evalhooks.training_forward)
            push(2)
        else:
            if not ev.active:
                eval_enter(mod)
            eval_forward(args, grad_on())
            push(6)  # TPF_PHASE_EVAL (nested same-name ranges count once)
        ev.in_fwd += 1

    def fwd_post(mod, args, output):
        ev.in_fwd -= 1
        pop()

    try:
        module.register_forward_pre_hook(fwd_pre)
        module.register_forward_hook(fwd_post, always_call=True)
        module._trainperf_forward_hooked = True
    except Exception:
        return False
    _evalhooks.note_model(module)
    return True


def hook_forward_fast(module):
    """Like hook_forward, without module hooks: any forward hook sends every
    call of the module down nn.Module's slow path (several µs a step), so
    the auto hook wraps the forward of the top module's class instead and
    times only calls on that one instance (others of the class pass
    straight through). A class wrapper keeps the module picklable and
    deep-copyable (an EMA copy is simply not timed). Falls back to hooks
    when the instance has its own `forward` attribute."""
    import functools
    import trainperf
    import torch
    cls = type(module)
    if "forward" in module.__dict__ or getattr(module, "_trainperf_forward_hooked", False):
        return hook_forward(module)
    orig = getattr(cls, "forward", None)
    if orig is None or getattr(orig, "_trainperf_fwd", False) or not callable(orig):
        return hook_forward(module)
    core = trainperf._core
    push, pop = core.range_push, core.range_pop
    grad_on = torch.is_grad_enabled
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (
        lambda: False)
    ev = _evalhooks.ev
    eval_enter, training_forward = _evalhooks.eval_enter, _evalhooks.training_forward
    eval_forward = _evalhooks.eval_forward
    top = module

    @functools.wraps(orig)
    def forward(self, *args, **kwargs):
        if self is not top or is_compiling():
            return orig(self, *args, **kwargs)
        if self.training and grad_on():
            if ev.active:
                training_forward(self)
            push(2)  # TPF_PHASE_FORWARD
        elif getattr(self, "_trainperf_frozen", False) or (
                self.training and getattr(self, "_trainperf_instep", False)):
            # a frozen helper inside the step (_evalhooks.step_in_eval), or
            # inference inside the step (_evalhooks.training_forward)
            push(2)
        else:
            if not ev.active:
                eval_enter(self)
            eval_forward(args, grad_on())
            push(6)  # TPF_PHASE_EVAL (nested same-name ranges count once)
        ev.in_fwd += 1
        try:
            return orig(self, *args, **kwargs)
        finally:
            ev.in_fwd -= 1
            pop()

    forward._trainperf_fwd = True
    try:
        cls.forward = forward
        module._trainperf_forward_hooked = True
    except Exception:
        return hook_forward(module)
    _evalhooks.note_model(module)
    return True


def patch_torch(torch):
    """Install the hooks on a loaded torch module. Idempotent."""
    global _patched, _auto_steps
    if _patched:
        return
    _patched = True
    for i, f in enumerate(sys.meta_path):
        if isinstance(f, _TorchFinder):
            del sys.meta_path[i]
            break

    import trainperf
    core = trainperf._core
    auto_begin = core.auto_step_begin
    auto_end = core.auto_step_end
    push, pop = core.range_push, core.range_pop
    OPTIMIZER = 4
    st = _st
    handles = {}
    # [id of the optimizer whose steps are step boundaries, id of another one
    # stepping, how many times in a row it has, a weak reference to the first
    # (once it is gone, the next optimizer that steps is the primary: a script
    # that makes a new optimizer every step)]
    primary = [None, None, 0, None]

    def set_primary(opt):
        primary[0] = id(opt)
        try:
            primary[3] = weakref.ref(opt)
        except TypeError:
            primary[3] = None

    _auto_steps = True
    c_hooks = _core_hooks()
    if c_hooks is not None:
        st.auto = True
        st.opt_phase = _opt_phase
    _setup_hooks()
    global _tune
    from trainperf import _knobs
    if _knobs.setup():
        _tune = _knobs
        _knobs.apply_global(torch)
    patch_dataloader(torch)

    # --- optimizer: step boundaries and the optimizer phase ---------------
    from torch.optim import optimizer as optmod

    ev = _evalhooks.ev

    def opt_pre(opt, args, kwargs):
        if ev.active:
            _evalhooks.step_in_eval()
        if not st.open:
            _begin_if_closed()
        if _opt_phase:
            push(OPTIMIZER)

    def opt_post(opt, args, kwargs):
        if _opt_phase:
            pop()
        if _bwd_steps:
            _set_bwd_steps(False)
        oid = id(opt)
        if primary[0] is not None and primary[0] != oid and primary[3] is not None and \
                primary[3]() is None:
            primary[0] = None
        if primary[0] is None:
            set_primary(opt)
        elif primary[0] != oid:
            # Another optimizer: a GAN's second one alternates with the primary
            # (no step), a later training stage's replaces it once it steps
            # twice in a row.
            if primary[1] == oid:
                primary[2] += 1
            else:
                primary[1], primary[2] = oid, 1
            if primary[2] < 2:
                return
            set_primary(opt)
        primary[1], primary[2] = None, 0
        if st.open:
            if auto_end(st.samples, st.tokens):
                st.samples = st.tokens = 0
                if _hooks is not None:
                    _hooks_call("end")
                st.open = auto_begin()
                if st.open and _hooks is not None:
                    _hooks_call("begin")
            else:
                st.open = False
        if _tune is not None:
            _tune.on_step(opt)

    if c_hooks is not None and _hooks is None and _tune is None:
        # the same in C (_core.c, opt_hooks): no Python frame per step; the
        # profiling hooks and tune trials keep the Python ones
        opt_pre, opt_post = c_hooks.opt_hooks(ev, _begin_if_closed, _evalhooks.step_in_eval)
    handles["opt_pre"] = optmod.register_optimizer_step_pre_hook(opt_pre)
    handles["opt_post"] = optmod.register_optimizer_step_post_hook(opt_post)

    # --- no optimizer: backward ends are the step boundaries ---------------
    # until an optimizer is made (before its loop's first backward: gradient
    # accumulation keeps one step per optimizer step) or steps (one made
    # before torch was patched)
    _set_bwd_steps(True)
    try:
        opt_cls = optmod.Optimizer
        orig_init = opt_cls.__init__

        def opt_init(self, *args, **kwargs):
            if _bwd_steps:
                _set_bwd_steps(False)
            _evalhooks.note_optimizer(self)
            return orig_init(self, *args, **kwargs)

        opt_init.__wrapped__ = orig_init
        opt_init.__doc__ = orig_init.__doc__
        opt_init.__name__ = "__init__"
        opt_init.__qualname__ = getattr(orig_init, "__qualname__", "__init__")
        opt_cls.__init__ = opt_init
    except Exception as exc:  # never break the watched program
        _set_bwd_steps(False)
        sys.stderr.write("trainperf: steps of hand-written updates off: %r\n" % (exc,))

    # collectives as the comm phase (python/trainperf/_comm.py); its backward
    # wrapper goes inside the "backward" one (insert_backward)
    try:
        from . import _comm
        _comm.install(torch)
    except Exception as exc:  # never break the watched program
        sys.stderr.write("trainperf: communication not timed: %r\n" % (exc,))
    patch_backward(torch)
    _evalhooks.install(torch)
    try:  # how busy DataLoader workers are (_workerhooks.py)
        from . import _workerhooks
        _workerhooks.install(torch)
    except Exception as exc:  # never break the watched program
        sys.stderr.write("trainperf: DataLoader workers not timed: %r\n" % (exc,))

    # --- forward: find the top-level module once, then hook only it --------
    # Module.__call__ is swapped for one call only (not a global module hook:
    # those make torch.compile warn and would run for every submodule).
    from torch.nn.modules import module as modmod
    Module = modmod.Module
    orig_call = Module.__dict__["__call__"]

    # after a frozen helper was found (_evalhooks.step_in_eval): the next
    # module called for training outside the timed one's forward
    want_trained = [False]

    def first_call(self, *args, **kwargs):
        if st.in_data or Module.__dict__.get("__call__") is not first_call:
            # transforms in the data pipeline are not the model
            return orig_call(self, *args, **kwargs)
        if want_trained[0] and (ev.in_fwd or not self.training or not torch.is_grad_enabled()
                                or getattr(self, "_trainperf_forward_hooked", False)):
            return orig_call(self, *args, **kwargs)
        Module.__call__ = orig_call
        if not st.open:
            _begin_if_closed()
        if _tune is not None:
            _tune.on_model(self)
        hook_forward_fast(self)  # already applies to this call
        return orig_call(self, *args, **kwargs)

    Module.__call__ = first_call

    def rearm():
        if Module.__dict__.get("__call__") is orig_call:
            want_trained[0] = True
            Module.__call__ = first_call

    _evalhooks.rearm = rearm

    try:
        from trainperf import _failhooks
        _failhooks.patch_torch(torch)
    except Exception:
        pass
