"""trainperf's startup hook, found because `trainperf run` puts this folder first
on PYTHONPATH.

Inert unless TRAINPERF_AUTO=1 and TRAINPERF_RUN_DIR are both set (so a plain
`python` with this folder on its path behaves as without it). When they are,
it installs trainperf's auto-instrumentation, which waits for `import torch`
and imports nothing itself. Either way it then runs the sitecustomize module
this one shadows (the next one on sys.path), as Python would have.

Kept to syntax every Python 3 accepts: it runs in whatever interpreter the
watched command starts.
"""
import os
import sys


def _trainperf_install():
    if os.environ.get("TRAINPERF_AUTO") != "1" or not os.environ.get("TRAINPERF_RUN_DIR"):
        return
    try:
        from trainperf import _autohook
        _autohook.install()
        # W&B / MLflow logging when the script has a run (imports neither).
        from trainperf import _exporters
        _exporters.start()
    except Exception as exc:  # never break the watched program
        sys.stderr.write("trainperf: auto-instrumentation disabled: %s\n" % (exc,))


def _trainperf_chain():
    # Run the sitecustomize we shadow: find it on sys.path past our folder.
    here = os.path.dirname(os.path.abspath(__file__))
    rest = []
    for p in sys.path:
        try:
            if os.path.abspath(p or os.curdir) == here:
                continue
        except (TypeError, ValueError):
            continue
        rest.append(p)
    try:
        import importlib.machinery
        import importlib.util
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as exc:
        sys.stderr.write("trainperf: error in the shadowed sitecustomize: %s\n" % (exc,))


_trainperf_install()
_trainperf_chain()
