"""Time series of `trainperf analyze`: queue length per stream and memory-copy
bandwidth per kind over time, and the counter tracks (`ph: "C"`) a trace
carries, in fixed bins (per bin: time-weighted mean and maximum).

The reference for queue length and bandwidth is HTA itself: the fixture
critical_path_alexnet_with_counters.json.gz is what HTA 0.5.0's
generate_trace_with_counters() wrote for critical_path_alexnet.json.gz, its
series as counter events. Reading those counters back and computing the
series from the launches and copies must give the same bins."""
import gzip
import json
import random
from decimal import Decimal

import pytest

from conftest import ROOT

HTA = ROOT / "tests" / "data" / "hta"
WITH_COUNTERS = HTA / "critical_path_alexnet_with_counters.json.gz"


def analyze(run_cli, *args):
    p = run_cli("analyze", "--json", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def ns(us):
    """A trace's microseconds as integer nanoseconds, exactly (a double
    times 1000 is not exact past 2**53 ns)."""
    return int(Decimal(repr(us)) * 1000)


def series(rank):
    return {(s["kind"], s["name"]): s for s in rank["time_series"]["series"]}


def ref_counter_bins(samples, t0, t1, w, n):
    """Reference: a counter holds each sample's value until the next one
    (the last until the end); per bin the mean over the time it has a value
    and the maximum, None where it has none. samples: [(ts_ns, value)]."""
    samples = sorted(samples, key=lambda s: s[0])
    mean, mx = [], []
    for i in range(n):
        lo, hi = t0 + i * w, min(t0 + (i + 1) * w, t1)
        area = cov = 0.0
        top = None
        for k, (ts, v) in enumerate(samples):
            end = samples[k + 1][0] if k + 1 < len(samples) else t1
            a, e = max(ts, lo), min(end, hi)
            if e > a:
                area += v * (e - a)
                cov += e - a
            if (e > a) or (lo <= ts < hi) or (i == n - 1 and ts == hi):
                top = v if top is None else max(top, v)
        mean.append(area / cov if cov else top)
        mx.append(top)
    return mean, mx


@pytest.mark.parametrize("bins", [200, 37])
def test_series_equal_htas_own_counters_bin_by_bin(run_cli, bins):
    """--compat hta: queue length per stream and copy bandwidth per kind,
    computed from launches and copies, equal the counters HTA wrote into the
    same trace, in every bin (maximum), and in the mean where HTA's counter
    covers the whole bin."""
    with gzip.open(WITH_COUNTERS, "rt") as f:
        ev = json.load(f)["traceEvents"]
    counters = [e for e in ev if e.get("ph") == "C"]
    out = analyze(run_cli, "--compat", "hta", "--bins", str(bins), WITH_COUNTERS)
    (r,) = out["ranks"]
    ts = r["time_series"]
    assert ts["counter_events"] == len(counters)
    assert 1 <= ts["bins"] <= bins and ts["bins"] * ts["bin_ns"] >= ts["end_ns"] - ts["start_ns"]
    s = series(r)
    pairs = []
    for (kind, name), x in s.items():
        if kind == "queue_length":
            pairs.append((x, s[("counter", f"Queue Length (id {x['stream']})")]))
        elif kind == "memcpy_bandwidth":
            pairs.append((x, s[("counter", f"{name}: Memcpy BW")]))
    kinds = {x["kind"] for x, _ in pairs}
    assert kinds == {"queue_length", "memcpy_bandwidth"} and len(pairs) == 4
    compared = 0
    for ours, theirs in pairs:
        assert ours["max"] == pytest.approx(theirs["max"], rel=1e-6)
        for i in range(ts["bins"]):
            t = theirs["bin_max"][i]
            if t is None:  # before HTA's first change: nothing queued or copied
                assert ours["bin_max"][i] == 0
                continue
            assert ours["bin_max"][i] == pytest.approx(t, rel=1e-6, abs=1e-9), (ours["name"], i)
            if i and theirs["bin_max"][i - 1] is not None:
                assert ours["bin_mean"][i] == pytest.approx(theirs["bin_mean"][i], rel=1e-6, abs=1e-12)
                compared += 1
    assert compared > 20


def test_counter_tracks_as_written_are_read_back(run_cli):
    """The counters of the fixture, checked against a reference step function
    computed here from the events (values held until the next sample)."""
    with gzip.open(WITH_COUNTERS, "rt") as f:
        ev = json.load(f)["traceEvents"]
    out = analyze(run_cli, "--bins", "50", WITH_COUNTERS)
    (r,) = out["ranks"]
    ts = r["time_series"]
    s = series(r)
    by = {}
    for e in ev:
        if e.get("ph") != "C":
            continue
        (key, v), = e["args"].items()
        label = f"{e['name']} (id {e['id']})" if "id" in e else e["name"]
        if key != e["name"]:
            label += f": {key}"
        by.setdefault(label, []).append((ns(e["ts"]), v))
    assert {n for k, n in s if k == "counter"} == set(by)
    for label, samples in by.items():
        x = s[("counter", label)]
        assert x["samples"] == len(samples)
        assert x["max"] == pytest.approx(max(v for _, v in samples), rel=1e-9)
        mean, mx = ref_counter_bins(samples, ts["start_ns"], ts["end_ns"], ts["bin_ns"], ts["bins"])
        assert x["bin_max"] == pytest.approx(mx, rel=1e-9), label
        for a, b in zip(x["bin_mean"], mean):
            assert (a is None and b is None) or a == pytest.approx(b, rel=1e-9), label


def test_counters_any_member_order_ids_several_keys(run_cli, tmp_path):
    """Counter events written in either member order ("ph" before or after
    "args"), with ids and several series per event; random but seeded."""
    rnd = random.Random(17)
    events, ref = [], {}
    for i in range(400):
        ts = rnd.randrange(0, 10_000_000) / 1000  # us, ns resolution
        name = rnd.choice(["mem", "util"])
        cid = rnd.choice([None, 3])
        args = {"a": rnd.randrange(0, 100), "b": round(rnd.uniform(-5, 5), 3)}
        e = {"name": name, "pid": 1, "ts": ts, "args": args}
        e = {"ph": "C", **e} if i % 2 else {**e, "ph": "C"}
        if cid is not None:
            e["id"] = cid
        events.append(e)
        for k, v in args.items():
            label = f"{name} (id {cid})" if cid is not None else name
            ref.setdefault(f"{label}: {k}", []).append((ns(ts), v))
    events.append({"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 0, "dur": 12000})
    trace = tmp_path / "counters.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = analyze(run_cli, "--bins", "23", trace)
    (r,) = out["ranks"]
    ts = r["time_series"]
    assert ts["counter_events"] == 400 and ts["end_ns"] == 12_000_000 and ts["start_ns"] == 0
    s = series(r)
    assert {n for k, n in s if k == "counter"} == set(ref)
    for label, samples in ref.items():
        # two samples of one series at one time: the later in the file holds
        samples = list({t: v for t, v in sorted(samples, key=lambda x: x[0])}.items())
        x = s[("counter", label)]
        mean, mx = ref_counter_bins(samples, ts["start_ns"], ts["end_ns"], ts["bin_ns"], ts["bins"])
        for a, b in zip(x["bin_mean"], mean):
            assert (a is None and b is None) or a == pytest.approx(b, rel=1e-9, abs=1e-9), label


def test_bandwidth_conserves_the_bytes_and_queue_agrees_with_its_table(run_cli):
    """Default mode on a real CUDA trace: the bandwidth's bins add up to the
    bytes the copies moved (Kineto's GB/s x duration); each stream's highest
    queue over time is its queue-length row's maximum."""
    trace = HTA / "critical_path_alexnet.json.gz"
    with gzip.open(trace, "rt") as f:
        ev = json.load(f)["traceEvents"]
    out = analyze(run_cli, "--bins", "64", trace)
    (r,) = out["ranks"]
    ts = r["time_series"]
    s = series(r)
    moved = {}
    for e in ev:
        if e.get("cat") in ("gpu_memcpy", "gpu_memset"):
            kind = "Memset" if e["name"].startswith("Memset") else e["name"][:11]
            moved[kind] = moved.get(kind, 0.0) + e["args"]["memory bandwidth (GB/s)"] * max(e["dur"], 1) * 1000
    assert {n for k, n in s if k == "memcpy_bandwidth"} == set(moved)
    for kind, nbytes in moved.items():
        x = s[("memcpy_bandwidth", kind)]
        widths = [min(ts["bin_ns"], ts["end_ns"] - ts["start_ns"] - i * ts["bin_ns"]) for i in range(ts["bins"])]
        got = sum(m * w for m, w in zip(x["bin_mean"], widths))
        assert got == pytest.approx(nbytes, rel=1e-5), kind
        assert all(mx >= m - 1e-9 for m, mx in zip(x["bin_mean"], x["bin_max"]))
    table = {q["stream"]: q["max"] for q in r["queue_length"]}
    qs = {x["stream"]: x for (k, _), x in s.items() if k == "queue_length"}
    assert set(qs) == set(table)
    for stream, x in qs.items():
        assert x["max"] == table[stream] == max(x["bin_max"])
    text = run_cli("analyze", trace).stdout
    assert "Over time: " in text and "stream 7" in text


def test_series_are_capped_and_the_rest_counted(run_cli, tmp_path):
    """Memory stays bounded: past 256 series, samples are counted, not kept."""
    events = [{"ph": "C", "name": f"c{i}", "pid": 0, "ts": i, "args": {"v": i}} for i in range(300)]
    trace = tmp_path / "many.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = analyze(run_cli, trace)
    ts = out["ranks"][0]["time_series"]
    assert len(ts["series"]) == 256 and ts["dropped_samples"] == 44
    p = run_cli("analyze", trace)
    assert p.returncode == 0 and "44 samples of series past the 256 kept" in p.stdout


@pytest.mark.parametrize("bad", ["0", "1001", "x"])
def test_bins_must_be_a_sane_count(run_cli, bad):
    p = run_cli("analyze", "--bins", bad, WITH_COUNTERS)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "--bins" in p.stderr


def test_trace_with_counters_reads_back_as_htas(run_cli, tmp_path):
    """--counters writes what HTA's generate_trace_with_counters writes:
    the trace's events unchanged, plus "Queue Length" per stream and
    "Memcpy BW" per kind of copy; read back, its counter tracks equal those
    of the file HTA wrote (the fixture), bin by bin."""
    src = HTA / "critical_path_alexnet.json.gz"
    out = tmp_path / "with_counters.json"
    p = run_cli("analyze", "--compat", "hta", "--counters", out, src)
    assert p.returncode == 0, p.stderr
    assert f"written to {out}" in p.stdout
    with gzip.open(src, "rt") as f:
        orig = json.load(f)["traceEvents"]
    written = json.loads(out.read_text())["traceEvents"]
    assert [e for e in written if e.get("ph") != "C"] == orig
    assert not list(tmp_path.glob("*.tmp*"))

    def counters(path):
        r = analyze(run_cli, "--bins", "200", path)["ranks"][0]
        return r["time_series"], {x["name"]: x for x in r["time_series"]["series"] if x["kind"] == "counter"}

    ts_ours, ours = counters(out)
    ts_hta, theirs = counters(WITH_COUNTERS)
    assert (ts_ours["start_ns"], ts_ours["bin_ns"]) == (ts_hta["start_ns"], ts_hta["bin_ns"])
    assert set(ours) == set(theirs) and len(ours) == 4
    for name, t in theirs.items():
        o = ours[name]
        assert o["samples"] == t["samples"], name
        for a, b in zip(o["bin_max"] + o["bin_mean"], t["bin_max"] + t["bin_mean"]):
            assert (a is None and b is None) or a == pytest.approx(b, rel=1e-6, abs=1e-7), name


def test_counters_option_errors(run_cli, tmp_path):
    a = HTA / "trace_compare_base.json.gz"
    b = HTA / "trace_compare_test.json.gz"
    for args in (["--counters", tmp_path / "o.json", a, b],
                 ["--diff", "--counters", tmp_path / "o.json", a, b]):
        p = run_cli("analyze", *args)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--counters" in p.stderr
    p = run_cli("analyze", "--counters", tmp_path / "no" / "such" / "dir.json", a)
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and "cannot write" in p.stderr
