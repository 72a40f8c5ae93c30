"""Settings `trainperf tune` tries on an unmodified script, applied by the
auto hook with no code change (docs/tune.md lists what each one changes).

Inert unless TRAINPERF_TUNE_KNOBS or TRAINPERF_TUNE_STOP is set: `active` is
False and the auto hook never calls in. When set (only in a tune trial):

- TRAINPERF_TUNE_KNOBS="name=value,...": the knobs of KNOBS below;
- TRAINPERF_TUNE_STOP=N: end the trial cleanly after N optimizer steps
  (SystemExit(0) raised from the optimizer step post-hook);
- the loss of every step (the scalar given to backward) is appended to
  $TRAINPERF_RUN_DIR/tune-loss.csv so trials can be checked against the
  baseline's loss trajectory.
"""
import os
import sys

# name -> (parser, what it changes). The table docs/tune.md is written from.
_BOOL = ("1", "true", "yes", "on")


def _bool(v):
    return v.lower() in _BOOL


def _amp(v):
    if v not in ("bf16", "fp16"):
        raise ValueError("amp takes bf16 or fp16")
    return v


def _pos_int(v):
    n = int(v)
    if n < 0:
        raise ValueError("expected a count >= 0")
    return n


def _opt_mode(v):
    if v not in ("fused", "foreach"):
        raise ValueError("optimizer takes fused or foreach")
    return v


KNOBS = {
    "num_workers": (_pos_int, "DataLoader(num_workers=N) for every DataLoader the script makes"),
    "pin_memory": (_bool, "DataLoader(pin_memory=...)"),
    "persistent_workers": (_bool, "DataLoader(persistent_workers=...) (only with workers)"),
    "prefetch_factor": (_pos_int, "DataLoader(prefetch_factor=N) (only with workers)"),
    "batch_size": (_pos_int, "DataLoader(batch_size=N): changes the optimisation"),
    "batched_index": (_bool, "a TensorDataset indexed once per batch (sampler=BatchSampler(...), "
                             "batch_size=None) instead of once per sample"),
    "threads": (_pos_int, "torch.set_num_threads(N) (intra-op threads)"),
    "interop_threads": (_pos_int, "torch.set_num_interop_threads(N)"),
    "amp": (_amp, "torch.autocast around the model's forward (bf16 on CPU; fp16/bf16 on GPU)"),
    "compile": (_bool, "model.compile() on the top-level module (torch.compile)"),
    "optimizer": (_opt_mode, "fused=True or foreach=True for Adam, AdamW and SGD"),
    "channels_last": (_bool, "model and 4-D inputs in torch.channels_last memory format"),
    "cudnn_benchmark": (_bool, "torch.backends.cudnn.benchmark = True (GPU only)"),
    "anomaly": (_bool, "anomaly=0: torch.autograd.set_detect_anomaly / detect_anomaly left off"),
    "freeze": (_bool, "after the first step, requires_grad_(False) for the model's parameters "
                      "that no optimizer holds"),
}

active = False
knobs = {}
notes = []          # what could not be applied, said once at the end of the trial
_stop_after = 0
_steps = 0
_loss_file = None
# What the trial saw, for choosing candidates: RUN/tune-facts.json.
facts = {"dataloaders": [], "optimizers": [], "conv": False, "model": None, "cuda": False,
         "threads": None, "anomaly": False, "grads_unused": 0.0}


def parse(spec):
    """{"name": value} from "name=value,..."; ValueError naming the bad part."""
    out = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, eq, val = part.partition("=")
        name = name.strip()
        if not eq or name not in KNOBS:
            raise ValueError("unknown knob %r (known: %s)" % (part, ", ".join(sorted(KNOBS))))
        try:
            out[name] = KNOBS[name][0](val.strip())
        except ValueError as exc:
            raise ValueError("knob %s=%r: %s" % (name, val, exc))
    return out


def setup():
    """Read the environment; called once by the auto hook when torch loads."""
    global active, knobs, _stop_after
    spec = os.environ.get("TRAINPERF_TUNE_KNOBS", "")
    stop = os.environ.get("TRAINPERF_TUNE_STOP", "")
    if not spec and not stop:
        return False
    try:
        knobs = parse(spec)
        _stop_after = int(stop) if stop else 0
    except ValueError as exc:
        sys.stderr.write("trainperf: tune knobs ignored: %s\n" % (exc,))
        knobs, _stop_after = {}, 0
    active = True
    return True


def _write_facts():
    run_dir = os.environ.get("TRAINPERF_RUN_DIR")
    if not run_dir:
        return
    import json
    path = os.path.join(run_dir, "tune-facts.json")
    try:
        with open(path + ".part", "w") as f:
            json.dump(facts, f)
        os.replace(path + ".part", path)
    except OSError:
        pass


