"""`trainperf attach PID`: a process tree trainperf did not start, watched from
outside (resources as `run` samples them, Python stacks by py-spy), with real
processes: PyTorch training scripts started without trainperf, a tree whose
root is no Python, a dead pid, another user's process, --duration and Ctrl-C.
"""
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(shutil.which("py-spy") is None,
                                reason="py-spy is not installed (scripts/install-deps.sh)")

# Each script trains until its first argument's seconds are up and says
# "ready" after its first step: attach then sees training, not imports.
INPUT_BOUND = r'''
import sys, time
import torch

class Remote(torch.utils.data.Dataset):
    def __len__(self):
        return 640
    def __getitem__(self, i):
        time.sleep(0.05)  # one sample from a slow store
        return torch.randn(64), i % 10

if __name__ == "__main__":
    end = time.time() + float(sys.argv[1])
    dl = torch.utils.data.DataLoader(Remote(), batch_size=16, num_workers=2)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    first = True
    while time.time() < end:
        for x, y in dl:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if first:
                print("ready", flush=True)
                first = False
            if time.time() >= end:
                break
'''

HEALTHY = r'''
import sys, time
import torch

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,)))
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
end = time.time() + float(sys.argv[1])
first = True
while time.time() < end:
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if first:
            print("ready", flush=True)
            first = False
        if time.time() >= end:
            break
'''

# Each step reads its batch from files with numpy, in the training loop (no
# DataLoader): the user's own code outside every phase.
HOST_CODE = r'''
import os, sys, tempfile, time
import numpy as np
import torch

torch.set_num_threads(1)
d = tempfile.mkdtemp()
for i in range(8):
    np.save(os.path.join(d, "shard%d.npy" % i), np.random.randn(20000, 64).astype(np.float32))

def load_shard_batch(it):
    arr = np.load(os.path.join(d, "shard%d.npy" % (it % 8)))
    idx = np.random.randint(0, len(arr), 32)
    return torch.from_numpy(arr[idx]), torch.from_numpy(idx % 10)

model = torch.nn.Linear(64, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.time() + float(sys.argv[1])
it = 0
while time.time() < end:
    x, y = load_shard_batch(it)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it == 0:
        print("ready", flush=True)
    it += 1
'''

# Steps made of sleeps (the same on a loaded machine): STEP_S in the
# optimizer's step(), and before it the gaps of GAPS_S in turn; the script
# logs when each step ended. Steady: 0.25 s and 0.25 s. Unsteady: step() at
# two periods, two steps 0.15 s apart then one a second later; its entries
# are counted right, but no steady period says that none fell between two
# samples, so the count must be unknown, not a guess.
STEPS = r'''
import sys, time
import torch

duration, log_path, step_s = float(sys.argv[1]), sys.argv[2], float(sys.argv[3])
gaps = [float(g) for g in sys.argv[4].split(",")]

class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        time.sleep(step_s)
        return super().step(closure)

model = torch.nn.Linear(8, 1)
opt = SlowSGD(model.parameters(), lr=0.01)
end = time.time() + duration
i = 0
with open(log_path, "w") as log:
    while time.time() < end:
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        time.sleep(gaps[i % len(gaps)])
        opt.step()
        i += 1
        log.write("%.6f\n" % time.time())
        log.flush()
        if i == 1:
            print("ready", flush=True)
'''

# Two DDP ranks over gloo under torchrun: the tree attach is given is the
# agent's (a Python process that trains nothing) and its ranks.
DDP = r'''
import sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.set_num_threads(1)
ds = torch.utils.data.TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
sampler = torch.utils.data.distributed.DistributedSampler(ds)
dl = torch.utils.data.DataLoader(ds, batch_size=256, sampler=sampler)
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.time() + float(sys.argv[1])
first = True
while time.time() < end:
    for x, y in dl:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if first and dist.get_rank() == 0:
            print("ready", flush=True)
        first = False
        if time.time() >= end:
            break
dist.destroy_process_group()
'''

# Not our contention: other people's jobs share this machine's two cores.
ENV_FINDINGS = {"cpu-contention"}


