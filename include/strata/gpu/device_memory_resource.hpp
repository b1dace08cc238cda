// device_memory_resource: the one interface every device resource and adaptor implements.
//
//   void* allocate(bytes, stream, alignment)
//   void  deallocate(ptr, bytes, stream, alignment)
//
// Public, non-virtual; they validate arguments and forward to the private virtual do_*.
// Semantics every implementation keeps (the conformance suite checks them):
//   * allocate(0, ...) returns nullptr; deallocate(nullptr, ...) does nothing.
//   * alignment is a power of two no larger than max_alignment, otherwise std::invalid_argument;
//     every pointer is at least native_alignment (256 B) aligned.
//   * a request that cannot be met throws out_of_memory_error (a std::bad_alloc).
//   * memory is stream-ordered: a block deallocated on stream S may be handed out again at once
//     for work on S, and for work on another stream only once the work enqueued on S before the
//     deallocation has completed or the other stream waits for it.
//   * deallocate must get the same bytes and alignment that allocate got, and a pointer this
//     resource's allocate returned and that has not been deallocated since: only pool checks it
//     (arena and strata may hand such a block out again; tracking_adaptor finds such frees).
#pragma once

#include <strata/gpu/device_backend.hpp>
#include <strata/gpu/errors.hpp>
#include <strata/gpu/stream_view.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>

namespace strata::gpu {

// A resource's view of its own memory, for benchmarks and out-of-memory reports.
struct resource_info {
  std::size_t reserved_bytes = 0;       // held from the upstream / device now
  std::size_t peak_reserved_bytes = 0;  // high-water mark of reserved_bytes
  std::size_t allocated_bytes = 0;      // handed out, not yet returned (rounded sizes)
  std::size_t free_bytes = 0;           // reserved and not handed out
  std::optional<std::size_t> largest_free_block;  // unknown when the driver manages the memory
  std::optional<std::uint64_t> lock_wait_ns;      // time spent waiting for contended locks;
                                                  // nullopt when the resource has no lock
  // 1 - largest free block / total free; 0 with nothing free; NaN when unknown.
  double fragmentation() const noexcept {
    if (!largest_free_block) return std::numeric_limits<double>::quiet_NaN();
    if (free_bytes == 0) return 0.0;
    return 1.0 - static_cast<double>(*largest_free_block) / static_cast<double>(free_bytes);
  }
};

class device_memory_resource {
 public:
  static constexpr std::size_t native_alignment = 256;
  static constexpr std::size_t max_alignment = std::size_t{1} << 21;
  static constexpr std::size_t max_request = std::size_t{1} << 62;

  // The resource shares ownership of its backend: the backend lives as long as any resource.
  explicit device_memory_resource(std::shared_ptr<device_backend> backend);
  virtual ~device_memory_resource() = default;
  device_memory_resource(const device_memory_resource&) = delete;
  device_memory_resource& operator=(const device_memory_resource&) = delete;

  void* allocate(std::size_t bytes, stream_view stream = {},
                 std::size_t alignment = native_alignment) {
    check_alignment(alignment);
    if (bytes == 0) return nullptr;
    if (bytes > max_request) [[unlikely]]
      throw_out_of_memory(bytes);  // no device has 2^62 bytes; keeps size arithmetic exact
    return do_allocate(bytes, stream, alignment);
  }

  void deallocate(void* p, std::size_t bytes, stream_view stream = {},
                  std::size_t alignment = native_alignment) noexcept {
    if (p == nullptr) return;
    do_deallocate(p, bytes, stream, alignment);
  }

  resource_info info() const { return do_info(); }
  std::string_view name() const noexcept { return do_name(); }
  device_backend& backend() const noexcept { return *backend_; }
  const std::shared_ptr<device_backend>& shared_backend() const noexcept { return backend_; }

  // Throws out_of_memory_error for `bytes`, filled in from info().
  [[noreturn]] void throw_out_of_memory(std::size_t bytes) const;

 private:
  static void check_alignment(std::size_t alignment);

  virtual void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) = 0;
  virtual void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                             std::size_t alignment) noexcept = 0;
  virtual resource_info do_info() const = 0;
  virtual std::string_view do_name() const noexcept = 0;

  std::shared_ptr<device_backend> backend_;
};

}  // namespace strata::gpu
