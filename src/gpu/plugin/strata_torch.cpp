// libstrata_torch.so: the C entry points of include/strata/gpu/plugin.h over one resource stack
// per device (statistics_adaptor -> strata_resource -> cuda_resource -> backend).
//
// Nothing here allocates on the fast path beyond strata_resource itself: the device's stack is
// found through an atomic pointer, built once under a mutex.  Every entry point catches every
// exception: they are called from C (PyTorch's allocator, ctypes), where one must not escape.
#include <strata/gpu/plugin.h>

#include <strata/gpu/gpu.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace strata::gpu {
namespace {

constexpr int max_devices = 64;

// This thread's last failure.  A plain array, not a std::string: a thread_local with a
// destructor dies when its thread ends, for the main thread before the atexit handlers and
// static destructors from which frameworks still free tensors (plugin.h), and a failure there
// would write into freed memory.  Longer reasons are cut; the array is never freed.
thread_local char last_error[512];

__attribute__((format(printf, 1, 2))) void set_last_error(const char* format, ...) noexcept {
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(last_error, sizeof last_error, format, ap);
  va_end(ap);
}

// A whole number in digits from the environment, at most `max`; nothing when unset or empty.
std::optional<unsigned long long> env_count(const char* name, unsigned long long max, const char* unit) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  // Digits only: strtoull would take "-1" as 2^64 - 1.
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*v < '0' || *v > '9' || *end != '\0')
    throw std::invalid_argument(std::string(name) + ": not a number of " + unit + ": " + v);
  if (errno == ERANGE || n > max)
    throw std::invalid_argument(std::string(name) + ": more " + unit + " than " +
                                std::to_string(max) + ": " + v);
  return n;
}

// More than 2^44 MiB would wrap in bytes.  `fallback` is in bytes (not always whole MiB).
std::size_t env_mib(const char* name, std::size_t fallback) {
  auto n = env_count(name, SIZE_MAX >> 20, "MiB");
  return n ? static_cast<std::size_t>(*n) << 20 : fallback;
}

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const std::string s = v;
  if (s == "0" || s == "1") return s == "1";
  throw std::invalid_argument(std::string(name) + " must be 0 or 1, not '" + s + "'");
}

// One device's stack, upstream first.
struct device_stack {
  std::shared_ptr<device_backend> backend;
  std::shared_ptr<sim_backend> sim;  // set on the simulated device
  std::unique_ptr<cuda_resource> device_memory;
  std::unique_ptr<strata_resource> strata;
  std::unique_ptr<statistics_adaptor> stats;
  std::atomic<std::uint64_t> failed{0};

  explicit device_stack(int device) {
    const char* b = std::getenv("STRATA_GPU_BACKEND");
    const std::string name = b && *b ? b : "cuda";
    if (name == "sim") {
      sim_options so;
      so.capacity_bytes = env_mib("STRATA_GPU_SIM_MIB", std::size_t{8} << 30);
      sim = make_sim_backend(so);
      backend = sim;
    } else if (name == "cuda") {
      backend = make_cuda_backend(device);
    } else {
      throw std::invalid_argument("STRATA_GPU_BACKEND must be cuda or sim, not '" + name + "'");
    }
    strata_options o;
    o.initial_size = env_mib("STRATA_GPU_INITIAL_MIB", o.initial_size);
    o.maximum_size = env_mib("STRATA_GPU_MAXIMUM_MIB", o.maximum_size);
    o.release_threshold = env_mib("STRATA_GPU_RELEASE_THRESHOLD_MIB", o.release_threshold);
    o.cache_bytes = env_mib("STRATA_GPU_CACHE_MIB", o.cache_bytes);
    o.wait_before_growth = env_flag("STRATA_GPU_WAIT_BEFORE_GROWTH", o.wait_before_growth);
    // A program that handles out-of-memory itself (PyTorch's allocator raises at once) may not
    // want a failing call to wait for other threads' frees first (an hour at most).
    if (auto ms = env_count("STRATA_GPU_PRESSURE_WAIT_MS", 3600000, "milliseconds"))
      o.pressure_wait = std::chrono::milliseconds(*ms);
    device_memory = std::make_unique<cuda_resource>(backend);
    strata = std::make_unique<strata_resource>(*device_memory, o);
    stats = std::make_unique<statistics_adaptor>(*strata);
  }
};

