// Helpers shared by the unit tests that drive strata through its strata_* API.
#pragma once

#include <sys/mman.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "strata/strata.h"

namespace strata_test {

// Whether the kernel maps `size` bytes of plain anonymous memory at all: under the default
// overcommit heuristic a size no memory could back (64 TiB) is refused, and tests of such a
// request skip themselves where it is not (vm.overcommit_memory=1).
inline bool kernel_maps(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  munmap(p, size);
  return true;
}

inline strata_stats_t stats() {
  strata_stats_t s;
  strata_stats_get(&s);
  return s;
}

// A thread that stays alive (so its heap keeps owning its pages) and runs what it is given.
class worker {
 public:
  worker() : t_([this] { loop(); }) {}
  ~worker() {
    run(nullptr);
    t_.join();
  }
  // Runs f on the worker and waits for it; nullptr ends the worker.
  void run(std::function<void()> f) {
    std::unique_lock<std::mutex> l(m_);
    job_ = std::move(f);
    stop_ = job_ == nullptr;
    pending_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return !pending_; });
  }

 private:
  void loop() {
    for (;;) {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return pending_; });
      if (stop_) {
        pending_ = false;
        cv_.notify_all();
        return;
      }
      job_();
      pending_ = false;
      cv_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool pending_ = false, stop_ = false;
  std::thread t_;
};

}  // namespace strata_test
