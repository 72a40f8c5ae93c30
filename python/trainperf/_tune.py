"""`trainperf tune`: try fixes on the user's own command and measure them.

Run by the C CLI as `python3 -m trainperf._tune --cli PATH [OPTIONS] -- CMD`.
Standard library only: it runs under any Python 3 and never imports torch; the
knobs are applied inside each trial by the auto hook (trainperf._knobs).

A trial is `trainperf run --quiet --out TRIAL -- CMD` with
TRAINPERF_TUNE_KNOBS (the settings) and TRAINPERF_TUNE_STOP (warm-up plus the
measured steps, after which the hook ends the script with exit 0), started in
a scratch folder that mirrors the user's working directory through symlinks.
The baseline runs first; its steps and the facts the hook recorded (loaders,
optimizers, convolutions, threads) choose the candidates. Candidates and
baseline then run in interleaved rounds, so a drift of the machine hits all of
them alike; the speedup interval covers the step-to-step noise inside a trial
and the spread between rounds. docs/tune.md.
"""
import csv
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

USAGE = """usage: trainperf tune [OPTIONS] [--] CMD [ARGS...]

Run CMD (a Python training script) as short trials under `trainperf run`, with
the fixes the baseline's measurements point to applied by the auto hook, and
rank them by measured speedup with its confidence interval.

  --budget DURATION   total time for all trials (default 10m; 90s, 5m, 1h)
  --steps K           measured steps per trial (default 20)
  --warmup W          steps run before measuring (default 5)
  --repeats R         rounds of baseline + candidates, interleaved (default 2)
  --only KNOB,...     try only these knobs (see docs/tune.md)
  --no-batch-finder   do not search for a larger batch size
  --out DIR           where the trials' run directories go
                      (default ./trainperf-tune/<time>)
  --json              print the result as JSON on stdout
  --keep-scratch      keep each trial's scratch working directory

Knobs: num_workers, pin_memory, persistent_workers, prefetch_factor, threads,
interop_threads, amp, compile, optimizer, channels_last, cudnn_benchmark,
batch_size, batched_index.
Exit status: 0 when the trials ran (whatever they found); 1 when the baseline
itself failed; 2 for bad usage.
"""

# Names in the working directory a trial gets fresh instead of linked: where
# training scripts and their loggers write, so trials cannot overwrite them.
OUTPUT_NAMES = {"trainperf-runs", "trainperf-tune", "lightning_logs", "wandb", "mlruns",
                "runs", "checkpoints", "checkpoint", "outputs", "output", "out", "logs",
                "tb_logs", "ckpt", "ckpts", "results", "__pycache__"}

KNOWN = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "threads",
         "interop_threads", "amp", "compile", "optimizer", "channels_last", "cudnn_benchmark",
         "anomaly", "freeze", "batch_size", "batched_index")

# The change to make for a knob that won, per framework.
CHANGES = {
    "num_workers": ("DataLoader(..., num_workers={v})",
                    "DataLoader(..., num_workers={v}) in your LightningDataModule / *_dataloader()",
                    "TrainingArguments(dataloader_num_workers={v})"),
    "pin_memory": ("DataLoader(..., pin_memory=True)",
                   "DataLoader(..., pin_memory=True) in your LightningDataModule",
                   "TrainingArguments(dataloader_pin_memory=True)"),
    "persistent_workers": ("DataLoader(..., persistent_workers=True)",
                           "DataLoader(..., persistent_workers=True) in your LightningDataModule",
                           "TrainingArguments(dataloader_persistent_workers=True)"),
    "prefetch_factor": ("DataLoader(..., prefetch_factor={v})",
                        "DataLoader(..., prefetch_factor={v}) in your LightningDataModule",
                        "TrainingArguments(dataloader_prefetch_factor={v})"),
    "threads": ("torch.set_num_threads({v}) at the start (or OMP_NUM_THREADS={v})",
                "torch.set_num_threads({v}) before Trainer.fit (or OMP_NUM_THREADS={v})",
                "torch.set_num_threads({v}) before Trainer.train (or OMP_NUM_THREADS={v})"),
    "interop_threads": ("torch.set_num_interop_threads({v}) before any parallel work",
                        "torch.set_num_interop_threads({v}) before Trainer.fit",
                        "torch.set_num_interop_threads({v}) before Trainer.train"),
    "amp": ("with torch.autocast(device_type=DEVICE, dtype=torch.{dt}): loss = ...",
            "Trainer(precision=\"{lp}\")",
            "TrainingArguments({hf}=True)"),
    "compile": ("model = torch.compile(model)",
                "model = torch.compile(model) before trainer.fit(model)",
                "TrainingArguments(torch_compile=True)"),
    "optimizer": ("torch.optim.AdamW(params, ..., {v}=True) (also Adam, SGD)",
                  "{v}=True in the optimizer made by configure_optimizers()",
                  "TrainingArguments(optim=\"adamw_torch_fused\")"),
    "channels_last": ("model = model.to(memory_format=torch.channels_last); "
                      "x = x.contiguous(memory_format=torch.channels_last)",
                      "self.to(memory_format=torch.channels_last) in setup(), inputs likewise",
                      "model.to(memory_format=torch.channels_last) before Trainer(...)"),
    "cudnn_benchmark": ("torch.backends.cudnn.benchmark = True",
                        "Trainer(benchmark=True)",
                        "torch.backends.cudnn.benchmark = True before Trainer.train"),
    "anomaly": ("remove torch.autograd.set_detect_anomaly(True) / detect_anomaly() (or "
                "guard it behind a debug flag)",) * 3,
    "freeze": ("p.requires_grad_(False) for the parameters no optimizer updates (e.g. "
               "`for p in model.backbone.parameters(): p.requires_grad_(False)`)",) * 3,
    "batched_index": ("DataLoader(ds, sampler=BatchSampler(RandomSampler(ds), BATCH, "
                      "drop_last=False), batch_size=None): ds[index_list] slices each tensor "
                      "once per batch",) * 3,
    "batch_size": ("DataLoader(..., batch_size={v}) and scale the learning rate "
                   "(linear: lr x {k:g}; Adam often sqrt: lr x {sk:.2f})",
                   "batch_size={v} in your LightningDataModule (scale the learning rate)",
                   "TrainingArguments(per_device_train_batch_size={v}) (scale learning_rate)"),
}


