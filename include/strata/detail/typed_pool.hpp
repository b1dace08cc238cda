// strata::detail::typed_pool<T, Core, Checked> — the typed face shared by object_pool<T> and
// concurrent_object_pool<T>: create/destroy (construction, rollback when a constructor throws,
// and the misuse check before ~T runs), raw allocate/deallocate, and the bookkeeping calls, all
// forwarded to an untyped core (detail::basic_pool or detail::basic_concurrent_pool).
//
// A Core provides: allocate() -> void* (nullptr on upstream failure), deallocate(void*),
// is_live(const void*) (Checked cores), reserve(n) -> bool, shrink() -> bytes, owns(const void*),
// stats() -> pool_stats, and for_each_live(fn) (fn(slot) for every object not returned; fn may
// deallocate objects).
// Internal: include object_pool.hpp or concurrent_object_pool.hpp, not this header.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace strata::detail {

template <class T, class Core, bool Checked>
class typed_pool {
 public:
  using value_type = T;
  static constexpr bool checked = Checked;

  // Allocates and constructs.  If the constructor throws, the slot goes back to the pool.
  template <class... Args>
  T* create(Args&&... args) {
    void* p = core_.allocate();
    if (p == nullptr) [[unlikely]] throw std::bad_alloc();
    if constexpr (std::is_nothrow_constructible_v<T, Args&&...>) {
      return ::new (p) T(std::forward<Args>(args)...);
    } else {
      try {
        return ::new (p) T(std::forward<Args>(args)...);
      } catch (...) {
        core_.deallocate(p);
        throw;
      }
    }
  }
  // Destroys and deallocates; p must come from create() on this pool.
  void destroy(T* p) noexcept {
    if constexpr (Checked) {
      if (!core_.is_live(p)) core_.deallocate(p);  // reports the misuse before ~T runs
    }
    p->~T();
    core_.deallocate(p);
  }

  // Raw, uninitialised storage; pair with deallocate().  nullptr only if a malloc-like upstream
  // failed.
  T* allocate() { return static_cast<T*>(core_.allocate()); }
  void deallocate(T* p) noexcept { core_.deallocate(p); }

  // Makes room for n more objects without further upstream calls.  False if the upstream
  // returned nullptr or n objects would not fit in the address space.
  bool reserve(std::size_t n) { return core_.reserve(n); }
  // Gives whole free chunks back to the upstream; returns the bytes released.
  std::size_t shrink() noexcept { return core_.shrink(); }
  // Whether p points at an object slot of this pool (live or not).  O(log chunks).
  bool owns(const T* p) const noexcept { return core_.owns(p); }
  auto stats() const noexcept { return core_.stats(); }  // pool_stats (object_pool.hpp)

 protected:
  template <class Upstream>
  explicit typed_pool(Upstream up) noexcept : core_(sizeof(T), alignof(T), std::move(up)) {}
  typed_pool(typed_pool&&) noexcept = default;  // deleted where the core cannot move
  typed_pool(const typed_pool&) = delete;
  typed_pool& operator=(const typed_pool&) = delete;
  typed_pool& operator=(typed_pool&&) = delete;

  // Objects still alive are destroy()ed, so that a destructor that destroys objects it owns
  // does not destroy them a second time (and one that creates objects sees them destroyed in a
  // further walk); the core's destructor then returns every chunk.
  ~typed_pool() {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      core_.for_each_live([this](void* p) { destroy(static_cast<T*>(p)); });
    }
  }

  Core core_;
};

}  // namespace strata::detail
