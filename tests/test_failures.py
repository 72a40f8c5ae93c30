"""Failures under `trainperf run` (issue 14): the hang watch with the stacks of
every process and a verdict naming the culprit, --on-hang, --restart with its
no-progress cap, the heartbeat, and the checkpoint cost with Young/Daly.

Real processes only: Python scripts that step through trainperf's API (or the
zero-code hook on real PyTorch training), a real torchrun job over gloo. No
test bounds wall-clock time: the hang scripts would run forever, so the
subprocess timeout is what a broken watch runs into."""
import json
import math
import re
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

PYDIR = ROOT / "python"

STEPPER = r"""
import os, sys, time, trainperf

def steps(n, dt=0.01):
    for _ in range(n):
        with trainperf.step():
            time.sleep(dt)
"""


def script(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(STEPPER + body)
    return p


def load(run, name):
    with open(run / name) as f:
        return json.load(f)


def jsonl(run, name):
    p = run / name
    if not p.exists():
        return []
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]


# The given bound applies before the first step too (start-up hangs): these
# tests are about hangs after it, so start-up (a loaded machine, torch's
# import) gets a generous bound of its own.
LATE_START = ("--startup-timeout", "10m")


def py_env():
    return {"PYTHONPATH": str(PYDIR), "PYTHONDONTWRITEBYTECODE": "1"}


def test_hang_in_named_function_is_found_and_killed(run_cli, tmp_path):
    s = script(tmp_path, "hang.py", """
def wait_for_peer():
    while True:
        time.sleep(0.1)

steps(20)
wait_for_peer()
""")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "2s", *LATE_START,
                "--on-hang", "kill", "--", sys.executable, s, timeout=120, env=py_env())
    # killed by the watch's SIGTERM: the exit is the command's own
    assert r.returncode == 128 + 15, r.stderr
    assert "hang: pid" in r.stderr and "wait_for_peer (hang.py:" in r.stderr
    hangs = jsonl(run, "hangs.jsonl")
    assert len(hangs) == 1
    h = hangs[0]
    assert h["verdict"].startswith("pid ") and "in wait_for_peer (hang.py:" in h["verdict"]
    assert h["action"] == "kill" and h["bound_kind"] == "given" and h["bound_s"] == 2
    # fired after the bound, never before
    assert h["since_last_step_s"] >= 2
    stacks = (run / h["stacks"]).read_text()
    assert stacks.splitlines()[1] == "verdict: " + h["verdict"]
    assert 'File "%s", line' % s in stacks and "in wait_for_peer" in stacks and "<module>" in stacks
    assert "Threads (/proc" in stacks
    att = load(run, "attempts.json")["attempts"]
    assert len(att) == 1 and att[0]["ended_by"] == "hang" and att[0]["signal"] == 15
    assert att[0]["steps"] == 20 and att[0]["end_t"] >= h["t"]
    alerts = jsonl(run, "alerts.jsonl")
    hw = [a for a in alerts if a["rule"] == "hang_watch"]
    assert hw and hw[0]["severity"] == "critical" and h["verdict"] in hw[0]["message"]
    # the report opens with the verdict, then the stacks
    md = (run / "report.md").read_text()
    head = md.split("\n| |")[0]
    assert "**Hang:** pid" in head and "wait\\_for\\_peer (hang.py:" in head
    assert "## Hangs" in md and "in wait_for_peer" in md
    hb = load(run, "heartbeat.json")
    assert hb["state"] == "finished" and hb["steps"] == 20 and hb["hangs"] == 1
    assert hb["ranks"][0]["step"] == 20 and hb["ranks"][0]["rank"] is None
    # no FIFO left behind: a plain copy of the run directory must not block
    assert not list((run / "live").glob("ctl-*"))


def test_hang_dump_keeps_training_and_learns_its_bound(run_cli, tmp_path):
    # default action: stacks only; the run goes on and ends by itself
    s = script(tmp_path, "stall.py", """
def stuck_here():
    # what an outside watchdog sees: the heartbeat, while this process is stuck
    hb = os.path.join(os.environ["TRAINPERF_RUN_DIR"], "heartbeat.json")
    for _ in range(1200):  # up to 60 s: a loaded machine dumps slowly
        time.sleep(0.05)
        try:
            with open(hb) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if doc["state"] == "hung":
            print("HB", json.dumps(doc), flush=True)
            break

import json
steps(30)
stuck_here()
steps(5)
""")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "auto:2s", "--", sys.executable,
                s, timeout=120, env=py_env())
    assert r.returncode == 0, r.stderr
    h = jsonl(run, "hangs.jsonl")
    assert len(h) == 1 and h[0]["action"] == "dump" and h[0]["bound_kind"] == "learned"
    # max(10 x p99, floor 2 s) over the steps before the stall, each thread's
    # first step left out
    rows = [l.split(",") for l in (run / "steps.csv").read_text().splitlines()]
    hdr = rows[0]
    iv = sorted(int(r[hdr.index("interval_ns")]) / 1e9 for r in rows[1:]
                if 0 < int(r[hdr.index("step")]) < 30)
    p99 = iv[math.ceil(0.99 * len(iv)) - 1]
    assert math.isclose(h[0]["bound_s"], max(10 * p99, 2.0), abs_tol=2e-3), (h[0], p99)
    assert "in stuck_here (stall.py:" in h[0]["verdict"]
    att = load(run, "attempts.json")["attempts"]
    assert att[0]["exit_code"] == 0 and att[0]["steps"] == 35
    fj = load(run, "failures.json")
    assert fj["hangs"] == 1 and fj["failures"] == 0 and fj["last_hang_verdict"] == h[0]["verdict"]
    hb = load(run, "heartbeat.json")
    assert hb["steps"] == 35 and hb["hang_bound_s"] == h[0]["bound_s"]
    assert hb["state"] == "finished"
    live = [l for l in r.stdout.splitlines() if l.startswith("HB ")]
    assert live, r.stdout
    hb = json.loads(live[0][3:])
    assert hb["steps"] == 30 and hb["hangs"] == 1 and hb["since_last_step_s"] >= hb["hang_bound_s"]
    assert hb["ranks"][0]["step"] == 30 and hb["ranks"][0]["pid"] == att[0]["pid"]
    text = run_cli("report", run, timeout=60)
    assert text.returncode == 0
    first = text.stdout.splitlines()[1]
    assert first.startswith("HANG pid ") and "stuck_here" in first


