"""Bad input gives one clear message and a non-zero exit, never a traceback."""

import os
import subprocess
import sys

import pytest

from .conftest import ROOT, lab


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


@pytest.mark.parametrize("where", ["my dir", "a:b"])
def test_library_path_that_ld_preload_cannot_carry_is_refused(built, tmp_path, where):
    """Probe h6 D1: ld.so splits LD_PRELOAD at spaces and colons, warns about the pieces (which the
    lab's check for its message, naming the whole path, missed) and runs the workload under glibc:
    every sample was glibc's, recorded under the variant's name, with its ratio."""
    import shutil

    lib = tmp_path / where / "libstrata.so"
    lib.parent.mkdir()
    shutil.copy(built / "lib" / "libstrata.so", lib)
    r = lab("run", "--suite", "patterns", "--smoke", "--cells", "larson/*", "--rounds", "1", "--warmup", "0",
            "--no-progress", "--out", str(tmp_path / "out"), "--alloc", f"mine={lib},glibc")
    check(r, "allocator 'mine'", "contains a space or a ':'", "LD_PRELOAD cannot carry")
    assert not (tmp_path / "out").exists()
    # A link without them to the same library serves.
    (tmp_path / "link").symlink_to(lib.parent)
    from strata_lab import allocators

    assert allocators.resolve(f"mine={tmp_path / 'link' / 'libstrata.so'}").library == \
        str(tmp_path / "link" / "libstrata.so")
    # So does a built-in found there: strata in a build directory with a space in its path.
    build = tmp_path / where
    (build / "lib").mkdir()
    lib.rename(build / "lib" / "libstrata.so")
    (build / "bin").symlink_to(built / "bin")
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc,strata", env={"STRATA_BUILD": str(build)}),
          "allocator 'strata'", "contains a space or a ':'")


def test_library_that_is_no_malloc_is_refused(built, tmp_path):
    """Probe h6 D2: libm preloads fine and replaces nothing: the variant was glibc under another name."""
    from strata_lab import allocators

    libm = allocators._find_system_lib("libm.so.6")
    if libm is None:
        pytest.skip("no libm.so.6 in the system's library directories")
    r = lab("run", "--suite", "patterns", "--smoke", "--cells", "larson/*", "--rounds", "1", "--warmup", "0",
            "--no-progress", "--out", str(tmp_path / "out"), "--alloc", f"m={libm},glibc")
    check(r, "allocator 'm'", "does not define malloc")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("path, needle", [
    ("~no-such-user-h6/lib.so", "Could not determine home directory"),
    ("", "no library after '='"),
    ("{tmp}", "is not a file"),
], ids=["unknown-user", "empty", "directory"])
def test_odd_library_paths_are_clear_errors(built, tmp_path, path, needle):
    """Probe h6 D3: ~user of no such user ended the run with a traceback (RuntimeError); an empty
    path and a directory were said not to exist ("library . does not exist")."""
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc", "--alloc",
              "mine=" + path.format(tmp=tmp_path)), "allocator 'mine'", needle)


def test_missing_builtin_library_says_how_to_install(built, tmp_path):
    # strata is looked for in $STRATA_BUILD/lib: an empty build directory has none.
    (tmp_path / "bin").mkdir()
    for exe in ("strata-bench-patterns",):
        (tmp_path / "bin" / exe).symlink_to(built / "bin" / exe)
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc,strata",
              env={"STRATA_BUILD": str(tmp_path)}),
          "allocator 'strata'", "not installed", "install with: cmake")


@pytest.mark.parametrize("content", [b"", b"\x7fELF\x02\x01\x01", b"#!/bin/sh\n"])
def test_a_broken_builtin_library_is_refused_before_the_run(built, tmp_path, content):
    # A libstrata.so cut short (a full disk, an interrupted build): every sample failed, one spawn
    # error or SIGBUS at a time, where a user library in that state is refused at once.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "strata-bench-patterns").symlink_to(built / "bin" / "strata-bench-patterns")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libstrata.so").write_bytes(content)
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc,strata",
              env={"STRATA_BUILD": str(tmp_path)}),
          "allocator 'strata'", "is not a shared library", "reinstall it:")


