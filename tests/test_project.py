"""Project-wide checks: the exported symbols, banned functions, the public
header on its own, and `make install` with pkg-config."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD, ROOT, SANITIZE

BANNED = re.compile(r"(?<![\w.>])(sprintf|strcpy|strtok|atoi|gets)\s*\(")


def test_shared_library_exports_only_tpf_names(build):
    so = build / "libtrainperf.so"
    out = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                         text=True, check=True).stdout
    names = [l.split()[-1] for l in out.splitlines() if l.strip()]
    public = [n for n in names if n.startswith("tpf_")]
    other = [n for n in names if not n.startswith("tpf_") and n not in ("_init", "_fini")]
    assert "tpf_step_begin" in public and "tpf_strerror" in public
    assert other == [], f"non-API symbols exported: {other}"


def test_no_banned_functions_in_sources():
    hits = []
    for d in ("src", "include", "examples", "python", "bench", "tests/fakes"):
        for p in (ROOT / d).rglob("*.[ch]"):
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                code = line.split("//")[0]
                if BANNED.search(code) and not code.lstrip().startswith(("*", "/*")):
                    hits.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert hits == [], "banned functions (use snprintf, memcpy, strtok_r, strtol):\n" + "\n".join(hits)


@pytest.mark.parametrize("std,extra", [("c99", []), ("c11", ["-DTPF_DISABLE"])])
def test_public_header_stands_alone(tmp_path, std, extra):
    src = tmp_path / "use.c"
    src.write_text('#include <trainperf.h>\n'
                   'int main(void) { TPF_RANGE_PUSH("x"); TPF_RANGE_POP();'
                   ' TPF_COUNTER("c", 1.0); TPF_MARK("m"); TPF_STEP_BEGIN(); TPF_STEP_END(1, 2);'
                   ' tpf_options o = TPF_OPTIONS_INIT; (void)o; return 0; }\n')
    subprocess.run(["cc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-pedantic",
                    "-I", str(ROOT / "include"), *extra, "-c", str(src), "-o",
                    str(tmp_path / "use.o")], check=True)


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config not installed")
def test_make_install_and_pkg_config(tmp_path, build):
    prefix = tmp_path / "prefix"
    subprocess.run(["make", "-s", f"BUILD={build.name}", "install", f"PREFIX={prefix}"],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    for rel in ("bin/trainperf", "lib/libtrainperf.a", "lib/libtrainperf.so",
                "include/trainperf.h", "lib/pkgconfig/trainperf.pc"):
        assert (prefix / rel).exists(), rel
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "trainperf"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    src = tmp_path / "app.c"
    src.write_text('#include <trainperf.h>\n#include <stdio.h>\n'
                   'int main(void) { tpf_step_begin(); tpf_step_end(1, 0);'
                   ' printf("%s %d\\n", tpf_version(), tpf_attached()); return 0; }\n')
    exe = tmp_path / "app"
    # A library built with ASan loads only into a program built with it.
    san = ["-fsanitize=address,undefined"] if SANITIZE else []
    subprocess.run(["cc", *san, str(src), "-o", str(exe), *flags], check=True)
    out = subprocess.run([str(exe)], env=dict(env, LD_LIBRARY_PATH=str(prefix / "lib")),
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0.1.0", "0"]
