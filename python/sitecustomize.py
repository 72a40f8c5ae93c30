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


def _trainperf_importable():
    """Make `import trainperf` work in this interpreter. Already on its path:
    nothing to do. Else, in pip's layout (this file is
    site-packages/trainperf/_hook/sitecustomize.py, and the interpreter is not
    the one trainperf was installed for: `trainperf run -- /usr/bin/python3 ...`
    from a venv), the package is loaded from its own folder alone, never the
    rest of that site-packages, when its extension fits this interpreter.
    Returns None, or the line that says why not and what fixes it."""
    import importlib.machinery
    import importlib.util
    if importlib.util.find_spec("trainperf") is not None:
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.dirname(here)
    if os.path.basename(here) != "_hook" or not os.path.isfile(os.path.join(pkg, "__init__.py")):
        return None  # the import below says what is missing
    import glob
    cores = [os.path.basename(c) for c in glob.glob(os.path.join(pkg, "_core*.so"))]
    fits = [c for c in cores if any(c == "_core" + x for x in importlib.machinery.EXTENSION_SUFFIXES)]
    if cores and not fits:
        # PREFIX/lib/pythonX.Y/site-packages/trainperf: PREFIX/bin/pythonX.Y ran pip
        lib = os.path.basename(os.path.dirname(os.path.dirname(pkg)))
        prefix = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(pkg))))
        owner = os.path.join(prefix, "bin", lib)
        built = cores[0].split(".")[1] if cores[0].count(".") >= 2 else cores[0]
        return ("trainperf: no steps are recorded: %s (Python %d.%d) cannot load trainperf, "
                "installed in %s for %s; run the command with %s, or install trainperf for "
                "this interpreter: %s -m pip install <trainperf's source folder or wheel>"
                % (sys.executable, sys.version_info[0], sys.version_info[1], pkg, built,
                   owner if os.path.exists(owner) else "that interpreter", sys.executable))
    spec = importlib.util.spec_from_file_location(
        "trainperf", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["trainperf"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules["trainperf"]
        raise
    return None


def _trainperf_install():
    if os.environ.get("TRAINPERF_AUTO") != "1" or not os.environ.get("TRAINPERF_RUN_DIR"):
        return
    try:
        why = _trainperf_importable()
        if why:
            sys.stderr.write(why + "\n")
            return
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
