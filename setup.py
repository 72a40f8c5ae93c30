"""Build the trainperf Python package and its C extension.

`pip install .` works from a clean clone: the extension compiles the library
sources (src/{core,probe,collect,watch,record,report,trace,session,util}/*.c) into itself, so no
prior `make` is needed. `make python` instead links the static library it has
just built (TRAINPERF_STATIC_LIB), which is faster and keeps one set of objects.
"""
import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_MODULES = ("core", "probe", "collect", "watch", "record", "report", "trace", "session", "util")


# setuptools wants paths relative to the folder of setup.py.
os.chdir(HERE)


def rel(*parts):
    return os.path.join(*parts)


static_lib = os.environ.get("TRAINPERF_STATIC_LIB", "")
sources = [rel("python", "trainperf", "_core.c")]
extra_objects = []
depends = sorted(glob.glob(rel("include", "*.h")))
if static_lib:
    extra_objects = [static_lib]
    depends.append(static_lib)
else:
    for m in LIB_MODULES:
        sources += sorted(glob.glob(rel("src", m, "*.c")))
        depends += sorted(glob.glob(rel("src", m, "*.h")))

core = Extension(
    "trainperf._core",
    sources=sources,
    include_dirs=[rel("include"), rel("src")],
    define_macros=[("TPF_BUILDING_LIBRARY", "1")],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-O2",
                        "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
    extra_objects=extra_objects,
    libraries=["z", "pthread", "m", "dl"],
    depends=depends,
)

setup(
    name="trainperf",
    version="0.1.0",
    description="Performance monitor and profiler for ML training (Python binding)",
    package_dir={"": rel("python")},
    packages=["trainperf"],
    ext_modules=[core],
    python_requires=">=3.8",
    # Keep setuptools' temporary tree out of the C build folders (./build is make's).
    options={"build": {"build_base": rel("python", "build")},
             "egg_info": {"egg_base": rel("python")}},
)
