#!/usr/bin/env python3
"""Install test: `cmake --install` into a scratch prefix, then a consumer project built out of
tree against it — once with find_package(strata), once with `pkg-config --cflags --libs strata` —
runs, and strata's statistics (strata_stats_get in the program, STRATA_STATS_FILE at exit) show
that strata served its allocations.  Usage:
    install_test.py <strata build dir> <cmake> <c++ compiler>
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from strata_check import CONSUMER, Failures, build_consumer, check_consumer, sh, soname

BUILD, CMAKE, CXX = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
f = Failures()


def main():
    with tempfile.TemporaryDirectory(prefix="strata-install-") as tmp:
        tmp = Path(tmp)
        prefix = tmp / "prefix"
        sh(CMAKE, "--install", BUILD, "--prefix", prefix)
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
        f.check("strata.pc names the install prefix",
                f"prefix={prefix}\n" in (lib / "pkgconfig/strata.pc").read_text())

        # find_package(strata): the imported targets carry the include path and the library.
        cbuild = build_consumer(CMAKE, CXX, prefix, tmp / "consumer-cmake")
        ldd = sh("ldd", cbuild / "consumer")
        linked = f"libstrata.so.0 => {lib}/libstrata.so.0" in ldd
        f.check("find_package: consumer loads the installed libstrata.so.0", linked, "" if linked else ldd)
        check_consumer(f, "find_package", cbuild / "consumer")
        proc = subprocess.run([str(cbuild / "components")], capture_output=True, text=True, timeout=60)
        f.check("find_package: strata::api, strata::pool, strata::gpu link and work",
                proc.returncode == 0, proc.stdout.strip() + proc.stderr[-300:])

        # pkg-config, as a Makefile would use it.
        env = dict(os.environ, PKG_CONFIG_PATH=str(lib / "pkgconfig"))
        flags = sh("pkg-config", "--cflags", "--libs", "strata", env=env).split()
        exe = tmp / "consumer-pkgconfig"
        sh(CXX, "-std=c++20", "-O2", CONSUMER / "consumer.cpp", "-o", exe, *flags)
        check_consumer(f, "pkg-config", exe, {"LD_LIBRARY_PATH": str(lib)})
    f.exit()


if __name__ == "__main__":
    main()
