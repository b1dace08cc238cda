// stream_view: a non-owning, copyable name for a device stream.
//
// On the real driver the handle is a CUstream; on the simulated device it names a simulated
// stream.  The default-constructed view is the default stream (handle nullptr) of whichever
// backend it is used with.  Streams are created and destroyed through device_backend.
#pragma once

#include <cstdint>
#include <functional>

namespace strata::gpu {

class stream_view {
 public:
  constexpr stream_view() noexcept = default;
  constexpr explicit stream_view(void* handle) noexcept : handle_(handle) {}

  constexpr void* handle() const noexcept { return handle_; }
  constexpr bool is_default() const noexcept { return handle_ == nullptr; }
  std::uintptr_t id() const noexcept { return reinterpret_cast<std::uintptr_t>(handle_); }

  friend constexpr bool operator==(stream_view a, stream_view b) noexcept {
    return a.handle_ == b.handle_;
  }

 private:
  void* handle_ = nullptr;
};

}  // namespace strata::gpu

template <>
struct std::hash<strata::gpu::stream_view> {
  std::size_t operator()(strata::gpu::stream_view s) const noexcept {
    return std::hash<void*>{}(s.handle());
  }
};
