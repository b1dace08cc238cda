// strata_resource: thread-and-stream-private heaps of size-classed blocks over a page heap.
//
// allocate(bytes, S)                          fast path: no shared lock
//   heap = heap_for(S)          thread-local cache -> this thread's heap for S
//   heap lock (uncontended unless a steal is in progress); pop the class's free stack; return
//   allocate_slow (noinline): cheapest first, and nothing that orders S after another stream
//   while the upstream still gives memory
//     1. page heap (global lock), a range no pending event guards: a slab cut into blocks, or
//        one large block
//     2. steal half a free stack from another heap on stream S (no event needed); then, for a
//        small class, a batch of spilled blocks whose event has completed (see deallocate)
//     3. take back what idle heaps hold (their stream has finished all its work: no wait),
//        then a page-heap range that needs no wait
//     3'. grow the page heap from the upstream; the new chunk has never been used
//         (with wait_before_growth, a guarded range first, as in step 5: pool's memory, pool's
//         serialised streams)
//   only once maximum_size or the upstream refuses growth (under_pressure):
//     4. idle heaps again (3)
//     5. page heap, a range still guarded: S waits on the guards' events
//     6. steal half a free stack from a heap on another stream: S waits on an event recorded
//        on the victim's stream (which covers all the victim's work queued so far)
//     7. defragment: synchronise, flush cached large blocks and empty slabs to the page heap
//     8. wait up to pressure_wait for other threads to free memory, retrying 4-7
//     9. out_of_memory_error (free bytes and fragmentation in its message)
//   Steps 5 and 6 used to come before growth.  A stream queues far ahead of its host thread,
//   so one such wait can stall S behind many of another stream's kernels; at 16 threads they
//   chained every stream behind the others (E2, docs/gpu.md).  Growing first reserves about
//   what the driver's own stream-ordered pool (async_resource) does; maximum_size caps it.
//
// deallocate(p, S)                            fast path: no shared lock
//   push on this thread's heap for S (stream order makes it safe for S at once); a large block
//   beyond the heap's cache budget (heap_budget) goes back to the page heap guarded by an
//   event on S, and past release_threshold wholly free, unguarded chunks go back upstream.
//   A small class's free stack grown past spill_at blocks spills its older half behind an
//   event on S, for other heaps' misses (a consumer stream never idle kept them all before).
//
// A destroyed stream's heap keeps its blocks (the stream's last work may still use them) for the
// next defragment, which synchronises the device; so does one whose handle the driver gave to a
// newer stream (stream_id differs): that stream gets a heap of its own.  Once such heaps cache a
// growth step's worth, the page heap defragments instead of growing, and the retired heaps it
// empties are dropped: a stream per task otherwise kept a slab and a heap per task (device memory
// until the device was full, host memory for good, and a longer walk at every steal).
//
// Lock order: page heap, then heaps.  The fast path holds one heap lock and takes no other;
// the slow path never holds a heap lock while taking the page heap's or another heap's.
#include <strata/gpu/strata_resource.hpp>

#include "gpu/detail/chunk_set.hpp"
#include "gpu/detail/event_guard.hpp"
#include "gpu/detail/free_list.hpp"
#include "gpu/detail/overaligned.hpp"
#include "gpu/detail/stream_cache.hpp"
#include "gpu/detail/timed_mutex.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

