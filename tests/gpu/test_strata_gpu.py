"""python/strata_gpu on the simulated device, without CuPy or PyTorch installed.

CuPy is faked with the few names cupy_malloc uses (cupy.cuda.runtime.getDevice,
cupy.cuda.get_current_stream().ptr, UnownedMemory(ptr, size, owner, device_id) and
MemoryPointer(mem, offset)), with the meaning CuPy's documentation gives them: the MemoryPointer
keeps the UnownedMemory alive, which keeps its owner alive.  Run by ctest (gpu_python_plugin),
which points STRATA_TORCH_LIBRARY at the library it built.
"""

import ctypes
import gc
import os
import subprocess
import sys
import types

import pytest

os.environ["STRATA_GPU_BACKEND"] = "sim"
import strata_gpu  # noqa: E402


class FakeCupy:
    """The part of the cupy module that cupy_malloc touches."""

    def __init__(self, device=0, stream=0):
        class UnownedMemory:
            def __init__(self, ptr, size, owner, device_id=-1):
                self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id

        class MemoryPointer:
            def __init__(self, mem, offset):
                self.mem, self.ptr = mem, mem.ptr + offset

        runtime = types.SimpleNamespace(getDevice=lambda: device)
        current = types.SimpleNamespace(ptr=stream)
        self.cuda = types.SimpleNamespace(runtime=runtime, get_current_stream=lambda: current,
                                          UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
                                          set_allocator=lambda f: None)


@pytest.fixture
def cupy(monkeypatch):
    def install(device=0, stream=0):
        fake = FakeCupy(device, stream)
        monkeypatch.setitem(sys.modules, "cupy", fake)
        return fake
    return install


def test_library_exports_the_pluggable_allocator_entry_points():
    lib = strata_gpu.library()
    for name in (strata_gpu.MALLOC, strata_gpu.FREE, "strata_gpu_get_stats", "strata_gpu_trim"):
        assert hasattr(lib, name)


def test_cupy_malloc_returns_a_memory_pointer_freed_when_dropped(cupy):
    cupy(device=0)
    before = strata_gpu.stats(0)["total_allocations"]
    p = strata_gpu.cupy_malloc(1 << 20)
    assert p.ptr != 0 and p.ptr % 256 == 0
    assert p.mem.size == 1 << 20 and p.mem.device_id == 0
    s = strata_gpu.stats(0)
    assert s["bytes_in_use"] == 1 << 20
    assert s["total_allocations"] == before + 1
    assert s["reserved"] >= 1 << 20
    del p
    gc.collect()
    s = strata_gpu.stats(0)
    assert s["bytes_in_use"] == 0
    assert s["peak_bytes_in_use"] >= 1 << 20
    assert 0.0 <= s["fragmentation"] <= 1.0


def test_cupy_malloc_uses_cupys_current_stream(cupy):
    lib = strata_gpu.library()
    lib.strata_gpu_stream_create.restype = ctypes.c_void_p
    lib.strata_gpu_stream_create.argtypes = [ctypes.c_int]
    lib.strata_gpu_sim_violations.restype = ctypes.c_long
    lib.strata_gpu_sim_violations.argtypes = [ctypes.c_int]
    streams = [lib.strata_gpu_stream_create(1) for _ in range(2)]
    assert all(streams)
    for i in range(40):
        cupy(device=1, stream=streams[i % 2])
        p = strata_gpu.cupy_malloc(4096 << (i % 10))
        assert p.mem.owner.stream == streams[i % 2]
        del p
    gc.collect()
    assert lib.strata_gpu_sim_violations(1) == 0
    assert strata_gpu.stats(1)["bytes_in_use"] == 0


def test_zero_byte_requests_get_a_null_pointer(cupy):
    cupy(device=0)
    p = strata_gpu.cupy_malloc(0)
    assert p.ptr == 0


def test_out_of_memory_raises_memory_error_with_the_reason(cupy, monkeypatch):
    monkeypatch.setenv("STRATA_GPU_SIM_MIB", "64")  # device 2 is built on its first use, here
    cupy(device=2)
    with pytest.raises(MemoryError, match="out of device memory.*bytes free.*fragmentation"):
        strata_gpu.cupy_malloc(1 << 30)
    assert strata_gpu.stats(2)["failed_allocations"] == 1


