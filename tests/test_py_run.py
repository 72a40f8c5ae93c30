"""Unmodified PyTorch scripts under `trainperf run`: the auto-instrumentation
end to end (the CLI injects python/ through PYTHONPATH)."""
import csv
import json
import os
import subprocess
import sys
import textwrap

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


ACTING = """
import time, torch
torch.manual_seed(0)
q = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
opt = torch.optim.SGD(q.parameters(), lr=0.01)
s = torch.randn(8)
for i in range(40):
    with torch.no_grad():  # acting with the model being trained, in training mode
        a = int(q(s).argmax())
    time.sleep(0.004)      # the environment's step
    loss = q(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i % 20 == 19:       # a real evaluation: model.eval() and several batches
        q.eval()
        with torch.no_grad():
            for _ in range(5):
                q(torch.randn(16, 8))
                time.sleep(0.004)
        q.train()
"""


def test_inference_inside_the_step_is_training_not_eval(cli, tmp_path):
    # a reinforcement-learning loop acts with the model it trains, under
    # no_grad, in every step: after three such steps that is training
    # (forward), not an evaluation that swallows the environment's step; the
    # real evaluations (model.eval(), five batches) stay eval
    script = tmp_path / "acting.py"
    script.write_text(ACTING)
    res = trainperf_run(cli, tmp_path / "run", script)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == 40
    ev = [int(r["step"]) for r in rows if int(r["eval_ns"]) > 0]
    assert set(ev) - {0, 1, 2, 3} <= {19, 20, 39}, ev
    assert {19, 39} & set(ev) or {20} & set(ev), ev
    # the environment's sleep is the step's own time, outside the model
    later = rows[5:]
    assert col_sum(later, "other_ns") >= 0.8 * len(later) * 0.004e9

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
        # a step begins where its data wait begins, as in zero-code mode: at
        # the end of the step before it, so its phases (data included) fit
        # duration_ns, which is interval_ns but for the callback's own
        # instants between the two (issue 32 item 4)
        if int(r["step"]) > 0:
            assert sum(ph.values()) <= dur, r
            assert iv - dur <= max(2e6, 0.05 * iv), r
        assert ph["forward_ns"] > 0 and ph["backward_ns"] > 0 and ph["optimizer_ns"] > 0, r
    # validation ran (sanity check and every 10 steps) and was recorded as eval
    assert sum(int(r["eval_ns"]) for r in rows) > 0


MANUAL_UPDATE = """
import sys, torch
mode, n1, n2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
X, Y = torch.randn(512, 12), torch.randint(0, 5, (512,))
if mode == "raw":
    # makemore-style: bare tensors, no nn.Module, no optimizer
    W1 = (torch.randn(12, 64) * 0.3).requires_grad_()
    b1 = torch.zeros(64, requires_grad=True)
    W2 = (torch.randn(64, 5) * 0.1).requires_grad_()
    params = [W1, b1, W2]
    for i in range(n1):
        ix = torch.randint(0, 512, (32,))
        logits = torch.tanh(X[ix] @ W1 + b1) @ W2
        loss = torch.nn.functional.cross_entropy(logits, Y[ix])
        for p in params:
            p.grad = None
        loss.backward()
        for p in params:
            p.data += -0.1 * p.grad
else:
    model = torch.nn.Sequential(torch.nn.Linear(12, 64), torch.nn.Tanh(), torch.nn.Linear(64, 5))
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)
    batches = iter(dl)

    def batch():
        global batches
        try:
            return next(batches)
        except StopIteration:
            batches = iter(dl)
            return next(batches)

    if mode == "accum":
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if mode == "remade":
        # a new optimizer every step (the last one is gone by then)
        for i in range(n1):
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            x, y = batch()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        n1 = 0
    for i in range(n1):
        # a hand-written update (no optimizer yet); "accum": an optimizer made
        # up front, three backwards per optimizer step
        for k in range(3 if mode == "accum" else 1):
            x, y = batch()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
        if mode == "accum":
            opt.step()
            opt.zero_grad()
            continue
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None
    if mode == "later":
        # a second stage with an optimizer: its steps take over
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for i in range(n2):
            x, y = batch()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
print("steps loss %.10f" % loss.item())
"""


def impl_env(build, impl):
    """The environment for the hooks under test: the C ones (the extension)
    or the Python ones over the ctypes binding (skips without a plain
    libtrainperf.so)."""
    if impl != "ctypes":
        return {}
    from trainperf import _fallback
    lib = build / "libtrainperf.so"
    if not lib.exists() or _fallback._sanitized(str(lib)):
        pytest.skip("no uninstrumented libtrainperf.so for the ctypes binding")
    return {"TRAINPERF_PY_IMPL": "ctypes", "TRAINPERF_LIB": str(lib)}


