"""GPU records end to end on a machine with no GPU: `trainperf run` injects
the real CUPTI library (build/libtrainperf-cupti.so) into a real program,
which plays the CUDA driver's part (it calls InitializeInjection); only CUPTI
itself is a fake (tests/fakes/fake_cupti.c), told what "ran" on the GPU.
The program's truth is in tests/progs/fake_gpu_trainer.c: per step of >= 20
ms, 8 ms of kernel busy time (10 ms of kernel time on two streams), a 1 MiB
pageable host-to-device copy and a 1 ms host wait for the GPU."""
import csv
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD

FAKE = BUILD / "fakes" / "libcupti.so.1"
PROG = BUILD / "progs" / "fake_gpu_trainer"
MS = 1_000_000


def gpu_env(**kw):
    # kernel records on every step: these tests hold the join to the truth
    # of each step (the windows of the default are tested below)
    e = {"TRAINPERF_GPU_TRACE": "1", "TRAINPERF_CUPTI_LIB": str(FAKE), "TRAINPERF_GPU_TRACE_MODE": "full"}
    e.update(kw)
    return e


def rows(d):
    with open(d / "gpu_steps.csv") as f:
        return list(csv.DictReader(f))


def summary(d):
    with open(d / "summary.json") as f:
        return json.load(f)


def marks(d):
    text = (d / "trace.json").read_text()
    return [w.split('"')[0] for w in text.split('"gpu.cupti')[1:]]


@pytest.mark.parametrize("clock", ["callback", "offset"])
def test_gpu_records_are_joined_to_their_steps(run_cli, tmp_path, clock):
    d = tmp_path / "run"
    env = gpu_env(**({"FAKE_CUPTI_NO_TS": "1"} if clock == "offset" else {}))
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "25", env=env)
    assert p.returncode == 0, p.stderr
    got = rows(d)
    assert len(got) == 25
    # the offset path (no timestamp callback: CUPTI's realtime clock put on
    # the monotonic one) may be off by the few microseconds it was measured in
    tol = 0 if clock == "callback" else 50_000
    for r in got:
        assert abs(int(r["gpu_busy_ns"]) - 8 * MS) <= tol, r
        assert abs(int(r["kernel_ns"]) - 10 * MS) <= 2 * tol, r
        assert int(r["kernels"]) == 2
        assert int(r["h2d_bytes"]) == int(r["h2d_pageable_bytes"]) == 1 << 20
        assert int(r["d2h_bytes"]) == 0
        assert abs(int(r["sync_ns"]) - 1 * MS) <= tol and int(r["syncs"]) == 1
        # the longest stretch without a kernel: the step's first 10 ms (or a
        # longer host gap before it)
        assert int(r["gpu_idle_max_ns"]) >= 10 * MS - tol
        assert int(r["interval_ns"]) >= 20 * MS
    g = summary(d)["steps"]["gpu"]
    assert g["steps"] == 25 and g["warm_steps"] == 24
    assert g["kernels_per_step"] == 2
    assert 0.2 < g["busy_share"] <= 0.4  # 8 ms of >= 20 ms
    assert g["h2d_pageable_bytes_per_step"] == 1 << 20
    assert g["records_late"] == 0 and g["records"] == 25 * 4
    assert any(m.startswith(" on") for m in marks(d))


def test_no_cupti_leaves_the_program_alone(run_cli, tmp_path):
    d = tmp_path / "run"
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "8",
                env=gpu_env(TRAINPERF_CUPTI_LIB=str(tmp_path / "missing.so")))
    assert p.returncode == 0, p.stderr
    assert not (d / "gpu_steps.csv").exists()
    assert summary(d)["steps"]["count"] == 8
    assert "gpu" not in summary(d)["steps"]
    assert any("unavailable: TRAINPERF_CUPTI_LIB cannot be loaded" in m for m in marks(d))