def _note(msg):
    if msg not in notes:
        notes.append(msg)
        sys.stderr.write("trainperf tune: %s\n" % msg)


def apply_global(torch):
    """Knobs that act on torch itself: threads, optimizers, DataLoader, cudnn."""
    try:
        facts["cuda"] = bool(torch.cuda.is_available())
    except Exception:
        pass
    if "threads" in knobs and knobs["threads"] > 0:
        torch.set_num_threads(knobs["threads"])
    if "interop_threads" in knobs and knobs["interop_threads"] > 0:
        try:
            torch.set_num_interop_threads(knobs["interop_threads"])
        except RuntimeError as exc:
            _note("interop_threads not applied: %s" % exc)
    if knobs.get("cudnn_benchmark"):
        if torch.cuda.is_available():
            torch.backends.cudnn.benchmark = True
        else:
            _note("cudnn_benchmark skipped: no CUDA device")
    if "optimizer" in knobs:
        _patch_optimizers(torch, knobs["optimizer"])
    _patch_anomaly(torch)
    _patch_dataloader_init(torch)  # also records each loader's settings
    facts["threads"] = torch.get_num_threads()


def _patch_anomaly(torch):
    """Record that the script turns anomaly detection on (both
    set_detect_anomaly and detect_anomaly call torch.set_anomaly_enabled);
    with anomaly=0 keep it off."""
    orig = getattr(torch, "set_anomaly_enabled", None)
    if orig is None or getattr(orig, "_trainperf_knob", False):
        return
    off = "anomaly" in knobs and not knobs["anomaly"]

    def set_anomaly_enabled(enabled, *args, **kwargs):
        if enabled and not facts["anomaly"]:
            facts["anomaly"] = True
            _write_facts()
        if enabled and off:
            return orig(False, *args, **kwargs)
        return orig(enabled, *args, **kwargs)

    set_anomaly_enabled._trainperf_knob = True
    set_anomaly_enabled.__wrapped__ = orig
    torch.set_anomaly_enabled = set_anomaly_enabled


def _patch_optimizers(torch, mode):
    for name in ("Adam", "AdamW", "SGD"):
        cls = getattr(torch.optim, name, None)
        if cls is None or getattr(cls.__init__, "_trainperf_knob", False):
            continue
        orig = cls.__init__

        def init(self, *args, _orig=orig, **kwargs):
            kwargs.pop("fused", None)
            kwargs.pop("foreach", None)
            kwargs[mode] = True
            try:
                _orig(self, *args, **kwargs)
            except (RuntimeError, ValueError, TypeError) as exc:
                _note("optimizer=%s not supported here (%s); kept the default" % (mode, exc))
                kwargs.pop(mode, None)
                _orig(self, *args, **kwargs)

        init._trainperf_knob = True
        cls.__init__ = init


def _batched_index(torch, dataset, kwargs):
    """Index a dataset of tensors once per batch: the sampler yields index
    lists (BatchSampler) and `dataset[list]` slices every tensor, so no
    per-sample __getitem__ and no collate stack (batch_size=None). The same
    batches in the same order as the script's sampler gives them."""
    data = torch.utils.data
    bs = kwargs.get("batch_size", 1)
    if not isinstance(dataset, data.TensorDataset) or kwargs.get("batch_sampler") is not None \
            or bs is None or kwargs.get("collate_fn") is not None:
        _note("batched_index not applied: only a TensorDataset with batch_size and the "
              "default collate_fn")
        return
    sampler = kwargs.pop("sampler", None)
    if sampler is None:
        sampler = (data.RandomSampler(dataset) if kwargs.get("shuffle")
                   else data.SequentialSampler(dataset))
    kwargs.pop("shuffle", None)
    kwargs["sampler"] = data.BatchSampler(sampler, bs, kwargs.pop("drop_last", False))
    kwargs["batch_size"] = None


