"""What the hooks share, and how their events reach the probe: the bottom
layer of the Python package (docs/architecture.md, "The Python package").

It imports nothing of trainperf. The package binds the probe here when it
loads (`bind`: the C extension, or its ctypes / no-op fallback); every hook
reaches the probe through `core` and keeps what the others read in the
records below:

- `st`: this thread's step state (open, samples, tokens, in_data), kept in C
  (core.auto_state) where the C hooks read it without a Python frame;
- the step boundaries every hook may cross (`begin_if_closed`,
  `next_step`) and the switches the installer sets (`auto_steps`,
  `bwd_steps`, `opt_phase`, `tune`, `step_hooks`, `training_start`);
- the eval phase (`ev` and its transitions), opened by a grad-off or
  eval-mode forward or model.eval(), closed by training;
- the models and optimizers the hooks met, how the process ended
  (`exit_info`), the last garbage collections (for the sampler);
- where this process's files go (`run_dir`, `out_dir`, `rank`, `unique_path`).

A hook that must reach another one does it through a slot here that its
owner fills when it is installed (`insert_backward`, `rearm`), never by
importing it.
"""
import collections
import math
import os
import sys
import threading
import time
import weakref

core = None     # the probe (trainperf._core or its fallback), bound by the package


class TrainperfWarning(UserWarning):
    """Monitoring degraded (no extension, collector did not start, ...)."""


TrainperfWarning.__module__ = "trainperf"


class _State(threading.local):
    """Step state of one thread (steps are per thread in the probe)."""

    def __init__(self):
        self.open = False
        self.samples = 0
        self.tokens = 0
        self.in_data = 0


st = None       # this thread's step state: core.auto_state, else a _State


def bind(probe):
    """Called once by the package with the probe it loaded."""
    global core, st
    core = probe
    # the C extension keeps it per thread in C, where its hooks read it
    # without a Python frame (_core.c, auto_state)
    s = getattr(probe, "auto_state", None)
    st = s if s is not None else _State()


def c_hooks():
    """The C extension when it has the hot hooks (_core.c), else None."""
    if hasattr(core, "data_next") and hasattr(core, "opt_hooks") and \
            type(st).__name__ == "AutoState":
        return core
    return None


# --- switches the installer sets ---------------------------------------------

auto_steps = False      # the full auto hook is on: DataLoader batches may begin a step
# backward ends are step boundaries while no optimizer has been made or has
# stepped (the C hooks keep their own copy: core.auto_state.bwd_steps)
bwd_steps = False
# False while a callback records the optimizer phase itself: Lightning runs the
# training step's closure inside optimizer.step(), so the global hooks' range
# would enclose forward and backward and interleave with the callback's ranges.
opt_phase = True
tune = None             # trainperf._knobs while a `trainperf tune` trial runs, else None
# Profiling hooks asked for by `trainperf run --profile/--flops-step/...`
# (_profile_hooks.StepHooks), or None: then steps cost one test more.
step_hooks = None
hook_step = 0
training_start = []     # called once, in order, when the first step begins


def set_bwd_steps(on):
    global bwd_steps
    bwd_steps = bool(on)
    if c_hooks() is not None:
        st.bwd_steps = bwd_steps


def set_opt_phase(on):
    """Whether the optimizer hooks record the optimizer phase (a callback
    that records it itself turns it off)."""
    global opt_phase
    opt_phase = bool(on)
    if c_hooks() is not None:
        st.opt_phase = opt_phase


# --- step boundaries -----------------------------------------------------------

def begin_if_closed():
    """Begin this thread's step when none is open (the auto hook's first
    DataLoader batch, module forward, backward or optimizer step)."""
    if auto_steps and not st.open and not core.explicit_steps():
        if core.auto_step_begin():
            st.open = True
            if not ev.training_started:
                ev.training_started = True
                for f in training_start:
                    f()
            if step_hooks is not None:
                hooks_call("begin")


def next_step():
    """End this thread's open step and begin the next (an optimizer step, or
    a backward while backward ends are the boundaries)."""
    if core.auto_step_end(st.samples, st.tokens):
        st.samples = st.tokens = 0
        if step_hooks is not None:
            hooks_call("end")
        st.open = core.auto_step_begin()
        if st.open and step_hooks is not None:
            hooks_call("begin")
    else:
        st.open = False


def hooks_call(what):
    """Tell the profiling hooks that step hook_step begins or ends; a hook
    that fails is turned off, never the training."""
    global step_hooks, hook_step
    h = step_hooks
    try:
        if what == "begin":
            h.begin(hook_step)
        else:
            h.end(hook_step)
            hook_step += 1
    except Exception as exc:
        step_hooks = None
        sys.stderr.write("trainperf: profiling hooks disabled: %r\n" % (exc,))
        try:
            h.close()
        except Exception:
            pass


