#include "core/init.h"

#include <atomic>
#include <cstdlib>
#include <sched.h>

#include "core/heap.h"
#include "core/types.h"
#include "core/options.h"
#include "core/segment.h"
#include "core/stats.h"
#include "core/numa.h"
#include "os/os.h"

namespace strata::detail {

uint64_t g_secret = 0x5bd1e9955bd1e995ull;

namespace {
std::atomic<int> init_state{0};  // 0: not started, 1: running, 2: done
pthread_key_t key;
bool key_made = false;

void before_fork() noexcept {
  heap_locks_acquire();
  segment_locks_acquire();
  options::lock_for_fork();
}
void after_fork_parent() noexcept {
  options::unlock_after_fork(false);
  segment_locks_release(false);
  heap_locks_release(false);
}
void after_fork_child() noexcept {
  options::unlock_after_fork(true);
  segment_locks_release(true);
  heap_locks_release(true);
  stats_drop_stderr_copy();
}

void at_exit() noexcept { stats_report_at_exit(); }

// Initialised at load time too, while the process is single-threaded, so no thread can fork
// while another is half-way through global_init (the child would wait for it forever).
// An allocation made before this constructor runs initialises earlier, from the same place.
__attribute__((constructor(101))) void init_at_load() noexcept { global_init(); }

// A copy of strata linked into a plug-in (libstrata.a in a shared object its user dlopens) is
// unmapped at the plug-in's dlclose, but its key stayed: the next thread to exit that had used it
// called heap_thread_done in unmapped code (SIGSEGV).  The shared libraries are never unloaded
// (-z nodelete); at the process's exit this runs after the atexit handlers, and a thread exiting
// after it leaves its heap to the process's end.
__attribute__((destructor(101))) void fini_at_unload() noexcept {
  if (key_made) pthread_key_delete(key);
  key_made = false;
}
}  // namespace

bool thread_key(pthread_key_t* out) noexcept {
  *out = key;
  return key_made;
}

__thread bool initialising = false;

void global_init() noexcept {
  if (STRATA_LIKELY(init_state.load(std::memory_order_acquire) == 2)) return;
  int expected = 0;
  if (!init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    // Another thread is initialising: wait for it (a nested call from our own init passes).
    while (!initialising && init_state.load(std::memory_order_acquire) != 2) sched_yield();
    return;
  }
  initialising = true;
  options::init();
  stats_keep_stderr();
  g_secret = os::random_seed();
  // Unchecked, a failure (a program that took every key before a late dlopen of strata) left
  // `key` 0, another library's key: each thread's pthread_setspecific overwrote that library's
  // value with its heap, and its destructor was called with the heap at the thread's exit.
  key_made = pthread_key_create(&key, heap_thread_done) == 0;
  numa_init();
  page_map_init();
  // The fork handlers are in place before any other thread can pass global_init (and take the
  // locks they guard): a fork from a thread that never allocated, racing the first
  // allocations elsewhere, must not leave a lock held in the child.  pthread_atfork and atexit
  // may allocate: nested calls from this thread pass straight through (`initialising`).
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  init_state.store(2, std::memory_order_release);
  atexit(at_exit);
  initialising = false;
}

}  // namespace strata::detail
