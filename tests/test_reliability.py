"""Issue 11: never hurt the run, never lose its data. Full file systems (real
tmpfs mounts: root only), planted links, two runs into one directory, a
killed collector, bad options. Each case of the issue is a test here."""
import contextlib
import csv
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import BUILD, ROOT

TRAINER = str(BUILD / "examples" / "trainer")


def env_clean(**extra):
    e = dict(os.environ)
    e.pop("TRAINPERF_RUN_DIR", None)
    e.pop("TRAINPERF_SEG_DIR", None)
    e.pop("TRAINPERF_SHM_DIR", None)
    e.update(extra)
    return e


@contextlib.contextmanager
def small_fs(path, size):
    """A tmpfs of `size` at path: a real full file system, no fakes."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    path.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def run(cli, out, *cmd, extra=(), timeout=120, **kw):
    return subprocess.run([cli, "run", "--quiet", *extra, "--out", str(out), "--", *map(str, cmd)],
                          capture_output=True, text=True, timeout=timeout, env=env_clean(), **kw)


def steps_rows(d):
    with open(d / "steps.csv", newline="") as f:
        return list(csv.DictReader(f))


# ---- 1. full file system under the run directory: never SIGBUS ----

def test_full_fs_at_start_never_kills_the_trainee(cli, tmp_path):
    with small_fs(tmp_path / "m", "200k") as m:
        p = run(cli, m / "r", TRAINER, "--steps", "400", "--quiet")
        assert p.returncode == 0, p.stderr  # was 135 (SIGBUS) on main
        sm = json.loads((m / "r" / "summary.json").read_text())
        # The segments are off the full file system: every step is counted.
        assert sm["steps"]["count"] == 400 and sm["steps"]["events_dropped"] == 0


def test_full_fs_with_segments_in_the_run_dir_never_kills_the_trainee(cli, tmp_path):
    # No /dev/shm to be had: the segments go to live/ on the full tmpfs.
    with small_fs(tmp_path / "m", "200k") as m:
        p = subprocess.run([cli, "run", "--quiet", "--out", str(m / "r"), "--", TRAINER,
                            "--steps", "400", "--quiet"], capture_output=True, text=True,
                           timeout=120, env=env_clean(TRAINPERF_SHM_DIR=str(tmp_path / "none")))
        assert p.returncode == 0, p.stderr  # was 135 (SIGBUS) on main
        sm = json.loads((m / "r" / "summary.json").read_text())
        assert sm["steps"]["count"] < 400
        # Either the segment fitted and no ring could be had (the probe went
        # quiet and counted its events), or not even the segment fitted (the
        # process ran uninstrumented): which one depends on who wrote first.
        if list((m / "r" / "live").glob("seg-*.tpf")):
            assert sm["steps"]["events_dropped"] > 0


def test_segment_space_is_reserved_not_sparse(cli, tmp_path):
    d = tmp_path / "r"
    p = subprocess.run([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps", "20",
                        "--quiet"], capture_output=True, text=True, timeout=120,
                       env=env_clean(TRAINPERF_SHM_DIR=str(tmp_path / "none")))
    assert p.returncode == 0, p.stderr
    segs = list((d / "live").glob("seg-*.tpf"))
    assert segs
    for seg in segs:
        st = seg.stat()
        assert st.st_blocks * 512 >= st.st_size  # every byte has its block


# ---- 3. planted links are never followed ----

PLANTED = ["procs.csv", "alerts.jsonl", ".trainperf-write-test", ".run.json.tmp",
           "run.json.tmp", "summary.json.tmp", "report.md.tmp", "report.html.tmp"]
PLANTED_FORCE = ["steps.csv", "metrics.csv", "trace.json", "run.json", "summary.json",
                 "report.md", "report.html"]


@pytest.mark.parametrize("force", [False, True])
def test_planted_symlinks_are_not_followed(cli, tmp_path, force):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "r"
    (d / "live").mkdir(parents=True)
    names = PLANTED + (PLANTED_FORCE if force else [])
    for n in names:
        (d / n).symlink_to(victim)
    pid_guess = [f"live/seg-{i}.tpf.tmp" for i in range(os.getpid(), os.getpid() + 50)]
    for n in pid_guess:
        (d / n).symlink_to(victim)
    p = run(cli, d, TRAINER, "--steps", "20", "--quiet", extra=["--force"] if force else [])
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "precious\n"
    assert len(steps_rows(d)) == 20
    for n in ["steps.csv", "metrics.csv", "trace.json", "summary.json", "run.json"]:
        assert not (d / n).is_symlink() and (d / n).is_file(), n


def test_planted_hard_link_is_not_written_through(cli, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "r"
    d.mkdir()
    os.link(victim, d / "procs.csv")
    os.link(victim, d / "alerts.jsonl")
    p = run(cli, d, TRAINER, "--steps", "5", "--quiet")
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "precious\n"


# ---- 4. one run per directory ----

def test_directory_in_use_is_refused_whatever_the_flags(cli, tmp_path):
    d = tmp_path / "r"
    first = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                              "100000", "--quiet"], env=env_clean(), stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            if (d / "run.json").exists():
                break
            time.sleep(0.05)
        for extra in ([], ["--force"]):
            p = run(cli, d, "sh", "-c", "touch started", extra=extra, cwd=tmp_path)
            assert p.returncode == 2, p.stderr
            assert "in use by another run" in p.stderr and len(p.stderr.splitlines()) == 1
            assert not (tmp_path / "started").exists()  # nothing started
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode in (130, 0)
    rows = steps_rows(d)
    assert rows and all(r["step"] for r in rows)


def test_existing_run_needs_force(cli, tmp_path):
    d = tmp_path / "r"
    assert run(cli, d, TRAINER, "--steps", "7", "--quiet").returncode == 0
    (d / "extra-file").write_text("left by the first run")
    p = run(cli, d, TRAINER, "--steps", "3", "--quiet")
    assert p.returncode == 2 and "--force" in p.stderr
    assert len(steps_rows(d)) == 7  # the earlier run is untouched
    p = run(cli, d, TRAINER, "--steps", "3", "--quiet", extra=["--force"])
    assert p.returncode == 0, p.stderr
    assert len(steps_rows(d)) == 3
    assert not (d / "extra-file").exists()  # replaced, not mixed


@pytest.mark.parametrize("force", [False, True])
def test_out_naming_a_file_says_so_and_never_suggests_force(cli, tmp_path, force):
    f = tmp_path / "notes.txt"
    f.write_text("mine\n")
    p = run(cli, f, "true", extra=["--force"] if force else [])
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "is not a directory" in lines[0] and "--force replaces" not in lines[0]
    assert f.read_text() == "mine\n"


def test_force_in_a_non_run_directory_keeps_the_users_files(cli, tmp_path):
    d = tmp_path / "proj"
    d.mkdir()
    (d / "train.py").write_text("print(1)\n")
    (d / "steps.csv").write_text("mine\n")
    p = run(cli, d, TRAINER, "--steps", "3", "--quiet")
    assert p.returncode == 2  # steps.csv there: someone's run data
    p = run(cli, d, TRAINER, "--steps", "3", "--quiet", extra=["--force"])
    assert p.returncode == 0, p.stderr
    assert (d / "train.py").read_text() == "print(1)\n"


# ---- 2. the disk fills up mid-run ----

def test_full_disk_mid_run_keeps_whole_rows_and_the_exit_status(cli, tmp_path):
    with small_fs(tmp_path / "m", "500k") as m:
        d = m / "r"
        p = subprocess.run([cli, "run", "--out", str(d), "--", TRAINER, "--steps", "800",
                            "--quiet"], capture_output=True, text=True, timeout=300,
                           env=env_clean(TRAINPERF_RING_EVENTS="4096"))
        assert p.returncode == 0, p.stderr  # the trainee's status, never ours
        warn = [l for l in p.stderr.splitlines() if l.startswith("trainperf: warning")]
        assert len(warn) == 1 and "not written" in warn[0], p.stderr
        raw = (d / "steps.csv").read_text()
        assert raw.endswith("\n")
        rows = steps_rows(d)
        head = raw.splitlines()[0].split(",")
        assert all(len(r) == len(head) and None not in r.values() for r in rows)  # whole rows
        events = json.loads((d / "trace.json").read_text())  # loads as it is
        assert isinstance(events, list) and events
        sm = json.loads((d / "summary.json").read_text())
        assert sm["steps"]["count"] == 800  # the aggregates saw every step
        lost = sm["io"]["lost"]
        assert lost["steps"] == 800 - len(rows) > 0
        assert lost["trace_events"] > 0 and "no space" in sm["io"]["error"]
        ri = json.loads((d / "run.json").read_text())
        assert ri["exit"] == {"code": 0, "signal": None}
        assert "were not written" in (d / "report.md").read_text()
        assert not (d / ".trainperf-reserve").exists()


def test_whole_rows_when_the_disk_is_full_from_the_start(cli, tmp_path):
    # Room for the segment and little else: headers may go, half rows never.
    with small_fs(tmp_path / "m", "300k") as m:
        d = m / "r"
        p = subprocess.run([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                            "300", "--quiet"], capture_output=True, text=True, timeout=300,
                           env=env_clean(TRAINPERF_RING_EVENTS="1024"))
        assert p.returncode == 0, p.stderr
        for name in ("steps.csv", "metrics.csv", "procs.csv"):
            raw = (d / name).read_text()
            assert raw == "" or raw.endswith("\n"), name
        json.loads((d / "trace.json").read_text())
        json.loads((d / "summary.json").read_text())
        assert json.loads((d / "run.json").read_text())["exit"]["code"] == 0


@pytest.mark.parametrize("size", ["200k", "300k"])
def test_full_disk_under_the_segments_is_said_with_the_events_lost(cli, tmp_path, size):
    # Issue 27 item 6: the segments on the full disk (no /dev/shm): 0 of the
    # steps recorded and the report said "the program was not instrumented".
    # 200k: not even the segment fits (the process leaves live/noroom-PID,
    # its lost events as the size); 300k: the segment fits, no ring does.
    with small_fs(tmp_path / "m", size) as m:
        d = m / "r"
        p = subprocess.run([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                            "400", "--quiet"], capture_output=True, text=True, timeout=120,
                           env=env_clean(TRAINPERF_SHM_DIR=str(tmp_path / "none")))
        assert p.returncode == 0, p.stderr
        sm = json.loads((d / "summary.json").read_text())
        nr = sm["steps"]["no_room"]
        assert sm["steps"]["count"] == 0 and nr["processes"] == 1, sm["steps"]
        # every step's events are counted (begin, end and the phases of each)
        assert nr["events_dropped"] >= 2 * 400 and sm["steps"]["events_dropped"] >= nr["events_dropped"]
        said = [l for l in p.stderr.splitlines() if "probes' segments" in l and "was full" in l]
        assert len(said) == 1 and f"{nr['events_dropped']} events lost" in said[0], p.stderr
        md = (d / "report.md").read_text()
        assert "not instrumented" not in md
        assert f"was full, so 1 process could not record and {nr['events_dropped']} events" in md


def test_no_byte_free_loses_rows_not_the_readers(cli, tmp_path):
    # Issue 27 item 6: with 0 bytes free the loss line counted each CSV's
    # header as a lost row (3001 of 3000 steps), trace.json was left empty
    # (no JSON), and `report` refused the empty steps.csv as damaged.
    with small_fs(tmp_path / "m", "400k") as m:
        fd = os.open(m / "fill", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        os.close(fd)
        assert os.statvfs(m).f_bavail == 0
        d = m / "r"
        p = subprocess.run([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                            "3000", "--quiet"], capture_output=True, text=True, timeout=300,
                           env=env_clean())
        assert p.returncode == 0, p.stderr
        lost = [l for l in p.stderr.splitlines() if "not written" in l]
        assert len(lost) == 1 and "not written: 3000 steps.csv rows," in lost[0], p.stderr
        # a full disk is said once: the TensorBoard file is in that line
        assert "TensorBoard" not in p.stderr, p.stderr
        tr = d / "trace.json"
        assert not tr.exists() or json.loads(tr.read_text()) == [], tr.read_bytes()[:40]
        for name in ("steps.csv", "metrics.csv", "procs.csv"):
            assert (d / name).read_text() == ""
        # nothing else fits either; once there is room, the report reads what
        # is there (run.json written late by hand) instead of refusing it
        (m / "fill").unlink()
        (d / "run.json").write_text(json.dumps({"format_version": 1, "command": ["trainer"],
                                                "start_mono_ns": 1, "exit": {"code": 0}}))
        p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "damaged" not in p.stderr, p.stderr


# ---- 5. SIGKILL on `trainperf run`: nothing published is lost ----

def _children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _wait_gone(pid, timeout=120):
    for _ in range(int(timeout / 0.05)):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still alive")


def test_killed_collector_loses_no_published_step(cli, tmp_path):
    d = tmp_path / "r"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps", "400",
                           "--data-delay-ms", "10", "--quiet"], env=env_clean(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    for _ in range(2000):
        if (d / "steps.csv").exists() and len((d / "steps.csv").read_text().splitlines()) > 30:
            break
        time.sleep(0.01)
    kids = _children(tp.pid)
    tp.kill()  # the OOM killer's way: no handler runs
    tp.wait()
    assert kids, "the trainee was not found"
    _wait_gone(kids[0])  # the trainee keeps running and finishes its 400 steps
    on_disk = len(steps_rows(d))
    assert 30 <= on_disk < 400 and not (d / "summary.json").exists()
    p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=120,
                       env=env_clean())
    assert p.returncode == 0, p.stderr
    assert "recovered an interrupted run" in p.stderr
    rows = steps_rows(d)
    assert len(rows) == 400  # drained + still in the rings = every step
    assert len({(r["tid"], r["step"]) for r in rows}) == 400
    assert sorted(int(r["step"]) for r in rows) == list(range(400))
    json.loads((d / "trace.json").read_text())  # closed by the recovery
    sm = json.loads((d / "summary.json").read_text())
    assert sm["steps"]["count"] == 400
    assert json.loads((d / "recovered.json").read_text())["steps_from_rings"] == 400 - on_disk
    assert "recovered" in (d / "report.md").read_text()
    # A second report does not recover twice.
    p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=120)
    assert "recovered" not in p.stderr and len(steps_rows(d)) == 400


def test_report_leaves_a_live_run_alone(cli, tmp_path):
    d = tmp_path / "r"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                           "100000", "--quiet"], env=env_clean(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        for _ in range(2000):
            if (d / "steps.csv").exists() and len((d / "steps.csv").read_text().splitlines()) > 5:
                break
            time.sleep(0.01)
        p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=120)
        assert "recovered" not in p.stderr
        assert not (d / "recovered.json").exists() and not (d / "summary.json").exists()
    finally:
        tp.send_signal(signal.SIGINT)
        tp.wait(timeout=60)
    assert (d / "summary.json").exists()


# ---- 7. smaller cases ----

def test_children_that_outlive_the_root_keep_their_steps(cli, tmp_path):
    d = tmp_path / "r"
    # The root shell exits at once; its (double-forked) trainer goes on.
    p = run(cli, d, "sh", "-c", f"( {TRAINER} --steps 150 --quiet >/dev/null & ); exit 3")
    assert p.returncode == 3, p.stderr  # the root's status
    assert len(steps_rows(d)) == 150  # was 10 of 30 on main


def test_bad_ring_events_is_refused(cli, tmp_path):
    for bad in ("-1", "abc", "0", "99999999999", "1e6"):
        p = subprocess.run([cli, "run", "--out", str(tmp_path / "r"), "--", "true"],
                           capture_output=True, text=True, timeout=60,
                           env=env_clean(TRAINPERF_RING_EVENTS=bad))
        assert p.returncode == 2 and "TRAINPERF_RING_EVENTS" in p.stderr, (bad, p.stderr)
        assert not (tmp_path / "r").exists()


def test_alerts_file_must_be_a_file(cli, tmp_path):
    p = subprocess.run([cli, "run", "--alerts", "/etc", "--out", str(tmp_path / "r"), "--",
                        "true"], capture_output=True, text=True, timeout=60, env=env_clean())
    assert p.returncode == 2 and "is a directory" in p.stderr
    assert len(p.stderr.splitlines()) == 1


def test_corrupt_segment_is_named_not_skipped_silently(cli, tmp_path):
    d = tmp_path / "r"
    p = subprocess.run([cli, "run", "--out", str(d), "--", "sh", "-c",
                        'head -c 8192 /dev/urandom > "$TRAINPERF_RUN_DIR/live/seg-99999.tpf"'],
                       capture_output=True, text=True, timeout=60, env=env_clean())
    assert p.returncode == 0
    assert "seg-99999.tpf: not a readable trainperf segment" in p.stderr


def test_long_run_dir_path_keeps_its_reports(cli, tmp_path):
    d = tmp_path
    for i in range(14):
        d = d / ("d" * 100)
    d = d / "r"
    assert len(str(d)) > 1400
    p = run(cli, d, TRAINER, "--steps", "5", "--quiet")
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    assert (d / "report.md").is_file() and (d / "report.html").is_file()


def test_control_bytes_never_reach_the_terminal(cli, tmp_path):
    d = tmp_path / "r"
    assert run(cli, d, TRAINER, "--steps", "5", "--quiet").returncode == 0
    ri = json.loads((d / "run.json").read_text())
    ri["host"] = "evil\x1b]0;pwned\x07\x1b[2J"
    ri["command"] = ["train\x1b[31m.py"]
    (d / "run.json").write_text(json.dumps(ri))
    p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    p = subprocess.run([cli, "report", "--format", "md", str(d)], capture_output=True, text=True,
                       timeout=60)
    assert "\x1b" not in p.stdout


READ_FILES = ["run.json", "summary.json", "steps.csv", "metrics.csv", "procs.csv", "alerts.jsonl"]


def _planted(tmp_path, name, kind):
    """A copy of a real run with `name` replaced by a FIFO or by a symlink to
    a good copy of the file elsewhere."""
    import shutil
    src = ROOT / "tests" / "data" / "runs" / "cpu-only"
    run = tmp_path / "run"
    shutil.copytree(src, run)
    good = tmp_path / ("good-" + name)
    shutil.move(run / name, good)
    if kind == "fifo":
        os.mkfifo(run / name)
    else:
        (run / name).symlink_to(good)
    return run


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
@pytest.mark.parametrize("name", READ_FILES)
def test_run_files_that_are_not_regular_files_are_refused(cli, tmp_path, name, kind):
    # a FIFO named summary.json once made report, compare and top wait forever
    run = _planted(tmp_path, name, kind)
    for cmd in (["report", run], ["compare", run, run]):
        p = subprocess.run([cli, *map(str, cmd)], capture_output=True, text=True, timeout=60,
                           env=env_clean())
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, (cmd, p.stderr)
        assert f"{name}: not a regular file" in lines[0], lines[0]
    # top shows what it can read and never waits for the rest
    p = subprocess.run([cli, "top", "--once", str(run)], capture_output=True, text=True,
                       timeout=60, env=env_clean())
    assert p.returncode in (0, 2), p.stderr
    if name == "run.json":
        assert p.returncode == 2 and "run.json" in p.stderr
    assert (run / name).is_symlink() if kind == "symlink" else (run / name).is_fifo()


def test_huge_start_time_in_steps_csv_does_not_crash_report(cli, tmp_path):
    d = tmp_path / "r"
    assert run(cli, d, TRAINER, "--steps", "5", "--quiet").returncode == 0
    lines = (d / "steps.csv").read_text().splitlines()
    head = lines[0].split(",")
    row = lines[1].split(",")
    row[head.index("start_s")] = "1e19"
    (d / "steps.csv").write_text("\n".join([lines[0], ",".join(row)] + lines[2:]) + "\n")
    p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_truncated_gzip_trace_is_named_as_such(cli, tmp_path):
    import gzip
    ev = [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1, "pid": 1, "tid": 1}
          for i in range(3000)]
    g = gzip.compress(json.dumps({"traceEvents": ev}).encode())
    f = tmp_path / "t.json.gz"
    f.write_bytes(g[:len(g) // 2])
    p = subprocess.run([cli, "analyze", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "truncated gzip" in p.stderr and "<fd:" not in p.stderr and "JSON" not in p.stderr


# ---- 1 (end). a slow or hung run-dir file system never stalls steps ----
# The segments live in a private directory under /dev/shm (tmpfs: no
# write-back), named in run.json, never on the run directory's file system.

def _segdir(d):
    return json.loads((d / "run.json").read_text())["segments_dir"]


def _wait_rows(d, n, proc, timeout=120):
    for _ in range(int(timeout / 0.02)):
        if (d / "steps.csv").exists() and len((d / "steps.csv").read_text().splitlines()) > n:
            return
        assert proc.poll() is None, "the run ended early"
        time.sleep(0.02)
    raise AssertionError("no steps came")


def _wait_file(f, timeout=120):
    for _ in range(int(timeout / 0.05)):
        if f.exists():
            return True
        time.sleep(0.05)
    return False


def test_segments_are_off_the_run_dir_file_system(cli, tmp_path):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    d = tmp_path / "r"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                           "100000", "--quiet"], env=env_clean(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    try:
        _wait_rows(d, 5, tp)
        sd = _segdir(d)
        assert sd and sd.startswith("/dev/shm/trainperf-")
        st = os.stat(sd)
        assert st.st_uid == os.geteuid() and (st.st_mode & 0o777) == 0o700
        segs = [os.path.join(sd, n) for n in os.listdir(sd) if n.endswith(".tpf")]
        assert segs
        for seg in segs:
            ss = os.lstat(seg)
            assert ss.st_dev != os.stat(d).st_dev  # not on the run dir's file system
            assert (ss.st_mode & 0o777) == 0o600
        fstype = subprocess.run(["stat", "-f", "-c", "%T", sd], capture_output=True,
                                text=True).stdout.strip()
        assert fstype == "tmpfs"
        assert not list((d / "live").glob("seg-*"))
    finally:
        tp.send_signal(signal.SIGINT)
        _, err = tp.communicate(timeout=120)
    assert "warning" not in err, err
    assert not os.path.exists(sd)  # removed when the run finished
    assert json.loads((d / "summary.json").read_text())["steps"]["count"] == len(steps_rows(d))


def _private_shm(tmp_path):
    base = tmp_path / "shm"
    base.mkdir()
    base.chmod(0o1777)  # as /dev/shm: anyone may write, sticky
    return base


def test_no_segments_left_after_normal_failed_and_killed_runs(cli, tmp_path):
    base = _private_shm(tmp_path)
    env = env_clean(TRAINPERF_SHM_DIR=str(base))

    def go(d, *cmd):
        return subprocess.run([cli, "run", "--quiet", "--out", str(tmp_path / d), "--", *cmd],
                              capture_output=True, text=True, timeout=120, env=env)

    assert go("ok", TRAINER, "--steps", "20", "--quiet").returncode == 0
    assert len(steps_rows(tmp_path / "ok")) == 20
    assert _segdir(tmp_path / "ok").startswith(str(base))
    assert go("fail", "sh", "-c", f"{TRAINER} --steps 5 --quiet; exit 3").returncode == 3
    assert go("sig", "sh", "-c", f"{TRAINER} --steps 5 --quiet; kill -9 $$").returncode == 137
    bad = tmp_path / "notexe"
    bad.write_bytes(b"\x7fELF garbage")
    bad.chmod(0o755)
    assert go("exec", str(bad)).returncode == 126  # exec itself fails
    assert os.listdir(base) == []
    # Killed collector: the segments stay (nothing published is lost) until
    # `trainperf report` has recovered the run from them.
    d = tmp_path / "killed"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps", "400",
                           "--data-delay-ms", "10", "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_rows(d, 30, tp)
    kids = _children(tp.pid)
    tp.kill()
    tp.wait()
    _wait_gone(kids[0])
    assert len(os.listdir(base)) == 1
    p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "recovered an interrupted run" in p.stderr, p.stderr
    assert len(steps_rows(d)) == 400
    assert os.listdir(base) == []


def test_dead_runs_segments_are_swept_after_recovering_them(cli, tmp_path):
    base = _private_shm(tmp_path)
    env = env_clean(TRAINPERF_SHM_DIR=str(base))
    d = tmp_path / "killed"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps", "400",
                           "--data-delay-ms", "10", "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_rows(d, 30, tp)
    kids = _children(tp.pid)
    tp.kill()
    tp.wait()
    _wait_gone(kids[0])
    on_disk = len(steps_rows(d))
    assert on_disk < 400 and len(os.listdir(base)) == 1
    # The next run finds the dead run's segments: recovers that run into its
    # own directory (nothing published is lost), then frees the memory.
    p = subprocess.run([cli, "run", "--quiet", "--out", str(tmp_path / "next"), "--", TRAINER,
                        "--steps", "5", "--quiet"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, p.stderr
    assert os.listdir(base) == []
    assert len(steps_rows(d)) == 400
    rec = json.loads((d / "recovered.json").read_text())
    assert rec["steps_from_rings"] == 400 - on_disk


def _top_rank_ages(out):
    """The "last s" cells of `trainperf top`'s per-rank rows."""
    lines = out.splitlines()
    head = [i for i, l in enumerate(lines) if "last s" in l]
    assert head, out
    return [l.split()[-1] for l in lines[head[0] + 1:] if l.strip().startswith(("pid ", "rank "))]


