"""A short, bounded libFuzzer run over the run-directory readers (issue 11
item 8): run.json, summary.json, the CSVs, alerts.jsonl and a live/ segment,
through every report format and the recovery of an interrupted run. Seeded
with the test runs in tests/data/runs and a real segment. Any crash,
sanitizer report, leak or timeout fails the test."""
import os
import shutil
import subprocess

import pytest

from conftest import BUILD, ROOT

FUZZ_SECONDS = 30
SEP = b"\n--TPF-FILE--\n"
FILES = ["run.json", "summary.json", "steps.csv", "metrics.csv", "procs.csv", "alerts.jsonl",
         "live/seg-1.tpf", "recovered.json"]


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
    p = subprocess.run(["make", "-s", f"BUILD={BUILD.name}", "fuzz"], cwd=ROOT,
                       capture_output=True, text=True, timeout=1200)
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
    (corpus / "real").write_bytes(_seed(run))
    # The interrupted shape: no summary, no exit (what recovery acts on).
    (corpus / "real-cut").write_bytes(_seed(run).replace(b'"exit": {', b'"exitx": {'))
    r = subprocess.run([str(BUILD / "fuzz" / "fuzz_rundir"), f"-max_total_time={FUZZ_SECONDS}",
                        "-rss_limit_mb=2048", "-timeout=30", "-max_len=400000",
                        f"-artifact_prefix={tmp_path}/", str(corpus)],
                       capture_output=True, text=True, timeout=FUZZ_SECONDS + 300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "Done" in r.stderr
