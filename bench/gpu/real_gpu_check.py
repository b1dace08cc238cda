"""strata's device allocator under PyTorch and CuPy on a real GPU (needs both and the driver).

    python3 bench/gpu/real_gpu_check.py torch|cupy

Each mode runs in its own process (PyTorch takes its allocator before its first CUDA
allocation).  It allocates through strata on two streams, computes with the blocks, checks the
results against float64 on the CPU, and checks strata's statistics: every block counted while
live, bytes in use back to 0 once the program has dropped them (PyTorch: back to what it keeps for
itself, its cuBLAS workspaces), `trim` returning reserved memory.
Prints one JSON object; exits 1 with the failed checks named, 2 when there is no GPU.
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import strata_gpu  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def rel_err(a, ref):
    import numpy as np
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def run_torch():
    import numpy as np
    import torch

    if not torch.cuda.is_available():
        sys.exit(2)
    torch.cuda.memory.change_current_allocator(strata_gpu.torch_allocator())
    rng = np.random.default_rng(11)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    errs, live_peak, held = [], 0, None
    t0 = time.perf_counter()
    for round_ in range(20):
        if round_ == 1:  # what PyTorch keeps for itself once both streams ran (cuBLAS workspaces)
            torch.cuda.synchronize()
            held = strata_gpu.stats()

        for i, s in enumerate(streams):
            n = int(rng.integers(64, 1536))
            a = rng.standard_normal((n, n))
            b = rng.standard_normal((n, n))
            with torch.cuda.stream(s):
                ta = torch.from_numpy(a).to("cuda", torch.float32)
                tb = torch.from_numpy(b).to("cuda", torch.float32)
                tc = ta @ tb
                # many small blocks of assorted sizes, live together
                small = [torch.empty(int(rng.integers(1, 1 << 16)), device="cuda") for _ in range(50)]
                for k, x in enumerate(small):
                    x.fill_(k)
                check(all(float(x[-1]) == k for k, x in enumerate(small)), "small blocks hold their values")
                live_peak = max(live_peak, strata_gpu.stats()["bytes_in_use"])
                c = tc.double().cpu().numpy()
            errs.append(rel_err(c, a @ b))
            del ta, tb, tc, small
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    st = strata_gpu.stats()
    check(max(errs) < 1e-3, f"float32 matmul on strata memory: max relative error {max(errs):.2e}")
    check(live_peak > 0 and st["peak_bytes_in_use"] >= live_peak, "statistics saw the live blocks")
    # PyTorch keeps a cuBLAS workspace per stream for the process's life: nothing
    # more may stay live than what was live after the first round.
    check(st["bytes_in_use"] <= held["bytes_in_use"] and st["allocations"] <= held["allocations"],
          f"bytes in use back to what PyTorch held after the first round ({held['bytes_in_use']} in "
          f"{held['allocations']} blocks; is {st['bytes_in_use']} in {st['allocations']})")
    check(st["total_allocations"] >= 20 * 2 * 53, "every tensor went through strata")
    check(st["failed_allocations"] == 0, "no failed allocation")
    reserved_before = st["reserved"]
    strata_gpu.trim(0, 0)
    after = strata_gpu.stats()
    check(after["reserved"] <= reserved_before, "trim does not grow the reservation")
    return {"mode": "torch", "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "max_rel_err": max(errs), "seconds": elapsed, "live_peak_bytes": live_peak,
            "held_after_first_round": {k: held[k] for k in ("bytes_in_use", "allocations")},
            "stats": st, "reserved_after_trim": after["reserved"]}


def run_cupy():
    import cupy
    import numpy as np

    try:
        cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        sys.exit(2)
    cupy.cuda.set_allocator(strata_gpu.cupy_malloc)
    rng = np.random.default_rng(12)
    errs = []
    t0 = time.perf_counter()
    streams = [cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)]
    for round_ in range(20):
        for s in streams:
            with s:
                n = int(rng.integers(64, 1536))
                a = rng.standard_normal((n, n))
                v = rng.standard_normal(n)
                ga, gv = cupy.asarray(a), cupy.asarray(v)
                out = cupy.asnumpy(ga @ gv + cupy.sin(gv))
                errs.append(rel_err(out, a @ v + np.sin(v)))
                del ga, gv
    cupy.cuda.Device(0).synchronize()
    elapsed = time.perf_counter() - t0
    st = strata_gpu.stats()
    check(max(errs) < 1e-12, f"float64 results on strata memory: max relative error {max(errs):.2e}")
    check(st["bytes_in_use"] == 0, f"bytes in use back to 0 (is {st['bytes_in_use']})")
    check(st["total_allocations"] >= 20 * 2 * 2, "every array went through strata")
    check(st["failed_allocations"] == 0, "no failed allocation")
    return {"mode": "cupy", "cupy": cupy.__version__, "max_rel_err": max(errs), "seconds": elapsed,
            "stats": st}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("torch", "cupy"):
        sys.exit("usage: real_gpu_check.py torch|cupy")
    doc = run_torch() if sys.argv[1] == "torch" else run_cupy()
    doc["failures"] = failures
    print(json.dumps(doc))
    sys.exit(1 if failures else 0)
