// Alignment beyond the native 256 B for resources whose blocks are only natively aligned:
// allocate bytes + alignment - 256, hand out the aligned address inside, and remember the real
// start until deallocate (which gets the same alignment, so only over-aligned frees look here).
#pragma once

#include <strata/gpu/device_memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace strata::gpu::detail {

inline constexpr std::size_t native = device_memory_resource::native_alignment;

constexpr std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) & ~(a - 1); }

// bytes padded so an `alignment`-aligned block of `bytes` fits in a natively aligned block.
constexpr std::size_t padded_size(std::size_t bytes, std::size_t alignment) noexcept {
  return alignment > native ? bytes + alignment - native : bytes;
}

class overaligned_table {
 public:
  void* align(void* base, std::size_t alignment) {
    const auto b = reinterpret_cast<std::uintptr_t>(base);
    void* p = reinterpret_cast<void*>(round_up(b, alignment));
    std::lock_guard lock(m_);
    bases_[p] = base;
    return p;
  }
  // The block start behind an over-aligned pointer (p itself if unknown).
  void* base(void* p) {
    std::lock_guard lock(m_);
    auto it = bases_.find(p);
    if (it == bases_.end()) return p;
    void* b = it->second;
    bases_.erase(it);
    return b;
  }

 private:
  std::mutex m_;
  std::unordered_map<void*, void*> bases_;
};

}  // namespace strata::gpu::detail
