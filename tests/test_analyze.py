"""`trainperf analyze` and `trainperf merge` on real Kineto traces (the HTA
test traces of tests/data/traces), on traces derived from them (array form, truncated, corrupt,
larger), and on a trace PyTorch writes here on the CPU."""
import decimal
import gzip
import json
import os
import re
import subprocess

import pytest

from conftest import BUILD, SANITIZE


def traces(traces_dir):
    return sorted(traces_dir.glob("*.json.gz"))


def load_events(path):
    # Decimal keeps the file's microseconds exact, as the analyser does.
    with gzip.open(path, "rt") as f:
        return json.load(f, parse_float=decimal.Decimal)


def load_plain(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def ns(v):
    return int(decimal.Decimal(v) * 1000)


def analyze_json(run_cli, *args):
    p = run_cli("analyze", "--json", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def one_line_error(p):
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("trainperf: error: ")
    return lines[0]


def test_every_shared_trace_analyzes(run_cli, traces_dir):
    for t in traces(traces_dir):
        out = analyze_json(run_cli, t)
        (r,) = out["ranks"]
        ev = load_events(t)
        events = ev["traceEvents"] if isinstance(ev, dict) else ev
        assert r["events"] == len(events), t
        gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               and isinstance((e.get("args") or {}).get("stream"), int)]
        assert r["gpu_events"] == len(gpu), t
        if gpu:
            tb = r["temporal"]
            # the parts add up, and the window is the first start to the last end
            assert tb["idle_ns"] + tb["compute_ns"] + tb["non_compute_ns"] == tb["kernel_ns"]
            lo = min(ns(e["ts"]) for e in gpu)
            hi = max(ns(e["ts"]) + ns(e["dur"]) for e in gpu)
            assert tb["kernel_ns"] == hi - lo, t
            # kernel totals match a direct sum over the file
            for k in r["top_kernels"][:3]:
                s = sum(ns(e["dur"]) for e in gpu if e["name"] == k["name"])
                assert k["total_ns"] == s
        else:
            assert r["temporal"] is None


def test_a_directory_stands_for_its_traces(run_cli, traces_dir, tmp_path):
    """As torch's tensorboard_trace_handler leaves them: one directory."""
    for i in (0, 1):
        name = f"trace_filter_sampled_rank-{i}.json.gz"
        (tmp_path / name).write_bytes((traces_dir / name).read_bytes())
    (tmp_path / "notes.txt").write_text("not a trace")
    out = analyze_json(run_cli, tmp_path)
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    m = tmp_path / "out" / "merged.json"
    m.parent.mkdir()
    assert run_cli("merge", tmp_path, "-o", m).returncode == 0
    assert json.loads(m.read_text())["traceEvents"]


def test_rank_comes_from_distributed_info_or_name(run_cli, traces_dir):
    out = analyze_json(run_cli, *[traces_dir / f"trace_filter_sampled_rank-{i}.json.gz" for i in (1, 0)])
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    assert out["ranks"][0]["rank_from"] == "distributedInfo"
    cpu = analyze_json(run_cli, traces_dir / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert cpu["ranks"][0]["rank"] == 34
    only1 = analyze_json(run_cli, "--rank", "1", *[traces_dir / f"trace_filter_sampled_rank-{i}.json.gz" for i in (0, 1)])
    assert [r["rank"] for r in only1["ranks"]] == [1]


def test_per_step_and_stragglers_across_ranks(run_cli, traces_dir):
    files = [traces_dir / f"trace_filter_sampled_rank-{i}.json.gz" for i in (0, 1)]
    out = analyze_json(run_cli, *files)
    for r, f in zip(out["ranks"], files):
        ev = load_events(f)["traceEvents"]
        steps = {int(e["name"].split("#")[1]): ns(e["dur"]) for e in ev
                 if e.get("name", "").startswith("ProfilerStep#")}
        assert {s["step"]: s["dur_ns"] for s in r["steps"]} == steps
    # a straggler names a rank whose step is >10% over the median of the others
    for s in out["stragglers"]:
        assert s["dur_ns"] > s["median_ns"] * 1.1
    text = run_cli("analyze", *files)
    assert text.returncode == 0
    assert "Step time per rank" in text.stdout and "Stragglers" in text.stdout


def test_a_slow_rank_is_named_as_straggler(run_cli, traces_dir, tmp_path):
    """Rank 1's step 552 made half as long again: it, and only it, is named."""
    d = load_plain(traces_dir / "trace_filter_sampled_rank-1.json.gz")
    for e in d["traceEvents"]:
        if e.get("name") == "ProfilerStep#552":
            e["dur"] = e["dur"] * 1.5
    slow = tmp_path / "slow_rank-1.json"
    slow.write_text(json.dumps(d))
    out = analyze_json(run_cli, traces_dir / "trace_filter_sampled_rank-0.json.gz", slow)
    assert [(s["rank"], s["step"]) for s in out["stragglers"]] == [(1, 552)]
    text = run_cli("analyze", traces_dir / "trace_filter_sampled_rank-0.json.gz", slow).stdout
    assert "rank 1 is a straggler in step 552" in text


def test_steps_filter(run_cli, traces_dir):
    t = traces_dir / "trace_diff_control_control.json.gz"
    full = analyze_json(run_cli, t)["ranks"][0]
    part = analyze_json(run_cli, "--steps", "1010:1011", t)["ranks"][0]
    assert [s["step"] for s in part["steps"]] == [1010, 1011]
    by = {s["step"]: s for s in full["steps"]}
    assert part["gpu_events"] == by[1010]["kernels"] + by[1011]["kernels"]
    assert 0 < part["gpu_events"] < full["gpu_events"]


def test_gzip_and_plain_and_array_form_agree(run_cli, traces_dir, tmp_path):
    src = traces_dir / "trace_filter_sampled_rank-0.json.gz"
    d = load_plain(src)  # integer microseconds: floats round-trip exactly
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    # the old array form, without its closing bracket (legal: a crashed profiler)
    arr = tmp_path / "array_rank-0.json"
    with open(arr, "w") as f:
        f.write("[\n")
        for e in d["traceEvents"]:
            f.write(json.dumps(e) + ",\n")
    keep = ("temporal", "kernel_types", "overlap", "launch", "idle_streams", "top_kernels",
            "top_ops_self", "steps")
    a = analyze_json(run_cli, src)["ranks"][0]
    b = analyze_json(run_cli, plain)["ranks"][0]
    c = analyze_json(run_cli, arr)["ranks"][0]
    assert c["array_form"] and c["unterminated"]
    for k in keep:
        assert a[k] == b[k] == c[k], k


def test_cpu_only_trace_runs_cpu_analyses(run_cli, traces_dir):
    t = traces_dir / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    r = analyze_json(run_cli, t)["ranks"][0]
    assert r["gpu_events"] == 0 and r["temporal"] is None
    assert r["top_ops_total"], "CPU operators still reported"
    p = run_cli("analyze", t)
    assert p.returncode == 0 and "no GPU activity" in p.stdout


def test_events_missing_fields_are_skipped(run_cli, tmp_path):
    t = tmp_path / "t.json"
    t.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "no_dur", "ts": 2, "pid": 1, "tid": 1},
        {"ph": "X", "name": "no_cat", "ts": 2, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "dur": 3, "args": {"stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "b", "ts": "bad", "dur": 1},
        {}, 5, None,
    ]}))
    r = analyze_json(run_cli, t)["ranks"][0]
    assert r["events"] == 8 and r["complete_events"] == 1
    assert [o["name"] for o in r["top_ops_total"]] == ["a"]


