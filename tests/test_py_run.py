"""Unmodified PyTorch scripts under `trainperf run`: the auto-instrumentation
end to end (the CLI injects python/ through PYTHONPATH)."""
import csv
import json
import os
import subprocess
import sys

import pytest

from pyhelp import EXAMPLES, ROOT, col_sum, require_extension, steps, summary

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _ext():
    require_extension()


def env_without_trainperf():
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("TRAINPERF_") or k == "PYTHONPATH":
            del e[k]
    return e


def trainperf_run(cli, out, script, *args, opts=(), timeout=300, interval=0.5, env=None):
    cmd = [cli, "run", "--quiet", "--out", str(out), "--interval", str(interval), *opts, "--",
           sys.executable, str(script), *map(str, args)]
    e = env_without_trainperf()
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e,
                          cwd=str(ROOT))


def plain(script, *args, timeout=300):
    res = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                         text=True, timeout=timeout, env=env_without_trainperf(), cwd=str(ROOT))
    assert res.returncode == 0, res.stderr
    return res


def result_line(stdout):
    return [ln for ln in stdout.splitlines() if ln.startswith("steps ")][-1].split()


def test_unmodified_script_gives_one_step_per_optimizer_step(cli, tmp_path):
    N, B, ACC = 12, 16, 2
    args = ("--steps", N, "--batch", B, "--accum", ACC)
    res = trainperf_run(cli, tmp_path / "run", EXAMPLES / "train_mlp.py", *args)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == N
    assert [int(r["step"]) for r in rows] == list(range(N))
    assert all(int(r["samples"]) == B * ACC for r in rows)
    s = summary(tmp_path / "run")
    assert s["steps"]["count"] == N
    assert s["steps"]["samples_per_s"] > 0
    # same batches and same loss as without monitoring
    assert result_line(res.stdout) == result_line(plain(EXAMPLES / "train_mlp.py", *args).stdout)


def test_no_auto_leaves_the_script_alone(cli, tmp_path):
    res = trainperf_run(cli, tmp_path / "run", EXAMPLES / "train_mlp.py", "--steps", 4,
                        opts=("--no-auto",))
    assert res.returncode == 0, res.stderr
    assert steps(tmp_path / "run") == []


def test_slow_dataset_shows_data_wait_dominating(cli, tmp_path):
    N, B, DELAY_MS = 8, 16, 3.0
    res = trainperf_run(cli, tmp_path / "run", EXAMPLES / "input_bound.py", "--steps", N,
                        "--batch", B, "--decode-ms", DELAY_MS)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == N
    # each batch sleeps B * DELAY_MS inside the DataLoader: a lower bound of its data wait
    assert all(int(r["data_ns"]) >= B * DELAY_MS * 1e6 for r in rows)
    data = col_sum(rows, "data_ns")
    for col in ("forward_ns", "backward_ns", "optimizer_ns", "other_ns"):
        assert data > col_sum(rows, col), col
    share = summary(tmp_path / "run")["steps"]["phase_share"]
    assert share["data"] == max(share.values())


def test_forked_dataloader_workers_are_watched_and_do_not_corrupt(cli, tmp_path):
    N, W = 10, 2
    # workers busy for ~N * 8 * 25 ms / W = 1 s: several samples at 0.2 s
    args = ("--steps", N, "--batch", 8, "--workers", W, "--data-delay-ms", 25)
    res = trainperf_run(cli, tmp_path / "run", EXAMPLES / "train_mlp.py", *args, interval=0.2)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == N
    main_pid = {r["pid"] for r in rows}
    assert len(main_pid) == 1  # workers record no steps of their own
    with open(tmp_path / "run" / "procs.csv", newline="") as f:
        procs = list(csv.DictReader(f))
    children = {p["pid"] for p in procs if p["ppid"] in main_pid}
    assert len(children) >= W, procs
    # the batches are the same as without monitoring: nothing corrupted in the workers
    assert result_line(res.stdout) == result_line(plain(EXAMPLES / "train_mlp.py", *args).stdout)


def test_exception_keeps_exit_status_and_a_complete_run_dir(cli, tmp_path):
    out = tmp_path / "run"
    res = trainperf_run(cli, out, EXAMPLES / "train_mlp.py", "--steps", 10, "--fail-at", 4)
    assert res.returncode == 1
    assert "planted failure" in res.stderr
    assert len(steps(out)) == 4
    run = json.loads((out / "run.json").read_text())
    assert run["exit"]["code"] == 1
    assert summary(out)["steps"]["count"] == 4
    trace = (out / "trace.json").read_text().rstrip().rstrip(",")
    json.loads(trace if trace.endswith("]") else trace + "]")


def test_explicit_api_under_run_is_counted_once(cli, tmp_path):
    N = 7
    res = trainperf_run(cli, tmp_path / "run", EXAMPLES / "explicit_api.py", "--steps", N)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == N
    assert str(tmp_path / "run") in res.stdout  # start() returned the run's directory


@pytest.mark.parametrize("impl", ["ctypes", "noop"])
def test_interpreter_without_the_extension_falls_back(cli, build, tmp_path, impl):
    # As in an interpreter the extension was not built for: ctypes over the
    # shared library still records every step; with no library either, the
    # script runs unchanged and one warning says why.
    lib = build / "libtrainperf.so"
    if impl == "ctypes" and not lib.exists():
        pytest.skip(f"{lib} not built")
    from trainperf import _fallback
    if impl == "ctypes" and _fallback._sanitized(str(lib)):
        pytest.skip("an ASan library cannot load into this (uninstrumented) Python")
    N = 5
    args = ("--steps", N)
    res = trainperf_run(cli, tmp_path / "run", EXAMPLES / "train_mlp.py", *args,
                        env={"TRAINPERF_PY_IMPL": impl, "TRAINPERF_LIB": str(lib)})
    assert res.returncode == 0, res.stderr
    assert result_line(res.stdout) == result_line(plain(EXAMPLES / "train_mlp.py", *args).stdout)
    rows = steps(tmp_path / "run")
    if impl == "ctypes":
        assert len(rows) == N and all(int(r["samples"]) == 32 for r in rows)
    else:
        assert rows == []
        assert res.stderr.count("TrainperfWarning") == 1


