"""Every output path a user names (issue 27): `report -o`, `compare -o`,
`merge -o`, `analyze --overlay`, `analyze --counters`. A regular file or a new
name is replaced whole; a character device or a FIFO is written through and
stays what it was; anything else (a symlink to a file, a directory) is
refused with one line and exit 2; a write error (a full device) is exit 2.

Devices are made with mknod in the test's own directory (root only; skipped
otherwise), so a broken build never touches the machine's /dev/full."""
import json
import os
import stat
import threading

import pytest

from conftest import ROOT

RUNS = ROOT / "tests" / "data" / "runs"
HTA = ROOT / "tests" / "data" / "hta"
RANGE = "[param|pytorch.model.alex_net|0|0|0|measure|forward]#1"

WRITERS = {
    "report": lambda p: ["report", RUNS / "cpu-only", "--format", "json", "-o", p],
    "compare": lambda p: ["compare", RUNS / "cpu-only", RUNS / "compute-bound", "--format", "json",
                          "-o", p],
    "merge": lambda p: ["merge", HTA / "critical_path_simple_add.json.gz", "-o", p],
    "overlay": lambda p: ["analyze", "--critical-path", "--cp-range", RANGE, "--overlay", p,
                          HTA / "critical_path_simple_add.json.gz"],
    "counters": lambda p: ["analyze", "--counters", p, HTA / "critical_path_alexnet.json.gz"],
}


def device(tmp_path, name, minor):
    p = tmp_path / name
    try:
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod needs root")
    return p


def one_error_line(r, *words):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize("w", WRITERS)
def test_a_full_device_is_written_through_and_its_error_is_exit_2(run_cli, tmp_path, w):
    full = device(tmp_path, "full", 7)  # what /dev/full is
    r = run_cli(*WRITERS[w](full), timeout=60)
    one_error_line(r, str(full), "No space left")
    assert stat.S_ISCHR(os.lstat(full).st_mode)  # still the device, never a file
    assert sorted(os.listdir(tmp_path)) == ["full"]


@pytest.mark.parametrize("w", WRITERS)
def test_a_null_device_stays_a_device(run_cli, tmp_path, w):
    null = device(tmp_path, "null", 3)
    r = run_cli(*WRITERS[w](null), timeout=60)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.lstat(null).st_mode)


@pytest.mark.parametrize("w", WRITERS)
def test_a_fifo_is_written_through_to_its_reader(run_cli, tmp_path, w):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = {}

    def read():
        with open(fifo, "rb") as f:
            got["data"] = f.read()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    r = run_cli(*WRITERS[w](fifo), timeout=60)
    if r.returncode != 0 and t.is_alive():
        with open(fifo, "wb"):  # let the reader go
            pass
    t.join(30)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    json.loads(got["data"])  # the whole document came through


@pytest.mark.parametrize("w", WRITERS)
def test_a_fifo_without_a_reader_is_refused_not_waited_for(run_cli, tmp_path, w):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    r = run_cli(*WRITERS[w](fifo), timeout=60)
    one_error_line(r, str(fifo), "FIFO with no reader")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("w", WRITERS)
def test_a_symlink_to_a_file_is_neither_followed_nor_replaced(run_cli, tmp_path, w):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "out.json"
    link.symlink_to(target)
    r = run_cli(*WRITERS[w](link), timeout=60)
    one_error_line(r, str(link), "symbolic link")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("w", WRITERS)
def test_a_directory_is_refused(run_cli, tmp_path, w):
    d = tmp_path / "out"
    d.mkdir()
    r = run_cli(*WRITERS[w](d), timeout=60)
    one_error_line(r, str(d), "directory")
    assert d.is_dir() and not os.listdir(d)


@pytest.mark.parametrize("w", WRITERS)
def test_a_regular_file_is_replaced_whole(run_cli, tmp_path, w):
    out = tmp_path / "out.json"
    out.write_text("old contents that are longer than nothing\n" * 1000)
    r = run_cli(*WRITERS[w](out), timeout=60)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISREG(os.lstat(out).st_mode)
    json.loads(out.read_text())
    assert os.listdir(tmp_path) == ["out.json"]  # no temporary left behind