namespace strata::gpu {

using detail::free_list;
using detail::round_up;

namespace {

// Size classes: 256 B steps to 1 KiB, four per power of two to 64 KiB (the slab classes), then
// large_per_octave per power of two up to 64 MiB.  Large blocks are single page-heap ranges, so
// their rounding is memory the device loses while they live: at four per octave it was about
// 9 % of E2's large bytes, and under a device cap of 1.1 x the live bound that was the
// difference between finishing and out of memory.  Eight per octave (about 4 %) finishes there.
// Finer classes cost per-heap cache hits: eight cost 15-25 ns a call at 1-4 threads and about
// 0.9 us at 16; sixteen cost twice that at 16 threads (docs/results/e2-live-sim).
constexpr std::size_t max_class_size = std::size_t{64} << 20;
constexpr unsigned large_per_octave = 8;
constexpr unsigned first_large = 4 + 4 * (16 - 10);  // the first class above 64 KiB
constexpr unsigned class_count = first_large + large_per_octave * (26 - 16);

constexpr unsigned class_of(std::size_t size) noexcept {  // 1 <= size <= max_class_size
  if (size <= 1024) return static_cast<unsigned>((size - 1) / 256);
  const unsigned k = static_cast<unsigned>(std::bit_width(size - 1)) - 1;  // 2^k < size <= 2^(k+1)
  const std::size_t base = std::size_t{1} << k;
  if (k < 16) return 4 + (k - 10) * 4 + static_cast<unsigned>((size - 1 - base) / (base / 4));
  return first_large + (k - 16) * large_per_octave +
         static_cast<unsigned>((size - 1 - base) / (base / large_per_octave));
}

constexpr std::size_t class_size(unsigned c) noexcept {
  if (c < 4) return std::size_t{256} * (c + 1);
  if (c < first_large) {
    const std::size_t base = std::size_t{1} << (10 + (c - 4) / 4);
    return base + (base / 4) * ((c - 4) % 4 + 1);
  }
  const std::size_t base = std::size_t{1} << (16 + (c - first_large) / large_per_octave);
  return base + (base / large_per_octave) * ((c - first_large) % large_per_octave + 1);
}

static_assert(class_of(256) == 0 && class_of(1024) == 3 && class_size(3) == 1024);
static_assert(class_size(class_of(1025)) == 1280 && class_size(class_of(2048)) == 2048);
static_assert(class_size(class_of(2049)) == 2560 && class_of(max_class_size) == class_count - 1);
static_assert(class_size(first_large - 1) == (std::size_t{64} << 10));
static_assert(class_of(std::size_t{64} << 10) == first_large - 1 && class_of((std::size_t{64} << 10) + 1) == first_large);
static_assert(class_size(first_large) == (std::size_t{64} << 10) + (std::size_t{64} << 10) / large_per_octave);
static_assert(class_size(class_count - 1) == max_class_size);

std::atomic<std::uint64_t> next_strata_resource_id{1};

// Page-heap ranges a miss inspects for one it can take without waiting.  With many streams the
// smallest fits are mostly other streams' still-guarded ranges; looking at only 32 made a miss
// grow while the stream's own freed ranges sat further up (E2 churn at 16 threads: +3.4 GiB
// reserved for 50 MiB live).
constexpr int ready_scan = 256;

struct heap {
  heap(stream_view s, std::uint64_t id) : stream(s), stream_id(id) {}
  detail::timed_mutex<detail::spin_lock> lock;
  stream_view stream;
  const std::uint64_t stream_id;  // device_backend::stream_id of the stream it was made for
  std::array<std::vector<std::uintptr_t>, class_count> bins;
  std::size_t cached_large = 0;  // bytes cached in classes above the small limit
  std::int64_t allocated = 0;    // handed out minus returned through this heap
  std::uint64_t changes = 0;     // bins changed (under `lock`): reclaim_idle's test that none did
};

struct heap_key {
  std::thread::id thread;
  std::uintptr_t stream;
  bool operator==(const heap_key&) const = default;
};
struct heap_key_hash {
  std::size_t operator()(const heap_key& k) const noexcept {
    return std::hash<std::thread::id>{}(k.thread) * 31 + std::hash<std::uintptr_t>{}(k.stream);
  }
};

}  // namespace

struct strata_resource::impl {
  impl(device_memory_resource& up, strata_options o, device_backend& b)
      : options(o), backend(b), events(b), chunks(up), pages(chunks.boundaries()),
        small_limit(std::min(o.slab_size / 4, std::size_t{64} << 10)) {}

  const strata_options options;
  device_backend& backend;
  const std::uint64_t id = next_strata_resource_id.fetch_add(1);
  detail::event_pool events;  // first: outlives every guard below
  detail::overaligned_table overaligned;

  // page heap
  mutable detail::timed_mutex<> page_mutex;
  detail::chunk_set chunks;
  free_list pages;
  std::map<std::uintptr_t, unsigned> slabs;  // slab start -> class (length: slab_bytes(class))
  std::atomic<std::int64_t> huge_allocated{0};
  const std::size_t small_limit;
  // Whether release_threshold can ever be passed: chunks freed into are marked only then.
  const bool releases = options.release_threshold != std::numeric_limits<std::size_t>::max();

  // heaps
  mutable std::mutex heaps_mutex;
  std::unordered_map<heap_key, std::unique_ptr<heap>, heap_key_hash> heaps;
  std::vector<std::unique_ptr<heap>> retired;  // destroyed streams' heaps, handle recycled
  std::vector<heap*> heap_list;                // every heap, retired ones included
  std::size_t retired_bytes = 0;               // what they cached when retired, since the last drop
  std::int64_t dropped_allocated = 0;          // the `allocated` and lock wait of retired heaps dropped
  std::uint64_t dropped_wait_ns = 0;
  // Steals walking a copy of heap_list (taken under heaps_mutex): no heap is dropped meanwhile.
  std::atomic<int> steals_in_flight{0};
  // Bytes of large blocks one heap may cache: heap_cache_bytes, less once the heaps together
  // would pass cache_bytes.  Set when a heap is added; the fast path only loads it.
  std::atomic<std::size_t> heap_budget{options.heap_cache_bytes};