def run_manual(cli, build, tmp_path, impl, mode, n1, n2=0):
    """MANUAL_UPDATE under trainperf with the hooks under test: its steps,
    once its result is checked against the plain run's."""
    script = tmp_path / "manual.py"
    script.write_text(MANUAL_UPDATE)
    res = trainperf_run(cli, tmp_path / "run", script, mode, n1, n2, env=impl_env(build, impl))
    assert res.returncode == 0, res.stderr
    assert result_line(res.stdout) == result_line(plain(script, mode, n1, n2).stdout)
    return steps(tmp_path / "run")


@pytest.mark.parametrize("impl", ["c", "ctypes"])
def test_hand_written_update_loop_gets_one_step_per_iteration(cli, build, tmp_path, impl):
    # Issue 12: a loop with no torch.optim optimizer (makemore / micrograd
    # lectures: p.data += -lr * p.grad) got no steps at all. The end of each
    # backward is then the step boundary: one row per iteration, the same
    # results as without trainperf. The C hooks and the Python ones (ctypes
    # binding) give the same count.
    N = 37
    rows = run_manual(cli, build, tmp_path, impl, "raw", N)
    assert [int(r["step"]) for r in rows] == list(range(N))
    # every step holds one backward (its end is the boundary) and no optimizer
    assert all(int(r["backward_ns"]) > 0 and int(r["optimizer_ns"]) == 0 for r in rows)
    for r in rows:
        ph = sum(int(r[c]) for c in PHASES)
        assert ph <= int(r["interval_ns"]), r


def test_hand_written_update_with_a_model_has_its_phases(cli, tmp_path):
    # An nn.Module trained by `with torch.no_grad(): p -= lr * p.grad` over a
    # DataLoader: a step per iteration with its batch's samples, forward,
    # backward and data wait in it.
    script = tmp_path / "manual.py"
    script.write_text(MANUAL_UPDATE)
    N = 25
    res = trainperf_run(cli, tmp_path / "run", script, "module", N, 0)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == N
    assert all(int(r["samples"]) == 16 for r in rows)
    # the step after a backward's end holds the next iteration's batch and forward
    for r in rows[1:]:
        assert int(r["forward_ns"]) > 0 and int(r["backward_ns"]) > 0 and int(r["data_ns"]) > 0, r
        assert sum(int(r[c]) for c in PHASES) <= int(r["interval_ns"]), r


@pytest.mark.parametrize("impl", ["c", "ctypes"])
def test_a_new_optimizer_every_step_gives_every_step(cli, build, tmp_path, impl):
    # Each new optimizer was taken for a second one alternating with the
    # first (a GAN's): one step in all. The first is gone when the next steps,
    # so the next is the primary: one row per iteration, with both hooks.
    N = 30
    rows = run_manual(cli, build, tmp_path, impl, "remade", N)
    assert len(rows) == N and all(int(r["optimizer_ns"]) > 0 for r in rows), len(rows)
    ev = json.loads(next((tmp_path / "run" / "pyprof").glob("events-*.json")).read_text())
    made = ev["settings"]["optimizers_made"]
    assert made["total"] == N and made["in_training"] >= N - 1, made


@pytest.mark.parametrize("mode,n1,n2,want", [("later", 15, 12, 27), ("accum", 10, 0, 10)])
def test_an_optimizer_takes_the_step_boundaries_over(cli, tmp_path, mode, n1, n2, want):
    # "later": 15 hand-written iterations, then an optimizer for 12 more: 27
    # steps, none split in two (every row holds a backward) and none counted
    # twice. "accum": an optimizer made before the first backward keeps one
    # step per optimizer step under gradient accumulation (3 backwards each).
    script = tmp_path / "manual.py"
    script.write_text(MANUAL_UPDATE)
    res = trainperf_run(cli, tmp_path / "run", script, mode, n1, n2)
    assert res.returncode == 0, res.stderr
    rows = steps(tmp_path / "run")
    assert len(rows) == want
    assert all(int(r["backward_ns"]) > 0 for r in rows)
    per_step = 3 if mode == "accum" else 1
    assert all(int(r["samples"]) == 16 * per_step for r in rows)
    opt_rows = [int(r["step"]) for r in rows if int(r["optimizer_ns"]) > 0]
    assert opt_rows == list(range(n1 if mode == "later" else 0, want))


