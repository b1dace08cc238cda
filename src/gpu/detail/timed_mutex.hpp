// A mutex that measures how long callers waited for it.  The uncontended path is one try_lock;
// only a failed try reads the clock.  E2 reports the total as lock_wait_ns.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

namespace strata::gpu::detail {

template <class Mutex = std::mutex>
class timed_mutex {
 public:
  void lock() {
    if (m_.try_lock()) [[likely]]
      return;
    lock_slow();
  }
  bool try_lock() { return m_.try_lock(); }
  void unlock() { m_.unlock(); }
  std::uint64_t wait_ns() const noexcept { return wait_ns_.load(std::memory_order_relaxed); }

 private:
  [[gnu::noinline]] void lock_slow() {
    const auto t0 = std::chrono::steady_clock::now();
    m_.lock();
    const auto dt = std::chrono::steady_clock::now() - t0;
    wait_ns_.fetch_add(static_cast<std::uint64_t>(
                           std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count()),
                       std::memory_order_relaxed);
  }

  Mutex m_;
  std::atomic<std::uint64_t> wait_ns_{0};
};

// A test-and-test-and-set spin lock that yields; for locks held a few hundred nanoseconds.
class spin_lock {
 public:
  bool try_lock() noexcept {
    return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire);
  }
  void lock() noexcept {
    while (!try_lock()) {
      while (flag_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace strata::gpu::detail