  // Spilled small blocks.  A heap caches every small block freed through it, and gave them back
  // only when its stream was idle or growth was refused: a heap that frees what another
  // allocates (a consumer stream, never idle) kept every block ever freed on it (one 4 KiB
  // block live at a time: 224 MiB reserved after 50 000).  A free stack of a small class grown
  // past spill_at[c] blocks moves its older half here behind an event on its stream, and a miss
  // takes a batch whose event has completed (no wait) before it grows.  spill_mutex is taken
  // last: under a heap's lock or the page heap's, never the other way round.
  struct spilled {
    std::vector<std::uintptr_t> blocks;
    detail::guard_ptr guard;
  };
  std::mutex spill_mutex;
  std::array<std::deque<spilled>, class_count> spills;  // oldest first
  std::size_t spilled_bytes = 0;                        // under spill_mutex
  const std::array<std::size_t, class_count> spill_at = [this] {
    std::array<std::size_t, class_count> a{};
    for (unsigned c = 0; c < class_count; ++c)
      a[c] = std::max<std::size_t>(4 * slab_bytes(c), std::size_t{1} << 20) / class_size(c);
    return a;
  }();

  bool is_small(unsigned c) const noexcept { return class_size(c) <= small_limit; }

  // A slab holds at least 8 blocks and at least 64 KiB, at most slab_size: a heap touching a
  // class pays for a few blocks, not a whole 2 MiB.
  std::size_t slab_bytes(unsigned c) const noexcept {
    const std::size_t cs = class_size(c);
    const std::size_t want = std::max<std::size_t>(8 * cs, std::size_t{64} << 10);
    return std::min(options.slab_size, want) / cs * cs;
  }

  heap& heap_for(stream_view s) {
    const std::uint64_t sid = backend.stream_id(s);
    return detail::cached_for_thread<heap>(id, s, sid, [&]() -> heap& { return find_heap(s, sid); });
  }

  [[gnu::noinline]] heap& find_heap(stream_view s, std::uint64_t sid) {
    std::lock_guard lock(heaps_mutex);
    auto& slot = heaps[heap_key{std::this_thread::get_id(), s.id()}];
    if (slot && !detail::same_stream(slot->stream_id, sid)) {  // an earlier stream's
      std::size_t cached = 0;
      {
        std::lock_guard hl(slot->lock);
        for (unsigned c = 0; c < class_count; ++c) cached += slot->bins[c].size() * class_size(c);
      }
      if (cached == 0 && steals_in_flight.load() == 0) {
        drop(*slot);  // nothing to wait for
        slot.reset();
      } else {
        retired_bytes += cached;
        retired.push_back(std::move(slot));
      }
    }
    if (!slot) {
      slot = std::make_unique<heap>(s, sid);
      heap_list.push_back(slot.get());
      // Shared among live heaps only: a retired one caches nothing past the next defragment.
      heap_budget.store(std::min(options.heap_cache_bytes, options.cache_bytes / heaps.size()),
                        std::memory_order_relaxed);
    }
    return *slot;
  }

  // ---- page heap (page_mutex held) ----------------------------------------------------------
  // Adds a chunk of at least `need` bytes; its start, or 0 when maximum_size or the upstream
  // refuses.
  std::uintptr_t grow(std::size_t need) {
    const std::size_t wanted = round_up(std::max(need, options.min_growth), detail::native);
    return chunks.grow(need, wanted, options.maximum_size, detail::native, pages);
  }

  // Takes n bytes for stream s.  Unless may_wait, only a range whose guards have all completed;
  // otherwise s waits on the pending ones.  0 when none fits.
  std::uintptr_t take_pages(std::size_t n, stream_view s, bool may_wait) {
    const std::uint64_t sid = backend.stream_id(s);
    auto take = [&] {
      return may_wait ? pages.take_best_fit_ready(n, s, sid, ready_scan) : pages.take_ready_fit(n, s, sid, ready_scan);
    };
    auto r = take();
    if (!r && pages.has_splits()) {  // a miss costs growth or a wait: first merge what guards split
      pages.coalesce();
      r = take();
    }
    if (!r) return 0;
    if (r->size > n) pages.insert(r->addr + n, r->size - n, r->guards);
    detail::wait_for(backend, r->guards, s);
    return r->addr;
  }

  // Grows and takes n bytes from the front of the new chunk (a chunk start never merges with
  // its neighbours, so the chunk is one free range with no guards).
  std::uintptr_t take_grown(std::size_t n) {
    const std::uintptr_t a = grow(n);
    if (!a) return 0;
    auto r = pages.take_at(a);
    if (r->size > n) pages.insert(a + n, r->size - n);
    return a;
  }