def test_injection_outside_trainperf_does_nothing(tmp_path):
    # the driver may load the library in a process not under trainperf (an
    # environment inherited by something else): no file, no output, exit 0
    env = dict(os.environ, CUDA_INJECTION64_PATH=str(BUILD / "libtrainperf-cupti.so"),
               TRAINPERF_CUPTI_LIB=str(FAKE))
    env.pop("TRAINPERF_RUN_DIR", None)
    p = subprocess.run([str(PROG), "3"], env=env, capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert p.returncode == 0 and p.stdout == "" and p.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_cpu_machine_gets_no_injection_and_no_gpu_files(run_cli, tmp_path):
    if os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl"):
        pytest.skip("an NVIDIA driver is here: run injects CUPTI")
    d = tmp_path / "run"
    out = tmp_path / "env.txt"
    p = run_cli("run", "--quiet", "--out", d, "--", "sh", "-c",
                'echo "${CUDA_INJECTION64_PATH:-none}" > "$0"', out)
    assert p.returncode == 0, p.stderr
    assert out.read_text().strip() == "none"
    assert not (d / "gpu_steps.csv").exists()
    assert "gpu" not in summary(d)["steps"]


def test_no_gpu_trace_and_the_users_own_injection_win(run_cli, tmp_path):
    out = tmp_path / "env.txt"
    cmd = ["sh", "-c", 'echo "${CUDA_INJECTION64_PATH:-none}" > "$0"', out]
    p = run_cli("run", "--quiet", "--no-gpu-trace", "--out", tmp_path / "a", "--", *cmd,
                env={"TRAINPERF_GPU_TRACE": "1"})
    assert p.returncode == 0 and out.read_text().strip() == "none"
    p = run_cli("run", "--quiet", "--out", tmp_path / "b", "--", *cmd,
                env={"TRAINPERF_GPU_TRACE": "1", "CUDA_INJECTION64_PATH": "/opt/theirs.so"})
    assert p.returncode == 0 and out.read_text().strip() == "/opt/theirs.so"
    p = run_cli("run", "--quiet", "--out", tmp_path / "c", "--", *cmd, env={"TRAINPERF_GPU_TRACE": "1"})
    assert p.returncode == 0 and out.read_text().strip().endswith("/libtrainperf-cupti.so")


def test_gpu_records_in_the_trace_and_the_exporters(cli, tmp_path):
    """The trace has a track per GPU stream with the kernels on the host's
    clock; a live Prometheus scrape and TensorBoard's own reader see the GPU
    figures."""
    import socket
    import threading
    import time
    import urllib.request
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    d = tmp_path / "run"
    env = dict(os.environ, **gpu_env())
    env.pop("TRAINPERF_RUN_DIR", None)
    p = subprocess.Popen([cli, "run", "--quiet", "--prometheus", str(port), "--out", str(d), "--",
                          str(PROG), "150"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    page = ""
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        try:
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
            if "trainperf_gpu_busy_ratio" in text:
                page = text
                break
        except OSError:
            pass
        time.sleep(0.2)
    p.communicate(timeout=120)
    assert p.returncode == 0
    busy = [l for l in page.splitlines() if l.startswith("trainperf_gpu_busy_ratio")]
    assert busy and 0.2 < float(busy[0].split()[-1]) <= 0.4, page[-2000:]
    trace = json.loads((d / "trace.json").read_text())
    kernels = [e for e in trace if e.get("cat") == "gpu,kernel"]
    assert len(kernels) == 2 * 150
    assert all(e["name"] == "_Z10fake_kernelPfi" and e["dur"] in (4000.0, 6000.0) for e in kernels)
    tracks = {e["tid"]: e["args"]["name"] for e in trace if e.get("name") == "thread_name"}
    assert tracks[kernels[0]["tid"]] == "GPU 0 stream 7"
    assert "GPU 0: host waits" in tracks.values()
    # each kernel lies inside the host step that launched it (host clock)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("cat") == "step")
    assert steps
    k0 = min(e["ts"] for e in kernels)
    assert any(b <= k0 <= e for b, e in steps)
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(str(d), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    vals = [s.value for s in acc.Scalars("gpu/busy_pct")]
    assert vals and all(20 < v <= 40 for v in vals)


# What the fake GPU did in each mode (tests/progs/fake_gpu_trainer.c) and the
# verdict the kernel records must give; CPU findings that read host time must
# not stand in for it.
VERDICTS = {
    # the fake runs its kernels on the host's clock: under ASan its gaps grow (0.947 busy in
    # a fresh clone's sanitizer pass); gpu-bound itself needs 0.85
    "healthy": ("gpu-bound", {"busy_share": (0.9, 1.0)}, []),
    "launch": ("launch-bound", {"busy_share": (0.0, 0.1), "kernels_per_step": (249, 251),
                                "kernel_us_p50": (3.9, 4.1)}, []),
    "sync": ("gpu-sync", {"sync_idle_share": (0.28, 0.31)}, []),
    "pageable": ("gpu-bound", {"h2d_pageable_bytes_per_step": (64 << 20, 64 << 20)}, ["pageable-copies"]),
    "input": ("input-bound", {"busy_share": (0.3, 0.4)}, []),
}


@pytest.mark.parametrize("mode", sorted(VERDICTS))
def test_gpu_verdicts_from_kernel_records(run_cli, tmp_path, mode):
    primary, figures, also = VERDICTS[mode]
    d = tmp_path / "run"
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "40", mode, env=gpu_env())
    assert p.returncode == 0, p.stderr
    g = summary(d)["steps"]["gpu"]
    for k, (lo, hi) in figures.items():
        assert lo <= g[k] <= hi, (k, g[k])
    rep = run_cli("report", "--format", "json", d)
    diag = json.loads(rep.stdout)["diagnosis"]
    assert diag["primary"]["id"] == primary, diag["primary"]
    ids = [f["id"] for f in diag.get("secondary") or []]
    for i in also:
        assert i in ids, ids
    # a verdict measured on the GPU never comes with NVML's guess beside it
    assert "host-bound" not in ids and "tiny-ops" not in ids
    if mode == "input":
        names = [e["name"] for e in diag["primary"]["evidence"]]
        assert "gpu_busy_share" in names
    text = run_cli("report", d).stdout
    assert "GPU busy" in text


def test_mfu_over_the_gpus_busy_time(run_cli, tmp_path):
    """With the model's FLOPs declared, the report gives MFU over the wall
    time and over the time a kernel ran (the kernels' own efficiency)."""
    import re
    d = tmp_path / "run"
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "30", "sync", env=gpu_env())
    assert p.returncode == 0, p.stderr
    (d / "flops").mkdir()
    (d / "flops" / "flops-rank0-declared.json").write_text(json.dumps(
        {"step": None, "rank": 0, "method": "declared", "total_flops": 2e12,
         "peak_flops_per_s": 1e15, "peak_source": "declared"}))
    text = run_cli("report", d).stdout
    m = re.search(r"MFU ([\d.]+)% \(peak: declared\), ([\d.]+)% of the GPU's busy time", text)
    assert m, text
    busy = summary(d)["steps"]["gpu"]["busy_share"]
    assert abs(float(m.group(2)) - float(m.group(1)) / busy) < 0.2
    assert float(m.group(2)) > float(m.group(1))


def test_a_cuda_program_without_steps_gets_windows(run_cli, tmp_path):
    """No step markers at all (a CUDA program with no trainperf code): the
    records still come, as one gpu_steps.csv row a second (tid 0), and the
    report says how busy the GPU was."""
    d = tmp_path / "run"
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "100", "nosteps", env=gpu_env())
    assert p.returncode == 0, p.stderr
    got = rows(d)
    assert len(got) >= 2 and all(r["tid"] == "0" for r in got)
    assert [int(r["step"]) for r in got] == list(range(len(got)))
    assert sum(int(r["kernels"]) for r in got) == 100 * 40
    w = summary(d)["steps"]["gpu_windows"]
    assert 0.95 <= w["busy_share"] <= 1.0
    text = run_cli("report", d).stdout
    assert "No steps, but the GPU's kernel records: a kernel ran 9" in text


def test_a_scripts_profiler_window_borrows_cupti_and_gives_it_back(run_cli, tmp_path):
    """A script's torch.profiler takes CUPTI's activity callbacks over for its
    window (Kineto registers its own) and, at its end, lets go. The hook
    pauses trainperf's records before (what was still buffered comes to
    trainperf, not to the profiler) and resumes after: the steps before and
    after the window keep their GPU records, the profiler gets its window's.
    The fake trainer plays Kineto's part (tests/progs/fake_gpu_trainer.c)."""
    d = tmp_path / "run"
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "30", "profiler", env=gpu_env())
    assert p.returncode == 0, p.stderr
    got = {int(r["step"]): int(r["kernels"]) for r in rows(d)}
    # 40 kernels a step, ours outside the window (steps 10-19), the
    # profiler's in it: the steps it overlaps get no row (not one of zero
    # kernels, which would read as an idle GPU), step 20 too (the hand-back
    # falls in its interval, before its launches: its row could miss the
    # window's kernels still running), and the summary counts them
    assert sorted(got) == [s for s in range(30) if not 10 <= s <= 20], got
    assert set(got.values()) == {40}, got
    g = summary(d)["steps"]["gpu"]
    assert g["steps_in_profiler"] == 11 and g["steps"] == 19 and g["records_late"] == 0
    assert g["busy_share"] > 0.9
    assert "11 steps inside the script's torch.profiler window are not in these figures" in \
        (d / "report.md").read_text()
    prof = int(p.stdout.split("profiler records ")[1].split()[0])
    assert prof > 0
    m = marks(d)
    assert any(x.startswith(" paused") for x in m) and any(x.startswith(" resumed") for x in m), m


