"""Runs strata-bench-e4 --smoke and checks its JSON, its refusal of bad arguments and its report
of a measurement it could not take: the ctests `e4.smoke` and, with LIBRARY preloaded as the lab
runs the suite's strata variant, `e4.smoke_strata`.

    check_smoke.py EXE [LIBRARY]
"""
import json
import os
import resource
import subprocess
import sys

GROUPS = {"pool_vs_general", "pool_sizes", "preallocation", "numa", "batch100", "stats_overhead"}


def refuses_bad_arguments(exe: str, env: dict) -> None:
    """Session 41's probe: --samples abc and -5 became 1, `--samples --smoke` swallowed --smoke
    and --sample-ms inf never ended.  Then: --samples 5abc ran 5 samples (atoi read the digits and
    dropped the rest), as did " 5" and 5.5; --sample-ms 2ms ran 2 ms samples (the parser, shared
    by every bench program in bench/common/args.hpp, now wants the whole value to be the number)."""
    for args in (["--samples", "abc"], ["--samples", "-5"], ["--samples", "--smoke"],
                 ["--samples", "5abc"], ["--samples", "5.5"], ["--samples", " 5"], ["--samples", ""],
                 ["--samples", "99999999999"], ["--sample-ms", "2ms"], ["--sample-ms", "1e999"],
                 ["--sample-ms", "inf"], ["--sample-ms", "nan"], ["--sample-ms", "-1"]):
        r = subprocess.run([exe, "--group", "numa", *args], capture_output=True, text=True,
                           timeout=10, env=env)
        assert r.returncode == 2 and args[0] in r.stderr and not r.stdout, (args, r.returncode, r.stderr)


def failed_measurement_is_no_number(exe: str, env: dict) -> None:
    """Session 41's probe: under a 200 MB address-space limit the 256 MiB NUMA buffer could not be
    allocated, and the program exited 0 with a first-touch bandwidth of 0."""
    limit = 200 << 20
    r = subprocess.run([exe, "--group", "numa", "--samples", "1", "--sample-ms", "0.01"],
                       capture_output=True, text=True, timeout=50, env=env,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert r.returncode == 1 and "cannot allocate" in r.stderr, (r.returncode, r.stderr[-500:])
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    for spec, p in doc["groups"]["numa"]["policies"].items():
        assert p["bandwidth"]["median"] is None and not p["applied"], (spec, p)
        assert doc[f"numa.{spec}/first_touch_gbps"] is None, spec


def main(exe: str, preload: str | None = None) -> int:
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = preload
    refuses_bad_arguments(exe, env)
    failed_measurement_is_no_number(exe, env)
    out = subprocess.run([exe, "--smoke"], check=True, capture_output=True, text=True, timeout=50,
                         env=env)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["suite"] == "e4" and doc["smoke"] is True, doc
    assert (doc["allocator"] == "strata") == bool(preload), doc["allocator"]
    assert set(doc["groups"]) == GROUPS, doc["groups"].keys()
    for name, group in doc["groups"].items():
        for row, s in group.get("results", {}).items():
            lo, hi = s["ci95"]
            assert s["samples"] >= 1 and lo <= s["median"] <= hi and s["median"] > 0, (name, row, s)
            assert doc[f"{name}.{row}"] == s["median"]
        for c in group.get("comparisons", []):
            assert c["significant"] or c["verdict"].startswith("no difference"), c
    pre = doc["groups"]["preallocation"]
    assert pre["reserve_exhausted"] is True, pre  # the load really used up the reserve
    numa = doc["groups"]["numa"]
    if preload:  # placed by strata: each round's buffer a fresh mapping (not one from its cache)
        assert numa["mechanism"].startswith("strata_numa_set_policy"), numa["mechanism"]
    for spec, p in numa["policies"].items():
        assert p["applied"], (spec, p)
        # Placement is asked of the kernel: every page is accounted for, and touched pages are backed.
        assert p["pages_per_node"]["unbacked"] == 0, (spec, p)
        if spec.startswith("bind:") or spec == "interleave":
            assert p["placement_matches_policy"], (spec, p)
        # The kernel recorded the policy for the buffer (proof even on one node).
        want = spec.split(":")[0]
        assert p["kernel_policy"] == want or (want == "local" and p["kernel_policy"] == "preferred"), (spec, p)
    print("e4 smoke ok:", len(out.stdout), "bytes of JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
