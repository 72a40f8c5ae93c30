"""`trainperf run` end to end: real child processes, real run directories.

The instrumented child is a tiny C program built here against the library;
each step index is printed (and flushed) only after tpf_step_end returned,
so every printed step was published to the shared segment."""
import csv
import json
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest

from conftest import BUILD, ROOT, SANITIZE

CHILD_SRC = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <trainperf.h>

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {}
}

static void steps(long n, long delay_us)
{
    for (long i = 0; i < n; i++) {
        tpf_range_push(TPF_PHASE_DATA);
        sleep_us(delay_us);
        tpf_range_pop();
        tpf_step_begin();
        tpf_range_push(TPF_PHASE_FORWARD);
        sleep_us(delay_us / 4 + 1);
        tpf_range_pop();
        tpf_range_push(TPF_PHASE_BACKWARD);
        sleep_us(delay_us / 4 + 1);
        tpf_range_pop();
        tpf_step_end(32, 128);
        printf("%ld\n", i);
        fflush(stdout);
    }
}

static long thread_steps;

static void *thread_main(void *arg)
{
    (void)arg;
    steps(thread_steps, 300);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 3 && strcmp(argv[1], "threads") == 0) {
        /* Threads that start after the collector has mapped the segment. */
        long nt = strtol(argv[2], NULL, 10);
        thread_steps = strtol(argv[3], NULL, 10);
        steps(1, 300);
        sleep_us(400000);
        pthread_t t[16];
        for (long i = 0; i < nt && i < 16; i++) pthread_create(&t[i], NULL, thread_main, NULL);
        for (long i = 0; i < nt && i < 16; i++) pthread_join(t[i], NULL);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "embedded") == 0 && argc > 3) {
        /* One start/stop cycle per run dir given, then the state checks. */
        for (int d = 2; d < argc - 1; d++) {
            tpf_options o = TPF_OPTIONS_INIT;
            o.run_dir = argv[d];
            o.interval_s = 0.2;
            int rc = tpf_start(&o);
            fprintf(stderr, "start %d\n", rc);
            if (rc) return 10;
            fprintf(stderr, "again %d dir %s\n", tpf_start(&o), tpf_run_dir());
            steps(strtol(argv[argc - 1], NULL, 10), 200);
            rc = tpf_stop();
            fprintf(stderr, "stop %d\n", rc);
            if (rc) return 11;
        }
        fprintf(stderr, "stop-again %d\n", tpf_stop());
        return 0;
    }
    if (argc > 3 && strcmp(argv[1], "fork") == 0) {
        /* DataLoader-like workers: each its own process and segment, with a rank. */
        long workers = strtol(argv[2], NULL, 10), n = strtol(argv[3], NULL, 10);
        for (long w = 0; w < workers; w++) {
            pid_t pid = fork();
            if (pid == 0) {
                char r[16];
                snprintf(r, sizeof(r), "%ld", w + 1);
                setenv("RANK", r, 1);
                steps(n, 300);
                _exit(0);
            }
        }
        steps(n, 300);
        while (wait(NULL) > 0) {}
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "start") == 0) {
        int rc = tpf_start(NULL);
        printf("%d\n", rc);
        if (rc == 0) {
            steps(3, 100);
            printf("stop %d\n", tpf_stop());
        }
        return 0;
    }
    if (argc < 5) return 2;
    steps(strtol(argv[2], NULL, 10), strtol(argv[4], NULL, 10));
    return (int)strtol(argv[3], NULL, 10);
}
"""

STEPS_COLUMNS = ["rank", "local_rank", "pid", "tid", "step", "start_s", "duration_ns",
                 "interval_ns", "data_ns", "forward_ns", "backward_ns", "optimizer_ns",
                 "comm_ns", "eval_ns", "checkpoint_ns", "other_ns", "samples", "tokens"]
RUN_KEYS = {"format_version", "trainperf_version", "mode", "command", "cwd", "host", "kernel",
            "cpus", "mem_total_bytes", "start_unix_s", "start_mono_ns", "end_unix_s",
            "duration_s", "interval_s", "root_pid", "exit", "gpus", "sources", "options"}
SUMMARY_KEYS = {"format_version", "duration_s", "exit", "steps", "resources", "gpus", "alerts",
                "trace", "sources", "diagnosis"}
STEP_KEYS = {"count", "ranks", "first_step_s", "steps_per_s", "samples_per_s", "tokens_per_s",
             "step_time_ms", "data_wait_ms", "data_wait_share", "phase_share", "per_rank",
             "events_dropped"}
RUN_FILES = ["run.json", "metrics.csv", "procs.csv", "steps.csv", "alerts.jsonl", "trace.json",
             "summary.json"]


@pytest.fixture(scope="session")
def child(build, tmp_path_factory):
    d = tmp_path_factory.mktemp("child")
    src = d / "child.c"
    src.write_text(CHILD_SRC)
    exe = d / "child"
    san = ["-fsanitize=address,undefined"] if SANITIZE else []
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-g", *san, "-I", str(ROOT / "include"),
                    str(src), str(build / "libtrainperf.a"), "-pthread", "-lpthread", "-lm", "-ldl", "-lz",
                    "-o", str(exe)], check=True, timeout=120)
    return str(exe)


def env_clean(**extra):
    e = dict(os.environ)
    e.pop("TRAINPERF_RUN_DIR", None)
    e.update(extra)
    return e


def read_steps(run):
    with open(run / "steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows


def load_trace(path):
    text = pathlib.Path(path).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # Array form: a run cut short leaves the closing bracket out.
        return json.loads(text + "]")


def check_complete(run):
    for name in RUN_FILES:
        assert (run / name).is_file(), name
    ri = json.loads((run / "run.json").read_text())
    sm = json.loads((run / "summary.json").read_text())
    assert RUN_KEYS <= ri.keys()
    assert SUMMARY_KEYS <= sm.keys()
    assert STEP_KEYS <= sm["steps"].keys()
    events = json.loads((run / "trace.json").read_text())  # closed properly
    assert isinstance(events, list)
    for line in (run / "alerts.jsonl").read_text().splitlines():
        json.loads(line)
    return ri, sm, events


def test_n_steps_give_n_rows(cli, child, tmp_path):
    run = tmp_path / "run"
    n = 137
    p = subprocess.run([cli, "run", "--out", run, "--interval", "0.2", "--", child, "steps",
                        str(n), "0", "300"], capture_output=True, text=True, timeout=120,
                       env=env_clean())
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(i) for i in range(n)]  # the child's stdout passes through
    rows = read_steps(run)
    assert len(rows) == n
    with open(run / "steps.csv", newline="") as f:
        assert next(csv.reader(f)) == STEPS_COLUMNS
    assert [int(r["step"]) for r in rows] == list(range(n))
    pids = {r["pid"] for r in rows}
    assert len(pids) == 1
    for r in rows:
        iv, dur, data = int(r["interval_ns"]), int(r["duration_ns"]), int(r["data_ns"])
        fw, bw, other = int(r["forward_ns"]), int(r["backward_ns"]), int(r["other_ns"])
        assert r["samples"] == "32" and r["tokens"] == "128"
        assert r["rank"] == "" and r["local_rank"] == ""  # unknown, not 0
        assert iv >= dur > 0 and data > 0 and fw > 0 and bw > 0
        assert other == max(0, iv - data - fw - bw)
    ri, sm, events = check_complete(run)
    assert ri["mode"] == "run" and ri["command"][1:] == ["steps", str(n), "0", "300"]
    assert ri["exit"] == {"code": 0, "signal": None}
    st = sm["steps"]
    assert st["count"] == n
    total_iv = sum(int(r["interval_ns"]) for r in rows)
    total_data = sum(int(r["data_ns"]) for r in rows)
    assert st["data_wait_share"] == pytest.approx(total_data / total_iv, rel=1e-6)
    assert st["steps_per_s"] == pytest.approx(n / (total_iv / 1e9), rel=1e-6)
    assert st["samples_per_s"] == pytest.approx(32 * n / (total_iv / 1e9), rel=1e-6)
    # distributions leave each thread's first (warm-up) step out
    ivs = sorted(int(r["interval_ns"]) for r in rows if r["step"] != "0")
    assert st["step_time_ms"]["p50"] == pytest.approx(ivs[(n - 2) // 2] / 1e6, rel=0.011)
    assert st["step_time_ms"]["max"] == pytest.approx(ivs[-1] / 1e6, rel=1e-9)
    steps_ev = [e for e in events if e.get("ph") == "X" and e.get("cat") == "step"]
    phases = {e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "phase"}
    assert len(steps_ev) == n and phases == {"data", "forward", "backward"}
    assert sm["trace"]["events_written"] == n * 4
    metrics = list(csv.DictReader(open(run / "metrics.csv", newline="")))
    assert len(metrics) >= 2
    assert float(metrics[-1]["steps"]) == n


def test_report_shows_the_figures_summary_recorded(cli, child, tmp_path):
    """One owner per figure: `report --format json` and summary.json give every
    step figure they share the same value (the report replays steps.csv
    through the collector's own aggregation)."""
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--quiet", "--out", run, "--interval", "0.2", "--", child,
                        "steps", "60", "0", "300"], capture_output=True, text=True, timeout=120,
                       env=env_clean())
    assert p.returncode == 0, p.stderr
    st = json.loads((run / "summary.json").read_text())["steps"]
    p = subprocess.run([cli, "report", run, "--format", "json"], capture_output=True, text=True,
                       timeout=60, env=env_clean())
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)["steps"]
    assert rep["count"] == st["count"] == 60
    for k in ("steps_per_s", "samples_per_s", "tokens_per_s", "data_wait_share", "phase_share"):
        assert rep[k] == st[k], k
    for group in ("step_time_ms", "data_wait_ms"):
        for k, v in rep[group].items():
            assert v == st[group][k], f"{group}.{k}"