_HANDOVER = r'''
import ctypes, os, sys, types
inj = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])   # the driver's part
assert inj.InitializeInjection() == 1
fake = ctypes.CDLL(os.environ["TRAINPERF_CUPTI_LIB"])
from trainperf import _evalhooks
# torch.autograd.profiler as the hook sees it: a profile class whose
# _prepare_trace readies Kineto, and the function torch calls at start/stop
act = types.SimpleNamespace
mod = types.ModuleType("torch.autograd.profiler")
calls = []
class profile:
    def __init__(self, names):
        self.kineto_activities = [act(name=n) for n in names]
    def _prepare_trace(self):
        calls.append(("prepare", fake.fake_cupti_calls(1)))
mod.profile = profile
mod._set_is_profiler_enabled = lambda on: calls.append(("enabled", on))
sys.modules["torch.autograd.profiler"] = mod
_evalhooks._patch_profiler(None)
reg0 = fake.fake_cupti_calls(0)
for names in (["CPU"], ["CPU", "CUDA"]):
    p = mod.profile(names)
    p._prepare_trace()
    mod._set_is_profiler_enabled(True)
    mod._set_is_profiler_enabled(False)
print(calls, fake.fake_cupti_calls(1), fake.fake_cupti_calls(0) - reg0)
'''