  bool retired_over(std::size_t n) {
    std::lock_guard hl(heaps_mutex);
    return retired_bytes != 0 && retired_bytes >= std::max(options.min_growth, n);
  }

  void return_pages(std::uintptr_t p, std::size_t n, stream_view released_on) {
    auto guard = std::make_shared<detail::event_guard>(events, released_on);
    std::lock_guard lock(page_mutex);
    pages.insert(p, n, {std::move(guard)});
    release_over_threshold(p);
  }

  // Page heap and the heaps `hs` locked by the caller: cached large blocks and the blocks of
  // slabs wholly free within `hs` go back to the page heap.  Unguarded when every block cached in
  // them is safe for any stream (their streams idle); with `guards` (one per heap, or null),
  // each heap's blocks carry its guard, and an empty slab those of every heap holding its blocks.
  // With spilled, the spilled blocks count too, each batch with its own guard.
  void flush_heaps(const std::vector<heap*>& hs, const std::vector<detail::guard_ptr>* guards = nullptr,
                   bool spilled_too = false) {
    std::map<std::uintptr_t, std::size_t> free_in_slab;
    std::map<std::uintptr_t, detail::guard_list> slab_guards;
    std::unique_lock<std::mutex> spill_lock(spill_mutex, std::defer_lock);
    if (spilled_too) {
      spill_lock.lock();
      for (unsigned c = 0; c < class_count && is_small(c); ++c)
        for (const spilled& b : spills[c])
          for (std::uintptr_t p : b.blocks) {
            const std::uintptr_t start = std::prev(slabs.upper_bound(p))->first;
            ++free_in_slab[start];
            if (!b.guard->complete()) detail::merge_guards(slab_guards[start], {b.guard});
          }
    }
    for (std::size_t i = 0; i < hs.size(); ++i) {
      heap* h = hs[i];
      detail::guard_list g;
      if (guards && (*guards)[i]) g.push_back((*guards)[i]);
      for (unsigned c = 0; c < class_count; ++c) {
        auto& bin = h->bins[c];
        if (!is_small(c)) {
          for (std::uintptr_t p : bin) {
            pages.insert(p, class_size(c), g);
            if (releases) chunks.mark(p);
          }
          bin.clear();
          continue;
        }
        for (std::uintptr_t p : bin) {
          const std::uintptr_t start = std::prev(slabs.upper_bound(p))->first;
          ++free_in_slab[start];
          if (!g.empty()) detail::merge_guards(slab_guards[start], g);
        }
      }
      h->cached_large = 0;
    }
    std::set<std::uintptr_t> empty;
    for (auto& [start, n] : free_in_slab)
      if (n == slab_bytes(slabs[start]) / class_size(slabs[start])) empty.insert(start);
    if (empty.empty()) return;
    auto in_empty_slab = [&](std::uintptr_t p) { return empty.count(std::prev(slabs.upper_bound(p))->first) != 0; };
    for (heap* h : hs)
      for (unsigned c = 0; c < class_count && is_small(c); ++c) std::erase_if(h->bins[c], in_empty_slab);
    if (spilled_too)
      for (unsigned c = 0; c < class_count && is_small(c); ++c) {
        for (spilled& b : spills[c]) spilled_bytes -= std::erase_if(b.blocks, in_empty_slab) * class_size(c);
        std::erase_if(spills[c], [](const spilled& b) { return b.blocks.empty(); });
      }
    for (std::uintptr_t start : empty) {
      auto g = slab_guards.find(start);
      pages.insert(start, slab_bytes(slabs.at(start)), g == slab_guards.end() ? detail::guard_list{} : g->second);
      if (releases) chunks.mark(start);
      slabs.erase(start);
    }
  }

  // The heaps in `hs`, locked by the caller, unlocked on every way out of its scope (a driver
  // call that throws included: a heap left locked spins its stream's next allocation for ever).
  struct unlock_at_exit {
    const std::vector<heap*>& hs;
    ~unlock_at_exit() {
      for (heap* h : hs) h->lock.unlock();
    }
  };

  // Page heap locked.  The device is synchronised first, so the page heap's guards (all
  // recorded before: its lock is held) have completed.  The heaps are locked only after it, and
  // their threads may have freed blocks in between, on streams that have queued work since: each
  // heap's blocks go back guarded by an event recorded on its stream under its lock, which
  // covers every free in its bins (complete at once, and dropped, when the stream is idle).
  void defragment() {
    flush_all_heaps();
    drop_retired();
  }

