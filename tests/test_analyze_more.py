"""`trainperf analyze` on the traces made from HTA's test data (tests/data/hta)
and on small hand-made ones: what the default mode says where device work
overlaps on a stream, what happens to numbers out of range, two files of one
rank, a --steps range outside the trace."""
import decimal
import gzip
import json
import pathlib
import re

import pytest

from conftest import ROOT

HTA = ROOT / "tests" / "data" / "hta"


def analyze(run_cli, *args):
    p = run_cli("analyze", "--json", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def write(path, events, **top):
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def kernel(ts, dur, stream=7, corr=None, name="k"):
    args = {"stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": args}


def launch(ts, dur, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
            "dur": dur, "args": {"correlation": corr}}


@pytest.mark.parametrize("name", ["mtia_rank_0", "mtia_inference_rank_0"])
def test_overlapping_dma_never_makes_idle_negative(run_cli, name):
    """MTIA DMA events overlap on one stream: HTA takes the gap from the
    previous event's end as is (negative); the default merges the work."""
    trace = HTA / f"{name}.json.gz"
    out, _ = analyze(run_cli, trace)
    (r,) = out["ranks"]
    assert r["idle_streams"], "the DMA streams are analysed"
    for s in r["idle_streams"]:
        for k in ("host_wait_ns", "kernel_wait_ns", "other_ns"):
            assert s[k] >= 0, (s["stream"], k, s[k])
    t = r["temporal"]
    assert t["idle_ns"] >= 0 and t["idle_ns"] + t["compute_ns"] + t["non_compute_ns"] == t["kernel_ns"]
    if name == "mtia_rank_0":
        hta, _ = analyze(run_cli, "--compat", "hta", trace)
        worst = min(min(s["kernel_wait_ns"], s["other_ns"]) for s in hta["ranks"][0]["idle_streams"])
        assert worst < 0, "HTA's arithmetic (compat) does go negative on this trace"


def test_device_rows_without_correlation_count_in_idle_time(run_cli, tmp_path):
    """A DMA row with a stream but no correlation is device work: both modes
    put it on its stream (HTA does), so the gap after it is not idle."""
    ev = [launch(0, 2, 1), kernel(10, 10, corr=1),
          {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 0, "tid": 7, "ts": 25,
           "dur": 50, "args": {"stream": 7}},
          launch(60, 2, 2), kernel(80, 10, corr=2)]
    t = write(tmp_path / "dma.json", ev)
    for mode in ([], ["--compat", "hta"]):
        out, _ = analyze(run_cli, *mode, t)
        (s,) = out["ranks"][0]["idle_streams"]
        assert s["kernels"] == 3, mode
        assert s["kernel_wait_ns"] + s["other_ns"] + s["host_wait_ns"] == 10_000, (mode, s)


def test_context_sync_on_stream_4294967295_is_kept(run_cli):
    """CUPTI writes Context Sync on stream 0xffffffff (-1 as uint32); HTA
    counts it in the GPU window, so --compat hta does too."""
    trace = HTA / "critical_path_simple_add.json.gz"
    with gzip.open(trace, "rt") as f:
        ev = json.load(f)["traceEvents"]
    syncs = [e for e in ev if (e.get("args") or {}).get("stream") == 4294967295]
    assert syncs and all(e["name"] == "Context Sync" for e in syncs)
    out, _ = analyze(run_cli, "--compat", "hta", trace)
    t = out["ranks"][0]["temporal"]
    last_sync_end = max(e["ts"] + e["dur"] for e in syncs)
    first = min(e["ts"] for e in ev if "dur" in e and "cat" in e and e["cat"] != "Trace"
                and (e.get("args") or {}).get("stream", -1) != -1)
    assert t["kernel_ns"] >= round((last_sync_end - first) * 1000) - 1000


def test_numbers_out_of_range_are_counted_and_said(run_cli, tmp_path):
    raw = json.dumps({"traceEvents": [launch(0, 2, 1), kernel(10, 10, corr=1)]})
    raw = raw[:-2] + ', {"ph": "X", "cat": "kernel", "name": "huge", "ts": 1e999, "dur": 1, ' \
        '"args": {"stream": 7, "correlation": 2}}, {"ph": "X", "cat": "kernel", "name": "long", ' \
        '"ts": 123456789012345678901234567890123, "dur": 1, "args": {"stream": 7}}]}'
    t = tmp_path / "range.json"
    t.write_text(raw)
    out, err = analyze(run_cli, t)
    assert out["ranks"][0]["events_out_of_range"] == 2
    assert out["ranks"][0]["gpu_events"] == 1
    assert "2 event(s) skipped: a ts or dur out of range" in err
    assert any("out of range" in w for w in out["warnings"])


def test_two_files_claiming_one_rank_are_warned_about(run_cli, tmp_path):
    ev = [launch(0, 2, 1), kernel(10, 10, corr=1)]
    a = write(tmp_path / "a.json", ev, distributedInfo={"rank": 3})
    b = write(tmp_path / "b.json", ev, distributedInfo={"rank": 3})
    out, err = analyze(run_cli, a, b)
    assert [r["rank"] for r in out["ranks"]] == [3, 3]
    assert "rank 3 claimed by two files" in err and "a.json" in err and "b.json" in err
    out, err = analyze(run_cli, a)
    assert out["warnings"] == [] and "warning" not in err


def test_steps_outside_the_trace_say_so(run_cli, tmp_path):
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
           "ts": 100 * i, "dur": 90} for i in (4, 5, 6)]
    ev += [launch(100 * i + 1, 2, i) for i in (4, 5, 6)] + [kernel(100 * i + 10, 10, corr=i) for i in (4, 5, 6)]
    t = write(tmp_path / "steps.json", ev)
    p = run_cli("analyze", "--steps", "10:12", t)
    assert p.returncode == 2
    assert p.stderr.strip() == ("trainperf: error: no steps in that range: --steps 10:12, "
                                "the trace has ProfilerStep#4..6")
    out, _ = analyze(run_cli, "--steps", "5", t)
    assert [s["step"] for s in out["ranks"][0]["steps"]] == [5]
    t2 = write(tmp_path / "nosteps.json", [launch(0, 2, 1), kernel(10, 10, corr=1)])
    p = run_cli("analyze", "--steps", "1:2", t2)
    assert p.returncode == 2 and "no ProfilerStep" in p.stderr


