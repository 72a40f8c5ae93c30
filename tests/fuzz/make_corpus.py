#!/usr/bin/env python3
"""Build a fuzzing corpus from the Kineto traces in tests/data/traces: small slices of real
events in both layouts (object with traceEvents, bare array, with and without
its closing bracket), a few gzip-compressed, plus edge cases.

    python3 tests/fuzz/make_corpus.py OUT_DIR [TRACE_DIR]
"""
import gzip
import json
import pathlib
import random
import sys


def main():
    out = pathlib.Path(sys.argv[1])
    src = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else
                       pathlib.Path(__file__).resolve().parents[1] / "data" / "traces")
    out.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(6)
    n = 0

    def put(data: bytes, gz=False):
        nonlocal n
        if gz:
            data = gzip.compress(data)
        (out / f"seed-{n:04d}").write_bytes(data)
        n += 1

    for path in sorted(src.glob("*.json.gz")):
        with gzip.open(path, "rt") as f:
            d = json.load(f)
        events = d["traceEvents"] if isinstance(d, dict) else d
        meta = {k: v for k, v in d.items() if k not in ("traceEvents", "deviceProperties")} \
            if isinstance(d, dict) else {}
        for i in range(6):
            k = rnd.randint(3, 40)
            start = rnd.randrange(max(1, len(events) - k))
            chunk = events[start:start + k]
            # keep kernels with their launches now and then: the analyses join them
            if i % 2 and events:
                corr = {e.get("args", {}).get("correlation") for e in chunk} - {None}
                chunk += [e for e in events if e.get("args", {}).get("correlation") in corr][:20]
            obj = dict(meta, traceEvents=chunk)
            put(json.dumps(obj).encode(), gz=(i == 5))
            if i < 2:
                arr = "[\n" + ",\n".join(json.dumps(e) for e in chunk)
                put((arr + ("\n]" if i == 0 else ",\n")).encode())
    for s in (b"", b"[", b"{}", b"[]", b'{"traceEvents":[{}]}', b'[{"ts":1e400,"dur":-0.5}]',
              b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"\\ud800x","ts":1,"dur":2,'
              b'"args":{"stream":"7","correlation":1.5}}]}',
              # counter events in both member orders, ids, several series; a copy with its GB/s
              b'{"traceEvents":[{"pid":0,"ts":5,"args":{"Queue Length":1},"ph":"C","name":"Queue Length","id":7},'
              b'{"ph":"C","name":"ctr","pid":1,"ts":2.5,"args":{"a":1e308,"b":-3,"c":"x","d":[1]}},'
              b'{"ph":"C","name":"ctr","pid":1,"ts":2.5,"args":{"a":2}},'
              b'{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pageable -> Device)","pid":0,"tid":7,"ts":3,'
              b'"dur":0,"args":{"stream":7,"correlation":4,"bytes":256,"memory bandwidth (GB/s)":0.14}}]}'):
        put(s)
    print(f"{n} seeds in {out}")


if __name__ == "__main__":
    main()
