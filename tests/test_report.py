"""trainperf report / compare: fixture runs (tests/data/runs, built by
make_fixtures.py), golden reports, the HTML report in headless Chromium,
bad input, and real runs of the bundled C trainer under `trainperf run`.

Regenerate the golden files deliberately with TRAINPERF_UPDATE_GOLDEN=1.
"""
import csv
import gzip
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import BUILD, ROOT, SANITIZE, TRACES

RUNS = ROOT / "tests" / "data" / "runs"
GOLDEN = ROOT / "tests" / "data" / "golden"
UPDATE = os.environ.get("TRAINPERF_UPDATE_GOLDEN") == "1"
TRAINER = BUILD / "examples" / "trainer"


def report(run_cli, run, *args):
    return run_cli("report", str(run), *args, env={"NO_COLOR": "1"})


def report_json(run_cli, run):
    p = report(run_cli, run, "--format", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


# ---- golden files ------------------------------------------------------------

@pytest.mark.parametrize("fmt,ext", [("text", "txt"), ("md", "md"), ("json", "json")])
def test_golden_reports(run_cli, fmt, ext):
    p = report(run_cli, RUNS / "input-bound", "--format", fmt)
    assert p.returncode == 0, p.stderr
    gold = GOLDEN / f"report-input-bound.{ext}"
    if UPDATE:
        gold.write_text(p.stdout)
    assert gold.exists(), f"{gold} missing: run with TRAINPERF_UPDATE_GOLDEN=1"
    assert p.stdout == gold.read_text(), f"{fmt} report differs from {gold}"


def test_out_file_matches_stdout(run_cli, tmp_path):
    out = tmp_path / "r.md"
    p = report(run_cli, RUNS / "input-bound", "--format", "md", "--out", out)
    assert p.returncode == 0 and p.stdout == ""
    assert out.read_text() == (GOLDEN / "report-input-bound.md").read_text()


def test_no_colour_unless_a_terminal(run_cli):
    p = report(run_cli, RUNS / "input-bound")
    assert "\033[" not in p.stdout
    p = run_cli("report", RUNS / "input-bound", "--color", env={"NO_COLOR": "1"})
    assert "\033[" not in p.stdout
    p = run_cli("report", RUNS / "input-bound", "--color", env={"NO_COLOR": ""})
    assert "\033[1m" in p.stdout


# ---- the diagnosis of each fixture, as JSON ---------------------------------------

def derived_data_share(run):
    """sum(data_ns) / sum(interval_ns) straight from steps.csv."""
    import csv
    rows = list(csv.DictReader(open(run / "steps.csv")))
    return sum(int(r["data_ns"]) for r in rows) / sum(int(r["interval_ns"]) for r in rows)


def test_input_bound_fixture(run_cli):
    j = report_json(run_cli, RUNS / "input-bound")
    d = j["diagnosis"]
    assert d["primary"]["id"] == "input-bound"
    share = derived_data_share(RUNS / "input-bound")
    assert j["steps"]["data_wait_share"] == pytest.approx(share, abs=1e-4)
    ev = {e["name"]: e["value"] for e in d["primary"]["evidence"]}
    assert ev["data_wait_share"] == pytest.approx(share, abs=1e-9)
    assert ev["worker_processes"] == 0
    recs = " ".join(d["primary"]["recommendations"])
    for word in ("num_workers", "pin_memory", "persistent_workers"):
        assert word in recs
    assert [a["rule"] for a in j["alerts"]] == ["data_wait", "gpu_underused"]


@pytest.mark.parametrize("run,primary,extra", [
    ("compute-bound", "compute-bound", None),
    ("cpu-only", "compute-bound", None),
    ("memory-growth", "memory-capacity", None),
    ("hang", "unstable", "possible hang"),
    ("crashed", "insufficient-data", "3 steps recorded"),
    ("straggler", "straggler", "Rank 3"),
])
def test_fixture_diagnosis(run_cli, run, primary, extra):
    d = report_json(run_cli, RUNS / run)["diagnosis"]
    assert d["primary"]["id"] == primary
    if extra:
        assert extra in d["primary"]["summary"]
    assert d["insufficient_data"] == (primary == "insufficient-data")


def test_cpu_only_says_gpu_unknown(run_cli):
    j = report_json(run_cli, RUNS / "cpu-only")
    assert j["gpus"] == []
    assert any("GPU metrics were not available" in n for n in j["diagnosis"]["notes"])
    text = " ".join(e["text"] for e in j["diagnosis"]["primary"]["evidence"])
    assert "GPU" not in text
    assert j["diagnosis"]["primary"]["title"] == "Compute-bound on the CPU"


def test_crashed_run_records_exit(run_cli):
    j = report_json(run_cli, RUNS / "crashed")
    assert j["run"]["exit"] == {"code": 1, "signal": None}
    assert any("exited with status 1" in n for n in j["diagnosis"]["notes"])


# ---- escaping --------------------------------------------------------------------

def test_hostile_strings_escaped_everywhere(run_cli):
    run = RUNS / "hostile-names"
    html = report(run_cli, run, "--format", "html").stdout
    assert "<script" not in html.lower()
    assert "onerror=" not in html.replace("onerror=alert(&#39;msg&#39;)", "")  # only as text
    assert "&lt;script&gt;alert(&#39;cmd&#39;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(&#39;msg&#39;)&gt;" in html
    md = report(run_cli, run, "--format", "md").stdout
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "a\\|b" in md  # a pipe cannot split a table cell
    j = report_json(run_cli, run)
    assert "<script>alert('cmd')</script>.py" in j["run"]["command"]  # JSON keeps the text
    assert j["gpus"][0]["name"] == "<script>alert('gpu')</script>"


def test_html_has_no_script_and_no_network(run_cli):
    html = report(run_cli, RUNS / "input-bound", "--format", "html").stdout
    low = html.lower()
    assert "<script" not in low
    for bad in ("http://", "https://", "src=\"//", "@import", "url("):
        assert bad not in low
    assert low.count("<svg") >= 5  # throughput, breakdown, data wait, GPU, CPU, memory


# ---- bad input ----------------------------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["tests/data/runs/no-such-run"], "no such run directory"),
    (["tests/data/runs/damaged"], "run.json: position"),
    (["tests/data/runs/input-bound/run.json"], "not a directory"),
    (["/"], "not a trainperf run directory"),
    (["tests/data/runs/input-bound", "--format", "pdf"], "--format wants"),
    (["tests/data/runs/input-bound", "--bogus"], "unknown option"),
    ([], "usage"),
])
def test_bad_input_one_line_exit_2(run_cli, args, needle):
    p = run_cli("report", *args, cwd=ROOT)
    assert p.returncode == 2
    assert needle in p.stderr
    assert p.stdout == ""
    if args:
        assert len(p.stderr.strip().splitlines()) == 1


