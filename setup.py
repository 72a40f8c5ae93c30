"""Build the trainperf Python package, its C extension and the CLI.

`pip install .` works from a clean clone: the extension compiles the library
sources (src/{core,probe,collect,...}/*.c) into itself, so no prior `make` is
needed, and the `trainperf` command (the C binary, built from src/cli/ and the
same library) is installed as the package's script, as py-spy and ruff ship
theirs; `python -m trainperf` runs it too. The library is compiled once, into a
static archive both link (each takes only the objects it uses), and every
compile runs in parallel, one per CPU (TRAINPERF_JOBS=N to choose). The zero-code hook
(python/sitecustomize.py) goes into the package as trainperf/_hook/, where
the command finds it. `make python` instead links the static library it has
just built (TRAINPERF_STATIC_LIB), which is faster and keeps one set of objects.

Metadata is in pyproject.toml (PEP 621); the version comes from
include/trainperf.h, its one source.
"""
import glob
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

from setuptools import Command, Distribution, Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.install_scripts import install_scripts
# setuptools has no build_scripts of its own; `distutils` here is the copy
# setuptools provides (imported after setuptools, so even on Python 3.12+).
from distutils.command.build_scripts import build_scripts  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_MODULES = ("core", "probe", "collect", "watch", "record", "report", "trace", "session", "util")
# -g0: the interpreter's own CFLAGS ask for debug info, which the wheel does not need
# (it trebles the size of the extension and the command, and slows each compile).
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-g0", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
LIBS = ["z", "pthread", "m", "dl"]


# setuptools wants paths relative to the folder of setup.py.
os.chdir(HERE)


def rel(*parts):
    return os.path.join(*parts)


def read_version():
    with open(rel("include", "trainperf.h")) as f:
        text = f.read()
    return ".".join(re.search(r"#define TPF_VERSION_%s\s+(\d+)" % k, text).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))


def lib_sources():
    out = []
    for m in LIB_MODULES:
        out += sorted(glob.glob(rel("src", m, "*.c")))
    return out


def jobs():
    n = os.environ.get("TRAINPERF_JOBS", "")
    if n.isdigit() and int(n) > 0:
        return int(n)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def compile_parallel(compile_one, sources, **kw):
    """distutils compiles one source after another: here each is its own
    compile, jobs() at a time (each is a compiler process; the threads wait)."""
    with ThreadPoolExecutor(max(1, min(jobs(), len(sources)))) as pool:
        done = [pool.submit(compile_one, [s], **kw) for s in sources]
        return [o for f in done for o in f.result()]


def new_cc():
    from distutils.ccompiler import new_compiler
    from distutils.sysconfig import customize_compiler
    cc = new_compiler()
    customize_compiler(cc)
    return cc


# The library as the wheel's two programs link it: TRAINPERF_STATIC_LIB (make's),
# else the archive BuildLib makes from src/ under python/build.
STATIC_LIB = os.environ.get("TRAINPERF_STATIC_LIB", "")
WHEEL_LIB_DIR = rel("python", "build", "tpflib")
WHEEL_LIB = os.path.join(WHEEL_LIB_DIR, "libtrainperf.a")


class BuildLib(Command):
    """Compile the library sources once, in parallel, into WHEEL_LIB."""
    description = "compile the trainperf library for the extension and the command"
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        if STATIC_LIB:
            return
        cc = new_cc()
        srcs = lib_sources()
        print("trainperf: compiling the library (%d files, %d at a time)" % (len(srcs), jobs()))
        objs = compile_parallel(cc.compile, srcs, output_dir=os.path.join(WHEEL_LIB_DIR, "obj"),
                                include_dirs=["include", "src"],
                                macros=[("TPF_BUILDING_LIBRARY", "1")],
                                extra_postargs=CFLAGS + ["-fvisibility=hidden", "-fPIC"])
        if os.path.exists(WHEEL_LIB):
            os.remove(WHEEL_LIB)
        cc.create_static_lib(objs, "trainperf", output_dir=WHEEL_LIB_DIR)


class BuildExt(build_ext):
    """The extension links the library archive; its own sources compile in parallel."""

    def run(self):
        self.run_command("build_tpflib")
        super().run()

    def build_extensions(self):
        self.compiler.compile = lambda sources, _one=self.compiler.compile, **kw: \
            compile_parallel(_one, sources, **kw)
        super().build_extensions()


