"""The model hooks: the top-level module's forward calls timed as the
"forward" phase, or as "eval" when grad is off or the module is in eval
mode (_state's eval phase).

The auto hook finds the top-level module once (install: the first module
called outside data loading, found by swapping nn.Module.__call__ for that
one call), then times only that module, so submodule calls cost nothing.
Used by the auto hook and the HF callback (hook_forward). Never raises into
the training loop.
"""
from trainperf import _state


def _enter_forward(mod, args, grad_on, push):
    """A timed forward begins: which phase it is (training, a frozen helper or
    inference inside the step, or evaluation), for the module hooks and the
    class wrapper alike."""
    ev = _state.ev
    if mod.training and grad_on():
        if ev.active:
            _state.training_forward(mod)
        ev.train_since = True  # the next evaluation is a new point
        push(2)  # TPF_PHASE_FORWARD
    elif getattr(mod, "_trainperf_frozen", False) or (
            mod.training and getattr(mod, "_trainperf_instep", False)):
        # a frozen helper inside the step (_state.step_in_eval), or
        # inference inside the step (_state.training_forward)
        push(2)
    else:
        if not ev.active:
            _state.eval_enter(mod)
        _state.eval_forward(args, grad_on())
        push(6)  # TPF_PHASE_EVAL (nested same-name ranges count once)
    ev.in_fwd += 1


def hook_forward(module):
    """Time module's forward calls as the "forward" phase (hooks on this one
    module, not its children); a call with grad off or the module in eval
    mode is evaluation (_state.eval_enter). Returns False when hooks cannot be
    added."""
    if getattr(module, "_trainperf_forward_hooked", False):
        return False
    import torch
    core = _state.core
    push, pop = core.range_push, core.range_pop
    grad_on = torch.is_grad_enabled
    ev = _state.ev

    def fwd_pre(mod, args):
        _enter_forward(mod, args, grad_on, push)

    def fwd_post(mod, args, output):
        ev.in_fwd -= 1
        pop()

    try:
        module.register_forward_pre_hook(fwd_pre)
        module.register_forward_hook(fwd_post, always_call=True)
        module._trainperf_forward_hooked = True
    except Exception:
        return False
    _state.note_model(module)
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
    import torch
    cls = type(module)
    if "forward" in module.__dict__ or getattr(module, "_trainperf_forward_hooked", False):
        return hook_forward(module)
    orig = getattr(cls, "forward", None)
    if orig is None or getattr(orig, "_trainperf_fwd", False) or not callable(orig):
        return hook_forward(module)
    core = _state.core
    push, pop = core.range_push, core.range_pop
    grad_on = torch.is_grad_enabled
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (
        lambda: False)
    ev = _state.ev
    top = module

    @functools.wraps(orig)
    def forward(self, *args, **kwargs):
        if self is not top or is_compiling():
            return orig(self, *args, **kwargs)
        _enter_forward(self, args, grad_on, push)
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
    _state.note_model(module)
    return True


def install(torch):
    """Find the top-level module at its first call and time its forwards
    (and, after a frozen helper was found, the module being trained)."""
    st = _state.st
    ev = _state.ev
    # Module.__call__ is swapped for one call only (not a global module hook:
    # those make torch.compile warn and would run for every submodule).
    from torch.nn.modules import module as modmod
    Module = modmod.Module
    orig_call = Module.__dict__["__call__"]

    # after a frozen helper was found (_state.step_in_eval): the next
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
            _state.begin_if_closed()
        tune = _state.tune
        if tune is not None:
            tune.on_model(self)
        hook_forward_fast(self)  # already applies to this call
        return orig_call(self, *args, **kwargs)

    Module.__call__ = first_call

    def rearm():
        if Module.__dict__.get("__call__") is orig_call:
            want_trained[0] = True
            Module.__call__ = first_call

    _state.rearm = rearm
