"""The autograd hooks: torch.autograd.backward (so also Tensor.backward)
timed as the "backward" phase.

Under the auto hook a backward also begins the first step when none is
open, and, while no optimizer was made or stepped (a loop that updates its
parameters by hand), its end is the step boundary (_state.bwd_steps). A
wrapper another hook adds later goes inside the phase wrapper
(_state.insert_backward: _comm's DDP tail). Used by the auto hook and the
HF callback; the state is _state's. Never raises into the training loop.
"""
from trainperf import _state

_backward_patched = False
_backward_inner = None   # what the "backward" phase wrapper calls


def _bwd_boundary():
    """A backward ended while its ends are step boundaries (a hand-written
    update loop): end this thread's step and begin the next, as an optimizer
    step does (_opthooks' opt_post). Never raises."""
    try:
        if _state.ev.active:
            _state.step_in_eval()
        _state.next_step()
    except Exception:
        pass


def _backward_wrapper(torch, inner):
    """The "backward" phase around inner (push, call, pop); under the auto
    hook also the first step's begin and, while no optimizer was made or
    stepped, the step boundary at its end."""
    core = _state.core
    push, pop = core.range_push, core.range_pop
    timed = getattr(core, "timed", None)
    c_hooks = _state.c_hooks()
    st = _state.st
    begin_if_closed = _state.begin_if_closed
    if _state.auto_steps and _state.tune is None and _state.step_hooks is None and \
            c_hooks is not None and hasattr(c_hooks, "backward_hook"):
        # the same in C (_core.c, bwd_vectorcall): no Python frame per backward
        backward_timed = c_hooks.backward_hook(inner, _state.ev, begin_if_closed,
                                               _state.step_in_eval)
    elif _state.auto_steps:
        def backward_timed(*args, **kwargs):
            tune = _state.tune
            if tune is not None:
                tune.on_backward(args)
            if not st.open:
                begin_if_closed()
            push(3)  # TPF_PHASE_BACKWARD
            try:
                r = inner(*args, **kwargs)
            finally:
                pop()
            if _state.bwd_steps and st.open:
                _bwd_boundary()
            return r
    elif _state.tune is None and timed is not None:
        # push, call, pop in C: no Python frame per backward (a callback's
        # phases; the auto hook's step boundaries are not on)
        backward_timed = timed(inner, 3)  # TPF_PHASE_BACKWARD
    else:
        def backward_timed(*args, **kwargs):
            tune = _state.tune
            if tune is not None:
                tune.on_backward(args)
            push(3)  # TPF_PHASE_BACKWARD
            try:
                return inner(*args, **kwargs)
            finally:
                pop()
    backward_timed.__wrapped__ = inner
    backward_timed.__doc__ = inner.__doc__
    return backward_timed


def _insert(make, torch):
    """_state.insert_backward once the phase wrapper is installed: make(inner)
    goes inside it."""
    global _backward_inner
    _backward_inner = make(_backward_inner)
    torch.autograd.backward = _backward_wrapper(torch, _backward_inner)


def patch_backward(torch=None):
    """Time torch.autograd.backward (so also Tensor.backward) as the
    "backward" phase. Idempotent."""
    global _backward_patched, _backward_inner
    if _backward_patched:
        return
    _backward_patched = True
    if torch is None:
        import torch
    _backward_inner = torch.autograd.backward
    torch.autograd.backward = _backward_wrapper(torch, _backward_inner)
    _state.backward_inserter = _insert
