"""The allocators the lab can preload: built-in names, found on this machine, with versions.

glibc is the process's own malloc (no preload).  mimalloc, jemalloc and tcmalloc are the Debian
packages' shared libraries; mimalloc3 is mimalloc 3.x from the cmeel-mimalloc wheel in the lab's
virtual environment; snmalloc and rpmalloc are built from their crates.io packages' bundled sources by
scripts/build_peers.sh into build/peers/ (versions in build/peers/versions.json); strata is
build/lib/libstrata.so.  `--alloc NAME=/path/lib.so` adds others.
"""

from __future__ import annotations

import glob
import json
import os
import struct
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from . import paths
from .errors import LabError

LIB_DIRS = [
    "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib", "/usr/local/lib",
]


@dataclass(frozen=True)
class Allocator:
    name: str
    library: str | None  # None: no preload (glibc)
    version: str
    source: str  # how it was found: "system", "debian:<pkg>", "wheel:<dist>", "crate:<name>", "build", "user"
    extra: dict = field(default_factory=dict)
    # The environment variable naming a file the library writes its statistics to at exit
    # (results.json keeps them with each sample); None when it writes none.
    stats_env: str | None = None

    def to_json(self) -> dict:
        return {"kind": "allocator", "library": self.library, "version": self.version,
                "source": self.source, **self.extra}


@dataclass(frozen=True)
class _Builtin:
    name: str
    sonames: tuple[str, ...]
    package: str | None
    install: str
    description: str


BUILTINS = {
    "glibc": _Builtin("glibc", (), "libc6", "part of the system", "the C library's malloc (no preload)"),
    "mimalloc": _Builtin("mimalloc", ("libmimalloc.so.2",), "libmimalloc2.0",
                         "sudo apt-get install libmimalloc2.0", "mimalloc 2.x (Debian package)"),
    "mimalloc3": _Builtin("mimalloc3", ("libmimalloc.so",), None,
                          ".venv/bin/pip install cmeel-mimalloc", "mimalloc 3.x (cmeel-mimalloc wheel)"),
    "jemalloc": _Builtin("jemalloc", ("libjemalloc.so.2",), "libjemalloc2",
                         "sudo apt-get install libjemalloc2", "jemalloc 5 (Debian package)"),
    "tcmalloc": _Builtin("tcmalloc", ("libtcmalloc_minimal.so.4",), "libtcmalloc-minimal4",
                         "sudo apt-get install libtcmalloc-minimal4",
                         "gperftools tcmalloc, minimal (Debian package)"),
    "snmalloc": _Builtin("snmalloc", ("libsnmalloc.so",), None, "scripts/build_peers.sh",
                         "snmalloc 0.7 (built from the snmalloc-sys crate's sources)"),
    "rpmalloc": _Builtin("rpmalloc", ("librpmalloc.so",), None, "scripts/build_peers.sh",
                         "rpmalloc 1.4 (built from the rpmalloc-sys crate's sources)"),
    "strata": _Builtin("strata", ("libstrata.so",), None,
                       "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build "
                       "(or: make build)", "strata (this repository's build/lib/libstrata.so)"),
}


def _dpkg_version(package: str) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def _find_system_lib(soname: str) -> str | None:
    for d in LIB_DIRS:
        p = Path(d) / soname
        if p.exists():
            return str(p.resolve())
    try:  # the dynamic linker's cache covers anything else installed
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if line.strip().startswith(soname + " ") and "=>" in line:
            return str(Path(line.split("=>")[1].strip()).resolve())
    return None


def _site_dirs() -> list[Path]:
    """site-packages of the running interpreter, then of the repository's .venv."""
    dirs = [Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])]
    root = paths.repo_root()
    dirs += [Path(p) for p in glob.glob(str(root / ".venv/lib/python3*/site-packages"))]
    seen, out = set(), []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _find_mimalloc3() -> tuple[str | None, str]:
    for site in _site_dirs():
        libdir = site / "cmeel.prefix" / "lib"
        cands = sorted(glob.glob(str(libdir / "libmimalloc.so*")), key=len)
        if cands:
            version = "unknown"
            dist = glob.glob(str(site / "cmeel_mimalloc-*.dist-info"))
            if dist:
                version = Path(dist[0]).name.removesuffix(".dist-info").split("-")[1]
            return str(Path(cands[0]).resolve()), version
    return None, "unknown"


def peers_dir() -> Path:
    """Where scripts/build_peers.sh leaves the peers it builds (always under the checkout's build/)."""
    return paths.repo_root() / "build" / "peers"