EVAL_SLOW_VAL = '''
import time, torch
class SlowVal(torch.utils.data.Dataset):
    def __len__(self): return 16
    def __getitem__(self, i):
        time.sleep(0.01)  # a slow validation read
        return torch.randn(16), i % 4
train = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(320, 16), torch.randint(0, 4, (320,))), batch_size=16)
val = torch.utils.data.DataLoader(SlowVal(), batch_size=4)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(train):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step(); opt.zero_grad()
    if step % 5 == 2:  # a training step follows every evaluation
        model.eval()
        with torch.no_grad():
            for vx, vy in val:
                model(vx)
        model.train()
'''


def test_eval_batches_are_eval_time_not_data_wait(cli, tmp_path):
    script = tmp_path / "evalslow.py"
    script.write_text(EVAL_SLOW_VAL)
    res = trainperf_run(cli, tmp_path / "run", script)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == 20
    ev = [r for r in rows if int(r["eval_ns"]) > 0]
    # 4 evaluations of 16 samples sleeping 10 ms each: at least 160 ms apiece
    assert len(ev) == 4 and all(int(r["eval_ns"]) >= 16 * 0.01 * 1e9 for r in ev)
    # the training loader's batches are in memory: the sleeps are not data wait
    assert col_sum(rows, "data_ns") < 0.25 * col_sum(rows, "eval_ns")
    # nor training samples
    assert all(int(r["samples"]) == 16 for r in rows)


FROZEN_TEACHER = """
import torch
torch.manual_seed(0)
teacher = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 10)).eval()
student = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
opt = torch.optim.SGD(student.parameters(), lr=0.01)
val = torch.randn(64, 64)
for i in range(30):
    x = torch.randn(32, 64)
    with torch.no_grad():
        t = teacher(x)
    loss = torch.nn.functional.mse_loss(student(x), t)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i % 10 == 9:  # a real evaluation of the student
        student.eval()
        with torch.no_grad():
            for _ in range(20):
                student(val)
        student.train()
"""


def test_frozen_teacher_is_training_not_eval(cli, tmp_path):
    # Issue 12: a distillation teacher run under no_grad in every step was
    # timed as the model (the first module called) and its forward opened
    # "eval", which stayed open over the student's forward and backward until
    # the optimizer step: most of every step counted as evaluation. Once an
    # optimizer steps while a forward-opened eval is open, that module is a
    # frozen helper and the trained module is found; a real evaluation after
    # that is still eval.
    script = tmp_path / "distill.py"
    script.write_text(FROZEN_TEACHER)
    res = trainperf_run(cli, tmp_path / "run", script)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == 30
    # only the first step, before the teacher was recognised, and the three
    # evaluations carry eval time
    ev = [int(r["step"]) for r in rows if int(r["eval_ns"]) > 0]
    assert 3 <= len(ev) <= 4, ev
    assert set(ev) - {0} <= {9, 10, 19, 20, 29}, ev
    later = rows[2:]
    assert all(int(r["forward_ns"]) > 0 and int(r["backward_ns"]) > 0 for r in later)


LIGHTNING_CB = """
    import sys, torch, lightning as L
    from torch.utils.data import DataLoader, TensorDataset
    from trainperf.lightning import TrainperfCallback
    max_steps = int(sys.argv[1])

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(),
                                           torch.nn.Linear(32, 1))
        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)
        def validation_step(self, batch, i):
            x, y = batch
            self.log("val", torch.nn.functional.mse_loss(self.net(x), y))
        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
    cb = TrainperfCallback()
    trainer = L.Trainer(max_steps=max_steps, callbacks=[cb], val_check_interval=10,
                        limit_val_batches=3, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1)
    trainer.fit(Tiny(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    print("steps", trainer.global_step, cb.steps)
"""

PHASES = ("data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns", "eval_ns",
          "checkpoint_ns")


def test_lightning_callback_phases_never_exceed_the_step(cli, tmp_path):
    # Issue 12: under `trainperf run` the auto hook's optimizer range (around
    # optimizer.step(closure), which runs training_step and backward) stacked
    # with the callback's phases: 133% of the step. Every row must add up.
    pytest.importorskip("lightning")
    p = tmp_path / "lit.py"
    p.write_text(__import__("textwrap").dedent(LIGHTNING_CB))
    N = 40
    res = trainperf_run(cli, tmp_path / "run", p, N)
    assert res.returncode == 0, res.stderr
    assert result_line(res.stdout)[1:] == [str(N), str(N)]
    rows = steps(tmp_path / "run")
    assert len(rows) == N
    for r in rows:
        ph = {c: int(r[c]) for c in PHASES}
        iv, dur = int(r["interval_ns"]), int(r["duration_ns"])
        assert sum(ph.values()) <= iv, r
        assert int(r["other_ns"]) == iv - sum(ph.values()), r
        # the callback opens and closes these inside its step
        assert ph["forward_ns"] + ph["backward_ns"] + ph["optimizer_ns"] <= dur, r
        assert ph["forward_ns"] > 0 and ph["backward_ns"] > 0 and ph["optimizer_ns"] > 0, r
    # validation ran (sanity check and every 10 steps) and was recorded as eval
    assert sum(int(r["eval_ns"]) for r in rows) > 0
