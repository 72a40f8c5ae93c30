"""trainperf's version, from its one source: include/trainperf.h, as the C
library reports it, else the installed package's metadata (made from the
same header by setup.py), else the header of an in-tree checkout."""
import os
import re

__all__ = ["version"]


def _from_header():
    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                     "trainperf.h")
    try:
        with open(h) as f:
            text = f.read()
    except OSError:
        return None
    parts = [re.search(r"#define TPF_VERSION_%s\s+(\d+)" % k, text) for k in
             ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        return None
    return ".".join(m.group(1) for m in parts)


def version(core=None):
    """The version string ("0.1.0"), or "unknown"."""
    if core is not None and getattr(core, "IMPL", "noop") != "noop":
        try:
            return core.version()
        except Exception:
            pass
    try:
        from importlib.metadata import version as _v
        return _v("trainperf")
    except Exception:
        pass
    return _from_header() or "unknown"
