// device_backend: the only way the device resources talk to a device.
//
// Two implementations:
//   make_cuda_backend()  the real CUDA driver, loaded at run time with dlopen("libcuda.so.1");
//                        nothing from a CUDA toolkit is needed to build or link.
//   make_sim_backend()   a simulated device in host memory: one worker thread per stream runs
//                        enqueued operations in order, events complete when their stream reaches
//                        them, and a reuse checker flags any block handed out on one stream while
//                        work enqueued before its release on another stream may still be pending.
//                        Like the driver, it hands a destroyed stream's handle value to the next
//                        stream it creates; the checker keys streams by identity, not handle.
//
// Contract shared by both (the resources rely on it):
//   * mem_alloc returns nullptr when the device is out of memory and throws driver_error for any
//     other failure; mem_free waits for all outstanding device work first (as cuMemFree does).
//   * event_record captures all work enqueued on the stream so far; stream_wait_event makes work
//     enqueued later on the waiting stream run after it (no host blocking).
//   * stream_destroy returns at once; work already enqueued on the stream still runs.  A destroyed
//     stream is an invalid handle: recording on it, waiting or launching on it throws
//     driver_error, until a later stream_create hands the same handle value out again (the
//     driver does so at once, and so does the simulated device).  Resources meet streams their
//     callers have destroyed since, and must survive that.
//   * stream_id tells apart two streams behind one handle value: a nonzero id unique among the
//     backend's streams for the life of the process, or 0 when the backend cannot tell (a
//     driver without cuStreamGetId, a handle it rejects, a stream being captured into a graph).
//     A resource keeps per-stream state under the handle; when the id it recorded differs from
//     the handle's id now (both known), the state belongs to a destroyed stream and no stream
//     order covers it.  An unknown id counts as the same stream, as before ids existed.
//   * the stream-ordered pool calls mirror cuMemAllocFromPoolAsync / cuMemFreeAsync.
//   * note_release/note_reuse are hints for the reuse checker: a resource calls note_release when
//     a block comes back on a stream and note_reuse when it hands the block out again.  The real
//     driver ignores them; resources call them only when checks_reuse() is true.
#pragma once

#include <strata/gpu/stream_view.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::gpu {

struct memory_info {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

// One reuse-checker finding: a block released on `released_on` (after `released_ticket`
// operations had been enqueued there) was handed out on `reused_on` before that work completed
// and without `reused_on` waiting on an event covering it.
struct reuse_violation {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  std::uintptr_t released_on = 0;  // stream handle values
  std::uintptr_t reused_on = 0;
  std::uint64_t released_ticket = 0;
  std::uint64_t released_stream_id = 0;  // stream_id of each: tells a recycled handle apart
  std::uint64_t reused_stream_id = 0;
};

class device_backend {
 public:
  virtual ~device_backend() = default;

  virtual std::string_view name() const noexcept = 0;  // "sim" or "cuda"
  virtual std::string description() const = 0;        // device name, driver version, ...

  // Device memory, synchronous (cuMemAlloc / cuMemFree).
  virtual void* mem_alloc(std::size_t bytes) = 0;
  virtual void mem_free(void* p, std::size_t bytes) noexcept = 0;
  virtual memory_info mem_info() = 0;

  // Streams and events.  Event handles are opaque; create them once and re-record them.
  virtual stream_view stream_create(int priority = 0) = 0;
  virtual void stream_destroy(stream_view s) noexcept = 0;
  virtual void stream_synchronize(stream_view s) = 0;
  // The stream's identity, unique for the life of the process (see above); 0: unknown.
  virtual std::uint64_t stream_id(stream_view) noexcept { return 0; }
  virtual void* event_create() = 0;
  virtual void event_destroy(void* ev) noexcept = 0;
  virtual void event_record(void* ev, stream_view s) = 0;
  virtual bool event_query(void* ev) = 0;  // true once the recorded work has completed
  virtual void event_synchronize(void* ev) = 0;
  virtual void stream_wait_event(stream_view s, void* ev) = 0;
  virtual void device_synchronize() = 0;

  // A kernel that occupies the stream for `ns` nanoseconds (PTX %globaltimer spin on a GPU).
  virtual void launch_spin(stream_view s, std::uint64_t ns) = 0;

  // Stream-ordered memory pool (cuMemPoolCreate + cuMemAllocFromPoolAsync/cuMemFreeAsync).
  virtual bool supports_async_pool() const noexcept = 0;
  virtual void* pool_create(std::size_t release_threshold) = 0;
  virtual void pool_destroy(void* pool) noexcept = 0;
  virtual void* pool_alloc_async(void* pool, std::size_t bytes, stream_view s) = 0;  // nullptr: OOM
  virtual void pool_free_async(void* pool, void* p, stream_view s) = 0;
  virtual void pool_trim(void* pool, std::size_t keep_bytes) = 0;
  struct pool_usage {
    std::size_t reserved = 0, reserved_high = 0, used = 0;
  };
  virtual pool_usage pool_query(void* pool) = 0;

  // Reuse checker hooks (see above).
  bool checks_reuse() const noexcept { return checks_reuse_; }
  virtual void note_release(const void*, std::size_t, stream_view) noexcept {}
  virtual void note_reuse(const void*, std::size_t, stream_view) noexcept {}

 protected:
  bool checks_reuse_ = false;
};

// ---- the simulated device ------------------------------------------------------------------

struct sim_options {
  std::size_t capacity_bytes = std::size_t{8} << 30;  // simulated device memory
  bool check_reuse = true;                            // run the reuse checker
  bool abort_on_violation = false;                    // abort() at the first violation
  std::uint64_t mem_alloc_latency_ns = 0;             // host-side cost added to mem_alloc
};

class sim_backend : public device_backend {
 public:
  // Reuse-checker findings so far (tests assert on them).
  virtual std::vector<reuse_violation> violations() const = 0;
  virtual std::size_t violation_count() const noexcept = 0;
  virtual void clear_violations() noexcept = 0;
  // Operations completed by a stream's worker (tests use it to observe ordering).
  virtual std::uint64_t completed_ops(stream_view s) const = 0;
  // A gate: an operation that holds its stream until the host opens it, so tests can keep
  // work pending for as long as they need without relying on timing.  Owned by the backend.
  virtual void* gate_enqueue(stream_view s) = 0;
  virtual void gate_open(void* gate) = 0;
};

std::shared_ptr<sim_backend> make_sim_backend(sim_options options = {});

// ---- the real driver -----------------------------------------------------------------------

// Loads the driver (STRATA_CUDA_LIBRARY overrides "libcuda.so.1"), initialises it and retains
// the primary context of `device`.  Throws driver_error naming the reason when there is no
// driver, no device, or the driver lacks an entry point strata needs.
std::shared_ptr<device_backend> make_cuda_backend(int device = 0);

// Builds the backend named "sim" or "cuda" (throws std::invalid_argument for other names).
std::shared_ptr<device_backend> make_backend(std::string_view name);

}  // namespace strata::gpu
