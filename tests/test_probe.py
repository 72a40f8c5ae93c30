"""The probe in real processes: the bundled C trainer under TRAINPERF_RUN_DIR,
its segment read back with the C reader (`test_probe --dump`)."""
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import BUILD, SANITIZE

TRAINER = BUILD / "examples" / "trainer"
DUMPER = BUILD / "tests" / "test_probe"


@pytest.fixture(scope="module")
def bins():
    for b in (TRAINER, DUMPER):
        if not b.exists():
            pytest.fail(f"{b} was not built: run `make`")


def _env(run_dir=None, **extra):
    e = dict(os.environ)
    for k in ("TRAINPERF_RUN_DIR", "RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID",
              "SLURM_LOCALID", "SLURM_NTASKS"):
        e.pop(k, None)
    if run_dir is not None:
        e["TRAINPERF_RUN_DIR"] = str(run_dir)
    e.update(extra)
    return e


def dump(seg, check=True):
    """Drain seg once; a dict of the reader's counts (values int where they are)."""
    p = subprocess.run([str(DUMPER), "--dump", str(seg)], capture_output=True, text=True,
                       timeout=60)
    out = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition("=")
        out[k] = int(v) if re.fullmatch(r"-?\d+", v) else v
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return out


def run_trainer(*args, env=None, timeout=120):
    return subprocess.run([str(TRAINER), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def losses(stdout):
    m = re.search(r"initial loss ([\d.eE+-]+) final loss ([\d.eE+-]+) steps (\d+)", stdout)
    assert m, stdout
    return float(m.group(1)), float(m.group(2)), int(m.group(3))


@pytest.mark.parametrize("workers", [0, 3])
def test_trainer_records_every_step_and_phase(bins, tmp_path, workers):
    steps = 25
    p = subprocess.Popen([str(TRAINER), "--steps", str(steps), "--hidden", "32", "--quiet",
                          "--workers", str(workers), "--data-delay-ms", "1"],
                         stdout=subprocess.PIPE, text=True, env=_env(tmp_path))
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0
    segs = list((tmp_path / "live").glob("seg-*.tpf"))
    assert [s.name for s in segs] == [f"seg-{p.pid}.tpf"]
    d = dump(segs[0])
    assert d["pid"] == p.pid and d["ppid"] == os.getpid()
    assert d["step_begin"] == steps and d["step_end"] == steps
    for phase in ("data", "forward", "backward", "optimizer"):
        assert d[f"pushes.{phase}"] == steps
    assert d["push"] == d["pop"] == 4 * steps
    assert d["counter"] == steps and d["name.loss"] >= 16
    assert d["events"] == 2 * steps + 8 * steps + steps
    assert d["dropped"] == 0 and d["final_depth"] == 0 and d["min_depth"] == 0
    assert d["bad_order"] == 0
    assert d["rank"] == -1 and d["local_rank"] == -1 and d["world_size"] == -1
    # A second drain finds nothing new: the consumer index lives in the segment.
    assert dump(segs[0])["events"] == 0


def test_trainer_loss_goes_down(bins):
    p = run_trainer("--steps", 300, "--hidden", 32, "--quiet", env=_env())
    assert p.returncode == 0, p.stderr
    first, final, steps = losses(p.stdout)
    assert steps == 300
    assert final < first / 2


# ASan+UBSan make the compute about 10x slower, the sleep not at all: there
# the input-bound case gets a smaller model and a longer delay.
INPUT_BOUND = (["--hidden", "32", "--data-delay-ms", "30"] if SANITIZE
               else ["--hidden", "64", "--data-delay-ms", "20"])


@pytest.mark.parametrize("args,bound", [
    (INPUT_BOUND + ["--steps", "15"], "input"),
    (["--hidden", "1024", "--steps", "3"], "compute"),
])
def test_trainer_input_or_compute_bound(bins, tmp_path, args, bound):
    """The flags do what they say: time in the data phase vs the compute
    phases, as the probe recorded it."""
    p = run_trainer(*args, "--quiet", env=_env(tmp_path))
    assert p.returncode == 0, p.stderr
    (seg,) = (tmp_path / "live").glob("seg-*.tpf")
    d = dump(seg)
    data = d["range_ns.data"]
    compute = d["range_ns.forward"] + d["range_ns.backward"] + d["range_ns.optimizer"]
    assert data > 0 and compute > 0
    if bound == "input":
        assert data > 2 * compute
    else:
        assert compute > 20 * data


def test_trainer_rank_from_environment(bins, tmp_path):
    p = run_trainer("--steps", 3, "--hidden", 8, "--quiet",
                    env=_env(tmp_path, RANK="2", LOCAL_RANK="0", SLURM_NTASKS="4"))
    assert p.returncode == 0
    (seg,) = (tmp_path / "live").glob("seg-*.tpf")
    d = dump(seg)
    assert (d["rank"], d["local_rank"], d["world_size"]) == (2, 0, 4)
    assert d["step_end"] == 3


def test_unusable_run_dir_does_not_break_training(bins, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    p = run_trainer("--steps", 20, "--hidden", 8, "--quiet", env=_env(blocker / "run"))
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    first, final, _ = losses(p.stdout)
    assert final < first


@pytest.mark.parametrize("args", [["--steps", "-1"], ["--hidden", "abc"], ["--batch"],
                                  ["--what"], ["--lr", "0"]])
def test_trainer_bad_arguments(bins, args):
    p = run_trainer(*args, env=_env())
    assert p.returncode == 2
    assert p.stderr.startswith("trainer: error:")
    assert p.stdout == ""


def test_sigkill_mid_run_loses_nothing_published(bins, tmp_path):
    """Drain while the trainer runs, SIGKILL it, drain again: every step that
    began is seen once, nothing torn (ends never exceed begins, nesting holds)."""
    p = subprocess.Popen([str(TRAINER), "--steps", "100000000", "--hidden", "16", "--quiet",
                          "--data-delay-ms", "1"], stdout=subprocess.DEVNULL, env=_env(tmp_path))
    seg = tmp_path / "live" / f"seg-{p.pid}.tpf"
    total = {"step_begin": 0, "step_end": 0, "push": 0, "pop": 0, "events": 0}
    try:
        deadline = time.monotonic() + 60
        while total["step_end"] < 20 and time.monotonic() < deadline:
            if seg.exists():
                d = dump(seg, check=False)  # ESTATE while the probe initialises
                if "error" not in d:
                    for k in total:
                        total[k] += d[k]
            time.sleep(0.05)
        assert total["step_end"] >= 20
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    d = dump(seg)
    for k in total:
        total[k] += d[k]
    assert d["dropped"] == 0
    assert total["step_end"] <= total["step_begin"] <= total["step_end"] + 1
    # A step is begin, 4 x (push, pop), counter, end; a kill leaves a prefix.
    assert 0 <= total["push"] - total["pop"] <= 1
    assert total["push"] >= 4 * total["step_end"]
    assert dump(seg)["events"] == 0