LOADER_BUSY = """
import sys, time, torch
slow = sys.argv[1] == "slow"
class DS(torch.utils.data.Dataset):
    def __len__(self): return 96
    def __getitem__(self, i):
        if slow:
            time.sleep(0.01)  # a slow store: the workers are busy fetching
        return torch.randn(8), i % 3
if __name__ == "__main__":
    dl = torch.utils.data.DataLoader(DS(), batch_size=8, num_workers=2)
    m = torch.nn.Linear(8, 3)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for x, y in dl:
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step(); opt.zero_grad()
        if not slow:
            time.sleep(0.03)  # a long step: the workers wait for room in their queue
"""


@pytest.mark.parametrize("mode", ["slow", "idle"])
def test_loader_workers_write_how_busy_they_were(cli, tmp_path, mode):
    # Each DataLoader worker records its fetches and the time spent in them
    # (pyprof/loader-PID.json): busy on a slow store, mostly idle when the
    # step is the slow part. The diagnosis tells starved workers from slow
    # ones by it (docs/diagnosis.md, Causes).
    script = tmp_path / "loader.py"
    script.write_text(LOADER_BUSY)
    res = trainperf_run(cli, tmp_path / "run", script, mode)
    assert res.returncode == 0, res.stderr
    files = sorted((tmp_path / "run" / "pyprof").glob("loader-*.json"))
    assert len(files) == 2, files
    docs = [json.loads(f.read_text()) for f in files]
    assert sum(d["fetches"] for d in docs) == 12  # 96 samples in batches of 8
    main = {r["pid"] for r in steps(tmp_path / "run")}
    assert all(str(d["pid"]) not in main and str(d["ppid"]) in main for d in docs)
    busy = sum(d["fetch_s"] for d in docs) / sum(d["span_s"] for d in docs)
    if mode == "slow":
        assert busy > 0.7, docs  # 8 sleeps of 10 ms per fetch, fetch after fetch
    else:
        assert busy < 0.3, docs  # a few ms per fetch every 60 ms


GRAPH_PROBE = """
    import torch
    from trainperf import _core, _evalhooks
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    calls = []

    def bad(tensors):
        calls.append(1)
        if len(calls) % 2:
            raise ValueError("a probe that fails")
        return 42                     # not callable: ignored
    for step in range(30):
        if step == 10:                # a probe that fails never reaches the script
            _core.set_graph_probe(bad, 1e-6)
        if step == 20:                # the real one, every backward
            _core.set_graph_probe(_evalhooks.graph_probe, 1e-6)
        x = torch.randn(8, 16)
        loss = (model(x) - x[:, :1]).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    print("probe calls", len(calls), "probes", _evalhooks.graph["probes"][-1:])
"""


def test_the_graph_probe_counts_nodes_and_never_breaks_a_backward(cli, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(GRAPH_PROBE))
    res = trainperf_run(cli, tmp_path / "run", script)
    assert res.returncode == 0, res.stderr
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("probe calls")][-1]
    # steps 15-19 (the first five backwards after setting it are skipped),
    # errors and all
    assert line.startswith("probe calls 5 "), line
    nodes, ns, floor = json.loads(line.split("probes ", 1)[1].replace("(", "[").replace(")", "]"))[0]
    # loss: pow, mean, sub, a slice of x; model: addmm, tanh, addmm, t x2,
    # AccumulateGrad x4
    assert 10 <= nodes <= 20 and ns > 0, (nodes, ns)
    # the machine's floor beside it: ns a node of one number, a few µs on any CPU
    assert 200 < floor < 100_000, floor
    # 30 steps: the floor's own backward is neither a step nor a backward phase
    assert len(steps(tmp_path / "run")) == 30


TRACERS = """
    import cProfile, json, sys, threading, time
    import torch
    from trainperf import _core, _evalhooks
    me = threading.get_ident()
    seen = []

    def look():                       # from another thread, as the sampler does
        seen.append(_evalhooks._tracer(me))
    def check():
        t = threading.Thread(target=look)
        t.start(); t.join()

    check()                           # nothing hooked
    def trace(frame, event, arg):
        return None
    sys.settrace(trace); check(); sys.settrace(None)
    p = cProfile.Profile(); p.enable(); check(); p.disable()
    import pdb
    dbg = pdb.Pdb(); dbg.reset()
    dbg._set_stopinfo(sys._getframe(), None, -1)  # as `continue` with a breakpoint set
    sys.settrace(dbg.trace_dispatch); check(); sys.settrace(None)
    print("tracers", json.dumps(seen))
    print("thread_tracing", _core.thread_tracing(me), _core.thread_tracing(1))
    # the script's own profiler: one span a recording, trainperf's none
    x = torch.randn(64, 64)
    with torch.profiler.profile() as prof:
        for _ in range(20):
            x = (x @ x).tanh()
    from trainperf.torch_helpers import ProfilerSchedule
    s = ProfilerSchedule(wait=0, warmup=0, active=2, repeat=1, out_dir=sys.argv[1])
    s.start()
    for _ in range(4):
        x = (x @ x).tanh(); s.step()
    s.stop()
    print("spans", json.dumps(_evalhooks._profiler_spans()))
"""