def test_command_without_api_gets_resources(cli, tmp_path):
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--out", run, "--interval", "0.25", "--", "sh", "-c",
                        "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; sleep 0.6"],
                       capture_output=True, text=True, timeout=120, env=env_clean())
    assert p.returncode == 0, p.stderr
    ri, sm, events = check_complete(run)
    rows = list(csv.DictReader(open(run / "metrics.csv", newline="")))
    assert len(rows) >= 2  # at least the samples at start and at the end
    assert all(r["tree_procs"] != "" for r in rows)
    assert max(float(r["tree_procs"]) for r in rows) >= 1
    assert rows[0]["tree_cpu_pct"] == ""  # a rate needs two samples: unknown, not 0
    assert sm["steps"]["count"] == 0 and sm["steps"]["steps_per_s"] is None
    assert sm["resources"]["tree_procs_max"] >= 1
    assert sm["sources"]["procfs"] == "ok"
    procs = list(csv.DictReader(open(run / "procs.csv", newline="")))
    assert str(ri["root_pid"]) in {r["pid"] for r in procs}
    if sm["sources"].get("sched") == "ok":
        # each process's own run-queue wait: unknown at first sight, then a
        # figure (a rate needs two samples of its threads)
        root = [r for r in procs if r["pid"] == str(ri["root_pid"])]
        assert root[0]["runq_pct"] == ""
        assert len(root) >= 2 and all(float(r["runq_pct"]) >= 0 for r in root[1:]), root
    assert read_steps(run) == []
    assert "resources only" in p.stderr


