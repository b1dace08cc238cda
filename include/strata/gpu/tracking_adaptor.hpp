// tracking_adaptor: remembers every outstanding allocation (pointer, size, stream, alignment)
// and counts deallocations that do not match one (unknown pointer, wrong size or alignment).
// Used to find leaks and mismatched frees; one mutex, so not for the fast path.
//
// Upstream ownership: a reference; the upstream must outlive the adaptor.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>

#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace strata::gpu {

struct tracked_allocation {
  std::size_t bytes = 0;
  stream_view stream;
  std::size_t alignment = 0;
};

class tracking_adaptor final : public device_memory_resource {
 public:
  explicit tracking_adaptor(device_memory_resource& upstream)
      : device_memory_resource(upstream.shared_backend()), upstream_(upstream) {}

  device_memory_resource& upstream() const noexcept { return upstream_; }

  std::unordered_map<const void*, tracked_allocation> outstanding() const {
    std::lock_guard lock(mutex_);
    return live_;
  }
  std::size_t outstanding_bytes() const {
    std::lock_guard lock(mutex_);
    return live_bytes_;
  }
  std::size_t mismatched_deallocations() const {
    std::lock_guard lock(mutex_);
    return mismatches_;
  }

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override {
    void* p = upstream_.allocate(bytes, stream, alignment);
    std::lock_guard lock(mutex_);
    live_[p] = tracked_allocation{bytes, stream, alignment};
    live_bytes_ += bytes;
    return p;
  }

  // A mismatched free is counted and NOT forwarded: passing a wrong size upstream could
  // corrupt its free lists, and the point of tracking is to report, not to crash.
  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override {
    {
      std::lock_guard lock(mutex_);
      auto it = live_.find(p);
      if (it == live_.end() || it->second.bytes != bytes || it->second.alignment != alignment) {
        ++mismatches_;
        return;
      }
      live_bytes_ -= bytes;
      live_.erase(it);
    }
    upstream_.deallocate(p, bytes, stream, alignment);
  }

  resource_info do_info() const override { return upstream_.info(); }
  std::string_view do_name() const noexcept override { return "tracking"; }

  device_memory_resource& upstream_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, tracked_allocation> live_;
  std::size_t live_bytes_ = 0;
  std::size_t mismatches_ = 0;
};

}  // namespace strata::gpu
