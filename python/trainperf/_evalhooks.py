"""Zero-code labels the diagnosis needs beyond steps and data wait.

Installed by the auto hook (_autohook.patch_torch); everything here stays off
the per-step path except two attribute reads in the forward pre-hook, and the
count of one backward's graph every 4 s, sooner at first (graph_probe; not on CUDA):

- evaluation: a top-level forward with grad disabled or the module in eval
  mode (plain `model.eval()` / `torch.no_grad()` loops, Lightning validation,
  HF evaluate) opens the "eval" phase; `model.eval()` opens it too, and the
  next training forward, optimizer step or `model.train()` closes it, so the
  whole evaluation (its loader included) is eval time, not training time;
- GC pauses: gc.callbacks times every collection (count, total, largest);
- torch.compile: each frame compile timed, recompiles counted with the guard
  failure that caused them (wrapped only once torch.compile is called);
- DataLoader iterators: each new iterator (an epoch) and the time to its
  first batch (worker start-up), with its worker count;
- settings that slow every step: autograd anomaly detection left on (read
  every half second while training), the dtype of the timed modules'
  parameters (float64 runs at half float32's rate or less), gradients that
  no optimizer uses, evaluation forwards with grad on; torch.profiler
  recording (outside trainperf's own --profile windows) and a Python
  debugger, coverage tool or profiler tracing the training thread;
  tracemalloc tracing, Python's development mode and debugging variables;
- the size of the step's ops: nodes of one backward's graph, and its time.

What is measured goes to pyprof/events-<pid>.json in the run directory,
written by the stack sampler's thread every few seconds and at exit
(docs/run-format.md). Nothing here raises into the training script.
"""
import gc
import os
import sys
import threading
import time

from trainperf import _cuda, _state

_pid = os.getpid()
_lock = threading.Lock()
_MAX_EVENTS = 2000  # every list here is capped

# shared with the other hooks and the sampler (_state): the eval phase, the
# models and optimizers met, how the process ended, the last collections
ev = _state.ev
eval_enter, eval_leave = _state.eval_enter, _state.eval_leave
models, optimizers, opt_made = _state.models, _state.optimizers, _state.opt_made
exit_info = _state.exit_info
gc_last_end, gc_recent = _state.gc_last_end, _state.gc_recent
_now = _state.now

gc_stats = {"collections": [0, 0, 0], "pause_s": 0.0, "max_s": 0.0, "pauses": []}
compile_stats = {"frames": 0, "compile_s": 0.0, "recompiles": 0, "events": []}
loader_stats = {"iterators": 0, "train_iterators": 0, "train_start_s": 0.0,
                "train_stop_s": 0.0, "train_batches": 0, "train_batches_unknown": 0,
                "workers": 0, "persistent": False, "epochs": []}
settings = {"ticks": 0, "anomaly_ticks": 0, "tracemalloc_ticks": 0, "tracer_ticks": 0,
            "tracer": None, "tracer_kind": None, "tracer_how": None}
grads_seen = {"unused": 0, "optimized": 0, "all": 0}  # the largest seen, in parameters
opt_seen = {}           # optimizer class name -> its facts, the largest seen (optimizer_facts)
amp_seen = {}           # autocast regions made: device type -> dtype (the last)
grad_ever = set()       # ids of the timed parameters seen with a gradient (walk_params)
ddp_seen = {}           # DistributedDataParallel settings and never-updated parameters (ddp_facts)
embed_seen = {}         # id(embedding module) -> its facts (embedding_facts)
param_dtypes = {}       # the timed modules' parameters by dtype, at the last walk


# --- model.eval() / model.train() ------------------------------------------

def _patch_train(torch):
    Module = torch.nn.Module
    orig_train = Module.train
    depth = [0]

    def train(self, mode=True):
        depth[0] += 1
        try:
            return orig_train(self, mode)
        finally:
            depth[0] -= 1
            # the outermost call only (train() recurses into children); a
            # submodule frozen in eval mode at set-up is not an evaluation
            if depth[0] == 0 and ev.training_started:
                try:
                    if mode:
                        eval_leave()
                    elif len(self._modules) or getattr(self, "_trainperf_forward_hooked", False):
                        eval_enter()
                except Exception:
                    pass

    train.__wrapped__ = orig_train
    train.__doc__ = orig_train.__doc__
    Module.train = train