def test_a_run_recovered_either_way_gets_its_summary_and_reports(cli, tmp_path):
    # Issue 27 item 5: the next run's sweep drained a killed run's segments
    # into its steps.csv but wrote no summary.json or report, and `report`
    # on it then wrote none either; `top` showed it as "running, 2 s".
    base = _private_shm(tmp_path)
    env = env_clean(TRAINPERF_SHM_DIR=str(base))
    d = tmp_path / "killed"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps", "400",
                           "--data-delay-ms", "10", "--quiet"], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    _wait_rows(d, 30, tp)
    kids = _children(tp.pid)
    tp.kill()
    tp.wait()
    _wait_gone(kids[0])
    # Dead, not running: the collector's lock is gone and no end was written.
    # top ends by itself (no --once) instead of watching a dead run forever.
    p = subprocess.run([cli, "top", str(d)], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert "dead" in p.stdout and "running" not in p.stdout, p.stdout
    assert "`trainperf report` recovers it" in p.stdout
    assert all(not a.startswith("-") for a in _top_rank_ages(p.stdout)), p.stdout
    # The next run sweeps its segments: recovered, summary and reports too.
    p = subprocess.run([cli, "run", "--out", str(tmp_path / "next"), "--", TRAINER, "--steps", "5",
                        "--quiet"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert f"recovered an interrupted run in {d}" in p.stderr, p.stderr
    assert os.listdir(base) == []
    sm = json.loads((d / "summary.json").read_text())
    assert sm["steps"]["count"] == 400 and len(steps_rows(d)) == 400
    assert "recovered" in (d / "report.md").read_text() and (d / "report.html").exists()
    p = subprocess.run([cli, "top", "--once", str(d)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert "recovered (recovered.json)" in p.stdout and "steps 400" in p.stdout, p.stdout
    # A run drained once but left without its summary (as the sweep left
    # them before, or when writing it failed): `report` finishes it, once.
    for n in ("summary.json", "report.md", "report.html"):
        (d / n).unlink()
    p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, p.stderr
    assert "finished the interrupted run" in p.stderr, p.stderr
    assert json.loads((d / "summary.json").read_text())["steps"]["count"] == 400
    assert (d / "report.md").exists() and len(steps_rows(d)) == 400  # never drained twice
    p = subprocess.run([cli, "report", str(d)], capture_output=True, text=True, timeout=120,
                       env=env)
    assert "interrupted" not in p.stderr


def test_top_never_shows_a_negative_age(cli, tmp_path):
    # A live run's "last s" was the last sample's time less the last step's
    # end: -0.2 when a step had ended after the sample.
    d = tmp_path / "r"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                           "100000000", "--quiet"], env=env_clean(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        _wait_rows(d, 5, tp)
        _wait_file(d / "metrics.csv")
        for _ in range(10):
            p = subprocess.run([cli, "top", "--once", str(d)], capture_output=True, text=True,
                               timeout=60)
            assert "running" in p.stdout and "dead" not in p.stdout, p.stdout
            ages = _top_rank_ages(p.stdout)
            assert ages and all(not a.startswith("-") for a in ages), p.stdout
            time.sleep(0.1)
    finally:
        tp.send_signal(signal.SIGINT)
        tp.wait(timeout=120)


def test_dead_runs_segments_are_swept_when_its_run_directory_is_gone(cli, tmp_path):
    # collector and trainee killed, run directory deleted: nothing to recover
    # into, but the 8 MiB of segments in /dev/shm must not stay forever
    import shutil
    base = _private_shm(tmp_path)
    env = env_clean(TRAINPERF_SHM_DIR=str(base))
    d = tmp_path / "killed"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                           "100000000", "--data-delay-ms", "10", "--quiet"], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_rows(d, 30, tp)
    kids = _children(tp.pid)
    tp.kill()
    tp.wait()
    for k in kids:
        os.kill(k, signal.SIGKILL)
        _wait_gone(k)
    (seg,) = os.listdir(base)
    assert any(n.startswith("seg-") for n in os.listdir(base / seg))
    shutil.rmtree(d)
    p = subprocess.run([cli, "run", "--quiet", "--out", str(tmp_path / "next"), "--", "true"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert os.listdir(base) == []


def test_a_live_runs_segments_are_never_swept(cli, tmp_path):
    base = _private_shm(tmp_path)
    env = env_clean(TRAINPERF_SHM_DIR=str(base))
    d = tmp_path / "live"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps",
                           "100000", "--quiet"], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        _wait_rows(d, 5, tp)
        sd = _segdir(d)
        p = subprocess.run([cli, "run", "--quiet", "--out", str(tmp_path / "other"), "--", "true"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        assert os.path.isdir(sd) and [n for n in os.listdir(sd) if n.endswith(".tpf")]
    finally:
        tp.send_signal(signal.SIGINT)
        tp.wait(timeout=120)
    assert os.listdir(base) == []


def test_planted_entries_in_the_shm_base_are_never_followed(cli, tmp_path):
    base = _private_shm(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "seg-1.tpf").write_text("precious\n")
    (victim / "run").write_text("precious\n")
    (base / "trainperf-AAAAAA").symlink_to(victim)  # a link where our dirs go
    os.mkfifo(base / "trainperf-BBBBBB")
    other = base / "trainperf-CCCCCC"  # another user's directory
    other.mkdir(mode=0o700)
    (other / "seg-1.tpf").write_text("theirs\n")
    if os.geteuid() == 0:
        os.chown(other, 65534, 65534)
    p = subprocess.run([cli, "run", "--quiet", "--out", str(tmp_path / "r"), "--", TRAINER,
                        "--steps", "20", "--quiet"], capture_output=True, text=True, timeout=120,
                       env=env_clean(TRAINPERF_SHM_DIR=str(base)))
    assert p.returncode == 0, p.stderr
    assert len(steps_rows(tmp_path / "r")) == 20
    assert (victim / "seg-1.tpf").read_text() == "precious\n"
    assert (victim / "run").read_text() == "precious\n"
    assert sorted(os.listdir(base)) == ["trainperf-AAAAAA", "trainperf-BBBBBB", "trainperf-CCCCCC"]
    assert (other / "seg-1.tpf").read_text() == "theirs\n"


@pytest.mark.parametrize("kind", ["symlink", "open"])
def test_probe_refuses_a_segment_dir_that_is_not_private(tmp_path, kind):
    # The probe takes TRAINPERF_SEG_DIR only when it is a real directory,
    # ours, closed to others; otherwise its segment goes to RUN/live.
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    if kind == "symlink":
        segdir = tmp_path / "trainperf-link"
        segdir.symlink_to(target)
    else:
        segdir = target
        target.chmod(0o777)
    d = tmp_path / "r"
    p = subprocess.run([TRAINER, "--steps", "5", "--quiet"], capture_output=True, text=True,
                       timeout=60, env=env_clean(TRAINPERF_RUN_DIR=str(d),
                                                 TRAINPERF_SEG_DIR=str(segdir)))
    assert p.returncode == 0, p.stderr
    assert os.listdir(target) == []
    assert len(list((d / "live").glob("seg-*.tpf"))) == 1


def test_no_usable_shm_falls_back_to_the_run_dir_with_one_warning(cli, tmp_path):
    d = tmp_path / "r"
    p = subprocess.run([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps", "30",
                        "--quiet"], capture_output=True, text=True, timeout=120,
                       env=env_clean(TRAINPERF_SHM_DIR=str(tmp_path / "missing")))
    assert p.returncode == 0, p.stderr
    warn = [l for l in p.stderr.splitlines() if "warning" in l]
    assert len(warn) == 1 and "segments go to the run directory" in warn[0], p.stderr
    assert "missing" in warn[0]
    assert _segdir(d) is None
    assert len(list((d / "live").glob("seg-*.tpf"))) == 1
    assert len(steps_rows(d)) == 30


def test_too_small_shm_falls_back_to_the_run_dir_with_one_warning(cli, tmp_path):
    with small_fs(tmp_path / "shm", "1m") as base:
        d = tmp_path / "r"
        p = subprocess.run([cli, "run", "--quiet", "--out", str(d), "--", TRAINER, "--steps", "30",
                            "--quiet"], capture_output=True, text=True, timeout=120,
                           env=env_clean(TRAINPERF_SHM_DIR=str(base)))
        assert p.returncode == 0, p.stderr
        warn = [l for l in p.stderr.splitlines() if "warning" in l]
        assert len(warn) == 1 and "too little" in warn[0], p.stderr
        assert os.listdir(base) == []
        assert len(steps_rows(d)) == 30


def _marked_trainer(marker, steps):
    # The trainee says when it has finished, outside the run directory.
    return ["sh", "-c", f"{TRAINER} --steps {steps} --quiet && echo done > {marker}"]


def test_stopped_collector_never_holds_the_trainee_back(cli, tmp_path):
    d = tmp_path / "r"
    marker = tmp_path / "done"
    tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--",
                           *_marked_trainer(marker, 3000)], env=env_clean(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_rows(d, 5, tp)
        tp.send_signal(signal.SIGSTOP)
        # All its steps and its exit happen while the collector is stopped.
        finished = _wait_file(marker)
    finally:
        tp.send_signal(signal.SIGCONT)
    _, err = tp.communicate(timeout=120)
    assert finished, "the trainee waited for the stopped collector"
    assert tp.returncode == 0, err
    sm = json.loads((d / "summary.json").read_text())
    assert sm["steps"]["count"] == 3000  # the rings held what was not drained
    assert len(steps_rows(d)) == 3000


@contextlib.contextmanager
def frozen_capable_fs(path):
    """An ext4 file system on a loop device at path, which fsfreeze can stop
    as a hung network file system stops: writes and page faults block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a loop device needs root (CI runs as root)")
    img = path.parent / (path.name + ".img")
    path.mkdir(parents=True, exist_ok=True)
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    p = subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot make an ext4 image here: {p.stderr.strip()}")
    p = subprocess.run(["mount", "-o", "loop,noatime", str(img), str(path)], capture_output=True,
                       text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {p.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["fsfreeze", "-u", str(path)], capture_output=True)
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
        img.unlink()


def test_hung_run_dir_file_system_never_stalls_the_steps(cli, tmp_path):
    with frozen_capable_fs(tmp_path / "m") as m:
        d = m / "r"
        marker = tmp_path / "done"
        tp = subprocess.Popen([cli, "run", "--quiet", "--out", str(d), "--",
                               *_marked_trainer(marker, 3000)], env=env_clean(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_rows(d, 5, tp)
            p = subprocess.run(["fsfreeze", "-f", str(m)], capture_output=True, text=True)
            if p.returncode != 0:
                pytest.skip(f"fsfreeze refused: {p.stderr.strip()}")
            # The run directory's file system answers nothing now; the
            # trainee runs all its steps and exits all the same.
            finished = _wait_file(marker)
        finally:
            subprocess.run(["fsfreeze", "-u", str(m)], capture_output=True)
        _, err = tp.communicate(timeout=300)
        assert finished, "the trainee stalled on the frozen run-dir file system"
        assert tp.returncode == 0, err
        sm = json.loads((d / "summary.json").read_text())
        assert sm["steps"]["count"] == 3000
        assert len(steps_rows(d)) == 3000