@pytest.mark.parametrize("cut", [0.3, 0.9])
def test_truncated_object_form_is_an_error(run_cli, traces_dir, tmp_path, cut):
    raw = gzip.decompress((traces_dir / "trace_filter_sampled_rank-1.json.gz").read_bytes())
    t = tmp_path / "trunc.json"
    t.write_bytes(raw[: int(len(raw) * cut)])
    p = run_cli("analyze", t)
    assert p.returncode == 2
    line = one_line_error(p)
    assert "truncated" in line and str(t) in line


def test_invalid_json_names_the_byte_offset(run_cli, traces_dir, tmp_path):
    raw = gzip.decompress((traces_dir / "trace_filter_sampled_rank-1.json.gz").read_bytes())
    at = raw.index(b'"ts":', 50000) + 5     # a value position deep in the file
    bad = raw[:at] + b"@" + raw[at + 1:]
    t = tmp_path / "bad.json"
    t.write_bytes(bad)
    p = run_cli("analyze", t)
    assert p.returncode == 2
    line = one_line_error(p)
    m = re.search(r"byte (\d+)", line)
    assert m and int(m.group(1)) == at, line


def test_corrupt_gzip_and_unreadable_inputs(run_cli, traces_dir, tmp_path):
    raw = (traces_dir / "trace_filter_sampled_rank-1.json.gz").read_bytes()
    bad = bytearray(raw)
    for i in range(5000, 5064):
        bad[i] ^= 0x5A
    t = tmp_path / "corrupt.json.gz"
    t.write_bytes(bytes(bad))
    p = run_cli("analyze", t)
    assert p.returncode == 2 and "gzip" in one_line_error(p)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    p = run_cli("analyze", cut)
    assert p.returncode == 2
    one_line_error(p)
    p = run_cli("analyze", tmp_path / "missing.json")
    assert p.returncode == 2 and "missing.json" in one_line_error(p)
    emptydir = tmp_path / "nothing"
    emptydir.mkdir()
    p = run_cli("analyze", emptydir)
    assert p.returncode == 2 and "no .json" in one_line_error(p)
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    p = run_cli("analyze", empty)
    assert p.returncode == 2 and "empty" in one_line_error(p)
    other = tmp_path / "other.json"
    other.write_text('{"name": "not a trace", "traceEvents": 5}')
    p = run_cli("analyze", other)
    assert p.returncode == 2 and "traceEvents" in one_line_error(p)