class BuildPy(build_py):
    """The package, plus the zero-code hook as trainperf/_hook/sitecustomize.py
    (one source: python/sitecustomize.py)."""

    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "trainperf", "_hook")
        os.makedirs(dst, exist_ok=True)
        shutil.copyfile(rel("python", "sitecustomize.py"), os.path.join(dst, "sitecustomize.py"))


class BuildCLI(build_scripts):
    """Compile the `trainperf` command into the scripts folder of the build."""

    def finalize_options(self):
        super().finalize_options()
        self.scripts = []

    def get_source_files(self):
        return sorted(glob.glob(rel("src", "cli", "*.c"))) + sorted(glob.glob(rel("src", "cli", "*.h")))

    def run(self):
        self.run_command("build_tpflib")
        cc = new_cc()
        srcs = sorted(glob.glob(rel("src", "cli", "*.c")))
        print("trainperf: compiling the command (%d files, %d at a time)" % (len(srcs), jobs()))
        objs = compile_parallel(cc.compile, srcs, output_dir=os.path.join(rel("python", "build"), "cli-obj"),
                                include_dirs=["include", "src"], extra_postargs=CFLAGS)
        os.makedirs(self.build_dir, exist_ok=True)
        cc.link_executable(objs + [STATIC_LIB or WHEEL_LIB], "trainperf", output_dir=self.build_dir,
                           libraries=LIBS)
        os.chmod(os.path.join(self.build_dir, "trainperf"), 0o755)
        # the CUPTI injection library beside the command, where `trainperf run`
        # looks for it (docs/gpu.md); it loads CUPTI itself at run time
        inj = cc.compile([rel("src", "gpu", "cupti_inject.c")],
                         output_dir=os.path.join(rel("python", "build"), "gpu-obj"),
                         include_dirs=["include", "src"], macros=[("TPF_BUILDING_LIBRARY", "1")],
                         extra_postargs=CFLAGS + ["-fvisibility=hidden", "-fPIC"])
        cc.link_shared_object(inj + [STATIC_LIB or WHEEL_LIB], "libtrainperf-cupti.so",
                              output_dir=self.build_dir, libraries=LIBS,
                              extra_postargs=["-Wl,--version-script=" + rel("src", "gpu", "cupti_inject.map")])


class InstallCLI(install_scripts):
    """Install the built command (setuptools' own install_scripts only writes
    entry-point wrappers and copies listed scripts)."""

    def run(self):
        self.run_command("build_scripts")
        self.outfiles = self.copy_tree(self.build_dir, self.install_dir)


class WithCLI(Distribution):
    """A distribution whose script is built (BuildCLI), not copied."""

    def has_scripts(self):
        return True


sources = [rel("python", "trainperf", "_core.c"), rel("python", "trainperf", "_pystack.c")]
depends = sorted(glob.glob(rel("include", "*.h"))) + [rel("python", "trainperf", "_pystack.h"),
                                                        STATIC_LIB or WHEEL_LIB]

core = Extension(
    "trainperf._core",
    sources=sources,
    include_dirs=[rel("include"), rel("src")],
    define_macros=[("TPF_BUILDING_LIBRARY", "1")],
    extra_compile_args=CFLAGS + ["-fvisibility=hidden"],
    extra_objects=[STATIC_LIB or WHEEL_LIB],
    libraries=LIBS,
    depends=depends,
)

setup(
    version=read_version(),
    package_dir={"": rel("python")},
    packages=["trainperf"],
    package_data={"trainperf": ["py.typed", "*.pyi"]},
    # the extension's C sources are in the sdist (MANIFEST.in), not in the wheel
    exclude_package_data={"trainperf": ["*.c", "*.h"]},
    ext_modules=[core],
    distclass=WithCLI,
    cmdclass={"build_py": BuildPy, "build_tpflib": BuildLib, "build_ext": BuildExt,
              "build_scripts": BuildCLI, "install_scripts": InstallCLI},
    # Keep setuptools' temporary tree out of the C build folders (./build is make's).
    options={"build": {"build_base": rel("python", "build")},
             "egg_info": {"egg_base": rel("python")}},
)
