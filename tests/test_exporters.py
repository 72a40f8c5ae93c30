"""Live exporters end to end: a real Prometheus server scrapes a running
`trainperf run --prometheus`, promtool checks the exposition and the shipped
rules, TensorBoard's own reader loads the event files the collector writes in
C. docs/exporters.md."""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from conftest import BUILD, ROOT

TRAINER = BUILD / "examples" / "trainer"
FAKE = BUILD / "fakes" / "libnvidia-ml.so.1"
CONTRIB = ROOT / "contrib"


def _wait_for(pred, timeout=30.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def _get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def _page(url):
    """The page, or "" while there is none yet (503 before the first sample)."""
    try:
        return _get(url)[2]
    except OSError:
        return ""


def _start_run(cli, out, *extra, steps=100000, delay_ms=2, env=None):
    e = dict(os.environ)
    e.pop("TRAINPERF_RUN_DIR", None)
    e.update(env or {})
    return subprocess.Popen([cli, "run", "--quiet", "--interval", "0.2", "--out", str(out), *extra,
                             "--", str(TRAINER), "--steps", str(steps), "--data-delay-ms",
                             str(delay_ms), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)


def _url(out):
    return _wait_for(lambda: (out / "prometheus.url").exists() and
                     (out / "prometheus.url").read_text().strip(), what="prometheus.url")


def _stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    try:
        p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("trainperf run did not end after SIGINT")


def _families(text):
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


def _value(text, name, **labels):
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.once
def test_prometheus_scrapes_a_running_job(cli, tmp_path):
    """A real Prometheus on loopback scrapes `trainperf run --prometheus` and
    answers PromQL for the step counter, with the labels that tell job, node
    and rank apart; promtool finds the exposition clean."""
    prom = shutil.which("prometheus")
    if not prom:
        pytest.fail("prometheus is missing: scripts/install-deps.sh installs it")
    out = tmp_path / "run"
    p = _start_run(cli, out, "--prometheus", "127.0.0.1:0")
    server = None
    try:
        url = _url(out)
        host = urllib.parse.urlparse(url).netloc
        assert host.startswith("127.0.0.1:")
        # Exposition: content type, promtool-clean, steps counting up.
        _wait_for(lambda: "trainperf_steps_total{" in _page(url), what="a page with steps")
        status, ctype, text = _get(url)
        assert ctype.startswith("text/plain; version=0.0.4")
        chk = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                             text=True, timeout=60)
        assert chk.returncode == 0 and not chk.stdout.strip() and not chk.stderr.strip(), \
            chk.stdout + chk.stderr
        node = socket.gethostname()
        fams = _families(text)
        for f in ["trainperf_build_info", "trainperf_steps_total", "trainperf_samples_total",
                  "trainperf_step_seconds", "trainperf_data_wait_seconds", "trainperf_phase_ratio",
                  "trainperf_steps_per_second", "trainperf_tree_cpu_cores",
                  "trainperf_host_pressure_ratio", "trainperf_alert_firing"]:
            assert f in fams, f
        assert _value(text, "trainperf_build_info", node=node) == 1
        s1 = _value(text, "trainperf_steps_total")
        time.sleep(0.6)
        s2 = _value(_get(url)[2], "trainperf_steps_total")
        assert s2 > s1 > 0
        # Other paths are refused, the page is there for HEAD too.
        with pytest.raises(urllib.error.HTTPError) as ei:
            _get(url.replace("/metrics", "/nope"))
        assert ei.value.code == 404

        # The real server: one scrape job over this node, as docs/exporters.md shows.
        port = _free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{CONTRIB / 'prometheus' / 'trainperf-rules.yml'}"]
scrape_configs:
  - job_name: trainperf-test
    static_configs:
      - targets: ["{host}"]
""")
        server = subprocess.Popen([prom, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        api = f"http://127.0.0.1:{port}/api/v1/query?query="

        def query(q):
            try:
                _, _, body = _get(api + urllib.parse.quote(q))
            except OSError:
                return None
            r = json.loads(body)
            return r["data"]["result"] if r.get("status") == "success" and r["data"]["result"] else None

        res = _wait_for(lambda: query("trainperf_steps_total"), timeout=60, what="Prometheus to scrape")
        m = res[0]["metric"]
        assert m["job"] == "trainperf-test" and m["node"] == node and m["instance"] == host
        assert float(res[0]["value"][1]) > 0
        # rate() over scraped samples: the counter really counts.
        rate = _wait_for(lambda: query("rate(trainperf_steps_total[5s]) > 0"), timeout=30,
                         what="a positive step rate")
        assert float(rate[0]["value"][1]) > 0
        up = query('up{job="trainperf-test"}')
        assert up and up[0]["value"][1] == "1"
    finally:
        if server:
            server.terminate()
            server.communicate(timeout=30)
        _stop(p)
    assert p.returncode == 130  # the trainer's own status after SIGINT
    # The endpoint goes away with the run.
    with pytest.raises(OSError):
        _get(url, timeout=2)


@pytest.mark.once
def test_prometheus_gpu_names_and_contrib_metrics_exist(cli, tmp_path):
    """With the fake NVML driver the GPU families follow dcgm-exporter's names and
    labels; every metric the shipped rules and dashboard use is exported."""
    if not FAKE.exists():
        pytest.fail(f"{FAKE} is missing: run `make`")
    scn = tmp_path / "scenario.txt"
    scn.write_text("gpus 1\ndev 0 name NVIDIA Test H100\n"
                   "dev 0 uuid GPU-11111111-0000-0000-0000-000000000001\n"
                   "dev 0 util 42\ndev 0 mem_util 20\ndev 0 mem_total 85520809984\n"
                   "dev 0 mem_used 3145728000\ndev 0 temp 55\ndev 0 power_mw 300000\n"
                   "dev 0 energy_mj 0,100000\ndev 0 sm_mhz 1500\ndev 0 mem_mhz 5000\ndev 0 reasons 0\n")
    out = tmp_path / "run"
    p = _start_run(cli, out, "--prometheus", "0", env={
        "TRAINPERF_NVML_LIB": str(FAKE), "TRAINPERF_FAKE_NVML": str(scn), "CUDA_VISIBLE_DEVICES": "0"})
    try:
        url = _url(out)
        text = _wait_for(lambda: (lambda t: "trainperf_dcgm_gpu_util{" in t and "trainperf_step_seconds{" in t
                                  and t)(_page(url)), what="GPU figures on the page")
    finally:
        _stop(p)
    labels = dict(re.findall(r'(\w+)="([^"]*)"', next(l for l in text.splitlines()
                                                      if l.startswith("trainperf_dcgm_gpu_util{"))))
    assert labels["gpu"] == "0" and labels["UUID"] == "GPU-11111111-0000-0000-0000-000000000001"
    assert labels["modelName"] == "NVIDIA Test H100"
    assert _value(text, "trainperf_dcgm_gpu_util") == 42
    assert _value(text, "trainperf_dcgm_fb_used") == 3000  # MiB, as DCGM_FI_DEV_FB_USED
    assert _value(text, "trainperf_dcgm_power_usage") == 300
    fams = _families(text)
    # Families only a run with tokens, FLOP counters or PyTorch MFU exports.
    conditional = {"trainperf_tokens_total", "trainperf_mfu_ratio", "trainperf_flops_per_second"}
    used = set()
    for path in [CONTRIB / "prometheus" / "trainperf-rules.yml", CONTRIB / "grafana" / "trainperf-dashboard.json"]:
        used |= set(re.findall(r"\btrainperf_[a-z0-9_]+(?!\w*:)", path.read_text())) - {"trainperf_rule"}
    base = {re.sub(r"_(sum|count)$", "", n) for n in used}
    missing = {n for n in base if n not in fams and n not in conditional}
    assert not missing, missing


def test_prometheus_rules_check_and_unit_tests():
    """The shipped alerting rules pass promtool's checks and its rule unit
    tests (data_wait, hang, trainperf's own firing gauge)."""
    if not shutil.which("promtool"):
        pytest.fail("promtool is missing: scripts/install-deps.sh installs prometheus")
    d = CONTRIB / "prometheus"
    r = subprocess.run(["promtool", "check", "rules", "trainperf-rules.yml"], cwd=d,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "26 rules found" in r.stdout  # 10 recording rules, 16 alerts
    r = subprocess.run(["promtool", "test", "rules", "trainperf-rules.test.yml"], cwd=d,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    dash = json.loads((CONTRIB / "grafana" / "trainperf-dashboard.json").read_text())
    assert dash["panels"] and all(t["expr"] for p in dash["panels"] for t in p["targets"])
    assert {v["name"] for v in dash["templating"]["list"]} >= {"job", "node", "rank"}


@pytest.mark.parametrize("spec,word", [("nohost:", "port"), ("99999", "65535"),
                                       ("::1:9400", "brackets"), ("bad host:1", "resolve")])
def test_prometheus_bad_address_starts_nothing(run_cli, tmp_path, spec, word):
    out = tmp_path / "run"
    marker = tmp_path / "ran"
    p = run_cli("run", "--prometheus", spec, "--out", out, "--", "touch", marker)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and word in p.stderr and "--prometheus" in p.stderr
    assert not out.exists() and not marker.exists()


def test_prometheus_port_in_use_starts_nothing(run_cli, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    out = tmp_path / "run"
    marker = tmp_path / "ran"
    try:
        p = run_cli("run", "--prometheus", str(port), "--out", out, "--", "touch", marker)
    finally:
        s.close()
    assert p.returncode == 2
    assert "in use" in p.stderr and p.stderr.count("\n") == 1
    assert not out.exists() and not marker.exists()


@pytest.mark.once
def test_prometheus_stuck_scraper_never_holds_the_run(cli, tmp_path):
    """A client that connects and never sends, and one that never reads, do not
    stop steps from being counted nor the page from being served to others."""
    out = tmp_path / "run"
    p = _start_run(cli, out, "--prometheus", "0")
    stuck = []
    try:
        url = _url(out)
        host, port = urllib.parse.urlparse(url).netloc.split(":")
        _wait_for(lambda: "trainperf_steps_total{" in _page(url), what="steps")
        a = socket.create_connection((host, int(port)))  # sends nothing
        stuck.append(a)
        b = socket.create_connection((host, int(port)))  # asks, never reads
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        b.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        stuck.append(b)
        s1 = _value(_get(url, timeout=30)[2], "trainperf_steps_total")
        time.sleep(1.0)
        s2 = _value(_get(url, timeout=30)[2], "trainperf_steps_total")
        assert s2 > s1
    finally:
        for s in stuck:
            s.close()
        _stop(p)
    steps = sum(1 for _ in open(out / "steps.csv")) - 1
    assert steps > 0


def _flood(host, port, idle, loris):
    """`idle` connections that send nothing and `loris` that send half a
    request head and stop; connected without blocking (a server that stops
    accepting must not hang the test's own setup)."""
    socks = []
    for i in range(idle + loris):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((host, port))
        socks.append(s)
    time.sleep(0.5)
    for s in socks[idle:]:
        try:
            s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        except OSError:
            pass
    return socks


@pytest.mark.once
def test_prometheus_scrape_answers_through_idle_and_slow_loris_connections(cli, tmp_path):
    """1,000 idle and 100 slow-loris connections: the scrape is still answered
    (once 16 idle connections held the server's every slot for 10 s each) and
    the run goes on. How fast: bench/bench_prom_flood.py."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1300:
        pytest.skip(f"needs 1,300 open files (limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    out = tmp_path / "run"
    p = _start_run(cli, out, "--prometheus", "0")
    socks = []
    try:
        url = _url(out)
        host, port = urllib.parse.urlparse(url).netloc.split(":")
        _wait_for(lambda: "trainperf_steps_total{" in _page(url), what="steps")
        socks = _flood(host, int(port), 1000, 100)
        st, _, page = _get(url, timeout=60)
        assert st == 200 and "trainperf_steps_total{" in page
        s1 = _value(page, "trainperf_steps_total")
        time.sleep(1.0)
        s2 = _value(_get(url, timeout=60)[2], "trainperf_steps_total")
        assert s2 > s1
        # the connections made room for were closed and counted, not leaked
        assert _value(_get(url, timeout=60)[2], "trainperf_scrape_errors_total") >= 1000 - 256
    finally:
        for s in socks:
            s.close()
        _stop(p)
    assert sum(1 for _ in open(out / "steps.csv")) > 1


def _tb_events(run):
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(str(run), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    return acc


@pytest.mark.once
def test_tensorboard_reads_the_event_file(run_cli, tmp_path):
    """TensorBoard's own reader loads RUN/events.out.tfevents.*: scalars keyed by
    the training step, throughput and quantiles agreeing with summary.json,
    phases, resources, and a fired alert as text."""
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    p = run_cli("run", "--quiet", "--interval", "0.1", "--out", out,
                "--alert", "slowdata: data_wait.share > 0.05", "--",
                TRAINER, "--steps", "150", "--data-delay-ms", "3", "--quiet")
    assert p.returncode == 0, p.stderr
    files = list(out.glob("events.out.tfevents.*"))
    assert len(files) == 1
    acc = _tb_events(out)
    tags = acc.Tags()["scalars"]
    for t in ["throughput/steps_per_s", "throughput/samples_per_s", "step_time/p50_ms",
              "step_time/p99_ms", "data_wait/share_pct", "data_wait/p95_ms", "phase/data_pct",
              "phase/backward_pct", "process/tree_cpu_pct", "process/tree_rss_bytes", "host/cpu_pct"]:
        assert t in tags, (t, tags)
    # the trainer counts samples, not tokens: no token rate (not a rate of 0), as /metrics
    assert "throughput/tokens_per_s" not in tags
    ev = acc.Scalars("step_time/p50_ms")
    steps = [e.step for e in ev]
    assert steps == sorted(steps) and steps[-1] == 150
    summ = json.loads((out / "summary.json").read_text())
    # The last sample's quantiles are the run's own (same sketch; float32 here).
    st = summ["steps"]["step_time_ms"]
    assert ev[-1].value == pytest.approx(st["p50"], rel=1e-4)
    assert acc.Scalars("step_time/p99_ms")[-1].value == pytest.approx(st["p99"], rel=1e-4)
    assert acc.Scalars("data_wait/p95_ms")[-1].value == pytest.approx(summ["steps"]["data_wait_ms"]["p95"],
                                                                      rel=1e-4)
    data = [e.value for e in acc.Scalars("phase/data_pct")]
    assert max(data) > 20  # the trainer sleeps 3 ms for data in every step
    rates = [e.value for e in acc.Scalars("throughput/steps_per_s")]
    assert max(rates) > 0
    wall = [e.wall_time for e in ev]
    assert wall == sorted(wall) and abs(wall[0] - time.time()) < 600
    # The alert, as text the text plugin shows.
    assert "alerts" in acc.PluginTagToContent("text")
    msgs = [t.tensor_proto.string_val[0].decode() for t in acc.Tensors("alerts")]
    assert any("slowdata" in m and "fired" in m for m in msgs), msgs


def test_tensorboard_can_be_turned_off(run_cli, tmp_path):
    out = tmp_path / "run"
    p = run_cli("run", "--quiet", "--no-tensorboard", "--out", out, "--", TRAINER, "--steps", "5", "--quiet")
    assert p.returncode == 0, p.stderr
    assert not list(out.glob("events.out.tfevents.*"))


DDP = r"""
import sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ds = TensorDataset(torch.randn(512, 32), torch.randn(512, 1))
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for x, y in DataLoader(ds, batch_size=16):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.01)
        if time.monotonic() >= end:
            break
dist.destroy_process_group()
"""


@pytest.mark.torch
@pytest.mark.once
def test_tensorboard_unwritable_target_is_said_once_and_the_run_goes_on(cli, tmp_path):
    # Issue 27 item 8: a directory where the event file goes (its name is
    # the start second and the host: planted for the next two minutes).
    run = tmp_path / "run"
    run.mkdir()
    host = socket.gethostname().replace("/", "_").replace(" ", "_")
    now = int(time.time())
    for t in range(now - 1, now + 120):
        (run / f"events.out.tfevents.{t}.{host}").mkdir()
    p = subprocess.run([cli, "run", "--quiet", "--force", "--out", str(run), "--", str(TRAINER),
                        "--steps", "300", "--quiet"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    said = [l for l in p.stderr.splitlines() if "TensorBoard" in l]
    assert len(said) == 1, p.stderr
    assert said[0].startswith("trainperf: warning: TensorBoard event file " + str(run)), said
    assert "the run went on without it" in said[0]
    # the run's own files are whole and say nothing of a failed run directory
    assert len((run / "steps.csv").read_text().splitlines()) == 301
    sm = json.loads((run / "summary.json").read_text())
    assert sm["steps"]["count"] == 300 and not (sm.get("io") or {}).get("error"), sm.get("io")
    assert "Writing the run directory failed" not in (run / "report.md").read_text()
    assert all(f.is_dir() for f in run.glob("events.out.tfevents.*"))  # never replaced


def test_top_shows_per_rank_rows_of_a_live_torchrun_job(cli, tmp_path):
    """`trainperf top` on a terminal (tmux), against a real 2-rank torchrun job
    over gloo under `trainperf run`: one row per rank, updating while it runs."""
    pytest.importorskip("torch")
    tmux = shutil.which("tmux")
    if not tmux:
        pytest.fail("tmux is missing: scripts/install-deps.sh installs it")
    prog = tmp_path / "ddp.py"
    prog.write_text(DDP)
    run = tmp_path / "run"
    sock = f"tpf-test-{os.getpid()}"
    t = [tmux, "-L", sock, "-f", "/dev/null"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    job = " ".join([cli, "run", "--out", str(run), "--"] + torchrun + [str(prog), "120"])
    env = dict(os.environ)
    env.pop("TRAINPERF_RUN_DIR", None)
    env["TERM"] = "xterm"
    subprocess.run(t + ["new-session", "-d", "-s", "job", "-x", "150", "-y", "40", job], check=True,
                   env=env, timeout=30)
    try:
        def ranks_stepping():
            try:
                rows = open(run / "steps.csv").read().splitlines()[1:]
            except OSError:
                return False
            return {r.split(",")[0] for r in rows if r.count(",") > 5} >= {"0", "1"}
        _wait_for(ranks_stepping, timeout=240, what="both ranks stepping")
        subprocess.run(t + ["new-session", "-d", "-s", "top", "-x", "150", "-y", "40",
                            f"{cli} top {run} --interval 0.5"], check=True, env=env, timeout=30)

        def screen():
            return subprocess.run(t + ["capture-pane", "-p", "-t", "top"], capture_output=True,
                                  text=True, timeout=30).stdout

        def rank_rows(text):
            rows = {}
            for m in re.finditer(r"^\s*rank (\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)", text, re.M):
                rows[m.group(1)] = (int(m.group(2)), float(m.group(4)))
            return rows if set(rows) >= {"0", "1"} else None

        # steps.csv rows land within a drain period (25 ms), the steps/s of
        # metrics.csv at the next sample: wait for both on one screen.
        first = _wait_for(lambda: (lambda t: rank_rows(t) if "steps/s" in t else None)(screen()),
                          timeout=60, what="per-rank rows and steps/s on the screen")
        text = screen()
        assert "running" in text and "steps/s" in text, text
        assert re.search(r"rank\s+steps\s+behind\s+step ms", text), text
        assert all(steps > 0 and ms > 0 for steps, ms in first.values()), text
        # Live: the rows move on while the job runs.
        later = _wait_for(lambda: (lambda r: r if r and r["0"][0] > first["0"][0] else None)(
            rank_rows(screen())), timeout=60, what="the rows to update")
        assert later["1"][0] > first["1"][0] or later["1"][0] >= first["0"][0]
    finally:
        subprocess.run(t + ["send-keys", "-t", "job", "C-c"], timeout=30)
        end = time.monotonic() + 120
        while time.monotonic() < end and subprocess.run(t + ["has-session", "-t", "job"],
                                                        capture_output=True).returncode == 0:
            time.sleep(0.5)
        subprocess.run(t + ["kill-server"], capture_output=True, timeout=30)
    # The interrupted job still left a finished run directory.
    assert json.loads((run / "run.json").read_text()).get("duration_s") is not None


EMBEDDED = r"""
import re, sys, time, urllib.request
import trainperf
out = sys.argv[1]
assert trainperf.start(out, interval_s=0.1) == out
url = None
for i in range(400):
    with trainperf.step(samples=4):
        time.sleep(0.002)
    if url is None:
        try:
            url = open(out + "/prometheus.url").read().strip()
        except OSError:
            pass
    if i > 150 and url:
        try:
            page = urllib.request.urlopen(url, timeout=10).read().decode()
        except OSError:
            continue
        m = re.search(r'^trainperf_steps_total\{[^}]*\} (\d+)', page, re.M)
        if m and int(m.group(1)) > 0:
            print("STEPS", m.group(1))
            break
trainperf.stop()
"""


def test_embedded_mode_prometheus_and_tensorboard(tmp_path):
    """trainperf.start() in the training process: TRAINPERF_PROMETHEUS asks for
    the endpoint (its URL in RUN/prometheus.url), the event file is on."""
    from pyhelp import require_extension, run_py
    require_extension()
    prog = tmp_path / "emb.py"
    prog.write_text(EMBEDDED)
    out = tmp_path / "run"
    p = run_py([prog, out], TRAINPERF_PROMETHEUS="127.0.0.1:0")
    assert p.returncode == 0, p.stderr
    assert "STEPS" in p.stdout, (p.stdout, p.stderr)
    assert (out / "prometheus.url").read_text().startswith("http://127.0.0.1:")
    assert list(out.glob("events.out.tfevents.*"))
    # A bad address: the run goes on without the endpoint, the error recorded.
    out2 = tmp_path / "run2"
    p = run_py([prog, out2], TRAINPERF_PROMETHEUS="127.0.0.1:99999")
    assert p.returncode == 0, p.stderr
    assert not (out2 / "prometheus.url").exists()
    assert (out2 / "steps.csv").read_text().count("\n") > 100
