"""trainperf figures into the experiment tracker the script already uses.

When the training script has an active Weights & Biases run or MLflow run,
a daemon thread logs trainperf's figures into it, namespaced ``trainperf/``
(and ``prof/`` for the top operators of each profiler window), at a bounded
rate (every TRAINPERF_EXPORT_INTERVAL seconds, default 10), and once more
when the script ends its tracker run (``wandb.finish()``, ``mlflow.end_run()``)
or exits, whichever comes first, so a short run carries them too. Nothing is
imported: the thread only looks at ``sys.modules`` for ``wandb`` and
``mlflow``, so a script that uses neither pays a wake-up every interval and
nothing more. docs/python.md#experiment-trackers.

Where the figures come from: the run directory the collector writes
(metrics.csv's last row for throughput and resources, steps.csv's tail for
this process's own steps) and the FLOP counts this process recorded
(``note``), so TFLOP/s are per rank. Logging happens on this thread, never on
the training thread; a tracker that raises is given up after a few tries and
the reason kept in ``status()``; the training run never sees an exception.

W&B: ``trainperf/step`` is declared as the x axis of ``trainperf/*`` and
``prof/*`` with ``define_metric``. Once the script has logged and never with
an explicit ``step=``, each update is a row of its own (committed), so the
figures arrive every interval whatever the script logs; the script's rows
stay whole and in order (W&B numbers rows, and the script's have no numbers
of their own to collide with). Until then, or when the script gives steps
(``wandb.log(step=k)``: a row committed past its next k would drop it), an
update is merged into the script's current row (``commit=False``) and never
advances W&B's step. MLflow: ``MlflowClient.log_batch`` on
the active run's id (MLflow's active run is per thread; the run of the
script's threads is looked up), with ``step=`` the rank's step count.
"""
import csv
import glob
import io
import json
import os
import sys
import threading
import time

_lock = threading.Lock()
_thread = None
_stop = threading.Event()
_notes = {}          # counter name -> last value recorded in this process
_state = {"wandb": "unused", "mlflow": "unused", "logged": 0, "dropped": 0, "errors": 0}
_MAX_ERRORS = 3
_TAIL = 256 * 1024
_PROF_TOP = 10


def note(name, value):
    """Remember the last value of a figure this process computed (``flops``
    per step, ``mfu``). Cheap: one dict store."""
    _notes[name] = value


def status():
    """What the exporter thread did: per tracker "unused", "on" or why it
    stopped, and counts of logged and dropped updates."""
    with _lock:
        return dict(_state)


def _tail_rows(path, max_bytes=_TAIL):
    """Header and the complete rows in the last max_bytes of a CSV file."""
    try:
        with open(path, "rb") as f:
            header = f.readline().decode("utf-8", "replace")
            f.seek(0, os.SEEK_END)
            size = f.tell()
            start = max(len(header), size - max_bytes)
            f.seek(start)
            data = f.read(size - start).decode("utf-8", "replace")
    except OSError:
        return []
    if start > len(header):
        data = data.split("\n", 1)[1] if "\n" in data else ""
    if not data.endswith("\n"):
        data = data.rsplit("\n", 1)[0] + "\n" if "\n" in data else ""
    return list(csv.DictReader(io.StringIO(header + data)))


def _num(cell):
    try:
        return float(cell) if cell not in (None, "") else None
    except ValueError:
        return None