def test_ranks_in_parallel_give_the_same_result(run_cli, traces_dir):
    files = sorted(traces_dir.glob("trace_filter_sampled_rank-*.json.gz")) + [HTA / "mtia_inference_rank_0.json.gz"]
    one = run_cli("analyze", "--json", "--jobs", "1", *files)
    many = run_cli("analyze", "--json", "--jobs", "3", *files)
    assert one.returncode == 0 and many.returncode == 0, one.stderr + many.stderr
    assert one.stdout == many.stdout
    assert len(json.loads(one.stdout)["ranks"]) == 3
    # an error in one file is reported the same way whichever thread met it
    bad = run_cli("analyze", "--jobs", "3", files[0], "/nonexistent/x.json", files[1])
    assert bad.returncode == 2 and "/nonexistent/x.json" in bad.stderr
    assert run_cli("analyze", "--jobs", "0", files[0]).returncode == 2


def kernel_totals(path):
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    tot = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and isinstance((e.get("args") or {}).get("stream"), int):
            c, t = tot.get(e["name"], (0, 0))
            tot[e["name"]] = (c + 1, t + round(e["dur"] * 1000))
    return tot


def test_diff_joins_kernels_and_ops_by_name(run_cli):
    base, test = HTA / "trace_compare_base.json.gz", HTA / "trace_compare_test.json.gz"
    p = run_cli("analyze", "--diff", "--json", base, test)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    ka, kb = kernel_totals(base), kernel_totals(test)
    rows = {r["name"]: r for r in d["rows"] if r["kind"] == "kernel"}
    assert set(rows) == set(ka) | set(kb)
    for name, r in rows.items():
        assert (r["count_baseline"], r["total_baseline_ns"]) == ka.get(name, (0, 0)), name
        assert (r["count_test"], r["total_test_ns"]) == kb.get(name, (0, 0)), name
        want = ("added" if name not in ka else "removed" if name not in kb else
                "same" if abs(r["delta_ns"]) < max(1000, 0.05 * r["total_baseline_ns"]) else
                "slower" if r["delta_ns"] > 0 else "faster")
        assert r["status"] == want, (name, r)
    added_ops = {r["name"] for r in d["rows"] if r["kind"] == "op" and r["status"] == "added"}
    assert "All2All_Pooled_Req" in added_ops
    deltas = [abs(r["delta_ns"]) for r in d["rows"]]
    assert deltas == sorted(deltas, reverse=True)
    s = d["summary"]
    assert sum(s["counts"].values()) == len(d["rows"])
    text = run_cli("analyze", "--diff", base, test)
    assert text.returncode == 0 and "added" in text.stdout and "All2All_Pooled_Req" in text.stdout


