"""PyTorch on the CPU: the decorator, FLOP counting, MFU, the profiler window,
graph breaks, and the auto-instrumentation (in embedded mode here; under
`trainperf run` in test_py_run.py)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from pyhelp import EXAMPLES, clean_env, col_sum, require_extension, run_py, steps

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _ext():
    require_extension()


def script(tmp_path, body, name="s.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


# Runs a script with the auto hook installed and an embedded collector: the
# same code paths as `trainperf run`, in one process.
AUTO_EMBEDDED = """
    import os, runpy, sys
    out = sys.argv[1]
    import trainperf
    from trainperf import _autohook
    assert trainperf.start(out, interval_s=0.2) == out
    _autohook.install()
    sys.argv = sys.argv[2:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        trainperf.stop()
"""


def test_flops_of_known_models_match_the_analytic_count():
    from torch import nn
    from trainperf.torch_helpers import count_flops
    B = 8
    lin = nn.Linear(32, 16)
    x = torch.randn(B, 32)
    _, fl, how = count_flops(lin, x)
    assert how == "FlopCounterMode"
    assert fl == 2 * B * 32 * 16  # one matmul; the bias add is not a FLOP it counts

    mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    _, fl, _ = count_flops(mlp, x)
    assert fl == 2 * B * (32 * 64 + 64 * 10)

    # forward + backward of a Linear whose input needs no grad: forward GEMM
    # plus the weight-gradient GEMM
    def fwd_bwd():
        lin(x).sum().backward()
    _, fl, _ = count_flops(fwd_bwd)
    assert fl == 2 * (2 * B * 32 * 16)

    conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
    img = torch.randn(2, 3, 16, 16)
    _, fl, _ = count_flops(conv, img)
    h_out = w_out = 16
    assert fl == 2 * 2 * 8 * h_out * w_out * 3 * 3 * 3


def test_flops_fall_back_to_the_profiler_then_the_user(monkeypatch):
    import torch.utils.flop_counter as fc
    from trainperf.torch_helpers import count_flops
    monkeypatch.delattr(fc, "FlopCounterMode")  # as in a torch without it
    B = 8
    lin = torch.nn.Linear(32, 16)
    _, fl, how = count_flops(lin, torch.randn(B, 32))
    assert how == "profiler" and fl == 2 * B * 32 * 16
    # nothing the profiler can count (no matmul/conv): the user's figure, else None
    _, fl, how = count_flops(torch.relu, torch.randn(4), user_flops=123)
    assert (fl, how) == (123, "user")
    _, fl, how = count_flops(torch.relu, torch.randn(4))
    assert (fl, how) == (None, None)


def test_mfu_needs_a_known_device():
    from trainperf import torch_helpers as th
    # unknown or CPU: no number, a reason
    v, why = th.mfu(1e12, 0.1, device="cpu")
    assert v is None and "cpu" in why
    v, why = th.mfu(1e12, 0.1, device="Imaginary GPU 9000", dtype="bf16")
    assert v is None and "not in the peak" in why
    v, why = th.mfu(None, 0.1, device="NVIDIA H100 80GB HBM3", dtype="bf16")
    assert v is None
    # a known name: the table's dense peak
    fl, dt = 400e12, 1.0
    v, why = th.mfu(fl, dt, device="NVIDIA H100 80GB HBM3", dtype="bf16")
    assert v == pytest.approx(fl / dt / th.PEAK_FLOPS["H100 SXM"]["bf16"])
    assert th.device_key("NVIDIA H100 PCIe") == "H100 PCIe"
    assert th.device_key("NVIDIA L40S") == "L40S" and th.device_key("NVIDIA L4") == "L4"
    assert th.device_key("NVIDIA A100-SXM4-80GB") == "A100"
    assert th.device_key("NVIDIA H200") == "H200 SXM"


def test_cuda_helpers_say_why_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("has CUDA: covered by the GPU run")
    from trainperf import torch_helpers as th
    stats, why = th.cuda_memory_stats()
    assert stats is None and "CUDA" in why
    m = th.CudaMemoryStats(every=1)
    assert m.step() is None and "CUDA" in m.reason
    snap = th.MemorySnapshot()
    assert snap.start() is False and "CUDA" in snap.reason


def test_graph_break_report_finds_the_planted_break(tmp_path):
    from trainperf.torch_helpers import graph_break_report

    def clean(x):
        return torch.relu(x) * 2

    def broken(x):
        y = torch.relu(x)
        if y.sum().item() > 0:   # data-dependent Python branch: a graph break
            y = y * 2
        return y + 1

    x = torch.randn(16)
    rep = graph_break_report(clean, x, out_path=str(tmp_path / "clean.json"))
    assert rep["graph_break_count"] == 0 and rep["breaks"] == []
    rep = graph_break_report(broken, x, out_path=str(tmp_path / "compile.json"))
    assert rep["graph_break_count"] >= 1
    assert rep["compile_s"] > 0
    text = json.dumps(rep["breaks"])
    assert "item" in text.lower()
    assert "test_py_torch.py" in text  # points at the planted line
    assert json.loads((tmp_path / "compile.json").read_text())["graph_break_count"] >= 1


def test_profiler_schedule_writes_windows_and_topk(tmp_path):
    from trainperf.torch_helpers import ProfilerSchedule
    model = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    ps = ProfilerSchedule(wait=1, warmup=1, active=2, repeat=2, out_dir=str(tmp_path), top_k=5)
    with ps:
        for _ in range(10):
            model(x).sum().backward()
            ps.step()
    assert len(ps.windows) == 2
    for trace, top in ps.windows:
        ev = json.loads(open(trace).read())
        names = {e.get("name") for e in ev["traceEvents"]}
        assert "aten::addmm" in names or "aten::linear" in names
        assert "aten::" in open(top).read()
    top = json.loads(open(ps.windows[0][1].replace(".txt", ".json")).read())
    assert 0 < len(top["ops"]) <= 5


DECORATED = """
    import sys, json, torch, trainperf
    from torch import nn
    out = sys.argv[1]
    trainperf.start(out, interval_s=0.2)
    B, D, H = 16, 32, 64
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @trainperf.monitor(samples=lambda x, y: x.shape[0], tokens=lambda x, y: x.numel(),
                       flops_steps=[2], cuda_memory_every=2, memory_snapshot_step=3,
                       profile=dict(wait=1, warmup=1, active=2, top_k=5))
    def train_step(x, y):
        opt.zero_grad()
        with trainperf.phase("forward"):
            loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    for i in range(7):
        train_step(torch.randn(B, D), torch.randn(B, 1))
    trainperf.stop()
    s = train_step.stats
    print(json.dumps({"steps": s.steps, "samples": s.samples, "flops": s.flops,
                      "method": s.flops_method, "mfu": s.mfu, "mfu_reason": s.mfu_reason,
                      "skipped": s.skipped, "windows": s.profiler_windows}))
"""


def test_decorator_records_steps_flops_and_says_why_for_mfu(tmp_path):
    out = tmp_path / "run"
    res = run_py([script(tmp_path, DECORATED), out])
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    B, D, H = 16, 32, 64
    rows = steps(out)
    assert len(rows) == info["steps"] == 7
    assert all(int(r["samples"]) == B and int(r["tokens"]) == B * D for r in rows)
    assert all(int(r["forward_ns"]) > 0 for r in rows)
    # forward GEMMs, then backward: grad-input of the second layer, weight grads of both
    fwd = 2 * B * (D * H + H * 1)
    bwd = 2 * B * (D * H + H * 1) + 2 * B * H * 1
    assert info["flops"] == {"2": fwd + bwd} and info["method"] == "FlopCounterMode"
    # one profiler window (steps 2-3 active after wait 1 and warmup 1), written to the run dir
    assert len(info["windows"]) == 1
    trace, top = info["windows"][0]
    assert os.path.dirname(trace) == str(out / "profile")
    names = {e.get("name") for e in json.loads(open(trace).read())["traceEvents"]}
    assert "aten::addmm" in names  # the model's Linear layers ran inside the window
    rows = json.loads(open(top.replace(".txt", ".json")).read())["ops"]
    assert 0 < len(rows) <= 5 and len(open(top).read().splitlines()) <= 5 + 6
    if not torch.cuda.is_available():
        assert info["mfu"] is None and info["mfu_reason"]
        assert "CUDA" in info["skipped"]["cuda_memory"]
        assert "CUDA" in info["skipped"]["memory_snapshot"]


def test_auto_hook_counts_optimizer_steps_and_samples(tmp_path):
    out = tmp_path / "run"
    runner = script(tmp_path, AUTO_EMBEDDED, "runner.py")
    N, B, ACC = 6, 8, 2
    res = run_py([runner, out, EXAMPLES / "train_mlp.py", "--steps", N, "--batch", B,
                  "--accum", ACC])
    assert res.returncode == 0, res.stderr
    rows = steps(out)
    assert len(rows) == N  # one step per optimizer step, not per micro-batch
    assert all(int(r["samples"]) == B * ACC for r in rows)
    for col in ("data_ns", "forward_ns", "backward_ns", "optimizer_ns"):
        assert all(int(r[col]) > 0 for r in rows), col


TOKEN_BATCHES = """
    import torch
    from torch import nn
    ids = torch.randint(0, 50, (24, 12))            # token ids: [batch, length]
    img = torch.rand(24, 3, 4, 4)                   # images: floats, no tokens
    emb, head, conv = nn.Embedding(50, 8), nn.Linear(8 * 12, 2), nn.Conv2d(3, 2, 3)
    params = list(emb.parameters()) + list(head.parameters()) + list(conv.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids, ids[:, 0]), batch_size=4)
    for x, y in dl:
        head(emb(x).flatten(1)).sum().backward(); opt.step(); opt.zero_grad()
    for x, in torch.utils.data.DataLoader(torch.utils.data.TensorDataset(img), batch_size=6):
        conv(x).sum().backward(); opt.step(); opt.zero_grad()