def test_gil_held_in_c_code_gets_faulthandler_stacks(run_cli, tmp_path):
    # the answering thread cannot run while the main thread holds the GIL in
    # C code (a regular expression backtracking): faulthandler's signal still works
    s = script(tmp_path, "spin.py", """
import re

def spin_in_c():
    re.match(r"(a+)+$", "a" * 64 + "b")

steps(15)
spin_in_c()
""")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "1s", *LATE_START,
                "--on-hang", "kill", "--", sys.executable, s, timeout=120, env=py_env())
    assert r.returncode == 128 + 15, r.stderr
    h = jsonl(run, "hangs.jsonl")[0]
    p = h["processes"][0]
    assert p["source"] == "faulthandler", h
    assert h["verdict"].startswith("pid %d (" % p["pid"]), h
    assert "in spin_in_c (spin.py:" in h["verdict"], h
    assert "Python stacks (faulthandler)" in (run / h["stacks"]).read_text()


def test_exec_after_registering_is_never_signalled(run_cli, tmp_path):
    # the process registered faulthandler, then exec'd a program that has no
    # handler: the real-time signal would kill it, so it is not sent
    s = script(tmp_path, "execs.py", """
steps(15)
os.execv("/bin/sleep", ["sleep", "600"])
""")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "1s", *LATE_START,
                "--on-hang", "kill", "--", sys.executable, s, timeout=120, env=py_env())
    # ended by the watch's SIGTERM, not by SIGRTMIN+6
    assert r.returncode == 128 + 15, r.stderr
    h = jsonl(run, "hangs.jsonl")[0]
    assert h["processes"][0]["comm"] == "sleep"
    assert h["processes"][0]["source"] != "faulthandler"


PLAIN = """
def sleeping_here():
    time.sleep(60)

steps(15)
sleeping_here()
"""


def hang_without_hook(run_cli, tmp_path):
    # --no-auto: no faulthandler, no answering thread: read from outside only
    s = script(tmp_path, "plain.py", PLAIN)
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--no-auto", "--out", run, "--hang-timeout", "1s",
                *LATE_START, "--on-hang", "kill", "--", sys.executable, s, timeout=180,
                env=py_env())
    assert r.returncode == 128 + 15, r.stderr
    h = jsonl(run, "hangs.jsonl")[0]
    p = h["processes"][0]
    stacks = (run / h["stacks"]).read_text()
    assert "Threads (/proc" in stacks and "wchan" in stacks
    assert p["where"], h
    assert h["verdict"].startswith("pid %d (" % p["pid"])
    return h, p, stacks


def test_process_without_the_hook_gets_python_stacks_from_pyspy(run_cli, tmp_path):
    if not shutil.which("py-spy"):
        pytest.skip("py-spy not installed (scripts/install-deps.sh installs it)")
    h, p, stacks = hang_without_hook(run_cli, tmp_path)
    assert p["source"].startswith("py-spy"), h
    assert "Python stacks (py-spy dump):" in stacks and '"MainThread"' in stacks
    # the Python place, not a native frame, names the culprit
    assert "in sleeping_here (plain.py:" in h["verdict"], h
    assert re.search(r"sleeping_here \(.*plain\.py:\d+\)", stacks), stacks
    if shutil.which("gdb"):
        # native stacks of the same process as well, said to come from gdb
        assert p["source"] == "py-spy+gdb" and "Native stacks (gdb):" in stacks
        assert stacks.index("Python stacks (py-spy") < stacks.index("Native stacks (gdb)")


