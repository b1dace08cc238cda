#!/usr/bin/env python3
"""Debian package test: packaging/deb/build-deb.sh (what `make deb` runs) builds libstrata0 and
libstrata-dev; both are unpacked with `dpkg -x` into a scratch root; programs preloading the
unpacked /usr/lib/<multiarch>/libstrata.so.0 give the same output as without it and strata's exit
statistics show it served them; the consumer project builds against the unpacked -dev package
with find_package(strata).  Usage:
    deb_test.py <source dir> <build dir for the package> <cmake> <c++ compiler>
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from strata_check import Failures, build_consumer, check_consumer, run_with_stats, served, sh, soname

SRC, BUILD, CMAKE, CXX = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
f = Failures()

PY_WORK = ("import json\n"
           "d = [{'id': i, 'name': 'x' * (i % 200), 'tags': list(range(i % 13))} for i in range(40000)]\n"
           "print(len(json.dumps(d)), sum(len(x['tags']) for x in json.loads(json.dumps(d))))\n")


def main():
    multiarch = sh("dpkg-architecture", "-qDEB_HOST_MULTIARCH").strip()
    with tempfile.TemporaryDirectory(prefix="strata-deb-") as tmp:
        tmp = Path(tmp)
        debs = sh(SRC / "packaging/deb/build-deb.sh", tmp / "out", BUILD).split()
        names = sorted(Path(d).name.split("_")[0] for d in debs)
        f.check("two packages built", names == ["libstrata-dev", "libstrata0"], " ".join(names))
        root = tmp / "root"
        for deb in debs:
            sh("dpkg-deb", "--info", deb)  # a well-formed control archive
            sh("dpkg", "-x", deb, root)
        libdir = root / "usr/lib" / multiarch
        lib = libdir / "libstrata.so.0"
        f.check(f"/usr/lib/{multiarch}/libstrata.so.0 with that SONAME",
                lib.exists() and soname(lib) == "libstrata.so.0")
        pc = (libdir / "pkgconfig/strata.pc").read_text() if (libdir / "pkgconfig/strata.pc").exists() else ""
        f.check("strata.pc for /usr", f"prefix=/usr\nlibdir=${{prefix}}/lib/{multiarch}\n" in pc)

        # Preload the unpacked library into real programs.
        for name, cmd, env in [("python3", ["python3", "-c", PY_WORK], {"PYTHONMALLOC": "malloc"}),
                               ("sort", ["sort", str(SRC / "README.md")], {})]:
            plain = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env), timeout=120)
            proc, docs = run_with_stats(cmd, dict(env, LD_PRELOAD=str(lib)))
            problem = served(docs[0], 100) if len(docs) == 1 else f"{len(docs)} statistics files"
            f.check(f"{name} under the packaged library: same output", proc.returncode == 0 and
                    proc.stdout == plain.stdout, proc.stderr[-300:])
            f.check(f"{name} under the packaged library: strata served it", problem is None,
                    problem or f"{docs[0]['malloc_count']} mallocs")

        # The -dev package: find_package(strata) finds lib/<multiarch>/cmake/strata.
        cbuild = build_consumer(CMAKE, CXX, root / "usr", tmp / "consumer")
        check_consumer(f, "libstrata-dev find_package", cbuild / "consumer", {"LD_LIBRARY_PATH": str(libdir)})
    f.exit()


if __name__ == "__main__":
    main()