# --- GC --------------------------------------------------------------------

_gc_t0 = [0.0]


def _gc_cb(phase, info):
    # collections during imports and set-up are not the training's
    if not ev.training_started:
        return
    if phase == "start":
        _gc_t0[0] = time.perf_counter()
        return
    end = time.perf_counter()
    gc_last_end[0] = end
    gc_recent.append((_gc_t0[0], end))
    dt = end - _gc_t0[0]
    g = info.get("generation", 0)
    if 0 <= g <= 2:
        gc_stats["collections"][g] += 1
    gc_stats["pause_s"] += dt
    if dt > gc_stats["max_s"]:
        gc_stats["max_s"] = dt
    # only pauses long enough to show in a step time are kept with their time
    if dt >= 0.002 and len(gc_stats["pauses"]) < _MAX_EVENTS:
        gc_stats["pauses"].append([round(_now(), 6), round(dt, 6), g])


# --- torch.compile ----------------------------------------------------------

_compile_hooked = [False]
_last_reason = [None]


def _hook_compile():
    if _compile_hooked[0]:
        return
    _compile_hooked[0] = True
    try:
        from torch._dynamo import convert_frame as cf
    except Exception:
        return
    orig_reasons = getattr(cf, "get_and_maybe_log_recompilation_reasons", None)
    orig_compile = getattr(cf, "_compile", None)
    if orig_reasons is not None:
        def reasons_hook(*a, **k):
            r = orig_reasons(*a, **k)
            try:
                _last_reason[0] = str(r[0]) if r else "unknown guard failure"
            except Exception:
                pass
            return r
        cf.get_and_maybe_log_recompilation_reasons = reasons_hook
    if orig_compile is not None:
        def compile_hook(*a, **k):
            _last_reason[0] = None
            t0 = _now()
            try:
                return orig_compile(*a, **k)
            finally:
                dt = _now() - t0
                reason = _last_reason[0]
                name = "?"
                try:
                    code = a[0] if a else k.get("code")
                    name = "%s (%s:%d)" % (code.co_name, os.path.basename(code.co_filename),
                                           code.co_firstlineno)
                except Exception:
                    pass
                compile_stats["frames"] += 1
                compile_stats["compile_s"] += dt
                if reason is not None:
                    compile_stats["recompiles"] += 1
                if (dt >= 0.001 or reason) and len(compile_stats["events"]) < _MAX_EVENTS:
                    compile_stats["events"].append(
                        {"t": round(t0, 6), "dur_s": round(dt, 6), "frame": name,
                         "reason": (reason or "")[:300]})
        cf._compile = compile_hook


def _patch_compile(torch):
    orig = getattr(torch, "compile", None)
    if orig is None:
        return

    def compile_(*a, **k):
        try:
            _hook_compile()
        except Exception:
            pass
        return orig(*a, **k)

    compile_.__wrapped__ = orig
    compile_.__doc__ = orig.__doc__
    torch.compile = compile_


# --- DataLoader iterators: epochs and worker start-up -----------------------