def test_usage_errors(run_cli, traces_dir):
    t = traces_dir / "triton_example_triton_example.json.gz"
    for args in (["--steps", "x"], ["--compat", "nope", t], ["--top", "0", t], ["--bogus", t], []):
        p = run_cli("analyze", *args)
        assert p.returncode == 2, args
        one_line_error(p)
    assert run_cli("analyze", "--help").returncode == 0


def test_no_colour_off_a_tty_or_with_no_color(run_cli, traces_dir):
    t = traces_dir / "triton_example_triton_example.json.gz"
    p = run_cli("analyze", t)
    assert p.returncode == 0 and "\033[" not in p.stdout
    # under a pseudo-terminal colour appears, unless NO_COLOR is set
    import pty
    for env, want in (({}, True), ({"NO_COLOR": "1"}, False)):
        master, slave = pty.openpty()
        e = dict(os.environ, TERM="xterm", **env)
        e.pop("NO_COLOR", None) if not env else None
        proc = subprocess.Popen([str(BUILD / "trainperf"), "analyze", str(t)], stdout=slave,
                                stderr=subprocess.DEVNULL, env=e)
        os.close(slave)
        chunks = []
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:
                break
            if not b:
                break
            chunks.append(b)
        proc.wait(timeout=60)
        os.close(master)
        assert (b"\033[" in b"".join(chunks)) == want


def test_merge_puts_ranks_on_one_timeline(run_cli, traces_dir, tmp_path):
    files = [traces_dir / f"trace_filter_sampled_rank-{i}.json.gz" for i in (0, 1)]
    out = tmp_path / "merged.json"
    p = run_cli("merge", *files, "-o", out)
    assert p.returncode == 0, p.stderr
    merged = json.loads(out.read_text())["traceEvents"]
    srcs = [load_events(f)["traceEvents"] for f in files]
    x_in = sum(1 for ev in srcs for e in ev if e.get("ph") == "X")
    assert sum(1 for e in merged if e.get("ph") == "X") == x_in
    names = {e["pid"]: e["args"]["name"] for e in merged if e.get("ph") == "M" and e["name"] == "process_name"}
    pids_by_rank = {}
    for e in merged:
        if e.get("ph") == "X":
            rank = int(re.match(r"rank (\d+)", names[e["pid"]]).group(1))
            pids_by_rank.setdefault(rank, set()).add(e["pid"])
    assert set(pids_by_rank) == {0, 1}
    assert not (pids_by_rank[0] & pids_by_rank[1])
    # one clock: the earliest event is at 0 and relative times are kept
    gmin = min(e["ts"] for ev in srcs for e in ev if e.get("ph") == "X")
    assert min(e["ts"] for e in merged if e.get("ph") == "X") == 0
    step = next(e for e in srcs[1] if e.get("name") == "ProfilerStep#552")
    mstep = [e for e in merged if e.get("name") == "ProfilerStep#552" and "rank 1" in names[e["pid"]]]
    assert len(mstep) == 1 and abs(mstep[0]["ts"] - float(step["ts"] - gmin)) < 1e-3
    # flow ids of different ranks never collide
    ids = {}
    for e in merged:
        if e.get("ph") in ("s", "f") and "id" in e:
            ids.setdefault(e["id"], set()).add(names.get(e["pid"], "")[:6])
    assert all(len(v) == 1 for v in ids.values())


