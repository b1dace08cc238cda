// limiting_adaptor: refuses allocations that would take the bytes outstanding through it past
// a limit, with out_of_memory_error (free total = limit - outstanding; a byte budget has no
// fragmentation, so it reports 0).  Sizes count rounded up to the native alignment.
//
// Upstream ownership: a reference; the upstream must outlive the adaptor.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>

#include <atomic>
#include <cstddef>

namespace strata::gpu {

class limiting_adaptor final : public device_memory_resource {
 public:
  limiting_adaptor(device_memory_resource& upstream, std::size_t limit_bytes)
      : device_memory_resource(upstream.shared_backend()), upstream_(upstream), limit_(limit_bytes) {}

  device_memory_resource& upstream() const noexcept { return upstream_; }
  std::size_t limit() const noexcept { return limit_; }
  std::size_t used() const noexcept { return used_.load(std::memory_order_relaxed); }

 private:
  static std::size_t charge(std::size_t bytes, std::size_t alignment) noexcept {
    const std::size_t a = alignment > native_alignment ? alignment : native_alignment;
    if (bytes > (std::size_t{1} << 62)) return bytes;  // absurd: refused below, no overflow
    return (bytes + a - 1) & ~(a - 1);
  }

  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override {
    const std::size_t c = charge(bytes, alignment);
    std::size_t used = used_.load(std::memory_order_relaxed);
    do {
      if (c > limit_ || used > limit_ - c)
        throw out_of_memory_error("limiting", bytes, limit_ - used, 0.0);
    } while (!used_.compare_exchange_weak(used, used + c, std::memory_order_relaxed));
    try {
      return upstream_.allocate(bytes, stream, alignment);
    } catch (...) {
      used_.fetch_sub(c, std::memory_order_relaxed);
      throw;
    }
  }

  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override {
    upstream_.deallocate(p, bytes, stream, alignment);
    used_.fetch_sub(charge(bytes, alignment), std::memory_order_relaxed);
  }

  resource_info do_info() const override { return upstream_.info(); }
  std::string_view do_name() const noexcept override { return "limiting"; }

  device_memory_resource& upstream_;
  const std::size_t limit_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace strata::gpu