@pytest.mark.parametrize("script,code", [("exit 3", 3), ("kill -KILL $$", 137),
                                         ("kill -TERM $$", 143)])
def test_exit_status_propagates(cli, tmp_path, script, code):
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--out", run, "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=60, env=env_clean())
    assert p.returncode == code, p.stderr
    ri = json.loads((run / "run.json").read_text())
    sig = code - 128 if code > 128 else None
    assert ri["exit"] == {"code": code, "signal": sig}
    assert json.loads((run / "summary.json").read_text())["exit"] == ri["exit"]


def start_slow(cli, child, run, *extra):
    return subprocess.Popen([cli, "run", "--out", str(run), "--interval", "0.2", *extra, "--",
                             child, "steps", "1000000", "0", "2000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_clean())


def read_lines(p, k):
    got = []
    while len(got) < k:
        line = p.stdout.readline()
        assert line, "child ended early"
        got.append(int(line))
    return got


def test_sigkill_child_loses_no_published_step(cli, child, tmp_path):
    run = tmp_path / "run"
    p = start_slow(cli, child, run)
    try:
        printed = read_lines(p, 40)
        # The segments live off the run directory, where run.json says.
        segdir = pathlib.Path(json.loads((run / "run.json").read_text())["segments_dir"])
        seg = next(segdir.glob("seg-*.tpf"))
        pid = int(seg.stem.split("-")[1])
        os.kill(pid, signal.SIGKILL)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    printed += [int(x) for x in rest.split()]
    assert p.returncode == 137, err
    rows = read_steps(run)
    in_csv = [int(r["step"]) for r in rows]
    # Every printed step was published first; at most one more was published unprinted.
    assert set(printed) <= set(in_csv)
    assert in_csv == list(range(len(in_csv)))
    assert len(printed) <= len(in_csv) <= len(printed) + 1
    check_complete(run)


def test_sigint_forwards_and_leaves_complete_run(cli, child, tmp_path):
    run = tmp_path / "run"
    p = start_slow(cli, child, run)
    try:
        printed = read_lines(p, 20)
        p.send_signal(signal.SIGINT)
        time.sleep(0.05)
        p.send_signal(signal.SIGINT)  # a second one while finishing loses nothing
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    printed += [int(x) for x in rest.split()]
    assert p.returncode == 130, err  # the child died of the forwarded SIGINT
    ri, sm, events = check_complete(run)
    assert ri["exit"] == {"code": 130, "signal": 2}
    rows = read_steps(run)
    assert len(printed) <= len(rows) <= len(printed) + 1
    assert sm["steps"]["count"] == len(rows)
    assert sum(1 for e in events if e.get("cat") == "step") == len(rows)


def test_trace_loadable_when_collector_dies(cli, child, tmp_path):
    run = tmp_path / "run"
    p = start_slow(cli, child, run)
    try:
        read_lines(p, 30)
        time.sleep(0.5)  # at least one sample interval flushed the trace
        ri = json.loads((run / "run.json").read_text())
        p.kill()  # SIGKILL to trainperf itself: nothing gets closed
        p.wait(timeout=30)
    finally:
        ri = json.loads((run / "run.json").read_text())
        os.killpg(ri["root_pid"], signal.SIGKILL)  # the child has its own group
        p.kill()
        p.communicate(timeout=30)
    text = (run / "trace.json").read_text()
    assert not text.rstrip().endswith("]")
    events = json.loads(text + "]")
    assert any(e.get("cat") == "step" for e in events)
    assert json.loads((run / "run.json").read_text())["exit"] is None  # still "running"


@pytest.mark.parametrize("args,msg", [
    (["--bogus", "--", "sh", "-c", "touch MARKER"], "unknown option"),
    (["--interval", "abc", "--", "sh", "-c", "touch MARKER"], "--interval"),
    (["--interval", "0", "--", "sh", "-c", "touch MARKER"], "--interval"),
    (["--out"], "--out needs a value"),
    (["--alert", "gpu.util <<< 5", "--", "sh", "-c", "touch MARKER"], "--alert"),
    (["--alerts", "/nonexistent/rules.txt", "--", "sh", "-c", "touch MARKER"], "--alerts"),
    (["--out", "/proc/trainperf-cannot-write", "--", "sh", "-c", "touch MARKER"], "run directory"),
    (["--out", "FILE/sub", "--", "sh", "-c", "touch MARKER"], "run directory"),
    ([], "no command"),
    (["--"], "no command"),
])
def test_bad_usage_exits_2_without_starting_child(cli, tmp_path, args, msg):
    (tmp_path / "FILE").write_text("a regular file")
    p = subprocess.run([cli, "run", *args], capture_output=True, text=True, timeout=30,
                       cwd=tmp_path, env=env_clean())
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainperf: error:") and msg in lines[0]
    assert not (tmp_path / "MARKER").exists()
    assert not (tmp_path / "trainperf-runs").exists()


def test_missing_command_is_127_and_not_run(cli, tmp_path):
    p = subprocess.run([cli, "run", "--", "no-such-command-trainperf"], capture_output=True,
                       text=True, timeout=30, cwd=tmp_path, env=env_clean())
    assert p.returncode == 127
    assert p.stderr.strip().splitlines() == ["trainperf: error: command not found: "
                                             "no-such-command-trainperf"]
    assert not (tmp_path / "trainperf-runs").exists()


def test_default_run_dir_and_latest_link(cli, tmp_path):
    p = subprocess.run([cli, "run", "--quiet", "--", "true"], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path, env=env_clean())
    assert p.returncode == 0, p.stderr
    runs = [d for d in (tmp_path / "trainperf-runs").iterdir() if not d.is_symlink()]
    assert len(runs) == 1 and runs[0].name.endswith("-true")
    latest = tmp_path / "trainperf-runs" / "latest"
    assert latest.is_symlink() and latest.resolve() == runs[0].resolve()
    check_complete(runs[0])


def test_child_env_and_auto_hook(cli, tmp_path):
    pyd = tmp_path / "pyhook"
    pyd.mkdir()
    run = tmp_path / "run"
    script = 'echo "$TRAINPERF_RUN_DIR|$TRAINPERF_AUTO|$PYTHONPATH"'
    p = subprocess.run([cli, "run", "--out", run, "--", "sh", "-c", script], capture_output=True,
                       text=True, timeout=60,
                       env=env_clean(TRAINPERF_PYTHON_DIR=str(pyd), PYTHONPATH="/x"))
    assert p.stdout.strip() == f"{run.resolve()}|1|{pyd}:/x"
    p = subprocess.run([cli, "run", "--no-auto", "--force", "--out", run, "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=60,
                       env=env_clean(TRAINPERF_PYTHON_DIR=str(pyd), PYTHONPATH="/x"))
    assert p.stdout.strip() == f"{run.resolve()}||/x"
    assert json.loads((run / "run.json").read_text())["options"]["auto"] is False


def test_embedded_mode(child, tmp_path):
    runs = [tmp_path / "emb1", tmp_path / "emb2"]
    p = subprocess.run([child, "embedded", *map(str, runs), "50"], capture_output=True,
                       text=True, timeout=60, env=env_clean())
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert lines.count("start 0") == 2 and lines.count("stop 0") == 2
    assert f"again -7 dir {runs[0]}" in lines and f"again -7 dir {runs[1]}" in lines  # EBUSY
    assert lines[-1] == "stop-again -8"  # TPF_ESTATE
    for run in runs:
        rows = read_steps(run)
        assert [int(r["step"]) for r in rows] == list(range(50))
        ri, sm, _ = check_complete(run)
        assert ri["mode"] == "embedded" and ri["exit"] is None
        assert ri["command"][0].endswith("child") and ri["command"][1] == "embedded"
        assert sm["steps"]["count"] == 50


def test_embedded_start_is_busy_under_run(cli, child, tmp_path):
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--out", run, "--", child, "start"], capture_output=True,
                       text=True, timeout=60, env=env_clean())
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "-7"  # TPF_EBUSY


def test_forked_workers_each_get_their_rows(cli, child, tmp_path):
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--out", run, "--", child, "fork", "3", "40"],
                       capture_output=True, text=True, timeout=120, env=env_clean())
    assert p.returncode == 0, p.stderr
    rows = read_steps(run)
    assert len(rows) == 4 * 40
    by_pid = {}
    for r in rows:
        by_pid.setdefault(r["pid"], []).append(r)
    assert len(by_pid) == 4
    ranks = sorted(rs[0]["rank"] for rs in by_pid.values())
    assert ranks == ["", "1", "2", "3"]
    for rs in by_pid.values():
        assert [int(r["step"]) for r in rs] == list(range(40))
        assert len({r["rank"] for r in rs}) == 1
    ri, sm, events = check_complete(run)
    assert sorted(sm["steps"]["ranks"]) == [1, 2, 3]
    assert len(sm["steps"]["per_rank"]) == 4
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"rank 1 (pid %s)" % pid for pid, rs in by_pid.items() if rs[0]["rank"] == "1"} <= names
    for rs in by_pid.values():
        ends = [float(r["start_s"]) + int(r["duration_ns"]) / 1e9 for r in rs]
        assert ends == sorted(ends)