def test_damaged_csv(run_cli, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "input-bound", run)
    (run / "steps.csv").write_text("x" * (2 << 20))  # one 2 MiB record: over the cap
    p = run_cli("report", run)
    assert p.returncode == 2 and "steps.csv" in p.stderr


def test_torn_last_alert_line_is_tolerated(run_cli, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "input-bound", run)
    with open(run / "alerts.jsonl", "a") as f:
        f.write('{"t": 99.0, "rule": "hang", "sta')  # a crash mid-write
    j = report_json(run_cli, run)
    assert len(j["alerts"]) == 2


def test_data_wait_read_under_its_old_name_too(run_cli, tmp_path):
    # The fixtures are run directories of an earlier build: metrics.csv names
    # the data-wait share data_wait_pct (0-100); now it is data_wait_share
    # (0-1). A reader takes both and shows the same figure.
    old = tmp_path / "old"
    shutil.copytree(RUNS / "input-bound", old)
    (old / "summary.json").unlink()  # top falls back on metrics.csv
    new = tmp_path / "new"
    shutil.copytree(old, new)
    with open(old / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert "data_wait_pct" in rows[0] and "data_wait_share" not in rows[0]
    last_pct = float(rows[-1]["data_wait_pct"])
    for row in rows:
        v = row.pop("data_wait_pct")
        row["data_wait_share"] = "" if v == "" else "%.4f" % (float(v) / 100)
    with open(new / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    shown = []
    for run in (old, new):
        p = run_cli("top", "--once", run)
        assert p.returncode == 0, p.stderr
        m = re.search(r"data wait (\d+)%", p.stdout)
        assert m, p.stdout
        shown.append(int(m.group(1)))
        # the report of either builds, with the same diagnosis
        assert report_json(run_cli, run)["diagnosis"]["primary"]["id"] == "input-bound"
    assert shown[0] == shown[1] == round(last_pct)


# ---- advice in the run's own terms ---------------------------------------------------

def fixture_copy(tmp_path, name, command=None, cpu_pct=None, gpu_throttle=None):
    """A copy of a fixture run with run.json "command", metrics.csv cpu_pct or
    gpu0_throttle (a function of the row index) replaced."""
    run = tmp_path / name
    shutil.copytree(RUNS / name, run)
    if command is not None:
        rj = json.loads((run / "run.json").read_text())
        rj["command"] = command
        (run / "run.json").write_text(json.dumps(rj))
    if cpu_pct is not None or gpu_throttle is not None:
        with open(run / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        for i, row in enumerate(rows):
            if cpu_pct is not None:
                row["cpu_pct"] = str(cpu_pct)
            if gpu_throttle is not None:
                row["gpu0_throttle"] = gpu_throttle(i)
        with open(run / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    return run


PYTORCH_WORDS = ("DataLoader", "num_workers", "persistent_workers", "prefetch_factor",
                 "pin_memory")


@pytest.mark.parametrize("command,python", [
    (["python3", "train.py"], True),
    (["/usr/bin/env", "python", "train.py"], True),
    (["torchrun", "--nproc_per_node=2", "-m", "mypkg.train"], True),
    (["/opt/venv/bin/python3.11", "-m", "mypkg.train"], True),
    (["./build/examples/trainer", "--steps", "9"], False),
    (["./llm_train", "-b", "4"], False),
])
def test_advice_fits_the_command(run_cli, tmp_path, command, python):
    run = fixture_copy(tmp_path, "input-bound", command=command)
    j = report_json(run_cli, run)
    assert j["diagnosis"]["primary"]["id"] == "input-bound"
    recs = " ".join(j["diagnosis"]["primary"]["recommendations"])
    text = report(run_cli, run).stdout
    diag_text = text[text.index("DIAGNOSIS"):text.index("THROUGHPUT")]
    if python:
        assert "DataLoader(num_workers=" in recs and "persistent_workers" in recs
    else:
        for word in PYTORCH_WORDS:
            assert word not in recs and word not in diag_text, word
        assert "prefetch queue" in recs or "--workers" in recs
        # the bundled trainer's own flag, and only for it
        assert ("--workers" in recs) == command[0].endswith("/trainer")
        assert "page-locked" in recs  # the fixture has a GPU: the generic pinned-copy advice


def test_trainer_with_loader_threads_is_told_more(run_cli, tmp_path):
    # the trainer's --workers are threads, invisible in the process tree
    run = fixture_copy(tmp_path, "input-bound", command=["./trainer", "--workers", "3"])
    recs = " ".join(report_json(run_cli, run)["diagnosis"]["primary"]["recommendations"])
    assert "this run had 3)" in recs
    n = int(recs.split("the bundled trainer: --workers ")[1].split(";")[0])
    assert n >= 6  # at least twice the loaders it had


def idle_evidence(j):
    ev = {e["name"]: e for e in j["diagnosis"]["primary"]["evidence"]}
    return ev["idle_cores"]


@pytest.mark.parametrize("cpu_pct", [96.25, 90.0, 50.0])
def test_idle_cores_agree_between_evidence_and_advice(run_cli, tmp_path, cpu_pct):
    # input-bound fixture: main process ~99% CPU, no workers, 16 CPUs
    run = fixture_copy(tmp_path, "input-bound", cpu_pct=cpu_pct)
    j = report_json(run_cli, run)
    cpus = j["run"]["cpus"]
    idle = round(cpus * (1 - cpu_pct / 100), 1)
    e = idle_evidence(j)
    assert e["value"] == pytest.approx(idle)
    shown = f"{idle:.1f} of {cpus} cores"
    assert e["text"].startswith(shown)
    first = j["diagnosis"]["primary"]["recommendations"][0]
    assert shown in first  # the same figure, the same rounding
    if idle < 1 and "No whole core is idle" in first:
        # no idle core: the advice must not be to start more loaders
        assert "num_workers=" not in first
        # no workers and none advised: nothing about keeping workers fed
        assert "persistent_workers" not in " ".join(j["diagnosis"]["primary"]["recommendations"])
    elif idle < 1:
        # unless the training process loads the batches itself: workers
        # would use the core it leaves (said with the estimate)
        assert "loads them itself" in first and "num_workers=2" in first, first
        assert "up to about" in first, first
    else:
        n = int(first.split("num_workers=")[1].split(")")[0])
        assert 1 <= n <= int(idle)


def test_throttle_reasons_named_once(run_cli, tmp_path):
    combos = ["sw_power_cap", "sw_power_cap+hw_slowdown", "hw_slowdown+sw_power_cap", ""]
    run = fixture_copy(tmp_path, "compute-bound", gpu_throttle=lambda i: combos[i % 4])
    j = report_json(run_cli, run)
    words = j["gpus"][0]["clock_events"].split("+")
    assert sorted(words) == ["hw_slowdown", "sw_power_cap"]
    md = report(run_cli, run, "--format", "md").stdout
    row = [l for l in md.splitlines() if l.startswith("| 0 |")][0]
    assert row.count("sw\\_power\\_cap") == 1 and row.count("hw\\_slowdown") == 1


# ---- profiler traces in the report ----------------------------------------------------

SMALL_TRACE = "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def trace_op_count(path, name):
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    return sum(1 for e in ev if e.get("ph") == "X" and e.get("name") == name)


def test_report_includes_profiler_traces(run_cli, tmp_path, traces_dir):
    run = fixture_copy(tmp_path, "input-bound")
    prof = run / "profile"
    prof.mkdir()
    src = traces_dir / SMALL_TRACE
    shutil.copy(src, prof / SMALL_TRACE)  # a copy at test time, never committed
    (prof / "top-1-0.json").write_text('{"window": 0, "ops": []}')  # helper table, not a trace
    calls = trace_op_count(src, "gloo:all_reduce")
    assert calls > 0

    j = report_json(run_cli, run)
    pj = j["profiler"]
    assert pj["dir"] == "profile" and pj["files"] == 1 and pj["not_analysed"] == []
    # the same analysis as `trainperf analyze --json` on that file
    a = run_cli("analyze", prof / SMALL_TRACE, "--json")
    assert a.returncode == 0, a.stderr
    assert pj["analysis"] == json.loads(a.stdout)
    ops = {o["name"]: o["count"] for o in pj["analysis"]["ranks"][0]["top_ops_self"]}
    assert ops["gloo:all_reduce"] == calls

    md = report(run_cli, run, "--format", "md").stdout
    sec = md[md.index("## Profiler traces"):]
    assert "1 trace file in `profile/`" in sec
    assert f"| {calls} |" in sec and "gloo:all\\_reduce" not in sec.split("###")[0]
    assert "### Rank 34" in sec  # the analyser's headings sit under the report's section
    text = report(run_cli, run).stdout
    assert "1 trace file in profile/" in text and "gloo:all_reduce" in text
    html = report(run_cli, run, "--format", "html").stdout
    assert "<h3>Rank 34" in html and "<td>gloo:all_reduce</td>" in html


def test_damaged_trace_is_named_and_the_report_still_builds(run_cli, tmp_path, traces_dir):
    run = fixture_copy(tmp_path, "input-bound")
    prof = run / "profile"
    prof.mkdir()
    shutil.copy(traces_dir / SMALL_TRACE, prof / SMALL_TRACE)
    whole = gzip.decompress((traces_dir / SMALL_TRACE).read_bytes())
    (prof / "trace-7-0.json").write_bytes(whole[:len(whole) // 2])  # cut mid-write
    (prof / "trace-7-1.json").write_text('<script>alert(1)</script>')
    for fmt in ("text", "md", "html", "json"):
        p = report(run_cli, run, "--format", fmt)
        assert p.returncode == 0, p.stderr
    pj = report_json(run_cli, run)["profiler"]
    assert pj["files"] == 3
    bad = sorted(pj["not_analysed"])
    assert len(bad) == 2
    assert bad[0].startswith("profile/trace-7-0.json: ")
    assert bad[1].startswith("profile/trace-7-1.json: ")
    assert pj["analysis"]["ranks"][0]["rank"] == 34  # the good trace is still analysed
    text = report(run_cli, run).stdout
    assert "not analysed: profile/trace-7-0.json" in text
    html = report(run_cli, run, "--format", "html").stdout
    assert "<script>alert" not in html


def test_end_of_run_report_analyses_the_profile_folder(cli, tmp_path, traces_dir):
    # a command that leaves a trace where the Python helpers would
    # (TRAINPERF_RUN_DIR/profile/); report_finish_run writes report.md/html
    run = tmp_path / "run"
    src = traces_dir / SMALL_TRACE
    sh = f'mkdir -p "$TRAINPERF_RUN_DIR/profile" && cp "{src}" "$TRAINPERF_RUN_DIR/profile/"'
    p = trainperf_run(cli, run, "sh", "-c", sh)
    assert p.returncode == 0, p.stderr
    md = (run / "report.md").read_text()
    assert "1 trace file in `profile/`" in md and "### Rank 34" in md
    html = (run / "report.html").read_text()
    assert "<h3>Rank 34" in html


PROFILED_SCRIPT = """
import torch, trainperf
from trainperf.torch_helpers import ProfilerSchedule
m = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
with ProfilerSchedule(wait=1, warmup=1, active=3, repeat=1) as ps:
    for i in range(12):
        with trainperf.step():
            loss = m(torch.randn(32, 64)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        ps.step()
"""


@pytest.mark.torch
@pytest.mark.slow
def test_real_torch_profiler_window_lands_in_the_report(cli, run_cli, tmp_path):
    from pyhelp import clean_env
    script = tmp_path / "prof.py"
    script.write_text(PROFILED_SCRIPT)
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--quiet", "--out", str(run), "--", sys.executable,
                        str(script)], capture_output=True, text=True, timeout=300,
                       env=clean_env())
    assert p.returncode == 0, p.stderr[-2000:]
    traces = sorted((run / "profile").glob("trace-*.json"))
    assert len(traces) == 1
    # the profiled steps, counted in the trace itself
    ev = json.loads(traces[0].read_text())["traceEvents"]
    steps = {e["name"] for e in ev if e.get("ph") == "X" and
             e.get("name", "").startswith("ProfilerStep#")}
    assert len(steps) == 3  # active=3
    pj = report_json(run_cli, run)["profiler"]
    assert pj["files"] == 1 and pj["not_analysed"] == []
    got = {s["step"] for s in pj["analysis"]["ranks"][0]["steps"]}
    assert {f"ProfilerStep#{n}" for n in got} == steps
    assert "#### Top CPU operators by self time" in (run / "report.md").read_text()


def test_profile_dir_without_traces(run_cli, tmp_path):
    run = fixture_copy(tmp_path, "input-bound")
    (run / "profile").mkdir()
    pj = report_json(run_cli, run)["profiler"]
    assert pj["files"] == 0 and pj["analysis"] is None
    assert "holds no trace files" in report(run_cli, run).stdout
    assert report_json(run_cli, RUNS / "input-bound")["profiler"] is None


# ---- compare ---------------------------------------------------------------------------

def test_compare_deltas_match_reports(run_cli):
    a, b = RUNS / "input-bound", RUNS / "compute-bound"
    ja, jb = report_json(run_cli, a), report_json(run_cli, b)
    p = run_cli("compare", a, b, "--format", "json")
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)
    m = c["metrics"]["samples_per_s"]
    assert m["a"] == pytest.approx(ja["steps"]["samples_per_s"], rel=1e-3)
    assert m["b"] == pytest.approx(jb["steps"]["samples_per_s"], rel=1e-3)
    # JSON numbers carry 10 significant digits: a, b and delta each rounded once
    assert m["delta"] == pytest.approx(m["b"] - m["a"], rel=1e-8)
    assert m["delta_pct"] == pytest.approx(100 * (m["b"] - m["a"]) / m["a"], rel=1e-8)
    assert m["verdict"] == "better"
    assert c["metrics"]["share_data"]["verdict"] == "better"
    assert c["diagnosis"]["a"]["primary"]["id"] == "input-bound"
    assert c["diagnosis"]["b"]["primary"]["id"] == "compute-bound"
    for fmt in ("text", "md", "html"):
        p = run_cli("compare", a, b, "--format", fmt, env={"NO_COLOR": "1"})
        assert p.returncode == 0 and "samples/s" in p.stdout


def test_compare_bad_input(run_cli):
    p = run_cli("compare", RUNS / "input-bound", RUNS / "nope")
    assert p.returncode == 2 and "run B:" in p.stderr
    p = run_cli("compare", RUNS / "input-bound")
    assert p.returncode == 2


# ---- HTML in headless Chromium --------------------------------------------------------

def chromium():
    for n in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(n):
            return shutil.which(n)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("run", ["input-bound", "hostile-names", "straggler"])
def test_html_renders_in_chromium(run_cli, tmp_path, run):
    exe = chromium()
    if not exe:
        pytest.skip("chromium not installed (apt-get install chromium)")
    html = tmp_path / f"{run}.html"
    assert report(run_cli, RUNS / run, "--format", "html", "--out", html).returncode == 0
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / f"{run}.png"
    p = subprocess.run(base + ["--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
                               "--window-size=1200,2000", html.as_uri()],
                       capture_output=True, text=True, timeout=180)
    assert shot.exists() and shot.stat().st_size > 20000, p.stderr[-2000:]
    # keep the screenshot as an artifact beside the build
    art = BUILD / "artifacts"
    art.mkdir(exist_ok=True)
    shutil.copy(shot, art / shot.name)
    console = [l for l in p.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    assert console == [], console
    dom = subprocess.run(base + ["--dump-dom", html.as_uri()], capture_output=True, text=True,
                         timeout=180).stdout
    assert "<svg" in dom and "trainperf report" in dom
    # the hostile name is text in the rendered page, never an element
    assert "<script" not in dom.lower()


# ---- real runs of the bundled trainer ----------------------------------------------------

def need_trainer():
    if not TRAINER.exists():
        pytest.skip(f"{TRAINER} not built")


def trainperf_run(cli, out, *cmd, alerts=(), timeout=120):
    args = [cli, "run", "--quiet", "--out", str(out)]
    for a in alerts:
        args += ["--alert", a]
    return subprocess.run(args + ["--"] + [str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout)


def child_of(pid, deadline=20.0):
    end = time.time() + deadline
    while time.time() < end:
        kids = []
        for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
            try:
                kids += (task / "children").read_text().split()
            except OSError:
                pass
        if kids:
            return int(kids[0])
        time.sleep(0.05)
    raise AssertionError("no child process appeared")


def alerts_of(run):
    f = run / "alerts.jsonl"
    if not f.exists():
        return []
    out = []
    for line in f.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


@pytest.mark.slow
def test_trainer_input_bound(cli, run_cli, tmp_path):
    need_trainer()
    run = tmp_path / "run"
    p = trainperf_run(cli, run, TRAINER, "--steps", "60", "--data-delay-ms", "40", "--hidden", "32")
    assert p.returncode == 0, p.stderr
    j = report_json(run_cli, run)
    assert j["diagnosis"]["primary"]["id"] == "input-bound"
    assert j["steps"]["data_wait_share"] > 0.5
    recs = " ".join(j["diagnosis"]["primary"]["recommendations"])
    # a C program: generic advice with the trainer's own flag, no PyTorch names
    assert "--workers" in recs and "DataLoader" not in recs
    # the end of the run wrote the reports and the diagnosis into summary.json
    s = json.loads((run / "summary.json").read_text())
    assert s["diagnosis"]["primary"]["id"] == "input-bound"
    assert "format_version" in s
    assert (run / "report.md").exists() and (run / "report.html").exists()


@pytest.mark.slow
def test_trainer_compute_bound_healthy_no_false_alarm(cli, run_cli, tmp_path):
    need_trainer()
    run = tmp_path / "run"
    # ~15 s of steady steps: long enough for the hang rule (50 median steps
    # + 10 s) to have had its chance on a healthy run
    p = trainperf_run(cli, run, TRAINER, "--steps", "100", "--hidden", "512")
    assert p.returncode == 0, p.stderr
    j = report_json(run_cli, run)
    d = j["diagnosis"]
    # on a shared machine other jobs' CPU use is a true finding; the run's
    # own verdict then follows it
    ids = [d["primary"]["id"]] + [f["id"] for f in d["secondary"]]
    own = [i for i in ids if i != "cpu-contention"]
    assert own and own[0] in ("compute-bound", "unstable"), ids
    assert j["steps"]["data_wait_share"] < 0.2
    fired = [a["rule"] for a in alerts_of(run) if a["state"] == "fired"]
    for rule in ("hang", "data_wait", "step_regression", "host_mem_growth", "gpu_underused"):
        assert rule not in fired


@pytest.mark.slow
def test_memory_growth_alert(cli, tmp_path):
    run = tmp_path / "run"
    grow = tmp_path / "grow.py"
    # 30 MiB/s of touched memory for 35 s: a clean linear trend of the tree's RSS,
    # in steps (memory trends start with training: not at start-up)
    grow.write_text(
        "import time\nimport trainperf\nkeep = []\nfor i in range(350):\n"
        "    with trainperf.step():\n"
        "        keep.append(bytearray(3 * 1024 * 1024))\n        time.sleep(0.1)\n")
    p = trainperf_run(cli, run, sys.executable, grow, alerts=["leak: mem.oom_eta_s < 3h"],
                      timeout=180)
    assert p.returncode == 0, p.stderr
    leak = [a for a in alerts_of(run) if a["rule"] == "leak" and a["state"] == "fired"]
    assert len(leak) == 1
    assert "projected to run out of host memory" in leak[0]["message"]
    assert leak[0]["t"] >= 20  # not before the trend window has 20 s of history
    # the projection is headroom / growth, so with ~30 MiB/s and the host's
    # available memory it is far beyond a minute and below the 3 h threshold
    assert 60 < leak[0]["value"] < 3 * 3600


@pytest.mark.slow
def test_stalled_trainer_gets_hang_alert(cli, run_cli, tmp_path):
    need_trainer()
    run = tmp_path / "run"
    proc = subprocess.Popen([cli, "run", "--quiet", "--out", str(run), "--",
                             str(TRAINER), "--steps", "100000", "--data-delay-ms", "5",
                             "--hidden", "16"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        child = child_of(proc.pid)
        time.sleep(4)  # steps happen
        os.kill(child, signal.SIGSTOP)  # the process stops making steps
        end = time.time() + 60
        hang = []
        while time.time() < end and not hang:
            time.sleep(0.5)
            hang = [a for a in alerts_of(run) if a["rule"] == "hang"]
        assert hang, "no hang alert within 60 s of the stall"
        assert hang[0]["severity"] == "critical"
        assert "possible hang" in hang[0]["message"]
        os.kill(child, signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    j = report_json(run_cli, run)
    assert j["diagnosis"]["primary"]["id"] == "unstable"
    assert "possible hang" in j["diagnosis"]["primary"]["summary"]


@pytest.mark.slow
def test_crashing_trainer_still_reported(cli, run_cli, tmp_path):
    need_trainer()
    run = tmp_path / "run"
    proc = subprocess.Popen([cli, "run", "--quiet", "--out", str(run), "--",
                             str(TRAINER), "--steps", "100000", "--data-delay-ms", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = child_of(proc.pid)
    time.sleep(3)
    # SIGABRT as from abort(): a crash that the sanitizer build does not
    # intercept (ASan turns SIGSEGV into its own report and exit 1)
    os.kill(child, signal.SIGABRT)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGABRT
    assert (run / "report.md").exists() and (run / "report.html").exists()
    j = report_json(run_cli, run)
    assert j["run"]["exit"]["signal"] == signal.SIGABRT
    assert any(f"signal {int(signal.SIGABRT)}" in n for n in j["diagnosis"]["notes"])
    assert j["steps"]["count"] > 0


def test_a_phase_longer_than_its_steps_draws_a_bar_of_the_width(run_cli, tmp_path):
    # a damaged steps.csv: one step's forward 7.5e7 times the step (the bar's
    # length, 3e9 columns, once wrapped to a negative int and was drawn
    # cell by cell: seconds to minutes and gigabytes for one report)
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "data" / "runs" / "compute-bound", run)
    with open(run / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    cols = list(rows[0].keys())
    rows[3]["forward_ns"] = str(int(7.5e7) * int(rows[3]["interval_ns"]) * len(rows))
    with open(run / "steps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(rows)
    p = run_cli("report", str(run), env={"NO_COLOR": "1"})
    assert p.returncode == 0, p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.lstrip().startswith("forward")][0]
    assert line.count("\u2588") == 40, line


def test_report_through_a_link_names_the_run(run_cli, tmp_path):
    """`report trainperf-runs/latest` (a link) or `report .` is titled with the
    run directory's own name, not "latest" or "."."""
    shutil.copytree(ROOT / "tests" / "data" / "runs" / "input-bound", tmp_path / "20261127-120000")
    os.symlink("20261127-120000", tmp_path / "latest")
    for args, cwd in (([tmp_path / "latest"], None), (["."], tmp_path / "latest")):
        p = run_cli("report", *args, cwd=cwd, env={"NO_COLOR": "1"})
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[0] == "trainperf report: 20261127-120000", p.stdout[:200]
    md = run_cli("report", tmp_path / "latest", "--format", "md").stdout
    assert "20261127-120000" in md.splitlines()[0] and "latest" not in md.splitlines()[0]


def _cpu_chart(html):
    i = html.index('aria-label="CPU over time"')
    fig = html[html.rfind("<figure", 0, i):html.index("</figure>", i)]
    legend = html[html.index("</figure>", i):]
    legend = legend[:legend.index("</div>")]
    return fig, re.findall(r"</i>([^<]+)</span>", legend)


def test_html_cpu_chart_draws_a_one_process_tree_once(run_cli, tmp_path):
    """A run whose tree is one process: its line and the main process's would
    be drawn on top of each other, so the chart draws it once and says so."""
    run = tmp_path / "run"
    p = run_cli("run", "--quiet", "--interval", "0.2", "--out", run, "--", BUILD / "examples" / "trainer",
                "--steps", "60", "--data-delay-ms", "10", "--quiet")
    assert p.returncode == 0, p.stderr
    assert json.loads(run_cli("report", run, "--json").stdout)["resources"]["tree_procs_max"] == 1
    fig, legend = _cpu_chart(run_cli("report", run, "--format", "html").stdout)
    assert fig.count("<polyline") == 2 and legend == ["system", "process"], legend
    assert "the tree was this one process" in fig
    # a tree of several processes keeps its three lines
    fig, legend = _cpu_chart(run_cli("report", ROOT / "tests" / "data" / "runs" / "compute-bound",
                                     "--format", "html").stdout)
    assert fig.count("<polyline") == 3 and legend == ["system", "process tree", "main process"]


def _figure(html, aria):
    i = html.index('aria-label="%s"' % aria)
    return html[html.rfind("<figure", 0, i):html.index("</figure>", i)]


def test_html_step_charts_start_at_the_first_step(run_cli, tmp_path):
    """A run whose first step comes after a long start-up (here 4 s of sleep
    before the trainer): the step charts' time axes begin at the first step,
    and say so; the resource charts still cover the whole run from 0."""
    run = tmp_path / "run"
    p = run_cli("run", "--quiet", "--interval", "0.2", "--out", run, "--", "sh", "-c",
                "sleep 4; exec %s --steps 100 --data-delay-ms 10 --quiet" % (BUILD / "examples" / "trainer"))
    assert p.returncode == 0, p.stderr
    html = run_cli("report", run, "--format", "html").stdout

    def ticks(fig):
        return [t for t in re.findall(r'class="xl"[^>]*>([^<]+)<', fig)]

    def secs(t):
        return float(t[:-1]) * (60 if t.endswith("m") else 1)

    for aria in ("Throughput over time (samples/s)", "stacked phases of the step time over time"):
        fig = _figure(html, aria)
        assert re.search(r"from the first step \(\d(\.\d)?s into the run\)</figcaption>", fig), fig[:300]
        first = secs(ticks(fig)[0])
        assert 3 <= first <= 5, ticks(fig)
        # nothing is drawn left of the plot area
        xs = [float(x) for x in re.findall(r'<rect x="([\d.]+)"', fig)]
        xs += [float(x) for x in re.findall(r"(\d+\.\d),\d+\.\d ", fig)]
        assert xs and min(xs) >= 62.0 - 0.1, min(xs)
    cpu = _figure(html, "CPU over time")
    assert ticks(cpu)[0] == "0s" and "first step" not in cpu


def _on_terminal(argv, cols, env=None):
    """argv's output on a terminal of cols columns (a pty), as text."""
    import fcntl
    import pty
    import struct
    import termios
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
        e = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPERF_")}
        e.update(env or {})
        os.execve(argv[0], [str(a) for a in argv], e)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    return data.decode(errors="replace").replace("\r", "")


def test_text_report_is_wrapped_to_the_terminal(cli, run_cli):
    """On a terminal the text report keeps to its width: long lines break at
    spaces, continuations indented under their text; nothing is lost (the same
    words as off a terminal, where nothing is wrapped)."""
    run = ROOT / "tests" / "data" / "runs" / "input-bound"
    plain = run_cli("report", run, env={"NO_COLOR": "1"}).stdout
    assert max(len(l) for l in plain.splitlines()) > 60
    text = _on_terminal([cli, "report", run], 60, {"NO_COLOR": "1"})
    lines = text.splitlines()
    assert max(len(l) for l in lines) <= 60, [l for l in lines if len(l) > 60]
    assert text.split() == plain.split()
    # a numbered fix continues under its text, a "label  value" row under its value
    i = next(k for k, l in enumerate(lines) if l.startswith("    1. "))
    assert lines[i + 1].startswith(" " * 7) and lines[i + 1][7] != " ", lines[i:i + 2]
    i = next(k for k, l in enumerate(lines) if l.startswith("  tree CPU     "))
    assert len(lines[i]) > 50 and lines[i + 1].startswith(" " * 15) and lines[i + 1][15] != " "
    # colour escapes take no column
    coloured = _on_terminal([cli, "report", run, "--color"], 60, {"TERM": "xterm"})
    assert "\x1b[" in coloured
    bare = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", coloured)
    assert max(len(l) for l in bare.splitlines()) <= 60
