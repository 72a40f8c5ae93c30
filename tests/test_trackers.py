"""trainperf figures into the script's own W&B / MLflow run (python/trainperf/
_exporters.py), zero code changes: real PyTorch training under `trainperf run`,
wandb in offline mode and MLflow on a sqlite store, read back through their own
formats and APIs."""
import glob
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = r"""
import json, os, sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
out = sys.argv[1]
use = sys.argv[2].split(",")
if "wandb" in use or "wandbstep" in use:
    import wandb
    wandb.init(mode="offline", dir=out, project="trainperf-test")
if "mlflow" in use:
    import mlflow
    mlflow.set_tracking_uri("sqlite:///" + os.path.join(out, "mlflow.db"))
    mlflow.start_run()
torch.manual_seed(0)
ds = TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
from trainperf.torch_helpers import ProfilerSchedule
ps = ProfilerSchedule(wait=2, warmup=1, active=2, repeat=1, top_k=10)
step = 0
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    for x, y in DataLoader(ds, batch_size=16):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ps.step()
        time.sleep(0.005)
        if "wandb" in use and step % 50 == 0:  # a script that logs now and then
            wandb.log({"loss": loss.item(), "at": step})
        if "wandbstep" in use and step % 10 == 0:  # a script that gives its steps
            wandb.log({"loss": loss.item(), "at": step}, step=step)
        if "mlflow" in use:
            mlflow.log_metric("loss", loss.item(), step=step)
        step += 1
ps.stop()
info = {"steps": step, "modules": sorted(m for m in ("wandb", "mlflow") if m in sys.modules)}
from trainperf import _exporters
info["status"] = _exporters.status()
info["thread"] = _exporters._thread is not None
if "mlflow" in use:
    info["mlflow_run"] = mlflow.active_run().info.run_id
    mlflow.end_run()
if "wandb" in use or "wandbstep" in use:
    info["wandb_dir"] = wandb.run.dir
    wandb.finish()
json.dump(info, open(os.path.join(out, "info.json"), "w"))
"""