def first_finding(summary):
    d = summary["diagnosis"]
    for f in [d["primary"]] + d["secondary"]:
        if f["id"] not in ENV_FINDINGS:
            return f["id"]
    return d["primary"]["id"]


def ready(p, timeout=240):
    """The "ready" line of a script (after its first step), or fail: never hang."""
    if select.select([p.stdout], [], [], timeout)[0]:
        return p.stdout.readline().strip() == "ready"
    return False


def start(tmp_path, name, text, *args):
    script = tmp_path / (name + ".py")
    script.write_text(text)
    p = subprocess.Popen([sys.executable, str(script), *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    if not ready(p):
        stop(p)
        pytest.fail(f"{name} did not start training")
    return p


def stop(p):
    if p.poll() is None:
        p.kill()
    p.wait(timeout=30)


def attach(run_cli, pid, out, *args, timeout=180, env=None):
    return run_cli("attach", pid, "--out", out, *args, timeout=timeout, env=env)


def load(d, name):
    return json.loads((d / name).read_text())


@pytest.mark.torch
@pytest.mark.once
@pytest.mark.parametrize("name,text,expect", [("input_bound", INPUT_BOUND, "input-bound"),
                                              ("healthy", HEALTHY, "compute-bound"),
                                              ("host_code", HOST_CODE, "host-code")])
def test_attach_verdict_matches_run(run_cli, tmp_path, name, text, expect):
    # the same script under `trainperf run`, with the hook
    script = tmp_path / (name + ".py")
    script.write_text(text)
    r = run_cli("run", "--out", tmp_path / "run", "--", sys.executable, script, 15, timeout=300)
    assert r.returncode == 0, r.stderr
    by_run = first_finding(load(tmp_path / "run", "summary.json"))
    assert by_run == expect, r.stderr

    # started without trainperf, attached to while it trains
    p = start(tmp_path, name, text, 60)
    try:
        a = attach(run_cli, p.pid, tmp_path / "att", "--duration", 15)
        assert p.poll() is None, "attach ended or harmed the training process"
    finally:
        stop(p)
    assert a.returncode == 0, a.stderr
    d = tmp_path / "att"
    run = load(d, "run.json")
    assert run["mode"] == "attached"
    assert run["root_pid"] == p.pid
    assert run["sources"]["pystacks"] == "ok"
    assert run["sources"]["procfs"] == "ok"
    assert "not available attached" in run["sources"]["hook"]
    assert str(script) in " ".join(run["command"])
    summary = load(d, "summary.json")
    assert first_finding(summary) == by_run, a.stderr
    att = summary["diagnosis"]["attached"]
    assert att["stack_samples"] > 100
    # what only the hook can tell is named, never guessed
    assert "gc-pauses" in att["unavailable"] and "input-bound" not in att["unavailable"]
    assert any("not available attached" in n for n in summary["diagnosis"]["notes"])
    stacks = load(d, "pyprof/attach.json")
    train = [q for q in stacks["processes"] if q["role"] == "training"]
    assert [q["pid"] for q in train] == [p.pid]
    assert (d / f"pyprof/stacks-{p.pid}.folded").stat().st_size > 0
    if name == "input_bound":
        # the loader's workers are in the tree, found while it ran
        assert any(q["role"] == "loader-worker" and q["samples"] > 0 for q in stacks["processes"])
    rows = (d / "procs.csv").read_text().splitlines()
    assert any(f",{p.pid}," in row for row in rows[1:])
    assert "Attached" in (d / "report.md").read_text()


@pytest.mark.torch
@pytest.mark.once
def test_attach_torchrun_tree_finds_its_ranks(run_cli, tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    torchrun = shutil.which("torchrun")
    if not torchrun:
        pytest.skip("torchrun is not installed")
    agent = subprocess.Popen([torchrun, "--standalone", "--nproc-per-node", "2", str(script), "120"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             cwd=tmp_path, start_new_session=True)
    try:
        assert ready(agent), "torchrun's ranks did not start training"
        a = attach(run_cli, agent.pid, tmp_path / "att", "--duration", 12)
        assert agent.poll() is None
    finally:
        os.killpg(agent.pid, signal.SIGKILL)  # the agent's group: it and its ranks
        agent.wait(timeout=30)
    assert a.returncode == 0, a.stderr
    d = tmp_path / "att"
    procs = load(d, "pyprof/attach.json")["processes"]
    assert procs[0]["pid"] == agent.pid and procs[0]["role"] == "other"
    ranks = [q for q in procs if q["role"] == "training"]
    assert len(ranks) == 2 and all(q["ppid"] == agent.pid for q in ranks)
    for q in ranks:
        assert (d / f"pyprof/stacks-{q['pid']}.folded").stat().st_size > 0
    assert load(d, "summary.json")["diagnosis"]["attached"]["training_processes"] == 2
    # both ranks' resources, in the tree's rows
    rows = (d / "procs.csv").read_text()
    assert all(f",{q['pid']}," in rows for q in ranks)


@pytest.mark.torch
@pytest.mark.once
def test_attach_counts_steps_of_a_steady_period(run_cli, tmp_path):
    log = tmp_path / "steps.log"
    p = start(tmp_path, "steady", STEPS, 60, log, 0.25, "0.25")
    try:
        t0 = time.time()
        a = attach(run_cli, p.pid, tmp_path / "att", "--duration", 9, "--rate", 50)
        t1 = time.time()
    finally:
        stop(p)
    assert a.returncode == 0, a.stderr
    steps = load(tmp_path / "att", "pyprof/attach.json")["processes"][0]["steps"]
    assert steps["count"] is not None, steps["why_unknown"]
    assert 0.4 <= steps["period_s"] <= 0.65
    # steps the script logged while attach could have seen them (the
    # samplers start after attach does and stop before it ends)
    ends = [float(x) for x in log.read_text().split()]
    upper = sum(t0 <= e <= t1 for e in ends)
    assert upper - 3 <= steps["count"] <= upper + 1, (steps, upper)
    summary = load(tmp_path / "att", "summary.json")
    assert summary["diagnosis"]["attached"]["steps"] == steps["count"]


@pytest.mark.torch
@pytest.mark.once
def test_attach_says_unknown_steps_at_an_unsteady_period(run_cli, tmp_path):
    p = start(tmp_path, "unsteady", STEPS, 60, tmp_path / "steps.log", 0.1, "0.05,0.05,0.9")
    try:
        a = attach(run_cli, p.pid, tmp_path / "att", "--duration", 8, "--rate", 50)
    finally:
        stop(p)
    assert a.returncode == 0, a.stderr
    steps = load(tmp_path / "att", "pyprof/attach.json")["processes"][0]["steps"]
    assert steps["optimizer_entries"] >= 6
    assert steps["count"] is None and steps["period_s"] is None
    assert "unsteady period" in steps["why_unknown"], steps["why_unknown"]
    assert load(tmp_path / "att", "summary.json")["diagnosis"]["attached"]["steps"] is None


def test_attach_says_unknown_steps_when_no_optimizer_runs(run_cli, tmp_path):
    p = subprocess.Popen([sys.executable, "-c",
                          "import time\nprint('ready', flush=True)\n"
                          "while True:\n    sum(range(10000)); time.sleep(0.01)\n"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert ready(p)
        a = attach(run_cli, p.pid, tmp_path / "att", "--duration", 3)
    finally:
        stop(p)
    assert a.returncode == 0, a.stderr
    proc = load(tmp_path / "att", "pyprof/attach.json")["processes"][0]
    assert proc["samples"] > 0
    assert proc["steps"]["count"] is None and "no optimizer" in proc["steps"]["why_unknown"]
    att = load(tmp_path / "att", "summary.json")["diagnosis"]["attached"]
    assert att["steps"] is None and att["steps_unknown_why"]


def test_attach_dead_pid(run_cli, tmp_path):
    p = subprocess.Popen(["true"])
    p.wait()
    r = attach(run_cli, p.pid, tmp_path / "att")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"trainperf: error: attach: no process {p.pid}"]
    assert not (tmp_path / "att").exists()


@pytest.mark.parametrize("args,word", [(["--rate", "0"], "--rate"), (["--duration", "x"], "--duration"),
                                       (["--bogus"], "--bogus"), ([], "not a process id")])
def test_attach_bad_arguments(run_cli, tmp_path, args, word):
    target = "12x" if not args else str(os.getpid())
    r = run_cli("attach", target, "--out", tmp_path / "att", *args)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and word in r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_attach_not_ours(cli, tmp_path):
    victim = subprocess.Popen(["sleep", "30"])
    try:
        out = tmp_path / "o"
        out.mkdir()
        out.chmod(0o777)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", cli,
                            "attach", str(victim.pid), "--out", str(out / "att")],
                           capture_output=True, text=True, timeout=60)
    finally:
        victim.kill()
        victim.wait()
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "not yours to read" in r.stderr


CHILD = "import time\nwhile True:\n    sum(range(20000)); time.sleep(0.005)\n"


def test_attach_duration_ends_it_and_spares_the_process(run_cli, tmp_path):
    p = subprocess.Popen([sys.executable, "-c", CHILD])
    try:
        time.sleep(1)
        a = attach(run_cli, p.pid, tmp_path / "att", "--duration", 2, "--interval", 0.5)
        assert p.poll() is None
    finally:
        stop(p)
    assert a.returncode == 0, a.stderr
    d = tmp_path / "att"
    run = load(d, "run.json")
    assert run["mode"] == "attached" and run["exit"] is None
    assert 1.5 <= run["duration_s"] < 60
    assert (d / "summary.json").exists() and (d / "report.md").exists()
    assert len((d / "metrics.csv").read_text().splitlines()) >= 3
    # nothing recorded steps: unknown, not 0
    steps = load(d, "summary.json")["steps"]
    assert steps["count"] is None and steps["global_steps"] is None
    rep = json.loads(run_cli("report", d, "--format", "json").stdout)
    assert rep["diagnosis"]["attached"]["unavailable"]


def test_attach_without_py_spy_records_resources_and_says_why(run_cli, tmp_path):
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not os.path.exists(os.path.join(d, "py-spy")))
    p = subprocess.Popen([sys.executable, "-c", CHILD])
    try:
        time.sleep(0.5)
        a = attach(run_cli, p.pid, tmp_path / "att", "--duration", 2, env={"PATH": path})
    finally:
        stop(p)
    assert a.returncode == 0, a.stderr
    assert "no Python stacks (py-spy is not installed" in a.stderr
    d = tmp_path / "att"
    assert "not installed" in load(d, "run.json")["sources"]["pystacks"]
    diag = load(d, "summary.json")["diagnosis"]
    assert diag["attached"]["stack_samples"] is None
    # no verdict from stacks; a resource finding (this box's contention) may stand
    ids = [f["id"] for f in [diag["primary"]] + diag["secondary"]]
    assert not {"input-bound", "host-code", "compute-bound", "undetermined"} & set(ids)
    if diag["primary"]["id"] == "insufficient-data":
        assert "py-spy is not installed" in diag["insufficient_reason"]
    assert len((d / "metrics.csv").read_text().splitlines()) >= 2


def test_attach_ends_with_the_process(run_cli, tmp_path):
    p = subprocess.Popen([sys.executable, "-c",
                          "import time\nend = time.time() + 3\n"
                          "while time.time() < end:\n    sum(range(20000)); time.sleep(0.005)\n"])
    time.sleep(0.5)
    a = attach(run_cli, p.pid, tmp_path / "att", timeout=120)
    p.wait(timeout=30)
    assert a.returncode == 0, a.stderr
    assert "the process exited" in a.stderr
    d = tmp_path / "att"
    assert load(d, "run.json")["duration_s"] < 60
    assert (d / "report.md").exists()
    # the samples taken before it exited are kept
    assert load(d, "pyprof/attach.json")["processes"][0]["samples"] > 0


@pytest.mark.parametrize("sig,said", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "Terminated")])
def test_attach_signal_leaves_the_directory_complete(cli, tmp_path, sig, said):
    # a tree whose root is no Python: its Python child is found and sampled
    root = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{CHILD}' & wait"],
                            start_new_session=True)
    try:
        time.sleep(1)
        a = subprocess.Popen([cli, "attach", str(root.pid), "--out", str(tmp_path / "att")],
                             stderr=subprocess.PIPE, text=True)
        time.sleep(4)
        a.send_signal(sig)
        err = a.communicate(timeout=60)[1]
        assert root.poll() is None, "the signal for attach reached the watched process"
    finally:
        os.killpg(root.pid, signal.SIGKILL)  # the group this test made: sh and its child
        root.wait(timeout=30)
    assert a.returncode == 0, err
    assert said in err
    d = tmp_path / "att"
    for f in ("run.json", "summary.json", "report.md", "report.html", "metrics.csv", "procs.csv",
              "pyprof/attach.json"):
        assert (d / f).stat().st_size > 0, f
    run = load(d, "run.json")
    assert run["duration_s"] is not None
    procs = load(d, "pyprof/attach.json")["processes"]
    assert procs[0]["pid"] == root.pid and procs[0]["role"] == "not-python"
    py = [q for q in procs if q["ppid"] == root.pid]
    assert py and py[0]["samples"] > 0 and py[0]["chunks_lost"] == 0
    assert (d / f"pyprof/stacks-{py[0]['pid']}.folded").read_text().strip()
    # no sampler's chunk left behind
    assert not list((d / "live").glob("pyspy-*"))


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except OSError:
                pass
    return out