def test_process_without_the_hook_gets_native_stacks_from_gdb(run_cli, tmp_path):
    if not shutil.which("gdb"):
        pytest.skip("gdb not installed (scripts/install-deps.sh installs it)")
    # a C program has no Python stacks: gdb's alone
    sleeper = shutil.which("sleep")
    run = tmp_path / "run"
    prog = tmp_path / "c_stepper.sh"
    prog.write_text("#!/bin/sh\nexec %s %s\n" % (sys.executable, script(tmp_path, "cstep.py", """
steps(15)
os.execv(%r, ["sleep", "60"])
""" % sleeper)))
    prog.chmod(0o755)
    r = run_cli("run", "--quiet", "--no-auto", "--out", run, "--hang-timeout", "1s",
                *LATE_START, "--on-hang", "kill", "--", prog, timeout=180, env=py_env())
    assert r.returncode == 128 + 15, r.stderr
    h = jsonl(run, "hangs.jsonl")[0]
    p = h["processes"][0]
    stacks = (run / h["stacks"]).read_text()
    assert p["comm"] == "sleep" and p["source"] == "gdb", h
    assert "Native stacks (gdb):" in stacks and "#0 " in stacks
    assert "py-spy" not in stacks  # not a Python process: py-spy is not tried
    assert p["where"].endswith("(native)"), h


def test_hang_verdict_names_the_trainee_not_its_sleeping_child(run_cli, tmp_path):
    # Issue 27 item 8: with nothing announced (--no-auto), the verdict named
    # the deepest process with a known place: a `sleep` child of the trainee,
    # not the trainee that recorded the steps and then hung.
    s = script(tmp_path, "parent.py", """
import subprocess
steps(20)
child = subprocess.Popen(["sleep", "999"])
def wait_for_peer():
    while True:
        time.sleep(0.1)
wait_for_peer()
""")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--no-auto", "--out", run, "--hang-timeout", "2s",
                *LATE_START, "--on-hang", "kill", "--", sys.executable, s, timeout=180,
                env=py_env())
    assert r.returncode == 128 + 15, r.stderr
    h = jsonl(run, "hangs.jsonl")[0]
    procs = {p["comm"]: p for p in h["processes"]}
    assert "sleep" in procs, h  # the child was there, and dumped
    trainee = [p for p in h["processes"] if p["stepped"]]
    assert len(trainee) == 1 and trainee[0]["comm"].startswith("python"), h
    assert h["verdict"].startswith("pid %d (python" % trainee[0]["pid"]), h
    assert "sleep" not in h["verdict"], h
    if shutil.which("py-spy"):
        assert "in wait_for_peer (parent.py:" in h["verdict"], h


def test_hang_before_the_first_step_with_a_given_bound(run_cli, tmp_path):
    # stuck before its loop: the given bound applies from the command's start
    s = script(tmp_path, "early.py", """
def stuck_before_loop():
    while True:
        time.sleep(0.1)

stuck_before_loop()
steps(10)
""")
    run = tmp_path / "run"
    # 10 s: a generous margin for the interpreter to reach the function on a
    # loaded machine (the watch would name the import it is in otherwise)
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "10s", "--startup-timeout", "10s",
                "--on-hang", "kill",
                "--", sys.executable, s, timeout=180, env=py_env())
    assert r.returncode == 128 + 15, r.stderr
    assert "no first step after" in r.stderr and "startup bound 10 s" in r.stderr, r.stderr
    h = jsonl(run, "hangs.jsonl")
    assert len(h) == 1, h
    h = h[0]
    assert h["bound_kind"] == "startup" and h["before_first_step"] is True
    assert h["bound_s"] == 10 and h["since_last_step_s"] >= 10
    assert h["verdict"].startswith("pid ") and "in stuck_before_loop (early.py:" in h["verdict"]
    att = load(run, "attempts.json")["attempts"]
    assert len(att) == 1 and att[0]["ended_by"] == "hang" and att[0]["steps"] == 0
    md = (run / "report.md").read_text()
    assert "**Hang:** pid" in md and "no first step after" in md
    assert load(run, "failures.json")["options"]["startup_timeout_s"] == 10


def test_startup_bound_defaults(run_cli, tmp_path):
    # learned bound (default): 30 min before the first step and until the
    # learned bound is armed; what the heartbeat shows an outside watchdog
    s = script(tmp_path, "hb.py", """
import json
hb = os.path.join(os.environ["TRAINPERF_RUN_DIR"], "heartbeat.json")
for _ in range(1200):
    try:
        with open(hb) as f:
            doc = json.load(f)
        break
    except (OSError, ValueError):
        time.sleep(0.05)
print("HB", doc["steps"], doc["hang_bound_s"], doc["hang_bound_kind"], flush=True)
print("LAST", doc["last_step_t"], doc["last_step_unix_s"], doc["since_last_step_s"], flush=True)
steps(5)
""")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--", sys.executable, s, timeout=120,
                env=py_env())
    assert r.returncode == 0, r.stderr
    assert "HB 0 1800.0 startup" in r.stdout, r.stdout
    # before the first step the three last-step keys are there, null
    assert "LAST None None None" in r.stdout, r.stdout
    hb = load(run, "heartbeat.json")
    # 5 steps: the learned bound is not armed yet (10 are needed)
    assert hb["steps"] == 5 and hb["hang_bound_s"] == 1800 and hb["hang_bound_kind"] == "startup"
    # one clock: the last step's date is the start's plus its time, as "updated" is
    start = hb["updated_unix_s"] - hb["t"]
    assert abs(hb["last_step_unix_s"] - hb["last_step_t"] - start) < 0.005, hb
    assert all(abs(x["last_step_unix_s"] - x["last_step_t"] - start) < 0.005 for x in hb["ranks"])
    assert load(run, "failures.json")["options"]["startup_timeout_s"] == 1800
    # the watch off: no startup bound either
    run2 = tmp_path / "run2"
    r = run_cli("run", "--quiet", "--out", run2, "--hang-timeout", "off", "--", sys.executable,
                s, timeout=120, env=py_env())
    assert r.returncode == 0, r.stderr
    assert "HB 0 None None" in r.stdout, r.stdout
    assert load(run2, "failures.json")["options"]["startup_timeout_s"] is None