@pytest.fixture(scope="module")
def both(cli, tmp_path_factory):
    """One training run with both trackers (their start-up is the slow part)."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    return _run(cli, tmp_path_factory.mktemp("trackers"), "wandb,mlflow", 4)


def _run(cli, tmp_path, use, seconds):
    pytest.importorskip("torch")
    prog = tmp_path / "train.py"
    prog.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ)
    env.pop("TRAINPERF_RUN_DIR", None)
    env.update({"TRAINPERF_EXPORT_INTERVAL": "0.3", "WANDB_MODE": "offline", "WANDB_SILENT": "true",
                "WANDB_DISABLE_GIT": "true", "MLFLOW_ENABLE_ASYNC_LOGGING": "false"})
    p = subprocess.run([cli, "run", "--quiet", "--interval", "0.2", "--out", str(tmp_path / "run"), "--",
                        sys.executable, str(prog), str(out), use, str(seconds)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "info.json").read_text()), out, tmp_path / "run"


def _wandb_history(run_dir):
    """History rows of an offline W&B run from its .wandb file: LevelDB-log
    framing (32 KiB blocks, 7-byte record headers) around W&B's own Record
    protobufs (wandb.proto), the way `wandb sync` reads it."""
    from wandb.proto import wandb_internal_pb2 as pb
    path = glob.glob(os.path.join(run_dir, "run-*.wandb"))[0]
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, rows, part = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, n, typ = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if typ == 0:
            continue
        part = chunk if typ in (1, 2) else part + chunk
        if typ in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(part)
            if rec.WhichOneof("record_type") == "history":
                rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                             for i in rec.history.item})
    return rows


@pytest.mark.torch
@pytest.mark.once
def test_wandb_offline_run_gets_trainperf_figures(both):
    info, out, run = both
    assert info["status"]["wandb"] == "on", info
    rows = _wandb_history(os.path.dirname(info["wandb_dir"].rstrip("/")))
    # The script's own rows are whole and in order: one per wandb.log (every 50th
    # step), none dropped, in increasing W&B steps.
    user = [r for r in rows if "loss" in r]
    assert [r["at"] for r in user] == list(range(0, info["steps"], 50)), [r["at"] for r in user]
    assert [r["_step"] for r in user] == sorted(r["_step"] for r in user)
    # trainperf's figures arrive on their own axis every interval, in rows of their
    # own, not only when the script logs (merged, they came every 50 steps at best)
    own = [r for r in rows if "loss" not in r and "trainperf/step" in r]
    assert len(own) > len(user) and len(own) >= 4, (len(own), len(user))
    assert all(k.startswith(("trainperf/", "prof/", "_")) for r in own for k in r)
    tp = [r for r in rows if "trainperf/step" in r]
    steps = [r["trainperf/step"] for r in tp]
    assert steps == sorted(steps) and 0 < steps[-1] <= info["steps"]
    last = tp[-1]
    assert last["trainperf/steps_per_s"] > 0 and last["trainperf/step_time_ms"] > 0
    assert 0 <= last["trainperf/data_wait_share"] <= 1
    assert last["trainperf/rss_bytes"] > 10e6
    # The profiler window's top operators, under prof/ (self time, ms).
    prof = {k: v for r in rows for k, v in r.items() if k.startswith("prof/")}
    assert 1 <= len(prof) <= 10 and all(v >= 0 for v in prof.values()), prof
    assert any("addmm" in k or "linear" in k or "mse" in k for k in prof), prof


@pytest.mark.torch
@pytest.mark.once
def test_wandb_script_that_gives_steps_loses_none(cli, tmp_path):
    """A script logging wandb.log(step=k): trainperf commits no row of its own
    (one past the script's next k would make W&B drop that one); its figures
    ride in the script's rows, and every row of the script is there."""
    pytest.importorskip("wandb")
    info, _, _ = _run(cli, tmp_path, "wandbstep", 3)
    assert info["status"]["wandb"] == "on", info
    rows = _wandb_history(os.path.dirname(info["wandb_dir"].rstrip("/")))
    user = [r for r in rows if "loss" in r]
    assert [(r["_step"], r["at"]) for r in user] == [(k, k) for k in range(0, info["steps"], 10)]
    assert [r for r in rows if "loss" not in r and "trainperf/step" in r][:-1] == []
    assert sum(1 for r in user if "trainperf/step" in r) >= 2


@pytest.mark.torch
@pytest.mark.once
def test_mlflow_sqlite_run_gets_trainperf_figures(both):
    import mlflow
    info, out, run = both
    assert info["status"]["mlflow"] == "on", info
    client = mlflow.tracking.MlflowClient("sqlite:///" + str(out / "mlflow.db"))
    run = client.get_run(info["mlflow_run"])
    keys = set(run.data.metrics)
    assert {"loss", "trainperf/steps_per_s", "trainperf/step_time_ms", "trainperf/cpu_pct"} <= keys, keys
    hist = client.get_metric_history(info["mlflow_run"], "trainperf/step_time_ms")
    assert len(hist) >= 2
    steps = [m.step for m in hist]
    assert steps == sorted(steps) and len(set(steps)) == len(steps) and 0 < steps[-1] <= info["steps"]
    assert all(m.value > 0 for m in hist)
    assert len(client.get_metric_history(info["mlflow_run"], "loss")) == info["steps"]
    assert any(k.startswith("prof/") for k in keys), keys


@pytest.mark.torch
@pytest.mark.once
def test_profiler_window_where_tensorboard_looks(both):
    """The profiler window is also RUN/plugins/profile/<host>_<pid>.<ms>.pt.trace.json,
    as torch.profiler.tensorboard_trace_handler names it: the same file as
    profile/trace-rank<R>-step<S>.json (a hard link)."""
    info, out, run = both
    tb = glob.glob(str(run / "plugins" / "profile" / "*.pt.trace.json"))
    assert len(tb) == 1, tb
    import re
    assert re.fullmatch(r"[^.]+_\d+\.\d+\.pt\.trace\.json", os.path.basename(tb[0]))
    own = glob.glob(str(run / "profile" / "trace-rank*-step*.json"))
    assert len(own) == 1 and os.path.samefile(own[0], tb[0])
    assert json.load(open(tb[0]))["traceEvents"]


@pytest.mark.torch
@pytest.mark.once
def test_no_tracker_no_import(cli, tmp_path):
    """A script that uses neither tracker imports neither: the thread runs and
    only looks."""
    info, _, _ = _run(cli, tmp_path, "none", 1)
    assert info["thread"] is True
    assert info["modules"] == []
    assert info["status"]["wandb"] == "unused" and info["status"]["mlflow"] == "unused"


BROKEN_MLFLOW = r"""
import json, os, sqlite3, sys, time
import mlflow
import trainperf
out = sys.argv[1]
db = os.path.join(out, "mlflow.db")
mlflow.set_tracking_uri("sqlite:///" + db)
mlflow.start_run()
# The tracker's store stops taking metrics (as a full or broken database
# would): every write to it fails from here on.
with sqlite3.connect(db) as c:
    c.execute("DROP TABLE metrics")
    c.execute("DROP TABLE latest_metrics")
steps = 0
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    with trainperf.step():
        time.sleep(0.005)
    steps += 1
from trainperf import _exporters
json.dump({"steps": steps, "status": _exporters.status()}, open(os.path.join(out, "info.json"), "w"))
"""


@pytest.mark.once
def test_unwritable_tracker_is_said_once_and_the_run_goes_on(cli, tmp_path):
    # Issue 27 item 8: a tracker whose store cannot be written is said once,
    # on one line (SQLAlchemy's error runs over several), then left alone;
    # the training and the run directory never notice.
    pytest.importorskip("mlflow")
    prog = tmp_path / "train.py"
    prog.write_text(BROKEN_MLFLOW)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ)
    env.pop("TRAINPERF_RUN_DIR", None)
    env.update({"TRAINPERF_EXPORT_INTERVAL": "0.2", "MLFLOW_ENABLE_ASYNC_LOGGING": "false",
                "PYTHONPATH": str(ROOT / "python")})
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--quiet", "--interval", "0.2", "--out", str(run), "--",
                        sys.executable, str(prog), str(out), "4"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    info = json.loads((out / "info.json").read_text())
    assert info["status"]["mlflow"].startswith("stopped: "), info
    said = [l for l in p.stderr.splitlines() if l.startswith("trainperf") and "mlflow" in l]
    assert len(said) == 1, p.stderr[-3000:]
    assert said[0].startswith("trainperf: warning: not logging to mlflow any more"), said
    # MLflow logged each failed write of ours with a 90-line traceback; what
    # is left is its own atexit end_run on the broken store (the script's)
    assert p.stderr.count("ERROR mlflow") <= 1, p.stderr[-3000:]
    # the run itself: every step, its summary and report
    sm = json.loads((run / "summary.json").read_text())
    assert sm["steps"]["count"] == info["steps"] > 0
    assert (run / "report.md").exists()