class UsageError(Exception):
    pass


def parse_duration(s):
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|min|h)?\s*", s or "")
    if not m:
        raise UsageError("--budget '%s': expected a duration such as 90s, 5m or 1h" % s)
    v = float(m.group(1)) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "min": 60,
                             "h": 3600}[m.group(2)]
    if v <= 0:
        raise UsageError("--budget '%s': must be more than 0" % s)
    return v


def parse_args(argv):
    o = {"cli": None, "budget": 600.0, "steps": 20, "warmup": 5, "repeats": 2, "only": None,
         "json": False, "out": None, "batch_finder": True, "keep_scratch": False, "cmd": None}
    i = 0

    def value(name):
        nonlocal i
        if "=" in argv[i]:
            return argv[i].split("=", 1)[1]
        if i + 1 >= len(argv):
            raise UsageError("%s needs a value (see `trainperf tune --help`)" % name)
        i += 1
        return argv[i]

    def count(name, v, lo, hi):
        try:
            n = int(v)
        except ValueError:
            raise UsageError("%s '%s': expected a whole number" % (name, v))
        if not lo <= n <= hi:
            raise UsageError("%s '%s': expected %d to %d" % (name, v, lo, hi))
        return n

    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        if name in ("--help", "-h"):
            o["help"] = True
            return o
        elif name == "--cli":
            o["cli"] = value(name)
        elif name == "--budget":
            o["budget"] = parse_duration(value(name))
        elif name == "--steps":
            o["steps"] = count(name, value(name), 2, 100000)
        elif name == "--warmup":
            o["warmup"] = count(name, value(name), 0, 100000)
        elif name == "--repeats":
            o["repeats"] = count(name, value(name), 1, 20)
        elif name == "--only":
            knobs = [k.strip() for k in value(name).split(",") if k.strip()]
            bad = [k for k in knobs if k not in KNOWN]
            if bad or not knobs:
                raise UsageError("--only: unknown knob '%s' (known: %s)"
                                 % (",".join(bad), ", ".join(KNOWN)))
            o["only"] = knobs
        elif name == "--out":
            o["out"] = value(name)
            if not o["out"]:
                raise UsageError("--out needs a directory")
        elif name == "--json":
            o["json"] = True
        elif name == "--no-batch-finder":
            o["batch_finder"] = False
        elif name == "--keep-scratch":
            o["keep_scratch"] = True
        else:
            raise UsageError("unknown option '%s' for tune (see `trainperf tune --help`)" % a)
        i += 1
    if i >= len(argv):
        raise UsageError("no command to tune (usage: trainperf tune [OPTIONS] -- CMD [ARGS...])")
    o["cmd"] = argv[i:]
    if not o["cli"]:
        raise UsageError("--cli: the trainperf binary is needed (run this as `trainperf tune`)")
    return o


# --- one trial ----------------------------------------------------------------

def shadow_dir(scratch, src, skip):
    """scratch mirrors src: a symlink per entry, except the names where
    scripts write (created fresh by the script in scratch)."""
    os.makedirs(scratch)
    for name in os.listdir(src):
        full = os.path.join(src, name)
        if name in OUTPUT_NAMES or os.path.abspath(full) in skip:
            continue
        try:
            os.symlink(full, os.path.join(scratch, name))
        except OSError:
            pass


