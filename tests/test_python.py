"""The Python package without PyTorch: the C extension in embedded mode, the
fallbacks, and the startup hook's inertness. Each case runs in a child
interpreter so one process's probe state never leaks into another case."""
import os
import textwrap

import pytest

from pyhelp import BUILD, PYDIR, col_sum, require_extension, run_py, steps


@pytest.fixture(autouse=True)
def _ext():
    require_extension()


def script(tmp_path, body):
    p = tmp_path / "s.py"
    p.write_text(textwrap.dedent(body))
    return p


EXPLICIT = """
    import sys, time, json
    import trainperf
    out = sys.argv[1]
    assert trainperf.start(out, interval_s=0.2) == out
    assert trainperf.attached()
    N, SLEEP_F, SLEEP_B, SLEEP_D = 6, 0.02, 0.01, 0.015

    def slow_items(n):
        for i in range(n):
            time.sleep(SLEEP_D)
            yield i

    for i in trainperf.timed(slow_items(N)):
        with trainperf.step(samples=8, tokens=100 + i) as s:
            with trainperf.phase("forward"):
                time.sleep(SLEEP_F)
            with trainperf.phase("backward"):
                time.sleep(SLEEP_B)
            s.tokens = 100 + i          # may be changed inside the block
        trainperf.counter("loss", 1.0 / (i + 1))
        trainperf.mark("epoch_end")
    print(json.dumps({"impl": trainperf.IMPL, "dropped": trainperf.dropped(),
                      "N": N, "f": SLEEP_F, "b": SLEEP_B, "d": SLEEP_D}))
    assert trainperf.stop() == out
    assert not trainperf.attached()
"""


def check_explicit(out, res):
    import json
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    rows = steps(out)
    n = info["N"]
    assert len(rows) == n
    assert [int(r["step"]) for r in rows] == list(range(n))
    assert {int(r["pid"]) for r in rows} == {int(rows[0]["pid"])}
    assert all(int(r["samples"]) == 8 for r in rows)
    assert [int(r["tokens"]) for r in rows] == [100 + i for i in range(n)]
    # sleep() is a lower bound for each phase
    for r in rows:
        assert int(r["forward_ns"]) >= info["f"] * 1e9
        assert int(r["backward_ns"]) >= info["b"] * 1e9
        assert int(r["data_ns"]) >= info["d"] * 1e9
        assert int(r["optimizer_ns"]) == 0
    with open(os.path.join(out, "trace.json")) as f:
        trace = f.read()
    assert '"loss"' in trace and '"epoch_end"' in trace
    assert info["dropped"] == 0
    return info


def test_explicit_api_embedded(tmp_path):
    out = tmp_path / "run"
    res = run_py([script(tmp_path, EXPLICIT), out])
    assert check_explicit(str(out), res)["impl"] == "c"


def test_ctypes_fallback_records_the_same(tmp_path):
    lib = BUILD / "libtrainperf.so"
    if not lib.exists():
        pytest.skip(f"{lib} not built")
    from trainperf import _fallback
    if _fallback._sanitized(str(lib)):
        pytest.skip("an ASan library cannot load into this (uninstrumented) Python")
    out = tmp_path / "run"
    res = run_py([script(tmp_path, EXPLICIT), out], TRAINPERF_PY_IMPL="ctypes",
                 TRAINPERF_LIB=lib)
    assert check_explicit(str(out), res)["impl"] == "ctypes"


