"""`trainperf run --profile/--flops-step/--memory-every/--comm-log-step`: the
zero-code profiling hooks, end to end through real PyTorch training."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from pyhelp import EXAMPLES, ROOT, require_extension

DATA = ROOT / "tests" / "data" / "scripts"


def env_without_trainperf(**extra):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("TRAINPERF_") or k == "PYTHONPATH":
            del e[k]
    e.update(extra)
    return e


def run(cli, *args, env=None, timeout=300):
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or env_without_trainperf(), cwd=str(ROOT))


@pytest.mark.parametrize("opts,msg", [
    (["--profile", "1,x"], "--profile '1,x': expected WAIT,WARMUP,ACTIVE"),
    (["--profile", "1,1,0"], "ACTIVE at least 1"),
    (["--profile", "1,1,3,1,1"], "expected WAIT,WARMUP,ACTIVE"),
    (["--memory-every", "0"], "--memory-every '0'"),
    (["--flops-step", "-1"], "--flops-step '-1'"),
    (["--peak-flops", "fast"], "--peak-flops 'fast': expected a peak in FLOP/s"),
    (["--peak-flops", "0"], "--peak-flops '0'"),
    (["--profile-memory=yes"], "--profile-memory takes no value"),
    (["--no-auto", "--profile", "1,1,1"], "--profile needs the Python auto-instrumentation"),
])
def test_bad_profiling_options_stop_before_anything_runs(cli, tmp_path, opts, msg):
    res = run(cli, "run", "--out", tmp_path / "run", *opts, "--", "true")
    assert res.returncode == 2
    assert msg in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_user_trainperf_auto_0_is_an_opt_out(cli, tmp_path):
    # The documented opt-out: run must not overwrite the user's TRAINPERF_AUTO=0.
    res = run(cli, "run", "--quiet", "--out", tmp_path / "run", "--", "env",
              env=env_without_trainperf(TRAINPERF_AUTO="0"))
    assert res.returncode == 0, res.stderr
    assert "TRAINPERF_AUTO=0" in res.stdout.splitlines()
    res = run(cli, "run", "--out", tmp_path / "run2", "--profile", "1,1,1", "--", "true",
              env=env_without_trainperf(TRAINPERF_AUTO="0"))
    assert res.returncode == 2 and "TRAINPERF_AUTO=0" in res.stderr


def test_profiling_flags_reach_the_child_as_documented_variables(cli, tmp_path):
    res = run(cli, "run", "--quiet", "--out", tmp_path / "run", "--profile", "2,1,3",
              "--record-shapes", "--flops-step", "4", "--flops-step", "5", "--peak-flops",
              "312e12", "--", "env",
              env=env_without_trainperf(TRAINPERF_FLOPS_STEP="9"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "TRAINPERF_PROFILE=2,1,3,1" in lines
    assert "TRAINPERF_RECORD_SHAPES=1" in lines
    assert "TRAINPERF_PEAK_FLOPS=312e12" in lines
    assert [ln for ln in lines if ln.startswith("TRAINPERF_FLOPS_STEP=")] == \
        ["TRAINPERF_FLOPS_STEP=5"]


@pytest.mark.torch
def test_profile_window_flops_and_cpu_only_notes(cli, tmp_path):
    pytest.importorskip("torch")
    require_extension()
    out = tmp_path / "run"
    res = run(cli, "run", "--quiet", "--out", out, "--profile", "1,1,3", "--flops-step", "2",
              "--memory-every", "5", "--", sys.executable, EXAMPLES / "train_mlp.py",
              "--steps", "10")
    assert res.returncode == 0, res.stderr
    prof = out / "profile"
    assert sorted(p.name for p in prof.iterdir()) == [
        "top-rank0-step2.json", "top-rank0-step2.txt", "trace-rank0-step2.json"]
    trace = json.loads((prof / "trace-rank0-step2.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"} <= names
    assert "ProfilerStep#5" not in names
    # FLOPs by module of the MLP (Linear layers 0, 2, 4), with a rate
    fl = json.loads((out / "flops" / "flops-rank0-step2.json").read_text())
    assert fl["step"] == 2 and fl["total_flops"] > 0
    linears = {k: v for k, v in fl["by_module"].items() if k.count(".") == 1}
    assert len(linears) == 3 and all(v > 0 for v in linears.values())
    assert sum(linears.values()) <= fl["total_flops"]
    assert fl["tflops_per_s"] > 0 and fl["mfu"] is None and "CUDA" in fl["mfu_reason"]
    assert "FLOPs by module on step 2" in res.stderr
    # CUDA-only parts say once why they are skipped
    assert res.stderr.count("CUDA memory stats skipped: CUDA is not available") == 1
    # the report analyses the window
    rep = run(cli, "report", out, "--format", "json")
    assert rep.returncode == 0, rep.stderr
    p = json.loads(rep.stdout)["profiler"]
    assert p["files"] == 1 and p["not_analysed"] == []


@pytest.mark.torch
@pytest.mark.once
def test_torchrun_ranks_each_leave_a_trace_the_report_analyses(cli, tmp_path):
    pytest.importorskip("torch")
    require_extension()
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not on PATH")
    out = tmp_path / "run"
    res = run(cli, "run", "--quiet", "--out", out, "--profile", "1,1,3", "--comm-log-step", "5",
              "--", torchrun, "--nproc-per-node", "2", DATA / "ddp_train.py", "--steps", "8")
    assert res.returncode == 0, res.stderr
    traces = sorted(p.name for p in (out / "profile").glob("trace-*.json"))
    assert traces == ["trace-rank0-step2.json", "trace-rank1-step2.json"]
    # only rank 0 speaks
    assert res.stderr.count("profiler window written") == 1
    rep = run(cli, "report", out, "--format", "json")
    assert rep.returncode == 0, rep.stderr
    p = json.loads(rep.stdout)["profiler"]
    assert p["files"] == 2 and p["not_analysed"] == []
    assert sorted(r["rank"] for r in p["analysis"]["ranks"]) == [0, 1]
    # --comm-log-step 5: every collective of that step, per rank (trainperf._comm)
    import csv
    for r in (0, 1):
        with open(out / "comm" / ("ops-rank%d.csv" % r), newline="") as f:
            rows = list(csv.DictReader(f))
        assert rows and {int(x["step"]) for x in rows} == {5}