def _patch_loader(torch):
    from torch.utils.data import dataloader as dl
    orig_iter = dl.DataLoader.__iter__

    def iter_(self):
        t0 = _now()
        it = orig_iter(self)
        try:
            nw = int(getattr(self, "num_workers", 0) or 0)
            loader_stats["iterators"] += 1
            if not ev.active:
                loader_stats["train_iterators"] += 1
                loader_stats["train_start_s"] += _now() - t0
                try:  # batches an epoch (an IterableDataset may have no length)
                    loader_stats["train_batches"] += len(self)
                except Exception:
                    loader_stats["train_batches_unknown"] += 1
            loader_stats["workers"] = max(loader_stats["workers"], nw)
            if getattr(self, "persistent_workers", False):
                loader_stats["persistent"] = True
            pf = getattr(self, "prefetch_factor", None) if nw > 0 else None
            if isinstance(pf, int) and pf > loader_stats.get("prefetch_factor", 0):
                loader_stats["prefetch_factor"] = pf
            if len(loader_stats["epochs"]) < _MAX_EVENTS:
                loader_stats["epochs"].append({"t": round(t0, 6), "workers": nw,
                                               "start_s": round(_now() - t0, 6),
                                               "eval": bool(ev.active)})
        except Exception:
            pass
        return it

    iter_.__wrapped__ = orig_iter
    dl.DataLoader.__iter__ = iter_

    # an iterator's workers stopped (at its end, or when it is dropped): the
    # other half of what a new iterator per batch costs
    mp_iter = getattr(dl, "_MultiProcessingDataLoaderIter", None)
    orig_stop = getattr(mp_iter, "_shutdown_workers", None)
    if orig_stop is None or hasattr(orig_stop, "__wrapped__"):
        return

    def stop_(self):
        if getattr(self, "_shutdown", True) or ev.active:
            return orig_stop(self)
        t0 = _now()
        try:
            return orig_stop(self)
        finally:
            loader_stats["train_stop_s"] += _now() - t0

    stop_.__wrapped__ = orig_stop
    mp_iter._shutdown_workers = stop_


# --- settings that slow every step ------------------------------------------

def optimized_ids():
    """ids of the parameters the live optimizers hold."""
    ids = set()
    for ref in list(optimizers):
        o = ref()
        for g in (list(getattr(o, "param_groups", ())) if o is not None else ()):
            ids.update(id(p) for p in list(g.get("params", ())))
    return ids


def _timed_params():
    """Each parameter of the live timed models, once (models share modules)."""
    seen = set()
    for ref in list(models):
        m = ref()
        for p in (m.parameters() if m is not None else ()):
            if id(p) not in seen:
                seen.add(id(p))
                yield p


def walk_params():
    """One walk of the timed modules' parameters: their dtypes, how many an
    optimizer updates, and all (the largest counts seen). Runs on the
    sampler thread, so it never reads a parameter's .grad: the autograd
    engine writes it with the GIL released, and reading it meanwhile from
    another thread crashed the process (scan_grads reads it on the training
    thread). A list changed meanwhile costs one reading. Returns
    grads_seen."""
    if not models:
        return grads_seen
    try:
        # no live optimizer (none made, or freed before the model at exit):
        # nothing to compare against
        ids = optimized_ids() or None
        dtypes = {}
        optimized = total = 0
        for p in _timed_params():
            # FSDP1's flat parameter holds this rank's shard: count the whole
            # (FSDP2's DTensors count the whole already)
            full = getattr(p, "_unpadded_unsharded_size", None)
            n = full.numel() if full is not None else p.numel()
            total += n
            k = str(p.dtype).replace("torch.", "")
            dtypes[k] = dtypes.get(k, 0) + n
            if ids is not None and id(p) in ids:
                optimized += n
    except Exception:
        return grads_seen
    if total:
        param_dtypes.clear()
        param_dtypes.update(dtypes)
    if ids is not None:
        grads_seen["optimized"] = max(grads_seen["optimized"], optimized)
        grads_seen["all"] = max(grads_seen["all"], total)
    return grads_seen


def scan_grads():
    """On the training thread, after a backward returned (the graph probe's
    callback) or at a step's end (tune): which timed parameters have a
    gradient now. Of them, those no optimizer holds get one for nothing
    (requires_grad left on for a part that is not trained: the largest
    count seen, a zero_grad() between steps clears them for a moment); every
    parameter seen with one is remembered (a DDP parameter never seen with
    one is unused). Counts the scans ("walks")."""
    if not models:
        return
    try:
        ids = optimized_ids() or None
        if ids is None:
            return
        unused = 0
        for p in _timed_params():
            if p.grad is None:
                continue
            if len(grad_ever) < 1000000:
                grad_ever.add(id(p))
            if id(p) not in ids and p.requires_grad:
                unused += p.numel()
    except Exception:
        return
    grads_seen["unused"] = max(grads_seen["unused"], unused)
    grads_seen["walks"] = grads_seen.get("walks", 0) + 1


