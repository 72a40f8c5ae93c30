"""Framework callbacks that log: Lightning (trainer.logger, thresholds as
alerts, a profiler window, the warn-once), Hugging Face (on_log), and the
graph-break finder. Real training in child processes."""
import csv
import json
import subprocess
import sys
import textwrap

import pytest

from pyhelp import clean_env, require_extension, steps

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _ext():
    require_extension()


def run_script(tmp_path, body, *args):
    p = tmp_path / "s.py"
    p.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(p), *map(str, args)], capture_output=True,
                          text=True, timeout=300, env=clean_env(), cwd=str(tmp_path))


LIGHTNING = """
    import sys, time, torch, warnings, lightning as L
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader, Dataset
    from trainperf.lightning import TrainperfCallback
    out, mode = sys.argv[1], sys.argv[2]

    class Slow(Dataset):
        def __len__(self): return 256
        def __getitem__(self, i):
            time.sleep(0.002)  # a slow decoder: the batch load time is real
            g = torch.Generator().manual_seed(i)
            return torch.randn(8, generator=g), torch.randn(1, generator=g)

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                           torch.nn.Linear(16, 1))
        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss)  # Lightning's own row, on its own step axis
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    if mode == "full":
        cb = TrainperfCallback(start=True, run_dir=out, interval_s=0.1, log_every_n_steps=2,
                               memory_threshold=0.001, data_wait_threshold=0.05,
                               profile=dict(wait=1, warmup=1, active=2), verbose=False)
    else:
        cb = TrainperfCallback(log_every_n_steps=2)
    logger = CSVLogger(out + "-logs", name="csv")
    trainer = L.Trainer(max_steps=8, callbacks=[cb], logger=logger, log_every_n_steps=2,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        trainer.fit(Tiny(), DataLoader(Slow(), batch_size=4))
    mine = [str(x.message) for x in w if "trainperf" in str(x.message)]
    print(json.dumps({"log_dir": logger.log_dir, "warnings": mine, "alerts": cb.alerts,
                      "logged": len(cb.logged)}) if True else "")
""".replace("import sys,", "import json, sys,")