def test_noop_fallback_warns_once_and_never_raises(tmp_path):
    body = """
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import trainperf
            import trainperf as again
        assert trainperf.IMPL == "noop"
        assert len([x for x in w if issubclass(x.category, trainperf.TrainperfWarning)]) == 1
        with trainperf.step(samples=3):
            with trainperf.phase("forward"):
                pass
        trainperf.counter("x", 1.0); trainperf.mark("m")
        for _ in trainperf.timed([1, 2]): pass
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert trainperf.start() is None and len(w) == 1
        assert trainperf.stop() is None and not trainperf.attached()
        print("ok")
    """
    res = run_py([script(tmp_path, body)], TRAINPERF_PY_IMPL="noop")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_names_phases_and_argument_errors(tmp_path):
    body = """
        import trainperf
        from trainperf import _core
        assert _core.IMPL == "c"
        # predefined ids, stable ids for user names
        assert [trainperf.name(n) for n in ("data", "forward", "backward", "optimizer")] == [1, 2, 3, 4]
        a = trainperf.name("my_range"); assert a >= 16 and trainperf.name("my_range") == a
        # one cached, reentrant context manager per name
        p = trainperf.phase("forward")
        assert p is trainperf.phase("forward") and p.id == 2
        with p:
            with p:
                pass
        # step objects: reused when free, distinct when nested
        s1 = trainperf.step(samples=1); del s1
        with trainperf.step(samples=1) as outer:
            with trainperf.step(samples=2) as inner:
                assert inner is not outer and (outer.samples, inner.samples) == (1, 2)
        for bad, exc in ((lambda: trainperf.step(samples=-1), ValueError),
                         (lambda: trainperf.step(foo=1), TypeError),
                         (lambda: trainperf.counter("x", "a"), TypeError),
                         (lambda: trainperf.phase(3), TypeError),
                         (lambda: trainperf.name(""), ValueError),
                         (lambda: trainperf.mark(None), TypeError)):
            try:
                bad()
            except exc:
                pass
            else:
                raise AssertionError("no %s" % exc.__name__)
        # not attached: calls are accepted and record nothing
        assert not trainperf.attached() and trainperf.run_dir() is None
        assert trainperf.stop() is None
        print("ok")
    """
    res = run_py([script(tmp_path, body)])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_start_twice_returns_the_same_run_and_threads_count_separately(tmp_path):
    body = """
        import sys, threading, trainperf
        out = sys.argv[1]
        assert trainperf.start(out, interval_s=0.2, procfs=False) == out
        assert trainperf.start(out + "-other") == out      # already attached: no second run
        def worker(n):
            for i in range(n):
                with trainperf.step(samples=1):
                    pass
        ts = [threading.Thread(target=worker, args=(k,)) for k in (3, 5)]
        [t.start() for t in ts]; [t.join() for t in ts]
        trainperf.stop()
    """
    out = tmp_path / "run"
    res = run_py([script(tmp_path, body), out])
    assert res.returncode == 0, res.stderr
    rows = steps(out)
    per_tid = {}
    for r in rows:
        per_tid[r["tid"]] = per_tid.get(r["tid"], 0) + 1
    assert sorted(per_tid.values()) == [3, 5]
    assert col_sum(rows, "samples") == 8
    assert not (tmp_path / "run-other").exists()


def test_sitecustomize_is_inert_without_the_env(tmp_path):
    body = """
        import sys
        print("trainperf" in sys.modules,
              any(type(f).__name__ == "_TorchFinder" for f in sys.meta_path))
    """
    s = script(tmp_path, body)
    res = run_py([s])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False"]
    res = run_py([s], TRAINPERF_AUTO="1")  # no run dir: still inert
    assert res.stdout.split() == ["False", "False"]
    res = run_py([s], TRAINPERF_AUTO="0", TRAINPERF_RUN_DIR=tmp_path / "r")
    assert res.stdout.split() == ["False", "False"]
    # on: the import hook waits for torch and imports nothing heavy
    res = run_py([s], TRAINPERF_AUTO="1", TRAINPERF_RUN_DIR=tmp_path / "r")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "True"]