"""


def test_auto_hook_counts_tokens_of_token_id_batches(tmp_path):
    # a (token ids, ...) batch counts batch x length tokens; image batches none
    out = tmp_path / "run"
    res = run_py([script(tmp_path, AUTO_EMBEDDED, "runner.py"), out,
                  script(tmp_path, TOKEN_BATCHES)])
    assert res.returncode == 0, res.stderr
    rows = steps(out)
    assert [(int(r["samples"]), int(r["tokens"])) for r in rows] == [(4, 48)] * 6 + [(6, 0)] * 4


TWO_OPTIMIZERS = """
    import torch
    from torch import nn
    g, d = nn.Linear(4, 4), nn.Linear(4, 1)
    opt_g = torch.optim.SGD(g.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(d.parameters(), lr=0.01)
    for i in range(6):          # a GAN: both optimizers step every iteration
        d(g(torch.randn(2, 4)).detach()).sum().backward(); opt_d.step(); opt_d.zero_grad()
        d(g(torch.randn(2, 4))).sum().backward(); opt_g.step(); opt_g.zero_grad()
    opt_2 = torch.optim.Adam(g.parameters())   # a second stage with a new optimizer
    for i in range(5):
        g(torch.randn(2, 4)).sum().backward(); opt_2.step(); opt_2.zero_grad()
"""


def test_auto_hook_steps_with_several_optimizers(tmp_path):
    out = tmp_path / "run"
    res = run_py([script(tmp_path, AUTO_EMBEDDED, "runner.py"), out,
                  script(tmp_path, TWO_OPTIMIZERS)])
    assert res.returncode == 0, res.stderr
    # 6 GAN iterations = 6 steps; the new optimizer takes over on its second
    # step in a row, so its 5 steps give 4 boundaries
    assert len(steps(out)) == 6 + 4


C_HOOKS = """
    import threading, torch, trainperf
    from trainperf import _autohook, _state
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data import dataloader as dl
    core = trainperf._core
    st = _state.st
    assert type(st).__name__ == "AutoState", type(st)
    assert type(dl._BaseDataLoaderIter.__next__).__name__ == "DataNext"
    assert dl._BaseDataLoaderIter.__next__.__wrapped__ is not None

    class Dicts(Dataset):              # batches that are not (tensor, ...)
        def __len__(self): return 12
        def __getitem__(self, i): return {"input_ids": torch.zeros(5, dtype=torch.long)}

    class Bad(Dataset):                # a failing batch: the error reaches the script
        def __len__(self): return 4
        def __getitem__(self, i): raise KeyError("boom")

    st.samples = st.tokens = 0
    n = sum(1 for _ in DataLoader(Dicts(), batch_size=4))   # counted by the Python fallback
    assert n == 3 and st.samples == 12 and st.tokens == 60, (n, st.samples, st.tokens)
    try:
        next(iter(DataLoader(Bad(), batch_size=2)))
        raise SystemExit("no error")
    except KeyError:
        pass
    assert st.in_data == 0             # left the data phase on the error (and on StopIteration)
    seen = []                          # the state is per thread
    st.samples = 7
    t = threading.Thread(target=lambda: seen.append((st.samples, st.open, st.in_data)))
    t.start(); t.join()
    assert seen == [(0, False, 0)] and st.samples == 7, seen
    print("ok")
"""


def test_auto_hook_c_hooks(tmp_path):
    """The C DataLoader wrapper (what test_auto_hook_counts_optimizer_steps_and_samples
    measures end to end) binds as a method, counts other batches through
    Python, leaves the data phase on errors, and its state is per thread."""
    out = tmp_path / "run"
    res = run_py([script(tmp_path, AUTO_EMBEDDED, "runner.py"), out,
                  script(tmp_path, C_HOOKS)])
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stdout + res.stderr


EXPLICIT_WITH_LOADER = """
    import sys, torch, trainperf
    from torch.utils.data import DataLoader, TensorDataset
    N = int(sys.argv[1])
    data = TensorDataset(torch.randn(N * 4, 8), torch.randn(N * 4, 1))
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(data, batch_size=4):
        with trainperf.step(samples=len(x)):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
"""


def test_auto_hook_steps_down_for_the_explicit_api(tmp_path):
    out = tmp_path / "run"
    runner = script(tmp_path, AUTO_EMBEDDED, "runner.py")
    N = 5
    res = run_py([runner, out, script(tmp_path, EXPLICIT_WITH_LOADER), N])
    assert res.returncode == 0, res.stderr
    rows = steps(out)
    assert len(rows) == N
    assert col_sum(rows, "samples") == N * 4
    # the automatic phases stay (nested same-name ranges are counted once)
    assert all(int(r["optimizer_ns"]) > 0 for r in rows)


def test_auto_hook_leaves_results_unchanged(tmp_path):
    args = [EXAMPLES / "train_mlp.py", "--steps", 8, "--accum", 2]
    plain = run_py(args)
    assert plain.returncode == 0, plain.stderr
    runner = script(tmp_path, AUTO_EMBEDDED, "runner.py")
    watched = run_py([runner, tmp_path / "run", *args])
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.split() == plain.stdout.split()
    assert len(steps(tmp_path / "run")) == 8


LIGHTNING = """
    import sys, torch, lightning as L
    from torch.utils.data import DataLoader, TensorDataset
    from trainperf.lightning import TrainperfCallback
    out, max_steps, accum = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                           torch.nn.Linear(16, 1))
        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    cb = TrainperfCallback(start=True, run_dir=out, interval_s=0.2)
    trainer = L.Trainer(max_steps=max_steps, accumulate_grad_batches=accum, callbacks=[cb],
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(Tiny(), DataLoader(data, batch_size=4))
    print(trainer.global_step, cb.steps)
"""


@pytest.mark.parametrize("accum", [1, 2])
def test_lightning_callback_records_each_optimizer_step(tmp_path, accum):
    pytest.importorskip("lightning")
    out = tmp_path / "run"
    res = run_py([script(tmp_path, LIGHTNING), out, 5, accum])
    assert res.returncode == 0, res.stderr
    gs, n = map(int, res.stdout.split()[-2:])
    assert gs == n == 5
    rows = steps(out)
    assert len(rows) == 5
    assert all(int(r["samples"]) == 4 * accum for r in rows)
    for col in ("forward_ns", "backward_ns", "optimizer_ns", "data_ns"):
        assert all(int(r[col]) > 0 for r in rows), col
    phases = ("data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns", "eval_ns",
              "checkpoint_ns")
    for r in rows:  # phases nest: never more than the step (issue 12)
        assert sum(int(r[c]) for c in phases) <= int(r["interval_ns"]), r
    assert_steps_begin_at_their_data_wait(rows)


HF = """
    import sys, time, torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
    from trainperf.hf import TrainperfCallback
    out, max_steps, accum, tmp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

    class Toks(torch.utils.data.Dataset):
        def __init__(self, n, seq):
            g = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, 100, (n, seq), generator=g)
            self.lab = torch.randint(0, 2, (n,), generator=g)
        def __len__(self): return len(self.ids)
        def __getitem__(self, i):
            time.sleep(0.003)  # a data wait the steps must hold
            return {"input_ids": self.ids[i], "labels": self.lab[i]}

    cfg = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32, num_labels=2)
    model = BertForSequenceClassification(cfg)
    args = TrainingArguments(output_dir=tmp, max_steps=max_steps, per_device_train_batch_size=4,
                             gradient_accumulation_steps=accum, report_to=[], save_strategy="no",
                             logging_strategy="no", use_cpu=True, dataloader_num_workers=0,
                             disable_tqdm=True)
    cb = TrainperfCallback(start=True, run_dir=out, interval_s=0.2)
    Trainer(model=model, args=args, train_dataset=Toks(64, 12), callbacks=[cb]).train()
    print(cb.steps)
