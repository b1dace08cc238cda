#!/usr/bin/env python3
"""strata-bench-e2-gpu refuses a bad command line or a bad --replay trace with status 2 and a
message, before it runs anything (run by ctest: e2_gpu_arguments_test.py BIN).

Session 40b's probe: numbers were read with strtoull, which takes "-5" as 2^64 - 5 (--iterations
-5 ran for ever, --pool-mib -1 asked for 16 EiB), and a trace field that was not a number, or was
too large, escaped from std::stoull as an uncaught exception (abort, status 134).
"""
import os
import shutil
import subprocess
import sys
import tempfile

HEADER = "op,thread,time_ns,ptr,bytes,stream,alignment"
failures = []


def refused(binary, args, *needles):
    argv = [binary, "--smoke", "--backend", "sim", "--resource", "pool", "--threads", "1"] + args
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        failures.append(f"{args}: still running after 30 s")
        return
    if p.returncode != 2 or any(n not in p.stderr for n in needles) or p.stdout.strip():
        failures.append(f"{args}: status {p.returncode}, expected 2 with {needles} on stderr\n"
                        f"  stderr: {p.stderr.strip()[-400:]}\n  stdout: {p.stdout.strip()[:200]}")


def huge_cap(binary):
    """A finite but huge --cap-factor runs on a device of 2^62 bytes, not 0."""
    argv = [binary, "--smoke", "--backend", "sim", "--resource", "pool", "--threads", "1",
            "--cap-factor", "1e300"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or '"device_bytes": 4611686018427387904' not in p.stdout:
        failures.append(f"--cap-factor 1e300: status {p.returncode}, expected 0 and a 2^62-byte "
                        f"device\n  stderr: {p.stderr.strip()[-400:]}")


def setuid_ignores_cuda_library(binary):
    """A setuid program loads no library its caller names: STRATA_CUDA_LIBRARY would run the
    caller's code with the program's privileges.  Root only (a copy setuid to nobody)."""
    if os.getuid() != 0:
        print("setuid check skipped: needs root")
        return
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        copy = os.path.join(d, "e2-gpu")
        shutil.copy(binary, copy)
        os.chown(copy, 65534, 65534)
        os.chmod(copy, 0o4755)
        evil = os.path.join(d, "caller-chosen-libcuda.so")
        env = dict(os.environ, STRATA_CUDA_LIBRARY=evil)
        argv = [copy, "--smoke", "--backend", "cuda", "--resource", "pool", "--threads", "1"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        # Before: "cannot load the CUDA driver library <evil>"; now the system's libcuda.so.1
        # (which loads on a machine with a driver, and is named in the error on one without).
        if evil in p.stderr:
            failures.append(f"a setuid copy tried STRATA_CUDA_LIBRARY: {p.stderr.strip()[-300:]}")
        # The same copy without the setuid bit takes the variable (the check can fail).
        os.chmod(copy, 0o755)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        if evil not in p.stderr:
            failures.append(f"STRATA_CUDA_LIBRARY not tried without setuid: {p.stderr.strip()[-300:]}")


def main(binary):
    setuid_ignores_cuda_library(binary)
    refused(binary, ["--iterations", "-5"], "--iterations", "-5")
    refused(binary, ["--iterations", "18446744073709551616"], "--iterations")  # 2^64
    refused(binary, ["--seed", "12x"], "--seed", "12x")
    refused(binary, ["--pool-mib", "-1"], "--pool-mib", "-1")
    refused(binary, ["--pool-mib", "17592186044416"], "--pool-mib")  # 2^44 MiB = 2^64 bytes
    refused(binary, ["--device-mib", "-1"], "--device-mib")
    refused(binary, ["--strata-cache-mib", "-1"], "--strata-cache-mib")
    # Session 42's probe: --cap-factor inf (or F x the bound past 2^64) made every cell's device
    # 0 bytes; --max-size past 2^62 aborted in the dry run (uncaught out_of_memory_error);
    # --device-mib with --cap-factor silently dropped --device-mib.
    refused(binary, ["--cap-factor", "inf"], "--cap-factor", "inf")
    refused(binary, ["--cap-factor", "1e400"], "--cap-factor")
    refused(binary, ["--max-size", "18446744073709551615"], "--max-size")
    refused(binary, ["--max-size", "4611686018427387905"], "--max-size")  # 2^62 + 1
    refused(binary, ["--device-mib", "64", "--cap-factor", "1.5"], "--device-mib", "--cap-factor")
    huge_cap(binary)
    # A list with an empty item: "1,,2" ran 1 and 2, "--threads ," ran no cell (exit 0, empty
    # results) and "--resource ," every resource.
    refused(binary, ["--threads", "1,,2"], "--threads has an empty item", "1,,2")
    refused(binary, ["--threads", ","], "--threads has an empty item")
    refused(binary, ["--threads", "1,"], "--threads has an empty item")
    refused(binary, ["--resource", ","], "--resource has an empty item")
    refused(binary, ["--resource", "pool,,arena"], "--resource has an empty item")
    # No bound: --iterations / --long-factor 2^64 - 1 ran for ever (iterations x factor wrapped),
    # --kernel-ns past 2^63 slept a negative time (kernels of no time), --iterations 0 timed nothing.
    refused(binary, ["--iterations", "18446744073709551615"], "--iterations must be 1..10000000")
    refused(binary, ["--iterations", "0"], "--iterations must be 1..10000000")
    refused(binary, ["--long-factor", "18446744073709551615"], "--long-factor", "10^8 churn steps")
    refused(binary, ["--kernel-ns", "18446744073709551615"], "--kernel-ns", "at most 10^9")
    refused(binary, ["--kernel-ns", "1000000000", "--iterations", "1000"], "--kernel-ns", "600 s")
    # A repeated item ran the same cell twice: two results with one (resource, threads) key.
    refused(binary, ["--threads", "1,2,1"], "--threads gives 1 twice")
    refused(binary, ["--resource", "pool,pool"], "--resource gives pool twice")
    # --cap-basis without --cap-factor was ignored: the run was uncapped.
    refused(binary, ["--cap-basis", "serial"], "--cap-basis needs --cap-factor")
    with tempfile.TemporaryDirectory() as d:
        good = "alloc,1,5,0x1000,100,0,256"
        traces = {
            "bad_ptr.csv": ([good, "alloc,1,5,zzz,100,0,256"], ":3:"),
            "bad_big.csv": (["alloc,1,5,0x1000,99999999999999999999999,0,256"], ":2:"),
            "bad_neg.csv": (["free,1,5,0x1000,-100,0,256"], ":2:"),
            "bad_stream.csv": ([good, good, "free,1,5,0x1000,100,0x,256"], ":4:"),
        }
        for name, (lines, where) in traces.items():
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write("\n".join([HEADER] + lines) + "\n")
            refused(binary, ["--replay", path], path + where)
    if failures:
        print("e2_gpu_arguments_test:\n" + "\n".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