def test_diff_of_a_trace_with_itself_is_all_unchanged(run_cli):
    t = HTA / "critical_path_alexnet.json.gz"
    d = json.loads(run_cli("analyze", "--diff", "--json", t, t).stdout)
    assert d["rows"] and all(r["status"] == "same" and r["delta_ns"] == 0 for r in d["rows"])
    assert d["summary"]["baseline"] == d["summary"]["test"]


def test_diff_usage_errors(run_cli, tmp_path):
    t = HTA / "trace_compare_base.json.gz"
    p = run_cli("analyze", "--diff", t)
    assert p.returncode == 2 and "--diff takes two traces" in p.stderr
    p = run_cli("analyze", "--diff", t, tmp_path / "missing.json")
    assert p.returncode == 2 and "missing.json" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.torch
def test_memory_timeline_and_annotations_of_a_real_profile(run_cli, tmp_path):
    """torch.profiler with profile_memory: the peak equals the largest
    'Total Allocated' PyTorch wrote, allocations are put under the
    record_function range they were made in, and each range's CPU time and
    count are the trace's."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(3):
            with record_function("fwd_bwd"):
                opt.zero_grad()
                model(x).sum().backward()
            with record_function("opt_step"):
                opt.step()
    trace = tmp_path / "mem.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    ev = json.loads(trace.read_text())["traceEvents"]
    mem = [e for e in ev if e.get("name") == "[memory]"]
    assert mem, "profile_memory wrote [memory] events"
    out, _ = analyze(run_cli, "--top", "50", trace)
    (r,) = out["ranks"]
    (cpu,) = [m for m in r["memory"] if m["device"] == "CPU"]
    assert cpu["peak_allocated_bytes"] == max(e["args"]["Total Allocated"] for e in mem
                                              if e["args"].get("Device Type") == 0)
    assert cpu["allocations"] == sum(1 for e in mem if e["args"]["Bytes"] >= 0 and e["args"].get("Device Type") == 0)
    cats = {c["category"]: c for c in cpu["allocated_by_category"]}
    assert "fwd_bwd" in cats and cats["fwd_bwd"]["bytes"] > 0
    assert sum(c["bytes"] for c in cpu["allocated_by_category"]) <= cpu["allocated_bytes"]
    anns = {a["name"]: a for a in r["annotations"]}
    for name in ("fwd_bwd", "opt_step"):
        ranges = [e for e in ev if e.get("name") == name and e.get("cat") == "user_annotation"]
        assert anns[name]["ranges"] == len(ranges) == 3
        assert abs(anns[name]["cpu_ns"] - sum(round(e["dur"] * 1000) for e in ranges)) <= 3
    text = run_cli("analyze", trace)
    assert "Memory timeline: CPU" in text.stdout and "fwd_bwd" in text.stdout


def test_kernel_sequences_queue_and_bandwidth(run_cli):
    """On a real CUDA trace: sequences counted per stream from the kernels in
    order, the queue never longer than the kernels launched, memcpy bandwidth
    = bytes / time of the copies."""
    trace = HTA / "critical_path_alexnet.json.gz"
    with gzip.open(trace, "rt") as f:
        ev = json.load(f)["traceEvents"]
    out, _ = analyze(run_cli, "--top", "1000", trace)
    (r,) = out["ranks"]
    seqs = r["kernel_sequences"]
    assert seqs["length"] == 3 and seqs["top"]
    by_stream = {}
    for e in sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: (e["ts"], -e["dur"])):
        by_stream.setdefault(e["args"]["stream"], []).append(e["name"])
    counts = {}
    for names in by_stream.values():
        for i in range(len(names) - 2):
            counts[tuple(names[i:i + 3])] = counts.get(tuple(names[i:i + 3]), 0) + 1
    for s in seqs["top"]:
        assert counts[tuple(s["kernels"])] == s["count"]
    assert seqs["top"][0]["count"] == max(counts.values())
    for q in r["queue_length"]:
        assert 1 <= q["max"] <= q["kernels"]
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy"]
    (bw,) = [b for b in r["memcpy_bandwidth"] if b["name"].startswith("Memcpy HtoD")]
    assert bw["bytes"] == sum(e["args"]["bytes"] for e in copies if e["name"] == bw["name"])
    assert bw["count"] == sum(1 for e in copies if e["name"] == bw["name"])
    p = run_cli("analyze", "--seq-len", "2", "--json", trace)
    assert p.returncode == 0 and json.loads(p.stdout)["ranks"][0]["kernel_sequences"]["length"] == 2


def test_critical_path_summary_and_overlay(run_cli, tmp_path):
    trace = HTA / "critical_path_simple_add.json.gz"
    rng = "[param|pytorch.model.alex_net|0|0|0|measure|forward]#1"
    p = run_cli("analyze", "--critical-path", "--json", "--cp-range", rng, trace)
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)
    assert 0 < c["path_ns"] <= c["window_ns"]
    assert sum(t["ns"] for t in c["by_type"].values()) == c["path_ns"]
    assert c["by_type"]["dependency"]["ns"] == 0 and c["by_type"]["sync"]["ns"] == 0
    assert c["top"][0]["name"] == "cudaMalloc" and c["top"][0]["type"] == "cpu"
    assert sum(r["ns"] for r in c["top"]) <= c["path_ns"]
    ov = tmp_path / "overlay.json"
    p = run_cli("analyze", "--critical-path", "--cp-range", rng, "--overlay", ov, trace)
    assert p.returncode == 0 and "overlay written" in p.stdout
    with gzip.open(trace, "rt") as f:
        orig = json.load(f)["traceEvents"]
    out = json.loads(ov.read_text())["traceEvents"]
    assert out[:len(orig)] == orig, "the original events come through unchanged"
    added = out[len(orig):]
    spans = [e for e in added if e["ph"] == "X"]
    assert spans and all(e["cat"] == "critical_path" for e in spans)
    assert abs(sum(round(e["dur"] * 1000) for e in spans) - c["path_ns"]) <= len(spans)
    starts = {e["id"] for e in added if e["ph"] == "s"}
    assert starts and starts == {e["id"] for e in added if e["ph"] == "f"}
    assert not starts & {e.get("id") for e in orig if e.get("ph") in ("s", "f")}


def test_critical_path_of_a_profiler_step_and_errors(run_cli, tmp_path):
    trace = HTA / "cuda_event_sync.json.gz"
    out = json.loads(run_cli("analyze", "--critical-path", "--json", trace).stdout)
    assert out["window"] == "ProfilerStep#100"
    assert json.loads(run_cli("analyze", "--critical-path", "--json", "--steps", "100", trace).stdout) == out
    p = run_cli("analyze", "--critical-path", "--steps", "7", trace)
    assert p.returncode == 2 and "no steps in that range" in p.stderr and "#100..100" in p.stderr
    p = run_cli("analyze", "--critical-path", "--cp-range", "nope", trace)
    assert p.returncode == 2 and "no range #0 of annotation 'nope'" in p.stderr
    p = run_cli("analyze", "--critical-path", trace, trace)
    assert p.returncode == 2 and "one trace" in p.stderr
    p = run_cli("analyze", "--overlay", tmp_path / "x.json", trace)
    assert p.returncode == 2 and "--critical-path" in p.stderr
    p = run_cli("analyze", "--critical-path", "--overlay", tmp_path / "no" / "x.json", trace)
    assert p.returncode == 2 and "cannot write" in p.stderr


def test_gpu_time_per_annotation_on_a_cuda_trace(run_cli):
    """Kernels are charged to the innermost record_function range around
    their launch on the launching thread; computed here from the raw events."""
    trace = HTA / "critical_path_alexnet.json.gz"
    with gzip.open(trace, "rt") as f:
        ev = json.load(f)["traceEvents"]
    anns = [e for e in ev if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep")]
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    want = {}
    for k in ev:
        if k.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        rt = runtime.get(k["args"].get("correlation"))
        if rt is None:
            continue
        around = [a for a in anns if a["pid"] == rt["pid"] and a["tid"] == rt["tid"]
                  and a["ts"] <= rt["ts"] < a["ts"] + a["dur"]]
        if not around:
            continue
        inner = max(around, key=lambda a: (a["ts"], -a["dur"]))
        n, t = want.get(inner["name"], (0, 0))
        want[inner["name"]] = (n + 1, t + round(k["dur"] * 1000))
    out, _ = analyze(run_cli, "--top", "100", trace)
    got = {a["name"]: (a["kernels"], a["gpu_kernel_ns"]) for a in out["ranks"][0]["annotations"] if a["kernels"]}
    assert want and got == want


def test_critical_path_of_an_empty_trace(run_cli, tmp_path):
    t = write(tmp_path / "empty.json", [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}])
    p = run_cli("analyze", "--critical-path", "--json", "--overlay", tmp_path / "ov.json", t)
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)
    assert c["path_ns"] == 0 and c["events"] == 0 and c["window"] == "the whole trace"
    assert json.loads((tmp_path / "ov.json").read_text())["traceEvents"][0]["name"] == "process_name"


def _odd_trace():
    """One launch per kernel, plus what Python's json reads and strict JSON
    does not: NaN and +-Infinity where a number could be."""
    return ('{"traceEvents": [\n'
            '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 50,'
            ' "args": {"Input Dims": NaN}},\n'
            '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110,'
            ' "dur": 5, "args": {"correlation": 7}},\n'
            '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 130, "dur": 10,'
            ' "args": {"stream": 7, "correlation": 7, "blocks per SM": Infinity}},\n'
            '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 160,'
            ' "dur": 5, "args": {"correlation": 8, "cbid": -Infinity}},\n'
            '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 170, "dur": 10,'
            ' "args": {"stream": 7, "correlation": 8}}\n'
            ']}\n')


def test_nan_and_infinity_are_read_as_python_reads_them(run_cli, tmp_path):
    """A NaN or Infinity (Python's json reads them; HTA does) no longer
    rejects the file: the values are not numbers for any field, the rest is
    analysed as if they were null, and a warning names the count."""
    text = _odd_trace()
    assert len(json.loads(text)["traceEvents"]) == 5  # Python's json reads it
    odd = tmp_path / "odd.json"
    odd.write_text(text)
    clean = tmp_path / "clean.json"
    clean.write_text(text.replace("-Infinity", "null").replace("Infinity", "null").replace("NaN", "null"))
    out, err = analyze(run_cli, odd)
    ref, ref_err = analyze(run_cli, clean)
    assert "3 NaN/Infinity value(s)" in err and "odd.json" in err, err
    assert "NaN" not in ref_err
    assert [w for w in out["warnings"] if "NaN/Infinity" in w]
    for r in (out["ranks"][0], ref["ranks"][0]):
        r.pop("file"), r.pop("bytes")
    assert out["ranks"] == ref["ranks"]
    assert out["ranks"][0]["launch"]["count"] == 2
    # where a time should be: the event is skipped as one without a ts
    bad = tmp_path / "badts.json"
    bad.write_text(text.replace('"ts": 160', '"ts": NaN').replace('"ts": 170', '"ts": -Infinity'))
    out, err = analyze(run_cli, bad)
    assert "5 NaN/Infinity value(s)" in err, err
    assert out["ranks"][0]["launch"]["count"] == 1


def test_odd_input_is_said(run_cli, tmp_path):
    """Negative durations, duplicate events and launch calls that reuse a
    correlation id pass (HTA reads them), each with a warning and its count;
    a CPU operator nested in one of its own name is no duplicate."""
    ev = [launch(0, 2, 1), kernel(10, 10, corr=1), kernel(10, 10, corr=1),  # a duplicate kernel
          launch(20, 2, 2), launch(24, 2, 2), kernel(30, 5, corr=2),          # id 2 launched twice
          {"ph": "X", "cat": "cpu_op", "name": "aten::zeros", "pid": 1, "tid": 1, "ts": 40, "dur": 5},
          {"ph": "X", "cat": "cpu_op", "name": "aten::zeros", "pid": 1, "tid": 1, "ts": 40, "dur": 5},
          {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 50, "dur": -3},
          {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 60, "dur": -1}]
    t = write(tmp_path / "odd.json", ev)
    out, err = analyze(run_cli, t)
    assert "2 event(s) with a negative duration" in err, err
    assert "1 duplicate event(s)" in err, err
    assert "1 launch call(s) reuse a correlation id" in err, err
    assert len([w for w in out["warnings"] if "odd.json" in w]) == 3
    clean = write(tmp_path / "clean.json", [launch(0, 2, 1), kernel(10, 10, corr=1), ev[6], ev[7]])
    _, err = analyze(run_cli, clean)
    assert "warning" not in err, err


def _step(ts, dur, num=1, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": f"ProfilerStep#{num}", "pid": 1 if cat != "gpu_user_annotation" else 0,
            "tid": 1 if cat != "gpu_user_annotation" else 7, "ts": ts, "dur": dur}


def _op(ts, dur, name="aten::op"):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def test_critical_path_no_launch_delay_onto_a_busy_stream(run_cli, tmp_path):
    """A kernel launched onto a stream still running work launched before
    the step waits for that work, not for its launch: no launch-delay edge
    (HTA's queue length over the whole trace says the same)."""
    ev = [launch(10, 2, 1), kernel(20, 280, corr=1),                 # before the step, runs on
          _step(100, 100), _op(105, 10), launch(110, 2, 2), kernel(300, 10, corr=2)]
    t = write(tmp_path / "busy.json", ev)
    for mode in ([], ["--compat", "hta"]):
        out, _ = analyze(run_cli, "--critical-path", "--steps", "1", *mode, t)
        assert out["by_type"]["launch_delay"]["ns"] == 0, (mode, out["by_type"])
        assert out["path_ns"] == 10_000, (mode, out["path_ns"])  # the operator, or the kernel: 10 us
    # the same stream idle at the launch: the delay is on the path
    ev[1] = kernel(20, 50, corr=1)
    out, _ = analyze(run_cli, "--critical-path", "--steps", "1", write(tmp_path / "idle.json", ev))
    assert out["by_type"]["launch_delay"]["ns"] == 190_000
    assert out["path_ns"] == 5_000 + 190_000 + 10_000


def test_critical_path_cuda_graph_kernels(run_cli, tmp_path):
    """A CUDA graph puts many kernels on one correlation id: all of them are
    on the default graph; --compat hta keeps one, as HTA joins one row."""
    graph = {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 110,
             "dur": 2, "args": {"correlation": 5}}
    ev = [_step(100, 100), _op(105, 10), graph, kernel(120, 10, corr=5), kernel(130, 10, corr=5),
          kernel(140, 10, corr=5)]
    t = write(tmp_path / "graph.json", ev)
    full, _ = analyze(run_cli, "--critical-path", "--steps", "1", t)
    hta, _ = analyze(run_cli, "--critical-path", "--steps", "1", "--compat", "hta", t)
    assert full["by_type"]["kernel"]["edges"] == 3 and full["by_type"]["kernel"]["ns"] == 30_000
    assert hta["by_type"]["kernel"]["edges"] == 1 and hta["by_type"]["kernel"]["ns"] == 10_000
    assert full["path_ns"] == 5_000 + 10_000 + 30_000  # the operator to the launch, its delay, the kernels
    assert hta["path_ns"] == 10_000  # HTA: cudaGraphLaunch is no launch of its; the kernel has no edge in


def test_critical_path_blocking_sync_without_cuda_sync_events(run_cli, tmp_path):
    """A trace without `cuda_sync` events: the default lets cudaStreamSynchronize stand
    for its sync (the CPU after it cannot run before the stream's last kernel ends); HTA
    draws no edge from the GPU to the call, so the CPU after the wait looks free. The
    path, by hand (us): aten::a's start to its launch 5, the launch delay 10, the kernel
    60, the sync edge 0, the end of the wait to aten::item's end 1, then aten::b 10 = 86;
    without the edge, the longest path ends with the kernel: 5 + 10 + 60 = 75."""
    sync = {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
            "ts": 120, "dur": 62, "args": {}}
    ev = [_step(100, 100), _op(105, 10, "aten::a"), launch(110, 2, 1), kernel(120, 60, corr=1),
          _op(118, 65, "aten::item"), sync, _op(185, 10, "aten::b")]
    t = write(tmp_path / "sync.json", ev)
    full, _ = analyze(run_cli, "--critical-path", "--steps", "1", t)
    hta, _ = analyze(run_cli, "--critical-path", "--steps", "1", "--compat", "hta", t)
    assert full["path_ns"] == 86_000, full
    assert full["by_type"]["sync"]["edges"] == 1 and full["by_type"]["kernel"]["ns"] == 60_000
    assert full["by_type"]["launch_delay"]["ns"] == 10_000 and full["by_type"]["cpu"]["ns"] == 16_000
    assert hta["path_ns"] == 75_000 and hta["by_type"]["sync"]["edges"] == 0, hta
    # the path runs from aten::a's start (105) to aten::b's end (195); the events, 105 to 195
    assert full["path_span_ns"] == 90_000 and full["span_ns"] == 90_000
    # with the trace's own cuda_sync event for the call, both modes draw the edge
    ev[5]["args"] = {"correlation": 9}
    ev.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 120,
               "dur": 60, "args": {"correlation": 9, "stream": 7}})
    t = write(tmp_path / "sync2.json", ev)
    for mode in ([], ["--compat", "hta"]):
        out, _ = analyze(run_cli, "--critical-path", "--steps", "1", *mode, t)
        assert out["path_ns"] == 86_000, (mode, out)