def test_merge_align_start_puts_every_rank_at_zero(run_cli, traces_dir, tmp_path):
    files = [traces_dir / "trace_filter_sampled_rank-0.json.gz", traces_dir / "nccl_parser_config_nccl_data.json.gz"]
    out = tmp_path / "m.json"
    assert run_cli("merge", "--align", "start", *files, "-o", out).returncode == 0
    merged = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in merged if e.get("ph") == "M" and e["name"] == "process_name"}
    first = {}
    for e in merged:
        if e.get("ph") == "X":
            r = names[e["pid"]].split(":")[0]
            first[r] = min(first.get(r, e["ts"]), e["ts"])
    assert len(first) == 2 and all(v == 0 for v in first.values()), first


def test_merge_errors(run_cli, traces_dir, tmp_path):
    t = traces_dir / "triton_example_triton_example.json.gz"
    p = run_cli("merge", t)
    assert p.returncode == 2 and "-o" in one_line_error(p)
    p = run_cli("merge", t, "-o", tmp_path / "nodir" / "x.json")
    assert p.returncode == 2
    one_line_error(p)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ts": 1,}]}')
    p = run_cli("merge", t, bad, "-o", tmp_path / "m.json")
    assert p.returncode == 2 and "byte" in one_line_error(p)
    assert not (tmp_path / "m.json").exists()


def _peak_rss_kb(cmd, tmp_path):
    """Peak RSS of cmd in KiB, measured by GNU time: a small parent, since a
    child forked from this (large) Python process starts with its RSS."""
    out = tmp_path / "rss.txt"
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(out), *cmd], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return int(out.read_text().split()[-1])


@pytest.mark.slow
@pytest.mark.skipif(SANITIZE, reason="RSS under ASan measures the sanitizer, not the analyser")
@pytest.mark.skipif(not os.path.exists("/usr/bin/time"), reason="GNU time (Debian package `time`) is absent")
def test_memory_does_not_grow_with_the_trace(traces_dir, tmp_path):
    """A longer trace (the same real events repeated, shifted in time) must
    not need noticeably more memory: events are streamed and spilled. The
    baseline is 3 copies, where the working sets (sort chunk, merge buffers,
    the launch map of about a second of launches) are full: from 1 copy to
    3 they fill (8.8 -> 14.2 MiB), which is not growth with the trace."""
    d = load_plain(traces_dir / "trace_diff_control_control.json.gz")
    ev = d["traceEvents"]
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in ev) - min(e["ts"] for e in ev if "ts" in e) + 1000

    def repeated(path, reps):
        with open(path, "w") as f:
            f.write('{"traceEvents":[')
            first = True
            for rep in range(reps):
                for e in ev:
                    e2 = dict(e)
                    if "ts" in e2:
                        e2["ts"] = e2["ts"] + rep * span
                    if "correlation" in (e2.get("args") or {}):
                        e2["args"] = dict(e2["args"], correlation=e2["args"]["correlation"] + rep * 10**7)
                    f.write(("" if first else ",") + json.dumps(e2))
                    first = False
            f.write("]}")
        return path

    small = repeated(tmp_path / "small.json", 3)
    big = repeated(tmp_path / "big.json", 7)
    cli = str(BUILD / "trainperf")
    rss_small = _peak_rss_kb([cli, "analyze", "--json", str(small)], tmp_path)
    rss_big = _peak_rss_kb([cli, "analyze", "--json", str(big)], tmp_path)
    assert big.stat().st_size > 2.2 * small.stat().st_size
    assert rss_big < rss_small * 1.1 + 2048, (rss_small, rss_big)


@pytest.mark.torch
def test_cpu_operators_match_torch_key_averages(run_cli, tmp_path):
    """Self and total CPU time per operator equal torch's key_averages() on
    the trace the same profiler exported."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with record_function("train_step"):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
    trace = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    out = analyze_json(run_cli, "--top", "1000", trace)["ranks"][0]
    ours = {o["name"]: o for o in out["top_ops_total"]}
    ka = {e.key: e for e in prof.key_averages()}
    checked = 0
    for name, e in ka.items():
        if name not in ours or e.count == 0:
            continue
        o = ours[name]
        assert o["count"] == e.count, name
        # the trace keeps ns (3 decimals of us); torch sums the same events
        assert abs(o["total_ns"] / 1000 - e.cpu_time_total) <= 0.002 * e.count + 1e-6, name
        assert abs(o["self_ns"] / 1000 - e.self_cpu_time_total) <= 0.002 * e.count + 1e-6, name
        checked += 1
    assert checked >= 10, (checked, sorted(ka)[:20])