def _find_built_peer(name: str) -> Allocator | None:
    """snmalloc or rpmalloc from build/peers/, with the version build_peers.sh recorded."""
    d = peers_dir()
    lib = d / BUILTINS[name].sonames[0]
    if not lib.is_file():
        return None
    try:
        info = json.loads((d / "versions.json").read_text()).get(name, {})
    except (OSError, ValueError):
        info = {}
    extra = {k: info[k] for k in ("crate", "crate_version", "crate_git") if k in info}
    return Allocator(name, str(lib.resolve()), str(info.get("version", "unknown")),
                     f"crate:{info.get('crate', name + '-sys')}", extra)


def _strata_version(lib: str) -> str:
    """strata_version() asked in a child process (preloading strata into the lab itself is unsafe),
    plus the git revision of the checkout the library was built from."""
    code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); l.strata_version.restype=ctypes.c_char_p;"
            "print(l.strata_version().decode())")
    version = "unknown"
    try:
        out = subprocess.run([sys.executable, "-c", code, lib], capture_output=True, text=True,
                             timeout=20, env={**os.environ, "LD_PRELOAD": lib})
        if out.returncode == 0 and out.stdout.strip():
            version = out.stdout.strip().splitlines()[-1]
    except (OSError, subprocess.TimeoutExpired):
        pass
    from .machine import git_revision

    return f"{version} (git {git_revision()['revision'][:12]})"


def _glibc_version() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or _dpkg_version("libc6")
    except (ValueError, OSError):
        return _dpkg_version("libc6")


def locate(name: str) -> Allocator | None:
    """The built-in allocator `name` if it is present on this machine, else None."""
    b = BUILTINS[name]
    if name == "glibc":
        return Allocator("glibc", None, f"{_glibc_version()} (libc6 {_dpkg_version('libc6')})", "system")
    if name == "mimalloc3":
        lib, version = _find_mimalloc3()
        return Allocator(name, lib, version, "wheel:cmeel-mimalloc") if lib else None
    if name in ("snmalloc", "rpmalloc"):
        return _find_built_peer(name)
    if name == "strata":
        lib = paths.build_dir() / "lib" / "libstrata.so"
        if not lib.is_file():
            return None
        return Allocator(name, str(lib), _strata_version(str(lib)), "build", stats_env="STRATA_STATS_FILE")
    lib = _find_system_lib(b.sonames[0])
    if not lib:
        return None
    return Allocator(name, lib, _dpkg_version(b.package), f"debian:{b.package}")


def inventory() -> dict[str, Allocator | None]:
    return {name: locate(name) for name in BUILTINS}


def _help(found: dict[str, Allocator | None] | None = None) -> str:
    found = found if found is not None else inventory()
    avail = [n for n, a in found.items() if a]
    missing = [n for n, a in found.items() if not a]
    lines = [f"  available here: {', '.join(avail) or 'none'}"]
    for n in missing:
        lines.append(f"  {n}: not found; install with: {BUILTINS[n].install}")
    lines.append("  any other: --alloc NAME=/path/to/lib.so")
    lines.append("  (scripts/setup.sh installs every peer allocator)")
    return "\n".join(lines)