# --- what the optimizer step updates ----------------------------------------

_fused_ok = {}          # optimizer class -> whether its __init__ takes fused=


def _can_fuse(torch, cls, cuda):
    """Whether cls takes fused=True for parameters there: CUDA since torch
    2.0, the CPU since 2.4 (Adam, AdamW, SGD, Adagrad in 2.13)."""
    if cls not in _fused_ok:
        try:
            import inspect
            _fused_ok[cls] = "fused" in inspect.signature(cls.__init__).parameters
        except (TypeError, ValueError):
            _fused_ok[cls] = False
    if not _fused_ok[cls]:
        return False
    if cuda:
        return True
    try:
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 4)


def optimizer_facts(torch):
    """The live optimizers by class: the parameters they update, and whether
    the update runs fused (one kernel), foreach (one op per kind of tensor
    over all of them) or as the default loop over parameters, which on the
    CPU is torch's default. Kept at the largest seen: a trainer frees its
    optimizers at the end."""
    for ref in list(optimizers):
        o = ref()
        if o is None:
            continue
        groups = list(getattr(o, "param_groups", ()))
        n, cuda = 0, False
        for g in groups:
            for p in list(g.get("params", ())):
                n += p.numel()
                cuda = cuda or p.device.type == "cuda"
        if not n:
            continue
        g0 = groups[0]
        cls = type(o)
        f = opt_seen.setdefault(cls.__name__, {"class": cls.__name__, "params": 0})
        f["params"] = max(f["params"], n)
        f["fused"] = bool(g0.get("fused"))
        f["foreach"] = bool(g0.get("foreach"))
        f["can_fuse"] = _can_fuse(torch, cls, cuda)
        f["can_foreach"] = "foreach" in g0
        f["cuda"] = cuda
        if len(opt_seen) >= 8:
            break


def ddp_facts():
    """A DistributedDataParallel model's find_unused_parameters and
    static_graph, and the trainable parameters no walk has seen with a
    gradient (DDP leaves an unused parameter's .grad None): what
    find_unused_parameters=True searches the graph for after every
    forward."""
    for ref in list(models):
        m = ref()
        if m is None or not hasattr(m, "find_unused_parameters") or not hasattr(m, "module"):
            continue
        never, names, total = 0, [], 0
        for name, p in m.module.named_parameters():
            if not p.requires_grad:
                continue
            total += p.numel()
            if id(p) not in grad_ever:
                never += p.numel()
                if len(names) < 3:
                    names.append(name)
        ddp_seen.update({"find_unused": bool(m.find_unused_parameters),
                         "static_graph": bool(getattr(m, "static_graph", False)),
                         "params": total, "never_grad": never, "never_grad_names": names,
                         "walks": grads_seen.get("walks", 0)})
        return


_embed_hooks = {}       # id(embedding module) -> its _lookups hook, until it ran


def _lookups(module, inputs):
    """Forward pre-hook, once: how many rows one forward of the embedding
    looks up (its input's elements); then it removes itself."""
    try:  # nothing here reaches the model's caller
        f = embed_seen.get(id(module))
        if f is not None and inputs and hasattr(inputs[0], "numel"):
            f["lookups"] = int(inputs[0].numel())
        h = _embed_hooks.pop(id(module), None)
        if h is not None:
            h.remove()
    except Exception:
        pass


