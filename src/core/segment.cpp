// Segments: mapping, carving spans (pages) out of them, purging free slices after a delay,
// abandoning and reclaiming them across thread exits, the empty-segment cache, huge mappings.
#include "core/segment.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/heap.h"
#include "core/lock.h"
#include "core/options.h"
#include "core/page.h"
#include "core/report.h"
#include "core/slice_bits.h"
#include "core/numa.h"
#include "os/os.h"

namespace strata::detail {

segment_map g_map;

namespace {
std::atomic<page*> boot_entry{nullptr};
}  // namespace
page_map g_pages{&boot_entry, 0};

// The table is mapped read-only, and each normal segment's 4 KiB of it made writable when the
// segment is mapped (page_map_open): a program that locks its memory (mlockall(MCL_CURRENT), as
// root) then pins the zero page under the rest (page tables: about 32 MiB for the 16 GiB, 2-3 s
// on the lab's VM) instead of 16 GiB of memory (session 39's probe: the process grew past 7.7 GB
// and was stopped).  Reads anywhere stay valid: a free() of any pointer reads its entry.
void page_map_init() noexcept {
  if (g_pages.mask.load(std::memory_order_acquire) != 0) return;
  void* table = os::map_sparse_readonly(page_map_entries * sizeof(std::atomic<page*>));
  if (table == nullptr) {
    // Every free then takes the slow path, which finds pages through the segment map.
    if (options::get(option::verbose))
      report::message("strata: cannot map the page map (%zu GiB of address space); free() will be slower\n",
                      page_map_entries * sizeof(void*) >> 30);
    return;
  }
  g_pages.entries.store(static_cast<std::atomic<page*>*>(table), std::memory_order_relaxed);
  g_pages.mask.store(page_map_entries - 1, std::memory_order_release);
}

// Makes seg's entries writable (a new mapping).  False when the kernel refuses (out of kernel
// mappings: each writable piece apart from its neighbours is one); the whole table is then made
// writable, as it was before pieces (one mapping), and false only if that fails too.  Where
// mprotect is refused for good (a seccomp filter: EPERM, ENOSYS) no new segment could be had,
// and every allocation needing one answered NULL (malloc(30) in a new thread) with memory to
// spare: seg's piece, its own (a segment's 4 KiB, aligned), is then mapped afresh, writable.
// Its entries read as zero, as a new segment's are before its spans are set.
bool page_map_open(segment* seg) noexcept {
  if (g_pages.mask.load(std::memory_order_acquire) == 0) return true;
  std::atomic<page*>* entries = g_pages.entries.load(std::memory_order_relaxed);
  size_t first = reinterpret_cast<uintptr_t>(seg) >> slice_shift;
  if (os::protect_rw(entries + first, slices_per_segment * sizeof(entries[0]))) return true;
  if (os::protect_rw(entries, page_map_entries * sizeof(entries[0]))) return true;
  return os::map_sparse_writable_at(entries + first, slices_per_segment * sizeof(entries[0]));
}

namespace {
void page_map_set(segment* seg, size_t idx, size_t n, page* pg) noexcept {
  if (g_pages.mask.load(std::memory_order_acquire) == 0) return;
  std::atomic<page*>* entries = g_pages.entries.load(std::memory_order_relaxed);
  size_t first = reinterpret_cast<uintptr_t>(slice_address(seg, idx)) >> slice_shift;
  for (size_t k = 0; k < n; ++k) entries[first + k].store(pg, std::memory_order_release);
}
}  // namespace

namespace {

spin_lock abandoned_lock;
segment* abandoned_list = nullptr;
std::atomic<uint64_t> abandoned_count{0}, reclaimed_count{0};

spin_lock cache_lock;
segment* cache_list = nullptr;
size_t cache_count = 0;

std::atomic<uint64_t> live_segments{0};

// Huge blocks handed out and freed, and their bytes, counted in the calling thread's heap with
// unlocked adds (a thread without a heap: the retired totals, atomically); the live ones are
// summed over the heaps when asked (huge_totals).  They were two process-wide counters with
// locked adds at each huge malloc and free: a locked instruction waits for the stores before it
// (the program's writes to its last block, still missing the cache), and their line went from
// core to core.  One more, for the statistics' malloc_count, cost E1's big band 0.59-0.69x at
// one thread.  Each call adds to the two counters that change: with all four (two adding 0) the
// band ran 1.12x / 1.25x the locked build at one / two threads, with two 1.53x / 1.72x, since
// every store waits in order behind the program's (docs/design.md, "huge blocks' statistics").
template <counter huge_counts::*First, counter huge_counts::*Second>
void huge_count(uint64_t first, uint64_t second) noexcept {
  heap* h = tl_heap;
  if (h != &empty_heap) {
    (h->huge.*First).add(first);
    (h->huge.*Second).add(second);
    return;
  }
  (g_retired.huge.*First).v.fetch_add(first, std::memory_order_relaxed);
  (g_retired.huge.*Second).v.fetch_add(second, std::memory_order_relaxed);
}

// Every heap's counts and the retired ones, added up, under the lock a heap's retirement takes
// (heap.h, heap_registry_held): each counted once.  The frees are read before the allocations,
// as stats_sum reads the classes' (stats.cpp): no free is read without its allocation.
segment_totals huge_totals() noexcept {
  heap_registry_held registry;
  uint64_t f = g_retired.huge.frees.get(), out = g_retired.huge.bytes_out.get();
  for (heap* h = registry.first(); h; h = h->next_in_registry) {
    f += h->huge.frees.get();
    out += h->huge.bytes_out.get();
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  uint64_t a = g_retired.huge.allocs.get(), in = g_retired.huge.bytes_in.get();
  for (heap* h = registry.first(); h; h = h->next_in_registry) {
    a += h->huge.allocs.get();
    in += h->huge.bytes_in.get();
  }
  segment_totals t{};
  t.huge_count = a > f ? a - f : 0;
  t.huge_bytes = in > out ? in - out : 0;
  t.huge_allocs = a;
  t.huge_frees = f;
  return t;
}

// The live huge bytes for the shared cache's bound, summed at most once a millisecond (the sum
// takes the heap registry's lock, and a huge free that fills the cache comes here at each call);
// never under huge_lock, which fork takes after the registry's.
std::atomic<uint64_t> live_bytes_seen{0};
std::atomic<int64_t> live_bytes_seen_ms{-1};
uint64_t huge_live_bytes(int64_t now_ms) noexcept {
  if (live_bytes_seen_ms.load(std::memory_order_relaxed) != now_ms) {
    live_bytes_seen.store(huge_totals().huge_bytes, std::memory_order_relaxed);
    live_bytes_seen_ms.store(now_ms, std::memory_order_relaxed);
  }
  return live_bytes_seen.load(std::memory_order_relaxed);
}

// ---- the segment map -------------------------------------------------------------------------
void map_bit(std::atomic<uint64_t>* bits, uintptr_t chunk, bool set) noexcept {
  if (chunk >= map_chunks) return;
  uint64_t bit = uint64_t{1} << (chunk % 64);
  if (set)
    bits[chunk / 64].fetch_or(bit, std::memory_order_release);
  else
    bits[chunk / 64].fetch_and(~bit, std::memory_order_release);
}

// The first chunk's bit goes in one array, the rest in the other, by separate calls: written as
// one loop choosing the array with `c == first ? start : continuation`, gcc 12 with
// -fsanitize=undefined indexed the continuation word with the previous chunk's number (a stale
// register), so a huge block whose chunk began a bitmap word was not found by free().
void map_mark(segment* seg, size_t bytes, bool set) noexcept {
  uintptr_t first = reinterpret_cast<uintptr_t>(seg) >> segment_shift;
  uintptr_t chunks = (bytes + segment_size - 1) >> segment_shift;
  map_bit(g_map.start, first, set);
  for (uintptr_t c = first + 1; c < first + chunks; ++c) map_bit(g_map.continuation, c, set);
}

// ---- colours -------------------------------------------------------------------------------------
// The next colour (size_class.h): 64-byte steps below colour_span, visited in a scattered order
// (a stride of 37 lines) so that blocks allocated one after another get distant colours.  The
// count is the thread's own: a shared one took a locked add at every one-block span cut or
// reshaped and at every huge block, on a line that went from core to core (E1's big band at two
// threads ran 1.39x as fast with the thread's own count, 11 rounds in the lab).
__thread uint32_t tl_colour_count;
size_t next_colour() noexcept {
  constexpr size_t lines = colour_span / 64;
  return (tl_colour_count++ * 37 % lines) * 64;
}

// ---- sweeps of abandoned segments (segment_sweep) ----------------------------------------------
// The next sweep comes once a quarter of what the segment's pages hold has been freed into it.
// Set by the thread that abandons or sweeps it (the latter under the abandoned list's lock).
void sweep_at_set(segment* seg) noexcept {
  seg->sweep_at.store(uint64_t{seg->used_slices} * slice_size / 4, std::memory_order_relaxed);
}

// ---- the purge delay, adapted to refaults ------------------------------------------------------
// Memory purged and then used again soon after (within two delays: a slice is purged after one
// to two delays free) was given back too early: the program pays a fault per page for nothing
// (thread churn: 3x mimalloc's faults at a 10 ms delay).  Each such refault doubles the delay,
// up to purge_scale_max times the option; a stretch of purge_calm_delays delays without one
// halves it again, so a program that stops reusing its memory gets it back to the OS at the
// option's pace.
constexpr uint32_t purge_scale_max = 16;
constexpr int64_t purge_calm_delays = 8;
std::atomic<uint32_t> purge_scale{1};
std::atomic<int64_t> last_refault_ms{0};
std::atomic<int64_t> last_doubling_ms{0};

// Slices [idx, idx+n) are being used again: were they purged only just now?
void note_reuse(segment* seg, size_t idx, size_t n) noexcept {
  if (!bits_any(seg->purged_bits, idx, n)) return;
  bits_assign(seg->purged_bits, idx, n, false);
  int64_t now = os::now_ms(), delay = purge_delay();
  if (delay <= 0 || now - seg->purged_ms > 2 * delay) return;
  // One doubling per delay: the spans of one burst of reuse are one refault.
  // (Timed from the last doubling, not from the last refault: a program that refaults every few
  // ms for hundreds of ms, rebuilding what it freed, had each refault push the next doubling
  // back, and its delay stayed at twice the option.)
  last_refault_ms.store(now, std::memory_order_relaxed);
  int64_t last = last_doubling_ms.load(std::memory_order_relaxed);
  uint32_t scale = purge_scale.load(std::memory_order_relaxed);
  if (now - last >= delay && scale < purge_scale_max &&
      last_doubling_ms.compare_exchange_strong(last, now, std::memory_order_relaxed))
    purge_scale.compare_exchange_strong(scale, scale * 2, std::memory_order_relaxed);
}

}  // namespace

int64_t purge_delay() noexcept {
  int64_t delay = options::get(option::purge_delay);
  return delay > 0 ? delay * purge_scale.load(std::memory_order_relaxed) : delay;
}

void purge_delay_reset() noexcept {
  purge_scale.store(1, std::memory_order_relaxed);
  last_refault_ms.store(0, std::memory_order_relaxed);
  last_doubling_ms.store(0, std::memory_order_relaxed);
}

namespace {

// A purge pass runs: a long calm shortens the delay again.
void note_purge_pass(int64_t now) noexcept {
  uint32_t scale = purge_scale.load(std::memory_order_relaxed);
  if (scale > 1 && now - last_refault_ms.load(std::memory_order_relaxed) > purge_calm_delays * purge_delay()) {
    last_refault_ms.store(now, std::memory_order_relaxed);  // the next halving waits as long again
    purge_scale.compare_exchange_strong(scale, scale / 2, std::memory_order_relaxed);
  }
}

// The slices of seg that are free and still resident (free and dirty): what a purge can give
// back, and what a new span takes first.
struct slice_set {
  uint64_t bits[bitmap_words];
};
inline slice_set free_resident(const segment* seg) noexcept {
  slice_set s;
  for (size_t w = 0; w < bitmap_words; ++w) s.bits[w] = seg->free_bits[w] & seg->dirty_bits[w];
  return s;
}

// Purges the runs of slices set in `which` (a subset of the free, dirty slices).
// With `want`, stops once that many bytes are purged (whole runs: it may purge more) and does
// not mark the slices purged_bits: a purge forced by growth (purge_before_growth) says nothing
// about the delay.  Returns the bytes purged.  A run the kernel refuses to purge (the program
// locked its memory) stays dirty: its old bytes are still there, and a calloc of a span on it
// must write its zeros (span_init flags only a span of slices none of which is dirty clean).
size_t purge_runs(segment* seg, const uint64_t* which, size_t want = SIZE_MAX) noexcept {
  size_t i = 0, purged = 0;
  while (purged < want && (i = bits_next(which, i, true)) < slices_per_segment) {
    size_t end = bits_next(which, i, false);
    if (!os::purge(slice_address(seg, i), (end - i) * slice_size)) {
      i = end;
      continue;
    }
    os::commit_add(-static_cast<int64_t>((end - i) * slice_size));
    bits_assign(seg->dirty_bits, i, end - i, false);
    if (want == SIZE_MAX) bits_assign(seg->purged_bits, i, end - i, true);
    purged += (end - i) * slice_size;
    i = end;
  }
  if (purged && want == SIZE_MAX) seg->purged_ms = os::now_ms();
  return purged;
}

size_t purge_free_dirty_upto(segment* seg, size_t want) noexcept {
  return purge_runs(seg, free_resident(seg).bits, want);
}

// Purges every free, dirty slice now.
void purge_free_dirty(segment* seg) noexcept {
  for (size_t w = 0; w < bitmap_words; ++w) seg->purge_bits[w] = 0;
  purge_runs(seg, free_resident(seg).bits);
  seg->purge_due_ms = 0;
}

// A purge pass: slices that were free and dirty at the previous pass and still are have been
// free for at least one delay: purge them.  The slices freed since become the next candidates,
// so a slice reused soon after its free is never purged in between.
void purge_aged(segment* seg, int64_t now, int64_t delay) noexcept {
  uint64_t aged[bitmap_words];
  bool pending = false;
  for (size_t w = 0; w < bitmap_words; ++w) aged[w] = seg->purge_bits[w] & seg->free_bits[w] & seg->dirty_bits[w];
  purge_runs(seg, aged);
  for (size_t w = 0; w < bitmap_words; ++w) {
    seg->purge_bits[w] = seg->free_bits[w] & seg->dirty_bits[w];
    pending |= seg->purge_bits[w] != 0;
  }
  seg->purge_due_ms = pending ? now + delay : 0;
}

// ---- segments nobody owns: cached and abandoned ------------------------------------------------
// A segment that leaves its heap (into the cache, or abandoned at thread exit) keeps its free
// slices' memory for a delay, like a heap's own segments: a thread that starts soon after another
// exited reuses that memory warm instead of faulting it in again.  Any thread's slow path runs
// the pass that purges them once the delay has passed (segments_purge_idle).
std::atomic<int64_t> idle_purge_due{0};  // earliest purge_due_ms of a cached or abandoned segment

void idle_due_note(int64_t due) noexcept {
  int64_t cur = idle_purge_due.load(std::memory_order_relaxed);
  while ((cur == 0 || due < cur) && !idle_purge_due.compare_exchange_weak(cur, due, std::memory_order_relaxed)) {
  }
}

// seg leaves its heap: purge its free slices now (delay 0), later (the idle pass), or never.
void purge_schedule_unowned(segment* seg) noexcept {
  int64_t delay = purge_delay();
  if (delay == 0) return purge_free_dirty(seg);
  if (delay < 0) return;
  // A segment passed from thread to thread keeps its pending deadline and candidates: were each
  // exit to push them back, a segment reused by short-lived threads would never be purged.
  if (seg->purge_due_ms == 0) {
    uint64_t pending = 0;
    for (size_t w = 0; w < bitmap_words; ++w) {
      seg->purge_bits[w] = seg->free_bits[w] & seg->dirty_bits[w];
      pending |= seg->purge_bits[w];
    }
    if (pending == 0) return;
    seg->purge_due_ms = os::now_ms() + delay;
  }
  idle_due_note(seg->purge_due_ms);
}

// A heap takes seg over (from the cache or the abandoned list): its pending purge joins the heap's.
void heap_note_segment_due(heap* h, segment* seg) noexcept {
  if (seg->purge_due_ms != 0 && (h->purge_due_ms == 0 || seg->purge_due_ms < h->purge_due_ms))
    h->purge_due_ms = seg->purge_due_ms;
}

void heap_link_segment(heap* h, segment* seg) noexcept {
  seg->prev = nullptr;
  seg->next = h->segments;
  if (h->segments) h->segments->prev = seg;
  h->segments = seg;
}

void heap_unlink_segment(heap* h, segment* seg) noexcept {
  if (seg->prev) seg->prev->next = seg->next;
  else h->segments = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  seg->next = seg->prev = nullptr;
}

void segment_reset_header(segment* seg) noexcept {
  seg->kind = segment_kind::normal;
  seg->used_slices = 0;
  seg->mapped_size = segment_size;
  seg->huge_size = 0;
  seg->purge_due_ms = 0;
  for (size_t w = 0; w < bitmap_words; ++w) seg->free_bits[w] = ~uint64_t{0};
  seg->free_bits[0] &= ~((uint64_t{1} << header_slices) - 1);  // the header's slices
  if constexpr (secure) seg->free_bits[bitmap_words - 1] &= ~(uint64_t{1} << 63);  // the guard slice
}

// Hardened build: the OS page below the first slice past the header (the header's unused tail)
// and, for a segment, its last slice become guard pages: an underflow from the first block, or an
// overflow past the last, faults instead of reaching strata's metadata or the next mapping.
static_assert(!secure || sizeof(segment) <= header_slices * slice_size - 4096, "the header leaves room for a guard page");
inline uint8_t* header_guard(segment* seg) noexcept {
  return reinterpret_cast<uint8_t*>(seg) + header_slices * slice_size - os::page_size();
}
void guard_header(segment* seg) noexcept {
  if constexpr (secure) os::protect_none(header_guard(seg), os::page_size());
}

}  // namespace

void purge_before_growth(heap* h, size_t bytes) noexcept {
  // Free resident memory up to a quarter of what h's pages hold, and at least one segment's
  // worth, is a working reserve (a heap that frees and allocates in waves reuses it: purging it
  // made E1's big band fault 15 % more, and the cached segments the next short-lived thread
  // takes, churn 40 %): only what exceeds it is given back.
  bool own = h != nullptr && h != &empty_heap;
  // The spare pages first: they are memory held free as much as free slices are (the phases
  // program in a 256 MiB cgroup, nothing between phases: its last phase, 6 MiB blocks after 700 KB
  // ones, peaked at 258 MiB by the cgroup's count with the spares kept, 205 MiB without).
  if (own) heap_spares_release(h);
  size_t used = 0, resident = 0;
  auto resident_free = [](const segment* seg) {
    return bits_count(free_resident(seg).bits, 0, slices_per_segment) * slice_size;
  };
  if (own) {
    for (const segment* seg = h->segments; seg; seg = seg->next) {
      used += size_t{seg->used_slices} * slice_size;
      resident += resident_free(seg);
    }
  }
  lock_guard g(cache_lock);
  for (const segment* seg = cache_list; seg; seg = seg->next) resident += resident_free(seg);
  size_t reserve = used / 4 > segment_size ? used / 4 : segment_size;
  if (resident <= reserve) return;
  size_t want = resident - reserve < bytes ? resident - reserve : bytes, got = 0;
  if (own)
    for (segment* seg = h->segments; seg && got < want; seg = seg->next) got += purge_free_dirty_upto(seg, want - got);
  for (segment* seg = cache_list; seg && got < want; seg = seg->next) got += purge_free_dirty_upto(seg, want - got);
}

namespace {

inline bool has_resident_slices(const segment* seg) noexcept {
  return bits_any(seg->dirty_bits, header_slices, usable_slices);  // the header's do not count
}

// A segment for h: from the cache (with warm_only, only one whose free slices are still
// resident; nullptr if none is), else newly mapped.
segment* segment_new(heap* h, bool warm_only) noexcept {
  segment* seg = nullptr;
  {
    lock_guard g(cache_lock);
    for (segment** link = &cache_list; *link; link = &(*link)->next) {
      if (warm_only && !has_resident_slices(*link)) continue;
      seg = *link;
      *link = seg->next;
      --cache_count;
      break;
    }
  }
  if (seg == nullptr && warm_only) return nullptr;
  if (seg == nullptr) {
    purge_before_growth(h, segment_size);
    seg = static_cast<segment*>(os::map_aligned(segment_size, segment_size));
    if (seg == nullptr) {  // out of address space or memory: give back cached huge mappings, retry
      huge_cache_trim(true);
      seg = static_cast<segment*>(os::map_aligned(segment_size, segment_size));
    }
    if (seg == nullptr) return nullptr;
    if (!page_map_open(seg)) {
      os::unmap(seg, segment_size);
      errno = ENOMEM;
      return nullptr;
    }
    numa_place(seg, segment_size);
    // Opt-in (docs/design.md, "Huge pages for segments"): mimalloc 3's trade, about as much faster
    // where faults or TLB misses bound a program, for up to 3x the resident memory of a small heap.
    if (options::get(option::huge_segments)) os::advise_huge_pages(seg, segment_size);
    segment_reset_header(seg);
    guard_header(seg);
    if constexpr (secure) os::protect_none(slice_address(seg, slices_per_segment - 1), slice_size);
    bits_assign(seg->dirty_bits, 0, header_slices, true);
    os::commit_add(static_cast<int64_t>(header_slices * slice_size));
    map_mark(seg, segment_size, true);
    live_segments.fetch_add(1, std::memory_order_relaxed);
  }
  seg->owner.store(h, std::memory_order_release);
  heap_link_segment(h, seg);
  heap_note_segment_due(h, seg);
  return seg;
}

size_t cache_limit() noexcept { return static_cast<size_t>(options::get(option::segment_cache)); }

void segment_unmap(segment* seg) noexcept {
  map_mark(seg, segment_size, false);
  // Its resident slices (the header's among them) stop counting: a cached segment may still
  // hold memory waiting for the purge delay.
  os::commit_add(-static_cast<int64_t>(bits_count(seg->dirty_bits, 0, slices_per_segment) * slice_size));
  live_segments.fetch_sub(1, std::memory_order_relaxed);
  os::unmap(seg, segment_size);
}

// A heap keeps its last segment even when empty: a thread that frees all it has and allocates
// again must not map a segment afresh each time.
inline bool is_heaps_last(const heap* h, const segment* seg) noexcept {
  return h->segments == seg && seg->next == nullptr;
}

// An empty segment leaves its heap: into the cache (purged after the delay) or back to the OS.
void segment_release(heap* h, segment* seg) noexcept {
  STRATA_ASSERT(seg->used_slices == 0 && seg->owner.load(std::memory_order_relaxed) == h);
  heap_unlink_segment(h, seg);
  seg->owner.store(nullptr, std::memory_order_release);
  {
    lock_guard g(cache_lock);
    // Any number of segments wait in the cache while their memory waits for the purge delay;
    // once purged, those beyond STRATA_SEGMENT_CACHE are unmapped (segments_purge_idle).
    purge_schedule_unowned(seg);
    if (seg->purge_due_ms != 0 || cache_count < cache_limit()) {
      seg->next = cache_list;
      cache_list = seg;
      ++cache_count;
      return;
    }
  }
  segment_unmap(seg);
}

// Hardened build: clears the link and canary words of every block carved on pg, all free, before
// its span takes another layout (span_free, page_reshape).  Pops clear them only under the layout
// that wrote them: left in the span, they sat inside the next layout's blocks, and a program
// that sent out a fresh block's uninitialised bytes (a buffer not yet filled, struct padding)
// sent stale canaries (each its address XOR the secret: the secret, and with it every page's
// link key) and encoded links.  As many stores as the carve made.
void page_scrub(const page* pg) noexcept {
  if constexpr (secure) {
    for (uint32_t i = 0; i < pg->capacity; ++i) {
      auto* b = reinterpret_cast<block*>(pg->start + static_cast<size_t>(i) * pg->block_size);
      b->next = nullptr;
      b->canary = 0;
    }
  }
}

// Sets up pg, the first page of a span of n slices at slice idx of seg, for blocks of class cls:
// empty, in use, on no list.
void page_shape(segment* seg, size_t idx, size_t n, size_t cls) noexcept {
  page* pg = &seg->pages[idx];
  size_t bs = block_stride(cls);
  size_t colour = 0;
  if (bs > one_block_page_min && n * slice_size - bs >= 64) {
    colour = next_colour();
    if (colour > n * slice_size - bs) colour = (n * slice_size - bs) & ~size_t{63};
  }
  pg->free = pg->local_free = nullptr;
  pg->used = 0;
  pg->capacity = 0;
  pg->reserved = static_cast<uint16_t>((n * slice_size - colour) / bs);
  pg->block_size = static_cast<uint32_t>(bs);
  pg->block_mul = block_mul_of(bs);
  pg->start = slice_address(seg, idx) + colour;
  pg->thread_free.store(0, std::memory_order_relaxed);
  pg->next = pg->prev = nullptr;
  pg->slice_count = static_cast<uint16_t>(n);
  pg->slice_offset = 0;
  pg->size_class = static_cast<uint8_t>(cls);
  pg->block_bound.store(0, std::memory_order_relaxed);
  pg->flags.store(page_flag::in_use, std::memory_order_relaxed);
  pg->frees = 0;
  pg->owner_tid.store(owner_tid_of(seg->owner.load(std::memory_order_relaxed), pg), std::memory_order_relaxed);
}

page* span_init(segment* seg, size_t idx, size_t cls) noexcept {
  size_t n = page_slices(cls);
  page* pg = &seg->pages[idx];
  if (!page_map_ready())
    for (size_t k = 1; k < n; ++k) pg[k].slice_offset = static_cast<uint16_t>(k);
  page_shape(seg, idx, n, cls);
  page_map_set(seg, idx, n, pg);
  bits_assign(seg->free_bits, idx, n, false);
  size_t fresh = bits_all(seg->dirty_bits, idx, n) ? 0 : n - bits_count(seg->dirty_bits, idx, n);
  if (fresh) {
    os::commit_add(static_cast<int64_t>(fresh * slice_size));
    note_reuse(seg, idx, n);
  }
  if (fresh == n && pg->reserved == 1) flags_set(pg, page_flag::clean);
  bits_assign(seg->dirty_bits, idx, n, true);
  bits_assign(seg->purge_bits, idx, n, false);
  seg->used_slices += static_cast<uint32_t>(n);
  STRATA_ASSERT_EXPENSIVE(segment_is_valid(seg));
  return pg;
}

}  // namespace

// A run of n free slices of seg (with warm_only, of free slices still resident), or -1.
long free_run(const segment* seg, size_t n, bool warm_only) noexcept {
  if (usable_slices - seg->used_slices < n) return -1;
  if (!warm_only) return find_run({seg->free_bits}, n);
  return find_run({seg->free_bits, seg->dirty_bits}, n);
}

void page_reshape(page* pg, size_t cls) noexcept {
  segment* seg = segment_of(pg);
  STRATA_ASSERT_INTERNAL(pg->used == 0 && page_slices(cls) <= pg->slice_count);
  page_scrub(pg);
  page_shape(seg, static_cast<size_t>(pg - seg->pages), pg->slice_count, cls);
  pg->reserved = 1;  // a longer span than the class needs still holds one block
}

page* span_alloc_owned(heap* h, size_t cls, bool warm_only) noexcept {
  for (segment* seg = h->segments; seg; seg = seg->next)
    if (page* pg = span_alloc_in(seg, cls, warm_only)) return pg;
  return nullptr;
}

page* span_alloc_in(segment* seg, size_t cls, bool warm_only) noexcept {
  long idx = free_run(seg, page_slices(cls), warm_only);
  return idx >= 0 ? span_init(seg, static_cast<size_t>(idx), cls) : nullptr;
}

page* span_alloc_new(heap* h, size_t cls, bool warm_only) noexcept {
  segment* seg = segment_new(h, warm_only);
  if (seg == nullptr) return nullptr;
  long idx = free_run(seg, page_slices(cls), true);  // its resident slices first
  return span_init(seg, idx > 0 ? static_cast<size_t>(idx) : header_slices, cls);
}

void span_free(heap* h, page* pg, bool may_release_segment) noexcept {
  // No block of the page is out, so none can be on its way back either.
  STRATA_ASSERT((flags_of(pg) & page_flag::in_use) && page_is_empty(pg));
  segment* seg = segment_of(pg);
  size_t idx = slice_index(seg, pg), n = pg->slice_count;
  page_scrub(pg);
  pg->flags.store(0, std::memory_order_relaxed);  // only a span's first slice has flags
  if (!page_map_ready())
    for (size_t k = 1; k < n; ++k) pg[k].slice_offset = 0;
  page_map_set(seg, idx, n, nullptr);
  pg->block_size = 0;
  pg->block_bound.store(0, std::memory_order_relaxed);
  pg->free = pg->local_free = nullptr;
  pg->owner_tid.store(0, std::memory_order_relaxed);
  pg->next = pg->prev = nullptr;
  bits_assign(seg->free_bits, idx, n, true);
  seg->used_slices -= static_cast<uint32_t>(n);
  STRATA_ASSERT_EXPENSIVE(segment_is_valid(seg));
  int64_t delay = purge_delay();
  if (delay == 0) {
    purge_free_dirty(seg);
  } else if (delay > 0 && seg->purge_due_ms == 0) {
    seg->purge_due_ms = os::now_ms() + delay;
    if (h->purge_due_ms == 0 || seg->purge_due_ms < h->purge_due_ms) h->purge_due_ms = seg->purge_due_ms;
  }
  // An empty segment leaves the heap at once (except the heap's last) for the segment cache,
  // where every thread's next segment comes from: its memory stays resident there until the
  // delay passes, so a segment that empties and fills again (E1 big band: ten blocks to a
  // segment) comes back warm, and memory one thread emptied serves another thread's next
  // segment.  Kept in the heap until its slices aged out, it served no other thread (under an
  // address-space limit, a new thread got ENOMEM while another heap held 8 empty segments).
  if (may_release_segment) segment_release_if_empty(h, seg);
}

bool segment_release_if_empty(heap* h, segment* seg) noexcept {
  if (seg->used_slices != 0 || is_heaps_last(h, seg)) return false;
  // A heap keeps one empty segment (besides its last) for its next wave of allocations: a round
  // trip through the cache for every segment that empties and fills again cost E1's big band
  // 7 %.  Any other goes to the cache at once.
  for (segment* other = h->segments; other; other = other->next) {
    if (other != seg && other->used_slices == 0) {
      segment_release(h, seg);
      return true;
    }
  }
  return false;
}

int64_t segments_purge(heap* h, bool force) noexcept {
  int64_t now = os::now_ms(), next_due = 0;
  note_purge_pass(now);
  for (segment* seg = h->segments; seg;) {
    segment* next = seg->next;
    // Forced, every free slice goes, due or not: with a delay of -1 none is ever due.
    if (force)
      purge_free_dirty(seg);
    else if (seg->purge_due_ms != 0 && seg->purge_due_ms <= now)
      purge_aged(seg, now, purge_delay());
    // Empty, and every slice aged out (nothing left to purge): the segment leaves the heap,
    // except the heap's last one.
    if (seg->used_slices == 0 && seg->purge_due_ms == 0 && !is_heaps_last(h, seg)) {
      segment_release(h, seg);
    } else if (seg->purge_due_ms && (next_due == 0 || seg->purge_due_ms < next_due)) {
      next_due = seg->purge_due_ms;
    }
    seg = next;
  }
  return next_due;
}

void segments_abandon(heap* h) noexcept {
  while (segment* seg = h->segments) {
    if (seg->used_slices == 0) {
      segment_release(h, seg);
      continue;
    }
    // The pages' owner words first, while the segment is still on h's list: a fork that caught
    // the thread after the unlink left the child a segment on no list whose pages still named
    // the dead thread, and glibc gives the child's new threads the dead threads' stacks (their
    // thread pointers): one of them freed such a page's block by free's fast path as its own,
    // into its heap's bins or lists (strata_heap_check: "bin page of another heap's segment").
    // Listed, the segment is the child's to abandon (heap_locks_release).  No other thread's
    // free ever matched the exiting thread's id: with the words 0 they take the same path.
    for_each_page(seg, [](page* pg) { pg->owner_tid.store(0, std::memory_order_release); });
    heap_unlink_segment(h, seg);
    seg->freed_abandoned.store(0, std::memory_order_relaxed);
    sweep_at_set(seg);
    seg->owner.store(nullptr, std::memory_order_release);
    lock_guard g(abandoned_lock);
    purge_schedule_unowned(seg);
    seg->prev = nullptr;
    seg->next = abandoned_list;
    if (abandoned_list) abandoned_list->prev = seg;
    abandoned_list = seg;
    seg->abandoned = true;
    abandoned_count.fetch_add(1, std::memory_order_relaxed);
  }
  h->purge_due_ms = 0;
}

void segment_repair_after_fork(segment* seg) noexcept {
  uint32_t used = 0;
  size_t end = secure ? slices_per_segment - 1 : slices_per_segment;  // the hardened build's guard slice stays
  for (size_t idx = header_slices; idx < end;) {
    page* pg = &seg->pages[idx];
    size_t n = pg->slice_count;
    if ((flags_of(pg) & page_flag::in_use) && n != 0 && idx + n <= end) {
      if (!page_map_ready())
        for (size_t k = 1; k < n; ++k) pg[k].slice_offset = static_cast<uint16_t>(k);
      page_map_set(seg, idx, n, pg);
      bits_assign(seg->free_bits, idx, n, false);
      used += static_cast<uint32_t>(n);
      idx += n;
      continue;
    }
    pg->flags.store(0, std::memory_order_relaxed);
    if (!page_map_ready()) pg->slice_offset = 0;
    page_map_set(seg, idx, 1, nullptr);
    bits_assign(seg->free_bits, idx, 1, true);
    ++idx;
  }
  seg->used_slices = used;
  STRATA_ASSERT_EXPENSIVE(segment_is_valid(seg));
}

namespace {
// Takes seg off the abandoned list (the caller holds its lock).
void abandoned_unlink(segment* seg) noexcept {
  if (seg->prev) seg->prev->next = seg->next;
  else abandoned_list = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  seg->next = seg->prev = nullptr;
  seg->abandoned = false;
  abandoned_count.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

segment* segment_take_abandoned() noexcept {
  lock_guard g(abandoned_lock);
  segment* seg = abandoned_list;
  if (seg != nullptr) abandoned_unlink(seg);
  return seg;
}

void segment_attach(heap* h, segment* seg) noexcept {
  seg->owner.store(h, std::memory_order_release);
  heap_link_segment(h, seg);
  heap_note_segment_due(h, seg);
  reclaimed_count.fetch_add(1, std::memory_order_relaxed);
}

int64_t segments_idle_due() noexcept { return idle_purge_due.load(std::memory_order_relaxed); }

void segments_purge_idle(int64_t now) noexcept {
  // Both lists at once, so that the next due time stored covers every unowned segment; a thread
  // holding either lock makes this pass wait for the next slow path.
  if (!abandoned_lock.try_lock()) return;
  if (!cache_lock.try_lock()) {
    abandoned_lock.unlock();
    return;
  }
  note_purge_pass(now);
  int64_t next = 0, delay = purge_delay();
  // As a heap's own pass (purge_aged): only slices free since the previous pass, and not
  // reused in between by a thread that adopted the segment, are purged.
  auto visit = [&](segment* seg) {
    if (seg->purge_due_ms == 0) return;
    if (seg->purge_due_ms <= now) purge_aged(seg, now, delay);
    if (seg->purge_due_ms != 0 && (next == 0 || seg->purge_due_ms < next)) next = seg->purge_due_ms;
  };
  for (segment* seg = abandoned_list; seg; seg = seg->next) visit(seg);
  // Cached segments whose memory is all purged now are only address space: beyond the
  // option's count, they are unmapped.
  segment* unmap = nullptr;
  for (segment** link = &cache_list; segment* seg = *link;) {
    visit(seg);
    if (seg->purge_due_ms == 0 && cache_count > cache_limit()) {
      *link = seg->next;
      --cache_count;
      seg->next = unmap;
      unmap = seg;
    } else {
      link = &seg->next;
    }
  }
  idle_purge_due.store(next, std::memory_order_relaxed);
  cache_lock.unlock();
  abandoned_lock.unlock();
  while (segment* seg = unmap) {
    unmap = seg->next;
    segment_unmap(seg);
  }
  // Cached huge mappings are unowned memory too; after the store above, so that a deadline
  // noted meanwhile by huge_free is found in the cache and noted again.
  if (int64_t huge_next = huge_cache_trim(false)) idle_due_note(huge_next);
}

bool segment_freed_into(segment* seg, size_t bytes) noexcept {
  // sweep_at, not used_slices: a sweep changes that under the list's lock, which a free does
  // not take.
  uint64_t freed = seg->freed_abandoned.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  return freed >= seg->sweep_at.load(std::memory_order_relaxed);
}

void segment_sweep(heap* h, segment* seg, void (*push)(void* arg), void* arg) noexcept {
  lock_guard g(abandoned_lock);
  bool abandoned = seg->abandoned;  // read before the push: seg may be gone after it unless listed
  push(arg);
  if (!abandoned) return;  // reclaimed meanwhile: its new owner collects
  seg->freed_abandoned.store(0, std::memory_order_relaxed);
  segment_collect_pages(h, seg, [](page*) {});
  sweep_at_set(seg);
  purge_schedule_unowned(seg);
}

void segment_cache_trim(size_t keep) noexcept {
  for (;;) {
    segment* seg;
    {
      lock_guard g(cache_lock);
      if (cache_count <= keep) return;
      seg = cache_list;
      cache_list = seg->next;
      --cache_count;
    }
    segment_unmap(seg);
  }
}

// ---- huge -----------------------------------------------------------------------------------
// A huge block has a mapping of its own, aligned like a segment: the header in slice 0, the block
// at `offset` (a slice in, or the alignment when that is larger).  A freed huge mapping waits a
// while in a small cache with its pages still resident, for the next huge request (a program
// replacing big buffers would otherwise map, fault in and unmap every one of them); a realloc
// moves a huge block's pages with mremap instead of copying them.  While cached, a mapping keeps
// its place in the segment map with kind huge_cached, so a second free of its block is reported
// as a double free.
namespace {

spin_lock huge_lock;
segment* huge_cache = nullptr;  // kind huge_cached, newest first, linked by next/prev
size_t huge_cache_count = 0, huge_cache_bytes = 0;
// At most huge_cache_max mappings, and no more bytes than an eighth of the live huge blocks or
// huge_cache_floor, whichever is more (each for 25 purge delays at most, huge_cache_ms).  With 8
// and 64 MiB, a thread that frees a batch of 16 buffers of 2-6 MiB and allocates 16 again (the
// bigcalloc shape) found most of them unmapped and faulted them in anew: 594 buffers a second
// and 896 k minor faults against tcmalloc's 4079 and 22 k; on 2 threads, whose faults also
// waited on the kernel's mapping lock for the other's munmap and mmap, 316 against 5150.  With
// 32 and 256 MiB: 3719 (42 k faults) and 2313, peak RSS 85 and 151 MiB (before 80 and 142,
// tcmalloc 85 and 145).  bigbuf, e1-big and churn did not move (docs/results/huge-cache-2core).
constexpr size_t huge_cache_max = 32;
constexpr size_t huge_cache_floor = size_t{256} << 20;  // bytes the cache may always hold
// A cached mapping serves a request of at least 1/huge_reuse_waste of its size whole; a smaller
// one gets it trimmed.  Trimming less keeps pages resident for the next, larger request (a
// program replacing 5-25 MiB buffers: with 2, 660 pages faulted in per replacement; with 4,
// about 200; with 8, about 50 over 2000 replacements: 1.67 s against 2.27 s with 4 and
// tcmalloc's 2.13 s, at 511 MB peak RSS against 497 MB and tcmalloc's 500 MB; docs/design.md).
constexpr size_t huge_reuse_waste = 8;
// The largest mapping a heap keeps for its thread (huge_free).  It goes to the shared cache at
// the heap's purge pass (run from a later malloc or free), its thread's exit or strata_collect
// on that thread: a thread that frees one and then only sleeps holds it until then.
constexpr size_t huge_spare_max = size_t{32} << 20;
// Huge allocations the thread made, for the pacing of their purge check (huge_alloc).
__thread uint32_t tl_huge_allocs;
// Starts of the last huge blocks unmapped: a later free of one is labelled a double free.
constexpr size_t huge_freed_slots = 16;
std::atomic<uintptr_t> huge_freed[huge_freed_slots];
std::atomic<unsigned> huge_freed_next{0};

inline size_t round_up(size_t x, size_t to) noexcept { return (x + to - 1) & ~(to - 1); }
inline size_t huge_offset(const segment* seg) noexcept {
  return static_cast<size_t>(seg->pages[0].start - reinterpret_cast<const uint8_t*>(seg));
}

// How long a freed huge mapping may wait for reuse; 0 when memory goes back at once.
int64_t huge_cache_ms() noexcept {
  // The option's delay, not purge_delay(): refaults of segment slices say nothing of these.
  int64_t delay = options::get(option::purge_delay);
  if (delay == 0) return 0;
  return delay < 0 ? INT64_MAX / 2 : 25 * delay;
}

// The mapping [seg, seg + bytes) holds one huge block at `offset` of `usable` bytes.
// Hardened build: the mapping's last OS page is a guard page after the block.
inline size_t huge_guard() noexcept { return secure ? os::page_size() : 0; }

void huge_set(segment* seg, size_t offset, size_t bytes) noexcept {
  seg->kind = segment_kind::huge;
  seg->mapped_size = bytes;
  seg->huge_size = bytes - offset - huge_guard();
  seg->pages[0].start = reinterpret_cast<uint8_t*>(seg) + offset;
  seg->lazy_from = seg->lazy_to = 0;
  seg->owner.store(nullptr, std::memory_order_relaxed);
}

void huge_unmap(segment* seg) noexcept {
  size_t total = seg->mapped_size;
  huge_freed[huge_freed_next.fetch_add(1, std::memory_order_relaxed) % huge_freed_slots].store(
      reinterpret_cast<uintptr_t>(seg->pages[0].start), std::memory_order_relaxed);
  map_mark(seg, total, false);
  live_segments.fetch_sub(1, std::memory_order_relaxed);
  os::commit_add(-static_cast<int64_t>(total));
  os::unmap(seg, total);
}

void huge_cache_unlink(segment* seg) noexcept {
  if (seg->prev) seg->prev->next = seg->next;
  else huge_cache = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  seg->next = seg->prev = nullptr;
  --huge_cache_count;
  huge_cache_bytes -= seg->mapped_size;
}

// Unlinks the cached mappings that waited too long (all of them when `all`) onto `out`; the
// caller unmaps them outside the lock.
segment* huge_cache_expire_locked(int64_t now, bool all) noexcept {
  segment* out = nullptr;
  for (segment* seg = huge_cache; seg;) {
    segment* next = seg->next;
    if (all || seg->purge_due_ms <= now) {
      huge_cache_unlink(seg);
      seg->next = out;
      out = seg;
    }
    seg = next;
  }
  return out;
}

void huge_unmap_list(segment* seg) noexcept {
  while (seg) {
    segment* next = seg->next;
    huge_unmap(seg);
    seg = next;
  }
}

// Hardened build: a huge mapping's two guard pages (its header's tail, its last page) split it
// into several kernel mappings, which mremap cannot move or resize; huge_resize lifts them (the
// pieces merge back into one) and puts them back at the new size: 4 mprotect calls instead of
// copying the block or faulting a new mapping in (bigbuf: docs/security.md).  False when the
// kernel refused one.
bool huge_guards(segment* seg, size_t bytes, bool on) noexcept {
  bool ok = true;
  if constexpr (secure) {
    size_t ps = os::page_size();
    for (uint8_t* guard : {header_guard(seg), reinterpret_cast<uint8_t*>(seg) + bytes - ps})
      ok &= on ? os::protect_none(guard, ps) : os::protect_rw(guard, ps);
  }
  return ok;
}

// Moves or resizes a huge mapping to `bytes`, keeping its pages; nullptr when out of memory.
segment* huge_resize(segment* seg, size_t bytes) noexcept {
  size_t old = seg->mapped_size;
  if (bytes == old) return seg;
  size_t align = huge_offset(seg) > segment_size ? huge_offset(seg) : segment_size;
  if (!huge_guards(seg, old, false)) {
    // A guard left in place moves with the pages: the old last page, inside the grown block,
    // would fault at the program's first touch (a lift the kernel refused: out of memory).
    huge_guards(seg, old, true);
    return nullptr;
  }
  // The old range's marks go before the kernel gives any of it back (a move, or a shrink's
  // tail), as huge_unmap's do: cleared after the remap, they could clear those of a mapping
  // another thread got in that range meanwhile, whose live block strata then no longer knew
  // (the shadow stress test, 4 threads, in CI: its usable size read 0 and its free was reported
  // as a pointer strata did not allocate).
  map_mark(seg, old, false);
  void* moved = os::remap_aligned(seg, old, bytes, align);
  if (moved == nullptr) {
    map_mark(seg, old, true);
    huge_guards(seg, old, true);
    return nullptr;
  }
  auto* to = static_cast<segment*>(moved);
  huge_guards(to, bytes, true);
  map_mark(to, bytes, true);
  os::commit_add(static_cast<int64_t>(bytes) - static_cast<int64_t>(old));
  to->pages[0].start = reinterpret_cast<uint8_t*>(to) + (to->pages[0].start - reinterpret_cast<uint8_t*>(seg));
  to->mapped_size = bytes;
  to->huge_size = bytes - huge_offset(to) - huge_guard();
  return to;
}

// Whether seg has the header-and-alignment room of a block at `offset` (the colour may differ:
// huge_alloc sets it anew).
inline bool huge_same_room(const segment* seg, size_t offset) noexcept {
  return (huge_offset(seg) & ~(slice_size - 1)) == (offset & ~(slice_size - 1));
}

// Whether seg serves a block at `offset` needing `bytes` of mapping as it is: the same room, at
// least `bytes`, and not over huge_reuse_waste times them.
inline bool huge_fits(const segment* seg, size_t offset, size_t bytes) noexcept {
  return huge_same_room(seg, offset) && seg->mapped_size >= bytes && seg->mapped_size / huge_reuse_waste <= bytes;
}

void huge_cache_put(segment* seg) noexcept;  // below: a refused growth puts its mapping back

// A cached mapping for a block at `offset` needing `bytes` of mapping: the best fit, else the
// largest one grown (its resident pages are reused, only the rest is faulted in).
// *resident: the bytes of the returned mapping that may hold old data (the rest, grown by
// mremap, is fresh from the OS and reads as zero).
segment* huge_cache_take(size_t offset, size_t bytes, size_t* resident) noexcept {
  segment* pick = nullptr;
  segment* expired;
  {
    lock_guard g(huge_lock);
    expired = huge_cache_expire_locked(os::now_ms(), false);
    for (segment* seg = huge_cache; seg; seg = seg->next) {
      if (!huge_same_room(seg, offset)) continue;
      if (pick == nullptr) {
        pick = seg;
      } else if (seg->mapped_size >= bytes) {
        if (pick->mapped_size < bytes || seg->mapped_size < pick->mapped_size) pick = seg;
      } else if (pick->mapped_size < bytes && seg->mapped_size > pick->mapped_size) {
        pick = seg;
      }
    }
    if (pick) huge_cache_unlink(pick);
  }
  huge_unmap_list(expired);
  if (pick == nullptr) return nullptr;
  *resident = pick->mapped_size < bytes ? pick->mapped_size : bytes;
  // Much too large (over huge_reuse_waste times the need): give the tail back.  Too small: grow.
  if (!huge_fits(pick, offset, bytes)) {
    if (segment* resized = huge_resize(pick, bytes)) return resized;
    if (pick->mapped_size >= bytes) return pick;  // a trim refused: it serves, untrimmed
    // A growth refused (a request no memory backs, or no address space): the mapping goes back
    // to the cache as it was, not unmapped with its resident pages for the next request.
    huge_cache_put(pick);
    return nullptr;
  }
  return pick;
}

// seg, a huge mapping no block uses, into the shared cache, or back to the OS.
void huge_cache_put(segment* seg) noexcept {
  int64_t wait = huge_cache_ms();
  if (wait > 0) {
    int64_t now = os::now_ms();
    uint64_t live_bytes = huge_live_bytes(now);
    segment* expired;
    bool cached = false;
    {
      lock_guard g(huge_lock);
      expired = huge_cache_expire_locked(now, false);
      // The cache holds a few mappings, and no more bytes than an eighth of the live huge
      // blocks (or a floor): a cached mapping is resident memory nobody uses.
      size_t limit = live_bytes / 8;
      if (limit < huge_cache_floor) limit = huge_cache_floor;
      if (seg->mapped_size <= limit) {
        while (huge_cache && (huge_cache_count >= huge_cache_max || huge_cache_bytes + seg->mapped_size > limit)) {
          segment* last = huge_cache;
          while (last->next) last = last->next;  // the oldest
          huge_cache_unlink(last);
          last->next = expired;
          expired = last;
        }
        seg->kind = segment_kind::huge_cached;
        seg->purge_due_ms = now + wait;
        seg->prev = nullptr;
        seg->next = huge_cache;
        if (huge_cache) huge_cache->prev = seg;
        huge_cache = seg;
        ++huge_cache_count;
        huge_cache_bytes += seg->mapped_size;
        cached = true;
      }
    }
    huge_unmap_list(expired);
    if (cached) {
      idle_due_note(now + wait);  // the idle pass expires it even if no huge call comes
      return;
    }
  }
  huge_unmap(seg);
}

}  // namespace

void* huge_alloc(size_t size, size_t alignment, size_t* dirty) noexcept {
  size_t align = alignment < min_block ? min_block : alignment;
  size_t offset = round_up(header_slices * slice_size, align);  // past the header
  size_t ps = os::page_size();
  if (size == 0) size = min_block;  // the block must lie inside its mapping
  if (offset < header_slices * slice_size || size > SIZE_MAX / 2 - offset) return errno = ENOMEM, nullptr;
  if (align <= 64) offset += next_colour();  // as a one-block page's block (size_class.h)
  size_t total = round_up(offset + size, ps) + huge_guard();
  size_t resident = 0;
  segment* seg = nullptr;
  if (segment* spare = tl_heap->huge_spare) {  // the thread's own last one, if it fits
    tl_heap->huge_spare = nullptr;
    if (huge_fits(spare, offset, total)) {
      seg = spare;
      resident = total;
    } else {
      huge_cache_put(spare);  // where huge_cache_take may grow or trim it
    }
  }
  if (seg == nullptr && huge_cache_ms() > 0) seg = huge_cache_take(offset, total, &resident);
  if (seg == nullptr) {
    size_t map_align = align > segment_size ? align : segment_size;
    // A request more than memory and swap together (an absurd size, a length that underflowed)
    // cannot be backed: it keeps the caches and the working reserve.  Before, one malloc(64 TiB)
    // that failed gave back the thread's spare, the huge cache and the segment cache anyway.
    bool backable = os::memory_could_back(total);
    if (backable) purge_before_growth(tl_heap, total);
    seg = static_cast<segment*>(os::map_aligned(total, map_align, true));
    // Out of address space or memory: what the caches hold goes back, and the mapping is tried
    // again.
    if (seg == nullptr && backable) {
      segment_cache_trim(0);
      huge_cache_trim(true);
      seg = static_cast<segment*>(os::map_aligned(total, map_align, true));
    }
    if (seg == nullptr) return errno = ENOMEM, nullptr;
    numa_place(seg, total);
    // Opt-in: a big buffer is usually written whole, so 2 MiB pages cost little memory and save
    // 511 of every 512 faults, but where the kernel compacts memory on such a fault (THP defrag
    // "madvise") a fault can stall: bigbuf took 0.27-1.11 s with them, 0.51-0.54 s without.
    // The whole mapping (header too): mremap needs it to stay one VMA.
    if (options::get(option::huge_pages)) os::advise_huge_pages(seg, total);
    os::commit_add(static_cast<int64_t>(total));
    live_segments.fetch_add(1, std::memory_order_relaxed);
    huge_set(seg, offset, total);
    // The guards after the header's first write: the kernel then gives the pieces they split the
    // mapping into one reverse-map record, so that lifting them merges the pieces again and
    // mremap can move the whole (protected before any write, each piece got its own, and
    // huge_resize's mremap failed with EFAULT).
    huge_guards(seg, total, true);
    map_mark(seg, total, true);
  } else {
    huge_set(seg, offset, seg->mapped_size);
  }
  huge_count<&huge_counts::allocs, &huge_counts::bytes_in>(1, seg->huge_size);
  if (dirty) *dirty = resident > offset ? resident - offset : 0;
  // A slow path like malloc_slow's: a thread that goes on with huge blocks alone (served from its
  // spare, which takes no other path) still gives back what it and exited threads left free, and
  // the huge cache expires.  Without this, 226 MB of small blocks a thread had freed stayed
  // resident for as long as it allocated only 4 MiB buffers.  Every 16th call, as the slow path
  // paces its own: at every call the check's time-stamp read (pending passes are the rule here:
  // the huge cache schedules one) cost E1's big band, 15 M huge blocks a second from the spare,
  // 0.78x its speed.
  if ((++tl_huge_allocs & 15) == 0) heap_purge_if_due(tl_heap);
  return seg->pages[0].start;
}

namespace {
// Whether the fresh pages of a huge calloc (those a reused mapping does not bring) are faulted in
// at once (os::populate_write) or left to read as the kernel's zero page.  Left, a program that
// reads a page before writing it (an accumulator, a check that it is still zero) takes two faults
// on it, the second a copy-on-write that flushes the page from every CPU the process runs on:
// bigcalloc on 2 threads (buffers of 2-6 MiB, each page read, then written) spent 41 % of its
// time in those flushes' interprocessor interrupts and ran at 0.6x tcmalloc's speed (tcmalloc
// writes zeros over every calloc'd block).  Faulted in at once, a program that uses a few pages
// of a big zeroed buffer (a sparse table) would have all of it resident.  So strata looks at how
// many of the pages it left lazy the program touched (os::resident_sample): at each free of such
// a block; at the thread's next huge calloc, in the block it left lazy last if that is in use
// already (an unused one says nothing yet); and calloc_ring lazy ranges later, used or not (a
// program keeping sparse tables frees none of them).  While recent blocks had three quarters or
// more touched, the fresh pages are faulted in, all but a probe of the last two pages, left lazy
// to be looked at in turn (and none of a block over calloc_populate_max).  Sparse evidence ends a
// dense run at once and counts double: a wrong fault-in costs memory, a wrong lazy page one more
// fault (a program that callocs a batch and fills it after is taken for sparse: faults, no memory).
// The probe is two pages, not the last 16 (an eighth at most) as before, and the next calloc looks
// at its own thread's last range, not the process's: on 2 threads the other thread's range was
// often still being filled (no evidence: 5 blocks left lazy at the start instead of 2), and each
// probe page read before it is written is a copy-on-write whose flush interrupts the other CPU.
// bigcalloc at 800 buffers, 10 rounds, with a one-page probe: 1.11x [1.07-1.16] on 2 threads,
// 0.99x [0.97-1.01] on 1, the same peak RSS (docs/results/probes-s51-2core).  Two pages, not
// one: a program that writes the last bytes of a sparse table (a sentinel, a trailer) touches the
// last page only, which one probe page took for use.
std::atomic<int> calloc_dense{0};  // > 0: fault fresh pages in; within +-calloc_dense_max
constexpr int calloc_dense_max = 4;
constexpr size_t calloc_probe_max = 2;  // pages
constexpr size_t calloc_purge_min = size_t{1} << 20;  // old pages given back rather than written
// Fresh pages faulted in at most, per calloc: what a wrong guess can cost before the look
// calloc_ring ranges later says so.  A block much bigger than those the evidence came from is
// likelier something else (a sparse table allocated once and kept).
constexpr size_t calloc_populate_max = size_t{64} << 20;
// The last lazy range the thread's huge calloc left: its first page number << 28 | its pages (0:
// none).  A range, not its segment: the block may be freed and its mapping unmapped meanwhile,
// and mincore of an unmapped range only fails.  A free on another thread cannot forget it: the
// range may then hold another block, whose use is evidence all the same (only use is counted).
__thread uint64_t calloc_last_lazy;
constexpr unsigned calloc_pages_bits = 28;
// The last calloc_ring lazy ranges, packed the same way; the one a new range replaces is looked at.
constexpr unsigned calloc_ring = 4;
std::atomic<uint64_t> calloc_recent[calloc_ring];
std::atomic<unsigned> calloc_recent_next{0};

void calloc_evidence(bool dense) noexcept {
  int v = calloc_dense.load(std::memory_order_relaxed);
  v = dense ? std::min(v + 1, calloc_dense_max) : std::max(std::min(v, 0) - 2, -calloc_dense_max);
  calloc_dense.store(v, std::memory_order_relaxed);  // two threads at once: one update is lost
}

inline bool mostly_touched(const os::residency& r) noexcept { return r.resident * 4 >= r.sampled * 3; }

// A look at pages left lazy whose block has had its chance to be used: evidence either way (none
// where mincore refused, the range unmapped).
void calloc_judge(const os::residency& r) noexcept {
  if (r.sampled != 0) calloc_evidence(mostly_touched(r));
}

inline os::residency residency_of(uint64_t packed) noexcept {
  uintptr_t ps = os::page_size();
  return os::resident_sample(reinterpret_cast<void*>((packed >> calloc_pages_bits) * ps),
                             (packed & ((uint64_t{1} << calloc_pages_bits) - 1)) * ps);
}

inline uint64_t pack_range(uint8_t* from, uint8_t* to) noexcept {
  size_t ps = os::page_size(), pages = static_cast<size_t>(to - from) / ps;
  if (pages >= (uint64_t{1} << calloc_pages_bits)) pages = (uint64_t{1} << calloc_pages_bits) - 1;  // its start
  return pages == 0 ? 0 : reinterpret_cast<uintptr_t>(from) / ps << calloc_pages_bits | pages;
}

// [from, to) left to read as the zero page: looked at by the next huge calloc, and when
// calloc_ring more ranges have been left.
void calloc_note_lazy(uint8_t* from, uint8_t* to) noexcept {
  uint64_t packed = pack_range(from, to);
  if (packed == 0) return;
  calloc_last_lazy = packed;
  unsigned slot = calloc_recent_next.fetch_add(1, std::memory_order_relaxed) % calloc_ring;
  if (uint64_t old = calloc_recent[slot].exchange(packed, std::memory_order_relaxed))
    calloc_judge(residency_of(old));
}

// seg's lazy range is no longer its block's (freed, or moved by realloc): out of the ranges still
// to be looked at, whose pages may serve another block next.
void huge_lazy_forget(segment* seg) noexcept {
  auto* base = reinterpret_cast<uint8_t*>(seg);
  if (uint64_t packed = pack_range(base + seg->lazy_from, base + seg->lazy_to)) {
    if (calloc_last_lazy == packed) calloc_last_lazy = 0;
    for (auto& slot : calloc_recent) {
      uint64_t expect = packed;
      slot.compare_exchange_strong(expect, 0, std::memory_order_relaxed);
    }
  }
  seg->lazy_from = seg->lazy_to = 0;
}

// seg's lazy range is given back with its block: what the program touched of it.
void huge_calloc_observe(segment* seg) noexcept {
  auto* base = reinterpret_cast<uint8_t*>(seg);
  calloc_judge(os::resident_sample(base + seg->lazy_from, seg->lazy_to - seg->lazy_from));
  huge_lazy_forget(seg);
}

inline uint8_t* page_up(uint8_t* a) noexcept {
  return reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(a), os::page_size()));
}
inline uint8_t* page_down(uint8_t* a) noexcept {
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(a) & ~(os::page_size() - 1));
}

// Whether to fault a calloc's fresh pages in, after looking at the range the thread's last one
// left lazy: dense evidence if it is in use already (an unused one says nothing yet).
bool calloc_dense_now() noexcept {
  if (uint64_t last = calloc_last_lazy) {
    calloc_last_lazy = 0;
    os::residency r = residency_of(last);
    if (r.sampled != 0 && mostly_touched(r)) calloc_evidence(true);
  }
  return calloc_dense.load(std::memory_order_relaxed) > 0;
}

// Faults in the fresh whole pages [from, to) but the probe at their end, an eighth of them and
// calloc_probe_max at most; returns where the pages left lazy begin.
uint8_t* calloc_populate(uint8_t* from, uint8_t* to) noexcept {
  size_t ps = os::page_size(), probe = std::min(static_cast<size_t>(to - from) / ps / 8, calloc_probe_max) * ps;
  return os::populate_write(from, static_cast<size_t>(to - from) - probe) ? to - probe : from;
}

// A calloc's fresh whole pages [from, to) (from < to): faulted in but the probe when `dense`
// (none over calloc_populate_max), the rest left lazy and noted to be looked at; returns where
// the lazy pages begin (to: none).
uint8_t* calloc_fresh(uint8_t* from, uint8_t* to, bool dense) noexcept {
  if (dense && static_cast<size_t>(to - from) <= calloc_populate_max) from = calloc_populate(from, to);
  if (to > from) calloc_note_lazy(from, to);
  return from;
}
}  // namespace

void calloc_clean_block(void* p, size_t size) noexcept {
  auto* b = static_cast<uint8_t*>(p);
  uint8_t* from = page_up(b);
  uint8_t* to = page_down(b + size);
  if (to > from) calloc_fresh(from, to, calloc_dense_now());
}

void* huge_calloc(size_t size) noexcept {
  size_t dirty = 0;
  auto* p = static_cast<uint8_t*>(huge_alloc(size, 0, &dirty));
  if (p == nullptr) return nullptr;
  if (dirty > size) dirty = size;
  bool dense = calloc_dense_now();
  // [from, to): the whole pages that read as zero without being written.
  uint8_t* from = page_up(p + dirty);
  uint8_t* to = page_down(p + size);
  if (dirty != 0) {
    // A reused mapping's old pages: written with zeros, or, while the program uses few pages of
    // what it callocs, given back (they read as zero again), or the zeros would fault in every
    // page the last block left untouched (a program keeping 8 sparse tables of 8-40 MiB, 10
    // pages of each used: 185 MB peak RSS and 258 k faults, glibc 49 MB and 15 k).
    uint8_t* a = page_up(p);
    uint8_t* b = page_down(p + dirty);
    if (!dense && b > a && static_cast<size_t>(b - a) >= calloc_purge_min) {
      memset(p, 0, static_cast<size_t>(a - p));
      memset(b, 0, static_cast<size_t>(p + dirty - b));
      if (os::purge(a, static_cast<size_t>(b - a))) {
        if (b == from || b >= to) from = a;
      } else {
        memset(a, 0, static_cast<size_t>(b - a));  // locked pages: the kernel kept their bytes
      }
    } else {
      memset(p, 0, dirty);
    }
  }
  if (to <= from) return p;
  from = calloc_fresh(from, to, dense);
  if (to <= from) return p;
  segment* seg = segment_of(p);  // no alignment asked: the block starts in its mapping's first chunk
  seg->lazy_from = static_cast<size_t>(from - reinterpret_cast<uint8_t*>(seg));
  seg->lazy_to = static_cast<size_t>(to - reinterpret_cast<uint8_t*>(seg));
  return p;
}

void* huge_realloc(segment* seg, size_t size) noexcept {
  if (seg->lazy_to != 0) huge_lazy_forget(seg);  // its pages are the program's now, whatever it does next
  size_t offset = huge_offset(seg), ps = os::page_size();
  if (size > SIZE_MAX / 4 - offset) return errno = ENOMEM, nullptr;
  size_t need = round_up(offset + (size ? size : min_block), ps) + huge_guard();
  size_t old_usable = seg->huge_size;
  size_t bytes = need;
  if (need > seg->mapped_size) {
    // Growth leaves headroom (half again), so a buffer grown step by step moves O(log n) times.
    size_t roomy = round_up(offset + old_usable + old_usable / 2, ps) + huge_guard();
    if (roomy > bytes) bytes = roomy;
  } else if (need >= seg->mapped_size / 2) {
    return seg->pages[0].start;  // fits without wasting half
  }
  segment* to = huge_resize(seg, bytes);
  if (to == nullptr && bytes != need) to = huge_resize(seg, bytes = need);
  // A shrink the kernel refused (mremap out of kernel mappings) leaves a block that still fits:
  // glibc's realloc never fails a shrink, and programs write p = realloc(p, smaller) unchecked.
  if (to == nullptr) {
    if (need > seg->mapped_size) return errno = ENOMEM, nullptr;
    return seg->pages[0].start;
  }
  huge_count<&huge_counts::bytes_in, &huge_counts::bytes_out>(to->huge_size, old_usable);
  return to->pages[0].start;
}

void huge_free(segment* seg) noexcept {
  if (seg->lazy_to != 0) huge_calloc_observe(seg);
  huge_count<&huge_counts::frees, &huge_counts::bytes_out>(1, seg->huge_size);
  // The thread keeps it for its next huge request, which then takes no lock (E1's big band on
  // 2 threads spent half its time waiting for huge_lock); the one it kept before goes to the
  // shared cache.
  heap* h = tl_heap;
  if (h != &empty_heap && seg->mapped_size <= huge_spare_max && huge_cache_ms() > 0) {
    seg->kind = segment_kind::huge_cached;  // a second free of its block is still reported
    std::swap(seg, h->huge_spare);
    heap_schedule_purge(h);  // whose pass gives it to the shared cache, if no request took it
    if (seg == nullptr) return;
  }
  huge_cache_put(seg);
}

void huge_spare_release(heap* h) noexcept {
  if (segment* seg = h->huge_spare) {
    h->huge_spare = nullptr;
    huge_cache_put(seg);
  }
}

int64_t huge_cache_trim(bool all) noexcept {
  segment* expired;
  int64_t next = 0;
  {
    lock_guard g(huge_lock);
    expired = huge_cache_expire_locked(os::now_ms(), all);
    for (segment* seg = huge_cache; seg; seg = seg->next)
      if (next == 0 || seg->purge_due_ms < next) next = seg->purge_due_ms;
  }
  huge_unmap_list(expired);
  return next;
}

bool huge_was_freed(const void* p) noexcept {
  auto v = reinterpret_cast<uintptr_t>(p);
  for (auto& slot : huge_freed)
    if (slot.load(std::memory_order_relaxed) == v) return true;
  return false;
}

segment* huge_segment_containing(const void* p) noexcept {
  uintptr_t chunk = reinterpret_cast<uintptr_t>(p) >> segment_shift;
  if (chunk >= map_chunks) return nullptr;
  auto has = [](const std::atomic<uint64_t>* bits, uintptr_t c) {
    return (bits[c / 64].load(std::memory_order_acquire) >> (c % 64)) & 1;
  };
  while (chunk > 0 && has(g_map.continuation, chunk)) --chunk;
  if (!has(g_map.start, chunk)) return nullptr;
  auto* seg = reinterpret_cast<segment*>(chunk << segment_shift);
  if (seg->kind == segment_kind::normal) return nullptr;
  if (reinterpret_cast<uintptr_t>(p) >= reinterpret_cast<uintptr_t>(seg) + seg->mapped_size) return nullptr;
  return seg;
}

segment_totals segment_stats() noexcept {
  segment_totals t = huge_totals();
  t.segments = live_segments.load(std::memory_order_relaxed);
  t.abandoned = abandoned_count.load(std::memory_order_relaxed);
  t.reclaimed = reclaimed_count.load(std::memory_order_relaxed);
  return t;
}

void segment_locks_acquire() noexcept {
  abandoned_lock.lock();
  cache_lock.lock();
  huge_lock.lock();
}

void segment_locks_release(bool in_child) noexcept {
  if (in_child) {
    abandoned_lock.reset();
    cache_lock.reset();
    huge_lock.reset();
  } else {
    huge_lock.unlock();
    cache_lock.unlock();
    abandoned_lock.unlock();
  }
}

}  // namespace strata::detail