class _Figures:
    """Builds one update from the run directory; remembers what it has sent."""

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.pid = os.getpid()
        self.prof_done = set()
        self.last_steps = None   # (count, t) of this process at the last update

    @property
    def rank(self):
        # read each time: a rank given in code appears in RANK only once
        # init_process_group returned (_comm._publish_rank)
        r = os.environ.get("RANK") or os.environ.get("SLURM_PROCID")
        return int(r) if r and r.isdigit() else None

    def _own_steps(self):
        rows = [r for r in _tail_rows(os.path.join(self.run_dir, "steps.csv"))
                if r.get("pid") == str(self.pid)]
        return rows

    def collect(self):
        """(step, {name: value}); step is this process's steps so far."""
        d = {}
        m = _tail_rows(os.path.join(self.run_dir, "metrics.csv"), 64 * 1024)
        if m:
            last = m[-1]
            for col, key in (("step_rate", "steps_per_s"), ("sample_rate", "samples_per_s"),
                             ("token_rate", "tokens_per_s"), ("data_wait_share", "data_wait_share"),
                             ("tree_cpu_pct", "cpu_pct"), ("tree_rss_bytes", "rss_bytes"),
                             ("cpu_pct", "host_cpu_pct"), ("mem_available_bytes",
                                                           "host_mem_available_bytes")):
                v = _num(last.get(col))
                if v is None and col == "data_wait_share" and last.get("data_wait_pct"):
                    # run directories of earlier builds: the share in percent
                    v = _num(last.get("data_wait_pct"))
                    v = None if v is None else v / 100.0
                if v is not None:
                    d["trainperf/" + key] = v
            for k, v in last.items():
                if k and k.startswith("gpu") and "_" in k:
                    g, rest = k.split("_", 1)
                    if rest in ("util_pct", "mem_used_bytes", "power_w", "temp_c"):
                        x = _num(v)
                        if x is not None:
                            d["trainperf/%s/%s" % (g, rest)] = x
        rows = self._own_steps()
        step = None
        if rows:
            step = int(rows[-1]["step"]) + 1
            recent = rows[-50:]
            ivs = sorted(int(r["interval_ns"]) / 1e6 for r in recent if r.get("interval_ns"))
            if ivs:
                d["trainperf/step_time_ms"] = sum(ivs) / len(ivs)
                d["trainperf/step_time_p50_ms"] = ivs[len(ivs) // 2]
                d["trainperf/step_time_max_ms"] = ivs[-1]
                data = [int(r["data_ns"]) for r in recent if r.get("data_ns")]
                tot = sum(int(r["interval_ns"]) for r in recent if r.get("interval_ns"))
                if tot:
                    d["trainperf/rank_data_wait_share"] = sum(data) / tot
                    rate = len(recent) / (tot / 1e9)
                    d["trainperf/rank_steps_per_s"] = rate
                    fl = _notes.get("flops")
                    if fl:
                        d["trainperf/tflops"] = fl * rate / 1e12
        if _notes.get("mfu") is not None:
            d["trainperf/mfu"] = _notes["mfu"]
        if self.rank is not None:
            d["trainperf/rank"] = self.rank
        d.update(self._prof())
        return step, d

    def _prof(self):
        """The top operators of profiler windows of this process not yet sent,
        as prof/<op> = self time in ms (device time when measured)."""
        out = {}
        # windows are named by rank and step (top-rank<R>-step<S>.json); each
        # process sends its own rank's
        from ._state import rank as _rank
        me = _rank()
        pat = os.path.join(self.run_dir, "profile", "top-rank%d-*.json" % me)
        for path in sorted(glob.glob(pat)):
            if path in self.prof_done:
                continue
            try:
                with open(path) as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                continue  # being written: next time
            self.prof_done.add(path)
            ops = doc.get("ops", []) if isinstance(doc, dict) else []
            for op in ops[:_PROF_TOP]:
                t = op.get("self_device_us") or op.get("self_cpu_us")
                if t is None or not op.get("name"):
                    continue
                out["prof/" + str(op["name"])[:120]] = float(t) / 1000.0
        return out


def _find_mlflow_run(mlflow):
    """The active run of the script's threads (MLflow keeps it per thread)."""
    try:
        run = mlflow.active_run()
        if run is not None:
            return run.info.run_id
        from mlflow.tracking import fluent
        stack = fluent._active_run_stack
        vals = stack.get_all_thread_values() if hasattr(stack, "get_all_thread_values") else {}
        main = threading.main_thread().ident
        order = sorted(vals.items(), key=lambda kv: kv[0] != main)
        for _, runs in order:
            if runs:
                return runs[-1].info.run_id
    except Exception:
        return None
    return None


class _Exporter:
    def __init__(self, run_dir, interval):
        self.fig = _Figures(run_dir)
        self.interval = interval
        self.wandb_run = None      # the run we declared our axis on
        self.wandb_rows = 0        # rows of our own committed to it
        self.errors = {"wandb": 0, "mlflow": 0}
        self.client = None
        self.client_uri = None
        self.once_lock = threading.Lock()

    def _fail(self, tracker, exc):
        with _lock:
            self.errors[tracker] += 1
            _state["errors"] += 1
            # said once, on one line (the loop thread and flush() may both
            # fail here), and the tracker is left alone from then on
            if self.errors[tracker] == _MAX_ERRORS:
                why = _one_line(exc)
                _state[tracker] = "stopped: %s" % why
                try:
                    sys.stderr.write("trainperf: warning: not logging to %s any more (%d failures): "
                                     "%s\n" % (tracker, _MAX_ERRORS, why))
                except Exception:  # a closed or broken stderr: still the run's own
                    pass

    def _to_wandb(self, wandb, step, d):
        run = getattr(wandb, "run", None)
        if run is None:
            return False
        if self.wandb_run is not run:
            run.define_metric("trainperf/step")
            run.define_metric("trainperf/*", step_metric="trainperf/step")
            run.define_metric("prof/*", step_metric="trainperf/step")
            self.wandb_run = run
            self.wandb_rows = 0
        row = dict(d)
        row["trainperf/step"] = step
        own = _wandb_rows_free(run, self.wandb_rows)
        # own rows: on time whatever the script logs; else merged into the
        # script's current row, never advancing W&B's step
        run.log(row, commit=own)
        if own:
            self.wandb_rows += 1
        return True

    def _to_mlflow(self, mlflow, step, d):
        run_id = _find_mlflow_run(mlflow)
        if run_id is None:
            return False
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient
        uri = mlflow.get_tracking_uri()
        if self.client is None or self.client_uri != uri:
            self.client, self.client_uri = MlflowClient(uri), uri
        ts = int(time.time() * 1000)
        # MLflow metric keys: alphanumerics, _ - . space / only.
        ms = [Metric(_mlflow_key(k), float(v), ts, step) for k, v in d.items()]
        for i in range(0, len(ms), 1000):
            self.client.log_batch(run_id, metrics=ms[i:i + 1000], synchronous=True)
        return True

    def once(self):
        wandb = sys.modules.get("wandb")
        mlflow = sys.modules.get("mlflow")
        use_w = wandb is not None and self.errors["wandb"] < _MAX_ERRORS
        use_m = mlflow is not None and self.errors["mlflow"] < _MAX_ERRORS and \
            hasattr(mlflow, "active_run")
        if not use_w and not use_m:
            return
        if use_w and getattr(wandb, "run", None) is None:
            use_w = False
        if not use_w and not use_m:
            return
        step, d = self.fig.collect()
        if step is None or not d:
            return
        if self.fig.last_steps == step:
            return  # nothing new: the tracker already has this step
        self.fig.last_steps = step
        for name, mod, fn in (("wandb", wandb, self._to_wandb), ("mlflow", mlflow, self._to_mlflow)):
            if (name == "wandb" and not use_w) or (name == "mlflow" and not use_m):
                continue
            try:
                if _call_quietly(name, fn, mod, step, d):
                    with _lock:
                        _state[name] = "on"
                        _state["logged"] += 1
            except Exception as exc:  # never break the watched program
                self._fail(name, exc)

    def loop(self):
        # wakes every _HOOK_TICK to hook a tracker as soon as the script
        # imports it (a dict lookup); exports every interval
        due = time.monotonic() + self.interval
        while not _stop.wait(min(self.interval, _HOOK_TICK)):
            _hook_trackers()
            if time.monotonic() < due:
                continue
            due = time.monotonic() + self.interval
            self.locked_once()

    def locked_once(self):
        """once() from either thread (the loop, or the script's at its
        tracker's end); never raises."""
        try:
            with self.once_lock:
                self.once()
        except Exception as exc:
            with _lock:
                _state["errors"] += 1
                _state["last_error"] = repr(exc)


_HOOK_TICK = 0.25
_hooked = set()
_at_exit = False


def _final_update(*_args, **_kw):
    """The last update before a tracker run ends (its finish/end_run, or the
    interpreter's exit): a short run, over before the first interval, still
    carries trainperf's figures. Logs only a step not logged yet, so the rows
    stay whole and in order."""
    ex = _exporter
    if ex is not None and not _at_exit:  # at exit: one update, already made
        ex.locked_once()


def _exit_update():
    """At exit, the first of these handlers to run (the last registered: after
    every tracker's own, so before they close their runs) logs the update."""
    global _at_exit
    if _at_exit:
        return
    _at_exit = True
    ex = _exporter
    if ex is not None:
        ex.locked_once()


def _run_started(name, mod):
    """The tracker's run has begun, so its own exit handler is registered."""
    if name == "wandb":
        return getattr(mod, "run", None) is not None
    return _find_mlflow_run(mod) is not None


def _wrap_before(owner, name):
    """owner.name becomes a function that logs the final update first."""
    orig = getattr(owner, name, None)
    if orig is None or getattr(orig, "_trainperf_wrapped", False):
        return
    import functools

    @functools.wraps(orig)
    def wrapped(*a, **kw):
        _final_update()
        return orig(*a, **kw)
    wrapped._trainperf_wrapped = True
    setattr(owner, name, wrapped)


def _importing(mod):
    """Whether the script's thread is still importing the module (it is in
    sys.modules from the start): importing its parts from here then would
    interleave the two imports."""
    spec = getattr(mod, "__spec__", None)
    return spec is None or getattr(spec, "_initializing", False) or not hasattr(mod, "init" if
                                                                                   mod.__name__ == "wandb" else "end_run")


def _hook_trackers():
    """Once the script has imported wandb or mlflow: their run's end logs a
    final update, and so does exit (this atexit handler is registered after
    the tracker's own, so it runs before the tracker closes its run)."""
    for name in ("wandb", "mlflow"):
        mod = sys.modules.get(name)
        if mod is None or name in _hooked or _importing(mod) or not _run_started(name, mod):
            continue
        try:
            if name == "wandb":
                from wandb.sdk.wandb_run import Run
                _wrap_before(Run, "finish")
            else:
                from mlflow.tracking import fluent
                _wrap_before(fluent, "end_run")
                _wrap_before(mod, "end_run")
        except Exception:  # another version: the periodic updates still come
            pass
        import atexit
        atexit.register(_exit_update)
        _hooked.add(name)


_tls = threading.local()


def _ours_quiet(record):
    """A logging filter: a tracker's own log records made by our calls into
    it are dropped (MLflow logs every failed write with its traceback, 90
    lines each); our one line says what failed. Other threads' records pass."""
    return not getattr(_tls, "calling", False)


def _call_quietly(tracker, fn, *args):
    """fn(*args) with the tracker's logging of it silenced (records are
    handled on the calling thread, so a thread-local flag tells ours)."""
    import logging
    for lg in (logging.getLogger(tracker), logging.getLogger()):
        for h in list(lg.handlers):
            if _ours_quiet not in h.filters:
                h.addFilter(_ours_quiet)
    _tls.calling = True
    try:
        return fn(*args)
    finally:
        _tls.calling = False


def _one_line(exc, limit=300):
    """An exception as one line for a warning: its type and the first line
    of its text (SQLAlchemy's and MLflow's run over several), capped."""
    text = str(exc).strip().splitlines()
    line = "%s: %s" % (type(exc).__name__, text[0].strip() if text else "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _wandb_rows_free(run, ours):
    """Whether a row of our own may be committed to the W&B run: the script
    has logged rows (W&B's step is past the ours rows we committed) and never
    with an explicit step= (its telemetry says so). A script that gives steps
    could next log one below a row we committed, and W&B would drop it."""
    try:
        explicit = run._telemetry_obj.feature.set_step_log
        return not explicit and int(run.step) > ours
    except Exception:  # another wandb: the safe way, merged rows
        return False


def _mlflow_key(k):
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in k)


def flush():
    """Log one update now (from the calling thread), e.g. before wandb.finish()
    or mlflow.end_run(). Returns False when no tracker is active."""
    ex = _exporter
    if ex is None:
        return False
    before = status()["logged"]
    with ex.once_lock:
        ex.fig.last_steps = None
    ex.locked_once()
    return status()["logged"] > before


_exporter = None


def tensorboard_profile(trace_path):
    """Make a finished profiler window visible to TensorBoard's PyTorch
    profiler plugin: RUN/plugins/profile/<host>_<pid>.<ms>.pt.trace.json, the
    name and place torch.profiler.tensorboard_trace_handler gives (so
    `tensorboard --logdir RUN` lists it). A hard link to the trace (no second
    copy on disk); a copy where links are not possible. Returns the path or
    None; never raises."""
    try:
        prof_dir = os.path.dirname(os.path.abspath(trace_path))
        run_dir = os.path.dirname(prof_dir)
        if os.path.basename(prof_dir) != "profile" or not os.path.exists(os.path.join(run_dir, "run.json")):
            return None  # a directory of the user's choosing: leave it alone
        import socket
        dest_dir = os.path.join(run_dir, "plugins", "profile")
        os.makedirs(dest_dir, exist_ok=True)
        dest = os.path.join(dest_dir, "%s_%d.%d.pt.trace.json" % (
            socket.gethostname().replace(".", "-"), os.getpid(), int(time.time() * 1000)))
        try:
            os.link(trace_path, dest)
        except OSError:
            import shutil
            shutil.copyfile(trace_path, dest)
        return dest
    except Exception:
        return None


def start(run_dir=None, interval=None):
    """Start the exporter thread (idempotent). Called by the auto hook; off
    with TRAINPERF_EXPORT=0."""
    global _thread, _exporter
    if os.environ.get("TRAINPERF_EXPORT", "1") == "0":
        return False
    run_dir = run_dir or os.environ.get("TRAINPERF_RUN_DIR")
    if not run_dir:
        return False
    if interval is None:
        try:
            interval = float(os.environ.get("TRAINPERF_EXPORT_INTERVAL", "10"))
        except ValueError:
            interval = 10.0
    interval = max(0.2, interval)
    with _lock:
        if _thread is not None:
            return True
        _exporter = _Exporter(run_dir, interval)
        _thread = threading.Thread(target=_exporter.loop, name="trainperf-exporters", daemon=True)
        _thread.start()
    return True
