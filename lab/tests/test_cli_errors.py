"""Bad input gives one clear message and a non-zero exit, never a traceback."""

import pytest

from .conftest import lab


def check(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def test_unknown_allocator_lists_what_is_available(built):
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc,hoard"),
          "unknown allocator 'hoard'", "available here:", "--alloc NAME=/path/to/lib.so")


def test_missing_library_path(built, tmp_path):
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", f"mine={tmp_path}/libnone.so"),
          "libnone.so does not exist")


def _elf_header(elf_class: int, e_type: int, machine: int) -> bytes:
    import struct

    return b"\x7fELF" + bytes([elf_class, 1, 1]) + bytes(9) + struct.pack("<HH", e_type, machine) + bytes(44)


@pytest.mark.parametrize("content, needle", [
    (b"not an ELF\n", "is not a shared library"),
    (_elf_header(2, 2, 62), "is not a shared library"),          # ET_EXEC
    (_elf_header(1, 3, 3), "for another kind of machine"),       # 32-bit i386 shared object
], ids=["text", "executable", "32-bit"])
def test_alloc_that_is_not_a_shared_library_is_refused(built, tmp_path, content, needle):
    """Probe s40b D3: ld.so ignores such a preload, so the variant would silently be glibc."""
    lib = tmp_path / "fake.so"
    lib.write_bytes(content)
    r = lab("run", "--suite", "patterns", "--smoke", "--cells", "larson/*", "--rounds", "1", "--warmup", "0",
            "--no-progress", "--strict", "--out", str(tmp_path / "out"), "--alloc", f"fake={lib},glibc")
    check(r, "allocator 'fake'", needle, "NAME=/path/to/lib.so")
    assert not (tmp_path / "out").exists()


def test_alloc_that_is_a_shared_library_is_accepted(built):
    from strata_lab import allocators

    a = allocators.resolve(f"mine={built / 'lib' / 'libstrata.so'}")
    assert a.name == "mine" and a.source == "user"


def test_missing_builtin_library_says_how_to_install(built, tmp_path):
    # strata is looked for in $STRATA_BUILD/lib: an empty build directory has none.
    (tmp_path / "bin").mkdir()
    for exe in ("strata-bench-patterns",):
        (tmp_path / "bin" / exe).symlink_to(built / "bin" / exe)
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc,strata",
              env={"STRATA_BUILD": str(tmp_path)}),
          "allocator 'strata'", "not installed", "install with: cmake")


def test_missing_workload_program_says_how_to_build(tmp_path):
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc", env={"STRATA_BUILD": str(tmp_path)}),
          "strata-bench-patterns is missing", "cmake --build build --target strata-bench-patterns")


@pytest.mark.parametrize("cpus", ["abc", "9999", "1-0", ""])
def test_bad_cpu_list(built, cpus):
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc", "--cpus", cpus), "bad CPU list")


def test_unknown_suite():
    check(lab("run", "--suite", "nosuch"), "unknown suite 'nosuch'", "available suites:", "default")


@pytest.mark.parametrize("args, needle", [
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--threads", "0,x"], "bad thread list"),
    (["--baseline", "jemalloc"], "baseline 'jemalloc' is not among"),
    (["--cells", "nothing*"], "matches no cell"),
])
def test_bad_run_options(built, args, needle):
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc", *args), needle)


def test_no_run_directory_is_left_by_a_refused_run(built, tmp_path):
    r = lab("run", "--suite", "patterns", "--smoke", "--alloc", "hoard", "--out", str(tmp_path))
    assert r.returncode == 2 and list(tmp_path.iterdir()) == []


def test_list_and_env_work():
    r = lab("list")
    assert r.returncode == 0 and "glibc" in r.stdout and "default" in r.stdout
    r = lab("env", "--json")
    assert r.returncode == 0
    import json

    info = json.loads(r.stdout)
    for key in ("cpu_model", "cores", "kernel", "thp_enabled", "cpu_governor", "config_hz"):
        assert key in info["machine"]
    assert info["allocators"]["glibc"]["library"] is None


def test_run_out_that_is_a_file(built, tmp_path):
    """Probe s40b D4: FileExistsError from results.new_run_dir was a traceback."""
    f = tmp_path / "afile"
    f.write_text("")
    check(lab("run", "--suite", "patterns", "--smoke", "--cells", "larson/*", "--alloc", "glibc", "--no-progress",
              "--out", str(f)), f"cannot create the results directory {f}", "a file of that name exists")
    assert f.read_text() == ""
