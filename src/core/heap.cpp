// Thread heaps: creation and exit, page queues, the adoption of abandoned segments' pages, the
// batching of remote frees, and the slow paths behind malloc's and free's fast paths (alloc.h).
//
// Each heap keeps, per size class, a queue of pages that may have free blocks (the first is
// `direct`, the page malloc pops from) and a list of pages found full.  Other threads' frees land
// on a page's thread_free list and set the heap's remote_hint for that class, so the owner only
// looks at its full pages again when something was freed into them.
#include "core/heap.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <pthread.h>
#include <utility>

#include "core/alloc.h"
#include "core/check.h"
#include "core/init.h"
#include "core/lock.h"
#include "core/options.h"
#include "core/page.h"
#include "core/segment.h"
#include "os/os.h"

namespace strata::detail {

page empty_page{};
constinit heap empty_heap;
__thread heap* tl_heap __attribute__((tls_model("initial-exec"))) = &empty_heap;
retired_totals g_retired;

namespace {

spin_lock registry_lock;
heap* registry = nullptr;
// Whether the calling thread holds registry_lock.  exit() from a signal handler that interrupted
// it there (SIGTERM's handler, commonly; fork holds the lock throughout, before_fork) wrote the
// exit statistics (STRATA_STATS_FILE, STRATA_SHOW_STATS), which take it again: the program spun
// for ever instead of exiting (a program forking in a loop: 9 runs in 10).  heap_registry_held
// does not take it again.  Marked before the lock is taken and unmarked after it is released (the
// signal fences keep the compiler from moving the mark across the lock): marked after, a handler
// that landed between the two spun on its own thread's lock all the same (a profiling timer's
// handler reading the statistics hung within seconds).  A handler that lands while its thread
// waits for the lock reads without it, as one nested in the lock's section does.
__thread bool tl_registry_held __attribute__((tls_model("initial-exec"))) = false;
void registry_lock_take() noexcept {
  tl_registry_held = true;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  registry_lock.lock();
}
void registry_lock_give() noexcept {
  registry_lock.unlock();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  tl_registry_held = false;
}
class registry_guard {
 public:
  registry_guard() noexcept { registry_lock_take(); }
  ~registry_guard() { registry_lock_give(); }
  registry_guard(const registry_guard&) = delete;
  registry_guard& operator=(const registry_guard&) = delete;
};

// A thread whose heap was given back at exit (heap_thread_done) may still allocate: a later
// thread-key destructor, or a C++ thread_local destructor, can call malloc.  A new heap then
// would never be given back (pthread runs our destructor a bounded number of rounds), so such
// allocations come from one shared heap, under a lock.  Its owner word matches no thread, so
// every free of its blocks takes the remote path, which needs no lock.
__thread bool tl_exited __attribute__((tls_model("initial-exec"))) = false;
spin_lock orphan_lock;
heap* orphan_heap = nullptr;
constexpr uintptr_t orphan_tid = 2;  // never a thread pointer (those are aligned)

// A block of h's foreign cache for class cls, or nullptr (below, with foreign_put).
inline block* foreign_take(heap* h, size_t cls) noexcept;

// ---- page lists ------------------------------------------------------------------------------
// The lists' operations have no branch on the list's ends: the link to write is picked with a
// mask.  A thread that frees and allocates blocks of random classes moves pages between lists of
// varying lengths, where a branch on "first of its list?" went either way (E1's large band, a
// page onto and off two lists per operation: cachegrind counted 5.3 mispredicted branches per
// operation before, 2.9 with these and the newest-first spares; docs/design.md).  gcc turned a
// conditional expression back into a branch.
// The link field at `offset` in page p, or `alt` when p is null (computed as integers: no
// member access through a null pointer).
inline page** link_or(page* p, size_t offset, page** alt) noexcept {
  auto a = reinterpret_cast<uintptr_t>(p);
  uintptr_t m = uintptr_t{0} - static_cast<uintptr_t>(a != 0);
  return reinterpret_cast<page**>(((a + offset) & m) | (reinterpret_cast<uintptr_t>(alt) & ~m));
}
constexpr size_t next_at = offsetof(page, next), prev_at = offsetof(page, prev);

void list_push_front(page_list& l, page* pg) noexcept {
  page* first = l.first;
  pg->prev = nullptr;
  pg->next = first;
  *link_or(first, prev_at, &l.last) = pg;
  l.first = pg;
}

void list_push_back(page_list& l, page* pg) noexcept {
  page* last = l.last;
  pg->next = nullptr;
  pg->prev = last;
  *link_or(last, next_at, &l.first) = pg;
  l.last = pg;
}

void list_remove(page_list& l, page* pg) noexcept {
  page *prev = pg->prev, *next = pg->next;
  *link_or(prev, next_at, &l.first) = next;
  *link_or(next, prev_at, &l.last) = prev;
  pg->next = pg->prev = nullptr;
}

// Size slots (types.h) served by each class up to small_table_max: [first, last].
struct slot_range {
  uint8_t first[size_class_count], last[size_class_count];
  constexpr slot_range() : first{}, last{} {
    for (size_t i = small_slots; i-- > 0;) first[small_classes.cls[i]] = static_cast<uint8_t>(i);
    for (size_t i = 0; i < small_slots; ++i) last[small_classes.cls[i]] = static_cast<uint8_t>(i);
  }
};
constexpr slot_range class_slots{};
constexpr size_t small_class_max = size_class_of_computed(small_table_max);

// Makes pg the page malloc pops from for class cls (by class and, for small sizes, by size).
void set_direct(heap* h, size_t cls, page* pg) noexcept {
  h->direct[cls] = pg;
  if (cls <= small_class_max)
    for (size_t i = class_slots.first[cls]; i <= class_slots.last[cls]; ++i) h->direct_small[i] = pg;
}

page_list& list_of(heap* h, page* pg) noexcept {
  return (flags_of(pg) & page_flag::in_full) ? h->full[pg->size_class] : h->queue[pg->size_class];
}

// Pops a block from a page known to have a free one (the slow path's pop, counted by class).
inline void* page_pop(heap* h, page* pg) noexcept {
  STRATA_ASSERT(pg->free != nullptr && (flags_of(pg) & page_flag::in_use));
  h->alloc_count[pg->size_class].add();
  return page_pop_fast(pg);
}

inline size_t span_bytes(const page* pg) noexcept { return size_t{pg->slice_count} << slice_shift; }

// pg is no longer a spare: used again, or its span goes back (the caller takes it off its list
// or bin first: page_unlist reads the flag).
inline void spare_clear(heap* h, page* pg) noexcept {
  if (!(flags_of(pg) & page_flag::spare)) return;
  flags_clear(pg, page_flag::spare);
  h->spare_bytes -= span_bytes(pg);
  if (pg->reserved != 1) h->spare_count[pg->size_class]--;  // a kept one-block span: its bin counts it
}

void page_free_span(heap* h, page* pg, bool may_release_segment = true) noexcept;
void page_release(heap* h, page* pg, bool may_release_segment = true) noexcept;
void bin_remove(heap* h, page* pg) noexcept;

// Takes pg off its list, or its bin (a loose page is on none); the next page of its queue
// becomes direct if pg was.
void page_unlist(heap* h, page* pg) noexcept {
  uint8_t f = flags_of(pg);
  if (f & page_flag::loose) {
    flags_clear(pg, page_flag::loose);
    return;
  }
  if ((f & page_flag::spare) && pg->reserved == 1) return bin_remove(h, pg);
  list_remove(list_of(h, pg), pg);
  if (h->direct[pg->size_class] == pg) {
    page* next = h->queue[pg->size_class].first;
    set_direct(h, pg->size_class, next ? next : &empty_page);
  }
}

// ---- bins: kept one-block spans --------------------------------------------------------------
// A one-block page (blocks over 128 KiB) whose block comes back keeps its span, in the bin of the
// span's length, and the next one-block allocation that fits takes it, whatever its class, as
// rpmalloc's span caches do: the span is neither merged into its segment's free slices nor cut
// out of them again, so a thread that frees and allocates such blocks reuses a few spans in their
// places, and the lines and OS pages its blocks' ends touch stay few and warm.  With the classes
// of one span length each (size_class.h), a block's end falls in its span's last slice.
constexpr size_t one_block_class_min = size_class_of_computed(one_block_page_min) + 1;
static_assert(class_size(one_block_class_min - 1) == one_block_page_min && one_block_class_min == slice_class_first);

// F(class) for every size class, worked out at compile time: one load on the one-block path
// instead of F's branches (page_slices) or division (block_mul_of).
template <class T, auto F>
struct class_table {
  T v[size_class_count];
  constexpr class_table() : v{} {
    for (size_t c = 0; c < size_class_count; ++c) v[c] = static_cast<T>(F(c));
  }
};
constexpr uint64_t class_block_mul(size_t c) noexcept { return block_mul_of(block_stride(c)); }
constexpr class_table<uint16_t, page_slices> page_slices_of{};
constexpr class_table<uint64_t, class_block_mul> block_muls{};

// The page of a kept span, from its one block (types.h slice_page): a one-block page's block
// starts in its span's first slice (its colour is under 4 KiB).  The bins keep the block alone,
// not the page too: half the arrays (a heap of 47 KiB, not 80; 15 KiB before the arrays).
inline page* kept_page(const block* b) noexcept { return slice_page(b); }

// Takes the newest span of bin m out of it (the others stay where they are).
inline void bin_pop(heap* h, size_t m) noexcept {
  if (--h->bin_count[m] == 0) h->bin_mask[m / 64] &= ~(uint64_t{1} << (m % 64));
}

// Takes the span at index i of bin m out of it (the newer ones move down one).
void bin_drop(heap* h, size_t m, size_t i) noexcept {
  for (size_t n = h->bin_count[m] - 1u; i < n; ++i) {
    h->bins[m][i] = h->bins[m][i + 1];
    h->bin_class[m][i] = h->bin_class[m][i + 1];
  }
  bin_pop(h, m);
}

// Takes pg, a kept span's page, out of its bin (the caller clears its spare flag).
void bin_remove(heap* h, page* pg) noexcept {
  size_t m = pg->slice_count;
  for (size_t i = h->bin_count[m]; i-- > 0;)
    if (kept_page(h->bins[m][i]) == pg) return bin_drop(h, m, i);
  STRATA_ASSERT(false && "a page flagged as a kept span is in no bin");
}

// bin_put's page in a list (an adopted page may be in its queue, even direct): off it.  Apart,
// so that the common case (bin_put inlined in one_block_back) keeps no frame.
STRATA_NOINLINE void bin_put_listed(heap* h, page* pg) noexcept {
  page_unlist(h, pg);
  flags_clear(pg, page_flag::in_full | page_flag::clean | page_flag::idle);
  flags_set(pg, page_flag::spare);
}

// Keeps pg, an emptied one-block page, in its bin; false when the bin or the spare budget is full.
bool bin_put(heap* h, page* pg) noexcept {
  size_t m = pg->slice_count, n = h->bin_count[m];
  if (n >= bin_length_max || h->spare_bytes + span_bytes(pg) > spare_budget) return false;
  page_fold_frees(h, pg);  // its next block may be of another class
  uint8_t f = flags_of(pg);
  if (f & page_flag::loose) {  // the common case, on no list: one store of its flags
    pg->flags.store(static_cast<uint8_t>((f & ~(page_flag::loose | page_flag::clean | page_flag::idle)) | page_flag::spare),
                    std::memory_order_relaxed);
  } else {
    bin_put_listed(h, pg);
  }
  // Its one block, on either list (bin_take hands it out without reading the page).
  block* b = pg->free ? pg->free : pg->local_free;
  STRATA_ASSERT(kept_page(b) == pg);
  h->bins[m][n] = b;
  h->bin_class[m][n] = pg->size_class;
  h->bin_count[m] = static_cast<uint8_t>(n + 1);
  h->bin_mask[m / 64] |= uint64_t{1} << (m % 64);
  h->spare_bytes += span_bytes(pg);
  return true;
}

// Calls f(length) for each bin that held a span when its word of the mask was read (one read a
// word: f may empty bins as it goes).
template <class F>
void for_each_bin(const heap* h, F f) noexcept {
  for (size_t w = 0; w < bin_mask_words; ++w)
    for (uint64_t m = h->bin_mask[w]; m != 0; m &= m - 1) f(w * 64 + static_cast<size_t>(std::countr_zero(m)));
}

// The shortest length in [lo, hi] with a kept span, or 0.  A one-block class's range mostly lies
// in one word of the mask: that word first.
size_t bin_find(const heap* h, size_t lo, size_t hi) noexcept {
  size_t w = lo / 64, last = hi / 64;
  uint64_t m = h->bin_mask[w] & (~uint64_t{0} << (lo % 64));
  for (;;) {
    if (w == last && hi % 64 != 63) m &= (uint64_t{2} << (hi % 64)) - 1;
    if (m) return w * 64 + static_cast<size_t>(std::countr_zero(m));
    if (++w > last) return 0;
    m = h->bin_mask[w];
  }
}

// Every kept span goes back to its segment.  Walked as the mask read first shows the bins, by
// their counts: in a child of fork, the heap of a thread that was inside bin_take, bin_put or a
// bin_drop (heap_locks_release abandons it) may have a bin's bit set and the bin empty, a page
// counted twice (a drop's move caught half done) or one in a bin before it is counted.  A page
// goes back once, while it is flagged spare; one not counted stays in use in its segment, where
// whoever adopts the segment finds it empty and takes it back.
void bins_release(heap* h) noexcept {
  for_each_bin(h, [h](size_t len) {
    while (size_t n = h->bin_count[len]) {
      page* pg = kept_page(h->bins[len][n - 1]);
      bin_pop(h, len);
      if (flags_of(pg) & page_flag::spare) page_release(h, pg);
    }
  });
}

// Every kept span goes back, and which bins served lately is forgotten (strata_collect, thread
// exit): the next one-block class that finds no kept span fitting takes the slices of any that
// were kept since, not fresh memory.
void bins_clear(heap* h) noexcept {
  bins_release(h);
  std::fill(std::begin(h->bin_served_at), std::end(h->bin_served_at), uint32_t{0});
  h->one_block_allocs = 0;
}

// The kept spans of the bins that served none of the heap's last bin_hot_allocs one-block
// allocations go back to their segments; true if any did.
bool bins_release_cold(heap* h) noexcept {
  bool any = false;
  for_each_bin(h, [h, &any](size_t len) {
    if (h->bin_served_at[len] != 0 && h->one_block_allocs - h->bin_served_at[len] <= bin_hot_allocs) return;
    while (size_t n = h->bin_count[len]) page_free_span(h, kept_page(h->bins[len][n - 1]));
    any = true;
  });
  return any;
}

// The spans of the empty spare pages go back to their segments, with the bins' kept spans or not.
void spares_release(heap* h, bool with_bins) noexcept {
  if (with_bins) bins_release(h);
  for (size_t c = 0; c < size_class_count && h->spare_bytes != 0; ++c) {
    if (h->spare_count[c] == 0) continue;
    for (page* pg = h->queue[c].first; pg;) {
      page* next = pg->next;
      if ((flags_of(pg) & page_flag::spare) && page_is_empty(pg)) page_free_span(h, pg);
      pg = next;
    }
  }
}

// Every span of a page of h's goes back through here, so the spare counts never include a
// released page.
// may_release_segment false: a walk of h's segments gives spans back under it (span_free).
void page_release(heap* h, page* pg, bool may_release_segment) noexcept {
  page_fold_frees(h, pg);
  spare_clear(h, pg);
  span_free(h, pg, may_release_segment);
}

void page_free_span(heap* h, page* pg, bool may_release_segment) noexcept {
  page_unlist(h, pg);
  page_release(h, pg, may_release_segment);
}

// A purge pass gives back the spans of the empty pages still in their queue (the one page a class
// keeps and the spares, page_local_event) and the bins' kept spans that were empty already at the
// previous pass, with no block back since (page_flag::idle); forced or with a purge delay of 0,
// of every empty page.  It hands the huge mapping the thread kept to the shared cache (which
// unmaps it after its own delay), and purges free slices a delay after they became free.  Two
// passes, not one: a program that empties its pages at the end of each round of work and fills
// them again in the next (CPython, a round every 10 ms) had each class's page taken from it at
// the pass between, and the next round's page carved blocks on slices the old one had left
// untouched: 30 % more pages faulted in (4.3 k against 3.2 k, mimalloc 3.4 k) at a peak RSS 10 %
// higher, purging a delay later alike.
void heap_purge(heap* h, bool force) noexcept {
  // The foreign cache ages as the pages do: it goes back when the thread freed no other thread's
  // block since the previous pass (or at a forced pass), not at every pass.  Sent back at each
  // pass, a thread that keeps freeing blocks other threads made (larson at 2 threads, a consumer)
  // emptied its cache every 10 ms, the blocks went back to their owners as chains of lines this
  // core had written, and the cache filled again: larson/t2 1.04x [1.01-1.08] with the aging,
  // the other cross-thread cells 0.98-1.03x with intervals across 1, peak RSS within 3 %
  // (docs/design.md).  The trim bound (foreign_bytes_max) still holds it.
  uint64_t remote = h->remote_frees.get();
  if (force || remote == h->remote_frees_at_purge) foreign_flush(h);
  h->remote_frees_at_purge = remote;
  huge_spare_release(h);
  // A delay of 0 gives memory back at once, and with none (-1) only strata_collect's passes run:
  // no second pass to wait for either way.
  bool at_once = force || purge_delay() <= 0;
  bool idle_left = false;
  // The bins' kept spans (always empty) and the queues' pages alike: an empty page idle since the
  // last pass goes, a page in use is not idle.
  auto age = [h, at_once, &idle_left](page* pg) {
    uint8_t f = flags_of(pg);
    if (!page_is_empty(pg)) {
      if (f & page_flag::idle) flags_clear(pg, page_flag::idle);
    } else if (at_once || (f & page_flag::idle)) {
      page_free_span(h, pg);
    } else {
      flags_set(pg, page_flag::idle);
      idle_left = true;
    }
  };
  // Each bin from its newest: a span given back moves only the ones already seen.
  for_each_bin(h, [h, &age](size_t len) {
    for (size_t i = h->bin_count[len]; i-- > 0;) age(kept_page(h->bins[len][i]));
  });
  for (size_t c = 0; c < size_class_count; ++c) {
    for (page* pg = h->queue[c].first; pg;) {
      page* next = pg->next;
      // A chain the allocation paths left on thread_free (page_collect, lazy) that brings every
      // block back now that the owner freed its own: collected, the page is empty.  No free of
      // the owner's looks at the chain, and the hint that named the page was taken already: a
      // page of 1024 blocks of 64 B, half of them freed by other threads while the owner held
      // the last, stayed in use for good after the owner freed it and moved on to other sizes.
      if (page_chain_empties(pg)) page_collect(h, pg);
      age(pg);
      pg = next;
    }
  }
  h->purge_due_ms = segments_purge(h, force);
  if (idle_left) heap_schedule_purge(h);
}

// The clock is read at most about once a millisecond per heap.  Each read costs little alone
// (5 ns in a loop) but misses the cache where the program's own memory traffic has evicted the
// vDSO's data page: E1's large band, which empties a one-block page at every free, spent 20 % of
// its time in clock_gettime.  The processor's time-stamp counter, read from a register, gates it:
// 2^20 ticks are at most 1 ms at 1 GHz or more.  A thread that frees, sleeps past the delay and
// calls again still purges at that call.
constexpr uint64_t clock_gate_ticks = uint64_t{1} << 20;
inline bool heap_clock_due(heap* h) noexcept {
#if defined(__x86_64__)
  uint64_t t = tsc_now();
  if (t - h->clock_tsc < clock_gate_ticks) return false;
  h->clock_tsc = t;
#endif
  return true;
}

inline void heap_maybe_purge(heap* h) noexcept {
  int64_t idle_due = segments_idle_due();
  if (h->purge_due_ms == 0 && idle_due == 0) return;
  if (!heap_clock_due(h)) return;
  int64_t now = os::now_ms();
  if (h->purge_due_ms && now >= h->purge_due_ms) heap_purge(h, false);
  if (idle_due && now >= idle_due) segments_purge_idle(now);
}

// Appends pg to its class's queue, making it the direct page if the class has none and pg is
// the queue's only page (the direct page is first in its queue).
void queue_push_back(heap* h, page* pg) noexcept {
  size_t cls = pg->size_class;
  list_push_back(h->queue[cls], pg);
  if (h->direct[cls] == &empty_page && h->queue[cls].first == pg) set_direct(h, cls, pg);
}

// Takes pg off the full list of its class into its queue (something was freed into it).
void page_unfull(heap* h, page* pg) noexcept {
  list_remove(h->full[pg->size_class], pg);
  flags_clear(pg, page_flag::in_full);
  queue_push_back(h, pg);
}

// A page of a segment h just took over (in use, not linked): into its queue, or its full list
// when it has no block to give.
void page_adopt(heap* h, page* pg) noexcept {
  pg->next = pg->prev = nullptr;
  flags_clear(pg, page_flag::in_full | page_flag::loose);
  pg->owner_tid.store(owner_tid_of(h, pg), std::memory_order_release);
  if (pg->free || pg->capacity < pg->reserved) {
    queue_push_back(h, pg);
  } else {
    flags_set(pg, page_flag::in_full);
    list_push_back(h->full[pg->size_class], pg);
  }
}

// h takes over seg, an exited thread's segment just taken off the abandoned list: its pages,
// with what other threads freed into them meanwhile.  False when seg came back empty and left h
// at once (segment_release_if_empty): it may be unmapped, and is not to be read.
bool heap_adopt_segment(heap* h, segment* seg) noexcept {
  segment_attach(h, seg);
  // None of its pages stays loose.  Cleared before they are collected, not after: a thread that
  // read a page as loose before page_adopt listed it marks it after its push, and that mark (which
  // collect_remote_loose turns into its class's hint) must stay.
  for (auto& w : seg->loose_remote) w.exchange(0, std::memory_order_acq_rel);  // after a mark: its push seen
  segment_collect_pages(h, seg, [h](page* pg) { page_adopt(h, pg); });
  return !segment_release_if_empty(h, seg);
}

// Abandoned segments a span search adopts at most when none has room for its class (the next
// search takes the next ones): what one malloc spends on them is bounded, as mimalloc bounds its
// reclaim tries.
constexpr size_t adopt_per_search_max = 8;

// A new page for cls.  Memory already touched before memory to fault in: free slices of h's
// segments still resident; the segments exited threads abandoned, which h takes over (their
// resident slices first); a cached segment still resident; then untouched slices of h's
// segments, of an abandoned one, of any cached segment or of a new one.  Taking the untouched
// slices of h's newest segment first left the resident ones idle (a thread moving from 200 B
// blocks to 1500 B ones touched 28 MB more for the same 64 MiB live); taking a cached segment
// before the abandoned ones left those abandoned longer (thread churn: 1.2x the faults).
// Returns &empty_page when an adopted segment brought pages of cls that have free blocks: those
// go before a new span (the caller walks the queue again).  Taking a span in the adopted segment
// at once, as before, carved a fresh page for every class a new thread used while the exited
// threads' pages of that class kept their holes (mstress: 2 threads at a time swapping 16 B-2 KiB
// objects through a shared array, 15 interleaved rounds: peak RSS 26.6 MiB, now 23.8; mimalloc 2
// 22.4; docs/results/adopted-pages-2core).
page* heap_span_alloc(heap* h, size_t cls) noexcept {
  if (page* pg = span_alloc_owned(h, cls, true)) return pg;
  // The spare pages give their spans back before memory is touched for the first time: kept
  // while they cost no new memory, they do not push the heap into fresh slices (E1's large
  // band, 16 MiB of spares kept regardless: peak RSS 1.17x).  Of the bins' kept spans, the
  // shortest one long enough gives way (the oldest of its length) and the block is cut from its
  // slices; if none is long enough, the spans of the cold bins do (those that served none of the
  // last bin_hot_allocs one-block allocations).  Each kept span that went back was cut again
  // elsewhere: giving all of them back here, or one at a time until a run fits, made E1's large
  // band's spans drift through the segments as with no bins (peak RSS 69-72 MiB against 33,
  // 0.75x as fast; docs/design.md).
  if (h->spare_bytes != 0) {
    spares_release(h, false);
    if (page* pg = span_alloc_owned(h, cls, true)) return pg;
    if (size_t m = bin_find(h, page_slices(cls), bin_slices_max)) {
      page_free_span(h, kept_page(h->bins[m][0]));  // the oldest
      if (page* pg = span_alloc_owned(h, cls, true)) return pg;
    } else if (bins_release_cold(h)) {
      if (page* pg = span_alloc_owned(h, cls, true)) return pg;
    }
  }
  // An abandoned segment without room for cls stays adopted (its pages serve their classes) and
  // the next one is taken, up to adopt_per_search_max a search.  Each adopted one is looked at
  // alone: h's other segments have no resident run for cls (above), nor an untouched one once
  // walked.  Walking all of h's segments after each adoption, and adopting until one had room,
  // made one malloc quadratic in the abandoned segments: 600 threads that each left a segment of
  // 2 MiB blocks behind, and the next 2 MiB malloc took 1.0 s (mimalloc 2: 10 us), each new
  // thread's first one up to 0.5 s (docs/design.md, "Threads, fork, bootstrap").
  bool walked = false;
  for (size_t adopted = 0; adopted < adopt_per_search_max; ++adopted) {
    segment* seg = segment_take_abandoned();
    if (seg == nullptr) break;
    // Not seg->owner after the adoption: a segment released empty may be unmapped by then (with
    // STRATA_SEGMENT_CACHE=0 and STRATA_PURGE_DELAY=0, the read was a SIGSEGV).
    bool kept = heap_adopt_segment(h, seg);
    // The adopted pages of cls with free blocks come before a new span: the caller walks them.
    if (h->queue[cls].first != nullptr) return &empty_page;
    if (kept) {
      if (page* pg = span_alloc_in(seg, cls, true)) return pg;
      if (page* pg = span_alloc_in(seg, cls, false)) return pg;
    }
    if (!walked) {  // adopt no more than needed: h's untouched slices serve before the next one
      walked = true;
      if (page* pg = span_alloc_owned(h, cls, false)) return pg;
    }
  }
  if (page* pg = span_alloc_new(h, cls, true)) return pg;
  if (page* pg = span_alloc_owned(h, cls, false)) return pg;
  return span_alloc_new(h, cls, false);
}

// Pages of class cls that other threads freed into since the owner last looked: collected, full
// ones back in the queue, and the spans of those emptied given back (keeping one page for the
// class: the direct page, or this one if the class has none).
void collect_remote_hinted(heap* h, size_t cls) noexcept {
  for (page_list* l : {&h->full[cls], &h->queue[cls]}) {
    for (page* pg = l->first; pg;) {
      page* next = pg->next;
      if (pg->thread_free.load(std::memory_order_relaxed) != 0) {
        page_collect(h, pg, true);
        page* direct = h->direct[cls];
        bool has_direct = direct != &empty_page && !is_foreign_stand_in(h, cls, direct);
        // A one-block page has no direct page to keep (its class's spans are kept in the bins).
        if (pg->used == 0 && pg != direct && (has_direct || pg->reserved == 1))
          page_free_span(h, pg);
        else if (flags_of(pg) & page_flag::in_full)
          page_unfull(h, pg);
      }
      pg = next;
    }
  }
}

}  // namespace

void heap_spares_release(heap* h) noexcept { spares_release(h, true); }

void heap_purge_if_due(heap* h) noexcept {
  if (h != &empty_heap) return heap_maybe_purge(h);
  // The shared empty heap's clock and deadline are no thread's to write.
  int64_t idle_due = segments_idle_due();
  if (idle_due == 0) return;
  if (int64_t now = os::now_ms(); now >= idle_due) segments_purge_idle(now);
}

void heap_schedule_purge(heap* h) noexcept {
  // A purge already due comes first: now + delay is no earlier (unless the adaptive delay
  // shrank meanwhile, when this purge comes a little late), and the clock is not read for each
  // emptied page (heap_clock_due).
  if (h->purge_due_ms != 0) return;
  int64_t delay = purge_delay();
  if (delay < 0) return;
  int64_t due = os::now_ms() + delay;
  if (h->purge_due_ms == 0 || due < h->purge_due_ms) h->purge_due_ms = due;
}

namespace {
// The loose pages of h's that other threads freed into (page_push_remote marks them in their
// segments): collected, and the span of each, empty now, given back to its segment, as
// collect_remote_hinted gives back an emptied one-block page's.  Kept in the bins instead, a
// producer's spans (its blocks freed by a consumer, 128 KiB-1 MiB, each written whole) ran
// 0.83x as fast at 2.8x the peak RSS and 3x the faults: a span kept by length serves only
// lengths up to a quarter shorter, and the producer touched fresh memory beside them, where
// spans given back merge and are cut again in place.  A segment emptied so is released after its
// bits are walked, not under the walk.  The hint is taken first and the bits after it, both
// sequentially consistent (page_push_remote says why).
void collect_remote_loose(heap* h) noexcept {
  if (!h->remote_loose.load(std::memory_order_relaxed) || !h->remote_loose.exchange(0, std::memory_order_seq_cst)) return;
  for (segment* seg = h->segments; seg;) {
    segment* next = seg->next;
    bool emptied = false;
    for (size_t w = 0; w < bitmap_words; ++w) {
      if (seg->loose_remote[w].load(std::memory_order_seq_cst) == 0) continue;
      for (uint64_t m = seg->loose_remote[w].exchange(0, std::memory_order_seq_cst); m != 0; m &= m - 1) {
        page* pg = &seg->pages[w * 64 + static_cast<size_t>(std::countr_zero(m))];
        // A bit outlives its page when the page was collected some other way (thread exit,
        // strata_collect): only a loose page with a remote free is taken.  A page in use that is
        // not loose but has a chain was listed by an adoption (page_adopt) after the freeing
        // thread read its flag: no hint of its class named it, and it kept its span until the
        // thread's strata_collect or exit.  Its class's hint now does (collect_remote_all's walk
        // of the hinted classes comes after this one).
        if (pg->thread_free.load(std::memory_order_relaxed) == 0) continue;
        if (!(flags_of(pg) & page_flag::loose)) {
          if (flags_of(pg) & page_flag::in_use) h->remote_hint[pg->size_class].store(1, std::memory_order_relaxed);
          continue;
        }
        page_collect(h, pg);
        if (pg->used != 0) continue;
        page_free_span(h, pg, false);
        emptied = true;
      }
    }
    if (emptied) segment_release_if_empty(h, seg);
    seg = next;
  }
}
}  // namespace

// Remote frees into the classes h no longer allocates from: a thread that hands its blocks to
// another and moves on to other sizes would otherwise keep those pages (and their memory,
// neither reused nor purged) until it allocates their class again (issue 13's phases program
// under a memory limit: 1.2 GB committed for 161 MB live).
void collect_remote_all(heap* h) noexcept {
  if (!h->remote_any.load(std::memory_order_relaxed) || !h->remote_any.exchange(0, std::memory_order_acq_rel)) return;
  collect_remote_loose(h);
  for (size_t c = 0; c < size_class_count; ++c)
    if (h->remote_hint[c].load(std::memory_order_relaxed) && h->remote_hint[c].exchange(0, std::memory_order_acq_rel))
      collect_remote_hinted(h, c);
}

namespace {

void* heap_alloc_walk(heap* h, size_t cls) noexcept;
void* one_block_alloc(heap* h, size_t cls) noexcept;

// Free memory ages out while the thread keeps walking its pages, not only when it needs a new
// span: a thread that allocates from the pages it has must still give back what it freed long
// ago.  Every 64th walk reads the clock (each walk reading it cost E1's large band ~5 %).
inline void heap_pace_walk(heap* h) noexcept {
  if ((++h->slow_walks & 63) == 0) {
    collect_remote_all(h);
    heap_maybe_purge(h);
  }
}

void* heap_alloc_slow(heap* h, size_t cls) noexcept {
  // Every 64th call reads the clock for heap_idle_beside: here, before the paths that serve from
  // the direct page's own frees or the foreign cache (a thread fed by other threads' blocks
  // allocates without a walk, and must not look idle to them).
  // It also runs the purge check, whatever the path: a thread that keeps one block of a class
  // and allocates and frees others of it takes no path but the fold of its direct page's frees
  // below, and never gave back what it or exited threads had freed (the walk's own check comes at
  // every 64th walk).  First: a pass may give the direct page's span back.
  if ((++h->slow_calls & 63) == 0) {
    h->active_tsc.store(tsc_now(), std::memory_order_relaxed);
    heap_maybe_purge(h);
  }
  // A one-block class has no direct page and no foreign blocks: a kept span first, with the
  // collect and purge pacing of the walk below (E1's large band, every allocation here).
  if (cls >= one_block_class_min) {
    h->frees_only = false;
    heap_pace_walk(h);
    return one_block_alloc(h, cls);
  }
  // The common case: the direct page's own frees become its free list.  Unless the purge pass
  // above gave it one: a chain that brings every block back is collected there, onto `free`
  // when that ran out, and replaced by local_free its blocks were on no list (strata_heap_check:
  // "page block counts do not add up"; the shadow test's four threads, 1 run in 120 under load).
  if (page* pg = h->direct[cls]; pg->local_free != nullptr) {
    page_fold_frees(h, pg);
    if (pg->free == nullptr) {
      pg->free = pg->local_free;
      pg->local_free = nullptr;
    }
    return page_pop(h, pg);
  }
  // Then other threads' blocks this thread freed (foreign_put).
  if (block* b = foreign_take(h, cls)) return b;
  h->frees_only = false;  // the thread allocates: its foreign cache may serve it
  // Frees this thread made into other threads' pages reach them before it takes new memory.
  if (h->remote_pending != 0) remote_flush(h);
  heap_pace_walk(h);
  return heap_alloc_walk(h, cls);
}

// Moves pg from its class's queue to the full list.
void page_to_full(heap* h, page* pg) noexcept {
  list_remove(h->queue[pg->size_class], pg);
  flags_set(pg, page_flag::in_full);
  list_push_back(h->full[pg->size_class], pg);
}

// A new or kept span's one-block page, on no list: its block goes out and the page stays on no
// list (loose) while the block is out.  On the full list, as before, the owner's free of the
// block took free's slow path (the full bit in owner_tid) and both calls moved the page on and
// off the list, writing the neighbours' links.  Nothing needs the list: the owner's free finds
// the page through the page map, another thread's free marks it in its segment
// (page_push_remote, collect_remote_loose), and a segment abandoned or adopted is walked by its
// pages, not by the lists.  Alone it saved 65 instructions an operation on E1's large band but
// no time (0.97x [0.95-1.14]); with the bins as arrays and bin_take's blind serve, 1.10x /
// 1.12x at 1/2 threads (docs/design.md).
void* one_block_serve(heap* h, page* pg) noexcept {
  if (pg->free == nullptr) page_extend(pg);
  flags_set(pg, page_flag::loose);
  return page_pop(h, pg);
}

// A one-block page of h's queue with its block free (an adopted one): off the queue, loose as
// its block goes out (the class's direct page stays empty: the page has nothing more to give).
void* one_block_pop(heap* h, page* pg) noexcept {
  list_remove(h->queue[pg->size_class], pg);
  return one_block_serve(h, pg);
}

// A kept span (pg, holding block b) taken for a block of class cls, when bin_take cannot hand b
// out at once: another class (laid out afresh), or the hardened build (the checked pop).
STRATA_NOINLINE void* bin_serve(heap* h, page* pg, block* b, size_t cls, bool same) noexcept {
  if (same) {
    pg->free = b;
    pg->local_free = nullptr;
    flags_clear(pg, page_flag::spare | page_flag::has_aligned | page_flag::idle);
  } else {
    flags_clear(pg, page_flag::spare);
    page_reshape(pg, cls);
  }
  return one_block_serve(h, pg);
}

// A kept span of m slices (pg) with its one block b, carved, serves a block of class cls where b
// lies (its colour kept), when the class fits there; false when it does not.  The page keeps its
// layout (one block, carved) and takes the class's size and block bound, written and not read
// (bin_take).  page_reshape laid the page out afresh at a new colour: the block's first line was
// then another one than its last use touched (E1's large band, 14 % of its allocations).
bool one_block_reclass(page* pg, size_t m, block* b, size_t cls) noexcept {
  size_t bs = block_stride(cls);
  segment* seg = segment_of(pg);
  auto* span = slice_address(seg, static_cast<size_t>(pg - seg->pages));
  if (static_cast<size_t>(reinterpret_cast<uint8_t*>(b) - span) + bs > (m << slice_shift)) return false;
  uint64_t mul = block_muls.v[cls];
  pg->block_size = static_cast<uint32_t>(bs);
  pg->block_mul = mul;
  pg->block_bound.store(mul * bs, std::memory_order_relaxed);  // one block carved
  pg->size_class = static_cast<uint8_t>(cls);
  return true;
}

// A block of one-block class cls from a kept span, or nullptr.  A span up to a quarter longer
// than the class needs serves: with the class's own length only, E1's large band missed often
// enough that its spans drifted through the segments as with no bins at all (peak RSS 114 MiB,
// against 31 with the bound); with half as long again (rpmalloc's bound), a thread that writes
// all of its blocks (thread churn) kept more of each span resident than its block used (peak RSS
// 49.2 MiB against 47.2 with a quarter, which also ran E1's large band 1.06x / 1.11x as fast; 9
// interleaved rounds).
STRATA_ALWAYS_INLINE void* bin_take(heap* h, size_t cls) noexcept {
  uint32_t now = ++h->one_block_allocs;
  size_t n = page_slices_of.v[cls];
  size_t m = bin_find(h, n, std::min(n + n / 4, bin_slices_max));
  if (m == 0) return nullptr;
  h->bin_served_at[m] = now;
  // The newest span of the bin, with its class and block, from the heap's arrays (popped: the
  // older ones stay where they are).
  size_t k = h->bin_count[m] - 1u;
  block* b = h->bins[m][k];
  page* pg = kept_page(b);
  bool same = h->bin_class[m][k] == cls;
  bin_pop(h, m);
  h->spare_bytes -= m << slice_shift;
  // The same class: the page keeps its block where it was (a new colour at each reuse, as a new
  // span gets, made E1's large band 0.77x as fast), carved already.  Its state is known
  // (bin_put): one block, free, its frees counted, flags in_use and spare (perhaps idle or
  // has_aligned).  So the page struct, cold by now, is only written, never read: a read of it
  // stalled malloc until it came from memory (the largest share of E1's large band's samples).
  // The hardened build pops it the checked way.
  if (secure || (!same && !one_block_reclass(pg, m, b, cls))) return bin_serve(h, pg, b, cls, same);
  STRATA_ASSERT((pg->free ? pg->free : pg->local_free) == b && pg->used == 0 && pg->frees == 0);
  pg->free = pg->local_free = nullptr;
  *page_counts(pg) = 1;  // used 1, frees 0
  pg->flags.store(page_flag::in_use | page_flag::loose, std::memory_order_relaxed);
  b->canary = 0;
  h->alloc_count[cls].add();
  return b;
}

// No kept span fits: this thread's frees into other threads' pages reach them, then the walk.
STRATA_NOINLINE void* one_block_miss(heap* h, size_t cls) noexcept {
  if (h->remote_pending != 0) remote_flush(h);
  return heap_alloc_walk(h, cls);
}

// A block of one-block class cls for heap_alloc_slow: a kept span, else one_block_miss.  Its
// calls are jumps: the hit path (E1's large band, nearly every allocation) keeps no frame.
STRATA_NOINLINE void* one_block_alloc(heap* h, size_t cls) noexcept {
  if (void* b = bin_take(h, cls)) return b;
  return one_block_miss(h, cls);
}

// The page the walk visits after one it sent to the full list: the queue's last page when a
// quarter of its blocks (two at least) are free, else the next one.  A full page that the owner
// frees into joins the back of the queue (page_unfull), so the last page is the one freed into
// last.  A program that allocates a batch and frees it (a request, a frame) refills the pages its
// batch emptied, which then wait at the back, hot, while in the queue's order the walk went on
// to the pages that had waited longest: in a heap fragmented by long-lived blocks those are
// half-empty and cold, and the batches ran 2-4x as long as on a fresh heap (E2 on host malloc,
// docs/results/probes-s35-2core `fr.cpp`: 200 k blocks, every other one freed, then batches of
// 256 mixed sizes; tcmalloc's thread cache hands the batch's own blocks back).  Taking the
// page freed into last whatever it holds (right after the direct page at its unfull) cost
// randsize 0.82-0.91x and mstress 0.83x: there frees are random, the page freed into last holds
// one or two blocks, and the queue's order, which lets each page gather frees before the walk
// comes back to it, serves more blocks a visit.  The quarter tells the two apart: a batch frees
// most of what it took from a page, a random free one block (docs/results/probes-s36-2core).
inline page* walk_next(const page_list& q, page* next) noexcept {
  page* last = q.last;
  if (last == nullptr || last == next || last->reserved <= 1) return next;
  uint32_t free_blocks = uint32_t{last->reserved} - last->used;
  return free_blocks >= std::max<uint32_t>(2, last->reserved / 4u) ? last : next;
}

// The slow path's walk of cls's queue, then its remote frees, then a new span; a one-block
// class comes here after its bins missed (one_block_alloc).  Entered again, not
// heap_alloc_slow, when the span search adopted pages of cls: the adopted direct page may hold a
// free list and a local_free list at once, and heap_alloc_slow's first step (local_free becomes
// the free list) is for a direct page whose free list ran out (it lost the other list).
void* heap_alloc_walk(heap* h, size_t cls) noexcept {
  page_list& q = h->queue[cls];
  // The direct page first, then the rest of the queue; pages without a free block go to the
  // full list.
  set_direct(h, cls, &empty_page);
  for (page* pg = q.first; pg;) {
    page* next = pg->next;
    spare_clear(h, pg);  // served from, or full: in use either way
    page_collect(h, pg, true);
    // A page of 16 blocks or more with one block left to give (all carved) goes to the full list
    // with it, as a page with none does, and if no other page has more, the class takes a new
    // page.  A program that frees one block and allocates one, its live blocks filling their
    // pages exactly, had one free block in all its pages, the one just freed: each malloc walked
    // to its page and each free into a full page took it back to the queue (4096 replacements of
    // 64 B: 29-35 M operations a second, mimalloc 140 M).  With a page's worth of free blocks to
    // spare, the walks are rare again: 135 M, at the same peak RSS (3.6 MiB).  The block left
    // waits for the page's next free, which brings the page back to the queue.  Pages of fewer
    // blocks are left out: one of R blocks is used up to (R - 1) / R by this rule (a 2-block page
    // would be used by one block at most).
    bool one_left = pg->reserved >= 16 && pg->capacity == pg->reserved && pg->capacity - pg->used == 1;
    if (!one_left && (pg->free || page_extend(pg))) {
      if (pg->reserved == 1) return one_block_pop(h, pg);
      if (pg != q.first) {
        list_remove(q, pg);
        list_push_front(q, pg);
      }
      set_direct(h, cls, pg);
      return page_pop(h, pg);
    }
    page_to_full(h, pg);
    pg = walk_next(q, next);
  }
  // Full pages that other threads freed into since we last looked.
  if (h->remote_hint[cls].load(std::memory_order_relaxed) && h->remote_hint[cls].exchange(0, std::memory_order_acq_rel)) {
    collect_remote_hinted(h, cls);
    if (page* pg = h->direct[cls]; pg != &empty_page) return page_pop(h, pg);
  }
  // Before taking a new span: the pages other threads emptied give theirs back first.
  collect_remote_all(h);
  heap_maybe_purge(h);
  page* pg = heap_span_alloc(h, cls);
  // Pages adopted, or collected spans kept: a one-block class looks at its bins again first.
  if (pg == &empty_page) return cls >= one_block_class_min ? one_block_alloc(h, cls) : heap_alloc_walk(h, cls);
  if (pg == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (pg->reserved == 1) return one_block_serve(h, pg);
  page_extend(pg);
  list_push_front(q, pg);
  set_direct(h, cls, pg);
  return page_pop(h, pg);
}

// A page of a heap whose thread a fork left behind (the child has only the forking thread): that
// thread may have stopped inside malloc's pop, after the block left the free list and before
// `used` counted it (the block is neither listed nor counted), inside free's push, after the
// block joined local_free and before `used` let it go (it is both), inside a carve, after
// `capacity` took the new blocks and before the free list or the block bound did, or as
// local_free became the free list, before local_free was emptied (one chain on both lists: the
// next allocations would have handed its blocks out twice).  strata_heap_check in the child
// failed.  The stopped thread never runs in the child, so its lists are the truth: every carved
// block on neither is out, for good if the thread held it.  Only when a listed block lies past
// `capacity` (a carve whose stores the compiler ordered otherwise) can the lists not be
// trusted: the count then only rises, since a lower one could give the span back under live
// blocks.  A listed block is no longer known to be zero: a stop inside free's push left the
// block of a one-block page fresh from the OS, written, on its local_free list with the page
// still flagged clean, and the child's calloc that took it over wrote no zeros.
void page_recount(page* pg) noexcept {
  if (pg->local_free == pg->free) pg->local_free = nullptr;
  uint32_t listed = 0;
  bool past_capacity = false;
  size_t carved_bytes = size_t{pg->capacity} * pg->block_size;
  size_t span_bytes = size_t{pg->reserved} * pg->block_size;
  for (block* list : {pg->free, pg->local_free}) {
    for (block* b = list; b != nullptr && listed <= pg->capacity; b = link_get(pg, b)) {
      auto offset = static_cast<size_t>(reinterpret_cast<uint8_t*>(b) - pg->start);
      // A link that names no block of the span: a write after free overwrote it (no stopped
      // store leaves one).  Followed, it faulted inside fork() with no report (the hardened
      // build too, whose pop reports it); the list ends at the block that holds it, the blocks
      // past it out for good, and the child's pop of that block reports it as the parent's would.
      if (offset >= span_bytes || offset % pg->block_size != 0) break;
      ++listed;
      if (offset >= carved_bytes) past_capacity = true;
    }
  }
  if (listed != 0) page_block_back(pg);
  if (listed > pg->capacity) return;
  if (past_capacity) {
    if (pg->capacity - listed > pg->used) pg->used = pg->capacity - listed;
    return;
  }
  pg->used = pg->capacity - listed;
  pg->block_bound.store(block_bound_of(pg->block_size, pg->capacity), std::memory_order_relaxed);
}

// The remote batches of a heap whose thread a fork left behind: that thread may have stopped
// inside remote_free_batched, a block counted in a slot and not yet at its chain's head (the
// compiled order: the count's add, then the head's store), or linked and not yet counted, or a
// new chain's page, head and tail not all stored; or inside remote_flush_slot's emptying of a
// slot (which comes before the push: such a slot was not pushed).  Pushed with a count off by
// one, the chain left its page's `used` off by one from the blocks out (strata_heap_check failed
// in the child; one low, the page could give its span back under a live block).  A slot whose
// chain runs from head to tail through carved blocks of its page is pushed with its blocks
// counted again; any other is dropped, its blocks out for good (a leak, never a block handed out
// twice).
void remote_batches_repair(heap* h) noexcept {
  for (remote_batch& r : h->remote) {
    page* pg = r.pg;
    uint32_t n = 0;
    if (pg != nullptr && r.head != nullptr && r.tail != nullptr && link_is_valid(pg, r.head)) {
      block* b = r.head;
      for (n = 1; b != r.tail; ++n) {
        b = link_get(pg, b);
        if (b == nullptr || !link_is_valid(pg, b) || n >= pg->capacity) {
          n = 0;
          break;
        }
      }
    }
    if (n == 0) r = remote_batch{};
    else r.count = n;
  }
}

// Thread exit: everything the heap holds goes back or is abandoned to whoever reclaims it.
// `forked`: h's thread did not survive a fork (heap_locks_release), and its pages are recounted.
void heap_abandon(heap* h, bool forked = false) noexcept {
  if (forked) {  // first: whatever follows may check the pages and segments (debug builds)
    // The segment list as its forward links have it, its back links written again: the thread
    // may have stopped inside heap_unlink_segment or heap_link_segment, a neighbour's back link
    // naming a segment no longer (or not yet) on the list.  segments_abandon's unlink of that
    // neighbour then wrote the other segment's link instead of the list's head, took the
    // neighbour again and put it on the abandoned list twice (linked to itself: the next thread
    // to adopt it looped for ever in span_alloc_owned).  A segment is h's list's only while h
    // owns it (its owner is stored before the link and cleared after the unlink): the walk
    // stops at one that is not, its stores caught in some other order.
    segment* back = nullptr;
    for (segment** link = &h->segments; segment* seg = *link; link = &seg->next) {
      if (seg->owner.load(std::memory_order_relaxed) != h) {
        *link = nullptr;
        break;
      }
      seg->prev = back;
      back = seg;
    }
    // Every page in use, not only the listed ones: the thread may have stopped with a page
    // between two lists, whoever adopts the segment lists it again.
    for (segment* seg = h->segments; seg; seg = seg->next) {
      segment_repair_after_fork(seg);
      for_each_page(seg, page_recount);
    }
    remote_batches_repair(h);
  }
  foreign_flush(h);
  huge_spare_release(h);
  remote_flush(h);
  collect_remote_loose(h);  // the spans other threads emptied go back before the segments leave
  bins_clear(h);
  // Empty now, unless a fork caught another thread inside a bin operation (bins_release): the
  // heap's next thread starts with empty bins either way (a span left uncounted is still in use
  // in its segment, where whoever adopts the segment finds it empty and takes it back).
  std::fill(std::begin(h->bin_count), std::end(h->bin_count), uint8_t{0});
  std::fill(std::begin(h->bin_mask), std::end(h->bin_mask), uint64_t{0});
  for (size_t c = 0; c < size_class_count; ++c) {
    set_direct(h, c, &empty_page);
    // Forked: the lists are not walked (below).  A move caught inside list_remove left a
    // neighbour's link naming the page taken off: the walk removed that neighbour, left it
    // first in the list, and took it again, its span given back twice (used_slices counted
    // it off twice: "segment used_slices does not match its spans" in the child).
    if (forked) h->queue[c] = h->full[c] = page_list{};
    for (page_list* l : {&h->queue[c], &h->full[c]}) {
      while (page* pg = l->first) {
        list_remove(*l, pg);
        flags_clear(pg, page_flag::in_full);
        page_collect(h, pg);
        if (pg->used == 0)
          page_release(h, pg);
        else
          spare_clear(h, pg);
      }
    }
    h->remote_hint[c].store(0, std::memory_order_relaxed);
    h->spare_count[c] = 0;  // 0 already, but for a heap a fork caught mid-operation (above)
  }
  // Forked, every page in use of the heap's segments is taken as the lists would have taken it,
  // found by its segment (which segment_repair_after_fork made the truth) instead: loose pages
  // and one a move left on no list included.
  if (forked) {
    for (segment* seg = h->segments; seg; seg = seg->next) {
      for_each_page(seg, [h](page* pg) {
        pg->next = pg->prev = nullptr;
        flags_clear(pg, page_flag::in_full | page_flag::spare);
        page_collect(h, pg);
        if (pg->used == 0) page_release(h, pg, false);
      });
    }
  }
  h->spare_bytes = 0;
  h->remote_loose.store(0, std::memory_order_relaxed);  // its loose pages leave with their segments
  segments_abandon(h);
  // The counters move to g_retired under the registry's lock, which the statistics hold while
  // they read (heap_registry_held): they see them in the heap or in g_retired, never both or
  // neither.
  registry_guard g;
  for (size_t i = 0; i < small_slots; ++i) {
    g_retired.alloc_count[small_classes.cls[i]].fetch_add(h->alloc_small[i].get(), std::memory_order_relaxed);
    h->alloc_small[i].v.store(0, std::memory_order_relaxed);
  }
  for (size_t c = 0; c < size_class_count; ++c) {
    g_retired.alloc_count[c].fetch_add(h->alloc_count[c].get(), std::memory_order_relaxed);
    g_retired.free_count[c].fetch_add(h->free_count[c].get(), std::memory_order_relaxed);
    h->alloc_count[c].v.store(0, std::memory_order_relaxed);
    h->free_count[c].v.store(0, std::memory_order_relaxed);
  }
  g_retired.remote_frees.fetch_add(h->remote_frees.get(), std::memory_order_relaxed);
  h->remote_frees.v.store(0, std::memory_order_relaxed);
  for (auto [from, to] : {std::pair{&h->huge.allocs, &g_retired.huge.allocs}, std::pair{&h->huge.frees, &g_retired.huge.frees},
                          std::pair{&h->huge.bytes_in, &g_retired.huge.bytes_in},
                          std::pair{&h->huge.bytes_out, &g_retired.huge.bytes_out}}) {
    to->v.fetch_add(from->get(), std::memory_order_relaxed);
    from->v.store(0, std::memory_order_relaxed);
  }
  h->remote_frees_at_purge = 0;
  h->purge_due_ms = 0;
  h->alive.store(false, std::memory_order_relaxed);
}

}  // namespace

namespace {
// The slot is emptied before its chain is pushed, not after: a fork that caught the thread
// between the push and the emptying (the owner's hint is set between them) left the child a
// slot already pushed, and heap_abandon pushed it again (the chain's tail linked to its own head,
// or its blocks on the page's lists twice: a cycle on local_free, a page emptied with blocks
// out, whose span went back twice; about 1 child in 1300 failed strata_heap_check).  A thread
// stopped before the push now leaves an empty slot, or one half emptied, which the child drops
// (remote_batches_repair): its blocks stay out, a leak.  The stores cannot sink below the push,
// whose compare-exchange releases them.
void remote_flush_slot(remote_batch& r) noexcept {
  remote_batch out = r;
  r = remote_batch{};
  page_push_remote(out.pg, out.head, out.tail, out.count);
}
}  // namespace

void remote_free_batched(heap* h, page* pg, block* b) noexcept {
  // A pending block keeps its page in use (pg->used counts it until the owner collects it), so
  // the page cannot be released or reused while it waits here.
  if (pg->block_size > remote_batch_block_max) return page_push_remote(pg, b, b, 1);
  constexpr int slot_bits = std::countr_zero(remote_batch_slots);
  size_t slot = static_cast<size_t>((reinterpret_cast<uintptr_t>(pg) * 0x9E3779B97F4A7C15ull) >> (64 - slot_bits));
  remote_batch& r = h->remote[slot];
  if (r.pg != pg) {
    if (r.pg != nullptr) remote_flush_slot(r);
    r.pg = pg;
    r.tail = b;
    link_set(pg, b, nullptr);
  } else {
    link_set(pg, b, r.head);
  }
  r.head = b;
  r.count++;
  h->remote_pending += pg->block_size;
  if (h->remote_pending >= (h->frees_only ? remote_frees_only_bytes : remote_batch_bytes)) remote_flush(h);
}

void remote_flush(heap* h) noexcept {
  for (auto& r : h->remote)
    if (r.pg != nullptr) remote_flush_slot(r);
  h->remote_pending = 0;
}

namespace {
// Sends class cls's foreign blocks back to their pages (free_block without the cache: the page's
// heap may be h by now, having adopted the segment, or none).
void foreign_flush_class(heap* h, size_t cls) noexcept {
  page& f = h->foreign[cls];
  block* b = f.free;
  f.free = nullptr;
  f.used = f.frees = 0;
  while (b) {
    block* next = b->next;
    // page_of, not page_lookup: without the page map (a process started under a small
    // RLIMIT_AS) the lookup answers nullptr for every block (CPython's tests under `ulimit -v`
    // crashed here, in free_remote).
    free_block(page_of(segment_of(b), b), b, true);
    b = next;
  }
}

inline block* foreign_take(heap* h, size_t cls) noexcept {
  if (cls >= foreign_classes || h->foreign[cls].free == nullptr) return nullptr;
  // The stand-in page serves the next allocations of cls from malloc's fast path.
  set_direct(h, cls, &h->foreign[cls]);
  h->alloc_count[cls].add();
  return page_pop_fast(&h->foreign[cls]);
}
}  // namespace

namespace {
// foreign_put found the bound reached (a block of `incoming` bytes to add).
void foreign_trim(heap* h, size_t incoming) noexcept {
  // What the fast path popped meanwhile comes off first.  Over the bound still, the classes
  // holding the most go back until a quarter of the bound is free: the frees and allocations
  // of one class balance over time, those of another do not (a consumer that frees more of
  // one size than it allocates), and sending every class back emptied the lists that were
  // serving the thread's allocations (prodcon-batch-mixed 1.24x with this, 9 rounds).
  // (A stand-in's pops carry into its push count at each 2^32 of them without a flush: the
  // difference, taken mod 2^32, counts one block too many each time, until the class goes back.)
  size_t held[foreign_classes], total = 0;
  for (size_t c = 0; c < foreign_classes; ++c)
    total += held[c] = size_t{h->foreign[c].frees - h->foreign[c].used} * block_stride(c);
  if (total + incoming > foreign_bytes_max) {
    while (total + incoming > foreign_bytes_max * 3 / 4) {
      size_t most = 0;
      for (size_t c = 1; c < foreign_classes; ++c)
        if (held[c] > held[most]) most = c;
      if (held[most] == 0) break;
      foreign_flush_class(h, most);
      total -= held[most];
      held[most] = 0;
    }
    remote_flush(h);
  }
  h->foreign_bytes = total;
}

inline void foreign_push(heap* h, page* pg, block* b) noexcept {
  size_t cls = pg->size_class;
  b->canary = canary_of(b);  // free: a second free of it is reported
  h->free_count[cls].add();
  h->remote_frees.add();
  page& f = h->foreign[cls];
  b->next = f.free;
  f.free = b;
  f.frees++;
  h->foreign_bytes += pg->block_size;
}

// Out of line, so that foreign_put stays a leaf without a stack frame (with the trim inline,
// prodcon-batch, whose every free is a put, ran at 0.93x).
STRATA_NOINLINE void foreign_trim_and_push(heap* h, page* pg, block* b) noexcept {
  foreign_trim(h, pg->block_size);
  foreign_push(h, pg, b);
}
}  // namespace

// A leaf without a frame: the trim and the push after it are a tail call.
void foreign_put(heap* h, page* pg, block* b) noexcept {
  if (STRATA_UNLIKELY(h->foreign_bytes + pg->block_size > foreign_bytes_max)) return foreign_trim_and_push(h, pg, b);
  foreign_push(h, pg, b);
}

void foreign_flush(heap* h) noexcept {
  if (h->foreign_bytes == 0) return;
  for (size_t c = 0; c < foreign_classes; ++c)
    if (h->foreign[c].free) foreign_flush_class(h, c);
  h->foreign_bytes = 0;
  remote_flush(h);
}

namespace {
// An emptied one-block page that its bin cannot keep: its span goes back to its segment.
STRATA_NOINLINE void one_block_release(heap* h, page* pg) noexcept {
  page_free_span(h, pg);
  heap_schedule_purge(h);
  heap_maybe_purge(h);
}

// The purge pacing of one_block_back, when a pass is to be scheduled or checked.
STRATA_NOINLINE void bins_pace(heap* h, bool check) noexcept {
  heap_schedule_purge(h);
  if (check) heap_maybe_purge(h);
}

// A one-block page's block came back to its owner: the page keeps its span in a bin while the bin
// and the spare budget allow (the bins above); one that is not kept leaves for its segment.  Apart
// from the pages of many blocks (page_event_many): E1's large band, a one-block page emptied at
// every free, paid the larger function's frame.
// (bin_put clears the page's clean and idle flags, as page_block_back would, and a span given
// back loses all of its flags.)
STRATA_NOINLINE void one_block_back(heap* h, page* pg) noexcept {
  if (!bin_put(h, pg)) return one_block_release(h, pg);
  // The purge check at every 8th span kept, not at each: with a pass scheduled (as it is from the
  // first span kept), each check reads the time-stamp counter (about 10 ns on the lab's VM), once
  // per free on E1's large band.  With the same-class reuse that skips the carve (bin_take),
  // 1.26x [1.06-1.44] / 1.24x [1.12-1.32] on e1-large at 1/2 threads, 7 interleaved rounds, the
  // peak RSS within 2 %.  Both in a function of their own, reached by a jump: the other frees
  // keep no frame.
  bool check = (++h->bin_puts & 7) == 0;
  if (STRATA_UNLIKELY(check || h->purge_due_ms == 0)) return bins_pace(h, check);
}

// Pages of many blocks: a page emptied or no longer full.
STRATA_NOINLINE void page_event_many(heap* h, page* pg) noexcept {
  size_t cls = pg->size_class;
  bool full = flags_of(pg) & page_flag::in_full;
  if (pg->used == 0) {
    page_block_back(pg);
    // A class of many blocks to a page keeps up to spare_pages_max empty pages (spares) for its
    // next allocations, sparing a span round trip to a thread that frees and allocates blocks of
    // one size over and over, or a batch of them.  Any other page that empties gives its span
    // back to the segment at once, where any class can reuse its already-touched slices; the
    // spares give theirs back before fresh memory is touched (heap_span_alloc) and at the purge
    // pass after they have been idle.  Keeping every empty page until the purge pass, before the
    // spares went back ahead of fresh memory, made the other classes touch fresh memory
    // meanwhile (E1 large band: peak RSS 1.27x mimalloc's).  With one spare a class, a batch of
    // 256 blocks of 8-64 KiB allocated and freed (E2's probe on a fresh heap) cut 8-32 pages
    // afresh each time, each block of 8 KiB or more carved by a walk of its own: with 8, E2 on
    // host malloc's probes ran 1.03-1.09x as fast at the same peak RSS, and its long-term phase
    // held 2-3 % more (docs/results/probes-s36-2core, section 2).
    const page_list& q = h->queue[cls];
    bool keep = (flags_of(pg) & page_flag::spare) || (full ? q.first == nullptr : q.first == pg && pg->next == nullptr);
    if (!keep && h->spare_count[cls] < spare_pages_max && h->spare_bytes + span_bytes(pg) <= spare_budget) {
      flags_set(pg, page_flag::spare);
      h->spare_count[cls]++;
      h->spare_bytes += span_bytes(pg);
      keep = true;
    }
    if (!keep)
      page_free_span(h, pg);
    else if (full)
      page_unfull(h, pg);
    heap_schedule_purge(h);
  } else if (full) {
    page_unfull(h, pg);
  }
  heap_maybe_purge(h);
}
}  // namespace

void page_local_event(heap* h, page* pg) noexcept {
  // A thread without a heap yet whose free matched the page's owner word: the page is a dead
  // thread's whose thread pointer this one has (heap_acquire), and that heap becomes this one's.
  if (STRATA_UNLIKELY(h == &empty_heap)) {
    h = heap_get_or_create();
    if (h == nullptr || segment_of(pg)->owner.load(std::memory_order_relaxed) != h) return;
  }
  // A one-block page is here only with its block back (used 0): it is never full with one out.
  if (pg->reserved == 1 && pg->used == 0) return one_block_back(h, pg);
  page_event_many(h, pg);
}

void heap_thread_done(void* arg) noexcept {
  auto* h = static_cast<heap*>(arg);
  if (h == nullptr || h == &empty_heap) return;
  tl_exited = true;
  foreign_flush(h);  // while h is still the thread's heap: the blocks' frees are counted in it
  tl_heap = &empty_heap;
  heap_abandon(h);
}

namespace {
// A heap from the registry (a dead thread's) or a new one, marked alive for `tid`.
// A heap still alive under `tid` belongs to a thread that is gone: thread pointers are unique among
// live threads, and glibc gives a new thread the stack (and TCB) of one that exited.  That thread
// made its heap after its last round of key destructors had begun (its first allocation in the
// last round; or pthread_setspecific failed), so heap_thread_done never ran for it.  The thread
// that now has its thread pointer takes it over as it is: its pages' owner word is that thread's
// id, so free's fast path already treats their blocks as the new thread's own (before, the new
// thread got a heap of its own and its frees into those pages ran their list events against it,
// or against the shared empty_heap before its first allocation: lists and spare counts of two
// heaps crossed, and the old heap stayed alive for good).
heap* heap_acquire(uintptr_t tid) noexcept {
  registry_guard g;
  heap* h = nullptr;
  for (heap* r = registry; r; r = r->next_in_registry) {
    if (r->alive.load(std::memory_order_relaxed)) {
      if (r->tid == tid) {
        h = r;
        break;
      }
    } else if (h == nullptr) {
      h = r;
    }
  }
  if (h == nullptr) {
    size_t bytes = (sizeof(heap) + os::page_size() - 1) & ~(os::page_size() - 1);
    auto* fresh = static_cast<heap*>(os::map_aligned(bytes, os::page_size()));
    if (fresh == nullptr) return nullptr;
    os::commit_add(static_cast<int64_t>(bytes));
    for (auto& d : fresh->direct) d = &empty_page;
    for (auto& d : fresh->direct_small) d = &empty_page;
    fresh->tid = 0;
    fresh->next_in_registry = registry;
    registry = fresh;
    h = fresh;
  }
  h->alive.store(true, std::memory_order_relaxed);
  h->active_tsc.store(tsc_now(), std::memory_order_relaxed);  // a new thread is active
  h->tid = tid;
  h->frees_only = false;
  return h;
}

// An allocation from h, which the fast path has not looked at (a new or shared heap).
void* heap_alloc(heap* h, size_t cls) noexcept {
  if (h == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  page* pg = h->direct[cls];
  if (pg->free) return page_pop(h, pg);
  return heap_alloc_slow(h, cls);
}

// An allocation by a thread whose heap is gone (tl_exited): from the shared orphan heap.
void* orphan_alloc(size_t cls) noexcept {
  lock_guard g(orphan_lock);
  if (orphan_heap == nullptr) orphan_heap = heap_acquire(orphan_tid);
  return heap_alloc(orphan_heap, cls);
}
}  // namespace

heap* heap_get_or_create() noexcept {
  heap* h = tl_heap;
  if (h != &empty_heap) return h;
  if (tl_exited) return nullptr;  // its heap is gone for good (orphan_alloc serves it)
  global_init();
  h = heap_acquire(thread_id());
  if (h == nullptr) return nullptr;
  tl_heap = h;  // before pthread_setspecific, which may itself allocate
  // Without a key the heap outlives its thread; the next thread given its thread pointer takes it
  // over (heap_acquire).
  if (pthread_key_t key; thread_key(&key)) pthread_setspecific(key, h);
  return h;
}

void* malloc_slow(size_t cls) noexcept {
  heap* h = tl_heap;
  if (STRATA_UNLIKELY(h == &empty_heap)) {
    if (STRATA_UNLIKELY(tl_exited)) return orphan_alloc(cls);
    return heap_alloc(heap_get_or_create(), cls);
  }
  return heap_alloc_slow(h, cls);
}

namespace {
void heap_trim_as(heap* h, bool force, bool adopt) noexcept {
  foreign_flush(h);
  remote_flush(h);
  collect_remote_loose(h);
  if (adopt) {
    while (segment* seg = segment_take_abandoned()) heap_adopt_segment(h, seg);
  }
  bins_clear(h);
  for (size_t c = 0; c < size_class_count; ++c) {
    for (page_list* l : {&h->full[c], &h->queue[c]}) {
      for (page* pg = l->first; pg;) {
        page* next = pg->next;
        page_collect(h, pg);
        if (pg->used == 0 && (force || pg != h->direct[c])) {
          page_free_span(h, pg);
        } else if ((flags_of(pg) & page_flag::in_full) && pg->free) {
          page_unfull(h, pg);
        }
        pg = next;
      }
    }
  }
  heap_purge(h, force);
  if (force) {
    segment_cache_trim(0);
    huge_cache_trim(true);
  }
  STRATA_ASSERT_EXPENSIVE(heap_is_valid(h));
}
}  // namespace

void heap_trim(heap* h, bool force) noexcept { heap_trim_as(h, force, force); }

void orphan_page_flags_set(page* pg, uint8_t f) noexcept {
  lock_guard g(orphan_lock);
  flags_set(pg, f);
}

void orphan_trim() noexcept {
  lock_guard g(orphan_lock);
  if (orphan_heap != nullptr) heap_trim_as(orphan_heap, true, false);
}

// Held already by this thread (or waited for): a signal handler interrupted it inside one of the
// lock's sections, which stays as it was (the counts may be off by a heap whose fold into g_retired
// it stopped, or, waiting, by one another thread folds meanwhile).
heap_registry_held::heap_registry_held() noexcept : nested_(tl_registry_held) {
  if (!nested_) registry_lock_take();
}
heap_registry_held::~heap_registry_held() {
  if (!nested_) registry_lock_give();
}
heap* heap_registry_held::first() const noexcept { return registry; }

bool heap_is_orphan(const heap* h) noexcept { return h->tid == orphan_tid; }

void heap_locks_acquire() noexcept {
  orphan_lock.lock();
  registry_lock_take();
}

void heap_locks_release(bool in_child) noexcept {
  if (!in_child) {
    registry_lock_give();
    orphan_lock.unlock();
    return;
  }
  registry_lock.reset();
  orphan_lock.reset();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  tl_registry_held = false;
  // Only the forking thread lives on in the child: the other threads' heaps are abandoned so
  // their segments can be reclaimed (the orphan heap stays: it belongs to no thread).
  for (heap* h = registry; h; h = h->next_in_registry) {
    if (h->alive.load(std::memory_order_relaxed) && h != tl_heap && h != orphan_heap) heap_abandon(h, true);
  }
}

}  // namespace strata::detail