@pytest.mark.parametrize("no_color", [False, True])
def test_status_line_on_a_tty(cli, tmp_path, no_color):
    import pty
    master, slave = pty.openpty()
    env = env_clean(TERM="xterm")
    env.pop("NO_COLOR", None)
    if no_color:
        env["NO_COLOR"] = "1"
    p = subprocess.Popen([cli, "run", "--out", str(tmp_path / "run"), "--interval", "0.2",
                          "--", "sleep", "2.5"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=60)
    os.close(master)
    text = out.decode(errors="replace")
    assert p.returncode == 0
    assert "\r" in text and "[trainperf" in text and "no steps yet" in text
    colors = ("\033[1m", "\033[3")  # bold, colours (\033[K only clears the line)
    assert any(c in text for c in colors) == (not no_color)


def test_top_shows_a_run_live_and_ended(cli, child, tmp_path):
    run = tmp_path / "run"
    p = start_slow(cli, child, run)
    try:
        read_lines(p, 20)
        time.sleep(0.5)  # a sample with steps in it
        live = subprocess.run([cli, "top", str(run), "--once"], capture_output=True, text=True,
                              timeout=30)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert live.returncode == 0, live.stderr
    assert "running" in live.stdout and "steps/s" in live.stdout
    done = subprocess.run([cli, "top", str(run)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0  # an ended run: one view, then exit
    sm = json.loads((run / "summary.json").read_text())
    assert "ended after" in done.stdout and "exit 130" in done.stdout
    assert f"steps {sm['steps']['count']} " in done.stdout
    bad = subprocess.run([cli, "top", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "not a run directory" in bad.stderr


def _run_on_ctty(argv, feed, timeout=60):
    """Run argv as the foreground of a fresh pseudo-terminal; type feed into it."""
    import fcntl
    import pty
    import termios
    master, slave = pty.openpty()

    def take_ctty():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env_clean(),
                         preexec_fn=take_ctty)
    os.close(slave)
    time.sleep(1.0)
    os.write(master, feed)
    out = b""
    end = time.time() + timeout
    while time.time() < end:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=timeout)
    os.close(master)
    return p.returncode, out.decode(errors="replace")


def test_child_reads_the_terminal_and_gets_ctrl_c(cli, tmp_path):
    # The child is in its own process group but owns the terminal while it runs.
    rc, out = _run_on_ctty([cli, "run", "--out", str(tmp_path / "a"), "--", "sh", "-c",
                            "read x; echo got-$x"], b"hello\n")
    assert rc == 0 and "got-hello" in out
    rc, out = _run_on_ctty([cli, "run", "--out", str(tmp_path / "b"), "--", "sleep", "30"],
                           b"\x03")
    assert rc == 130, out
    assert json.loads((tmp_path / "b" / "run.json").read_text())["exit"]["signal"] == 2


@pytest.mark.torch
@pytest.mark.slow
def test_plain_pytorch_script_is_instrumented_without_code_changes(cli, tmp_path):
    pytest.importorskip("torch")
    script = ROOT / "examples" / "train_mlp.py"
    if not (ROOT / "python" / "trainperf" / "__init__.py").exists() or not script.exists():
        pytest.skip("python package or example missing")
    runs = {}
    for auto in (True, False):
        run = tmp_path / ("auto" if auto else "noauto")
        args = [cli, "run", "--out", run] + ([] if auto else ["--no-auto"])
        p = subprocess.run(args + ["--", "python3", script, "--steps", "15"],
                           capture_output=True, text=True, timeout=600, env=env_clean())
        assert p.returncode == 0, p.stderr
        runs[auto] = (read_steps(run), json.loads((run / "run.json").read_text()))
    rows, ri = runs[True]
    assert len(rows) == 15 and ri["options"]["auto"] is True
    assert all(int(r["forward_ns"]) > 0 and int(r["backward_ns"]) > 0 for r in rows)
    rows, ri = runs[False]
    assert rows == [] and ri["options"]["auto"] is False  # resources only


def test_gpu_columns_with_the_fake_nvml(cli, child, build, tmp_path):
    fake = build / "fakes" / "libnvidia-ml.so.1"
    if not fake.exists():
        pytest.skip("fake NVML not built")
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--out", run, "--interval", "0.2", "--", child, "steps", "60",
                        "0", "2000"], capture_output=True, text=True, timeout=120,
                       env=env_clean(TRAINPERF_NVML_LIB=str(fake)))
    assert p.returncode == 0, p.stderr
    ri, sm, events = check_complete(run)
    assert ri["sources"]["nvml"] == "ok" and len(ri["gpus"]) == 1
    metrics = list(csv.DictReader(open(run / "metrics.csv", newline="")))
    gpu_cols = [c for c in metrics[0] if c.startswith("gpu0_")]
    assert "gpu0_util_pct" in gpu_cols and "gpu0_throttle" in gpu_cols
    assert not any(c.startswith("gpu1_") for c in metrics[0])
    utils = [float(r["gpu0_util_pct"]) for r in metrics if r["gpu0_util_pct"]]
    assert utils and len(sm["gpus"]) == 1
    assert sm["gpus"][0]["util_pct"]["max"] == pytest.approx(max(utils), abs=0.01)
    assert any(e.get("ph") == "C" and e.get("name") == "gpu0" for e in events)
    assert "GPU 0" in p.stderr


def test_threads_each_have_their_steps(cli, child, tmp_path):
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--out", run, "--", child, "threads", "3", "25"],
                       capture_output=True, text=True, timeout=120, env=env_clean())
    assert p.returncode == 0, p.stderr
    rows = read_steps(run)
    by_tid = {}
    for r in rows:
        by_tid.setdefault(r["tid"], []).append(int(r["step"]))
    assert sorted(len(v) for v in by_tid.values()) == [1, 25, 25, 25]
    assert all(v == list(range(len(v))) for v in by_tid.values())
    assert len({r["pid"] for r in rows}) == 1