def _all_traces():
    return sorted(p for d in (ROOT / "tests" / "data" / "traces", HTA) for p in d.glob("*.json.gz"))


@pytest.mark.parametrize("trace", _all_traces(), ids=lambda p: p.name[:40])
def test_critical_path_never_longer_than_its_events(run_cli, tmp_path, trace):
    """On every trace of the suite, both modes: the path's edges, read back from the
    overlay (one X event per edge with time), follow one another in time without
    overlapping, sum to the path's length, and fit between the path's first and last
    node, which lie among the window's events: a path cannot last longer than the
    span of the events on it."""
    for mode in ([], ["--compat", "hta"]):
        ov = tmp_path / ("ov%d.json" % len(mode))
        c, _ = analyze(run_cli, "--critical-path", "--overlay", ov, *mode, trace)
        # the overlay's times are microseconds with 3 decimals: read exactly, in ns
        ns = lambda v: int(decimal.Decimal(v) * 1000)
        xs = sorted(((ns(e["ts"]), ns(e["dur"])) for e in json.loads(ov.read_text(), parse_float=str)["traceEvents"]
                     if e.get("ph") == "X" and e.get("cat") == "critical_path"))
        assert sum(d for _, d in xs) == c["path_ns"], mode
        for a, b in zip(xs, xs[1:]):  # in order: no time counted twice
            assert a[0] + a[1] <= b[0], (mode, a, b)
        assert c["path_ns"] <= c["path_span_ns"] <= c["span_ns"], (mode, c)
        if xs:
            assert xs[-1][0] + xs[-1][1] - xs[0][0] <= c["path_span_ns"], (mode, c)


