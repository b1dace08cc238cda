// The CUDA driver API, loaded at run time through src/os/dl.h (src/os/ is the only code that
// calls dlopen/dlsym).  This file and driver.cpp are the only GPU code that names a CUDA type
// or binds a driver entry point.  strata declares the few driver types it needs itself (values
// checked against cuda.h), so no toolkit is needed to build.
#pragma once

#include <cstddef>
#include <string>

namespace strata::gpu::detail::cu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmemoryPool = struct CUmemPoolHandle_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;

inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr int CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115;

inline constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = 1;
inline constexpr int CU_MEM_HANDLE_TYPE_NONE = 0;
inline constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 1;

inline constexpr int CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;   // cuuint64_t
inline constexpr int CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5;
inline constexpr int CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6;
inline constexpr int CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7;

struct CUmemLocation {
  int type;
  int id;
};

// Layout of CUDA 12's CUmemPoolProps (88 bytes; older drivers read maxSize/usage as reserved
// zeroes, which is what they must be there).
struct CUmemPoolProps {
  int allocType;
  int handleTypes;
  CUmemLocation location;
  void* win32SecurityAttributes;
  std::size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};
static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps must match the driver's layout");

struct driver_api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);  // cuDevicePrimaryCtxRelease_v2
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t);      // cuMemAlloc_v2
  CUresult (*cuMemFree)(CUdeviceptr);                     // cuMemFree_v2
  CUresult (*cuMemGetInfo)(std::size_t*, std::size_t*);  // cuMemGetInfo_v2
  // The seven pool entry points: CUDA 11.2; all nullptr when any is missing.
  CUresult (*cuMemPoolCreate)(CUmemoryPool*, const CUmemPoolProps*);
  CUresult (*cuMemPoolDestroy)(CUmemoryPool);
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, int, void*);
  CUresult (*cuMemPoolGetAttribute)(CUmemoryPool, int, void*);
  CUresult (*cuMemPoolTrimTo)(CUmemoryPool, std::size_t);
  CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuStreamCreateWithPriority)(CUstream*, unsigned, int);
  CUresult (*cuStreamDestroy)(CUstream);  // cuStreamDestroy_v2
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamGetId)(CUstream, unsigned long long*);  // CUDA 12.0; nullptr when missing
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);  // cuEventDestroy_v2
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
};

// The driver, loaded and cuInit'ed once per process.  Throws driver_error naming the reason
// (library not found, entry point missing, cuInit failed).
const driver_api& driver();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for r.
std::string describe(const driver_api& api, CUresult r);

}  // namespace strata::gpu::detail::cu
