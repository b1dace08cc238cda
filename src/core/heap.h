// Thread heaps: page queues and the slow paths of malloc and free.
#pragma once
#include "core/types.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace strata::detail {

// Slow path of malloc for size class cls (no free block on the direct page, or no heap yet).
void* malloc_slow(size_t cls) noexcept;
// A local free emptied the page or found it on the full list.
void page_local_event(heap* h, page* pg) noexcept;
// A free of b, a block of another heap's page pg: batched per page in h (types.h remote_batch).
void remote_free_batched(heap* h, page* pg, block* b) noexcept;
// Pushes every pending remote free of h.
void remote_flush(heap* h) noexcept;
// A free of b, a block of pg, a page of another live heap's: kept in h's foreign cache for h's
// next allocation of its class (types.h foreign_block_max), or batched back to its page.
void foreign_put(heap* h, page* pg, block* b) noexcept;
// The time-stamp counter (about 10 ns on the lab's VM, hence read sparingly: heap::active_tsc at
// every 64th slow call, heap.cpp's purge clock gate); 0 where there is none.
inline uint64_t tsc_now() noexcept {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}
// Has owner's thread not allocated for a while, judged from h's clock (heap::active_tsc)?  Its
// blocks that h frees then go back to its pages, not into h's foreign cache: a block of a thread
// that waits (a main thread that set up the data and joins its workers) would otherwise come back
// to h's cache at each of its frees, each through free's slow path, for as long as h reuses it.
// Never idle where there is no clock.  Set high enough that a thread between two bursts of work
// keeps its blocks cached, and a test's steps never look idle.
constexpr uint64_t owner_idle_ticks = uint64_t{1} << 28;  // 67-268 ms at 1-4 GHz
inline bool heap_idle_beside(const heap* owner, const heap* h) noexcept {
  return owner->active_tsc.load(std::memory_order_relaxed) + owner_idle_ticks <
         h->active_tsc.load(std::memory_order_relaxed);
}
// Sends every block of h's foreign cache back to its page (a purge pass after one without foreign
// frees, trim, strata_collect, thread exit).
void foreign_flush(heap* h) noexcept;
// Collects the remote frees into every class of h's (pages emptied give their spans back):
// before h takes new memory, so that what other threads freed of h's serves first.
void collect_remote_all(heap* h) noexcept;
// The calling thread's heap, creating it if needed (nullptr when out of memory).
heap* heap_get_or_create() noexcept;
// Gives back what h does not use (strata_collect): collects the frees of every page, gives the
// spans of empty pages back to their segments and purges what is due; with force also takes
// over the abandoned segments first and purges everything free at once.
void heap_trim(heap* h, bool force) noexcept;
// The same for the orphan heap (the blocks threads allocated after their own heap was gone: in
// thread-key destructors that ran after strata's), under its lock, without taking over abandoned
// segments: a forced strata_collect from any thread (malloc_trim) trims it too.
void orphan_trim() noexcept;
// Sets flags f of pg, a page of the orphan heap, under its lock: the threads that allocate from it
// (orphan_alloc) change its pages' flags under that lock, and flags_set is a load and a store, so
// one made outside it could undo another thread's change (a lost in_full or has_aligned).
void orphan_page_flags_set(page* pg, uint8_t f) noexcept;
// The spans of h's spare pages (empty pages kept for their class) go back to their segments,
// where a purge may take their memory (before strata maps more: purge_before_growth).
void heap_spares_release(heap* h) noexcept;
// h's next purge pass comes a purge delay from now, unless one is due already.
void heap_schedule_purge(heap* h) noexcept;
// The purge passes that are due (h's own, and the idle pass over the segments and huge mappings
// no heap owns), for a slow path outside heap.cpp's: huge_alloc.  h may be the empty heap (a
// thread without one), which runs the idle pass only.
void heap_purge_if_due(heap* h) noexcept;

// pthread key destructor: the exiting thread's heap is given back or abandoned.
void heap_thread_done(void* h) noexcept;

// Registry of every heap (for statistics and fork); heaps are never unmapped.
// The statistics walk it holding its lock (heap_registry_held), under which a heap joins it and
// an exiting thread's heap folds its counters into g_retired: read outside it, a walk that began
// before a fold missed the heap's counts (g_retired read first, the heap's zeroed) or counted
// them twice, and a cumulative count (malloc_count) went back by them at the next reading.
// Not held across anything that may abandon a heap.  A thread that holds the lock already (a
// signal handler's exit() or statistics call interrupted it there, or while it waited for the
// lock) reads without taking it again.
class heap_registry_held {
 public:
  heap_registry_held() noexcept;
  ~heap_registry_held();
  heap_registry_held(const heap_registry_held&) = delete;
  heap_registry_held& operator=(const heap_registry_held&) = delete;
  heap* first() const noexcept;

 private:
  bool nested_;
};
// The orphan heap (heap.cpp, orphan_alloc) serves no thread of its own: not counted in `threads`.
bool heap_is_orphan(const heap* h) noexcept;
void heap_locks_acquire() noexcept;
void heap_locks_release(bool in_child) noexcept;

// Totals of heaps that have exited (their counters are folded in here).
struct retired_totals {
  std::atomic<uint64_t> alloc_count[size_class_count];
  std::atomic<uint64_t> free_count[size_class_count];
  std::atomic<uint64_t> remote_frees;
  huge_counts huge;  // and those of threads without a heap (atomic adds)
};
extern STRATA_HIDDEN retired_totals g_retired;

}  // namespace strata::detail