backward_inserter = None  # the autograd hooks' insert, once they wrap backward


def insert_backward(make, torch):
    """Put make(inner) inside the "backward" phase wrapper, around what it
    calls (the range of a wrapper added later must nest inside it: _comm's
    DDP tail, added at the first DDP forward); wraps torch.autograd.backward
    itself when the phase wrapper is not installed."""
    if backward_inserter is not None:
        backward_inserter(make, torch)
    else:
        torch.autograd.backward = make(torch.autograd.backward)


# --- the eval phase --------------------------------------------------------------

EVAL = 6  # TPF_PHASE_EVAL


class _Ev:
    active = False          # the eval phase is open on the training thread
    entries = 0
    points = 0              # evaluation points: entries with a training forward since the last
    train_since = True      # a training forward ran since the last entry
    time_s = 0.0
    t_enter = 0.0
    in_fwd = 0              # forward depth on the training thread
    training_started = False
    thread = None           # ident of the thread running steps
    ranges = True           # push the eval range (False: a callback records eval itself)
    pushed = False          # this eval pushed one
    opener = None           # the module whose forward opened it (None: model.eval())
    ddp_no_sync = False     # a DDP forward ran under no_sync() (gradient accumulation)
    ep_fwd = 0              # forwards of the module in the open eval phase
    instep_run = 0          # eval phases in a row that were inference inside a step
    fwd_n = 0               # forwards labelled evaluation
    fwd_grad = 0            # of them, with grad enabled (building autograd graphs)
    fwd_rows = 0            # rows (first dimension of the first tensor argument) of them
    fwd_sized = 0           # of them, those with a tensor argument
    t_fwd = 0.0             # when the open phase's last forward began
    gaps = None             # counts by bucket of the time from one eval forward's start to the next's (or the phase's end)


ev = _Ev()
ev.gaps = [0] * 256
_push = _pop = None     # the eval range: set by the evaluation hooks (enable_eval)
rearm = None  # set by the model hooks: look again for the module being trained

# The gaps between evaluation forwards of one phase (a batch's forward, its
# metric and the next batch's loading; the last one's to the phase's end: a
# pass of one forward is one gap), log-bucketed by 5% from 1 µs: their
# low quantile is what a batch of evaluation costs when the process does not
# wait for a CPU, as the steps' is for training (docs/diagnosis.md, eval-often;
# events eval.forward_gaps).
GAP_BASE = 1.05
GAP_MIN_S = 1e-6


def _gap_bucket(s):
    k = int(math.log(s / GAP_MIN_S) / math.log(GAP_BASE)) if s > GAP_MIN_S else 0
    return min(max(k, 0), len(ev.gaps) - 1)


def eval_gap_buckets():
    """The gaps as [bucket, count] pairs (bucket k: from 1 µs x 1.05^k)."""
    return [[k, c] for k, c in enumerate(ev.gaps) if c]


def enable_eval(push, pop):
    """The evaluation hooks are installed: the eval phase may open."""
    global _push, _pop
    _push, _pop = push, pop


def now():
    return time.monotonic()


def eval_forward(args, grad):
    """One forward labelled evaluation: counted, with whether it builds a
    graph and how many rows it takes (one at a time: acting or sampling,
    not a pass over held-out batches)."""
    ev.ep_fwd += 1
    ev.fwd_n += 1
    t = now()
    if ev.ep_fwd > 1:
        ev.gaps[_gap_bucket(t - ev.t_fwd)] += 1
    ev.t_fwd = t
    if grad:
        ev.fwd_grad += 1  # evaluation that builds autograd graphs
    try:  # whatever the argument is, nothing here reaches the model's caller
        a = args[0] if args else None
        shape = getattr(a, "shape", None)
        if shape is not None and len(shape) > 0:
            # a 1-D input is one unbatched sample (an observation, a sequence)
            ev.fwd_rows += int(shape[0]) if len(shape) > 1 else 1
            ev.fwd_sized += 1
    except Exception:
        pass


def eval_enter(opener=None):
    """Open the eval phase (only at the top level of the training thread);
    opener is the module whose grad-off or eval-mode forward opened it."""
    if ev.active or ev.in_fwd or _push is None:
        return
    if ev.thread is not None and threading.get_ident() != ev.thread:
        return
    if st.in_data:
        return
    ev.active = True
    ev.opener = opener
    ev.ep_fwd = 0
    ev.entries += 1
    if ev.train_since:  # train and val evaluated back to back are one point
        ev.points += 1
        ev.train_since = False
    ev.t_enter = now()
    ev.pushed = ev.ranges
    if ev.pushed:
        _push(EVAL)


