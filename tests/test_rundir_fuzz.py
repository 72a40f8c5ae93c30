"""A short, bounded libFuzzer run over the run-directory readers (issue 11
item 8): run.json, summary.json, the CSVs, alerts.jsonl, a live/ segment and
the zero-code hook's pyprof/ profile,
through every report format and the recovery of an interrupted run. Seeded
with the test runs in tests/data/runs and a real segment. Any crash,
sanitizer report, leak or timeout fails the test."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import BUILD, ROOT, make_fuzz

FUZZ_SECONDS = 30
SEP = b"\n--TPF-FILE--\n"
FILES = ["run.json", "summary.json", "steps.csv", "metrics.csv", "procs.csv", "alerts.jsonl",
         "live/seg-1.tpf", "recovered.json", "pyprof/events-1.json"]

# The zero-code hook's profile (docs/run-format.md, pyprof/events-<pid>.json),
# every part the diagnosis reads, for the seed of a real run.
EVENTS = {
    "pid": 1, "rank": "1", "clock": "CLOCK_MONOTONIC seconds (time.monotonic)",
    "eval": {"entries": 2, "time_s": 0.4, "forwards": 40, "forward_gaps": [[150, 30], [160, 8]]},
    "gc": {"collections": [40, 3, 1], "pause_s": 0.05, "max_s": 0.02,
           "pauses": [[1.5, 0.02, 2], [2.5, 0.003, 0]]},
    "compile": {"frames": 1, "compile_s": 0.8, "recompiles": 1,
                "events": [{"t": 1.0, "dur_s": 0.8, "frame": "forward", "reason": "size mismatch"}]},
    "loader": {"iterators": 2, "workers": 2, "persistent": False,
               "epochs": [{"t": 0.9, "workers": 2, "start_s": 0.3, "eval": False}]},
    "torch_threads": 2, "cpus_allowed": 2, "ddp_no_sync": True,
    "settings": {"ticks": 6, "anomaly_ticks": 6, "default_dtype": "float64",
                 "param_dtypes": {"float64": 9000, "float32": 10}, "tracemalloc_ticks": 6,
                 "tracer_ticks": 6, "tracer": "pdb.Pdb", "tracer_kind": "debugger",
                 "tracer_how": "sys.settrace",
                 "optimizers": [{"class": "Adam", "params": 9010, "fused": False, "foreach": False,
                                 "can_fuse": True, "can_foreach": True, "cuda": False}],
                 "embeddings": [{"name": "emb", "rows": 1000, "dim": 9, "lookups": 40,
                                 "optimized": True, "tied": False}],
                 "ddp": {"find_unused": True, "static_graph": False, "params": 9010,
                         "never_grad": 10, "never_grad_names": ["aux.weight"], "walks": 4}},
    "profiler": {"spans": [[0.5, 2.0, 0], [2.6, 0.1, 1]]},
    "debug": {"dev_mode": True, "env": {"CUDA_LAUNCH_BLOCKING": "1", "PYTHONMALLOC": "debug"}},
    "profile": {"hz": 94, "samples": 300, "truncated": 0, "sampler_cost_s": 0.01, "native": True,
                "anomaly_samples": 60, "profiler_samples": 30,
                "by_phase": {"forward": 100, "backward": 80, "other": 90, "compute": 20, "data": 10},
                "other_top": [{"func": "get_batch", "file": "/x/train.py", "line": 16, "def_line": 10,
                               "samples": 80, "kind": "input"}],
                "threads_top": [{"func": "produce", "file": "/x/train.py", "line": 30, "samples": 40}],
                "threads_cpu": {"samples": 300, "threads": [
                    {"name": "MainThread", "training": True, "span_s": 3.0, "cpu_s": 1.0, "runq_s": 0.5},
                    {"name": "Thread-1", "training": False, "span_s": 3.0, "cpu_s": 2.5, "runq_s": 0.1,
                     "func": "produce", "file": "/x/train.py", "line": 30, "samples": 40}]},
                "lines_top": {"samples": 300, "lines": [
                    {"func": "<module>", "file": "/x/train.py", "line": 29, "samples": 200,
                     "phase": "forward", "src": "probe(x)"}]}},
}


def _seed(d):
    parts = []
    for name in FILES:
        p = d / name
        if name.startswith("live/"):
            segs = sorted((d / "live").glob("seg-*.tpf")) if (d / "live").is_dir() else []
            p = segs[0] if segs else p
        parts.append(p.read_bytes() if p.is_file() else b"")
    return SEP.join(parts)


@pytest.mark.slow
@pytest.mark.once  # the fuzzer is sanitized itself: no second pass
def test_fuzz_rundir_readers(tmp_path):
    if not shutil.which("clang"):
        pytest.skip("clang is not installed (Debian package `clang`): libFuzzer unavailable")
    p = make_fuzz()
    assert p.returncode == 0, p.stderr[-3000:]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, d in enumerate(sorted((ROOT / "tests" / "data" / "runs").iterdir())):
        (corpus / f"run{i}").write_bytes(_seed(d))
    # A real run with a small ring, so the segment seed stays small.
    run = tmp_path / "real"
    env = dict(os.environ, TRAINPERF_RING_EVENTS="1024")
    env.pop("TRAINPERF_RUN_DIR", None)
    subprocess.run([str(BUILD / "trainperf"), "run", "--quiet", "--out", str(run), "--",
                    str(BUILD / "examples" / "trainer"), "--steps", "20", "--quiet"],
                   capture_output=True, timeout=120, env=env, check=True)
    (run / "pyprof").mkdir(exist_ok=True)
    (run / "pyprof" / "events-1.json").write_text(json.dumps(EVENTS))
    (corpus / "real").write_bytes(_seed(run))
    # The interrupted shape: no summary, no exit (what recovery acts on).
    (corpus / "real-cut").write_bytes(_seed(run).replace(b'"exit": {', b'"exitx": {'))
    r = subprocess.run([str(BUILD / "fuzz" / "fuzz_rundir"), f"-max_total_time={FUZZ_SECONDS}",
                        "-rss_limit_mb=2048", "-timeout=30", "-max_len=400000",
                        f"-artifact_prefix={tmp_path}/", str(corpus)],
                       capture_output=True, text=True, timeout=FUZZ_SECONDS + 300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "Done" in r.stderr