  void flush_all_heaps() {
    backend.device_synchronize();
    pages.coalesce_after_sync();
    std::lock_guard hl(heaps_mutex);
    std::vector<detail::guard_ptr> guards(heap_list.size());
    std::vector<heap*> locked;
    locked.reserve(heap_list.size());  // before any lock: push_back below cannot throw
    unlock_at_exit unlock{locked};
    bool unrecorded = false;
    for (std::size_t i = 0; i < heap_list.size(); ++i) {
      heap* h = heap_list[i];
      h->lock.lock();
      locked.push_back(h);
      if (std::any_of(h->bins.begin(), h->bins.end(), [](const auto& bin) { return !bin.empty(); })) {
        try {
          guards[i] = std::make_shared<detail::event_guard>(events, h->stream, h->stream_id);
        } catch (const driver_error&) {
          unrecorded = true;  // a destroyed stream: the synchronisation below covers its frees
        }
      }
    }
    // Every heap is locked: a second synchronisation covers every free in their bins, so a heap
    // whose stream took no event needs none.
    if (unrecorded) backend.device_synchronize();
    flush_heaps(heap_list, &guards, true);
  }

  // After flush_all_heaps: retired heaps left with nothing cached are reached no more (their
  // stream's id is gone from every lookup, and only their thread looked them up), unless a steal
  // walks a copy of heap_list; one still caching blocks of a slab in use elsewhere stays.  (One
  // retired with nothing cached goes at once: find_heap.)
  void drop_retired() {
    std::lock_guard hl(heaps_mutex);
    retired_bytes = 0;
    if (steals_in_flight.load() != 0) return;
    std::erase_if(retired, [&](const std::unique_ptr<heap>& h) {
      if (std::any_of(h->bins.begin(), h->bins.end(), [](const auto& bin) { return !bin.empty(); })) return false;
      drop(*h);
      return true;
    });
  }

  // heaps_mutex held: h, retired and caching nothing, leaves heap_list (its owner deletes it).
  void drop(heap& h) {
    dropped_allocated += h.allocated;
    dropped_wait_ns += h.lock.wait_ns();
    std::erase(heap_list, &h);
  }

  // Page heap locked: heaps whose stream has completed all its work give back their cached
  // large blocks and empty slabs, unguarded, with no synchronisation.  The idle test records an
  // event on the heap's stream and queries it between two looks at the heap's bins, each under
  // its lock: unchanged from the first look to the second, every block in them was freed before
  // the event.  The driver calls run outside the heap's lock: under it (as before), every heap's
  // owner waited for them at each miss that got this far.  (On the H100 this did not shorten E2's
  // lock wait at 16 threads; heap_cache_bytes at 128 MiB instead of 32, which spares most misses
  // the page heap's scans of other streams' pending ranges, cut it from 605 to 38 ms;
  // docs/results/device-16core-s35.)
  void reclaim_idle() {
    std::lock_guard hl(heaps_mutex);
    std::vector<heap*> idle;
    for (heap* h : heap_list) {
      std::uint64_t seen;
      {
        std::lock_guard l(h->lock);
        seen = h->changes;
      }
      bool complete;
      try {
        complete = detail::event_guard(events, h->stream, h->stream_id).complete();
      } catch (const driver_error&) {
        complete = false;  // a destroyed stream: only defragment's synchronisation takes it back
      }
      if (!complete) continue;
      h->lock.lock();
      if (h->changes == seen) idle.push_back(h);
      else h->lock.unlock();
    }
    unlock_at_exit unlock{idle};
    flush_heaps(idle);
  }

  // Page heap locked, a range just freed at p: past release_threshold, wholly free chunks that no
  // pending event guards go back upstream (cudaMemPool's release threshold).  Only the chunks
  // frees have touched are looked at (chunk_set::release_marked), not every chunk.
  void release_over_threshold(std::uintptr_t p) {
    if (chunks.reserved() > options.release_threshold)
      chunks.release_marked(pages, options.release_threshold, p);
    else if (releases)
      chunks.mark(p);
  }

  // Where the page heap finds n bytes for stream s, cheapest first (see allocate_slow).
  enum class source { ready, grown, idle, guarded, defragmented };

  std::uintptr_t take_pages_from(source from, std::size_t n, stream_view s) {
    switch (from) {
      case source::ready: return take_pages(n, s, false);
      case source::grown:
        if (retired_over(n)) {  // destroyed streams' heaps (handles recycled) cache a growth step
          defragment();
          if (std::uintptr_t p = take_pages(n, s, false)) return p;
        }
        return take_grown(n);
      case source::idle: reclaim_idle(); return take_pages(n, s, false);
      case source::guarded: return take_pages(n, s, true);
      case source::defragmented:
        defragment();
        if (std::uintptr_t p = take_pages(n, s, true)) return p;
        chunks.release_free(pages);
        return take_grown(n);
    }
    return 0;
  }

