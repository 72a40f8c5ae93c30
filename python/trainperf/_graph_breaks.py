"""Graph breaks made readable: where, why, and what to try (used by
torch_helpers.graph_break_report and the FindGraphBreaks callbacks).

torch._dynamo's reasons carry "Explanation:" and "Hint:" lines in recent
torch; they are kept as the suggested fixes. Older or terser reasons get a
fix from the small table below, matched on the reason's text."""
import os
import re
import time

__all__ = ["parse_reason", "suggest", "format_log", "write_log"]

# (pattern on the reason, suggested fix) — first match wins.
_FIXES = [
    (r"\.item\(\)|capture_scalar_outputs",
     "keep the value a tensor, or set torch._dynamo.config.capture_scalar_outputs = True"),
    (r"\bprint\b|logging",
     "move the print/log out of the compiled code, or add the function to "
     "torch._dynamo.config.reorderable_logging_functions"),
    (r"data.dependent|nonzero|dynamic.shape|unbacked",
     "avoid shapes that depend on tensor values, or set "
     "torch._dynamo.config.capture_dynamic_output_shape_ops = True"),
    (r"numpy|\.tolist\(\)|\.cpu\(\)|\.numpy\(\)",
     "keep the computation in torch tensors inside the compiled region"),
    (r"generic_jump|jump|if.*Tensor|data-dependent branch|condition",
     "branch on tensor values with torch.where / torch.cond instead of Python if"),
    (r"skip|disable|torch\._dynamo\.disable|not supported|Unsupported",
     "move the unsupported call out of the compiled function, or wrap a pure function with "
     "torch.compiler.allow_in_graph"),
]


def parse_reason(text):
    """(summary, explanation, hints) of one dynamo break reason."""
    lines = [ln.strip() for ln in str(text).splitlines()]
    summary = next((ln for ln in lines if ln), "")
    expl, hints = "", []
    for ln in lines:
        if ln.startswith("Explanation:"):
            expl = ln[len("Explanation:"):].strip()
        elif ln.startswith("Hint:"):
            h = ln[len("Hint:"):].strip()
            if "report an issue" not in h.lower():
                hints.append(h)
    return summary, expl, hints


def suggest(text):
    """Suggested fixes for a break reason: dynamo's own hints, else the table's."""
    _, _, hints = parse_reason(text)
    if hints:
        return hints
    for pat, fix in _FIXES:
        if re.search(pat, str(text), re.IGNORECASE):
            return [fix]
    return ["move this code out of the compiled region (torch.compiler.disable) or rewrite it "
            "with torch operations"]


def format_log(rep):
    """The report of graph_break_report as text for people."""
    out = ["trainperf graph-break report (%s, torch %s)"
           % (time.strftime("%Y-%m-%d %H:%M:%S"), rep.get("torch", "?"))]
    if rep.get("error"):
        out.append("error: %s" % rep["error"])
        return "\n".join(out) + "\n"
    out.append("target: %s" % rep.get("target", "?"))
    out.append("graphs: %s, graph breaks: %s, ops captured: %s, explain took %.2f s"
               % (rep.get("graph_count"), rep.get("graph_break_count"), rep.get("op_count"),
                  rep.get("compile_s") or 0.0))
    breaks = rep.get("breaks") or []
    if not breaks:
        out.append("\nNo graph breaks: the function compiles as one graph.")
    for i, b in enumerate(breaks, 1):
        out.append("")
        out.append("break %d: %s" % (i, b.get("summary") or b.get("reason", "").split("\n")[0]))
        for w in b.get("where") or []:
            out.append("  at %s" % w)
        if b.get("code"):
            out.append("     %s" % b["code"])
        if b.get("explanation"):
            out.append("  why: %s" % b["explanation"])
        for f in b.get("fixes") or []:
            out.append("  fix: %s" % f)
    fg = rep.get("fullgraph")
    if fg is not None:
        out.append("")
        if fg.get("ok"):
            out.append("fullgraph=True: compiles and runs as one graph")
        else:
            out.append("fullgraph=True: fails: %s" % fg.get("error", "").split("\n")[0])
            for f in fg.get("fixes") or []:
                out.append("  fix: %s" % f)
    return "\n".join(out) + "\n"


def write_log(rep, path):
    """Write format_log(rep) to path (its folder made); returns path."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        f.write(format_log(rep))
    return path