EMBEDDED = r"""
import os, sys, time, threading
import trainperf

run = trainperf.start(sys.argv[1], interval_s=0.2)

def waiting_for_the_loader():
    # stuck until the collector has saved the stacks (up to 2 min on a loaded machine)
    for _ in range(1200):
        if os.path.exists(os.path.join(run, "hangs.jsonl")):
            break
        time.sleep(0.1)

def side_worker():
    while True:
        time.sleep(0.5)

threading.Thread(target=side_worker, name="side", daemon=True).start()
for _ in range(20):
    with trainperf.step():
        time.sleep(0.01)
waiting_for_the_loader()
for _ in range(5):
    with trainperf.step():
        time.sleep(0.01)
trainperf.stop()
print("STOPPED", flush=True)
"""


def test_embedded_mode_saves_python_stacks_on_the_hang_alert(tmp_path):
    # no `trainperf run`: the in-process collector's hang alert is the trigger
    import subprocess
    s = tmp_path / "emb.py"
    s.write_text(EMBEDDED)
    run = tmp_path / "run"
    env = dict(os.environ, **py_env())
    env.pop("TRAINPERF_RUN_DIR", None)
    r = subprocess.run([sys.executable, str(s), str(run)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "STOPPED" in r.stdout, r.stderr
    h = jsonl(run, "hangs.jsonl")
    assert len(h) == 1, h
    h = h[0]
    assert h["bound_kind"] == "alert" and h["action"] == "dump" and h["since_last_step_s"] > 0
    p = h["processes"][0]
    assert p["source"] == "faulthandler" and p["rank"] is None, h
    assert h["verdict"].startswith("pid %d (" % p["pid"]), h
    assert "in waiting_for_the_loader (emb.py:" in h["verdict"], h
    stacks = (run / h["stacks"]).read_text()
    assert "embedded mode" in stacks.splitlines()[0]
    # every Python thread, the side thread included, and every thread from /proc
    assert "in side_worker" in stacks and "in waiting_for_the_loader" in stacks
    assert "Threads (/proc" in stacks and "tid %d " % p["pid"] in stacks
    alerts = [a for a in jsonl(run, "alerts.jsonl") if a["rule"] == "hang"]
    assert alerts and alerts[0]["state"] == "fired"
    md = (run / "report.md").read_text()
    assert "**Hang:** pid" in md.split("\n| |")[0] and "## Hangs" in md
    # the training went on after the dump
    rows = (run / "steps.csv").read_text().splitlines()
    assert len(rows) == 1 + 25


EMBEDDED_C = r"""
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "trainperf.h"

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void steps(int n)
{
    for (int i = 0; i < n; i++) {
        tpf_step_begin();
        nap_ms(10);
        tpf_step_end(1, 0);
    }
}

int main(int argc, char **argv)
{
    char hangs[4096];
    tpf_options o = TPF_OPTIONS_INIT;
    o.run_dir = argv[1];
    o.interval_s = 0.2;
    if (tpf_start(&o) != 0) return 10;
    steps(20);
    snprintf(hangs, sizeof(hangs), "%s/hangs.jsonl", argv[1]);
    for (int i = 0; i < 1200 && access(hangs, F_OK) != 0; i++) nap_ms(100);
    steps(5);
    return tpf_stop() == 0 ? 0 : 11;
}
"""


def test_embedded_mode_in_c_saves_the_threads_of_proc(build, tmp_path):
    # a C program has no Python stacks: /proc's threads and wait channels
    import subprocess
    from conftest import SANITIZE
    src = tmp_path / "emb.c"
    src.write_text(EMBEDDED_C)
    exe = tmp_path / "emb"
    san = ["-fsanitize=address,undefined"] if SANITIZE else []
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-g", *san, "-I", str(ROOT / "include"),
                    str(src), str(build / "libtrainperf.a"), "-pthread", "-lm", "-ldl", "-lz",
                    "-o", str(exe)], check=True, timeout=120)
    run = tmp_path / "run"
    env = dict(os.environ)
    env.pop("TRAINPERF_RUN_DIR", None)
    r = subprocess.run([str(exe), str(run)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    h = jsonl(run, "hangs.jsonl")
    assert len(h) == 1, h
    p = h[0]["processes"][0]
    assert p["source"] == "proc" and p["comm"] == "emb", h
    assert h[0]["verdict"].startswith("pid %d (emb) in kernel wait " % p["pid"]), h
    stacks = (run / h[0]["stacks"]).read_text()
    assert "no Python stacks" in stacks and "tid %d " % p["pid"] in stacks
    assert len((run / "steps.csv").read_text().splitlines()) == 1 + 25


def test_restart_after_one_failure(run_cli, tmp_path):
    marker = tmp_path / "failed-once"
    s = script(tmp_path, "flaky.py", """
steps(5)
if not os.path.exists(sys.argv[1]):
    open(sys.argv[1], "w").close()
    sys.exit(3)
""")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--restart", "2", "--restart-backoff", "0.1s",
                "--", sys.executable, s, marker, timeout=120, env=py_env())
    assert r.returncode == 0, r.stderr
    assert "attempt 1 (pid" in r.stderr and "restarting in 0.1 s (1 of 2)" in r.stderr
    att = load(run, "attempts.json")["attempts"]
    assert [a["exit_code"] for a in att] == [3, 0]
    assert [a["steps"] for a in att] == [5, 5]
    assert att[0]["restarted"] and not att[1]["restarted"]
    assert att[1]["start_t"] >= att[0]["end_t"] + 0.1
    fj = load(run, "failures.json")
    assert fj["attempts"] == 2 and fj["failures"] == 1
    assert fj["restart_s"] > 0 and fj["time_lost_s"] >= fj["restart_s"]
    assert fj["mtbf_source"] == "restarts"
    md = (run / "report.md").read_text()
    assert "## Attempts" in md and "2 attempts, 1 failed" in md
    # one run directory: the steps of both attempts
    rows = (run / "steps.csv").read_text().splitlines()
    assert len(rows) == 1 + 10


def test_on_hang_restart_starts_a_fresh_attempt(run_cli, tmp_path):
    marker = tmp_path / "hung-once"
    s = script(tmp_path, "hang_once.py", """
steps(12)
if not os.path.exists(sys.argv[1]):
    open(sys.argv[1], "w").close()
    while True:
        time.sleep(0.1)
""")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "1s", *LATE_START,
                "--on-hang", "restart", "--restart-backoff", "0s", "--", sys.executable, s, marker,
                timeout=120, env=py_env())
    assert r.returncode == 0, r.stderr
    att = load(run, "attempts.json")["attempts"]
    assert [a["ended_by"] for a in att] == ["hang", "exit"]
    assert att[0]["signal"] == 15 and att[0]["restarted"] and att[1]["exit_code"] == 0
    fj = load(run, "failures.json")
    assert fj["options"]["restarts"] == 3 and fj["hangs"] == 1 and fj["failures"] == 1