std::array<std::atomic<device_stack*>, max_devices> stacks{};
std::mutex stacks_mutex;

// The device's stack, built on first use; never destroyed (see plugin.h).
device_stack& stack_for(int device) {
  if (device < 0 || device >= max_devices)
    throw std::invalid_argument("device ordinal " + std::to_string(device) + " out of range");
  if (device_stack* s = stacks[device].load(std::memory_order_acquire)) [[likely]]
    return *s;
  std::lock_guard lock(stacks_mutex);
  if (device_stack* s = stacks[device].load(std::memory_order_acquire)) return *s;
  auto* s = new device_stack(device);
  stacks[device].store(s, std::memory_order_release);
  return *s;
}

// Runs f, turning an exception into `failure` and this thread's last_error.
template <class F, class R>
R guarded(F&& f, R failure) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    set_last_error("%s", e.what());
  } catch (...) {
    set_last_error("unknown exception");
  }
  return failure;
}

}  // namespace
}  // namespace strata::gpu

using namespace strata::gpu;

extern "C" {

void* strata_torch_malloc(ssize_t size, int device, void* stream) {
  if (size <= 0) [[unlikely]] {  // not a failure of the device, but NULL must come with its reason
    set_last_error("strata_torch_malloc: size %zd: nothing to allocate", size);
    return nullptr;
  }
  return guarded(
      [&]() -> void* {
        device_stack& s = stack_for(device);
        try {
          return s.stats->allocate(static_cast<std::size_t>(size), stream_view{stream});
        } catch (const std::bad_alloc&) {
          s.failed.fetch_add(1, std::memory_order_relaxed);
          throw;
        }
      },
      static_cast<void*>(nullptr));
}

void strata_torch_free(void* p, ssize_t size, int device, void* stream) {
  if (p == nullptr) return;
  if (size <= 0) [[unlikely]] {  // no block of strata's has such a size: left alone, and said so
    set_last_error("strata_torch_free: size %zd for %p: not freed", size, p);
    return;
  }
  guarded(
      [&] {
        stack_for(device).stats->deallocate(p, static_cast<std::size_t>(size), stream_view{stream});
        return 0;
      },
      0);
}

int strata_gpu_get_stats(int device, strata_gpu_stats* out) {
  if (out == nullptr) {
    set_last_error("strata_gpu_get_stats: out is NULL");
    return -1;
  }
  return guarded(
      [&] {
        device_stack& s = stack_for(device);
        const allocation_counts c = s.stats->counts();
        const resource_info i = s.stats->info();
        const double f = i.fragmentation();
        *out = strata_gpu_stats{static_cast<std::uint64_t>(c.current_bytes),
                                static_cast<std::uint64_t>(c.peak_bytes),
                                i.reserved_bytes,
                                i.peak_reserved_bytes,
                                i.free_bytes,
                                i.largest_free_block.value_or(0),
                                f == f ? f : 0.0,
                                static_cast<std::uint64_t>(c.current_count),
                                static_cast<std::uint64_t>(c.total_count),
                                s.failed.load(std::memory_order_relaxed)};
        return 0;
      },
      -1);
}

int strata_gpu_trim(int device, size_t keep_bytes) {
  return guarded(
      [&] {
        stack_for(device).strata->trim(keep_bytes);
        return 0;
      },
      -1);
}

void* strata_gpu_stream_create(int device) {
  return guarded([&] { return stack_for(device).backend->stream_create().handle(); },
                 static_cast<void*>(nullptr));
}

int strata_gpu_stream_destroy(int device, void* stream) {
  return guarded(
      [&] {
        stack_for(device).backend->stream_destroy(stream_view{stream});
        return 0;
      },
      -1);
}

int strata_gpu_synchronize(int device) {
  return guarded(
      [&] {
        stack_for(device).backend->device_synchronize();
        return 0;
      },
      -1);
}

long strata_gpu_sim_violations(int device) {
  return guarded(
      [&] {
        device_stack& s = stack_for(device);
        return s.sim ? static_cast<long>(s.sim->violation_count()) : -1L;
      },
      -1L);
}

const char* strata_gpu_last_error(void) { return last_error; }

}  // extern "C"
