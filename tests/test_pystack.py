"""The native reader of the training thread's Python stack (_pystack.c).

It reads the thread's frames from another native thread, without the GIL,
so it sees the short stretches of Python between calls that release the GIL,
which a sampler written in Python cannot. Each test runs a real process."""
import json
import subprocess
import sys
import textwrap
import types

import warnings

import pytest

from pyhelp import ROOT, require_extension

PY = str(ROOT / "python")


def core():
    require_extension()
    sys.path.insert(0, PY)
    from trainperf import _core
    if not hasattr(_core, "pystack_start"):
        pytest.skip("extension without the native reader")
    return _core


def run_py(code, timeout=60):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env={"PYTHONPATH": PY, "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_line_table_reader_agrees_with_python():
    _core = core()
    if sys.version_info < (3, 11):
        pytest.skip("location tables are 3.11+")
    import collections
    import inspect
    import json as json_mod
    import threading
    checked = 0

    def walk(co):
        nonlocal checked
        want = {}
        for start, end, line in co.co_lines():
            for u in range(start // 2, end // 2):
                want[u] = -1 if line is None else line
        for u in range(len(co.co_code) // 2):
            assert _core._pystack_line(co, u) == want.get(u, -1), (co.co_name, u)
            checked += 1
        for c in co.co_consts:
            if isinstance(c, types.CodeType):
                walk(c)

    for m in (collections, inspect, json_mod, threading):
        walk(compile(open(m.__file__).read(), m.__file__, "exec"))
    assert _core._pystack_line(walk.__code__, -1) == walk.__code__.co_firstlineno
    assert checked > 10000


SHORT_STRETCHES = """
import json, sys, time
from trainperf import _core

def simulate():
    # well under a millisecond of Python: shorter than the switch interval
    acc = 0
    for k in range(5000):
        acc += (k * 7) % 11
    return acc

def release():
    time.sleep(0.0002)  # gives the GIL up, as a torch op does

ok = _core.pystack_start(250.0)
sim = 0.0
t_end = time.monotonic() + 1.5
while time.monotonic() < t_end:
    t = time.perf_counter()
    simulate()
    sim += time.perf_counter() - t
    release()
samples, codes, stats = _core.pystack_take()
_core.pystack_stop()
import array
names = {i: c[1] for i, c in codes.items()}
# each sample's frames: int32 pairs (code id, line), innermost first
frames = [list(zip(*[iter(array.array("i", raw))] * 2)) for _, raw in samples]
inner = [names.get(fr[0][0], "?") for fr in frames if fr]
lines = {(names.get(i), ln) for fr in frames for i, ln in fr}
print(json.dumps({"ok": ok, "n": len(inner), "sim": inner.count("simulate"),
                  "release": inner.count("release"), "true_share": sim / 1.5,
                  "taken": stats[0], "failed": stats[2], "cpu_s": stats[3],
                  "module_line": sorted(ln for f, ln in lines if f == "<module>")}))
"""


@pytest.mark.serial
def test_reader_samples_python_between_gil_releases():
    # judges the reader's timing against the process's own clock: it needs a core to
    # wake on time, so it runs in the serial pass (CI failed it in the parallel pass,
    # 0.26 against 0.55, with both cores taken by other tests)
    core()
    r = run_py(SHORT_STRETCHES)
    if not r["ok"]:
        pytest.skip("no native reader for this Python")
    share = r["sim"] / r["n"] if r["n"] else 0.0
    if abs(share - r["true_share"]) >= 0.25:
        # the reader needs a core to wake on time: another job taking both
        # cores for the 1.5 s leans its samples to the sleeps. One more run
        # decides; the first is reported in the warnings summary.
        warnings.warn("native reader off on the first run (busy machine?): %r" % (r,))
        r = run_py(SHORT_STRETCHES)
        share = r["sim"] / r["n"] if r["n"] else 0.0
    assert r["n"] >= 200, r
    # the time in simulate() as the process itself timed it, within sampling
    # error and the reader's own wake-up delay on a busy machine (a sampler
    # that needs the GIL finds none: every sample waits for release())
    assert abs(share - r["true_share"]) < 0.25, r
    assert share > 0.15 and r["release"] > 0, r
    assert r["failed"] < 0.1 * r["taken"], r
    # the script's own lines (its line 1 is blank): the calls on 20 and 22
    assert {20, 22} <= set(r["module_line"]) <= set(range(15, 24)), r


def test_reader_in_a_forked_child_and_twice_started():
    core()
    r = run_py("""
        import json, os, time
        from trainperf import _core
        first = _core.pystack_start(100.0)
        again = _core.pystack_start(100.0)
        bad = None
        try:
            _core.pystack_start("fast")
        except TypeError:
            bad = "TypeError"
        time.sleep(0.2)
        pid = os.fork()
        if pid == 0:
            # the reader did not follow the fork: nothing to take, no hang
            s, c, st = _core.pystack_take()
            _core.pystack_stop()
            os._exit(0 if not s and st[0] == 0 else 3)
        _, status = os.waitpid(pid, 0)
        time.sleep(0.1)
        s, c, st = _core.pystack_take()
        _core.pystack_stop()
        _core.pystack_stop()
        print(json.dumps({"first": first, "again": again, "bad": bad,
                          "child": os.waitstatus_to_exitcode(status), "n": len(s)}))
    """)
    if not r["first"]:
        pytest.skip("no native reader for this Python")
    assert r == {"first": True, "again": False, "bad": "TypeError", "child": 0,
                 "n": r["n"]} and r["n"] >= 20, r
