#!/usr/bin/env python3
"""Install test: `cmake --install` into a scratch prefix (given relative, with a space in its
name), then a consumer project built out of tree against it — once with find_package(strata),
once with `pkg-config --cflags --libs strata` — runs, and strata's statistics (strata_stats_get
in the program, STRATA_STATS_FILE at exit) show that strata served its allocations.  Every
installed header compiles on its own (C headers as C99, C11 and C++11; C++ headers as C++20),
with clang too where it is installed; strata.pc is right for absolute CMAKE_INSTALL_LIBDIR and
_INCLUDEDIR; a C project (no C++ enabled) links strata::pool's C API and strata::static; the
installed shared libraries export their documented names only; every place that writes the
version says the same one.  Usage:
    install_test.py <strata build dir> <cmake> <c++ compiler> <c compiler>
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strata_check import CONSUMER, Failures, build_consumer, check_consumer, sh, soname

BUILD, CMAKE, CXX, CC = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
SRC = Path(__file__).resolve().parents[2]
WARN = ["-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only"]
f = Failures()


def check_headers(include):
    """Each public header compiles alone, warning-free, as its users compile it."""
    headers = sorted(include.glob("strata/**/*.h*"))
    jobs = []
    for h in headers:
        name = h.relative_to(include).as_posix()
        if h.suffix == ".h":  # the C API: C and C++
            jobs += [(f"{name} as C99", [CC, "-x", "c", "-std=c99"], name),
                     (f"{name} as C11", [CC, "-x", "c", "-std=c11"], name),
                     (f"{name} as C++11", [CXX, "-x", "c++", "-std=c++11"], name)]
        else:
            jobs.append((f"{name} as C++20", [CXX, "-x", "c++", "-std=c++20"], name))
    # Another compiler's view of all of them at once (clang: no sized deallocation before 17).
    clang = shutil.which("clang++")
    if clang:
        jobs.append(("every header under clang++ -std=c++20", [clang, "-x", "c++", "-std=c++20"],
                     None))
    else:
        print("clang++ not installed: headers not compiled with it")

    def compile(job):
        what, cmd, name = job
        names = [name] if name else [h.relative_to(include).as_posix() for h in headers]
        text = "".join(f"#include <{n}>\n" for n in names) + "int main(void) { return 0; }\n"
        r = subprocess.run([*cmd, *WARN, "-I", str(include), "-"], input=text, capture_output=True,
                           text=True)
        return None if r.returncode == 0 else f"{what}: {r.stderr.strip()[:400]}"

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # about 30 compilers: side by side
        bad = [b for b in pool.map(compile, jobs) if b]
    f.check(f"{len(jobs)} header compilations", not bad, "; ".join(bad))


def check_pkgconfig_absolute_dirs(tmp):
    """strata.pc when CMAKE_INSTALL_LIBDIR and _INCLUDEDIR are absolute (GNUInstallDirs allows
    it): no ${prefix} before them, and the file in <libdir>/pkgconfig, not under the prefix."""
    libdir, incdir = tmp / "abs lib", tmp / "abs inc"
    sh(CMAKE, f"-DCMAKE_INSTALL_PREFIX={tmp / 'abs-prefix'}",
       f"-Dstrata_pc_template={SRC / 'cmake/strata.pc.in'}", f"-Dstrata_pc_staging={tmp / 'abs-stage'}",
       f"-DSTRATA_PC_LIBDIR={libdir}", f"-DSTRATA_PC_INCLUDEDIR={incdir}", "-DSTRATA_PC_VERSION=0.1.0",
       "-P", SRC / "cmake/strataPkgConfig.cmake")
    pc = libdir / "pkgconfig/strata.pc"
    env = dict(os.environ, PKG_CONFIG_PATH=str(pc.parent))
    flags = shlex.split(sh("pkg-config", "--cflags", "--libs", "strata", env=env)) if pc.exists() else []
    f.check("strata.pc with absolute CMAKE_INSTALL_LIBDIR/_INCLUDEDIR",
            flags == [f"-I{incdir}", f"-L{libdir}", "-lstrata"], f"{pc.exists()=} {flags}")


def exported(library):
    out = sh("nm", "-D", "--defined-only", library)
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def check_exports(prefix):
    """The shared libraries export what their headers and the README name, nothing else: a
    stray internal or C++ runtime symbol would interpose on, or be interposed by, a program's own
    (libstrata_torch.so exported two of libstdc++'s, as unique symbols: its dlopen could no
    longer be undone)."""
    def declared(header):
        return set(re.findall(r"\b(strata_\w+)\(", (prefix / "include/strata" / header).read_text()))

    replaced = {"malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc",
                "memalign", "valloc", "pvalloc", "malloc_usable_size", "free_sized", "free_aligned_sized",
                "malloc_trim", "cfree", "mallinfo", "mallinfo2", "malloc_stats", "malloc_info", "mallopt",
                "__libc_malloc", "__libc_calloc", "__libc_realloc", "__libc_free", "__libc_memalign",
                "__libc_valloc", "__libc_pvalloc", "__libc_mallinfo", "__libc_mallopt"}
    new_delete = re.compile(r"_Z(nw|na|dl|da)[A-Za-z0-9_]*$")  # every operator new/delete form
    for name in ["libstrata.so.0", "libstrata-secure.so"]:
        stray = sorted(s for s in exported(prefix / "lib" / name) - declared("strata.h") - replaced
                       if not new_delete.match(s))
        f.check(f"{name} exports strata.h's functions and the replaced names only", not stray, " ".join(stray))
    names = exported(prefix / "lib/libstrata_torch.so")
    f.check("libstrata_torch.so exports gpu/plugin.h's functions only", names == declared("gpu/plugin.h"),
            f"stray {sorted(names - declared('gpu/plugin.h'))}, missing {sorted(declared('gpu/plugin.h') - names)}")


def check_versions(prefix, env):
    """One version everywhere it is written: CMake's project(), strata.h's STRATA_VERSION_STRING
    (written by hand beside it), strata.pc, the CMake package, the Rust crates and the lab."""
    def found(path, pattern):
        m = re.search(pattern, Path(path).read_text(), re.M)
        return m.group(1) if m else None
    want = found(SRC / "CMakeLists.txt", r"^project\(strata VERSION ([0-9.]+)")
    f.check("CMakeLists.txt's project() names a version", want is not None)
    given = {
        "installed strata.h": found(prefix / "include/strata/strata.h", r'^#define STRATA_VERSION_STRING "([^"]+)"'),
        "strata.pc": sh("pkg-config", "--modversion", "strata", env=env).strip(),
        "strataConfigVersion.cmake": found(prefix / "lib/cmake/strata/strataConfigVersion.cmake",
                                           r'^set\(PACKAGE_VERSION "([^"]+)"\)'),
        "bindings/rust/Cargo.toml": found(SRC / "bindings/rust/Cargo.toml", r'^version = "([^"]+)"'),
        "lab/pyproject.toml": found(SRC / "lab/pyproject.toml", r'^version = "([^"]+)"'),
        "strata_lab.__version__": found(SRC / "lab/strata_lab/__init__.py", r'^__version__ = "([^"]+)"'),
    }
    for where, version in given.items():
        f.check(f"{where} says version {want}", version == want, f"{where}: {version!r}")


def check_c_consumer(prefix, build_dir):
    """A C project, linked by the C compiler: libstrata_pool.a is C++ inside, so strata::pool
    must bring the C++ runtime itself (it did not: undefined operator new, __gxx_personality_v0)."""
    steps = [[CMAKE, "-S", CONSUMER.parent / "consumer_c", "-B", build_dir, f"-DCMAKE_PREFIX_PATH={prefix}",
              f"-DCMAKE_C_COMPILER={CC}", "-DCMAKE_BUILD_TYPE=Release"],
             [CMAKE, "--build", build_dir], [build_dir / "c_consumer"]]
    for step in steps:
        r = subprocess.run([str(c) for c in step], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            break
    f.check("C project: strata::pool and strata::static link and work", r.returncode == 0,
            (r.stdout + r.stderr).strip()[-600:])


def main():
    with tempfile.TemporaryDirectory(prefix="strata-install-") as tmp:
        tmp = Path(tmp).resolve()
        # Given relative to the current directory, with a space: strata.pc must name it in
        # full, escaped, and everything else must cope with the space.
        prefix = tmp / "a prefix"
        sh(CMAKE, "--install", BUILD.resolve(), "--prefix", prefix.name, cwd=tmp)
        lib = prefix / "lib"
        f.check("libstrata.so.0 has SONAME libstrata.so.0", soname(lib / "libstrata.so.0") == "libstrata.so.0")
        f.check("libstrata.so links to libstrata.so.0", os.readlink(lib / "libstrata.so") == "libstrata.so.0")
        for rel in ["include/strata/strata.h", "include/strata/pool.h", "include/strata/gpu/gpu.hpp",
                    "lib/libstrata.a", "lib/libstrata_api.a", "lib/libstrata_pool.a", "lib/libstrata_gpu.a",
                    "lib/cmake/strata/strataConfig.cmake", "lib/cmake/strata/strataConfigVersion.cmake",
                    "lib/pkgconfig/strata.pc", "lib/libstrata_torch.so", "lib/libstrata-secure.so",
                    "lib/strata/python/strata_gpu/__init__.py"]:
            f.check(f"installed {rel}", (prefix / rel).exists())
        found = subprocess.run(
            [sys.executable, "-c", "import strata_gpu; print(strata_gpu.library_path())"],
            env={**os.environ, "PYTHONPATH": str(lib / "strata/python")}, capture_output=True, text=True)
        f.check("the installed strata_gpu module finds the installed libstrata_torch.so",
                found.stdout.strip() == str((lib / "libstrata_torch.so").resolve()), found.stdout + found.stderr)
        escaped = str(prefix).replace(" ", "\\ ")
        f.check("strata.pc names the install prefix (in full, its space escaped)",
                f"prefix={escaped}\n" in (lib / "pkgconfig/strata.pc").read_text())
        check_headers(prefix / "include")
        check_exports(prefix)
        check_pkgconfig_absolute_dirs(tmp)

        # find_package(strata): the imported targets carry the include path and the library.
        cbuild = build_consumer(CMAKE, CXX, prefix, tmp / "consumer-cmake")
        ldd = sh("ldd", cbuild / "consumer")
        linked = f"libstrata.so.0 => {lib}/libstrata.so.0" in ldd
        f.check("find_package: consumer loads the installed libstrata.so.0", linked, "" if linked else ldd)
        check_consumer(f, "find_package", cbuild / "consumer")
        proc = subprocess.run([str(cbuild / "components")], capture_output=True, text=True, timeout=60)
        f.check("find_package: strata::api, strata::pool, strata::gpu link and work",
                proc.returncode == 0, proc.stdout.strip() + proc.stderr[-300:])

        check_c_consumer(prefix, tmp / "consumer-c")

        # pkg-config, as a Makefile would use it (its recipe's shell splits the flags).
        env = dict(os.environ, PKG_CONFIG_PATH=str(lib / "pkgconfig"))
        check_versions(prefix, env)
        flags = shlex.split(sh("pkg-config", "--cflags", "--libs", "strata", env=env))
        f.check("pkg-config --cflags --libs names the installed paths",
                flags == [f"-I{prefix}/include", f"-L{lib}", "-lstrata"], " ".join(flags))
        exe = tmp / "consumer-pkgconfig"
        sh(CXX, "-std=c++20", "-O2", CONSUMER / "consumer.cpp", "-o", exe, *flags)
        check_consumer(f, "pkg-config", exe, {"LD_LIBRARY_PATH": str(lib)})
    f.exit()


if __name__ == "__main__":
    main()
