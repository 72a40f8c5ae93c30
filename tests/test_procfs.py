"""The procfs source against psutil, an independent reader of the same /proc
files, on a real process tree: same processes, same parents and names, same
units (RSS in bytes, not pages), same thread counts, memory total, CPU count.
Values that move between the two readings are compared with tolerances
derived from what the tree does (it allocates once, then sleeps)."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import BUILD

psutil = pytest.importorskip("psutil")

# A root with two children and a grandchild; one child holds 64 MiB.
TREE = r"""
import os, sys, time
def child(name, mb=0, kids=0):
    pid = os.fork()
    if pid == 0:
        try:
            import ctypes
            libc = ctypes.CDLL(None)
            libc.prctl(15, name.encode(), 0, 0, 0)   # PR_SET_NAME
        except Exception:
            pass
        hold = bytearray(mb << 20)
        for i in range(0, len(hold), 4096):
            hold[i] = 1
        for _ in range(kids):
            child(name + "k")
        os.write(1, b"ready\n")  # one write: no interleaving
        time.sleep(600)
        os._exit(0)
    return pid
child("tpfhog", mb=64)
child("tpfmid", kids=1)
time.sleep(600)
"""


@pytest.fixture
def tree():
    p = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        for _ in range(3):  # hog, mid, grandchild
            assert p.stdout.readline().strip() == "ready"
        yield p.pid
    finally:
        os.killpg(p.pid, 9)
        p.wait(timeout=30)


def dump(pid):
    exe = BUILD / "tests" / "test_procfs"
    if not exe.exists():
        pytest.fail(f"{exe} was not built: run `make`")
    out = subprocess.run([str(exe), "--dump", str(pid)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_tree_matches_psutil(tree):
    d = dump(tree)
    root = psutil.Process(tree)
    want = {root.pid: root, **{c.pid: c for c in root.children(recursive=True)}}
    got = {p["pid"]: p for p in d["procs"]}
    assert set(got) == set(want)
    assert d["tree_procs"] == len(want) == 4
    for pid, p in got.items():
        ps = want[pid]
        assert p["ppid"] == ps.ppid()
        assert p["comm"] == ps.name()[:15]
        assert p["threads"] == ps.num_threads()
        rss = ps.memory_info().rss
        # same unit (bytes) and the same figure, give or take a few pages
        assert abs(p["rss_bytes"] - rss) <= max(0.05 * rss, 256 * 1024)
        io = ps.io_counters()
        assert p["read_bytes"] is not None and p["read_bytes"] <= io.read_bytes
        assert p["write_bytes"] is not None and p["write_bytes"] <= io.write_bytes
        assert p["cpu_pct"] is not None and p["cpu_pct"] >= 0
    hog = next(p for p in d["procs"] if p["comm"] == "tpfhog")
    assert hog["rss_bytes"] >= 64 << 20
    assert d["tree_rss_bytes"] == pytest.approx(sum(p["rss_bytes"] for p in d["procs"]))
    assert d["tree_threads"] == sum(p["threads"] for p in d["procs"])


def test_system_matches_psutil():
    d = dump(os.getpid())
    assert d["ncpu"] == psutil.cpu_count(logical=True)
    assert d["mem_total_bytes"] == psutil.virtual_memory().total
    sw = psutil.swap_memory()
    assert abs(d["swap_used_bytes"] - sw.used) <= max(0.05 * sw.used, 1 << 20)
    assert 0 <= d["cpu_pct"] <= 100


def test_dump_rejects_bad_pid():
    exe = BUILD / "tests" / "test_procfs"
    if not exe.exists():
        pytest.fail(f"{exe} was not built: run `make`")
    out = subprocess.run([str(exe), "--dump", "x1"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "not a pid" in out.stderr