SHORT = r"""
import json, os, sys, time
import trainperf
out, how = sys.argv[1], sys.argv[2]
import wandb, mlflow
wandb.init(mode="offline", dir=out, project="trainperf-test")
mlflow.set_tracking_uri("sqlite:///" + os.path.join(out, "mlflow.db"))
mlflow.start_run()
steps = 0
end = time.monotonic() + 2
while time.monotonic() < end:
    with trainperf.step():
        time.sleep(0.01)
    steps += 1
info = {"steps": steps, "wandb_dir": wandb.run.dir, "mlflow_run": mlflow.active_run().info.run_id}
json.dump(info, open(os.path.join(out, "info.json"), "w"))
if how == "finish":  # the script ends its tracker runs itself
    mlflow.end_run()
    wandb.finish()
"""


@pytest.fixture(scope="module")
def short(cli, tmp_path_factory):
    """Issue 40 item 1: two short runs, shorter than the export interval (an
    hour here, so the first periodic update never comes whatever the machine's
    load): one ends its tracker runs itself, one leaves them to exit."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    res = {}
    for how in ("finish", "exit"):
        tmp = tmp_path_factory.mktemp("short-" + how)
        (tmp / "train.py").write_text(SHORT)
        out = tmp / "out"
        out.mkdir()
        env = dict(os.environ)
        env.pop("TRAINPERF_RUN_DIR", None)
        env.update({"TRAINPERF_EXPORT_INTERVAL": "3600", "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true",
                    "MLFLOW_ENABLE_ASYNC_LOGGING": "false", "PYTHONPATH": str(ROOT / "python")})
        p = subprocess.run([cli, "run", "--quiet", "--interval", "0.2", "--out", str(tmp / "run"), "--",
                            sys.executable, str(tmp / "train.py"), str(out), how],
                           capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
        assert p.returncode == 0, p.stderr[-3000:]
        res[how] = (json.loads((out / "info.json").read_text()), out)
    return res


@pytest.mark.once
@pytest.mark.parametrize("how", ["finish", "exit"])
def test_short_run_gets_one_final_update(short, how):
    import mlflow
    info, out = short[how]
    rows = _wandb_history(os.path.dirname(info["wandb_dir"].rstrip("/")))
    tp = [r for r in rows if "trainperf/step" in r]
    assert len(tp) == 1, rows
    assert 0 < tp[0]["trainperf/step"] <= info["steps"] and tp[0]["trainperf/step_time_ms"] > 0
    client = mlflow.tracking.MlflowClient("sqlite:///" + str(out / "mlflow.db"))
    hist = client.get_metric_history(info["mlflow_run"], "trainperf/step_time_ms")
    assert len(hist) == 1 and hist[0].value > 0 and 0 < hist[0].step <= info["steps"], hist
