"""GPU telemetry end to end: `trainperf run` with the fake libnvidia-ml.so.1
(tests/fakes/fake_nvidia-ml.c) standing in for the NVIDIA driver. The values
the run directory must hold are derived from the scenario each test writes.
The C unit tests (tests/unit/test_nvml.c) drive the source itself."""
import csv
import json
import os
import re
import sys

import pytest

from conftest import BUILD

FAKE = BUILD / "fakes" / "libnvidia-ml.so.1"
FAKE_LEGACY = BUILD / "fakes" / "legacy" / "libnvidia-ml.so.1"

# The watched program: writes its pid (and a child's) where the fake's
# scenario reads them, then lives long enough for several samples.
TRAIN = r"""
import os, subprocess, sys, time
d = sys.argv[1]
kid = subprocess.Popen([sys.executable, "-c",
    "import os,sys,time; open(sys.argv[1]+'.tmp','w').write(str(os.getpid())); "
    "os.rename(sys.argv[1]+'.tmp', sys.argv[1]); time.sleep(float(sys.argv[2]))",
    os.path.join(d, "child.pid"), sys.argv[2]])
with open(os.path.join(d, "root.pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(d, "root.pid.tmp"), os.path.join(d, "root.pid"))
time.sleep(float(sys.argv[2]))
kid.wait()
sys.exit(int(sys.argv[3]))
"""


