"""`python -m trainperf ARGS...` runs the `trainperf` command (the C binary)
with ARGS: the one pip installed beside this interpreter's scripts, else an
in-tree build (build/trainperf), else `trainperf` on PATH."""
import os
import shutil
import sys
import sysconfig

__all__ = ["find_cli", "main"]


def find_cli():
    """The path of the trainperf command, or None."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    cands = []
    for scheme in (None, "posix_user"):
        try:
            d = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        cands.append(os.path.join(d, "trainperf"))
    cands.append(os.path.join(os.path.dirname(sys.executable), "trainperf"))
    root = os.path.dirname(os.path.dirname(pkg))
    cands.append(os.path.join(root, os.environ.get("TRAINPERF_BUILD", "build"), "trainperf"))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("trainperf")


def _hook_dir():
    pkg = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(pkg, "_hook"), os.path.dirname(pkg)):
        if os.path.isfile(os.path.join(d, "sitecustomize.py")):
            return d
    return None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    exe = find_cli()
    if exe is None:
        sys.stderr.write("trainperf: error: the trainperf command is not installed with this "
                         "package (pip install trainperf, or `make` in a checkout)\n")
        return 2
    env = dict(os.environ)
    hook = _hook_dir()
    if hook and not env.get("TRAINPERF_PYTHON_DIR"):
        env["TRAINPERF_PYTHON_DIR"] = hook
    os.execve(exe, [exe] + argv, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