def test_crash_loop_without_progress_stops_early(run_cli, tmp_path):
    s = tmp_path / "crash.py"
    s.write_text("import sys\nsys.exit(4)\n")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--restart", "5", "--restart-backoff", "0s",
                "--", sys.executable, s, timeout=120, env=py_env())
    assert r.returncode == 4
    assert "not restarting: no progress" in r.stderr
    att = load(run, "attempts.json")["attempts"]
    assert len(att) == 2  # default cap: 2 attempts in a row without a step, not 6 attempts
    assert "no progress" in att[-1]["stopped"]
    assert all(a["steps"] == 0 and a["exit_code"] == 4 for a in att)


# A process of the run that left its session (setsid) and ignores SIGTERM:
# the sh becomes `sleep`, keeping its pid (written to the file in argv).
DETACH = """
import subprocess
def detach(pidfile):
    subprocess.Popen(["sh", "-c", "trap '' TERM; echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 999"
                      % (pidfile, pidfile, pidfile)], start_new_session=True)
    while not os.path.exists(pidfile):
        time.sleep(0.01)
    return int(open(pidfile).read())
"""


def alive(pid):
    try:
        st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return st != "Z"


def end_leftover(pidfile):
    """The test's own cleanup: a broken trainperf leaves the sleeper behind."""
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    if alive(pid):
        os.kill(pid, 9)


def test_on_hang_restart_ends_a_descendant_that_left_the_session(run_cli, tmp_path):
    # attempt 1 leaves a setsid'd process that ignores SIGTERM, then hangs:
    # the restart ends it (SIGKILL after the grace) before attempt 2 starts,
    # and the run ends instead of waiting for it
    pid1 = tmp_path / "left-1"
    seen = tmp_path / "seen-by-2"
    s = script(tmp_path, "detach_hang.py", DETACH + """
steps(12)
if not os.path.exists(sys.argv[1]):
    detach(sys.argv[1])
    while True:
        time.sleep(0.1)
left = int(open(sys.argv[1]).read())
open(sys.argv[2], "w").write("alive" if os.path.exists(f"/proc/{left}") else "gone")
""")
    run = tmp_path / "run"
    try:
        r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "1s", *LATE_START,
                    "--on-hang", "restart", "--restart", "2", "--restart-backoff", "0s",
                    "--kill-grace", "1s", "--", sys.executable, s, pid1, seen,
                    timeout=120, env=py_env())
    finally:
        end_leftover(pid1)
    assert r.returncode == 0, r.stderr
    att = load(run, "attempts.json")["attempts"]
    assert [a["ended_by"] for a in att] == ["hang", "exit"]
    assert seen.read_text() == "gone"


