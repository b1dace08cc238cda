// A spin lock for the few global structures touched on slow paths only (abandoned segments,
// the segment cache, the heap registry).  Plain atomics, so fork() can reset it in the child.
#pragma once
#include <atomic>
#include <sched.h>

namespace strata::detail {
class spin_lock {
 public:
  void lock() noexcept {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) sched_yield();
    }
  }
  bool try_lock() noexcept { return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }
  void reset() noexcept { flag_.store(false, std::memory_order_relaxed); }

 private:
  std::atomic<bool> flag_{false};
};

class lock_guard {
 public:
  explicit lock_guard(spin_lock& l) noexcept : l_(l) { l_.lock(); }
  ~lock_guard() { l_.unlock(); }
  lock_guard(const lock_guard&) = delete;
  lock_guard& operator=(const lock_guard&) = delete;

 private:
  spin_lock& l_;
};
}  // namespace strata::detail
