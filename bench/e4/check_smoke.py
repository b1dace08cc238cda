"""Runs strata-bench-e4 --smoke and checks its JSON: the ctest `e4.smoke`."""
import json
import subprocess
import sys

GROUPS = {"pool_vs_general", "pool_sizes", "preallocation", "numa", "batch100", "stats_overhead"}


def main(exe: str) -> int:
    out = subprocess.run([exe, "--smoke"], check=True, capture_output=True, text=True, timeout=50)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["suite"] == "e4" and doc["smoke"] is True, doc
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
    sys.exit(main(sys.argv[1]))
