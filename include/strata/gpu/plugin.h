/* strata GPU plug-in: the C entry points of build/lib/libstrata_torch.so, which frameworks load
 * at run time to allocate device memory through strata_resource (docs/gpu.md, "Plug-ins").
 *
 *   PyTorch  torch.cuda.memory.CUDAPluggableAllocator(path, "strata_torch_malloc",
 *                                                      "strata_torch_free")
 *   CuPy     cupy.cuda.set_allocator(strata_gpu.cupy_malloc)   (python/strata_gpu, over ctypes)
 *
 * One resource stack per device ordinal, built on first use and never destroyed (frameworks free
 * tensors during interpreter teardown, after static destructors have run):
 *   statistics_adaptor -> strata_resource -> cuda_resource -> the device backend.
 * Configured from the environment, read once per device at first use:
 *   STRATA_GPU_BACKEND            cuda (default: the CUDA driver, dlopen'ed) or sim (the
 *                                 simulated device: tests, machines without a GPU)
 *   STRATA_GPU_SIM_MIB            the simulated device's memory (default 8192)
 *   STRATA_GPU_INITIAL_MIB        strata_options::initial_size (default 64)
 *   STRATA_GPU_MAXIMUM_MIB        strata_options::maximum_size (default: no cap)
 *   STRATA_GPU_RELEASE_THRESHOLD_MIB  strata_options::release_threshold (default: keep all)
 *   STRATA_GPU_CACHE_MIB          strata_options::cache_bytes (default: no cap)
 *   STRATA_GPU_WAIT_BEFORE_GROWTH strata_options::wait_before_growth, 0 or 1 (default 0)
 *   STRATA_GPU_PRESSURE_WAIT_MS   strata_options::pressure_wait in ms (default 200, at most 3600000)
 *
 * Streams are the framework's own (cudaStream_t == CUstream); 0 is the legacy default stream.
 * A block must be freed with the size and stream it was allocated with, as both frameworks do.
 */
#ifndef STRATA_GPU_PLUGIN_H
#define STRATA_GPU_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define STRATA_GPU_API __attribute__((visibility("default")))
#else
#define STRATA_GPU_API
#endif

/* PyTorch's CUDAPluggableAllocator signatures (cudaStream_t spelled as void*).  malloc returns
 * NULL when the memory is not there, or for size <= 0 (the reason: strata_gpu_last_error()).
 * free ignores NULL, and refuses (with a reason, freeing nothing) a size <= 0. */
STRATA_GPU_API void* strata_torch_malloc(ssize_t size, int device, void* stream);
STRATA_GPU_API void strata_torch_free(void* p, ssize_t size, int device, void* stream);

/* What one device's resource holds (bytes unless named otherwise). */
typedef struct strata_gpu_stats {
  uint64_t bytes_in_use;       /* requested by the framework, not yet freed */
  uint64_t peak_bytes_in_use;  /* high-water mark of bytes_in_use */
  uint64_t reserved;           /* held from the device now */
  uint64_t peak_reserved;      /* high-water mark of reserved */
  uint64_t free;               /* reserved and not handed out */
  uint64_t largest_free_block;
  double fragmentation;        /* 1 - largest_free_block / free; 0 with nothing free */
  uint64_t allocations;        /* live allocations */
  uint64_t total_allocations;  /* ever made */
  uint64_t failed_allocations; /* malloc calls that returned NULL for lack of memory */
} strata_gpu_stats;

/* 0 and *out filled in; -1 when the device's resource cannot be built (see last_error). */
STRATA_GPU_API int strata_gpu_get_stats(int device, strata_gpu_stats* out);

/* Synchronises the device and returns wholly free memory until at most keep_bytes stay
 * reserved (torch.cuda.empty_cache's counterpart).  0, or -1 on failure. */
STRATA_GPU_API int strata_gpu_trim(int device, size_t keep_bytes);

/* Streams on the device's backend, for callers without a framework of their own (tests, the
 * simulated device).  NULL / -1 on failure. */
STRATA_GPU_API void* strata_gpu_stream_create(int device);
STRATA_GPU_API int strata_gpu_stream_destroy(int device, void* stream);
STRATA_GPU_API int strata_gpu_synchronize(int device);

/* Simulated device only: how many blocks the reuse checker saw handed out while work enqueued
 * before their release on another stream could still be pending.  -1 on the real driver. */
STRATA_GPU_API long strata_gpu_sim_violations(int device);

/* The reason for this thread's last failure (a NULL or -1 above, or a free that was refused),
 * "" if none.  The text stays valid until this thread's next failure, at exit too. */
STRATA_GPU_API const char* strata_gpu_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_GPU_PLUGIN_H */