def test_an_error_naming_a_path_prints_its_control_characters_as_escapes(built, tmp_path):
    # An ESC in a --alloc path reached the terminal raw in the error line (a colour, a cleared line).
    r = lab("run", "--suite", "patterns", "--smoke", "--alloc", f"mine={tmp_path}/x\x1b[31mred/libnone.so")
    check(r, "does not exist", "x\\x1b[31mred")
    assert "\x1b" not in r.stderr
    assert r.stderr.count("\n") > 2  # the message's own lines (what is available) stay lines


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
    (["--max-rounds", "2"], "--max-rounds 2 is below the 5 planned rounds (suite patterns's; give --rounds too)"),
])
def test_bad_run_options(built, args, needle):
    check(lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc", *args), needle)


@pytest.mark.parametrize("args, needle", [
    # nan passed `< 0`: the budget then fit nothing, and the planned rounds past the second were
    # left out one by one, the summary blaming the spread; inf: no budget, recorded as null.
    (["--time-budget", "nan"], "--time-budget (0: no adaptive rounds) must be a finite number"),
    (["--time-budget", "inf"], "--time-budget (0: no adaptive rounds) must be a finite number"),
    (["--time-budget", "-5"], "0 or more, not -5"),
    # inf: every sample of a timed workload ran until its timeout.
    (["--seconds", "inf"], "--seconds must be a finite number of seconds, more than 0, not inf"),
    (["--seconds", "nan"], "--seconds must be a finite number"),
    (["--seconds", "0"], "--seconds must be a finite number"),
    (["--timeout", "inf"], "--timeout must be a finite number"),
    # An empty value was taken as no value: --cells '' ran every cell, --alloc '' every allocator
    # of the suite (8 for patterns), --baseline '' and --converge '' the suite's defaults.
    (["--cells", ""], "--cells is empty"),
    (["--cells", ","], "--cells is empty"),
    (["--alloc", ""], "--alloc is empty"),
    (["--baseline", ""], "--baseline is empty"),
    (["--converge", " , "], "--converge is empty"),
    # Two cells of the same id, blamed on the suite ("declares duplicate cells").
    (["--threads", "1,2,1"], "bad thread list '1,2,1': 1 given twice"),
    # An empty item was dropped ("1,,2" ran 1 and 2), and a count past the workload programs'
    # 1..1024 ran a suite whose every sample failed (exit 0).
    (["--threads", "1,,2"], "bad thread list '1,,2'"),
    (["--threads", "1,"], "bad thread list '1,'"),
    (["--threads", "1,2000"],
     "bad thread list '1,2000': 2000 is more than the workload programs take (1024)"),
    # A cap below the planned rounds was raised to them without a word.
    (["--rounds", "5", "--max-rounds", "3"], "--max-rounds 3 is below the 5 planned rounds"),
])
def test_nonsense_run_options_are_refused(built, tmp_path, args, needle):
    """Session 42's probes: each of these was accepted (exit 0) or refused with a misleading message."""
    alloc = [] if "--alloc" in args else ["--alloc", "glibc"]
    r = lab("run", "--suite", "patterns", "--smoke", "--cells", "larson/*", "--rounds", "1",
            "--warmup", "0", "--no-progress", "--out", str(tmp_path), *alloc, *args)
    check(r, needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option, value", [("--threads", "4"), ("--seconds", "7")])
def test_an_option_the_suite_never_reads_is_refused(built, tmp_path, option, value):
    """e4's cells have their own thread counts and do a fixed amount of work: --threads 4 and
    --seconds 7 ran its usual cells, exit 0, and results.json recorded threads [4] and seconds 7."""
    r = lab("run", "--suite", "e4", "--smoke", "--alloc", "glibc", "--rounds", "1", "--warmup", "0",
            "--no-progress", "--out", str(tmp_path), option, value)
    check(r, f"suite 'e4' does not take {option}")
    assert list(tmp_path.iterdir()) == []


def test_report_with_an_empty_baseline_is_refused(tmp_path):
    check(lab("report", str(tmp_path), "--baseline", "", "--no-html"), "--baseline is empty")


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


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["env", "--json"], ["env"], ["list", "suites"]])
def test_output_that_cannot_be_written_is_one_line(args):
    """Session 42's probe: `strata-lab env > /dev/full` (stdout on a full disk) ended in an OSError
    traceback."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "strata_lab", *args], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120,
                           env=dict(os.environ, STRATA_ROOT=str(ROOT)))
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert r.stderr.strip() == "strata-lab: error: cannot write: No space left on device", r.stderr