"""


@pytest.mark.parametrize("accum", [1, 2])
def test_hf_trainer_callback_records_each_optimizer_step(tmp_path, accum):
    pytest.importorskip("transformers")
    out = tmp_path / "run"
    res = run_py([script(tmp_path, HF), out, 4, accum, tmp_path / "hf"])
    assert res.returncode == 0, res.stderr
    assert int(res.stdout.split()[-1]) == 4
    rows = steps(out)
    assert len(rows) == 4
    assert all(int(r["samples"]) == 4 * accum for r in rows)
    assert all(int(r["tokens"]) == 4 * accum * 12 for r in rows)
    for col in ("forward_ns", "backward_ns", "optimizer_ns", "data_ns"):
        assert all(int(r[col]) > 0 for r in rows), col
    assert_steps_begin_at_their_data_wait(rows)


def assert_steps_begin_at_their_data_wait(rows):
    """A callback's step begins where its data wait begins, as the zero-code
    hook's (issue 32 item 4): the phases, data included, fit duration_ns,
    and duration_ns is interval_ns but for the callback's own instants
    between a step's end and the next one's begin."""
    phases = ("data_ns", "forward_ns", "backward_ns", "optimizer_ns", "comm_ns", "eval_ns",
              "checkpoint_ns")
    for r in rows:
        dur, iv = int(r["duration_ns"]), int(r["interval_ns"])
        assert sum(int(r[c]) for c in phases) <= dur, r
        if int(r["step"]) > 0:
            assert iv - dur <= max(2e6, 0.05 * iv), r


COMPILED = """
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = torch.compile(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("loss %.17g" % loss.item())
"""


@pytest.mark.slow
def test_auto_hook_with_torch_compile(tmp_path):
    # The top-level module is found without global module hooks, which would
    # make torch.compile warn and fire hooks twice.
    s = script(tmp_path, COMPILED)
    plain = run_py([s])
    assert plain.returncode == 0, plain.stderr
    res = run_py([script(tmp_path, AUTO_EMBEDDED, "runner.py"), tmp_path / "run", s])
    assert res.returncode == 0, res.stderr
    assert "global hooks" not in res.stderr
    assert res.stdout.split() == plain.stdout.split()
    rows = steps(tmp_path / "run")
    assert len(rows) == 5
    assert all(int(r["forward_ns"]) > 0 and int(r["backward_ns"]) > 0 for r in rows)


DECLARED = """
    import sys, torch, trainperf
    out = sys.argv[1]
    trainperf.start(out, interval_s=0.2)
    model = torch.nn.Linear(32, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @trainperf.monitor(flops=123456789, samples=16)
    def train_step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    for i in range(8):
        train_step(torch.randn(16, 32))
    trainperf.stop()
"""


def test_declared_flops_give_the_report_its_mfu(tmp_path, run_cli):
    out = tmp_path / "run"
    res = run_py([script(tmp_path, DECLARED), out], TRAINPERF_PEAK_FLOPS="2e9")
    assert res.returncode == 0, res.stderr
    fl = json.loads((out / "flops" / "flops-rank0-declared.json").read_text())
    assert fl["method"] == "declared" and fl["total_flops"] == 123456789
    assert fl["peak_flops_per_s"] == 2e9 and "TRAINPERF_PEAK_FLOPS" in fl["peak_source"]
    p = run_cli("report", out, "--format", "json")
    assert p.returncode == 0, p.stderr
    job = json.loads(p.stdout)["job"]
    warm = [int(r["interval_ns"]) for r in steps(out) if r["step"] != "0"]
    assert job["flops_per_s"] == pytest.approx(123456789 * len(warm) / (sum(warm) / 1e9), rel=1e-6)
    assert job["mfu"] == pytest.approx(job["flops_per_s"] / 2e9)
    text = run_cli("report", out).stdout
    assert "MODEL FLOPS" in text and "MFU %.1f%%" % (100 * job["mfu"]) in text
    # a count that is not one is refused with a clear error
    import trainperf
    with pytest.raises(ValueError, match="positive"):
        trainperf.declare_flops(0)


def test_flops_step_line_says_it_covers_one_step(tmp_path):
    """`run --flops-step N` prints TFLOP/s and MFU from one step's time; the
    report's figures cover every step, so the line says which span it has."""
    require_extension()
    from conftest import BUILD
    out = tmp_path / "run"
    p = subprocess.run([str(BUILD / "trainperf"), "run", "--quiet", "--out", str(out), "--flops-step", "2",
                        "--", sys.executable, str(EXAMPLES / "train_mlp.py"), "--steps", "6"],
                       capture_output=True, text=True, timeout=300, env=clean_env(), cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    line = next(l for l in p.stderr.splitlines() if "TFLOP/s at" in l)
    assert line.startswith("trainperf: step 2: ") and line.endswith(
        "(the step after the counted one alone; the report's figures cover every step)"), line
