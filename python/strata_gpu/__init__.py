"""strata's device memory for Python frameworks, over build/lib/libstrata_torch.so (ctypes).

    import cupy, strata_gpu
    cupy.cuda.set_allocator(strata_gpu.cupy_malloc)        # CuPy

    import torch, strata_gpu
    torch.cuda.memory.change_current_allocator(strata_gpu.torch_allocator())   # PyTorch

    strata_gpu.stats()   # {'bytes_in_use': ..., 'reserved': ..., 'peak_reserved': ...,
                         #  'fragmentation': ..., ...}

The library is found through STRATA_TORCH_LIBRARY, else build/lib/libstrata_torch.so of the
source tree this module sits in.  Its environment (STRATA_GPU_BACKEND=cuda|sim, ...) is described
in include/strata/gpu/plugin.h and docs/gpu.md.
"""

import ctypes
import operator
import os
import pathlib
import threading

__all__ = ["library", "library_path", "cupy_malloc", "torch_allocator", "stats", "trim",
           "StrataAllocation"]

MALLOC = "strata_torch_malloc"
FREE = "strata_torch_free"


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "bytes_in_use", "peak_bytes_in_use", "reserved", "peak_reserved", "free",
        "largest_free_block")] + [("fragmentation", ctypes.c_double)] + [
        (name, ctypes.c_uint64) for name in (
            "allocations", "total_allocations", "failed_allocations")]


_lock = threading.Lock()
_lib = None


def library_path() -> str:
    env = os.environ.get("STRATA_TORCH_LIBRARY")
    if env:
        return env
    here = pathlib.Path(__file__).resolve()
    # Installed (cmake --install): <prefix>/<libdir>/strata/python/strata_gpu/, the library in <libdir>.
    installed = here.parents[3] / "libstrata_torch.so"
    if here.parents[2].name == "strata" and installed.exists():
        return str(installed)
    return str(here.parents[2] / "build" / "lib" / "libstrata_torch.so")


def library() -> ctypes.CDLL:
    """The loaded plug-in library, with its argument types declared (loaded once)."""
    global _lib
    with _lock:
        if _lib is None:
            lib = ctypes.CDLL(library_path())
            lib.strata_torch_malloc.restype = ctypes.c_void_p
            lib.strata_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
            lib.strata_torch_free.restype = None
            lib.strata_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                              ctypes.c_void_p]
            lib.strata_gpu_get_stats.restype = ctypes.c_int
            lib.strata_gpu_get_stats.argtypes = [ctypes.c_int, ctypes.POINTER(_Stats)]
            lib.strata_gpu_trim.restype = ctypes.c_int
            lib.strata_gpu_trim.argtypes = [ctypes.c_int, ctypes.c_size_t]
            lib.strata_gpu_last_error.restype = ctypes.c_char_p
            lib.strata_gpu_last_error.argtypes = []
            _lib = lib
        return _lib


def _last_error(lib) -> str:
    return (lib.strata_gpu_last_error() or b"").decode(errors="replace")


# ctypes converts a Python int to c_int / c_ssize_t / c_size_t / c_void_p by keeping its low
# bits, without a word: a size of 2**64 + 100 would allocate 100 bytes, device 2**32 would be
# device 0, keep_bytes=-1 would keep everything.  Every number is checked before it gets there.
_INT_MAX = 2**31 - 1
_SSIZE_MAX = 2**63 - 1
_UINTPTR_MAX = 2**64 - 1


def _integer(value, what: str, lowest: int, highest: int) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"strata_gpu: {what} must be an integer, not {type(value).__name__}") from None
    if not lowest <= n <= highest:
        raise ValueError(f"strata_gpu: {what} {n} out of range [{lowest}, {highest}]")
    return n


def _device(device) -> int:
    return _integer(device, "device ordinal", 0, _INT_MAX)


class StrataAllocation:
    """Owns one block: freed through strata, on the stream it was allocated on, when the last
    reference goes (CuPy keeps it as the owner of an UnownedMemory).  size >= 1 bytes, device_id
    >= 0, stream a handle (int or None): anything else raises TypeError or ValueError before it
    reaches the library."""

    __slots__ = ("ptr", "size", "device_id", "stream", "_lib")

    def __init__(self, size: int, device_id: int, stream: int):
        self.ptr = 0  # __del__ runs even when the allocation below fails
        size = _integer(size, "size", 1, _SSIZE_MAX)
        device_id = _device(device_id)
        stream = _integer(0 if stream is None else stream, "stream", 0, _UINTPTR_MAX)
        lib = library()
        ptr = lib.strata_torch_malloc(size, device_id, stream)
        if not ptr:
            raise MemoryError(f"strata_gpu: cannot allocate {size} bytes on device {device_id}: "
                              f"{_last_error(lib)}")
        self.ptr, self.size, self.device_id, self.stream, self._lib = ptr, size, device_id, stream, lib

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self._lib.strata_torch_free(ptr, self.size, self.device_id, self.stream)

    def __del__(self):
        self.free()


def cupy_malloc(size: int):
    """cupy.cuda.set_allocator-compatible: size in bytes -> cupy.cuda.MemoryPointer, on the current
    device and CuPy's current stream.  The block goes back to strata when CuPy drops the pointer."""
    import cupy

    size = _integer(size, "size", 0, _SSIZE_MAX)
    device_id = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream().ptr
    if size == 0:  # CuPy asks for 0-byte buffers; strata's allocate(0) is nullptr
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(0, 0, None, device_id), 0)
    block = StrataAllocation(size, device_id, stream)
    mem = cupy.cuda.UnownedMemory(block.ptr, size, block, device_id)
    return cupy.cuda.MemoryPointer(mem, 0)


def torch_allocator():
    """A torch.cuda.memory.CUDAPluggableAllocator over this library, for
    torch.cuda.memory.change_current_allocator (before the first CUDA allocation)."""
    import torch

    return torch.cuda.memory.CUDAPluggableAllocator(library_path(), MALLOC, FREE)


def stats(device: int = 0) -> dict:
    """What strata holds on `device`: bytes_in_use, peak_bytes_in_use, reserved, peak_reserved,
    free, largest_free_block, fragmentation (1 - largest free / free), allocations,
    total_allocations, failed_allocations.  Allocations from PyTorch and CuPy both count.
    A device that is not an int >= 0: TypeError / ValueError; one strata cannot use: RuntimeError."""
    device = _device(device)
    lib = library()
    s = _Stats()
    if lib.strata_gpu_get_stats(device, ctypes.byref(s)) != 0:
        raise RuntimeError(f"strata_gpu: no statistics for device {device}: {_last_error(lib)}")
    return {name: getattr(s, name) for name, _ in _Stats._fields_}


def trim(device: int = 0, keep_bytes: int = 0) -> None:
    """Synchronises the device and returns free memory until at most keep_bytes stay reserved
    (keep_bytes: an int >= 0, else TypeError / ValueError)."""
    device = _device(device)
    keep_bytes = _integer(keep_bytes, "keep_bytes", 0, 2**64 - 1)
    lib = library()
    if lib.strata_gpu_trim(device, keep_bytes) != 0:
        raise RuntimeError(f"strata_gpu: trim failed on device {device}: {_last_error(lib)}")