  [[noreturn]] void out_of_memory(std::size_t bytes) {
    std::lock_guard lock(page_mutex);
    std::size_t total = pages.total(), largest = pages.largest();
    std::lock_guard hl(heaps_mutex);
    for (heap* h : heap_list) {
      std::lock_guard l(h->lock);
      for (unsigned c = 0; c < class_count; ++c)
        if (!h->bins[c].empty()) {
          total += h->bins[c].size() * class_size(c);
          largest = std::max(largest, class_size(c));
        }
    }
    {
      std::lock_guard sl(spill_mutex);
      total += spilled_bytes;
    }
    throw out_of_memory_error("strata", bytes, total, detail::fragmentation(largest, total));
  }

  // ---- slow path ----------------------------------------------------------------------------
  // Puts the blocks of [p, p + n) for class c into h and returns the first.
  std::uintptr_t fill(heap& h, unsigned c, std::uintptr_t p, std::size_t n) {
    const std::size_t cs = class_size(c);
    const std::size_t count = n / cs;
    std::lock_guard lock(h.lock);
    auto& bin = h.bins[c];
    ++h.changes;
    for (std::size_t i = count; i-- > 1;) bin.push_back(p + i * cs);  // low addresses first
    if (!is_small(c)) h.cached_large += (count - 1) * cs;
    h.allocated += static_cast<std::int64_t>(cs);
    return p;
  }

  // A slab of class c (or one large block) from the page heap, cut into h; the first block.
  std::uintptr_t refill(heap& h, unsigned c, stream_view s, source from) {
    const std::size_t n = is_small(c) ? slab_bytes(c) : class_size(c);
    std::uintptr_t p;
    {
      std::lock_guard lock(page_mutex);
      p = take_pages_from(from, n, s);
      if (!p) return 0;
      if (is_small(c)) slabs.emplace(p, c);
    }
    return fill(h, c, p, n);
  }

  // With h's lock held: the older half of h's free stack of small class c goes to the spills,
  // behind an event on h's stream (which covers every free in it).
  [[gnu::noinline]] void spill(heap& h, unsigned c) noexcept {
    try {
      auto& bin = h.bins[c];
      const auto half = static_cast<std::ptrdiff_t>(bin.size() / 2);
      spilled b{{bin.begin(), bin.begin() + half},
                std::make_shared<detail::event_guard>(events, h.stream, h.stream_id)};
      {
        std::lock_guard l(spill_mutex);
        spills[c].push_back(std::move(b));
        spilled_bytes += static_cast<std::size_t>(half) * class_size(c);
      }
      bin.erase(bin.begin(), bin.begin() + half);
      ++h.changes;
    } catch (...) {
      // A destroyed stream (the event cannot be recorded) or no host memory: the blocks stay
      // in the heap, for a steal or the next defragment.
    }
  }

  // A spilled batch of class c for h, the first block returned and the rest put in h: one whose
  // event needs no wait (among the oldest few), or with may_wait any, s waiting on its event.
  std::uintptr_t take_spilled(heap& h, unsigned c, stream_view s, bool may_wait) {
    spilled b;
    {
      std::lock_guard l(spill_mutex);
      auto& q = spills[c];
      if (q.empty()) return 0;
      const std::uint64_t sid = backend.stream_id(s);
      std::size_t i = 0;
      while (i < q.size() && i < 4 && !q[i].guard->ready_for(s, sid)) ++i;
      if (i == q.size() || i == 4) {
        if (!may_wait) return 0;
        i = 0;
      }
      b = std::move(q[i]);
      q.erase(q.begin() + static_cast<std::ptrdiff_t>(i));
      spilled_bytes -= b.blocks.size() * class_size(c);
    }
    detail::wait_for(backend, {b.guard}, s);
    std::lock_guard lock(h.lock);
    const std::uintptr_t p = b.blocks.back();
    b.blocks.pop_back();
    ++h.changes;
    h.bins[c].insert(h.bins[c].end(), b.blocks.begin(), b.blocks.end());
    h.allocated += static_cast<std::int64_t>(class_size(c));
    return p;
  }