def test_the_profiler_hook_hands_cupti_over_and_takes_it_back(tmp_path):
    """The hook's half of the hand-over (python/trainperf/_evalhooks.py): a
    profiler that records CUDA activity gets our buffers flushed before it
    prepares, and our callbacks back after it stopped; one recording the CPU
    only leaves CUPTI alone."""
    from pyhelp import clean_env
    from conftest import SANITIZE
    env = clean_env(CUDA_INJECTION64_PATH=BUILD / "libtrainperf-cupti.so",
                    TRAINPERF_CUPTI_LIB=FAKE, TRAINPERF_RUN_DIR=tmp_path)
    if SANITIZE:  # the ASan build's library in an uninstrumented interpreter
        asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                              text=True).stdout.strip()
        env.update(LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0")
    p = subprocess.run([sys.executable, "-c", _HANDOVER], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    calls, forced, regs = p.stdout.strip().rsplit(" ", 2)
    # CPU only: no flush before prepare; with CUDA: one forced flush before it
    assert calls.startswith("[('prepare', 0), ('enabled', True), ('enabled', False), "
                            "('prepare', 1), ('enabled', True), ('enabled', False)]"), calls
    assert int(forced) == 1 and int(regs) == 1  # taken back once, after the CUDA window


def test_fewer_kinds_and_cuptis_own_clock_on_request(run_cli, tmp_path):
    """TRAINPERF_CUPTI_KINDS=kernel: kernel records only (no copies, no
    host waits); TRAINPERF_CUPTI_CLOCK=offset: no timestamp callback, CUPTI's
    clock put on ours. The GPU check times each against the default."""
    d = tmp_path / "kern"
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "12",
                env=gpu_env(TRAINPERF_CUPTI_KINDS="kernel", TRAINPERF_CUPTI_CLOCK="offset"))
    assert p.returncode == 0, p.stderr
    got = rows(d)
    assert len(got) == 12
    assert all(int(r["kernels"]) == 2 and int(r["h2d_bytes"]) == 0 and int(r["syncs"]) == 0
               for r in got), got
    assert all(abs(int(r["gpu_busy_ns"]) - 8 * MS) <= 50_000 for r in got)
    assert any(m.startswith(" on") and "clock offset" in m for m in marks(d)), marks(d)


def test_a_killed_collector_leaves_the_gpu_rows_to_the_report(cli, tmp_path):
    """The collector killed mid-run (SIGKILL, the OOM killer): `report`
    drains what was left in the rings, and the GPU segment's records become
    the rows of the steps recovered with them, numbered as steps.csv's."""
    import signal
    import time
    d = tmp_path / "r"
    tp = subprocess.Popen([str(cli), "run", "--quiet", "--out", str(d), "--", str(PROG), "300"],
                          env=dict(os.environ, **gpu_env()), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(3000):
        if (d / "gpu_steps.csv").exists() and len((d / "gpu_steps.csv").read_text().splitlines()) > 30:
            break
        time.sleep(0.01)
    kids = subprocess.run(["pgrep", "-P", str(tp.pid)], capture_output=True, text=True).stdout.split()
    tp.send_signal(signal.SIGKILL)
    tp.wait()
    assert kids, "the trainee was not found"
    for _ in range(1200):  # the trainee goes on alone and finishes its 300 steps
        if subprocess.run(["kill", "-0", kids[0]], capture_output=True).returncode != 0:
            break
        time.sleep(0.05)
    before = len(rows(d))
    assert 30 <= before < 250 and not (d / "summary.json").exists()
    p = subprocess.run([str(cli), "report", str(d)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rec = json.loads((d / "recovered.json").read_text())
    got = rows(d)
    assert rec["gpu_steps_from_rings"] == len(got) - before > 0
    steps = {int(r["step"]) for r in got}
    assert len(steps) == len(got)  # no step twice
    # the rows the dead collector had not written: every step after them, each
    # with what the fake GPU ran in it (the steps it held, waiting for their
    # records to settle, died with it)
    assert set(range(max(steps) - rec["gpu_steps_from_rings"] + 1, 300)) <= steps
    assert max(steps) == 299
    for r in got[before:]:
        assert int(r["kernels"]) == 2 and int(r["gpu_busy_ns"]) == 8 * MS, r
        assert int(r["h2d_pageable_bytes"]) == 1 << 20 and int(r["syncs"]) == 1, r
    with open(d / "steps.csv") as f:
        assert len(list(csv.DictReader(f))) == 300
    # with no summary of its own, the report reads the GPU figures from the rows
    busy = re.search(r"GPU busy (\d+)% of step time", (d / "report.md").read_text())
    assert busy and 30 <= int(busy.group(1)) <= 40  # 8 ms of >= 20 ms


# ---- --gpu-trace windows (the default) against full: one 600-step run each ----

CUDA = BUILD / "fakes" / "libcuda.so.1"
WIN_STEPS = 600


def _run_cli(cli, *args, env):
    e = dict(os.environ)
    e.pop("TRAINPERF_RUN_DIR", None)
    e.update(env)
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True, timeout=300, env=e)


@pytest.fixture(scope="module")
def trace_modes(cli, tmp_path_factory):
    """The healthy loop (40 kernels over 19.6 ms of each 20 ms step, the
    host waiting for the last ones), 600 steps, with the fake driver's
    events: as shipped (no --gpu-trace), and with --gpu-trace full."""
    base = tmp_path_factory.mktemp("modes")
    env = {"TRAINPERF_GPU_TRACE": "1", "TRAINPERF_CUPTI_LIB": str(FAKE), "TRAINPERF_CUDA_LIB": str(CUDA)}
    out = {}
    for mode, opts in (("windows", []), ("full", ["--gpu-trace", "full"])):
        d = base / mode
        p = _run_cli(cli, "run", "--quiet", *opts, "--out", d, "--", PROG, WIN_STEPS, "healthy", env=env)
        assert p.returncode == 0, p.stderr
        out[mode] = d
    return out


def test_default_trace_has_kernel_records_in_windows_only(trace_modes):
    got = rows(trace_modes["windows"])
    assert len(got) == WIN_STEPS  # every step has a row: from kernel records or from events
    by = {}
    for r in got:
        by.setdefault(r["source"], []).append(r)
    assert set(by) == {"cupti", "events"}
    cupti = sorted(int(r["step"]) for r in by["cupti"])
    # the start's window: CUDA's start until the loop is warm (10 + 5 steps),
    # nothing after it in 12 s (the next is 5 minutes on, or on a change)
    assert cupti == list(range(15)), cupti
    assert len(cupti) < WIN_STEPS / 2
    for r in by["cupti"]:
        assert int(r["kernels"]) == 40
    for r in by["events"]:
        # no kernel records: their figures are unknown (empty), not 0
        assert r["kernels"] == "" and r["gpu_busy_ns"] == ""
        # the GPU's span from the step's begin event to its end event:
        # the last kernel ends 19.8 ms after the step began, and the end
        # event cannot complete before the host recorded it. The fake's
        # completions run on the host's clock, late when the host is busy
        # (23.3 ms against a 20.5 ms step under load): never two steps' worth
        span, interval = int(r["gpu_span_ns"]), int(r["interval_ns"])
        assert 19.7 * MS <= span <= 1.5 * interval + MS, (span, interval)


def test_full_trace_has_kernel_records_on_every_step(trace_modes):
    got = rows(trace_modes["full"])
    assert len(got) == WIN_STEPS
    assert {r["source"] for r in got} == {"cupti"}
    assert all(int(r["kernels"]) == 40 for r in got)
    # events ride along in full mode too: every row has its span
    assert all(r["gpu_span_ns"] != "" for r in got)
    assert any('gpu.cupti on: api 27, full' in t for t in [(trace_modes["full"] / "trace.json").read_text()])


def test_windows_keep_the_summarys_gpu_figures(trace_modes, run_cli):
    w = summary(trace_modes["windows"])["steps"]["gpu"]
    f = summary(trace_modes["full"])["steps"]["gpu"]
    # kernel figures from the window's 14 warm steps: the same as full's
    assert w["warm_steps"] == 14 and f["warm_steps"] == WIN_STEPS - 1
    # the truth of every step: 40 kernels, 19.6 ms of them, 19.6 ms busy
    for g in (w, f):
        assert g["kernels_per_step"] == pytest.approx(40)
        assert g["kernel_ms_mean"] == pytest.approx(19.6, rel=1e-3)
        assert g["busy_ms_mean"] == pytest.approx(19.6, rel=1e-3)
        assert 0 < g["busy_share"] <= 1
    assert w["event_steps"] == WIN_STEPS - 15 and f["event_steps"] == 0
    assert w["undetailed_steps"] == 0
    assert 19.7 <= w["gpu_ms_mean"] and w["gpu_share"] <= 1.0
    # the verdict stands on the windows, and the report says what they cover
    rep = run_cli("report", "--format", "json", trace_modes["windows"])
    diag = json.loads(rep.stdout)["diagnosis"]
    assert diag["primary"]["id"] == "gpu-bound"
    assert any("from 14 warm steps in CUPTI's windows" in n and "other 585 steps" in n
               for n in diag["notes"]), diag["notes"]


@pytest.mark.parametrize("why", ["no driver", "events off"])
def test_windows_without_events_give_rows_only_in_windows(run_cli, tmp_path, why):
    """No event calls to be had (no libcuda), or TRAINPERF_GPU_EVENTS=0: the
    steps outside the windows get no row rather than a row of zeros,
    counted in the summary."""
    d = tmp_path / "run"
    env = {"TRAINPERF_GPU_TRACE": "1", "TRAINPERF_CUPTI_LIB": str(FAKE),
           "TRAINPERF_CUDA_LIB": str(tmp_path / "no-libcuda.so") if why == "no driver" else str(CUDA)}
    if why == "events off":
        env["TRAINPERF_GPU_EVENTS"] = "0"
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "40", "healthy", env=env)
    assert p.returncode == 0, p.stderr
    got = rows(d)
    assert sorted(int(r["step"]) for r in got) == list(range(15))
    assert {r["source"] for r in got} == {"cupti"}
    assert summary(d)["steps"]["gpu"]["undetailed_steps"] == 25
    told = "gpu.events unavailable" in (d / "trace.json").read_text()
    assert told == (why == "no driver")


def test_gpu_trace_option_is_checked(run_cli, tmp_path):
    p = run_cli("run", "--gpu-trace", "some", "--out", tmp_path / "r", "--", "true")
    assert p.returncode == 2
    assert "--gpu-trace takes windows, full or off, not 'some'" in p.stderr
    # off: no injection at all, as --no-gpu-trace
    d = tmp_path / "off"
    p = run_cli("run", "--quiet", "--gpu-trace", "off", "--out", d, "--", PROG, "5", "healthy",
                env={"TRAINPERF_GPU_TRACE": "1", "TRAINPERF_CUPTI_LIB": str(FAKE)})
    assert p.returncode == 0, p.stderr
    assert not (d / "gpu_steps.csv").exists()


def test_events_without_cupti_give_event_rows_only(run_cli, tmp_path):
    """The injection loaded, CUPTI not found: every step's GPU time from its
    events, and no row pretends to have kernel records."""
    d = tmp_path / "run"
    env = {"TRAINPERF_GPU_TRACE": "1", "TRAINPERF_CUPTI_LIB": str(tmp_path / "missing.so"),
           "TRAINPERF_CUDA_LIB": str(CUDA)}
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "30", "healthy", env=env)
    assert p.returncode == 0, p.stderr
    got = rows(d)
    assert len(got) == 30 and {r["source"] for r in got} == {"events"}
    assert all(r["kernels"] == "" for r in got)
    g = summary(d)["steps"]["gpu"]
    assert g["event_steps"] == 30 and g["warm_steps"] == 0


def test_events_give_the_gpus_time_when_it_runs_behind(run_cli, tmp_path):
    """GPU-bound with no read-back: each 20 ms host step queues 30 ms of
    kernels, so the GPU falls 10 ms further behind every step. The events
    say what the host cannot see: each step took the GPU 30 ms. Nothing
    waits for them: the steps the GPU had not reached when the program
    ended have no events read, hence no row outside the windows."""
    d = tmp_path / "run"
    env = {"TRAINPERF_GPU_TRACE": "1", "TRAINPERF_CUPTI_LIB": str(FAKE), "TRAINPERF_CUDA_LIB": str(CUDA)}
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "60", "behind", env=env)
    assert p.returncode == 0, p.stderr
    ev = [r for r in rows(d) if r["source"] == "events"]
    assert ev
    for r in ev:
        # the GPU's time between the step's boundary events: its 30 ms of
        # kernels (the begin event completes when the GPU finished the last
        # step's work, the end event when it finished this step's)
        assert int(r["gpu_span_ns"]) == pytest.approx(30 * MS, abs=0.1 * MS), r
    g = summary(d)["steps"]["gpu"]
    # at the end the GPU was ~600 ms (about 30 steps) behind: those steps'
    # events were never reached while the program lived
    assert g["undetailed_steps"] >= 10
    assert g["event_steps"] + g["steps"] + g["undetailed_steps"] == 60
    assert g["gpu_ms_mean"] == pytest.approx(30, abs=0.1)


def test_a_scripts_profiler_between_windows(run_cli, tmp_path):
    """As shipped, a script's torch.profiler window (played as Kineto plays
    it: its own callbacks, its kinds enabled, then disabled) after the
    start's window: the profiler gets its records, and after it our kinds
    stay off as the schedule says (no kernel rows, no records late), each
    step outside the profiler's window with its events' GPU time."""
    d = tmp_path / "run"
    env = {"TRAINPERF_GPU_TRACE": "1", "TRAINPERF_CUPTI_LIB": str(FAKE), "TRAINPERF_CUDA_LIB": str(CUDA)}
    p = run_cli("run", "--quiet", "--out", d, "--", PROG, "90", "profiler", env=env)
    assert p.returncode == 0, p.stderr
    assert int(re.search(r"profiler records (\d+)", p.stdout).group(1)) > 0
    got = rows(d)
    assert sorted(int(r["step"]) for r in got if r["source"] == "cupti") == list(range(15))
    g = summary(d)["steps"]["gpu"]
    assert g["records_late"] == 0 and g["undetailed_steps"] == 0
    assert g["steps_in_profiler"] >= 30
    assert g["event_steps"] + g["steps"] + g["steps_in_profiler"] == 90