def embedding_facts(torch, held):
    """The timed models' dense embedding tables (nn.Embedding/EmbeddingBag,
    sparse=False): rows, width, whether an optimizer updates them, whether
    another module shares the weight (a language model's tied output layer:
    its gradient is dense), and the rows one forward looks up. A dense
    optimizer updates every row of such a table each step."""
    nn = torch.nn
    kinds = (nn.Embedding, nn.EmbeddingBag)
    for ref in list(models):
        m = ref()
        if m is None:
            continue
        mods = []
        owners = {}
        for i, (name, mod) in enumerate(m.named_modules()):
            if i >= 20000:
                break
            mods.append((name, mod))
            for p in list(mod._parameters.values()):
                if p is not None:
                    owners[id(p)] = owners.get(id(p), 0) + 1
        for name, mod in mods:
            if not isinstance(mod, kinds) or getattr(mod, "sparse", True):
                continue
            w = mod.weight
            f = embed_seen.get(id(mod))
            if f is None:
                if len(embed_seen) >= 64:
                    continue
                f = embed_seen[id(mod)] = {"name": name or type(mod).__name__,
                                           "rows": int(w.shape[0]), "dim": int(w.shape[1]),
                                           "lookups": None, "optimized": False, "tied": False}
                # not under torch.compile: a hook added or removed there
                # would make it recompile the model
                if not compile_stats["frames"]:
                    _embed_hooks[id(mod)] = mod.register_forward_pre_hook(_lookups)
            f["optimized"] = id(w) in held
            f["tied"] = owners.get(id(w), 0) > 1


# --- the autograd graph: how many ops a step runs, and how long each takes ----

GRAPH_PERIOD_S = 4.0    # one backward probed this often (the C backward hook)
GRAPH_MAX_NODES = 20000  # a larger graph is not counted (~20 ms at most)
graph = {"probes": []}  # [nodes, backward ns, floor ns a node] of each probe (at most _MAX_EVENTS)


def graph_probe(tensors):
    """Before one backward every GRAPH_PERIOD_S: count the nodes of its
    graph (about 1 µs each, on the training thread); the function returned
    takes the backward's ns. Many nodes at a few µs each is a step made of
    tiny ops: per-op overhead, not arithmetic."""
    if not ev.training_started or ev.active:
        return None
    n = _count_nodes(tensors)

    def done(ns):
        # after the backward, on this thread: the gradients it wrote, and the
        # machine's floor at this moment
        scan_grads()
        if n and len(graph["probes"]) < _MAX_EVENTS:
            try:
                floor = round(_node_floor_ns(sys.modules["torch"]), 1)
            except Exception:
                floor = None
            graph["probes"].append([n, int(ns), floor])
    return done


CALIB_NODES = 100  # the floor's graph: a chain of ops on one number


