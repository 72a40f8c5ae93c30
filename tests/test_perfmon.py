"""trainperf.performance_monitor (the profiling guides' step decorator) and
@trainperf.monitor sharing its code: real PyTorch training in child processes."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from pyhelp import PYDIR, ROOT, clean_env, require_extension, steps

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SEED = ROOT / "tests" / "data" / "scripts" / "seed_perfmon.py"


@pytest.fixture(autouse=True)
def _ext():
    require_extension()


def run_seed(cwd, *args, env=None, cmd=None):
    e = clean_env()
    e.update(env or {})
    return subprocess.run((cmd or [sys.executable]) + [str(SEED), *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=e, cwd=str(cwd))


def the_run(cwd):
    runs = [p for p in (cwd / "trainperf-runs").iterdir() if p.name != "latest"]
    assert len(runs) == 1
    return runs[0]


def test_seed_script_runs_unchanged_and_prints_its_tables(tmp_path):
    res = run_seed(tmp_path, "--steps", 8)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "done steps 8" in out
    # the schedule at start, before any table
    assert out.index("profiler schedule: skip_first 0, wait 1, warmup 1, active 2, repeat 1: "
                     "steps 2-3 recorded") < out.index("FLOPs by module on step 3")
    # FLOP table by module of the model, then a TFLOP/s line from the next step
    table = out[out.index("FLOPs by module on step 3"):]
    assert "Sequential.0" in table and "Sequential.2" in table
    assert "TFLOP/s" in out and "MFU unknown" in out
    # top-10 operators after the window
    top = out[out.index("top 10 operators"):]
    assert "aten::" in top
    # CPU: the CUDA snapshot and the comm log say why they are skipped, once
    assert out.count("memory snapshot skipped: CUDA is not available") == 1
    assert out.count("communication log skipped: not a distributed run") == 1
    run = the_run(tmp_path)
    assert len(steps(run)) == 8  # an embedded collector recorded every step
    assert sorted(os.listdir(run / "profile")) == [
        "top-rank0-step2.json", "top-rank0-step2.txt", "trace-rank0-step2.json"]
    fl = json.loads((run / "flops" / "flops-rank0-step3.json").read_text())
    B, D, H, O = 16, 32, 64, 8
    fwd = 2 * B * (D * H + H * O)
    # backward: weight grads of both layers, input grad of the second one
    bwd = 2 * B * (D * H + H * O) + 2 * B * H * O
    assert fl["total_flops"] == fwd + bwd
    assert fl["by_module"]["Sequential.0"] == 2 * (2 * B * D * H)
    assert fl["tflops_per_s"] > 0


def test_enabled_false_is_a_no_op(tmp_path):
    res = run_seed(tmp_path, "--steps", 4, "--disabled")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines() == [res.stdout.strip().splitlines()[-1]]
    assert "done steps 4" in res.stdout
    assert not (tmp_path / "trainperf-runs").exists()


def test_under_trainperf_run_it_writes_into_the_run_directory(cli, tmp_path):
    out = tmp_path / "run"
    e = clean_env()
    e.pop("PYTHONPATH")
    res = subprocess.run([cli, "run", "--quiet", "--out", str(out), "--", sys.executable,
                          str(SEED), "--steps", "6"], capture_output=True, text=True, timeout=300,
                         env=dict(e, PYTHONPATH=str(PYDIR)), cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "trainperf-runs").exists()
    assert len(steps(out)) == 6  # counted once: the decorator's steps, not the auto hook's too
    assert (out / "profile" / "trace-rank0-step2.json").exists()
    rep = subprocess.run([cli, "report", str(out), "--format", "json"], capture_output=True,
                         text=True, timeout=120)
    assert json.loads(rep.stdout)["profiler"]["files"] == 1


MONITOR_NAMES = """
    import sys, json, torch, trainperf
    model = torch.nn.Linear(8, 8)

    @trainperf.monitor(model, enabled=True, flop_counter_step=1, wait=0, warmup=0, active=1)
    def step(x):
        model(x).sum().backward()

    @trainperf.monitor(enabled=False, flop_counter_step=1)
    def plain(x):
        return 7

    for _ in range(3):
        step(torch.randn(4, 8))
    step.close()
    assert plain(None) == 7 and not hasattr(plain, "stats")
    print(json.dumps({"flops": step.stats.flops, "windows": len(step.stats.profiler_windows)}))
"""


def test_monitor_takes_the_seed_names(tmp_path):
    import textwrap
    s = tmp_path / "m.py"
    s.write_text(textwrap.dedent(MONITOR_NAMES))
    res = subprocess.run([sys.executable, str(s)], capture_output=True, text=True, timeout=300,
                         env=clean_env(), cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info == {"flops": {"1": 2 * 4 * 8 * 8 * 2}, "windows": 1}
    assert res.stdout.count("\n") == 1  # @monitor stays quiet unless verbose=True


@pytest.mark.once
def test_seed_script_under_torchrun_writes_per_rank_traces(cli, tmp_path):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not on PATH")
    out = tmp_path / "run"
    res = subprocess.run([cli, "run", "--quiet", "--out", str(out), "--", torchrun,
                          "--nproc-per-node", "2", str(SEED), "--steps", "6"],
                         capture_output=True, text=True, timeout=300,
                         env=dict(clean_env(), PYTHONPATH=str(PYDIR)), cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    names = sorted(os.listdir(out / "profile"))
    assert [n for n in names if n.startswith("trace-")] == [
        "trace-rank0-step2.json", "trace-rank1-step2.json"]
    assert sorted(os.listdir(out / "flops")) == [
        "flops-rank0-step3.json", "flops-rank0-step3.txt",
        "flops-rank1-step3.json", "flops-rank1-step3.txt"]
    # rank 0 prints, once
    assert res.stdout.count("FLOPs by module on step 3 (rank 0)") == 1
    assert "rank 1)" not in res.stdout
    # comm_logger_step=2: every op of step 2 in the distributed hooks' log, on each rank
    assert "every collective of step 2 is logged" in res.stdout
    import csv
    for r in (0, 1):
        with open(out / "comm" / ("ops-rank%d.csv" % r), newline="") as f:
            rows = list(csv.DictReader(f))
        assert {int(x["step"]) for x in rows} == {2}  # only the chosen step is kept
        assert any("all_reduce" in x["op"] for x in rows)
