"""Distributed training seen whole (issue 13): real torchrun ranks over gloo on
this machine, each test small (a few MLP steps) so the suite stays short.

No GPU here: the NCCL paths are not exercised by these tests.
"""
import csv
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT
from pyhelp import EXAMPLES, PYDIR, clean_env, require_extension

pytestmark = [pytest.mark.torch, pytest.mark.once]

TRAIN = EXAMPLES / "train_ddp.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def torchrun(nproc, *args, nnodes=1, node_rank=0, port=None):
    cmd = TORCHRUN + ["--nproc-per-node", str(nproc)]
    if nnodes > 1:
        cmd += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "tpftest"]
    else:
        cmd += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    return cmd + [str(TRAIN)] + [str(a) for a in args]


def trainperf_run(out, cmd, *opts, wait=True, quiet=True):
    require_extension()
    env = clean_env(OMP_NUM_THREADS=1)
    argv = [str(BUILD / "trainperf"), "run", *(["--quiet"] if quiet else []), "--out", str(out),
            *opts, "--", *cmd]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=str(ROOT))
    if not wait:
        return p
    o, e = p.communicate(timeout=300)
    assert p.returncode == 0, e[-3000:]
    return o if quiet else (o, e)


def report_json(*dirs):
    p = subprocess.run([str(BUILD / "trainperf"), "report", *map(str, dirs), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_ddp_collectives_are_comm_with_bytes_and_bandwidth(tmp_path):
    out = tmp_path / "run"
    steps = 8
    _, err = trainperf_run(out, torchrun(2, "--steps", steps, "--barrier-every", 4), quiet=False)
    # the end-of-run lines count the job's steps, not a sum over the ranks
    assert "steps       %d (" % steps in err, err[-2000:]
    # the model: 256*512+512 + 512*512+512 + 512*4+4 float32 parameters
    nparams = 256 * 512 + 512 + 512 * 512 + 512 + 512 * 4 + 4
    for rank in (0, 1):
        ops = rows(out / "comm" / ("ops-rank%d.csv" % rank))
        ar = [o for o in ops if o["op"] == "all_reduce"]
        # DDP's gradient all-reduces, every step, through the hook trainperf adds
        assert {int(o["step"]) for o in ar} == set(range(steps))
        for s in range(steps):
            assert sum(int(o["bytes"]) for o in ar if int(o["step"]) == s) == 4 * nparams
        assert all(o["group_size"] == "2" and o["dtype"] == "float32" for o in ar)
        # nccl-tests: with 2 ranks all_reduce busbw = algbw x 2(n-1)/n = algbw
        assert all(o["algbw_bps"] == o["busbw_bps"] and float(o["algbw_bps"]) > 0 for o in ar)
        # the script's own barriers: blocking, all waited
        bar = [o for o in ops if o["op"] == "barrier"]
        assert len(bar) == steps // 4 and all(o["wait_ns"] == o["duration_ns"] for o in bar)
        # a barrier after the last optimizer step is filed under the next step
        per_step = [r for r in rows(out / "comm" / ("steps-rank%d.csv" % rank))
                    if int(r["step"]) < steps]
        assert [int(r["step"]) for r in per_step] == list(range(steps))
        assert all(int(r["bytes"]) == 4 * nparams for r in per_step)
    st = rows(out / "steps.csv")
    assert len(st) == 2 * steps
    # comm is its own phase, taken out of backward (where DDP waits for it)
    warm = [r for r in st if r["step"] != "0"]
    assert all(int(r["comm_ns"]) > 0 for r in warm)
    s = json.load(open(out / "summary.json"))["steps"]
    assert s["count"] == 2 * steps and s["global_steps"] == steps
    assert {r["rank"] for r in s["per_rank"]} == {0, 1}
    assert all(r["comm_wait_ms_mean"] > 0 for r in s["per_rank"])
    rep = report_json(out)
    assert rep["steps"]["count"] == steps  # optimizer steps of the job, not a sum over ranks
    assert [r["rank"] for r in rep["ranks"]] == [0, 1]
    assert {c["op"] for c in rep["collectives"]} >= {"all_reduce", "barrier"}
    md = (out / "report.md").read_text()
    assert "## Ranks" in md and "| 1 | 0 | %d |" % steps in md
    # no FLOPs counted or declared: no MFU, said as such (not 0)
    job = rep["job"]
    assert job["optimizer_steps"] == steps and job["flops_ranks"] == 0 and job["mfu"] is None
    assert all(r["mfu"] is None and r["flops_per_step"] is None for r in rep["ranks"])
    assert md.count("| — | — |") == 2 and "MFU — (model FLOPs unknown" in md
    html = (out / "report.html").read_text()
    assert "<h2>Ranks</h2>" in html and "heatmap of step time" in html


def test_slow_rank_is_named_live_and_in_the_report(tmp_path):
    out = tmp_path / "run"
    trainperf_run(out, torchrun(2, "--steps", 40, "--slow-rank", 1, "--slow-ms", 30),
                  "--interval", "0.25", "--alert", "straggler: rank.straggler_pct > 10 for 0.5s")
    rep = report_json(out)
    s = rep["straggler"]
    assert s and s["rank"] == 1 and s["waiting_rank"] == 0 and s["where"] == "step"
    assert s["collective"] == "all_reduce"
    by = {r["rank"]: r for r in rep["ranks"]}
    # rank 0 waits in all_reduce what rank 1 spends computing
    assert by[0]["comm_wait_ms_mean"] > by[1]["comm_wait_ms_mean"] + 15
    assert by[1]["compute_ms_mean"] > by[0]["compute_ms_mean"] + 15
    assert rep["diagnosis"]["primary"]["id"] == "straggler"
    alerts = [json.loads(l) for l in open(out / "alerts.jsonl")]
    fired = [a for a in alerts if a["rule"] == "straggler" and a["state"] == "fired"]
    assert fired and "rank 1 holds the others back" in fired[0]["message"]
    text = subprocess.run([str(BUILD / "trainperf"), "report", str(out)], capture_output=True,
                          text=True, timeout=60).stdout
    assert "rank 0 waits" in text and "in all_reduce for rank 1" in text
    cmp = subprocess.run([str(BUILD / "trainperf"), "compare", str(out), str(out), "--format",
                          "json"], capture_output=True, text=True, timeout=60)
    assert cmp.returncode == 0, cmp.stderr
    c = json.loads(cmp.stdout)
    assert [r["rank"] for r in c["ranks"]] == [0, 1] and c["straggler_a"] == 1
    assert c["ranks"][1]["a"]["compute_ms_mean"] == c["ranks"][1]["b"]["compute_ms_mean"] > 0


def test_slow_loader_of_one_of_four_ranks_is_named(tmp_path):
    out = tmp_path / "run"
    trainperf_run(out, torchrun(4, "--steps", 16, "--slow-loader-rank", 2, "--slow-ms", 40,
                                "--hidden", 256, "--declare-flops"), "--peak-flops", "2e11")
    rep = report_json(out)
    assert [r["rank"] for r in rep["ranks"]] == [0, 1, 2, 3]
    assert rep["steps"]["count"] == 16
    s = rep["straggler"]
    assert s and s["rank"] == 2 and s["where"] == "data loader"
    by = {r["rank"]: r for r in rep["ranks"]}
    assert by[2]["data_wait_ms_mean"] > max(by[r]["data_wait_ms_mean"] for r in (0, 1, 3)) + 20
    # FLOPs declared by the script (trainperf.declare_flops) and a declared peak
    for r in rep["ranks"]:
        assert r["flops_source"] == "declared" and r["flops_per_step"] == mlp_flops(256, 256)
        assert r["peak_flops_per_s"] == 2e11 and "declared" in r["peak_source"]
        assert r["mfu"] == pytest.approx(r["flops_per_s"] / 2e11)
    assert rep["job"]["mfu"] == pytest.approx(sum(r["flops_per_s"] for r in rep["ranks"]) / 8e11)


def mlp_flops(dim=256, hidden=512, batch=16, tokens=False):
    """FLOPs of one training step of examples/train_ddp.py's MLP: the GEMMs of
    forward, of the weights' gradients and of the inputs' gradients of every
    layer but the first (all of them with --tokens: the embeddings below it
    train), 2 FLOPs per multiply-add."""
    macs = dim * hidden + hidden * hidden + hidden * 4
    return 2 * batch * (3 * macs - (0 if tokens else dim * hidden))


def warm_rate(steps_csv, rank, counted=None):
    """Steps per second of a rank over its warm steps (step 0 left out, and the
    step whose FLOPs were counted: counting slows it)."""
    iv = [int(r["interval_ns"]) for r in rows(steps_csv)
          if r["rank"] == str(rank) and r["step"] not in ("0", str(counted))]
    return len(iv) / (sum(iv) / 1e9)


def test_mfu_per_rank_from_counted_flops_and_a_measured_peak(tmp_path):
    out = tmp_path / "run"
    trainperf_run(out, torchrun(2, "--steps", 10, "--tokens", 8), "--flops-step", "2",
                  "--peak-flops", "measure")
    rep = report_json(out)
    fps, peaks = [], []
    for r in rep["ranks"]:
        # FlopCounterMode's count of step 2 is the analytic count of the MLP
        assert r["flops_source"] == "counted" and r["flops_per_step"] == mlp_flops(tokens=True)
        # a matmul measured in each rank gives its peak
        assert r["peak_flops_per_s"] > 0 and r["peak_source"].startswith("measured")
        # FLOP/s: the FLOPs of a step at the rank's own rate over its warm steps
        assert r["flops_per_s"] == pytest.approx(
            mlp_flops(tokens=True) * warm_rate(out / "steps.csv", r["rank"], counted=2), rel=1e-6)
        assert r["mfu"] == pytest.approx(r["flops_per_s"] / r["peak_flops_per_s"])
        assert 0 < r["mfu"] < 1
        fps.append(r["flops_per_s"])
        peaks.append(r["peak_flops_per_s"])
    job = rep["job"]
    assert job["optimizer_steps"] == 10 and job["flops_ranks"] == job["mfu_ranks"] == 2
    assert job["flops_per_s"] == pytest.approx(sum(fps))
    # the job's samples and tokens a second, summed over ranks: 8 tokens a sample
    assert job["samples_per_s"] == pytest.approx(sum(r["samples_per_s"] for r in rep["ranks"]))
    assert job["tokens_per_s"] == pytest.approx(8 * job["samples_per_s"])
    assert job["mfu"] == pytest.approx(sum(fps) / sum(peaks))
    # summary.json holds the same figures (written by the end-of-run report)
    mf = json.load(open(out / "summary.json"))["model_flops"]
    assert mf["mfu"] == job["mfu"] and mf["flops_per_s"] == job["flops_per_s"]
    assert sorted(r["rank"] for r in mf["per_rank"]) == [0, 1]
    text = subprocess.run([str(BUILD / "trainperf"), "report", str(out)], capture_output=True,
                          text=True, timeout=60).stdout
    assert "TFLOP/s" in text and "MFU %.1f%% (peak: measured" % (100 * job["mfu"]) in text
    md = (out / "report.md").read_text()
    assert "| samples/s | TFLOP/s | MFU |" in md and "**Job**: 10 optimizer steps" in md
    assert "%.0f tokens/s" % job["tokens_per_s"] in md
    html = (out / "report.html").read_text()
    assert '<th class="n">MFU</th>' in html and "<b>Job</b>" in html


def test_fsdp2_all_gathers_and_reduce_scatters_are_counted(tmp_path):
    out = tmp_path / "run"
    steps = 6
    trainperf_run(out, torchrun(2, "--steps", steps, "--fsdp"), "--flops-step", "2")
    ops = rows(out / "comm" / "ops-rank0.csv")
    kinds = {o["op"] for o in ops}
    assert any("all_gather" in k for k in kinds) and any("reduce_scatter" in k for k in kinds)
    # every step gathers the sharded parameters and scatters their gradients
    for s in range(steps):
        st = [o for o in ops if int(o["step"]) == s]
        assert any("all_gather" in o["op"] for o in st)
        assert any("reduce_scatter" in o["op"] for o in st)
    rep = report_json(out)
    ov = rep["comm_overlap"]
    assert ov["fsdp_all_gather_ms_per_step"] > 0
    assert 0 <= ov["fsdp_all_gather_exposed_ms_per_step"] <= ov["fsdp_all_gather_ms_per_step"] + 1e-6
    assert ov["fsdp_prefetch_gain_ms_per_step"] >= 0
    recs = [r for f in [rep["diagnosis"]["primary"]] + rep["diagnosis"].get("also", [])
            for r in f.get("recommendations", [])]
    text = subprocess.run([str(BUILD / "trainperf"), "report", str(out)], capture_output=True,
                          text=True, timeout=60).stdout
    assert "FSDP: all-gathers take" in text and "prefetch" in text
    # sharded parameters, whole model computed on each rank's batch: the full count
    assert [r["flops_per_step"] for r in rep["ranks"]] == [mlp_flops()] * 2


def test_two_nodes_under_their_own_runs_report_as_one_job(tmp_path):
    port = free_port()
    runs = [tmp_path / "job" / ("node%d" % n) for n in (0, 1)]
    procs = [trainperf_run(runs[n], torchrun(1, "--steps", 12, "--slow-rank", 1, "--slow-ms", 30,
                                             nnodes=2, node_rank=n, port=port),
                           "--flops-step", "2", wait=False)
             for n in (0, 1)]
    for p in procs:
        o, e = p.communicate(timeout=300)
        assert p.returncode == 0, e[-3000:]
    for parent_or_dirs in ([tmp_path / "job"], runs):
        rep = report_json(*parent_or_dirs)
        # c10d rendezvous, not --node-rank, decides which node gets rank 0
        assert [r["rank"] for r in rep["ranks"]] == [0, 1]
        assert sorted(r["node"] for r in rep["ranks"]) == [0, 1]
        assert rep["steps"]["count"] == 12
        nodes = rep["nodes"]
        assert len(nodes) == 2 and nodes[1]["collectives_matched"] >= 12
        assert rep["straggler"]["rank"] == 1  # found across nodes
        # each node's FLOP count reaches its rank; no peak on a CPU: no MFU
        assert all(r["flops_per_step"] == mlp_flops() for r in rep["ranks"])
        assert rep["job"]["flops_ranks"] == 2 and rep["job"]["mfu"] is None
    true_offset = nodes[1]["clock_offset_s"]
    # a host whose clock is 5 s off: the collectives put it back
    rj = json.load(open(runs[1] / "run.json"))
    rj["start_unix_s"] += 5.0
    json.dump(rj, open(runs[1] / "run.json", "w"))
    rep = report_json(*runs)
    n1 = rep["nodes"][1]
    assert abs(n1["wall_clock_offset_s"] - true_offset) > 4.5
    assert abs(n1["clock_offset_s"] - true_offset) < n1["alignment_error_s"] + 0.05
    assert rep["straggler"]["rank"] == 1
    # merge puts the nodes' traces on the same aligned clock: the ranks' steps
    # end together (they leave the same all-reduce), not 5 s apart
    job = tmp_path / "job.json"
    p = subprocess.run([str(BUILD / "trainperf"), "merge", *map(str, runs), "-o", str(job)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "aligned on collectives" in p.stderr
    ends = {}
    for e in json.load(open(job))["traceEvents"]:
        if e.get("cat") == "step":
            ends.setdefault(e["pid"] // 1000, {})[e["name"]] = e["ts"] + e["dur"]
    a, b = ends.values()
    diffs = sorted(abs(a[k] - b[k]) / 1e6 for k in a if k in b and k != "step 0")
    assert diffs and diffs[len(diffs) // 2] < 0.1


IN_FLIGHT = r"""
import os, sys, threading, time
import torch, torch.distributed as dist
import trainperf._comm as comm
dist.init_process_group("gloo")
rank = dist.get_rank()
comm.log_step(2)
seen = []
if rank == 0:
    def watch():
        for _ in range(200):
            f = comm.in_flight()
            if f:
                seen.append(f[0])
                return
            time.sleep(0.01)
    th = threading.Thread(target=watch); th.start()
else:
    time.sleep(1.0)
dist.barrier()
if rank == 0:
    th.join()
    os.write(1, ("SEEN %s %s %s %s\n" % (seen[0]["op"], seen[0]["seq"], seen[0]["group_size"],
                                          seen[0]["started_s"] >= 0)).encode())
m = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(4):
    x = torch.randn(4, 8)
    dist.all_reduce(x)
    m(x).sum().backward(); opt.step(); opt.zero_grad()
# one write(2) per line: print() writes its arguments one by one, and the
# two ranks' writes to the shared stdout interleave
os.write(1, ("IDLE rank%d %s\n" % (rank, comm.in_flight())).encode())
dist.destroy_process_group()
"""


def test_in_flight_and_comm_log_of_one_step(tmp_path):
    out = tmp_path / "run"
    script = tmp_path / "inflight.py"
    script.write_text(IN_FLIGHT)
    cmd = TORCHRUN + ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                      str(free_port()), str(script)]
    o = trainperf_run(out, cmd)
    # rank 0 blocked in the barrier while rank 1 sleeps: the hang dump's view
    assert "SEEN barrier 0 2 True" in o, o
    # each rank prints its own line; torchrun interleaves the two streams, so look for each
    assert "IDLE rank0 []" in o and "IDLE rank1 []" in o, o
    ops = rows(out / "comm" / "ops-rank0.csv")
    assert ops and {o["step"] for o in ops} == {"2"}  # log_step(2): only that step's ops
    per_step = rows(out / "comm" / "steps-rank0.csv")
    # the summary keeps every step (a step's row is written when its ops
    # complete: the last may come first)
    assert sorted(int(r["step"]) for r in per_step) == [0, 1, 2, 3]


def test_ddp_results_are_unchanged_by_the_hooks(tmp_path):
    # trainperf replaces DDP's built-in reduction with a hook that does the
    # same (mean over the group): the trained weights must not move
    args = ["--steps", 6, "--print-checksum"]
    for _ in range(2):
        plain = subprocess.run(torchrun(2, *args), capture_output=True, text=True, timeout=300,
                               env=clean_env(OMP_NUM_THREADS=1), cwd=str(ROOT))
        # (the reference run has no trainperf in it: gloo aborting a rank as
        # the process exits, "terminate called without an active exception",
        # happened once in CI and is torch's; such a run is taken again)
        if "terminate called without an active exception" not in plain.stderr:
            break
    assert plain.returncode == 0, plain.stderr[-3000:]
    hooked = trainperf_run(tmp_path / "run", torchrun(2, *args))
    want = [l for l in plain.stdout.splitlines() if l.startswith("checksum")]
    got = [l for l in hooked.splitlines() if l.startswith("checksum")]
    assert want and got == want
    assert (tmp_path / "run" / "comm" / "ops-rank0.csv").exists()  # the hook did run