def _node_floor_ns(torch):
    """What a backward node costs on this machine at its smallest, now: one
    backward of a chain of CALIB_NODES ops on one number (about 0.5 ms),
    after a probed backward. The CPU's speed changes by 1.7x within seconds
    on a shared machine (3.3 against 5.5 µs a node, measured here), so the
    per-op rules (tiny-ops, a batch too small) read each probe against the
    floor taken beside it, not against a fixed µs."""
    with torch.enable_grad():
        y = x = torch.zeros(1, requires_grad=True)
        for _ in range(CALIB_NODES // 2):
            y = y * 1.0 + 1.0
        t0 = time.perf_counter_ns()
        torch.autograd.grad(y, (x,))  # not the hooked torch.autograd.backward: no phase, no step
        return (time.perf_counter_ns() - t0) / CALIB_NODES


def _count_nodes(tensors):
    """The nodes of the graph a backward is about to run; 0 on a GPU (the
    backward's time is its launches') or past GRAPH_MAX_NODES."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or torch.cuda.is_initialized():
            return 0
    except Exception:
        return 0
    roots = tensors if isinstance(tensors, (tuple, list)) else (tensors,)
    # depth-first over grad_fn.next_functions; a node is pushed once
    stack = [f for f in (getattr(t, "grad_fn", None) for t in roots) if f is not None]
    seen = set(stack)
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
        if len(seen) >= GRAPH_MAX_NODES:
            return 0  # too large to count on the training thread
    return len(seen)


def settings_tick():
    """Called by the sampler thread every half second once training began:
    anomaly detection is one flag for the whole process; the gradients no
    optimizer uses are counted while the optimizers live."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    settings["ticks"] += 1
    try:
        if torch.is_anomaly_enabled():
            settings["anomaly_ticks"] += 1
    except Exception:
        pass
    try:
        # the C module: `-X tracemalloc` / PYTHONTRACEMALLOC trace without
        # the Python one ever imported
        import _tracemalloc
        if _tracemalloc.is_tracing():
            settings["tracemalloc_ticks"] += 1
    except Exception:
        pass
    try:  # a tracer object of any kind is looked at: nothing of it may stop the sampler
        t = _tracer(ev.thread)
    except Exception:
        t = None
    if t is not None:
        settings["tracer_ticks"] += 1
        settings["tracer"], settings["tracer_kind"], settings["tracer_how"] = t
    walk_params()  # while the optimizers live (a trainer frees its own at the end)
    if settings["ticks"] % 4 == 1:  # every 2 s: a walk of the optimizers and modules
        try:
            optimizer_facts(torch)
            embedding_facts(torch, optimized_ids())
        except Exception:
            pass


# environment variables of debugging aids that slow a run: Python's debug
# allocator, CUDA kernels run one at a time, no caching allocator
DEBUG_ENV = ("PYTHONMALLOC", "CUDA_LAUNCH_BLOCKING", "PYTORCH_NO_CUDA_MEMORY_CACHING")

# torch.profiler recording: [monotonic start, seconds, 1 when trainperf's own
# schedule (--profile, ProfilerSchedule) asked for it]; the open one last
profiler = {"spans": [], "on": None}


def _patch_autocast(torch):
    """Note the devices and dtypes of the autocast regions the script makes
    (what the compute advice then leaves out): one dict write per region."""
    import functools
    from torch.amp import autocast_mode
    cls = autocast_mode.autocast
    orig = cls.__init__
    if getattr(orig, "_trainperf", False):
        return

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        try:
            if getattr(self, "_enabled", False) and len(amp_seen) < 8:
                amp_seen[str(self.device)] = str(self.fast_dtype).replace("torch.", "")
        except Exception:
            pass
    __init__._trainperf = True
    cls.__init__ = __init__


def _patch_profiler(torch):
    """Note each time the autograd profiler (under torch.profiler too)
    starts and stops recording: torch calls _set_is_profiler_enabled by name
    from its module at both."""
    mod = sys.modules.get("torch.autograd.profiler")
    orig = getattr(mod, "_set_is_profiler_enabled", None)
    if orig is None or getattr(orig, "_trainperf", False):
        return
    _patch_profiler_cupti(mod)

    def _set_is_profiler_enabled(enable, *args, **kwargs):
        try:
            now = _now()
            if enable and profiler["on"] is None:
                own = sys.modules.get("trainperf.torch_helpers")
                profiler["on"] = (now, 1 if getattr(own, "open_schedules", 0) else 0)
            elif not enable and profiler["on"] is not None:
                t0, own = profiler["on"]
                profiler["on"] = None
                if len(profiler["spans"]) < _MAX_EVENTS:
                    profiler["spans"].append([round(t0, 6), round(now - t0, 6), own])
        except Exception:
            pass
        out = orig(enable, *args, **kwargs)
        if not enable:  # the profiler let CUPTI go (Kineto disabled it first)
            _cuda.cupti_resume()
        return out
    _set_is_profiler_enabled._trainperf = True
    _set_is_profiler_enabled.__wrapped__ = orig
    mod._set_is_profiler_enabled = _set_is_profiler_enabled


def _patch_profiler_cupti(mod):
    """Before the autograd profiler prepares Kineto with CUDA activity (the
    warm-up of a torch.profiler schedule, or entering the profiler), hand
    CUPTI over: trainperf's buffered kernel records are flushed to trainperf
    first (docs/gpu.md). The resume is in _set_is_profiler_enabled(False),
    which torch calls after Kineto stopped."""
    cls = getattr(mod, "profile", None)
    orig = getattr(cls, "_prepare_trace", None)
    if orig is None or getattr(orig, "_trainperf", False):
        return

    def _prepare_trace(self, *args, **kwargs):
        try:
            acts = getattr(self, "kineto_activities", None) or ()
            if any(getattr(a, "name", "") == "CUDA" for a in acts):
                _cuda.cupti_pause()
        except Exception:
            pass
        return orig(self, *args, **kwargs)
    _prepare_trace._trainperf = True
    _prepare_trace.__wrapped__ = orig
    cls._prepare_trace = _prepare_trace


def _profiler_spans():
    spans = list(profiler["spans"])
    on = profiler["on"]
    if on is not None:
        spans.append([round(on[0], 6), round(_now() - on[0], 6), on[1]])
    return spans


# module prefixes of the tools that trace or profile Python code, by kind
_TRACERS = (("debugger", ("pdb", "bdb", "pydevd", "_pydevd", "debugpy", "pudb", "ipdb",
                          "IPython.core.debugger", "web_pdb", "remote_pdb")),
            ("coverage", ("coverage",)),
            ("profiler", ("cProfile", "_lsprof", "profile", "line_profiler", "pyinstrument",
                          "yappi", "viztracer", "memory_profiler", "pprofile", "torch")))


def _tracer_name(obj):
    """module.qualname of what traces: a function, a bound method's class,
    an object's type; of a class, the first in its MRO from a known tool
    (`python -m cProfile` runs cProfile as __main__: its Profile subclasses
    _lsprof.Profiler)."""
    if obj is True:
        return "a C extension"
    owner = getattr(obj, "__self__", None)
    if owner is not None and not isinstance(owner, type(sys)):
        obj = type(owner)
    elif not callable(obj) or not hasattr(obj, "__qualname__") or \
            type(obj).__name__ not in ("function", "method", "builtin_function_or_method"):
        obj = type(obj)
    names = []
    for c in getattr(obj, "__mro__", None) or (obj,):
        mod = getattr(c, "__module__", None) or ""
        name = getattr(c, "__qualname__", None) or type(c).__name__
        if mod != "builtins" or not names:
            names.append("%s.%s" % (mod, name) if mod and mod != "builtins" else name)
    for n in names:
        if _tracer_kind(n) != "tracer":
            return "cProfile" if n.startswith("_lsprof.") else n
    return names[0]


def _tracer_kind(name):
    for kind, prefixes in _TRACERS:
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return kind
    return "tracer"


def _tracer(ident):
    """(name, kind, how) of a tool tracing or profiling the thread's Python
    code (sys.settrace / sys.setprofile / sys.monitoring), else None. The
    profiler's own Python tracer (torch.profiler with_stack) counts as the
    profiler, not here."""
    found = []
    core = sys.modules.get("trainperf._core")
    try:
        tp = core.thread_tracing(ident) if ident is not None and core is not None else None
    except Exception:
        tp = None
    for how, obj in zip(("sys.settrace", "sys.setprofile"), tp or ()):
        if obj is not None:
            found.append((_tracer_name(obj), how))
    mon = getattr(sys, "monitoring", None)  # Python 3.12+: one set of tools for all threads
    if mon is not None:
        for tool in range(6):
            try:
                name = mon.get_tool(tool)
                if name and mon.get_events(tool):
                    found.append((str(name), "sys.monitoring"))
            except Exception:
                pass
    for name, how in found:
        if not name.startswith("torch"):
            return name[:80], _tracer_kind(name), how
    return None


def install(torch):
    """Called once by the auto hook after torch loaded."""
    core = _state.core
    _state.enable_eval(core.range_push, core.range_pop)
    for f in (_patch_train, _patch_compile, _patch_loader, _patch_profiler, _patch_autocast):
        try:
            f(torch)
        except Exception as exc:
            sys.stderr.write("trainperf: %s not hooked: %r\n" % (f.__name__, exc))
    gc.callbacks.append(_gc_cb)
    try:
        core.set_graph_probe(graph_probe, GRAPH_PERIOD_S)
    except Exception:
        pass


def snapshot():
    """The figures as one JSON-ready dict (called from the sampler thread)."""
    d = {"pid": _pid, "rank": os.environ.get("RANK"),
         "clock": "CLOCK_MONOTONIC seconds (time.monotonic)",
         "eval": {"entries": ev.entries, "points": ev.points,
                  "time_s": round(ev.time_s + ((_now() - ev.t_enter) if ev.active else 0), 6),
                  "forwards": ev.fwd_n, "forwards_grad": ev.fwd_grad,
                  "forward_rows": ev.fwd_rows, "forwards_sized": ev.fwd_sized,
                  "forward_gaps": _state.eval_gap_buckets()},
         "gc": {"collections": list(gc_stats["collections"]),
                "pause_s": round(gc_stats["pause_s"], 6), "max_s": round(gc_stats["max_s"], 6),
                "pauses": list(gc_stats["pauses"])},
         "compile": {"frames": compile_stats["frames"],
                     "compile_s": round(compile_stats["compile_s"], 6),
                     "recompiles": compile_stats["recompiles"],
                     "events": list(compile_stats["events"])},
         "graph": {"probes": list(graph["probes"])},
         "profiler": {"spans": _profiler_spans()},
         "loader": {"iterators": loader_stats["iterators"],
                    "train_iterators": loader_stats["train_iterators"],
                    "train_start_s": round(loader_stats["train_start_s"], 6),
                    "train_stop_s": round(loader_stats["train_stop_s"], 6),
                    "train_batches": (loader_stats["train_batches"]
                                      if not loader_stats["train_batches_unknown"] else None),
                    "workers": loader_stats["workers"],
                    "persistent": loader_stats["persistent"],
                    "prefetch_factor": loader_stats.get("prefetch_factor"),
                    "epochs": list(loader_stats["epochs"])}}
    try:
        torch = sys.modules.get("torch")
        if torch is not None:
            d["torch_threads"] = torch.get_num_threads()
            d["torch_interop_threads"] = torch.get_num_interop_threads()
            try:
                ddp_facts()
            except Exception:
                pass
            d["settings"] = {"ticks": settings["ticks"],
                             "anomaly_ticks": settings["anomaly_ticks"],
                             "tracemalloc_ticks": settings["tracemalloc_ticks"],
                             "tracer_ticks": settings["tracer_ticks"],
                             "tracer": settings["tracer"],
                             "tracer_kind": settings["tracer_kind"],
                             "tracer_how": settings["tracer_how"],
                             "default_dtype": str(torch.get_default_dtype()).replace("torch.", ""),
                             "params_grad_unused": walk_params()["unused"],
                             "param_dtypes": dict(param_dtypes),
                             "params_optimized": grads_seen["optimized"],
                             "params_timed": grads_seen["all"],
                             "optimizers": [dict(f) for f in list(opt_seen.values())],
                             "autocast": dict(amp_seen),
                             "optimizers_made": {"total": opt_made[0],
                                                 "in_training": opt_made[1]},
                             "embeddings": [dict(f) for f in list(embed_seen.values())],
                             "ddp": dict(ddp_seen) or None}
    except Exception:
        pass
    d["exit"] = dict(exit_info)
    d["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    # debugging aids that slow every step when left on
    d["debug"] = {"dev_mode": bool(sys.flags.dev_mode),
                  "env": {k: os.environ[k] for k in DEBUG_ENV if os.environ.get(k)}}
    try:
        d["cpus_allowed"] = len(os.sched_getaffinity(0))
    except Exception:
        pass
    hf = sys.modules.get("transformers")
    pl = sys.modules.get("lightning") or sys.modules.get("pytorch_lightning")
    d["ddp_no_sync"] = ev.ddp_no_sync
    d["framework"] = "hf" if hf is not None and "transformers.trainer" in sys.modules else (
        "lightning" if pl is not None else "")
    return d