def test_trim_returns_free_memory(cupy):
    cupy(device=3)
    p = strata_gpu.cupy_malloc(100 << 20)
    del p
    gc.collect()
    assert strata_gpu.stats(3)["reserved"] > 0
    strata_gpu.trim(3)
    s = strata_gpu.stats(3)
    assert s["reserved"] == 0 and s["peak_reserved"] >= 100 << 20


def test_stats_of_a_device_that_cannot_exist_raise():
    with pytest.raises(RuntimeError, match="out of range"):
        strata_gpu.stats(64)


def test_torch_allocator_needs_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError):
            strata_gpu.torch_allocator()
    else:
        pytest.skip("torch is installed: building its allocator would initialise CUDA")


# Helper H6's probe: ctypes keeps the low bits of an int that does not fit the C type, without a
# word, so StrataAllocation(2**64 + 100, ...) allocated 100 bytes while recording (and cupy_malloc
# handing CuPy) a size of 2**64 + 100; device 2**32 was device 0; trim(keep_bytes=-1) kept
# everything; a size of 0 or less raised MemoryError with no reason (or an older call's); a
# stream of -1 reached the simulated device as 0xffffffffffffffff and crashed the process.
@pytest.mark.parametrize("args", [
    (2**64 + 100, 0, 0), (2**63, 0, 0), (0, 0, 0), (-1, 0, 0),
    (100, 2**32, 0), (100, -1, 0), (100, 0, -1), (100, 0, 2**64),
])
def test_allocations_refuse_numbers_the_c_types_cannot_hold(args):
    before = strata_gpu.stats(0)["total_allocations"]
    with pytest.raises(ValueError, match="out of range"):
        strata_gpu.StrataAllocation(*args)
    assert strata_gpu.stats(0)["total_allocations"] == before


@pytest.mark.parametrize("args", [(1.5, 0, 0), ("8", 0, 0), (8, "0", 0), (8, 0, 1.0)])
def test_allocations_refuse_what_is_not_an_integer(args):
    with pytest.raises(TypeError, match="must be an integer"):
        strata_gpu.StrataAllocation(*args)


def test_cupy_malloc_refuses_negative_and_too_large_sizes(cupy):
    cupy(device=0)
    for size in (-1, 2**64 + 4096):
        with pytest.raises(ValueError, match="size"):
            strata_gpu.cupy_malloc(size)
    assert strata_gpu.stats(0)["bytes_in_use"] == 0


def test_stats_and_trim_refuse_numbers_the_c_types_cannot_hold():
    with pytest.raises(ValueError, match="device ordinal 4294967296"):
        strata_gpu.stats(2**32)
    with pytest.raises(ValueError, match="device ordinal -1"):
        strata_gpu.stats(-1)
    with pytest.raises(TypeError):
        strata_gpu.stats("0")
    with pytest.raises(ValueError, match="keep_bytes -1"):
        strata_gpu.trim(0, -1)
    with pytest.raises(ValueError, match="keep_bytes"):
        strata_gpu.trim(0, 2**64)


def test_the_library_stays_loaded_after_dlclose():
    """The simulated device's stream threads run in the library and its stacks are never
    destroyed: unmapped by a dlclose, they crashed the process (it stayed loaded only by accident,
    while it exported libstdc++'s unique symbols)."""
    program = (
        "import ctypes, os, sys, _ctypes\n"
        "path = sys.argv[1]\n"
        "lib = ctypes.CDLL(path)\n"
        "lib.strata_gpu_stream_create.restype = ctypes.c_void_p\n"
        "lib.strata_torch_malloc.restype = ctypes.c_void_p\n"
        "lib.strata_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]\n"
        "lib.strata_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]\n"
        "stream = lib.strata_gpu_stream_create(0)\n"
        "p = lib.strata_torch_malloc(4096, 0, stream)\n"
        "assert p, 'no memory from the simulated device'\n"
        "lib.strata_torch_free(p, 4096, 0, stream)\n"
        "_ctypes.dlclose(lib._handle)\n"
        "try:\n"
        "    ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)\n"
        "    print('loaded')\n"
        "except OSError:\n"
        "    print('unloaded')\n")
    env = dict(os.environ, STRATA_GPU_BACKEND="sim", STRATA_GPU_SIM_MIB="256")
    proc = subprocess.run([sys.executable, "-c", program, strata_gpu.library_path()], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "loaded"), proc.stderr[-2000:]