def test_lightning_figures_reach_the_csv_logger_and_thresholds_fire(cli, tmp_path):
    pytest.importorskip("lightning")
    out = tmp_path / "run"
    res = run_script(tmp_path, LIGHTNING, out, "full")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["logged"] == 4  # steps 2, 4, 6, 8
    with open(f'{info["log_dir"]}/metrics.csv', newline="") as f:
        rows = list(csv.DictReader(f))
    got = [r for r in rows if r.get("trainperf/samples_per_s")]
    # on Lightning's own step axis: the same steps as its rows of the same batches
    # (log_every_n_steps=2: batches 2, 4, 6, 8, which Lightning numbers 1, 3, 5, 7)
    own = [int(r["step"]) for r in rows if r.get("loss")]
    assert [int(r["step"]) for r in got] == own == [1, 3, 5, 7], (own, got)
    for r in got:
        assert float(r["trainperf/samples_per_s"]) > 0
        # each batch of 4 sleeps 4 x 2 ms in the dataset
        assert float(r["trainperf/batch_load_ms_p50"]) >= 8.0
        assert float(r["trainperf/batch_load_ms_p99"]) >= float(r["trainperf/batch_load_ms_p50"])
    # the collector's resources too (one owner: its metrics.csv)
    assert any(r.get("trainperf/host_memory_used") for r in got)
    # thresholds became alert rules: fired, warned, in the run's alerts.jsonl
    fired = {a["rule"] for a in info["alerts"] if a["state"] == "fired"}
    assert {"memory_threshold", "data_wait_threshold"} <= fired
    assert any("trainperf alert: memory_threshold" in w for w in info["warnings"])
    lines = [json.loads(ln) for ln in (out / "alerts.jsonl").read_text().splitlines()]
    assert {"memory_threshold", "data_wait_threshold"} <= {a["rule"] for a in lines}
    summ = json.loads((out / "summary.json").read_text())
    assert len(steps(out)) == 8 and summ
    # the profiler window: a trace per rank and step, analysed by the report
    assert (out / "profile" / "trace-rank0-step2.json").exists()
    rep = subprocess.run([cli, "report", str(out), "--format", "json"], capture_output=True,
                         text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["profiler"]["files"] == 1


def test_lightning_warns_once_when_nothing_collects(tmp_path):
    pytest.importorskip("lightning")
    res = run_script(tmp_path, LIGHTNING, tmp_path / "run", "bare")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    idle = [w for w in info["warnings"] if "nothing is collecting" in w]
    assert len(idle) == 1
    # its own figures are still logged
    with open(f'{info["log_dir"]}/metrics.csv', newline="") as f:
        assert any(r.get("trainperf/samples_per_s") for r in csv.DictReader(f))


HF = """
    import json, sys, torch, warnings
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
    from transformers import TrainerCallback
    from trainperf.hf import attach
    out, tmp = sys.argv[1], sys.argv[2]

    class Toks(torch.utils.data.Dataset):
        def __init__(self, n, seq):
            g = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, 100, (n, seq), generator=g)
            self.lab = torch.randint(0, 2, (n,), generator=g)
        def __len__(self): return len(self.ids)
        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.lab[i]}

    class Seen(TrainerCallback):  # stands where report_to integrations stand
        def __init__(self): self.logs = []
        def on_log(self, args, state, control, logs=None, **kw): self.logs.append(dict(logs))

    cfg = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32, num_labels=2)
    args = TrainingArguments(output_dir=tmp, max_steps=6, per_device_train_batch_size=4,
                             report_to=[], save_strategy="no", logging_steps=2, use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True)
    seen = Seen()
    tr = Trainer(model=BertForSequenceClassification(cfg), args=args,
                 train_dataset=Toks(64, 12), callbacks=[seen])
    cb = attach(tr, start=True, run_dir=out, interval_s=0.1, memory_threshold=0.001)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tr.train()
    hist = [h for h in tr.state.log_history if "trainperf/samples_per_s" in h]
    print(json.dumps({"hist_steps": [h["step"] for h in hist],
                      "seen": [l for l in seen.logs if "trainperf/samples_per_s" in l],
                      "alerts": [a["rule"] for a in cb.alerts],
                      "warned": any("memory_threshold" in str(x.message) for x in w)}))
"""


def test_hf_on_log_carries_the_figures_and_thresholds_fire(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "run"
    res = run_script(tmp_path, HF, out, tmp_path / "hf")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["hist_steps"] == [2, 4, 6]
    assert len(info["seen"]) == 3  # a later callback (an integration) sees them
    assert all(s["trainperf/samples_per_s"] > 0 and "trainperf/batch_load_ms_p95" in s
               for s in info["seen"])
    assert "memory_threshold" in info["alerts"] and info["warned"]
    assert "memory_threshold" in (out / "alerts.jsonl").read_text()
    assert len(steps(out)) == 6


GRAPH_BREAKS = """
    import json, sys, torch, lightning as L
    from torch.utils.data import DataLoader, TensorDataset
    from trainperf.lightning import FindGraphBreaks
    root = sys.argv[1]

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)
        def forward(self, x):
            y = self.lin(x)
            scale = y.abs().max().item()  # PLANTED BREAK
            return y / (1.0 + scale)
        def training_step(self, batch, i):
            x, t = batch
            return torch.nn.functional.mse_loss(self(x), t)
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    cb = FindGraphBreaks(fullgraph=True)
    trainer = L.Trainer(max_steps=2, callbacks=[cb], logger=False, default_root_dir=root,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    trainer.fit(Net(), DataLoader(data, batch_size=4))
    print(json.dumps({"n": cb.report["graph_break_count"], "log": cb.report["log_path"],
                      "fullgraph": cb.report["fullgraph"]["ok"], "steps": trainer.global_step}))
"""


def test_find_graph_breaks_names_the_planted_break(tmp_path):
    pytest.importorskip("lightning")
    res = run_script(tmp_path, GRAPH_BREAKS, tmp_path / "root")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    # (torch 2.13 captures .item() under fullgraph=True: the explain pass breaks, fullgraph holds)
    assert info["steps"] == 2 and info["n"] >= 1 and info["fullgraph"] in (True, False)
    log = open(info["log"]).read()
    planted = next(i for i, ln in enumerate(GRAPH_BREAKS.splitlines())
                   if "PLANTED BREAK" in ln)
    line_no = planted + 1  # splitlines() is 0-based; the file keeps the leading newline
    assert f"s.py:{line_no} in forward" in log
    assert "scale = y.abs().max().item()" in log
    assert "Tensor.item()" in log
    assert "fix: " in log and "capture_scalar_outputs" in log
    assert ("fullgraph=True: fails" in log) == (not info["fullgraph"])
    assert "fullgraph=True: " in log
    assert "graph break" in res.stdout


HF_BREAKS = """
    import json, sys, torch
    from transformers import Trainer, TrainingArguments
    from trainperf.hf import FindGraphBreaks
    tmp = sys.argv[1]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)
        def forward(self, x, labels=None):
            y = self.lin(x)
            print("forward")  # PLANTED BREAK
            loss = torch.nn.functional.mse_loss(y.squeeze(-1), labels)
            return {"loss": loss}

    class Data(torch.utils.data.Dataset):
        def __len__(self): return 32
        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"x": torch.randn(8, generator=g), "labels": torch.randn((), generator=g)}

    cb = FindGraphBreaks(fullgraph=True)
    args = TrainingArguments(output_dir=tmp, max_steps=2, per_device_train_batch_size=4,
                             report_to=[], save_strategy="no", use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True,
                             remove_unused_columns=False)
    tr = Trainer(model=Net(), args=args, train_dataset=Data(), callbacks=[cb])
    tr.train()
    print(json.dumps({"n": cb.report["graph_break_count"], "log": cb.report["log_path"],
                      "fullgraph": cb.report["fullgraph"]["ok"], "steps": tr.state.global_step}))
"""


def test_hf_find_graph_breaks_names_the_planted_break(tmp_path):
    pytest.importorskip("transformers")
    res = run_script(tmp_path, HF_BREAKS, tmp_path / "out")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["steps"] == 2 and info["n"] >= 1 and info["fullgraph"] is False
    log = open(info["log"]).read()
    line_no = next(i for i, ln in enumerate(HF_BREAKS.splitlines()) if "PLANTED" in ln) + 1
    assert f"s.py:{line_no} in forward" in log and 'print("forward")' in log
    assert "print" in log and "fix: " in log
    assert "fullgraph=True: fails" in log
