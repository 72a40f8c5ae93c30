"""A run that is already going: `trainperf dump RUN|PID` and `trainperf profile
RUN --steps N | --memory`, against a real PyTorch training script running
under `trainperf run` (or without trainperf), tests/data/scripts/live_train.py."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from pyhelp import ROOT, require_extension

SCRIPT = ROOT / "tests" / "data" / "scripts" / "live_train.py"
WAIT_S = 180  # generous bound on waiting for the script to get somewhere: never a speed check


def env_without_trainperf(**extra):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("TRAINPERF_") or k == "PYTHONPATH":
            del e[k]
    e.update(extra)
    return e


def cli_run(cli, *args, timeout=300):
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env_without_trainperf(), cwd=str(ROOT))


def wait_for(cond, what):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > WAIT_S:
            pytest.fail("gave up waiting for " + what)
        time.sleep(0.2)


def step_rows(run):
    try:
        with open(run / "steps.csv") as f:
            return max(0, sum(1 for _ in f) - 1)
    except OSError:
        return 0


class Live:
    """live_train.py under `trainperf run` (or alone), stopped at the end."""

    def __init__(self, cli, tmp_path, *script_args, under_trainperf=True, run_opts=()):
        self.run = tmp_path / "run"
        self.stop = tmp_path / "STOP"
        cmd = [sys.executable, str(SCRIPT), str(self.stop), *map(str, script_args)]
        if under_trainperf:
            cmd = [cli, "run", "--quiet", "--out", str(self.run), *run_opts, "--"] + cmd
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env_without_trainperf(), cwd=str(ROOT))

    def hooked_pid(self):
        live = self.run / "live"
        names = [n for n in os.listdir(live) if n.startswith("ctl-")] if live.is_dir() else []
        return int(names[0][4:]) if names else None

    def finish(self):
        self.stop.touch()
        try:
            out, err = self.p.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
        return self.p.returncode, out, err


@pytest.fixture
def live(cli, tmp_path):
    made = []

    def start(*args, **kw):
        lv = Live(cli, tmp_path, *args, **kw)
        made.append(lv)
        return lv
    yield start
    for lv in made:
        if lv.p.poll() is None:
            lv.finish()


# --- dump ---------------------------------------------------------------------

@pytest.mark.torch
def test_dump_of_a_run_names_the_process_blocked_in_a_queue(cli, live):
    pytest.importorskip("torch")
    require_extension()
    lv = live("--block-at", "20")
    wait_for(lambda: (lv.stop.parent / "STOP.blocked").exists() or lv.p.poll() is not None,
             "the script to block")
    assert lv.p.poll() is None, lv.p.communicate()
    wait_for(lambda: lv.hooked_pid() is not None, "the hook's ctl FIFO")

    res = cli_run(cli, "dump", lv.run, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kind"] == "run" and doc["stacks"] == "dumps/1.txt"
    procs = [p for t in doc["trees"] for p in t["processes"]]
    py = [p for p in procs if p["pid"] == lv.hooked_pid()]
    # the hook answered (not py-spy): the main thread's user frame in the queue wait
    assert py and py[0]["source"] == "python", procs
    assert py[0]["where"].startswith("wait_for_batch (live_train.py:"), py[0]
    assert "wait_for_batch" in doc["trees"][0]["verdict"]

    # text: every thread's stack, kept in RUN/dumps/N.txt as well
    res = cli_run(cli, "dump", lv.run)
    assert res.returncode == 0, res.stderr
    assert 'Thread "MainThread"' in res.stdout and "/queue.py" in res.stdout
    assert "in wait_for_batch" in res.stdout
    kept = (lv.run / "dumps" / "2.txt").read_text()
    assert kept == res.stdout
    assert "dumps/2.txt" in res.stderr

    # nothing was asked of the profiler: the hook did nothing
    assert not (lv.run / "profile").exists()
    assert not [n for n in os.listdir(lv.run / "live") if n.startswith("answer-")]

    rc, _, err = lv.finish()
    assert rc == 0, err
    res = cli_run(cli, "dump", lv.run)
    assert res.returncode == 2 and "is not running" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.torch
def test_dump_of_a_pid_started_without_trainperf_reads_it_from_outside(cli, live):
    pytest.importorskip("torch")
    if not shutil.which("py-spy"):
        pytest.skip("py-spy is not installed (scripts/install-deps.sh)")
    lv = live("--block-at", "5", under_trainperf=False)
    wait_for(lambda: (lv.stop.parent / "STOP.blocked").exists() or lv.p.poll() is not None,
             "the script to block")
    assert lv.p.poll() is None, lv.p.communicate()
    res = cli_run(cli, "dump", lv.p.pid, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kind"] == "pid" and doc["stacks"] is None
    p = doc["trees"][0]["processes"][0]
    assert p["pid"] == lv.p.pid
    assert p["source"].startswith("py-spy"), p
    assert p["where"].startswith("wait_for_batch (live_train.py:"), p
    assert not lv.run.exists()  # a bare process id writes no run directory


def test_dump_bad_targets(cli, tmp_path):
    res = cli_run(cli, "dump", tmp_path / "nothing")
    assert res.returncode == 2 and "neither a run directory nor a process id" in res.stderr
    # a pid that no process has (pid_max is at most 4194304)
    res = cli_run(cli, "dump", "4194305")
    assert res.returncode == 2 and "no process 4194305" in res.stderr
    res = cli_run(cli, "dump", tmp_path)  # a directory no run holds
    assert res.returncode == 2 and "is not running" in res.stderr
    res = cli_run(cli, "dump")
    assert res.returncode == 2
    res = cli_run(cli, "dump", "--bogus", "1")
    assert res.returncode == 2 and "unknown option '--bogus'" in res.stderr


# --- profile ----------------------------------------------------------------------

@pytest.mark.torch
def test_profile_window_asked_after_step_50_lands_and_is_analysed(cli, live):
    pytest.importorskip("torch")
    require_extension()
    lv = live()
    wait_for(lambda: step_rows(lv.run) >= 50 or lv.p.poll() is not None, "50 steps")
    assert lv.p.poll() is None, lv.p.communicate()
    before = step_rows(lv.run)

    res = cli_run(cli, "profile", lv.run, "--steps", "5", "--memory", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert not doc["timed_out"] and len(doc["processes"]) == 1
    ans = doc["processes"][0]
    assert ans["pid"] == lv.hooked_pid() and ans["id"] == doc["id"]
    prof = ans["profile"]
    assert prof["state"] == "done", ans
    first = prof["first_step"]
    # the window began after the steps seen when it was asked for, and is N long
    assert first >= before and prof["last_step"] == first + 4
    trace = "profile/trace-rank0-step%d.json" % first
    assert trace in prof["files"]
    text = (lv.run / trace).read_text()
    assert sum(text.count('"ProfilerStep#%d"' % i) for i in range(1, 6)) == 5
    # a CPU run: the memory snapshot says why there is none
    assert ans["memory"]["state"] == "skipped"
    assert "no CUDA" in ans["memory"]["reason"]
    assert not (lv.run / "memory").exists()

    rc, _, err = lv.finish()
    assert rc == 0, err
    # the report analyses it as it does --profile windows
    res = cli_run(cli, "report", lv.run, "--json")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)["profiler"]
    assert rep["files"] == 1 and rep["not_analysed"] == []
    assert rep["analysis"] and rep["analysis"]["ranks"]

    # the run is over: nothing to ask
    res = cli_run(cli, "profile", lv.run, "--steps", "5")
    assert res.returncode == 2 and "is not running" in res.stderr


@pytest.mark.torch
def test_profile_text_output_names_the_window(cli, live):
    pytest.importorskip("torch")
    require_extension()
    lv = live()
    wait_for(lambda: step_rows(lv.run) >= 5 or lv.p.poll() is not None, "5 steps")
    res = cli_run(cli, "profile", lv.run, "--steps", "2", "--record-shapes")
    assert res.returncode == 0, res.stderr
    line = [ln for ln in res.stdout.splitlines() if "profiler window of steps" in ln]
    assert line and line[0].startswith("rank 0 (pid %d)" % lv.hooked_pid())
    assert "profile/trace-rank0-step" in line[0]
    trace = line[0].split()[-2]
    # --record-shapes reached torch.profiler
    assert '"Input Dims"' in (lv.run / trace).read_text()
    rc, _, err = lv.finish()
    assert rc == 0, err


@pytest.mark.torch
def test_profile_through_the_python_step_hooks(cli, live):
    # with a profiling option the hook's optimizer hooks are Python, not C:
    # the step listener is reached through auto_step_end
    pytest.importorskip("torch")
    require_extension()
    lv = live(run_opts=("--flops-step", "1000000"))
    wait_for(lambda: step_rows(lv.run) >= 5 or lv.p.poll() is not None, "5 steps")
    res = cli_run(cli, "profile", lv.run, "--steps", "2", "--json")
    assert res.returncode == 0, res.stderr
    prof = json.loads(res.stdout)["processes"][0]["profile"]
    assert prof["state"] == "done" and prof["last_step"] == prof["first_step"] + 1, prof
    assert (lv.run / prof["files"][0]).is_file()
    rc, _, err = lv.finish()
    assert rc == 0, err


@pytest.mark.parametrize("args,msg", [
    ([], "say what to take: --steps N"),
    (["--steps", "0"], "--steps needs a number of steps 1..1000"),
    (["--steps", "x"], "--steps needs a number of steps"),
    (["--memory", "--with-stack"], "go with --steps N"),
    (["--steps", "3", "--timeout", "soon"], "--timeout needs a duration"),
    (["--steps", "3", "--bogus"], "unknown option '--bogus'"),
])
def test_profile_bad_arguments(cli, tmp_path, args, msg):
    res = cli_run(cli, "profile", tmp_path, *args)
    assert res.returncode == 2 and msg in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_profile_needs_a_running_run(cli, tmp_path):
    res = cli_run(cli, "profile", tmp_path, "--steps", "3")
    assert res.returncode == 2 and "is not running" in res.stderr
    assert not (tmp_path / "live" / "request.json").exists()


def test_step_listener_runs_after_each_step_until_it_says_stop():
    require_extension()
    code = r"""
import trainperf
from trainperf import _core
seen = []
def fn():
    seen.append(_core.steps_ended())
    return len(seen) < 3
n0 = _core.steps_ended()
_core.set_step_listener(fn)
for _ in range(5):
    with trainperf.step():
        pass
assert seen == [n0 + 1, n0 + 2, n0 + 3], seen   # dropped once it returned False
def bad():
    seen.append("bad")
    raise RuntimeError("x")
_core.set_step_listener(bad)
trainperf.step_begin(); trainperf.step_end(); trainperf.step_begin(); trainperf.step_end()
assert seen[3:] == ["bad"], seen                 # a listener that raises is dropped, quietly
print("ok")
"""
    from pyhelp import run_py
    res = run_py(["-c", code])
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
