"""What the docs promise and the CLI now does (issue 18 item 4): help texts,
'did you mean', TRAINPERF_CLOCK, a non-trace array, top on a finished run."""
import json
import os
import subprocess

import pytest

from pyhelp import BUILD, ROOT


def cli_run(cli, *args, env=None, timeout=120):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPERF_")}
    e.update(env or {})
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=e)


def test_help_texts_match_cli_md(cli):
    top = cli_run(cli, "--help").stdout
    assert "1 trainperf failed after reading its" in top  # as cli.md's exit-code table
    rep = cli_run(cli, "report", "--help").stdout
    assert "--color" in rep.splitlines()[0] + rep.splitlines()[1]
    assert "text (the default)" in rep and "on a terminal), md" not in rep
    cmp_ = cli_run(cli, "compare", "--help").stdout
    for opt in ("--format", "--json", "--out"):
        assert opt in cmp_.split("\n\n", 2)[2]  # described, not only in the usage line
    doc = (ROOT / "docs" / "cli.md").read_text()
    for word in ("--timeout", "merge TRACE... -o OUT.json", "TRAINPERF_LIB", "--profile",
                 "--flops-step", "TRAINPERF_PROFILE"):
        assert word in doc, word


@pytest.mark.parametrize("typo,near", [("reprot", "report"), ("anlyze", "analyze"),
                                       ("rnu", "run"), ("doc", "doctor")])
def test_misspelled_command_gets_did_you_mean(cli, typo, near):
    r = cli_run(cli, typo)
    assert r.returncode == 2
    assert f"did you mean '{near}'?" in r.stderr and len(r.stderr.splitlines()) == 1


def test_unrelated_word_gets_no_suggestion(cli):
    r = cli_run(cli, "frobnicate")
    assert r.returncode == 2 and "did you mean" not in r.stderr


def test_bogus_clock_is_refused_before_anything_runs(cli, tmp_path):
    r = cli_run(cli, "run", "--out", tmp_path / "run", "--", "true",
                env={"TRAINPERF_CLOCK": "bogus"})
    assert r.returncode == 2 and "TRAINPERF_CLOCK='bogus'" in r.stderr
    assert not (tmp_path / "run").exists()
    assert cli_run(cli, "run", "--quiet", "--out", tmp_path / "ok", "--", "true",
                   env={"TRAINPERF_CLOCK": "mono"}).returncode == 0


def test_array_without_events_is_not_a_trace(cli, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("[1,2")
    r = cli_run(cli, "analyze", p)
    assert r.returncode == 2 and "not a trace" in r.stderr
    # a crash-truncated real trace (an event object, no closing bracket) still is one
    p.write_text('[{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1, "dur": 5, '
                 '"pid": 1, "tid": 1}')
    assert cli_run(cli, "analyze", p).returncode == 0


def test_top_once_on_a_finished_run_shows_its_summary(cli, tmp_path):
    run = tmp_path / "run"
    r = cli_run(cli, "run", "--quiet", "--out", run, "--interval", "0.2", "--",
                BUILD / "examples" / "trainer", "--steps", "40", "--quiet", timeout=300)
    assert r.returncode == 0, r.stderr
    sm = json.loads((run / "summary.json").read_text())
    out = cli_run(cli, "top", run, "--once").stdout
    assert "ended after" in out
    assert "steps %d  %.2f steps/s" % (sm["steps"]["count"], sm["steps"]["steps_per_s"]) in out
    # the run's means (unknown stays "?" when the run was too short to sample), not a
    # sample taken after the command exited
    assert "(whole run)" in out and "(means)" in out


def test_status_line_keeps_to_its_row_on_a_terminal(cli, tmp_path):
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of 24 x 80 rows, trainperf in it
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPERF_")}
        env.pop("NO_COLOR", None)
        env["TERM"] = "xterm"
        os.execve(cli, [cli, "run", "--out", str(tmp_path / "run"), "--", "sh", "-c",
                        "sleep 2.5; echo CHILD-LINE; sleep 1.5"], env)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 1.0)
        if not r:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    text = out.decode("utf-8", "replace")
    assert "\x1b[1;23r" in text  # the rows above the status line scroll
    assert "\x1b7\x1b[24;1H\x1b[K" in text  # the status line is drawn on the last row
    assert "\x1b[r" in text  # and the region is given back at the end
    before = text[:text.index("CHILD-LINE")]
    line_start = max(before.rfind("\n"), before.rfind("\x1b8"))
    assert "trainperf" not in before[line_start:]  # the child's line starts clean


def test_top_shows_whole_arguments_and_an_ellipsis(cli, tmp_path):
    """A long command: whole arguments while they fit (200 columns off a
    terminal, the terminal's width on one), then "...": never an argument cut."""
    import pty
    import struct
    import fcntl
    import termios
    run = tmp_path / "run"
    args = ["arg%02d-%s" % (i, "x" * 20) for i in range(20)]
    r = cli_run(cli, "run", "--quiet", "--out", run, "--", "sh", "-c", "true", *args, timeout=120)
    assert r.returncode == 0, r.stderr
    out = cli_run(cli, "top", run, "--once").stdout
    head = out.splitlines()[0]
    shown = head[head.index("(") + 1:head.rindex(")")]
    assert shown.endswith(" ...") and len(shown) <= 200, head
    words = shown[:-4].split(" ")
    assert words == ["sh", "-c", "true", *args][:len(words)], head
    # on a terminal of 80 columns the header keeps to its row
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPERF_")}
        env["NO_COLOR"] = "1"
        os.chdir(tmp_path)
        os.execve(cli, [cli, "top", "run", "--once"], env)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    text = data.decode(errors="replace").replace("\x1b[H\x1b[J", "")
    head = next(l for l in text.splitlines() if "trainperf top" in l).rstrip("\r")
    assert len(head) <= 80 and head.endswith(" ...)"), head
    shown = head[head.index("(") + 1:-5].split(" ")
    assert shown == ["sh", "-c", "true", *args][:len(shown)], head
