#include "gpu/driver.hpp"

#include "os/dl.h"

#include <strata/gpu/errors.hpp>

#include <cstdlib>
#include <mutex>
#include <string>

namespace strata::gpu::detail::cu {
namespace {

struct loaded {
  driver_api api{};
  std::string error;  // empty when loaded
};

template <class F>
bool bind(void* lib, F& slot, const char* symbol, std::string& error) {
  void* p = os::find_symbol(lib, symbol);
  if (p == nullptr) {
    if (error.empty())
      error = std::string("the CUDA driver has no entry point ") + symbol +
              " (driver too old: strata needs a CUDA 11.0 or newer driver)";
    return false;
  }
  slot = reinterpret_cast<F>(p);
  return true;
}

// An entry point strata can do without: the slot stays nullptr when the driver lacks it.
template <class F>
void bind_optional(void* lib, F& slot, const char* symbol) {
  if (void* p = os::find_symbol(lib, symbol)) slot = reinterpret_cast<F>(p);
}

loaded load() {
  loaded out;
  // secure_getenv: a setuid or setgid program does not load a library its caller names.
  const char* name = secure_getenv("STRATA_CUDA_LIBRARY");
  if (name == nullptr || *name == '\0') name = "libcuda.so.1";
  char why[512];
  void* lib = os::load_library(name, why, sizeof why);
  if (lib == nullptr) {
    out.error = std::string("cannot load the CUDA driver library ") + name +
                " (no NVIDIA driver installed?): " + why;
    return out;
  }
  driver_api& a = out.api;
  std::string& e = out.error;
  bind(lib, a.cuInit, "cuInit", e);
  bind(lib, a.cuDriverGetVersion, "cuDriverGetVersion", e);
  bind(lib, a.cuDeviceGetCount, "cuDeviceGetCount", e);
  bind(lib, a.cuDeviceGet, "cuDeviceGet", e);
  bind(lib, a.cuDeviceGetName, "cuDeviceGetName", e);
  bind(lib, a.cuDeviceGetAttribute, "cuDeviceGetAttribute", e);
  bind(lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", e);
  bind(lib, a.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", e);
  bind(lib, a.cuCtxGetCurrent, "cuCtxGetCurrent", e);
  bind(lib, a.cuCtxSetCurrent, "cuCtxSetCurrent", e);
  bind(lib, a.cuCtxSynchronize, "cuCtxSynchronize", e);
  bind(lib, a.cuMemAlloc, "cuMemAlloc_v2", e);
  bind(lib, a.cuMemFree, "cuMemFree_v2", e);
  bind(lib, a.cuMemGetInfo, "cuMemGetInfo_v2", e);
  // The stream-ordered pool (CUDA 11.2): without it, supports_async_pool() is false and every
  // resource but async still works.
  bind_optional(lib, a.cuMemPoolCreate, "cuMemPoolCreate");
  bind_optional(lib, a.cuMemPoolDestroy, "cuMemPoolDestroy");
  bind_optional(lib, a.cuMemPoolSetAttribute, "cuMemPoolSetAttribute");
  bind_optional(lib, a.cuMemPoolGetAttribute, "cuMemPoolGetAttribute");
  bind_optional(lib, a.cuMemPoolTrimTo, "cuMemPoolTrimTo");
  bind_optional(lib, a.cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
  bind_optional(lib, a.cuMemFreeAsync, "cuMemFreeAsync");
  if (!a.cuMemPoolDestroy || !a.cuMemPoolSetAttribute || !a.cuMemPoolGetAttribute ||
      !a.cuMemPoolTrimTo || !a.cuMemAllocFromPoolAsync || !a.cuMemFreeAsync)
    a.cuMemPoolCreate = nullptr;  // all or none
  bind(lib, a.cuStreamCreateWithPriority, "cuStreamCreateWithPriority", e);
  bind(lib, a.cuStreamDestroy, "cuStreamDestroy_v2", e);
  bind(lib, a.cuStreamSynchronize, "cuStreamSynchronize", e);
  bind_optional(lib, a.cuStreamGetId, "cuStreamGetId");  // without it stream_id is 0 (unknown)
  bind(lib, a.cuStreamWaitEvent, "cuStreamWaitEvent", e);
  bind(lib, a.cuEventCreate, "cuEventCreate", e);
  bind(lib, a.cuEventDestroy, "cuEventDestroy_v2", e);
  bind(lib, a.cuEventRecord, "cuEventRecord", e);
  bind(lib, a.cuEventQuery, "cuEventQuery", e);
  bind(lib, a.cuEventSynchronize, "cuEventSynchronize", e);
  bind(lib, a.cuModuleLoadData, "cuModuleLoadData", e);
  bind(lib, a.cuModuleUnload, "cuModuleUnload", e);
  bind(lib, a.cuModuleGetFunction, "cuModuleGetFunction", e);
  bind(lib, a.cuLaunchKernel, "cuLaunchKernel", e);
  bind(lib, a.cuGetErrorName, "cuGetErrorName", e);
  bind(lib, a.cuGetErrorString, "cuGetErrorString", e);
  if (!e.empty()) return out;  // the library stays loaded: it is the process's driver anyway
  if (CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
    e = "cuInit failed: " + describe(a, r);
    if (r == CUDA_ERROR_NO_DEVICE) e += " - no CUDA-capable GPU is visible";
  }
  return out;
}

}  // namespace

const driver_api& driver() {
  static const loaded state = load();
  if (!state.error.empty()) throw driver_error(state.error);
  return state.api;
}

std::string describe(const driver_api& api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &text);
  std::string out = name ? name : "CUresult " + std::to_string(r);
  if (text) out += std::string(" (") + text + ")";
  return out;
}

}  // namespace strata::gpu::detail::cu
