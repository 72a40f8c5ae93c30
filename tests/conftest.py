"""Shared fixtures for the trainperf test suite.

The suite runs against an in-tree build: TRAINPERF_BUILD (default "build")
names the build folder made by `make` (build-asan under SANITIZE=1).
"""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("TRAINPERF_BUILD", "build")
# Real Kineto traces (HTA's test data, tests/data/traces/README.md): the suite reads
# only files inside the repository, so a clone runs all of it.
TRACES = ROOT / "tests" / "data" / "traces"
SANITIZE = os.environ.get("TRAINPERF_SANITIZE") == "1"


# Files whose tests judge timing (scenario verdicts, tune's measured speedups, attach's
# py-spy step counts, the fake GPU's busy shares, which its host clock makes): they run in the serial pass, alone on the machine, after the
# parallel pass (Makefile `test`, tests/README.md). Everything else is independent.
SERIAL_FILES = {"test_scenarios.py", "test_tune.py", "test_attach.py", "test_scenario_fixes.py",
                "test_gpu.py"}


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: judges timing; runs alone, after the parallel pass (tests/README.md)")
    config.addinivalue_line("markers", "torch: needs PyTorch (skipped in the sanitizer pass)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
    config.addinivalue_line("markers", "once: a real-workload scenario (torchrun, servers, exporters' readers): run in the normal pass only, not again under the sanitizers")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)


def make_fuzz():
    """`make fuzz` for this build, one at a time: the two fuzz tests may run at once on two
    pytest-xdist workers, and two makes writing one binary would race."""
    import fcntl
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / "fuzz.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run(["make", "-s", f"BUILD={BUILD.name}", "fuzz"], cwd=ROOT,
                              capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def build():
    if not (BUILD / "trainperf").exists():
        pytest.fail(f"{BUILD}/trainperf is missing: run `make` first")
    return BUILD


@pytest.fixture(scope="session")
def cli(build):
    return str(build / "trainperf")


@pytest.fixture
def run_cli(cli):
    """Run the CLI; return CompletedProcess (text). Never hangs past timeout."""
    def _run(*args, timeout=120, env=None, **kw):
        e = dict(os.environ)
        e.pop("TRAINPERF_RUN_DIR", None)
        if env:
            e.update(env)
        return subprocess.run([cli, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, env=e, **kw)
    return _run


@pytest.fixture(scope="session")
def traces_dir():
    if not TRACES.is_dir():
        pytest.fail(f"{TRACES} is missing: the test traces are part of the repository")
    return TRACES
