// The real device: every call goes to the CUDA driver loaded by driver.cpp.
#include "gpu/driver.hpp"

#include <strata/gpu/device_backend.hpp>
#include <strata/gpu/errors.hpp>

#include <cstdint>
#include <string>

namespace strata::gpu {
namespace {

using namespace detail::cu;

// Spins the calling thread for `ns` nanoseconds of %globaltimer.  One thread is enough: the
// kernel exists to occupy the stream, not the SMs.  Hand-written so no compiler is needed.
constexpr const char* spin_ptx = R"(
.version 6.0
.target sm_50
.address_size 64

.visible .entry strata_spin(.param .u64 strata_spin_ns)
{
  .reg .pred %p;
  .reg .u64 %start, %now, %end, %ns;
  ld.param.u64 %ns, [strata_spin_ns];
  mov.u64 %start, %globaltimer;
  add.u64 %end, %start, %ns;
SPIN:
  mov.u64 %now, %globaltimer;
  setp.lt.u64 %p, %now, %end;
  @%p bra SPIN;
  ret;
}
)";

class cuda_backend final : public device_backend {
 public:
  explicit cuda_backend(int ordinal) : api_(driver()) {
    int count = 0;
    check(api_.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (ordinal < 0 || ordinal >= count)
      throw driver_error("CUDA device " + std::to_string(ordinal) + " does not exist (" +
                         std::to_string(count) + " visible)");
    check(api_.cuDeviceGet(&device_, ordinal), "cuDeviceGet");
    check(api_.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    try {
      make_current();
      int pools = 0;
      api_.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device_);
      // A driver older than 11.2 has no pool entry points (and no such attribute).
      pools_supported_ = pools != 0 && api_.cuMemPoolCreate != nullptr;
      char name[256] = {};
      api_.cuDeviceGetName(name, sizeof name - 1, device_);
      int version = 0;
      api_.cuDriverGetVersion(&version);
      description_ = std::string(name) + ", driver API " + std::to_string(version / 1000) + "." +
                     std::to_string(version % 1000 / 10);
      check(api_.cuModuleLoadData(&module_, spin_ptx), "cuModuleLoadData(spin kernel PTX)");
      check(api_.cuModuleGetFunction(&spin_, module_, "strata_spin"), "cuModuleGetFunction");
    } catch (...) {
      // No destructor runs for a constructor that throws: give back what it took.
      if (module_) api_.cuModuleUnload(module_);
      api_.cuDevicePrimaryCtxRelease(device_);
      throw;
    }
  }

  ~cuda_backend() override {
    make_current();
    api_.cuCtxSynchronize();
    if (module_) api_.cuModuleUnload(module_);
    api_.cuDevicePrimaryCtxRelease(device_);
  }

  std::string_view name() const noexcept override { return "cuda"; }
  std::string description() const override { return description_; }

  void* mem_alloc(std::size_t bytes) override {
    make_current();
    CUdeviceptr p = 0;
    CUresult r = api_.cuMemAlloc(&p, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
    check(r, "cuMemAlloc");
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
  }
  void mem_free(void* p, std::size_t) noexcept override {
    make_current();
    api_.cuMemFree(ptr(p));
  }
  memory_info mem_info() override {
    make_current();
    memory_info m;
    check(api_.cuMemGetInfo(&m.free_bytes, &m.total_bytes), "cuMemGetInfo");
    return m;
  }

  stream_view stream_create(int priority) override {
    make_current();
    CUstream s = nullptr;
    check(api_.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, priority),
          "cuStreamCreateWithPriority");
    return stream_view{s};
  }
  void stream_destroy(stream_view s) noexcept override {
    make_current();
    if (!s.is_default()) api_.cuStreamDestroy(cs(s));
  }
  void stream_synchronize(stream_view s) override {
    make_current();
    check(api_.cuStreamSynchronize(cs(s)), "cuStreamSynchronize");
  }
  // cuStreamGetId (CUDA 12.0 drivers on): an id unique for the life of the program, so a
  // recycled handle reads as a new stream.  0 (unknown) without the entry point or when the
  // driver refuses the call (a destroyed stream not yet recycled; a stream being captured).
  std::uint64_t stream_id(stream_view s) noexcept override {
    if (api_.cuStreamGetId == nullptr) return 0;
    make_current();
    unsigned long long id = 0;
    if (api_.cuStreamGetId(cs(s), &id) != CUDA_SUCCESS) return 0;
    return id;
  }
  void* event_create() override {
    make_current();
    CUevent e = nullptr;
    check(api_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    return e;
  }
  void event_destroy(void* ev) noexcept override {
    make_current();
    api_.cuEventDestroy(static_cast<CUevent>(ev));
  }
  void event_record(void* ev, stream_view s) override {
    make_current();
    check(api_.cuEventRecord(static_cast<CUevent>(ev), cs(s)), "cuEventRecord");
  }
  bool event_query(void* ev) override {
    make_current();
    CUresult r = api_.cuEventQuery(static_cast<CUevent>(ev));
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuEventQuery");
    return true;
  }
  void event_synchronize(void* ev) override {
    make_current();
    check(api_.cuEventSynchronize(static_cast<CUevent>(ev)), "cuEventSynchronize");
  }
  void stream_wait_event(stream_view s, void* ev) override {
    make_current();
    check(api_.cuStreamWaitEvent(cs(s), static_cast<CUevent>(ev), 0), "cuStreamWaitEvent");
  }
  void device_synchronize() override {
    make_current();
    check(api_.cuCtxSynchronize(), "cuCtxSynchronize");
  }

  void launch_spin(stream_view s, std::uint64_t ns) override {
    make_current();
    void* args[] = {&ns};
    check(api_.cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, cs(s), args, nullptr), "cuLaunchKernel");
  }

  bool supports_async_pool() const noexcept override { return pools_supported_; }
  void* pool_create(std::size_t release_threshold) override {
    if (!pools_supported_)
      throw driver_error("this device does not support stream-ordered memory pools");
    make_current();
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device_;
    CUmemoryPool pool = nullptr;
    check(api_.cuMemPoolCreate(&pool, &props), "cuMemPoolCreate");
    unsigned long long threshold = release_threshold;
    const CUresult r =
        api_.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
    if (r != CUDA_SUCCESS) {
      api_.cuMemPoolDestroy(pool);  // the caller never sees it
      check(r, "cuMemPoolSetAttribute(RELEASE_THRESHOLD)");
    }
    return pool;
  }
  void pool_destroy(void* pool) noexcept override {
    make_current();
    api_.cuCtxSynchronize();
    api_.cuMemPoolDestroy(static_cast<CUmemoryPool>(pool));
  }
  void* pool_alloc_async(void* pool, std::size_t bytes, stream_view s) override {
    make_current();
    CUdeviceptr p = 0;
    CUresult r = api_.cuMemAllocFromPoolAsync(&p, bytes, static_cast<CUmemoryPool>(pool), cs(s));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
    check(r, "cuMemAllocFromPoolAsync");
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
  }
  void pool_free_async(void*, void* p, stream_view s) override {
    make_current();
    check(api_.cuMemFreeAsync(ptr(p), cs(s)), "cuMemFreeAsync");
  }
  void pool_trim(void* pool, std::size_t keep) override {
    make_current();
    check(api_.cuMemPoolTrimTo(static_cast<CUmemoryPool>(pool), keep), "cuMemPoolTrimTo");
  }
  pool_usage pool_query(void* pool) override {
    make_current();
    auto get = [&](int attr) {
      unsigned long long v = 0;
      api_.cuMemPoolGetAttribute(static_cast<CUmemoryPool>(pool), attr, &v);
      return static_cast<std::size_t>(v);
    };
    return {get(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), get(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH),
            get(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)};
  }

 private:
  static CUstream cs(stream_view s) noexcept { return static_cast<CUstream>(s.handle()); }
  static CUdeviceptr ptr(void* p) noexcept {
    return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
  }

  // The driver's current context is per host thread; every entry point makes ours current.
  // The driver is asked which context is current, not a cache of what strata set last: other
  // code on the thread (cudaSetDevice, a library pushing or popping its own context) changes
  // it between our calls, and a stale cache sent allocations to that context's device.
  void make_current() const noexcept {
    CUcontext current = nullptr;
    if (api_.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != context_)
      api_.cuCtxSetCurrent(context_);
  }

  void check(CUresult r, const char* what) const {
    if (r != CUDA_SUCCESS) throw driver_error(std::string(what) + " failed: " + describe(api_, r));
  }

  const driver_api& api_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction spin_ = nullptr;
  bool pools_supported_ = false;
  std::string description_;
};

}  // namespace

std::shared_ptr<device_backend> make_cuda_backend(int device) {
  return std::make_shared<cuda_backend>(device);
}

std::shared_ptr<device_backend> make_backend(std::string_view name) {
  if (name == "sim") return make_sim_backend();
  if (name == "cuda") return make_cuda_backend(0);
  throw std::invalid_argument("unknown device backend '" + std::string(name) +
                              "' (expected sim or cuda)");
}

}  // namespace strata::gpu
