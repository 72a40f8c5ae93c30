"""A short, bounded libFuzzer run over the trace parser and analyses, seeded
with slices of the Kineto traces of tests/data/traces (tests/fuzz/make_corpus.py). Any crash,
sanitizer report, leak or timeout fails the test."""
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, make_fuzz

FUZZ_SECONDS = 30


@pytest.mark.slow
def test_fuzz_trace_parser(traces_dir, tmp_path):
    if not shutil.which("clang"):
        pytest.skip("clang is not installed (Debian package `clang`): libFuzzer unavailable")
    p = make_fuzz()
    assert p.returncode == 0, p.stderr[-3000:]
    exe = BUILD / "fuzz" / "fuzz_trace"
    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, str(ROOT / "tests" / "fuzz" / "make_corpus.py"), str(corpus), str(traces_dir)],
                   check=True, capture_output=True, timeout=300)
    assert len(list(corpus.iterdir())) > 20
    r = subprocess.run([str(exe), f"-max_total_time={FUZZ_SECONDS}", "-rss_limit_mb=2048", "-timeout=30",
                        f"-artifact_prefix={tmp_path}/", str(corpus)],
                       capture_output=True, text=True, timeout=FUZZ_SECONDS + 300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "Done" in r.stderr