@pytest.mark.slow
def test_attach_killed_keeps_what_it_folded_and_leaves_no_sampler(cli, run_cli, tmp_path):
    p = subprocess.Popen([sys.executable, "-c", CHILD])
    try:
        time.sleep(0.5)
        a = subprocess.Popen([cli, "attach", str(p.pid), "--out", str(tmp_path / "att")],
                             stderr=subprocess.DEVNULL)
        d = tmp_path / "att"
        # the first 10 s chunk folded into the run directory
        for _ in range(300):
            if (d / "pyprof/attach.json").exists():
                break
            time.sleep(0.1)
        spies = children(a.pid)
        assert spies, "no sampler running"
        a.kill()
        a.wait(timeout=30)
        time.sleep(0.5)
        alive = []
        for s in spies:
            try:
                with open(f"/proc/{s}/cmdline") as f:
                    if "py-spy" in f.read():
                        alive.append(s)
            except OSError:
                pass  # gone
        assert not alive, "a sampler outlived the attach"
        assert p.poll() is None
    finally:
        stop(p)
    assert load(d, "pyprof/attach.json")["processes"][0]["samples"] > 0
    # the run directory reads as a run whose collector was killed
    r = run_cli("report", d, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["diagnosis"]["attached"]["stack_samples"] is not None


def test_dump_of_an_attached_runs_directory(cli, tmp_path):
    """`trainperf dump RUN_DIR` on the directory an attach is writing: the
    attached tree's stacks now (heartbeat.json names it, as `run`'s does);
    once attach has ended, the directory is not going (exit 2)."""
    p = subprocess.Popen([sys.executable, "-c", CHILD])
    d = tmp_path / "att"
    try:
        time.sleep(1)
        a = subprocess.Popen([cli, "attach", str(p.pid), "--out", str(d), "--quiet"],
                             stderr=subprocess.PIPE, text=True)
        for _ in range(200):
            if (d / "heartbeat.json").exists():
                break
            time.sleep(0.05)
        hb = load(d, "heartbeat.json")
        assert hb["state"] == "running" and hb["pid"] == p.pid and hb["mode"] == "attached"
        assert hb["supervisor_pid"] == a.pid and hb["steps"] is None
        r = subprocess.run([cli, "dump", str(d), "--json"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["kind"] == "run"
        pids = [q["pid"] for t in doc["trees"] for q in t["processes"]]
        assert p.pid in pids, doc
        a.send_signal(signal.SIGINT)
        assert a.wait(timeout=60) == 0, a.stderr.read()
    finally:
        stop(p)
    assert load(d, "heartbeat.json")["state"] == "finished"
    r = subprocess.run([cli, "dump", str(d)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "is not running" in r.stderr