def test_user_alert_fires_and_is_recorded(cli, child, tmp_path):
    run = tmp_path / "run"
    rule = "slow_data: data_wait.share > 0.2 for 0.4s"
    # data 2 ms vs 1 ms of compute per step: the data share is about two thirds.
    p = subprocess.run([cli, "run", "--out", run, "--interval", "0.2", "--no-default-alerts",
                        "--alert", rule, "--", child, "steps", "400", "0", "2000"],
                       capture_output=True, text=True, timeout=120, env=env_clean())
    assert p.returncode == 0, p.stderr
    ri, sm, events = check_complete(run)
    assert ri["options"]["alerts"] == [rule]
    lines = [json.loads(l) for l in (run / "alerts.jsonl").read_text().splitlines()]
    fired = [l for l in lines if l["state"] == "fired"]
    assert fired and fired[0]["rule"] == "slow_data" and fired[0]["value"] > 0.2
    # a share (0-1) is said as a percentage
    assert re.search(r"share of step time \d+% \(> 20%\)", fired[0]["message"]), fired[0]
    assert {"t", "rule", "expr", "state", "severity", "value", "message"} <= fired[0].keys()
    assert [a["rule"] for a in sm["alerts"]] == [l["rule"] for l in fired]
    assert any(e.get("cat") == "alert" and e["name"] == "slow_data" for e in events)


