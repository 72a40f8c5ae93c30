"""`trainperf tune`'s answer for people (python/trainperf/_tune.py write_text)
and the baseline verdict it reads. The trials themselves are in test_tune.py
(they need torch); these need neither torch nor trials: write_text renders the
result that `tune --json` prints, and the verdict comes from a real run of the
bundled trainer."""
import io
import json
import re
import subprocess

import pytest

import pyhelp  # noqa: F401  (puts python/ on sys.path)
from trainperf import _tune


def row(label, kind="knob", **kw):
    r = {"label": label, "kind": kind, "knobs": {}, "run_dirs": ["/r/" + label],
         "status": "ok", "reason": None, "steps_per_s": 10.0, "samples_per_s": 640.0,
         "speedup": None, "interval": None, "verdict": None, "rss_bytes": 300 << 20,
         "memory_change": None, "loss_check": None, "step_ms_p50": 100.0, "data_share": 0.5}
    r.update(kw)
    return r


def result(**kw):
    best = row("num_workers=2", knobs={"num_workers": 2}, steps_per_s=57.4, speedup=5.74,
               interval=[5.1, 6.2], verdict="faster", memory_change=1 << 20, loss_check="ok",
               step_ms_p50=17.4, data_share=0.05)
    r = {"command": ["python", "train.py"], "out": "/t", "budget_s": 600, "elapsed_s": 100.0,
         "warmup": 5, "steps": 20, "repeats": 2, "cpus": 2, "trials_run": 5,
         "baseline": row("baseline", kind="baseline"),
         "trials": [best, row("compile", status="not run",
                              reason="the budget ran out before it", run_dirs=[],
                              steps_per_s=None, step_ms_p50=None)],
         "skipped_for_budget": ["compile"],
         "batch_finder": {"start": 16, "tried": [], "largest_fitting": 16, "knee": 16,
                          "stopped": "budget", "status": "not run"},
         "best": "num_workers=2", "change": _tune.change_for(best["knobs"]),
         "baseline_verdict": "input-bound", "contended": False,
         "compare": ["/t/01-baseline", "/t/02-num_workers=2"]}
    r.update(kw)
    return r


def text(res):
    out = io.StringIO()
    _tune.write_text(res, out)
    return out.getvalue()


def test_one_speedup_figure_for_the_best_trial():
    t = text(result())
    # the table's figure and the best line's are the same one, and no other
    # speed-up or percentage change of throughput is printed beside it
    assert t.count("5.74x") == 2, t
    assert re.search(r"best: num_workers=2, 5\.74x the baseline's steps/s", t), t
    assert not re.search(r"[+-]\d+(\.\d+)?%", t), t
    assert "5 warm-up steps left out" in t
    assert "steps/s         10.00 -> 57.40" in t and "step time p50   100.0 ms -> 17.4 ms" in t
    # compare is named for the whole runs, not run with its own (other) figures
    assert "trainperf compare /t/01-baseline /t/02-num_workers=2" in t
    assert "$ trainperf compare" not in t


def test_what_the_budget_never_reached_is_not_run():
    t = text(result())
    assert "batch size finder: not run (the budget ran out before it); the batch size stays 16" in t
    assert "largest that ran" not in t and "knee" not in t
    assert "not run (budget): compile" in t
    line = next(l for l in t.splitlines() if l.startswith("compile"))
    assert "not run (budget)" in line
    # a finder that ran says what it tried; no larger size fitting is said so
    f = {"start": 16, "tried": [32], "largest_fitting": 16, "knee": 16,
         "stopped": "out of memory (exit 137)", "status": "ran"}
    t = text(result(batch_finder=f))
    assert "batch size: started at 16; tried 32; no larger size ran; throughput knee 16 " \
           "(stopped: out of memory (exit 137))" in t
    f = dict(f, tried=[32, 64], largest_fitting=64, knee=32, stopped="samples/s grew less than 5% at 64")
    assert "tried 32, 64; largest that ran 64; throughput knee 32" in text(result(batch_finder=f))


def test_contended_baseline_is_said_with_what_it_means():
    t = text(result())
    assert "contended" not in t
    t = text(result(baseline_verdict="cpu-contention", contended=True))
    note = " ".join(t.split("\n\n")[1].split())
    assert note.startswith("note: the baseline's own verdict is CPU contention"), t
    assert "every trial was measured on a contended machine" in note
    assert "more threads or loader workers can gain less, or lose" in note
    assert "measured on a contended machine (see the note above)" in t


def test_baseline_verdict_is_the_reports_primary_finding(cli, tmp_path):
    from conftest import BUILD
    run = tmp_path / "run"
    p = subprocess.run([cli, "run", "--quiet", "--out", str(run), "--", str(BUILD / "examples" / "trainer"),
                        "--steps", "200", "--data-delay-ms", "10", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rep = subprocess.run([cli, "report", str(run), "--json"], capture_output=True, text=True,
                         timeout=60)
    primary = json.loads(rep.stdout)["diagnosis"]["primary"]["id"]
    assert _tune.read_verdict(str(run)) == primary and primary
    assert _tune.read_verdict(str(tmp_path / "nope")) is None