def _elf_ident(path: str | Path) -> tuple[bytes, int, int] | None:
    """(class and byte order, object type, machine) of an ELF file; None when it is not one."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] not in (1, 2):
        return None
    e_type, e_machine = struct.unpack(("<" if head[5] == 1 else ">") + "HH", head[16:20])
    return head[4:6], e_type, e_machine


def _not_preloadable(p: Path) -> str | None:
    """Why a preload of `p` would not replace malloc, or None.  ld.so only warns about a bad
    LD_PRELOAD and runs the program anyway, under glibc's malloc: a run would then measure glibc
    under this name.  So a user library is refused here unless it is an ELF shared object (ET_DYN)
    of the class, byte order and architecture of this interpreter's own executable that defines
    malloc."""
    got = _elf_ident(p)
    if got is None or got[1] != 3:  # ET_DYN
        return "is not a shared library (not an ELF shared object): ld.so would not preload it"
    ours = _elf_ident("/proc/self/exe") or _elf_ident(sys.executable)
    if ours and (got[0] != ours[0] or got[2] != ours[2]):
        return ("is a shared library for another kind of machine (ELF class or architecture): ld.so "
                "would not preload it")
    if _defines(p, b"malloc") is False:
        # libm, say: ld.so preloads it and the program still allocates with glibc's malloc.
        return ("does not define malloc: it is no malloc replacement, and a program it is preloaded "
                "into allocates with glibc's malloc")
    return None


def _defines(path: Path, symbol: bytes) -> bool | None:
    """Whether the ELF shared object at `path` defines the function `symbol` in its dynamic symbol
    table, which is what a preload interposes; None when that table cannot be read (no section
    headers), so that nothing is refused on a guess."""
    try:
        data = path.read_bytes()
        wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
        shoff, shentsize, shnum = struct.unpack_from(order + ("Q10xHH" if wide else "I10xHH"), data,
                                                     0x28 if wide else 0x20)
        shdr = order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")
        sections = [struct.unpack_from(shdr, data, shoff + i * shentsize) for i in range(shnum)]
        sym = order + ("IBBHQQ" if wide else "IIIBBH")
        for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
            if sh_type != 11 or not entsize:  # SHT_DYNSYM
                continue
            strtab = sections[link][4]
            for at in range(offset, offset + size, entsize):
                f = struct.unpack_from(sym, data, at)
                name, info, shndx = (f[0], f[1], f[3]) if wide else (f[0], f[3], f[5])
                # Defined (not SHN_UNDEF), global or weak, a function or an indirect function.
                if shndx != 0 and info >> 4 in (1, 2) and info & 0xF in (2, 10) and \
                        data[strtab + name:data.index(b"\0", strtab + name)] == symbol:
                    return True
            return False
    except (OSError, IndexError, ValueError, struct.error):
        pass
    return None


# ld.so splits LD_PRELOAD at spaces and colons: a library whose path holds one is never loaded.
_PRELOAD_SEPARATORS = (" ", ":")


def _check_preload_path(a: Allocator) -> Allocator:
    """`a`, unless LD_PRELOAD cannot name its library.  ld.so would try the pieces of the path,
    warn, and run the program under glibc's malloc: every sample glibc under `a`'s name."""
    if a.library and any(c in a.library for c in _PRELOAD_SEPARATORS):
        raise LabError(f"allocator {a.name!r}: its library path {a.library!r} contains a space or a "
                       f"':', which LD_PRELOAD cannot carry (ld.so splits the list there and would "
                       f"run glibc's malloc instead); link or copy the library to a path without "
                       f"them and give --alloc {a.name}=/that/path")
    return a


def resolve(spec: str) -> Allocator:
    """An allocator from a --alloc argument: a built-in NAME, or NAME=/path/to/lib.so."""
    if "=" in spec:
        name, _, path = spec.partition("=")
        name = name.strip()
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise LabError(f"bad allocator name in --alloc {spec!r}: use NAME=/path/to/lib.so")
        if not path.strip():
            raise LabError(f"allocator {name!r}: no library after '=' in --alloc {spec!r}: use "
                           "NAME=/path/to/lib.so")
        try:
            p = Path(path).expanduser()
        except RuntimeError as e:  # ~user of no such user, or ~ without a home
            raise LabError(f"allocator {name!r}: library {path}: {e}") from None
        if p.exists() and not p.is_file():
            raise LabError(f"allocator {name!r}: library {p} is not a file\n" + _help())
        if not p.is_file():
            raise LabError(f"allocator {name!r}: library {p} does not exist\n" + _help())
        why = _not_preloadable(p)
        if why:
            raise LabError(f"allocator {name!r}: library {p} {why}\n" + _help())
        lib = str(p.resolve())
        if any(c in lib for c in _PRELOAD_SEPARATORS):
            lib = os.path.abspath(p)  # a link without them to a path with them serves
        return _check_preload_path(Allocator(name, lib, "unknown (user library)", "user"))
    if spec not in BUILTINS:
        raise LabError(f"unknown allocator {spec!r}\n" + _help())
    a = locate(spec)
    b = BUILTINS[spec]
    if a is None:
        raise LabError(f"allocator {spec!r} ({b.description}) is not installed on this machine; "
                       f"install with: {b.install}\n" + _help())
    # A built-in library found but broken (cut short by a full disk, an interrupted build or
    # install: 0 bytes, no ELF header) failed every sample of the run, one spawn error or SIGBUS
    # at a time, where a user library in that state is refused before the run starts.
    why = _not_preloadable(Path(a.library)) if a.library else None
    if why:
        raise LabError(f"allocator {spec!r}: library {a.library} {why}; reinstall it: {b.install}\n" + _help())
    return _check_preload_path(a)


def resolve_all(specs: list[str]) -> list[Allocator]:
    out: list[Allocator] = []
    for s in specs:
        a = resolve(s)
        if any(o.name == a.name for o in out):
            raise LabError(f"allocator {a.name!r} given twice")
        out.append(a)
    return out