def _need_fake(path=FAKE):
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make`")


def _run(run_cli, tmp_path, scenario, lib=FAKE, seconds=1.6, exit_code=0, env=None,
         interval="0.2"):
    scn = tmp_path / "scenario.txt"
    scn.write_text(scenario)
    prog = tmp_path / "train.py"
    prog.write_text(TRAIN)
    out = tmp_path / "run"
    # Every fake GPU visible whatever this shell's CUDA_VISIBLE_DEVICES says
    # (parsing stops at the first index the scenario lacks).
    e = {"TRAINPERF_NVML_LIB": str(lib), "TRAINPERF_FAKE_NVML": str(scn),
         "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(16)))}
    e.update(env or {})
    p = run_cli("run", "--quiet", "--no-auto", "--out", out, "--interval", interval, "--",
                sys.executable, prog, tmp_path, seconds, exit_code, env=e, timeout=120)
    return p, out


def _rows(out):
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _num(cell):
    return None if cell == "" else float(cell)


def test_run_carries_gpu_values_end_to_end(run_cli, tmp_path):
    _need_fake()
    util = [10, 20, 30, 40, 50, 60, 70]
    energy_mj = [5_000_000, 5_040_000, 5_100_000, 5_180_000, 5_200_000]
    scenario = f"""
gpus 3
dev 0 name NVIDIA Not Ours
dev 0 util 99
dev 0 mem_util 99
dev 1 name NVIDIA Test H100
dev 1 uuid GPU-11111111-0000-0000-0000-000000000001
dev 1 util {",".join(map(str, util))}
dev 1 mem_util 7
dev 1 mem_total 85520809984
dev 1 mem_used 3000000000
dev 1 temp 55
dev 1 power_mw 300000
dev 1 energy_mj {",".join(map(str, energy_mj))}
dev 1 sm_mhz 1980
dev 1 mem_mhz 2619
dev 1 reasons 0,0x4
dev 1 procs pidfile={tmp_path}/root.pid:1000,{os.getpid()}:5000,pidfile={tmp_path}/child.pid:2000
dev 2 util 1
dev 2 mem_util 1
"""
    # The run sees GPU 1 only (by UUID prefix), like CUDA would.
    p, out = _run(run_cli, tmp_path, scenario,
                  env={"CUDA_VISIBLE_DEVICES": "GPU-11111111"})
    assert p.returncode == 0, p.stderr
    run = json.loads((out / "run.json").read_text())
    assert [g["index"] for g in run["gpus"]] == [1]
    assert run["gpus"][0]["name"] == "NVIDIA Test H100"
    assert run["gpus"][0]["uuid"] == "GPU-11111111-0000-0000-0000-000000000001"

    rows = _rows(out)
    assert len(rows) >= 4
    assert not any(k.startswith("gpu1_") for k in rows[0])  # one GPU is the run's
    # Each sample reads the next value of the scenario's sequence.
    got = [_num(r["gpu0_util_pct"]) for r in rows]
    assert got == [util[min(i, len(util) - 1)] for i in range(len(rows))]
    assert all(_num(r["gpu0_power_w"]) == 300.0 for r in rows)
    assert all(_num(r["gpu0_mem_total_bytes"]) == 85520809984 for r in rows)
    assert rows[0]["gpu0_energy_j"] == ""  # no interval before the first sample
    for i in range(1, len(rows)):
        e = (energy_mj[min(i, len(energy_mj) - 1)] - energy_mj[min(i - 1, len(energy_mj) - 1)])
        assert _num(rows[i]["gpu0_energy_j"]) == pytest.approx(e / 1000.0)
    assert rows[0]["gpu0_throttle"] == ""
    assert all(r["gpu0_throttle"] == "sw_power_cap" for r in rows[1:])
    # Interconnect was not in the scenario: unknown, not 0.
    assert all(r["gpu0_pcie_tx_bps"] == "" and r["gpu0_nvlink_rx_bps"] == "" for r in rows)
    # Once both of the tree's processes are up, their memory is summed and the
    # foreign process (this test) is not counted.
    mem = [_num(r["gpu0_proc_mem_bytes"]) for r in rows]
    assert 3000.0 in mem
    assert all(m in (None, 0.0, 1000.0, 2000.0, 3000.0) for m in mem)

    summ = json.loads((out / "summary.json").read_text())
    g = summ["gpus"][0]
    assert g["index"] == 1
    assert g["util_pct"]["max"] == max(got)
    total = sum(_num(r["gpu0_energy_j"]) for r in rows[1:])
    assert g["energy_j"] == pytest.approx(total)
    assert g["throttled_share"] == pytest.approx((len(rows) - 1) / len(rows))


def test_gpu_lost_mid_run_alerts_and_run_goes_on(run_cli, tmp_path):
    _need_fake()
    scenario = """
gpus 2
dev 0 util 25
dev 0 mem_util 5
dev 1 util 75
dev 1 mem_util 5
dev 1 lost_at 3
"""
    p, out = _run(run_cli, tmp_path, scenario, exit_code=0)
    assert p.returncode == 0, p.stderr
    rows = _rows(out)
    assert len(rows) >= 4
    assert [_num(r["gpu1_util_pct"]) for r in rows[:2]] == [75.0, 75.0]
    assert all(r["gpu1_util_pct"] == "" for r in rows[2:])   # lost: unknown from then on
    assert all(_num(r["gpu0_util_pct"]) == 25.0 for r in rows)  # the other GPU goes on
    alerts = [json.loads(l) for l in (out / "alerts.jsonl").read_text().splitlines() if l]
    lost = [a for a in alerts if a["rule"] == "gpu_lost" and a["state"] == "fired"]
    assert lost, alerts


def test_run_without_nvml_says_why_and_goes_on(run_cli, tmp_path):
    p, out = _run(run_cli, tmp_path, "gpus 1\n", lib=tmp_path / "no" / "libnvidia-ml.so.1",
                  exit_code=3, seconds=0.5)
    assert p.returncode == 3  # the child's status passes through
    run = json.loads((out / "run.json").read_text())
    assert run["gpus"] == []
    assert run["sources"]["nvml"].startswith("TRAINPERF_NVML_LIB not loadable, GPU metrics off")
    rows = _rows(out)
    assert rows and not any(k.startswith("gpu") for k in rows[0])


def test_run_with_driver_init_failure(run_cli, tmp_path):
    _need_fake()
    p, out = _run(run_cli, tmp_path, "gpus 1\nerr Init 9\n", seconds=0.5)
    assert p.returncode == 0, p.stderr
    run = json.loads((out / "run.json").read_text())
    assert "DRIVER_NOT_LOADED" in run["sources"]["nvml"]
    assert run["gpus"] == []


def test_run_with_legacy_driver_symbols(run_cli, tmp_path):
    _need_fake(FAKE_LEGACY)
    scenario = f"""
gpus 1
dev 0 util 42
dev 0 mem_util 3
dev 0 mem_total 1000000000
dev 0 mem_used 1000
dev 0 mem_reserved 24
dev 0 reasons 0x40
dev 0 procs 1:7,{os.getpid()}:9,pidfile={tmp_path}/root.pid:4096
"""
    p, out = _run(run_cli, tmp_path, scenario, lib=FAKE_LEGACY)
    assert p.returncode == 0, p.stderr
    rows = _rows(out)
    assert all(_num(r["gpu0_util_pct"]) == 42 for r in rows)
    assert all(_num(r["gpu0_mem_used_bytes"]) == 1024 for r in rows)  # v1: used + reserved
    assert all(r["gpu0_throttle"] == "hw_thermal" for r in rows)
    # 16-byte v1 process entries: the third is the run's.
    assert 4096.0 in [_num(r["gpu0_proc_mem_bytes"]) for r in rows]


def test_unsupported_fields_are_empty_cells(run_cli, tmp_path):
    _need_fake()
    p, out = _run(run_cli, tmp_path, "gpus 1\ndev 0 temp 61\n", seconds=0.8)
    assert p.returncode == 0, p.stderr
    rows = _rows(out)
    for r in rows:
        assert _num(r["gpu0_temp_c"]) == 61
        for col in ("util_pct", "mem_used_bytes", "power_w", "energy_j", "sm_mhz",
                    "pcie_rx_bps", "proc_sm_pct"):
            assert r[f"gpu0_{col}"] == "", col


def test_columns_follow_gpu_index_when_contexts_narrow_the_set(run_cli, tmp_path):
    _need_fake()
    # Three visible GPUs; from the 4th sample the run holds a context on GPU 2
    # only, which makes GPU 2 alone the run's.
    scenario = f"""
gpus 3
dev 0 util 10
dev 0 mem_util 1
dev 1 util 11
dev 1 mem_util 1
dev 2 util 12
dev 2 mem_util 1
dev 2 procs -;-;-;pidfile={tmp_path}/root.pid:100
"""
    p, out = _run(run_cli, tmp_path, scenario)
    assert p.returncode == 0, p.stderr
    run = json.loads((out / "run.json").read_text())
    rows = _rows(out)
    for pos, g in enumerate(run["gpus"]):
        vals = {_num(r[f"gpu{pos}_util_pct"]) for r in rows} - {None}
        assert vals <= {10.0 + g["index"]}, (g["index"], vals)
    summ = json.loads((out / "summary.json").read_text())
    idx = [g["index"] for g in summ["gpus"]]
    assert len(idx) == len(set(idx))


# ---- trainperf top: the node's GPUs and their processes ------------------------------------

# Two ranks (RANK set as a launcher sets it) stepping until told to stop; rank 0
# starts a helper process (in the run's tree, no steps). Each writes its pid
# where the fake's scenario reads it.
RANKS = r"""
import os, subprocess, sys, time
d = sys.argv[1]
if os.environ.get("RANK") is None:
    kids = [subprocess.Popen([sys.executable, __file__, d],
                             env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2"})
            for r in range(2)]
    sys.exit(max(k.wait() for k in kids))
import trainperf

def put(name, pid):
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        f.write(str(pid))
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))

r = os.environ["RANK"]
if r == "0":
    w = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    put("worker.pid", w.pid)
put("rank%s.pid" % r, os.getpid())
end = time.time() + 120
while not os.path.exists(os.path.join(d, "stop")) and time.time() < end:
    with trainperf.step():
        time.sleep(0.02)
if r == "0":
    w.kill()
"""


def _wait_for(pred, what, timeout=60):
    import time
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_top_lists_each_gpus_processes_with_their_ranks(cli, tmp_path):
    import subprocess
    import time
    from pyhelp import clean_env
    _need_fake()
    d = tmp_path
    outsider = os.getpid()  # on the GPU, not the run's
    scenario = f"""
gpus 2
dev 0 name NVIDIA Test H100
dev 0 util 97
dev 0 mem_util 40
dev 0 mem_total 85520809984
dev 0 mem_used 30000000000
dev 0 procs pidfile={d}/rank0.pid:12000000000,pidfile={d}/rank1.pid:11000000000,{outsider}:2000000000
dev 0 gprocs pidfile={d}/rank0.pid:12000000000
dev 0 putil pidfile={d}/rank0.pid:85,pidfile={d}/rank1.pid:41
dev 1 name NVIDIA Test Idle
dev 1 util 0
dev 1 mem_util 0
dev 1 mem_total 85520809984
dev 1 mem_used 0
dev 1 procs pidfile={d}/worker.pid:na
"""
    (d / "scn.txt").write_text(scenario)
    (d / "ranks.py").write_text(RANKS)
    run = d / "run"
    p = subprocess.Popen([cli, "run", "--quiet", "--no-auto", "--out", str(run),
                          "--interval", "0.2", "--", sys.executable, str(d / "ranks.py"), str(d)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean_env())
    nvml = {"TRAINPERF_NVML_LIB": str(FAKE), "TRAINPERF_FAKE_NVML": str(d / "scn.txt")}
    try:
        def stepped():
            s = run / "steps.csv"
            return s.exists() and {l.split(",")[0] for l in s.read_text().splitlines()[1:]} \
                and all((d / f).exists() for f in ("rank0.pid", "rank1.pid", "worker.pid"))
        _wait_for(stepped, "both ranks' steps")
        worker = int((d / "worker.pid").read_text())
        _wait_for(lambda: (run / "procs.csv").exists()
                  and f",{worker}," in (run / "procs.csv").read_text(), "the worker in procs.csv")
        time.sleep(0.5)  # steps of both ranks in the tail
        top = subprocess.run([cli, "top", str(run), "--once"], capture_output=True, text=True,
                             timeout=60, env=clean_env(**nvml))
        bare = subprocess.run([cli, "top", str(run), "--once"], capture_output=True, text=True,
                              timeout=60, env=clean_env(TRAINPERF_NVML_LIB=str(d / "none.so")))
        comm = {pid: open(f"/proc/{pid}/comm").read().strip() for pid in
                (int((d / f).read_text()) for f in ("rank0.pid", "rank1.pid", "worker.pid"))}
        comm[outsider] = open(f"/proc/{outsider}/comm").read().strip()
    finally:
        (d / "stop").write_text("")
        try:
            p.wait(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
    assert top.returncode == 0, top.stderr
    out = top.stdout.splitlines()
    r0, r1 = (int((d / f"rank{r}.pid").read_text()) for r in (0, 1))
    ranks = [l for l in out if re.match(r"\s+rank \d", l)]
    assert len(ranks) == 2  # the ranks table, then the GPUs beside it
    g0 = next(i for i, l in enumerate(out) if l.lstrip().startswith("GPU0 "))
    g1 = next(i for i, l in enumerate(out) if l.lstrip().startswith("GPU1 "))
    assert g0 > out.index(ranks[-1])
    assert out[g0].split()[1] == "97%" and "27.9 GiB / 79.6 GiB" in out[g0]
    assert out[g0].endswith("NVIDIA Test H100")
    procs0 = [l.split() for l in out[g0 + 1:g1]]
    # one row per process (rank 0's compute and graphics contexts are one), nvitop's columns
    assert procs0 == [
        ["pid", str(r0), "rank", "0", "11.2", "GiB", "SM", "85%", comm[r0]],
        ["pid", str(r1), "rank", "1", "10.2", "GiB", "SM", "41%", comm[r1]],
        ["pid", str(outsider), "-", "1.9", "GiB", "SM", "0%", comm[outsider]],
    ]
    # the run's helper (no steps, in its tree); no process-utilisation support: SM unknown
    assert out[g1].split()[1] == "0%" and out[g1].endswith("NVIDIA Test Idle")
    assert out[g1 + 1].split() == ["pid", str(worker), "run", "?", "SM", "?", comm[worker]]
    # without NVML: no GPU rows, the rest as before
    assert bare.returncode == 0 and "rank 1" in bare.stdout
    assert "GPU0" not in bare.stdout and "SM" not in bare.stdout