def test_on_hang_kill_ends_what_the_root_left_running(run_cli, tmp_path):
    # the command exits at once, leaving a setsid'd process that makes no step
    # and ignores SIGTERM: the watch goes on over it and --on-hang kill ends it
    pidf = tmp_path / "left"
    s = script(tmp_path, "detach_exit.py", DETACH + "detach(sys.argv[1])\n")
    run = tmp_path / "run"
    try:
        r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "1s",
                    "--startup-timeout", "1s", "--on-hang", "kill", "--kill-grace", "1s",
                    "--", sys.executable, s, pidf, timeout=120, env=py_env())
    finally:
        end_leftover(pidf)
    assert r.returncode == 0, r.stderr  # the root's own exit
    assert not alive(int(pidf.read_text()))
    h = jsonl(run, "hangs.jsonl")
    assert len(h) == 1 and h[0]["action"] == "kill", h
    assert h[0]["verdict"].startswith("pid %s " % pidf.read_text().strip()), h


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_trainperf_ends_the_whole_tree(cli, tmp_path, sig):
    # `timeout` or a scheduler sends trainperf SIGTERM: every process of the
    # run hears it, and one that ignores it is killed after the grace period
    pidf = tmp_path / "left"
    s = script(tmp_path, "detach_train.py", DETACH + """
detach(sys.argv[1])
while True:
    steps(1)
""")
    run = tmp_path / "run"
    env = dict(os.environ, **py_env())
    env.pop("TRAINPERF_RUN_DIR", None)
    p = subprocess.Popen([cli, "run", "--quiet", "--out", str(run), "--kill-grace", "1s", "--",
                          sys.executable, str(s), str(pidf)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if pidf.exists() or p.poll() is not None:
                break
            time.sleep(0.1)
        assert pidf.exists()
        # a step recorded first: the summary must count what ran before the signal
        for _ in range(300):
            sp = run / "steps.csv"
            if sp.exists() and len(sp.read_text().splitlines()) > 1:
                break
            time.sleep(0.1)
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
        end_leftover(pidf)
    assert p.returncode == 128 + sig, err
    assert not alive(int(pidf.read_text()))
    assert load(run, "summary.json")["steps"]["count"] > 0


def test_restart_on_chooses_what_restarts(run_cli, tmp_path):
    s = tmp_path / "fail.py"
    s.write_text("import sys\nsys.exit(3)\n")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--restart", "3", "--restart-on", "signal",
                "--", sys.executable, s, timeout=120, env=py_env())
    assert r.returncode == 3
    assert len(load(run, "attempts.json")["attempts"]) == 1


@pytest.mark.parametrize("args,word", [
    (["--hang-timeout", "soon"], "--hang-timeout"),
    (["--hang-timeout", "0.5s"], "--hang-timeout"),
    (["--hang-timeout", "auto:x"], "auto:"),
    (["--on-hang", "explode"], "--on-hang"),
    (["--restart", "-1"], "--restart"),
    (["--restart-on", "sometimes"], "--restart-on"),
    (["--mtbf", "never"], "--mtbf"),
    (["--on-hang", "kill", "--hang-timeout", "off"], "--on-hang kill"),
    (["--startup-timeout", "soon"], "--startup-timeout"),
    (["--startup-timeout", "0s"], "--startup-timeout"),
])
def test_bad_failure_options(run_cli, tmp_path, args, word):
    run = tmp_path / "run"
    r = run_cli("run", "--out", run, *args, "--", "true")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0]
    assert not run.exists()


DDP_HANG = r"""
import time
import torch
import torch.distributed as dist

def wait_for_peer():
    while True:
        time.sleep(0.1)

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10000):
    if rank == 1 and step == 8:
        wait_for_peer()
    model(torch.randn(4, 8)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.torch
@pytest.mark.once
def test_torchrun_hang_names_the_rank(run_cli, tmp_path):
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun")
    if not torchrun:
        pytest.skip("torchrun not installed")
    s = tmp_path / "ddp_hang.py"
    s.write_text(DDP_HANG)
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "3s", *LATE_START,
                "--on-hang", "kill", "--", torchrun, "--standalone", "--nproc-per-node", "2", s,
                timeout=300)
    assert r.returncode != 0
    h = jsonl(run, "hangs.jsonl")
    assert len(h) == 1, r.stderr
    v = h[0]["verdict"]
    # the culprit first: it is not in a collective; the rank waiting for it is
    assert v.startswith("rank 1 in wait_for_peer (ddp_hang.py:"), v
    assert "; rank 0 in all_reduce" in v, v
    if (PYDIR / "trainperf" / "_comm.py").exists():
        # with the distributed hooks, the collective's sequence number
        assert re.search(r"rank 0 in all_reduce #\d+", v), v
    procs = {p["rank"]: p for p in h[0]["processes"] if p["rank"] is not None}
    assert procs[0]["collective"] == "all_reduce" and procs[1]["collective"] is None
    stacks = (run / h[0]["stacks"]).read_text()
    assert "==== rank 0, pid" in stacks and "==== rank 1, pid" in stacks
    assert "distributed_c10d.py" in stacks
    hb = load(run, "heartbeat.json")
    assert sorted(x["rank"] for x in hb["ranks"]) == [0, 1]
    assert all(x["step"] >= 8 for x in hb["ranks"])
    assert "**Hang:** rank 1 in wait" in (run / "report.md").read_text()


DDP_HANG_NO_HOOK = r"""
import time
import torch
import torch.distributed as dist
import trainperf