def test_sitecustomize_chains_to_the_one_it_shadows(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    s = script(tmp_path, "import os\nprint(os.environ.get('CHAINED'))\n")
    for auto in ("0", "1"):
        res = run_py([s], PYTHONPATH=f"{PYDIR}{os.pathsep}{other}", TRAINPERF_AUTO=auto,
                     TRAINPERF_RUN_DIR=tmp_path / "r")
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "yes"


SET_RANK = """
    import sys, time
    import trainperf
    from trainperf import _core
    out = sys.argv[1]
    trainperf.start(out, interval_s=0.1)
    for i in range(6):
        if i == 3:
            # a rank learnt in code (torch.multiprocessing.spawn): the
            # steps after it carry it, not those before (still in the ring)
            _core.set_rank(3, -1, 4)
        with trainperf.step():
            time.sleep(0.01)
    try:
        _core.set_rank(-1)
    except ValueError as e:
        print("error:", e)
    trainperf.stop()
"""


def test_a_rank_given_in_code_reaches_the_steps(tmp_path):
    out = tmp_path / "run"
    res = run_py([script(tmp_path, SET_RANK), out])
    assert res.returncode == 0, res.stderr
    assert "error: rank must be >= 0" in res.stdout
    ranks = [r["rank"] for r in steps(str(out))]
    assert ranks == ["", "", "", "3", "3", "3"], ranks


def test_an_eval_forward_counts_rows_whatever_its_argument(tmp_path):
    # the count of an evaluation forward's rows never raises into the model's
    # caller: a 2-D batch counts its rows, a 1-D input one, anything else none
    body = """
        from trainperf import _state as e
        class Odd:
            shape = 5                  # len() of it raises
        class Worse:
            @property
            def shape(self):
                raise RuntimeError("no shape")
        import array
        e.eval_forward((array.array("f", [1.0]),), False)
        e.eval_forward((Odd(),), True)
        e.eval_forward((Worse(),), False)
        e.eval_forward((), False)
        class T:
            def __init__(self, shape): self.shape = shape
        e.eval_forward((T((16, 8)),), False)
        e.eval_forward((T((8,)),), False)
        print("rows", e.ev.fwd_n, e.ev.fwd_grad, e.ev.fwd_rows, e.ev.fwd_sized)
    """
    res = run_py([script(tmp_path, body)], PYTHONPATH=str(PYDIR))
    assert res.returncode == 0, res.stderr
    assert "rows 6 1 17 2" in res.stdout, res.stdout


def test_eval_forwards_time_their_gaps_within_a_phase(tmp_path):
    # from one evaluation forward's start to the next's, within a phase (not
    # across two): their fastest tenth is an evaluation batch that no wait
    # for a CPU fell in (eval-often under contention)
    body = """
        import time
        from trainperf import _state as e
        for phase in range(2):
            e.ev.ep_fwd = 0                  # what opening a phase does
            for i in range(10):
                e.eval_forward((), False)
                time.sleep(0.02 if i % 5 == 4 else 0.002)
            time.sleep(0.3)                  # training between the phases: no gap
        # a phase of one forward, closed: one gap, to the phase's end
        e.ev.active, e.ev.pushed, e.ev.ep_fwd, e.ev.t_enter = True, False, 0, e.now()
        e.eval_forward((), False)
        time.sleep(0.05)
        e.eval_leave()
        b = e.eval_gap_buckets()           # [k, count]: from 1 µs x 1.05^k
        print("gaps %d %d %.4f" % (sum(c for _, c in b),
                                   sum(c for k, c in b if 1e-6 * 1.05 ** k >= 0.015),
                                   1e-6 * 1.05 ** b[0][0]))
    """
    res = run_py([script(tmp_path, body)], PYTHONPATH=str(PYDIR))
    assert res.returncode == 0, res.stderr
    n, slow, least = res.stdout.split()[1:4]
    assert n == "19", res.stdout          # 9 a phase, none across two; 1 for the closed one
    assert int(slow) >= 3, res.stdout     # the 20 ms ones and the 50 ms phase
    assert 0.0015 < float(least) < 0.01, res.stdout  # a 2 ms one