  // Half of another heap's free stack of class c, from heaps on stream s (no event needed) or,
  // with other_streams, from heaps on other streams (s waits on the victim's stream).
  std::uintptr_t steal(heap& h, unsigned c, stream_view s, bool other_streams) {
    std::vector<heap*> victims;
    {
      std::lock_guard lock(heaps_mutex);
      victims = heap_list;
      ++steals_in_flight;
    }
    struct in_flight {
      std::atomic<int>& n;
      ~in_flight() { --n; }
    } done{steals_in_flight};
    const std::size_t cs = class_size(c);
    for (heap* v : victims) {
      // The same stream, not only the same handle: a retired heap's stream is another one.
      if (v == &h || (v->stream == s && detail::same_stream(v->stream_id, h.stream_id)) == other_streams) continue;
      std::vector<std::uintptr_t> got;
      {
        std::lock_guard lock(v->lock);
        auto& bin = v->bins[c];
        if (bin.empty()) continue;
        const std::size_t take = (bin.size() + 1) / 2;
        got.assign(bin.end() - static_cast<std::ptrdiff_t>(take), bin.end());
        bin.resize(bin.size() - take);
        ++v->changes;
        if (!is_small(c)) v->cached_large -= take * cs;
      }
      if (other_streams) {
        try {
          detail::event_guard g(events, v->stream, v->stream_id);  // covers every free already in v's bin
          if (!g.complete()) backend.stream_wait_event(s, g.event);
        } catch (const driver_error&) {
          // v's stream was destroyed (or s cannot wait): the blocks go back; defragment's
          // synchronisation takes them.
          std::lock_guard lock(v->lock);
          ++v->changes;
          v->bins[c].insert(v->bins[c].end(), got.begin(), got.end());
          if (!is_small(c)) v->cached_large += got.size() * cs;
          continue;
        }
      }
      std::lock_guard lock(h.lock);
      const std::uintptr_t p = got.back();
      got.pop_back();
      ++h.changes;
      h.bins[c].insert(h.bins[c].end(), got.begin(), got.end());
      if (!is_small(c)) h.cached_large += got.size() * cs;
      h.allocated += static_cast<std::int64_t>(cs);
      return p;
    }
    return 0;
  }

  // Growth was refused: `attempt` (steps 4-7) once, then, while another thread might still give
  // memory back, again after waits of 1, 2, 4 .. 16 ms until pressure_wait has passed.  0 when
  // the memory is not there.
  template <class Attempt>
  std::uintptr_t under_pressure(std::size_t need, Attempt&& attempt) {
    if (std::uintptr_t p = attempt()) return p;
    // No wait can help a request larger than the cap or the device.
    if (options.pressure_wait.count() <= 0 || need > options.maximum_size ||
        need > backend.mem_info().total_bytes)
      return 0;
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + options.pressure_wait;
    for (std::chrono::milliseconds pause{1}; clock::now() < deadline;
         pause = std::min(pause * 2, std::chrono::milliseconds{16})) {
      std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - clock::now()));
      if (std::uintptr_t p = attempt()) return p;
    }
    return 0;
  }

  [[gnu::noinline]] std::uintptr_t allocate_slow(heap& h, unsigned c, stream_view s) {
    if (std::uintptr_t p = refill(h, c, s, source::ready)) return p;
    if (std::uintptr_t p = steal(h, c, s, false)) return p;
    if (is_small(c))
      if (std::uintptr_t p = take_spilled(h, c, s, false)) return p;
    if (options.wait_before_growth)
      for (source from : {source::idle, source::guarded})
        if (std::uintptr_t p = refill(h, c, s, from)) return p;
    for (source from : {source::idle, source::grown})
      if (std::uintptr_t p = refill(h, c, s, from)) return p;
    return under_pressure(is_small(c) ? slab_bytes(c) : class_size(c), [&]() -> std::uintptr_t {
      for (source from : {source::idle, source::guarded})
        if (std::uintptr_t p = refill(h, c, s, from)) return p;
      if (is_small(c))
        if (std::uintptr_t p = take_spilled(h, c, s, true)) return p;
      if (std::uintptr_t p = steal(h, c, s, true)) return p;
      return refill(h, c, s, source::defragmented);
    });
  }

  std::uintptr_t take_pages_from(std::initializer_list<source> from, std::size_t n, stream_view s) {
    std::lock_guard lock(page_mutex);
    for (source f : from)
      if (std::uintptr_t p = take_pages_from(f, n, s)) return p;
    return 0;
  }

  void* allocate_huge(std::size_t bytes, std::size_t need, stream_view s) {
    std::uintptr_t p = options.wait_before_growth
                           ? take_pages_from({source::ready, source::idle, source::guarded, source::grown}, need, s)
                           : take_pages_from({source::ready, source::idle, source::grown}, need, s);
    if (!p)
      p = under_pressure(need, [&] {
        return take_pages_from({source::idle, source::guarded, source::defragmented}, need, s);
      });
    if (!p) out_of_memory(bytes);
    huge_allocated += static_cast<std::int64_t>(need);
    return reinterpret_cast<void*>(p);
  }
};

strata_resource::strata_resource(device_memory_resource& upstream, strata_options options)
    : device_memory_resource(upstream.shared_backend()),
      impl_(std::make_unique<impl>(upstream, options, backend())) {
  const std::size_t slab = options.slab_size;
  if (slab < (std::size_t{64} << 10) || (slab & (slab - 1)) != 0 || slab > max_class_size)
    throw std::invalid_argument("strata_resource: slab_size must be a power of two in [64 KiB, 64 MiB]");
  if (options.initial_size > 0) {
    std::lock_guard lock(impl_->page_mutex);
    impl_->grow(round_up(options.initial_size, detail::native));
  }
}