def _docs_cp_rows():
    text = (ROOT / "docs" / "analyze.md").read_text()
    rows = re.findall(r"^\| `[^`]+`; `([^`]+)` \| ([\d,]+) \| ([\d,]+) \| ([+−][\d,]+) µs \|", text, re.M)
    assert len(rows) >= 9, "docs/analyze.md: the table of the default against HTA is gone"
    return rows


@pytest.mark.parametrize("row", _docs_cp_rows(), ids=lambda r: pathlib.Path(r[0]).name[:32])
def test_docs_critical_path_table_is_what_the_tool_prints(run_cli, row):
    """docs/analyze.md's table of the default against HTA: each row's figures are
    what the tool prints for the first ProfilerStep of the file it names."""
    path, default, hta, diff = row
    num = lambda v: int(v.replace(",", "").replace("−", "-"))
    got = {}
    for mode in ([], ["--compat", "hta"]):
        c, _ = analyze(run_cli, "--critical-path", "--cp-range", "ProfilerStep#0", *mode, ROOT / path)
        got[bool(mode)] = round(c["path_ns"] / 1000)
    assert (got[False], got[True]) == (num(default), num(hta)), (path, got)
    assert abs(got[False] - got[True] - num(diff)) <= 1, (path, got)


def test_gpu_copy_of_a_step_is_not_a_step(run_cli, tmp_path):
    """ROCm traces write the GPU's ProfilerStep#N (gpu_user_annotation)
    without a stream: it is not a second, shorter step."""
    ev = [_step(0, 100), _step(5, 30, cat="gpu_user_annotation"), _op(10, 20), launch(12, 2, 1),
          kernel(20, 10, corr=1)]
    t = write(tmp_path / "rocm.json", ev)
    out, _ = analyze(run_cli, t)
    (s,) = out["ranks"][0]["steps"]
    assert s["dur_ns"] == 100_000
    cp, _ = analyze(run_cli, "--critical-path", "--steps", "1", t)
    assert cp["window_ns"] == 100_000


def test_bytes_after_the_gzip_data_are_said(run_cli, tmp_path):
    """zlib's gzread ignores what follows the last gzip member (Python's gzip
    rejects it); we read the trace and say how many bytes were left over, on
    both readers (the inflating thread and the inline one). A trace split
    over two members is one text, with nothing to say."""
    text = json.dumps({"traceEvents": [launch(0, 2, 1), kernel(10, 10, corr=1)]}).encode()
    t = tmp_path / "tail.json.gz"
    t.write_bytes(gzip.compress(text) + b"garbage")
    with pytest.raises(OSError):
        gzip.decompress(t.read_bytes())
    for env in (None, {"TRAINPERF_NO_READER_THREAD": "1"}):
        p = run_cli("analyze", "--json", t, env=env)
        assert p.returncode == 0, p.stderr
        assert "7 byte(s) after the end of the gzip data" in p.stderr, (env, p.stderr)
        assert json.loads(p.stdout)["ranks"][0]["launch"]["count"] == 1
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(text[:40]) + gzip.compress(text[40:]))
    p = run_cli("analyze", "--json", two)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    assert json.loads(p.stdout)["ranks"][0]["launch"]["count"] == 1
