"""Build the trainperf Python package, its C extension and the CLI.

`pip install .` works from a clean clone: the extension compiles the library
sources (src/{core,probe,collect,...}/*.c) into itself, so no prior `make` is
needed, and the `trainperf` command (the C binary, built from src/cli/ and the
same library sources) is installed as the package's script, as py-spy and ruff
ship theirs; `python -m trainperf` runs it too. The zero-code hook
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

from setuptools import Distribution, Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.install_scripts import install_scripts
# setuptools has no build_scripts of its own; `distutils` here is the copy
# setuptools provides (imported after setuptools, so even on Python 3.12+).
from distutils.command.build_scripts import build_scripts  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_MODULES = ("core", "probe", "collect", "watch", "record", "report", "trace", "session", "util")
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
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
        from distutils.ccompiler import new_compiler
        from distutils.sysconfig import customize_compiler
        cc = new_compiler()
        customize_compiler(cc)
        tmp = os.path.join(rel("python", "build"), "cli-obj")
        objs = cc.compile(lib_sources(), output_dir=tmp, include_dirs=["include", "src"],
                          macros=[("TPF_BUILDING_LIBRARY", "1")],
                          extra_postargs=CFLAGS + ["-fvisibility=hidden", "-fPIC"])
        objs += cc.compile(sorted(glob.glob(rel("src", "cli", "*.c"))), output_dir=tmp,
                           include_dirs=["include", "src"], extra_postargs=CFLAGS)
        os.makedirs(self.build_dir, exist_ok=True)
        cc.link_executable(objs, "trainperf", output_dir=self.build_dir, libraries=LIBS)
        os.chmod(os.path.join(self.build_dir, "trainperf"), 0o755)


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


static_lib = os.environ.get("TRAINPERF_STATIC_LIB", "")
sources = [rel("python", "trainperf", "_core.c"), rel("python", "trainperf", "_pystack.c")]
extra_objects = []
depends = sorted(glob.glob(rel("include", "*.h"))) + [rel("python", "trainperf", "_pystack.h")]
if static_lib:
    extra_objects = [static_lib]
    depends.append(static_lib)
else:
    sources += lib_sources()
    for m in LIB_MODULES:
        depends += sorted(glob.glob(rel("src", m, "*.h")))

core = Extension(
    "trainperf._core",
    sources=sources,
    include_dirs=[rel("include"), rel("src")],
    define_macros=[("TPF_BUILDING_LIBRARY", "1")],
    extra_compile_args=CFLAGS + ["-fvisibility=hidden"],
    extra_objects=extra_objects,
    libraries=LIBS,
    depends=depends,
)

setup(
    version=read_version(),
    package_dir={"": rel("python")},
    packages=["trainperf"],
    package_data={"trainperf": ["py.typed", "*.pyi"]},
    ext_modules=[core],
    distclass=WithCLI,
    cmdclass={"build_py": BuildPy, "build_scripts": BuildCLI, "install_scripts": InstallCLI},
    # Keep setuptools' temporary tree out of the C build folders (./build is make's).
    options={"build": {"build_base": rel("python", "build")},
             "egg_info": {"egg_base": rel("python")}},
)