def wait_for_peer():
    while True:
        time.sleep(0.1)

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(8, 8)
for step in range(10000):
    with trainperf.step():  # --no-auto: the script's own steps
        if rank == 1 and step == 8:
            wait_for_peer()
        model(torch.randn(4, 8)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
"""


@pytest.mark.torch
@pytest.mark.once
def test_torchrun_hang_without_the_hook_read_by_pyspy(run_cli, tmp_path):
    # no auto hook in any process: py-spy reads every rank's Python stack from
    # outside (what people do by hand over every PID), gdb adds native stacks
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun")
    if not torchrun:
        pytest.skip("torchrun not installed")
    if not shutil.which("py-spy"):
        pytest.skip("py-spy not installed (scripts/install-deps.sh installs it)")
    s = tmp_path / "ddp_plain.py"
    s.write_text(DDP_HANG_NO_HOOK)
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--no-auto", "--out", run, "--hang-timeout", "3s", *LATE_START,
                "--on-hang", "kill", "--", torchrun, "--standalone", "--nproc-per-node", "2", s,
                timeout=300, env=py_env())
    assert r.returncode != 0
    h = jsonl(run, "hangs.jsonl")
    assert len(h) == 1, r.stderr
    v = h[0]["verdict"]
    assert v.startswith("rank 1 in wait_for_peer (ddp_plain.py:"), v
    assert "; rank 0 in all_reduce (ddp_plain.py:" in v, v
    procs = {p["rank"]: p for p in h[0]["processes"] if p["rank"] is not None}
    assert all(p["source"].startswith("py-spy") for p in procs.values()), procs
    assert procs[0]["collective"] == "all_reduce" and procs[1]["collective"] is None
    stacks = (run / h[0]["stacks"]).read_text()
    assert stacks.count("Python stacks (py-spy dump):") >= 2


RDZV_HANG = r"""
import os
import time
import torch.distributed as dist

def late_to_the_party():
    while True:
        time.sleep(0.1)

if os.environ["RANK"] == "1":
    late_to_the_party()        # never joins the rendezvous
dist.init_process_group("gloo")
dist.barrier()
"""


@pytest.mark.torch
@pytest.mark.once
def test_torchrun_rank_missing_from_the_rendezvous(run_cli, tmp_path):
    # no step ever: the given bound applies from the start (30 s: a generous
    # margin for torchrun and both ranks to import torch on a loaded machine)
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun")
    if not torchrun:
        pytest.skip("torchrun not installed")
    s = tmp_path / "rdzv.py"
    s.write_text(RDZV_HANG)
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "30s", "--startup-timeout", "30s",
                "--on-hang", "kill", "--",
                torchrun, "--standalone", "--nproc-per-node", "2", s, timeout=300)
    assert r.returncode != 0
    h = jsonl(run, "hangs.jsonl")
    assert len(h) == 1, r.stderr
    h = h[0]
    assert h["before_first_step"] is True and h["bound_kind"] == "startup"
    v = h["verdict"]
    # the rank that never came first; the one waiting for it in the set-up
    assert v.startswith("rank 1 in late_to_the_party (rdzv.py:"), v
    assert "; rank 0 in init_process_group (rdzv.py:" in v, v
    procs = {p["rank"]: p for p in h["processes"] if p["rank"] is not None}
    assert procs[0]["collective"] == "init_process_group" and procs[1]["collective"] is None
    stacks = (run / h["stacks"]).read_text()
    assert "==== rank 0, pid" in stacks and "==== rank 1, pid" in stacks
    assert "in init_process_group" in stacks and "in late_to_the_party" in stacks
    # --on-hang kill ended the whole job
    att = load(run, "attempts.json")["attempts"]
    assert len(att) == 1 and att[0]["ended_by"] == "hang" and att[0]["steps"] == 0
    assert not [p for p in h["processes"] if os.path.exists("/proc/%d" % p["pid"])]


CKPT = r"""
import os, sys
import torch
out = sys.argv[1]
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(31):
    model(torch.randn(16, 64)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    if step % 10 == 9:
        torch.save({"model": model.state_dict(), "pad": torch.zeros(1_000_000)},
                   os.path.join(out, "ckpt-%d.pt" % step))
"""


@pytest.mark.torch
def test_checkpoint_cost_every_n_steps(run_cli, tmp_path):
    pytest.importorskip("torch")
    s = tmp_path / "ckpt.py"
    s.write_text(CKPT)
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--mtbf", "2h", "--", sys.executable, s, tmp_path,
                timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.glob("ckpt-*.pt"))) == 3
    rows = [l.split(",") for l in (run / "steps.csv").read_text().splitlines()]
    hdr = rows[0]
    ci = hdr.index("checkpoint_ns")
    ck_steps = [int(r[hdr.index("step")]) for r in rows[1:] if r[ci] not in ("", "0")]
    # torch.save after optimizer step 9 runs in step 10 (the auto hook's steps
    # run optimizer step to optimizer step)
    assert ck_steps == [10, 20, 30]
    ck = load(run, "failures.json")["checkpoint"]
    assert ck["count"] == 3 and ck["cost_s"] > 0 and 0 < ck["share"] < 1
    assert ck["mtbf_s"] == 7200
    c, m = ck["cost_s"], 7200
    assert math.isclose(ck["young_interval_s"], math.sqrt(2 * c * m), rel_tol=1e-6)
    assert math.isclose(ck["optimal_interval_s"], math.sqrt(2 * c * m) - c, rel_tol=1e-6)
    md = (run / "report.md").read_text()
    assert "## Checkpoints" in md and "3 checkpoints" in md and "(--mtbf)" in md
    # the checkpoint is a phase of its own in the summary too
    summ = load(run, "summary.json")
    assert "checkpoint" in json.dumps(summ)


PAUSES = r"""
import os, sys, time
import torch

class SlowFile:
    # a checkpoint that takes seconds (slow storage)
    def __init__(self):
        self.n = 0
    def write(self, b):
        time.sleep(0.2)
        self.n += len(b)
        return len(b)
    def flush(self):
        pass

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train(n):
    for _ in range(n):
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
        opt.zero_grad()

train(15)
model.eval()                      # evaluation: seconds without a step
with torch.no_grad():
    for _ in range(30):
        model(torch.randn(8, 16))
        time.sleep(0.1)
model.train()
train(5)
torch.save({"w": torch.zeros(1 << 16)}, SlowFile())   # a slow checkpoint
train(5)
"""


@pytest.mark.torch
def test_eval_and_checkpoint_are_not_hangs(run_cli, tmp_path):
    pytest.importorskip("torch")
    s = tmp_path / "pauses.py"
    s.write_text(PAUSES)
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--hang-timeout", "1s", *LATE_START,
                "--on-hang", "kill", "--", sys.executable, s, timeout=300)
    assert r.returncode == 0, r.stderr
    assert jsonl(run, "hangs.jsonl") == []
    att = load(run, "attempts.json")["attempts"]
    assert att[0]["steps"] == 25 and att[0]["checkpoints"] == 1
    ck = load(run, "failures.json")["checkpoint"]
    assert ck["count"] == 1 and ck["cost_s"] >= 1  # at least the sleeps in write()


def test_report_survives_damaged_failure_files(run_cli, tmp_path):
    s = tmp_path / "crash.py"
    s.write_text("import sys\nsys.exit(5)\n")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--restart", "1", "--restart-backoff", "0s",
                "--", sys.executable, s, timeout=120, env=py_env())
    assert r.returncode == 5
    (run / "hangs").mkdir(exist_ok=True)
    (run / "hangs" / "1.txt").write_text("x" * 3_000_000 + "\n" + "line\n" * 500)
    (run / "hangs.jsonl").write_text('{"hang": 1, "verdict": "rank 0 in <b>x</b>", "stacks": "hangs/1.txt"}\n'
                                     "not json\n" + '{"hang": "two", "stacks": "../../etc/passwd"}\n'
                                     + "{" * 5000 + "\n")
    (run / "attempts.json").write_text('{"attempts": [{"attempt": 1, "steps": "many"}, 3, null')
    (run / "failures.json").write_text('{"attempts": "x", "checkpoint": [1, 2], "mtbf_s": -1}')
    for fmt in ("text", "md", "html", "json"):
        rep = run_cli("report", run, "--format", fmt, timeout=60)
        assert rep.returncode == 0, (fmt, rep.stderr)
        if fmt == "html":
            assert "<b>x</b>" not in rep.stdout and "&lt;b&gt;x&lt;/b&gt;" in rep.stdout
        if fmt == "json":
            json.loads(rep.stdout)


@pytest.mark.torch
@pytest.mark.once
def test_checkpoint_hooks_of_dcp_lightning_and_hf(run_cli, tmp_path):
    # patched when their modules load, whichever imports them
    pytest.importorskip("torch")
    pytest.importorskip("lightning")
    pytest.importorskip("transformers")
    s = tmp_path / "hooks.py"
    s.write_text(
        "import torch\n"
        "import torch.distributed.checkpoint as dcp\n"
        "import lightning.pytorch as pl\n"
        "from transformers import trainer as hft\n"
        "f = lambda fn: bool(getattr(fn, '_trainperf_ckpt', False))\n"
        "print('HOOKS', f(torch.save), f(dcp.save), f(pl.Trainer.save_checkpoint),\n"
        "      f(hft.Trainer._save_checkpoint))\n")
    run = tmp_path / "run"
    r = run_cli("run", "--quiet", "--out", run, "--", sys.executable, s, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "HOOKS True True True True" in r.stdout, r.stdout
