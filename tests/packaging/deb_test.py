#!/usr/bin/env python3
"""Debian package test: packaging/deb/build-deb.sh (what `make deb` runs) builds libstrata0 and
libstrata-dev; both are unpacked with `dpkg -x` into a scratch root; programs preloading the
unpacked /usr/lib/<multiarch>/libstrata.so.0 give the same output as without it and strata's exit
statistics show it served them; the consumer project builds against the unpacked -dev package
with find_package(strata).  The runtime package depends on the package of every library its
shared objects need, ships them stripped, and its prerm removes the bytecode Python leaves
beside strata_gpu; `make deb` asks only for the build tools.  Usage:
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


def check_runtime_package(tmp, root, libdir, deb, multiarch):
    control = sh("dpkg-deb", "--field", deb, "Depends")
    depends = {d.split()[0] for d in control.replace("|", ",").split(",") if d.strip()}
    objects = sorted(p for p in libdir.glob("*.so*") if p.is_file() and not p.is_symlink())
    missing, unstripped = [], []
    for obj in objects:
        dynamic = sh("readelf", "-d", "-S", "-W", obj)
        if " .symtab " in dynamic:
            unstripped.append(obj.name)
        for line in dynamic.splitlines():
            if "(NEEDED)" not in line:
                continue
            needed = line.split("[")[1].rstrip("]")
            # The package holding it (bookworm's dpkg database says /lib/<multiarch>, later ones
            # /usr/lib/<multiarch>).
            owners = {o for d in ("/lib", "/usr/lib") for o in [subprocess.run(
                ["dpkg-query", "-S", f"{d}/{multiarch}/{needed}"], capture_output=True,
                text=True).stdout.split(":")[0]] if o}
            if owners and not owners & depends:
                missing.append(f"{obj.name} needs {needed} ({'/'.join(sorted(owners))})")
    f.check("libstrata0 depends on every library its shared objects need", not missing,
            "; ".join(missing) or control.strip())
    f.check("libstrata0's shared objects are stripped", not unstripped, " ".join(unstripped))

    # Root importing strata_gpu leaves __pycache__ beside it: the prerm (run on removal; dpkg
    # gives it DPKG_ROOT) removes it, so that dpkg can remove the directories.
    module = libdir / "strata/python/strata_gpu"
    (module / "__pycache__").mkdir()
    (module / "__pycache__/__init__.cpython-3.pyc").write_bytes(b"")
    sh("dpkg-deb", "--control", deb, tmp / "control")
    prerm = tmp / "control/prerm"
    if f.check("libstrata0 has a prerm", prerm.exists()):
        sh(prerm, "remove", env=dict(os.environ, DPKG_ROOT=str(root)))
    f.check("the prerm removes strata_gpu's __pycache__", not (module / "__pycache__").exists())

    # `make deb` builds from a library-only build: only the build tools, not `make setup`'s lab.
    dry = sh("make", "-n", "-C", SRC, "deb")
    setups = [line for line in dry.splitlines() if "scripts/setup.sh" in line]
    f.check("make deb runs only scripts/setup.sh --build", setups and
            all(line.rstrip().endswith("--build") for line in setups), " | ".join(setups))


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

        check_runtime_package(tmp, root, libdir, [d for d in debs if "/libstrata0_" in d][0], multiarch)

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
