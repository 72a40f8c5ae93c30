"""The optimizer hooks: step boundaries and the "optimizer" phase.

Each step of the primary optimizer (the first one that steps; another one
takes over when it steps twice in a row, as in a second training stage) ends
a step and begins the next, so gradient accumulation gives one step per
optimizer step; every optimizer step runs inside the "optimizer" phase
(global pre/post hooks). Until an optimizer is made or steps, backward ends
are the step boundaries (_state.bwd_steps, _gradhooks). Installed by the
auto hook (_autohook.patch_torch); the state is _state's. Never raises into
the training loop.
"""
import sys
import weakref

from trainperf import _state

OPTIMIZER = 4  # TPF_PHASE_OPTIMIZER


def install(torch):
    """Register the global optimizer step hooks and wrap Optimizer.__init__."""
    core = _state.core
    push, pop = core.range_push, core.range_pop
    st = _state.st
    ev = _state.ev
    begin_if_closed, step_in_eval = _state.begin_if_closed, _state.step_in_eval
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

    from torch.optim import optimizer as optmod

    def opt_pre(opt, args, kwargs):
        if ev.active:
            step_in_eval()
        if not st.open:
            begin_if_closed()
        if _state.opt_phase:
            push(OPTIMIZER)

    def opt_post(opt, args, kwargs):
        if _state.opt_phase:
            pop()
        if _state.bwd_steps:
            _state.set_bwd_steps(False)
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
            _state.next_step()
        tune = _state.tune
        if tune is not None:
            tune.on_step(opt)

    c_hooks = _state.c_hooks()
    if c_hooks is not None and _state.step_hooks is None and _state.tune is None:
        # the same in C (_core.c, opt_hooks): no Python frame per step; the
        # profiling hooks and tune trials keep the Python ones
        opt_pre, opt_post = c_hooks.opt_hooks(ev, begin_if_closed, step_in_eval)
    handles["opt_pre"] = optmod.register_optimizer_step_pre_hook(opt_pre)
    handles["opt_post"] = optmod.register_optimizer_step_post_hook(opt_post)

    # --- no optimizer: backward ends are the step boundaries ---------------
    # until an optimizer is made (before its loop's first backward: gradient
    # accumulation keeps one step per optimizer step) or steps (one made
    # before torch was patched)
    _state.set_bwd_steps(True)
    try:
        opt_cls = optmod.Optimizer
        orig_init = opt_cls.__init__

        def opt_init(self, *args, **kwargs):
            if _state.bwd_steps:
                _state.set_bwd_steps(False)
            _state.note_optimizer(self)
            return orig_init(self, *args, **kwargs)

        opt_init.__wrapped__ = orig_init
        opt_init.__doc__ = orig_init.__doc__
        opt_init.__name__ = "__init__"
        opt_init.__qualname__ = getattr(orig_init, "__qualname__", "__init__")
        opt_cls.__init__ = opt_init
    except Exception as exc:  # never break the watched program
        _state.set_bwd_steps(False)
        sys.stderr.write("trainperf: steps of hand-written updates off: %r\n" % (exc,))
