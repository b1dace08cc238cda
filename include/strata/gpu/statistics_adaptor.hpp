// statistics_adaptor: counts what passes through to the upstream (current/peak/total bytes and
// allocations).  Lock-free: a few relaxed atomics per call.
//
// Upstream ownership: a reference; the upstream must outlive the adaptor.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace strata::gpu {

struct allocation_counts {
  std::int64_t current_bytes = 0, peak_bytes = 0, total_bytes = 0;
  std::int64_t current_count = 0, peak_count = 0, total_count = 0;
};

class statistics_adaptor final : public device_memory_resource {
 public:
  explicit statistics_adaptor(device_memory_resource& upstream)
      : device_memory_resource(upstream.shared_backend()), upstream_(upstream) {}

  device_memory_resource& upstream() const noexcept { return upstream_; }

  // A snapshot while other threads allocate: a thread adds its bytes before it raises the
  // peak, so the current value read here may be a peak not yet recorded; it counts as one.
  allocation_counts counts() const noexcept {
    allocation_counts c;
    c.current_bytes = current_bytes_.load(std::memory_order_relaxed);
    c.peak_bytes = std::max(peak_bytes_.load(std::memory_order_relaxed), c.current_bytes);
    c.total_bytes = total_bytes_.load(std::memory_order_relaxed);
    c.current_count = current_count_.load(std::memory_order_relaxed);
    c.peak_count = std::max(peak_count_.load(std::memory_order_relaxed), c.current_count);
    c.total_count = total_count_.load(std::memory_order_relaxed);
    return c;
  }

 private:
  static void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t value) noexcept {
    std::int64_t seen = peak.load(std::memory_order_relaxed);
    while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
  }

  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override {
    void* p = upstream_.allocate(bytes, stream, alignment);
    const auto b = static_cast<std::int64_t>(bytes);
    raise_peak(peak_bytes_, current_bytes_.fetch_add(b, std::memory_order_relaxed) + b);
    raise_peak(peak_count_, current_count_.fetch_add(1, std::memory_order_relaxed) + 1);
    total_bytes_.fetch_add(b, std::memory_order_relaxed);
    total_count_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }

  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override {
    upstream_.deallocate(p, bytes, stream, alignment);
    current_bytes_.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
    current_count_.fetch_sub(1, std::memory_order_relaxed);
  }

  resource_info do_info() const override { return upstream_.info(); }
  std::string_view do_name() const noexcept override { return "statistics"; }

  device_memory_resource& upstream_;
  std::atomic<std::int64_t> current_bytes_{0}, peak_bytes_{0}, total_bytes_{0};
  std::atomic<std::int64_t> current_count_{0}, peak_count_{0}, total_count_{0};
};

}  // namespace strata::gpu