def test_reused_out_dir_drops_stale_segments(cli, child, tmp_path):
    run = tmp_path / "run"
    (run / "live").mkdir(parents=True)
    (run / "live" / "seg-1.tpf").write_bytes(b"left by an earlier run")
    p = subprocess.run([cli, "run", "--out", run, "--", child, "steps", "5", "0", "100"],
                       capture_output=True, text=True, timeout=60, env=env_clean())
    assert p.returncode == 0, p.stderr
    assert not (run / "live" / "seg-1.tpf").exists()
    assert len(read_steps(run)) == 5


def test_clean_live_removes_segments(cli, child, tmp_path):
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--clean-live", "--out", run, "--", child, "steps", "5", "0",
                        "100"], capture_output=True, text=True, timeout=60, env=env_clean())
    assert p.returncode == 0, p.stderr
    assert not (run / "live").exists()
    assert len(read_steps(run)) == 5


@pytest.mark.slow
def test_plain_status_lines_when_not_a_tty(cli, tmp_path):
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--out", run, "--", "sleep", "10.5"], capture_output=True,
                       text=True, timeout=120, env=env_clean())
    assert p.returncode == 0
    status = [l for l in p.stderr.splitlines() if l.startswith("[trainperf")]
    assert len(status) == 1 and "\r" not in p.stderr and "\033" not in p.stderr
    q = subprocess.run([cli, "run", "--quiet", "--force", "--out", run, "--", "sleep", "10.5"],
                       capture_output=True, text=True, timeout=120, env=env_clean())
    assert q.returncode == 0
    assert q.stderr.splitlines() == [f"trainperf: run directory {run}"]