def _patch_dataloader_init(torch):
    DL = torch.utils.data.DataLoader
    if getattr(DL.__init__, "_trainperf_knob", False):
        return
    orig = DL.__init__

    def init(self, dataset, *args, **kwargs):
        # Positional arguments after dataset are rare; name them so the
        # overrides below cannot collide with them.
        names = ("batch_size", "shuffle", "sampler", "batch_sampler", "num_workers")
        for n, v in zip(names, args):
            kwargs.setdefault(n, v)
        args = ()
        if "batch_size" in knobs:
            if kwargs.get("batch_sampler") is None and kwargs.get("batch_size", 1) is not None:
                kwargs["batch_size"] = knobs["batch_size"]
            else:
                _note("batch_size not applied: this DataLoader has a batch_sampler")
        if knobs.get("batched_index"):
            _batched_index(torch, dataset, kwargs)
        if "num_workers" in knobs:
            kwargs["num_workers"] = knobs["num_workers"]
        if "pin_memory" in knobs:
            kwargs["pin_memory"] = knobs["pin_memory"]
        workers = kwargs.get("num_workers", 0) or 0
        for k in ("persistent_workers", "prefetch_factor"):
            if k in knobs:
                if workers > 0:
                    kwargs[k] = knobs[k]
                else:
                    _note("%s needs workers; not applied to a DataLoader without them" % k)
        if workers == 0:
            # what the script asked for with workers would now raise
            kwargs.pop("persistent_workers", None)
            kwargs.pop("prefetch_factor", None)
        orig(self, dataset, *args, **kwargs)
        if len(facts["dataloaders"]) < 16:
            facts["dataloaders"].append({"num_workers": kwargs.get("num_workers", 0) or 0,
                                         "batch_size": getattr(self, "batch_size", None),
                                         "pin_memory": bool(kwargs.get("pin_memory", False))})
            _write_facts()

    init._trainperf_knob = True
    DL.__init__ = init


def on_model(module):
    """Knobs that act on the top-level model (found by the auto hook at its
    first call, before that call runs)."""
    try:
        import torch
    except ImportError:
        return
    facts["model"] = type(module).__name__
    facts["conv"] = any(isinstance(m, torch.nn.Conv2d) for m in module.modules())
    _write_facts()
    if knobs.get("channels_last"):
        has_conv = any(isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d))
                       for m in module.modules())
        if has_conv:
            module.to(memory_format=torch.channels_last)

            def to_cl(mod, args):
                return tuple(a.contiguous(memory_format=torch.channels_last)
                             if isinstance(a, torch.Tensor) and a.dim() == 4 else a
                             for a in args)

            module.register_forward_pre_hook(to_cl)
        else:
            _note("channels_last skipped: the model has no 2-D convolutions")
    if "amp" in knobs:
        dev = "cpu"
        for p in module.parameters():
            dev = p.device.type
            break
        dtype = torch.bfloat16 if knobs["amp"] == "bf16" else torch.float16
        if dev == "cpu" and dtype == torch.float16:
            _note("amp=fp16 on the CPU: using bf16")
            dtype = torch.bfloat16
        fwd = module.forward

        def forward_autocast(*args, **kwargs):
            with torch.autocast(device_type=dev, dtype=dtype):
                return fwd(*args, **kwargs)

        module.forward = forward_autocast
    if knobs.get("compile"):
        try:
            module.compile()
        except Exception as exc:  # an old torch, or a model dynamo refuses
            _note("compile not applied: %s" % exc)


def on_backward(args):
    """Record the loss (a scalar given to backward) of this step."""
    global _loss_file
    if not args:
        return
    t = args[0]
    try:
        if t.numel() != 1:
            return
        v = float(t.detach())
    except Exception:
        return
    if _loss_file is None:
        run_dir = os.environ.get("TRAINPERF_RUN_DIR")
        if not run_dir:
            return
        try:
            _loss_file = open(os.path.join(run_dir, "tune-loss.csv"), "a", buffering=1)
        except OSError:
            return
    _loss_file.write("%d,%r\n" % (_steps, v))


def _freeze_unused():
    """requires_grad_(False) for the timed model's parameters that no
    optimizer holds (their gradients are computed for nothing)."""
    from trainperf import _evalhooks
    held = _evalhooks.optimized_ids()
    if not held:
        _note("freeze not applied: no optimizer holds the model's parameters")
        return
    n = 0
    for ref in list(_evalhooks.models):
        m = ref()
        for p in (m.parameters() if m is not None else ()):
            if id(p) not in held and p.requires_grad:
                p.requires_grad_(False)
                p.grad = None
                n += 1
    if not n:
        _note("freeze: every parameter with a gradient is in an optimizer")


def on_step(opt=None):
    """Called after each step boundary; ends the trial after the asked steps."""
    global _steps
    _steps += 1
    if _steps == 1 and knobs.get("freeze"):
        _freeze_unused()
    if _steps == 2:
        from trainperf import _evalhooks
        _evalhooks.scan_grads()  # this thread: the step's gradients are still there
        g = _evalhooks.walk_params()
        if g["all"] > 0 and g["optimized"] > 0:
            facts["grads_unused"] = round(g["unused"] / g["all"], 4)
            _write_facts()
    if opt is not None and _steps <= 2:
        name = type(opt).__name__
        if name not in facts["optimizers"]:
            facts["optimizers"].append(name)
            _write_facts()
    if _stop_after and _steps >= _stop_after:
        if _loss_file is not None:
            _loss_file.flush()
        raise SystemExit(0)