def eval_leave():
    if not ev.active or ev.in_fwd:
        return
    if ev.thread is not None and threading.get_ident() != ev.thread:
        return
    if st.in_data:
        return
    ev.active = False
    ev.opener = None
    t = now()
    if ev.ep_fwd >= 1:  # the last forward's gap ends with the phase
        ev.gaps[_gap_bucket(t - ev.t_fwd)] += 1
    ev.time_s += t - ev.t_enter
    if ev.pushed:
        ev.pushed = False
        _pop()


INSTEP_RUN = 3


def training_forward(mod):
    """A training forward of mod closes the open eval phase. One that a
    grad-off forward of mod itself opened, in training mode (no
    model.eval()), with at most two forwards, and that no optimizer step
    crossed, was inference inside the step: acting in a reinforcement-
    learning loop, targets or pseudo-labels from the model being trained.
    Three in a row and mod's grad-off forwards in training mode are training
    forwards from then on (evaluation calls model.eval(), or runs many
    batches). (The few seen first stay labelled eval.)"""
    short = ev.opener is mod and ev.ep_fwd <= 2 and getattr(mod, "training", False)
    ev.train_since = True
    eval_leave()
    ev.instep_run = ev.instep_run + 1 if short else 0
    if ev.instep_run >= INSTEP_RUN:
        try:
            mod._trainperf_instep = True
        except Exception:
            pass


def step_in_eval():
    """The optimizer steps while the eval phase is open. When a forward (not
    model.eval()) opened it, the timed module was never called for training
    since: it is a frozen helper run inside every step (a distillation
    teacher, a frozen encoder under no_grad), not an evaluation. From now
    on its forwards are training forwards, and the auto hook looks for the
    module that is trained. (The one step already seen stays mislabelled.)"""
    m = ev.opener
    eval_leave()
    ev.instep_run = 0
    if m is None or getattr(m, "_trainperf_frozen", False):
        return
    try:
        m._trainperf_frozen = True
        if rearm is not None:
            rearm()
    except Exception:
        pass


# --- what the hooks met --------------------------------------------------------------

models = []             # weak references to the modules whose forward is timed
optimizers = []         # weak references to the optimizers made
opt_made = [0, 0]       # optimizers made: in all, after training began
# how the process ended: the uncaught exception (sys.excepthook, _failhooks)
# and whether the interpreter reached its shutdown (the sampler's last write)
exit_info = {"ended": False, "error": None}
gc_last_end = [0.0]     # perf_counter() when the last collection ended (the sampler reads it)
gc_recent = collections.deque(maxlen=64)  # (start, end) perf_counter() of the last collections


def note_model(module):
    """The auto hook times module's forward: its parameters are the model's."""
    try:
        if len(models) < 16:
            models.append(weakref.ref(module))
    except TypeError:
        pass


def note_optimizer(opt):
    opt_made[0] += 1
    if ev.training_started:
        opt_made[1] += 1
    try:
        if len(optimizers) >= 64:  # a script making optimizers over and over
            optimizers[:] = [r for r in optimizers if r() is not None]
        if len(optimizers) < 64:
            optimizers.append(weakref.ref(opt))
    except TypeError:
        pass


# --- where this process's files go -------------------------------------------------

def run_dir():
    """The run directory of the attached probe, else TRAINPERF_RUN_DIR, else None."""
    try:
        d = core.run_dir()
    except Exception:
        d = None
    return d or os.environ.get("TRAINPERF_RUN_DIR")


def out_dir(sub, base=None):
    """base/sub, base by default the run directory, else ./trainperf-profiler."""
    d = base or run_dir()
    if not d:
        d = os.path.join(os.getcwd(), "trainperf-profiler")
    return os.path.join(d, sub)


def rank():
    """This process's rank: torch.distributed's when initialised, else RANK
    (torchrun, before init), else SLURM_PROCID, else 0."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    for var in ("RANK", "SLURM_PROCID"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return 0


def unique_path(path):
    """path, or path with -pid<pid> before its extension when it exists (two
    processes of the same rank, a restarted run)."""
    if not os.path.exists(path):
        return path
    root, ext = os.path.splitext(path)
    if ext == ".gz":
        root, e2 = os.path.splitext(root)
        ext = e2 + ext
    return "%s-pid%d%s" % (root, os.getpid(), ext)