@pytest.mark.slow
def test_status_line_shows_the_firing_alert_and_data_wait(cli, child, tmp_path):
    # The status line's data comes from a sink (record/status.c): the sample
    # and the alerts that fire, both as of the same sample.
    run = tmp_path / "run"
    rule = "slow_data: data_wait.share > 0.2 for 0.4s"
    p = subprocess.run([cli, "run", "--out", run, "--interval", "0.2", "--no-default-alerts",
                        "--alert", rule, "--", child, "steps", "4000", "0", "2000"],
                       capture_output=True, text=True, timeout=180, env=env_clean())
    assert p.returncode == 0, p.stderr
    status = [l for l in p.stderr.splitlines() if l.startswith("[trainperf")]
    assert status, p.stderr
    m = re.search(r"data wait (\d+)%", status[0])
    assert m and 20 < int(m.group(1)) <= 100, status[0]
    assert "alerts: slow_data" in status[0], status[0]


def test_embedded_default_run_dir(child, tmp_path):
    p = subprocess.run([child, "start"], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env=env_clean())
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0", "0", "1", "2", "stop", "0"]
    base = tmp_path / "trainperf-runs"
    runs = [d for d in base.iterdir() if not d.is_symlink()]
    assert len(runs) == 1 and runs[0].name.endswith("-child")
    assert (base / "latest").resolve() == runs[0].resolve()
    check_complete(runs[0])
    assert len(read_steps(runs[0])) == 3


def test_ctrl_z_stops_the_job_and_fg_resumes_it(cli, tmp_path):
    import fcntl
    import pty
    import termios
    master, slave = pty.openpty()

    def take_ctty():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    run = tmp_path / "run"
    p = subprocess.Popen([cli, "run", "--out", str(run), "--", "sleep", "30"], stdin=slave,
                         stdout=slave, stderr=slave, env=env_clean(), preexec_fn=take_ctty)
    os.close(slave)

    def state(pid):
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    def wait_state(pid, want):
        for _ in range(200):
            if state(pid) == want:
                return True
            time.sleep(0.05)
        return False

    try:
        time.sleep(1.0)
        child_pid = json.loads((run / "run.json").read_text())["root_pid"]
        os.write(master, b"\x1a")  # Ctrl-Z: the terminal stops the child's group
        assert wait_state(child_pid, "T")
        assert wait_state(p.pid, "T")  # ... and trainperf stops itself, like a shell job
        os.kill(p.pid, signal.SIGCONT)  # `fg`
        assert wait_state(child_pid, "S")
        os.write(master, b"\x03")  # Ctrl-C reaches the resumed child again
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    assert p.returncode == 130