def read_steps(run_dir):
    try:
        with open(os.path.join(run_dir, "steps.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []
    out = []
    for r in rows:
        try:
            out.append({"pid": r.get("pid"), "step": int(r["step"]),
                        "dur": int(r["duration_ns"]) / 1e9,
                        "intv": (int(r["interval_ns"]) / 1e9) if r.get("interval_ns") else None,
                        "data": int(r.get("data_ns") or 0) / 1e9,
                        "samples": int(r.get("samples") or 0)})
        except (KeyError, ValueError):
            continue
    if not out:
        return out
    # The main process's steps (the one with most rows), in step order.
    pids = {}
    for r in out:
        pids[r["pid"]] = pids.get(r["pid"], 0) + 1
    main = max(pids, key=pids.get)
    return sorted((r for r in out if r["pid"] == main), key=lambda r: r["step"])


def read_losses(run_dir):
    out = {}
    try:
        with open(os.path.join(run_dir, "tune-loss.csv")) as f:
            for line in f:
                s, _, v = line.strip().partition(",")
                try:
                    out[int(s)] = float(v)
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def peak_rss(run_dir):
    """Peak RSS of the process tree (bytes) from metrics.csv, or None."""
    try:
        with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
            rd = csv.DictReader(f)
            col = next((c for c in (rd.fieldnames or []) if c in ("tree_rss_bytes", "tree.rss_bytes")
                        or (c.startswith("tree") and "rss" in c)), None)
            if not col:
                return None
            best = None
            for r in rd:
                try:
                    v = float(r[col])
                except (TypeError, ValueError):
                    continue
                best = v if best is None else max(best, v)
            return best
    except OSError:
        return None


def read_verdict(run_dir):
    """The id of the report's primary finding for run_dir (summary.json), or None."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            d = json.load(f)
        return ((d.get("diagnosis") or {}).get("primary") or {}).get("id")
    except (OSError, ValueError, AttributeError):
        return None


def read_facts(run_dir):
    try:
        with open(os.path.join(run_dir, "tune-facts.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


class Trial:
    def __init__(self, label, knobs, kind="knob"):
        self.label = label
        self.knobs = dict(knobs)
        self.kind = kind            # baseline | knob | batch
        self.runs = []              # dicts: run_dir, status, thr, sps, step_times, ...

    def measured(self):
        return [r for r in self.runs if r["status"] == "ok"]


def knob_spec(knobs):
    return ",".join("%s=%s" % (k, int(v) if isinstance(v, bool) else v)
                    for k, v in sorted(knobs.items()))


class Tuner:
    def __init__(self, o):
        self.o = o
        self.t0 = time.monotonic()
        self.cwd = os.getcwd()
        self.out = os.path.abspath(o["out"] or os.path.join(
            "trainperf-tune", time.strftime("%Y%m%d-%H%M%S")))
        self.n = 0
        self.base_wall = None
        self.log = sys.stderr if not o["json"] else sys.stderr

    def say(self, msg):
        self.log.write("trainperf tune: %s\n" % msg)
        self.log.flush()

    def left(self):
        return self.o["budget"] - (time.monotonic() - self.t0)

    def run(self, trial):
        """One trial run; appends its result to trial.runs."""
        self.n += 1
        tag = "%02d-%s" % (self.n, re.sub(r"[^A-Za-z0-9_.=-]+", "_", trial.label))[:80]
        run_dir = os.path.join(self.out, tag)
        scratch = os.path.join(self.out, ".scratch", tag)
        shadow_dir(scratch, self.cwd, {self.out, os.path.dirname(self.out)})
        stop = self.o["warmup"] + self.o["steps"]
        env = dict(os.environ)
        for k in ("TRAINPERF_RUN_DIR", "TRAINPERF_AUTO"):
            env.pop(k, None)
        env["TRAINPERF_TUNE_KNOBS"] = knob_spec(trial.knobs)
        env["TRAINPERF_TUNE_STOP"] = str(stop)
        # Trials log nowhere the user looks: wandb offline, MLflow in scratch.
        env["WANDB_MODE"] = "offline"
        env["WANDB_DIR"] = scratch
        env["MLFLOW_TRACKING_URI"] = "file:" + os.path.join(scratch, "mlruns")
        cmd = [self.o["cli"], "run", "--quiet", "--no-default-alerts", "--out", run_dir, "--",
               *self.o["cmd"]]
        limit = max(5.0, self.left())
        start = time.monotonic()
        res = {"run_dir": run_dir, "status": "ok", "reason": None}
        logf = open(os.path.join(self.out, tag + ".log"), "w")
        try:
            p = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    rc = p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    rc = p.wait()
                res["status"], res["reason"] = "stopped", "the budget ran out during this trial"
        finally:
            logf.close()
        res["wall_s"] = time.monotonic() - start
        res["exit"] = rc
        steps = read_steps(run_dir)
        res["steps"] = len(steps)
        if res["status"] == "ok" and len(steps) < stop:
            res["status"] = "failed"
            res["reason"] = self.failure_reason(os.path.join(self.out, tag + ".log"), rc)
        meas = [r for r in steps if self.o["warmup"] <= r["step"] < stop]
        if res["status"] == "ok" and len(meas) < 2:
            res["status"], res["reason"] = "failed", "fewer than 2 measured steps"
        if meas:
            times = [(r["intv"] if r["intv"] else r["dur"]) for r in meas]
            res["step_times"] = times
            # Throughput is a mean: with loader workers batches arrive in
            # bursts, and the median of such a bimodal series jumps around.
            mean = statistics.fmean(times)
            res["step_s_mean"] = mean
            res["step_s_p50"] = statistics.median(times)
            res["steps_per_s"] = 1.0 / mean if mean > 0 else None
            spb = statistics.fmean([r["samples"] for r in meas])
            res["samples_per_s"] = spb / mean if mean > 0 and spb else None
            tot = sum(r["dur"] for r in meas)
            res["data_share"] = (sum(r["data"] for r in meas) / tot) if tot > 0 else None
        res["rss_bytes"] = peak_rss(run_dir)
        res["losses"] = read_losses(run_dir)
        res["facts"] = read_facts(run_dir)
        if not self.o["keep_scratch"]:
            shutil.rmtree(scratch, ignore_errors=True)
        trial.runs.append(res)
        return res

    @staticmethod
    def failure_reason(log, rc):
        text = ""
        try:
            with open(log, errors="replace") as f:
                text = f.read()[-20000:]
        except OSError:
            pass
        if rc in (137, -9) or "out of memory" in text.lower() or "MemoryError" in text:
            return "out of memory (exit %s)" % rc
        last = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("trainperf")]
        tail = last[-1].strip()[:200] if last else ""
        return "exit %s before the measured steps%s" % (rc, (": " + tail) if tail else "")


# --- statistics ---------------------------------------------------------------

T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def boot_ratio(base, cand, n=400, rng=None):
    """95% bootstrap interval of mean(base)/mean(cand) (a speedup)."""
    rng = rng or random.Random(1)
    vals = []
    for _ in range(n):
        b = statistics.fmean(rng.choices(base, k=len(base)))
        c = statistics.fmean(rng.choices(cand, k=len(cand)))
        if c > 0:
            vals.append(b / c)
    vals.sort()
    if not vals:
        return None
    return vals[int(0.025 * (len(vals) - 1))], vals[int(0.975 * (len(vals) - 1))]


def speedup(base_runs, cand_runs):
    """(speedup, lo, hi) of cand over base, pairing runs of the same round."""
    pairs = [(b, c) for b, c in zip(base_runs, cand_runs)
             if b and c and b["status"] == "ok" and c["status"] == "ok"]
    if not pairs:
        return None
    logs = [math.log(b["step_s_mean"] / c["step_s_mean"]) for b, c in pairs]
    est = math.exp(statistics.mean(logs))
    lo, hi = est, est
    # inside each round: the step-to-step noise
    for b, c in pairs:
        iv = boot_ratio(b["step_times"], c["step_times"])
        if iv:
            lo, hi = min(lo, iv[0]), max(hi, iv[1])
    # between rounds: the run-to-run noise (a t interval only from 3 rounds on:
    # with 2 its 12.7 x spread says nothing; the union above covers both rounds)
    if len(logs) >= 3:
        sd = statistics.stdev(logs)
        t = T975.get(len(logs) - 1, 2.0)
        half = t * sd / math.sqrt(len(logs))
        lo = min(lo, math.exp(statistics.mean(logs) - half))
        hi = max(hi, math.exp(statistics.mean(logs) + half))
    return est, lo, hi


def loss_check(base_runs, runs):
    """"ok", "diverged (...)", or None when no loss was seen."""
    bl = [r["losses"] for r in base_runs if r and r.get("losses")]
    cl = [r["losses"] for r in runs if r and r.get("losses")]
    if not bl or not cl:
        return None
    for c in cl:
        if any(not math.isfinite(v) for v in c.values()):
            return "diverged (loss is not finite)"

    def tail_mean(ls):
        keys = sorted(ls)
        half = keys[len(keys) // 2:]
        return statistics.mean(ls[k] for k in half) if half else None

    bm = [tail_mean(b) for b in bl]
    cm = [tail_mean(c) for c in cl]
    bm = [v for v in bm if v is not None]
    cm = [v for v in cm if v is not None]
    if not bm or not cm:
        return None
    ref = statistics.mean(bm)
    noise = (max(bm) - min(bm)) if len(bm) >= 2 else 0.0
    tol = max(0.05 * abs(ref), 3 * noise, 1e-6)
    d = statistics.mean(cm) - ref
    if abs(d) > tol:
        return "diverged (late loss %.4g vs baseline %.4g)" % (statistics.mean(cm), ref)
    return "ok"


# --- choosing candidates ----------------------------------------------------

def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def candidates(base, only):
    """[(label, knobs)] from the baseline's figures and facts."""
    facts = base.get("facts") or {}
    cores = cpu_count()
    data_share = base.get("data_share") or 0.0
    loaders = facts.get("dataloaders") or []
    workers = max([d.get("num_workers", 0) for d in loaders] or [0])
    cuda = bool(facts.get("cuda"))
    threads = facts.get("threads") or cores
    out = []
    want = (lambda k: k in only) if only else None

    def add(label, knobs, knob):
        if want is None or want(knob):
            out.append((label, knobs))

    # input side: only when the loop waits for data (or asked for)
    input_bound = data_share >= 0.10
    if loaders and (input_bound or want):
        # Loaders that wait on storage or sleep gain past the core count, so
        # 2 and 4 are tried whatever the cores; more when there are more.
        for w in sorted({2, 4, min(8, cores)}):
            if w != workers and w > 0:
                add("num_workers=%d" % w, {"num_workers": w, "persistent_workers": True},
                    "num_workers")
        if cuda:
            add("pin_memory", {"pin_memory": True}, "pin_memory")
        if workers > 0:
            # batches cheaper to make than to send run faster without workers
            add("num_workers=0", {"num_workers": 0}, "num_workers")
            add("prefetch_factor=4", {"prefetch_factor": 4}, "prefetch_factor")
            add("persistent_workers", {"persistent_workers": True}, "persistent_workers")
    # a debugging aid left on slows every step, whatever bounds it
    if facts.get("anomaly") or want:
        add("anomaly=0", {"anomaly": False}, "anomaly")
    # gradients computed for parameters no optimizer holds
    if (facts.get("grads_unused") or 0) >= 0.2 or want:
        add("freeze", {"freeze": True}, "freeze")
    # compute side: when the step is mostly not waiting for data
    if data_share < 0.5 or want:
        nt = set()
        if workers > 0 and threads * (1 + workers) > cores:
            nt.add(max(1, cores // (1 + workers)))
        if threads != cores:
            nt.add(cores)
        if cores >= 2:
            nt.add(max(1, cores // 2))
        for t in sorted(nt):
            if t != threads:
                add("threads=%d" % t, {"threads": t}, "threads")
        add("amp=bf16", {"amp": "bf16"}, "amp")
        if cuda:
            add("amp=fp16", {"amp": "fp16"}, "amp")
            add("cudnn_benchmark", {"cudnn_benchmark": True}, "cudnn_benchmark")
        opts = facts.get("optimizers") or []
        if any(o in ("Adam", "AdamW", "SGD") for o in opts) or want:
            add("optimizer=foreach", {"optimizer": "foreach"}, "optimizer")
            add("optimizer=fused", {"optimizer": "fused"}, "optimizer")
        if facts.get("conv") or want:
            add("channels_last", {"channels_last": True}, "channels_last")
        if facts.get("model") or want:
            add("compile", {"compile": True}, "compile")
    if want:
        # knobs asked for that the rules above had no value for
        seen = {k for _, kn in out for k in kn}
        for k in only:
            if k in seen or k == "batch_size":
                continue
            default = {"pin_memory": True, "persistent_workers": True, "prefetch_factor": 4,
                       "interop_threads": max(1, cores // 2), "compile": True,
                       "channels_last": True, "cudnn_benchmark": True,
                       "num_workers": min(2, cores), "threads": max(1, cores // 2),
                       "amp": "bf16", "optimizer": "foreach", "anomaly": False,
                       "freeze": True, "batched_index": True}[k]
            out.append(("%s=%s" % (k, default), {k: default}))
    return out


# --- the answer -----------------------------------------------------------------

def change_for(knobs, base_bs=None):
    lines = {"pytorch": [], "lightning": [], "hf": []}
    for k, v in sorted(knobs.items()):
        if k not in CHANGES:
            continue
        fmt = dict(v=v, dt="bfloat16" if v == "bf16" else "float16",
                   lp="bf16-mixed" if v == "bf16" else "16-mixed",
                   hf="bf16" if v == "bf16" else "fp16", k=1.0, sk=1.0)
        if k == "batch_size" and base_bs:
            fmt["k"] = v / base_bs
            fmt["sk"] = math.sqrt(v / base_bs)
        if k == "persistent_workers" and "num_workers" in knobs:
            pass
        for key, tmpl in zip(("pytorch", "lightning", "hf"), CHANGES[k]):
            lines[key].append(tmpl.format(**fmt))
    return lines


def fmt_bytes(n):
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%.0f %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return "?"


def summarise(trial, base):
    ok = trial.measured()
    row = {"label": trial.label, "kind": trial.kind, "knobs": trial.knobs,
           "run_dirs": [r["run_dir"] for r in trial.runs],
           "status": "ok" if ok else (trial.runs[-1]["status"] if trial.runs else "not run"),
           "reason": None if ok else (trial.runs[-1]["reason"] if trial.runs
                                      else "the budget ran out before it"),
           "steps_per_s": None, "samples_per_s": None, "speedup": None, "interval": None,
           "verdict": None, "rss_bytes": None, "memory_change": None, "loss_check": None,
           "step_ms_p50": None, "data_share": None}
    if ok:
        row["steps_per_s"] = statistics.median([r["steps_per_s"] for r in ok])
        row["step_ms_p50"] = statistics.median([r["step_s_p50"] * 1e3 for r in ok])
        ds = [r["data_share"] for r in ok if r.get("data_share") is not None]
        row["data_share"] = statistics.median(ds) if ds else None
        sps = [r["samples_per_s"] for r in ok if r.get("samples_per_s")]
        row["samples_per_s"] = statistics.median(sps) if sps else None
        rss = [r["rss_bytes"] for r in ok if r.get("rss_bytes")]
        row["rss_bytes"] = max(rss) if rss else None
    if trial is base or not ok:
        return row
    n = min(len(base.runs), len(trial.runs))
    sp = speedup(base.runs[:n], trial.runs[:n]) if trial.kind != "batch" else None
    if trial.kind == "batch" and row["samples_per_s"] and base_samples(base):
        # batch sizes change steps: compare samples/s
        b = base_samples(base)
        row["speedup"] = row["samples_per_s"] / b
        row["interval"] = None
        row["verdict"] = "changes the optimisation"
    elif sp:
        row["speedup"], lo, hi = sp
        row["interval"] = [lo, hi]
        row["verdict"] = "faster" if lo > 1.0 else ("slower" if hi < 1.0 else "no difference")
    brss = summarise_rss(base)
    if brss and row["rss_bytes"]:
        row["memory_change"] = row["rss_bytes"] - brss
    row["loss_check"] = loss_check(base.measured(), ok) if trial.kind != "batch" else \
        "not compared: a new batch size changes the optimisation"
    return row


def base_samples(base):
    sps = [r["samples_per_s"] for r in base.measured() if r.get("samples_per_s")]
    return statistics.median(sps) if sps else None


def summarise_rss(base):
    rss = [r["rss_bytes"] for r in base.measured() if r.get("rss_bytes")]
    return max(rss) if rss else None


def print_table(result, out):
    rows = [result["baseline"]] + result["trials"]
    head = ("trial", "steps/s", "samples/s", "speedup (95%)", "verdict", "memory", "loss")
    lines = []
    for r in rows:
        if r["status"] != "ok":
            why = "not run (budget)" if r["status"] == "not run" else \
                "%s: %s" % (r["status"], r["reason"] or "")
            lines.append((r["label"], "-", "-", "-", why, "-", "-"))
            continue
        if r is result["baseline"]:
            sp, verdict, mem = "1.00 (baseline)", "", fmt_bytes(r["rss_bytes"])
        else:
            if r["interval"]:
                sp = "%.2fx [%.2f, %.2f]" % (r["speedup"], r["interval"][0], r["interval"][1])
            elif r["speedup"]:
                sp = "%.2fx samples/s" % r["speedup"]
            else:
                sp = "?"
            verdict = r["verdict"] or ""
            mc = r["memory_change"]
            mem = ("%s%s" % ("+" if mc >= 0 else "-", fmt_bytes(abs(mc)))) if mc is not None \
                else fmt_bytes(r["rss_bytes"])
        lines.append((r["label"], "%.2f" % r["steps_per_s"],
                      "%.1f" % r["samples_per_s"] if r["samples_per_s"] else "-", sp, verdict,
                      mem, r["loss_check"] or "-"))
    widths = [max(len(str(x[i])) for x in [head] + lines) for i in range(len(head))]
    for x in [head] + lines:
        out.write("  ".join(str(v).ljust(widths[i]) for i, v in enumerate(x)).rstrip() + "\n")


def best_run_dir(trials, best):
    t = next(t for t in trials if t.label == best["label"])
    return next(r for r in t.runs if r["status"] == "ok")["run_dir"]


CONTENDED = ("the baseline's own verdict is CPU contention: other processes were taking the "
             "cores, so every trial was measured on a contended machine. The speed-ups hold "
             "for a machine as busy as this one was; a winner that uses more threads or "
             "loader workers can gain less, or lose, when the other jobs use more of the "
             "cores, and a knob that frees a core can gain less on an idle machine. Re-run "
             "`trainperf tune` when the machine is quieter before adopting it.")


def wrap(text, indent, width=88):
    words, lines, cur = text.split(), [], indent
    for w in words:
        if len(cur) + len(w) + 1 > width and cur.strip():
            lines.append(cur.rstrip())
            cur = indent
        cur += w + " "
    if cur.strip():
        lines.append(cur.rstrip())
    return "\n".join(lines) + "\n"


def write_text(result, out):
    """The result for people: the table, what the budget left out, the batch
    finder, and the best trial with one speed-up figure (measured steps only)."""
    out.write("\ntrainperf tune: %s\n" % " ".join(result["command"]))
    out.write("%d trials in %.0f s (budget %.0f s), %d measured steps after %d warm-up, "
              "%d round(s)\n\n" % (result["trials_run"], result["elapsed_s"],
                                   result["budget_s"], result["steps"], result["warmup"],
                                   result["repeats"]))
    if result.get("contended"):
        out.write(wrap("note: " + CONTENDED, "") + "\n")
    print_table(result, out)
    if result["skipped_for_budget"]:
        out.write("\nnot run (budget): %s\n" % ", ".join(result["skipped_for_budget"]))
    finder = result["batch_finder"]
    if finder and finder.get("status") == "not run":
        out.write("\nbatch size finder: not run (the budget ran out before it); the batch "
                  "size stays %d\n" % finder["start"])
    elif finder:
        bs0 = finder["start"]
        ran = ("largest that ran %d" % finder["largest_fitting"]
               if finder["largest_fitting"] != bs0 else "no larger size ran")
        out.write("\nbatch size: started at %d; tried %s; %s; throughput knee %d%s\n"
                  % (bs0, ", ".join(map(str, finder["tried"])), ran, finder["knee"],
                     (" (stopped: %s)" % finder["stopped"]) if finder["stopped"] else ""))
        if finder["knee"] != bs0:
            out.write("  a larger batch changes the optimisation: scale the learning rate "
                      "(linear rule lr x %g) and check convergence\n" % (finder["knee"] / bs0))
    best = next((r for r in result["trials"] if r["label"] == result["best"]), None)
    if best:
        b = result["baseline"]
        out.write("\nbest: %s, %.2fx the baseline's steps/s (95%% interval %.2f-%.2f)\n"
                  "  over the measured steps of each trial (its %d warm-up steps left out):\n" % (
                      best["label"], best["speedup"], best["interval"][0], best["interval"][1],
                      result["warmup"]))
        if result.get("contended"):
            out.write("  measured on a contended machine (see the note above)\n")

        def pair(name, fmt, key, scale=1.0):
            if b.get(key) is None or best.get(key) is None:
                return
            out.write("  %-15s %s -> %s\n" % (name, fmt % (b[key] * scale), fmt % (best[key] * scale)))
        pair("steps/s", "%.2f", "steps_per_s")
        pair("step time p50", "%.1f ms", "step_ms_p50")
        pair("data wait", "%.0f%%", "data_share", 100.0)
        if b.get("rss_bytes") and best.get("rss_bytes"):
            out.write("  %-15s %s -> %s\n" % ("peak memory", fmt_bytes(b["rss_bytes"]),
                                              fmt_bytes(best["rss_bytes"])))
        ch = result["change"]
        out.write("  PyTorch:      %s\n" % "; ".join(ch["pytorch"]))
        out.write("  Lightning:    %s\n" % "; ".join(ch["lightning"]))
        out.write("  Hugging Face: %s\n" % "; ".join(ch["hf"]))
        if result.get("compare"):
            out.write("  the whole runs, start-up and warm-up included (so other figures than "
                      "these):\n    trainperf compare %s %s\n" % tuple(result["compare"]))
    else:
        out.write("\nno knob was faster beyond the noise: keep the script as it is\n")
    out.write("\nrun directories: %s\n" % result["out"])


def main(argv):
    try:
        o = parse_args(argv)
    except UsageError as exc:
        sys.stderr.write("trainperf: error: %s\n" % exc)
        return 2
    if o.get("help"):
        sys.stdout.write(USAGE)
        return 0
    if os.path.exists(o["out"] or "") and os.listdir(o["out"]):
        sys.stderr.write("trainperf: error: --out '%s' exists and is not empty\n" % o["out"])
        return 2
    tu = Tuner(o)
    try:
        os.makedirs(tu.out, exist_ok=True)
    except OSError as exc:
        sys.stderr.write("trainperf: error: cannot create '%s': %s\n" % (tu.out, exc.strerror))
        return 2

    base = Trial("baseline", {}, "baseline")
    tu.say("baseline: %s (warm-up %d steps, then %d measured)"
           % (" ".join(o["cmd"]), o["warmup"], o["steps"]))
    b0 = tu.run(base)
    if b0["status"] != "ok":
        msg = "the baseline did not reach %d steps: %s (log: %s.log)" % (
            o["warmup"] + o["steps"], b0["reason"], b0["run_dir"])
        sys.stderr.write("trainperf: error: %s\n" % msg)
        if o["json"]:
            json.dump({"error": msg, "baseline": summarise(base, base)}, sys.stdout, indent=2)
            sys.stdout.write("\n")
        return 1
    tu.base_wall = b0["wall_s"]
    if not b0.get("facts"):
        tu.say("the auto hook saw no PyTorch in this command (not a Python script, or torch "
               "never imported): knobs cannot be applied, only the baseline is measured")
        cands = []
    else:
        cands = [Trial(label, knobs) for label, knobs in candidates(b0, o["only"])]
    tu.say("baseline %.2f steps/s; trying %s" % (
        b0["steps_per_s"], ", ".join(c.label for c in cands) or "nothing (no knob applies)"))

    # Interleaved rounds: baseline, every candidate, again.
    skipped = []
    for rnd in range(o["repeats"]):
        order = ([] if rnd == 0 else [base]) + cands
        for t in order:
            est = tu.base_wall * (3.0 if t.knobs.get("compile") else 1.3)
            if tu.left() < est:
                if t is not base and not t.runs and t.label not in skipped:
                    skipped.append(t.label)
                continue
            if t is not base:
                tu.say("round %d: %s" % (rnd + 1, t.label))
            t_res = tu.run(t)
            if t_res["status"] != "ok":
                tu.say("%s: %s" % (t.label, t_res["reason"]))
        # a candidate that failed once is not tried again
        cands = [c for c in cands if all(r["status"] == "ok" for r in c.runs)] + \
                [c for c in cands if not all(r["status"] == "ok" for r in c.runs)]
    all_trials = cands

    # Batch size finder: doublings until memory runs out or samples/s stops growing.
    facts = b0.get("facts") or {}
    bs0 = None
    for d in facts.get("dataloaders") or []:
        if d.get("batch_size"):
            bs0 = d["batch_size"]
            break
    want_bs = (o["only"] is None and o["batch_finder"]) or (o["only"] and "batch_size" in o["only"])
    finder = None
    if want_bs and bs0:
        finder = {"start": bs0, "tried": [], "largest_fitting": bs0, "knee": bs0, "stopped": None,
                  "status": "ran"}
        best_sps = base_samples(base) or 0
        bs = bs0
        for _ in range(8):
            bs *= 2
            if tu.left() < tu.base_wall * 1.5:
                finder["stopped"] = "budget"
                break
            t = Trial("batch_size=%d" % bs, {"batch_size": bs}, "batch")
            tu.say("batch size finder: %d" % bs)
            r = tu.run(t)
            all_trials.append(t)
            finder["tried"].append(bs)
            if r["status"] != "ok":
                finder["stopped"] = r["reason"]
                break
            finder["largest_fitting"] = bs
            sps = r.get("samples_per_s") or 0
            if sps > best_sps * 1.05:
                best_sps = sps
                finder["knee"] = bs
            else:
                finder["stopped"] = "samples/s grew less than 5%% at %d" % bs
                break
        if not finder["tried"]:
            finder["status"] = "not run"

    rows = [summarise(t, base) for t in all_trials]

    def rank(r):
        if r["status"] != "ok" or r["speedup"] is None:
            return (3, 0)
        if r["kind"] == "batch":
            return (1, -r["speedup"])
        return ({"faster": 0, "no difference": 2, "slower": 2}.get(r["verdict"], 2),
                -(r["interval"][0] if r["interval"] else r["speedup"]))

    rows.sort(key=rank)
    best = next((r for r in rows if r["verdict"] == "faster" and r["kind"] != "batch"
                 and (r["loss_check"] in (None, "ok"))), None)
    result = {"command": o["cmd"], "out": tu.out, "budget_s": o["budget"],
              "elapsed_s": round(time.monotonic() - tu.t0, 1), "warmup": o["warmup"],
              "steps": o["steps"], "repeats": o["repeats"], "cpus": cpu_count(),
              "baseline": summarise(base, base), "trials": rows,
              "skipped_for_budget": skipped, "batch_finder": finder,
              "best": best["label"] if best else None,
              "change": change_for(best["knobs"]) if best else None,
              "baseline_verdict": read_verdict(b0["run_dir"]),
              "compare": [base.runs[0]["run_dir"], best_run_dir(all_trials, best)] if best else None}
    result["contended"] = result["baseline_verdict"] == "cpu-contention"
    result["trials_run"] = tu.n
    if finder and finder["knee"] != bs0:
        result["batch_change"] = change_for({"batch_size": finder["knee"]}, bs0)
    if o["json"]:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    write_text(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