strata_resource::~strata_resource() {
  backend().device_synchronize();
  impl_->pages = free_list(impl_->chunks.boundaries());  // drop guards before the events go
  impl_->chunks.release_all();
}

void strata_resource::release() { trim(0); }

void strata_resource::trim(std::size_t keep_bytes) {
  std::lock_guard lock(impl_->page_mutex);
  impl_->defragment();
  impl_->chunks.release_free(impl_->pages, keep_bytes);
}

void* strata_resource::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  const std::size_t need = round_up(detail::padded_size(bytes, alignment), detail::native);
  void* p;
  if (need > max_class_size) [[unlikely]] {
    p = impl_->allocate_huge(bytes, need, stream);
    if (backend().checks_reuse()) backend().note_reuse(p, need, stream);
  } else {
    const unsigned c = class_of(need);
    heap& h = impl_->heap_for(stream);
    std::uintptr_t a = 0;
    {
      std::lock_guard lock(h.lock);
      auto& bin = h.bins[c];
      if (!bin.empty()) [[likely]] {
        a = bin.back();
        bin.pop_back();
        ++h.changes;
        h.allocated += static_cast<std::int64_t>(class_size(c));
        if (!impl_->is_small(c)) h.cached_large -= class_size(c);
      }
    }
    if (!a) a = impl_->allocate_slow(h, c, stream);
    if (!a) impl_->out_of_memory(bytes);
    p = reinterpret_cast<void*>(a);
    if (backend().checks_reuse()) backend().note_reuse(p, class_size(c), stream);
  }
  return alignment > detail::native ? impl_->overaligned.align(p, alignment) : p;
}

void strata_resource::do_deallocate(void* p, std::size_t bytes, stream_view stream,
                                    std::size_t alignment) noexcept {
  const std::size_t need = round_up(detail::padded_size(bytes, alignment), detail::native);
  if (alignment > detail::native) p = impl_->overaligned.base(p);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  try {
    if (need > max_class_size) [[unlikely]] {
      if (backend().checks_reuse()) backend().note_release(p, need, stream);
      impl_->huge_allocated -= static_cast<std::int64_t>(need);
      impl_->return_pages(a, need, stream);
      return;
    }
    const unsigned c = class_of(need);
    const std::size_t cs = class_size(c);
    if (backend().checks_reuse()) backend().note_release(p, cs, stream);
    heap& h = impl_->heap_for(stream);
    {
      std::lock_guard lock(h.lock);
      h.allocated -= static_cast<std::int64_t>(cs);
      const bool small = impl_->is_small(c);
      if (small || h.cached_large + cs <= impl_->heap_budget.load(std::memory_order_relaxed)) [[likely]] {
        h.bins[c].push_back(a);
        ++h.changes;
        if (!small) h.cached_large += cs;
        else if (h.bins[c].size() > impl_->spill_at[c]) [[unlikely]] impl_->spill(h, c);
        return;
      }
    }
    impl_->return_pages(a, cs, stream);  // over the heap's cache budget
  } catch (...) {
    // Only a failing driver call (event record) or allocation failure lands here; the block
    // is lost to reuse, the resource stays consistent.
  }
}

resource_info strata_resource::do_info() const {
  resource_info i;
  std::lock_guard lock(impl_->page_mutex);
  i.reserved_bytes = impl_->chunks.reserved();
  i.peak_reserved_bytes = impl_->chunks.peak();
  std::size_t total = impl_->pages.total(), largest = impl_->pages.largest();
  std::int64_t allocated = impl_->huge_allocated.load();
  std::uint64_t wait = impl_->page_mutex.wait_ns();
  std::lock_guard hl(impl_->heaps_mutex);
  allocated += impl_->dropped_allocated;
  wait += impl_->dropped_wait_ns;
  for (heap* h : impl_->heap_list) {
    std::lock_guard l(h->lock);
    for (unsigned c = 0; c < class_count; ++c)
      if (!h->bins[c].empty()) {
        total += h->bins[c].size() * class_size(c);
        largest = std::max(largest, class_size(c));
      }
    allocated += h->allocated;
    wait += h->lock.wait_ns();
  }
  {
    std::lock_guard sl(impl_->spill_mutex);
    total += impl_->spilled_bytes;
  }
  i.allocated_bytes = static_cast<std::size_t>(std::max<std::int64_t>(allocated, 0));
  i.free_bytes = total;
  i.largest_free_block = largest;
  i.lock_wait_ns = wait;
  return i;
}

}  // namespace strata::gpu
