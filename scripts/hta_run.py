#!/usr/bin/env python3
"""Run HolisticTraceAnalysis on one trace and print its numbers as JSON.

Used by tests/test_analyze_hta.py (inside the HTA virtual environment) and by
bench/bench_analyze.sh. Times are HTA's microseconds.

    python hta_run.py TRACE [RANK]
    python hta_run.py TRACE --critical-path ANNOTATION INSTANCE

With --critical-path, "window" names the range HTA took: the INSTANCE-th
row (in file order) whose name contains ANNOTATION.
"""
import json
import logging
import math
import sys
import warnings


def _version():
    from importlib import metadata
    for dist in ("HolisticTraceAnalysis", "traceinsight"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return None


def main():
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis

    path = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "--critical-path":
        # python hta_run.py TRACE --critical-path ANNOTATION INSTANCE
        ta = TraceAnalysis(trace_files={0: path})
        inst = None if sys.argv[4] == "none" else int(sys.argv[4])  # none: the whole trace
        window = None
        if sys.argv[3]:
            df, st = ta.t.get_trace(0), ta.t.symbol_table
            ids = [v for k, v in st.get_sym_id_map().items() if sys.argv[3] in k]
            rows = df[df.name.isin(ids)]
            if len(rows) > (inst or 0):
                window = st.get_sym_table()[rows.name.iloc[inst or 0]]
        g, ok = ta.critical_path_analysis(rank=0, annotation=sys.argv[3], instance_id=inst)
        bd = g.get_critical_path_breakdown()
        json.dump({"ok": bool(ok), "window": window, "path_us": float(bd["duration"].sum()), "edges": int(len(bd)),
                   "by_type": {k: float(v) for k, v in bd.groupby("type")["duration"].sum().items()}},
                  sys.stdout)
        sys.stdout.write("\n")
        return
    rank = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    ta = TraceAnalysis(trace_files={rank: path})
    out = {"rank": rank, "version": _version()}

    def num(v):
        v = float(v)
        return None if math.isnan(v) else v

    try:
        t = ta.get_temporal_breakdown(visualize=False)
        row = t.iloc[0]
        out["temporal"] = {k: num(row[k]) for k in (
            "idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)",
            "idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg")}
    except Exception as e:  # noqa: BLE001 - HTA fails on traces without GPU rows
        out["temporal_error"] = repr(e)
    try:
        kt, _ = ta.get_gpu_kernel_breakdown(visualize=False)
        out["kernel_types"] = {r["kernel_type"]: [num(r["sum"]), num(r["percentage"])]
                               for _, r in kt.iterrows()}
    except Exception as e:  # noqa: BLE001
        out["kernel_types_error"] = repr(e)
    try:
        idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
        out["idle"] = [[int(r["stream"]), r["idle_category"], num(r["idle_time"])]
                       for _, r in idle.iterrows()]
    except Exception as e:  # noqa: BLE001
        out["idle_error"] = repr(e)
    try:
        ov = ta.get_comm_comp_overlap(visualize=False)
        out["overlap_pctg"] = num(ov.iloc[0]["comp_comm_overlap_pctg"])
    except Exception as e:  # noqa: BLE001
        out["overlap_error"] = repr(e)
    try:
        ls = ta.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
        out["launch"] = {
            "count": int(len(ls)),
            "cpu_sum": num(ls["cpu_duration"].sum()),
            "gpu_sum": num(ls["gpu_duration"].sum()),
            "delay_sum": num(ls["launch_delay"].sum()),
            "delay_max": num(ls["launch_delay"].max()) if len(ls) else 0.0,
        }
    except Exception as e:  # noqa: BLE001
        out["launch_error"] = repr(e)
    try:
        from hta.analyzers.trace_counters import TraceCounters
        q = TraceCounters.get_queue_length_summary(ta.t, ranks=[rank])
        if q is not None:
            out["queue_max"] = {str(int(s)): num(row[("queue_length", "max")]) for (_, s), row in q.iterrows()}
    except Exception as e:  # noqa: BLE001
        out["queue_error"] = repr(e)
    try:
        from hta.analyzers.trace_counters import TraceCounters
        bw = TraceCounters.get_memory_bw_summary(ta.t, ranks=[rank])
        if bw is not None:  # the peak of the summed GB/s of the copies running, per kind
            out["membw_max"] = {name: num(row[("memory_bw_gbps", "max")]) for (_, name), row in bw.iterrows()}
    except Exception as e:  # noqa: BLE001
        out["membw_error"] = repr(e)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