def test_tracers_and_profiler_recordings_are_seen(cli, tmp_path):
    script = tmp_path / "tracers.py"
    script.write_text(textwrap.dedent(TRACERS))
    res = trainperf_run(cli, tmp_path / "run", script, str(tmp_path / "prof"))
    assert res.returncode == 0, res.stderr
    out = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in res.stdout.splitlines()
           if ln.split(" ", 1)[0] in ("tracers", "thread_tracing", "spans")}
    seen = json.loads(out["tracers"])
    assert seen == [None, ["__main__.trace", "tracer", "sys.settrace"],
                    ["cProfile.Profile", "profiler", "sys.setprofile"],
                    ["pdb.Pdb", "debugger", "sys.settrace"]], seen
    assert out["thread_tracing"] == "(None, None) None", out
    spans = json.loads(out["spans"])
    # the script's recording, then the schedule's own window (marked 1)
    assert [s[2] for s in spans] == [0, 1], spans
    assert all(s[1] > 0 for s in spans) and spans[0][0] < spans[1][0], spans


OPTIMIZER_FACTS = """
    import json, torch, torch.nn as nn
    from trainperf import _evalhooks

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.EmbeddingBag(2000, 8)               # dense, updated by Adam
            self.tok = nn.Embedding(50, 8)                    # tied to the output layer
            self.out = nn.Linear(8, 50, bias=False)
            self.out.weight = self.tok.weight
            self.sp = nn.Embedding(300, 4, sparse=True)       # sparse: not listed
        def forward(self, idx, tok, s):
            h = self.emb(idx.view(4, 5)) + self.tok(tok) + self.sp(s).sum(-1, keepdim=True)
            return self.out(h)

    net = Net()
    dense = [p for n, p in net.named_parameters() if not n.startswith("sp.")]
    opts = [torch.optim.Adam(dense, lr=1e-3), torch.optim.SparseAdam(list(net.sp.parameters()))]
    def step():
        loss = net(torch.randint(0, 2000, (20,)), torch.randint(0, 50, (4,)),
                   torch.randint(0, 300, (4,))).pow(2).mean()
        for o in opts: o.zero_grad()
        loss.backward()
        for o in opts: o.step()
    for _ in range(3):
        step()
    _evalhooks.optimizer_facts(torch)
    _evalhooks.embedding_facts(torch, _evalhooks.optimized_ids())
    step()                                # the one-shot hook counts a forward's lookups
    step()
    print("facts", json.dumps({"optimizers": sorted(_evalhooks.opt_seen.values(),
                                                    key=lambda f: f["class"]),
                               "embeddings": sorted(_evalhooks.embed_seen.values(),
                                                    key=lambda f: f["name"]),
                               "hooks_left": len(net.emb._forward_pre_hooks)}))
"""


def test_optimizers_and_embedding_tables_are_described(cli, tmp_path):
    script = tmp_path / "facts.py"
    script.write_text(textwrap.dedent(OPTIMIZER_FACTS))
    res = trainperf_run(cli, tmp_path / "run", script)
    assert res.returncode == 0, res.stderr
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("facts ")][-1]
    f = json.loads(line.split(" ", 1)[1])
    adam, sparse = f["optimizers"]
    assert adam["class"] == "Adam" and adam["params"] == 2000 * 8 + 50 * 8, adam
    assert not adam["fused"] and not adam["foreach"] and adam["can_fuse"], adam
    assert sparse["class"] == "SparseAdam" and not sparse["can_fuse"], sparse
    emb, tok = f["embeddings"]
    assert (emb["name"], emb["rows"], emb["dim"]) == ("emb", 2000, 8), emb
    assert emb["lookups"] == 20 and emb["optimized"] and not emb["tied"], emb
    assert tok["name"] == "tok" and tok["tied"], tok
    assert f["hooks_left"] == 0  # the lookup hook removed itself
    # and the run's events carry them for the report
    [ev] = (tmp_path / "run" / "pyprof").glob("events-*.json")
    st = json.loads(ev.read_text())["settings"]
    assert {o["class"] for o in st["optimizers"]} == {"Adam", "SparseAdam"}, st
    assert {e["name"] for e in st["embeddings"]} == {"emb", "tok"}, st
