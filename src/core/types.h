// strata's core types.
//
// Glossary (each noun and verb means one thing everywhere in src/core):
//   OS page  — the kernel's unit of memory (4 KiB here): what a fault brings in and a purge
//              gives back.  Never called just "page" in strata's code.
//   block    — one allocation handed to the user; while free it holds the next-free link and a
//              canary that marks it as free (double-free detection).
//   size class — the rounded block size a request is served with (size_class.h).
//   slice    — the 64 KiB unit a segment is cut into.
//   span     — a run of consecutive slices of one segment, free or in use by one page.
//   page     — a span in use, holding blocks of one size class; its metadata lives in the
//              segment header, in the entry of the span's first slice.
//   segment  — a 32 MiB-aligned mapping: a header (slices 0-1: the page table) and 510 slices.
//              free() finds a pointer's page with one load from the page map (below), which
//              names the page of every slice in use; the segment is the pointer with its low 25
//              bits cleared.
//   huge     — a request above 2 MiB (huge_min), or a block realloc grew past 1 MiB: a mapping
//              of its own, segment-aligned; the thread keeps the last one it freed (heap::
//              huge_spare), others wait in a small shared cache for reuse.
//   heap     — one thread's allocator state: the pages it allocates from, by size class, and
//              the segments it owns.  Only the owning thread touches a heap's pages' free
//              lists; other threads push frees onto a page's atomic thread_free list.
//   abandoned — a segment whose owner thread exited while blocks in it were live; any thread
//              needing a span may reclaim it (and with it the frees other threads made in the
//              meantime); a thread freeing into it sweeps it now and then (segment_sweep).
// Verbs:
//   collect  — take the frees other threads made into a page (its thread_free list) into its
//              free lists, so that `free` is empty only if the page has no free block
//              (page_collect).  strata_collect() and heap_trim collect every page,
//              then give back.
//   release  — give a span back to its segment (span_free), or a segment back to the cache
//              or the OS (segment_release).
//   purge    — give the physical memory of free slices back to the OS, keeping the mapping.
//   sweep    — collect an abandoned segment's pages and release the emptied spans, leaving it
//              abandoned (segment_sweep).
//   reclaim  — take an abandoned segment over into a heap (heap_adopt_segment).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/size_class.h"

#define STRATA_LIKELY(x) __builtin_expect(!!(x), 1)
#define STRATA_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define STRATA_NOINLINE __attribute__((noinline))
#define STRATA_ALWAYS_INLINE __attribute__((always_inline)) inline
#define STRATA_EXPORT extern "C" __attribute__((visibility("default")))
// The hardened build (libstrata-secure.so, docs/security.md): encoded free-list links checked at
// every pop, canaries on every free block, shuffled carving, guard pages, abort on errors.
#ifndef STRATA_SECURE
#define STRATA_SECURE 0
#endif
// For the declarations of strata's own globals: without it -fvisibility=hidden does not apply
// to an extern declaration and every access goes through the GOT (one more instruction).
#define STRATA_HIDDEN __attribute__((visibility("hidden")))

namespace strata::detail {

constexpr size_t segment_shift = 25;
constexpr size_t segment_size = size_t{1} << segment_shift;  // 32 MiB
constexpr size_t slice_shift = 16;
constexpr size_t slice_size = size_t{1} << slice_shift;  // 64 KiB
constexpr size_t slices_per_segment = segment_size / slice_size;  // 512; the first header_slices are the header
constexpr size_t bitmap_words = slices_per_segment / 64;
constexpr bool secure = STRATA_SECURE != 0;

struct block {
  block* next;
  uintptr_t canary;  // == canary_of(this) while the block is free
};

struct heap;

namespace page_flag {
constexpr uint8_t in_use = 1;       // the span holds blocks
constexpr uint8_t in_full = 2;      // on the heap's full list (no free block when last looked)
constexpr uint8_t has_aligned = 4;  // an aligned pointer inside a block was handed out
// A page of one block whose span was all fresh from the OS (or purged) and whose block has not
// been freed since: the block is still all zero (calloc need not write it).  Set by span_init,
// cleared when the block comes back (page_local_event, page_collect).
constexpr uint8_t clean = 8;
// An empty page its heap keeps for reuse (heap::spare_count): set when kept, cleared when the
// page is used again (the slow path's walk) or its span goes back (page_release).
constexpr uint8_t spare = 16;
// An empty page in its queue that was empty already at the heap's last purge pass and has had no
// block back since (page_block_back): the next pass gives its span back (heap_purge).
constexpr uint8_t idle = 32;
// A one-block page whose block is out, on none of the heap's lists (heap.cpp one_block_serve):
// its owner's free of the block finds it through free's fast path, another thread's free
// through its segment's loose_remote bits.
constexpr uint8_t loose = 64;
}  // namespace page_flag

// Two cache lines: the first holds what the owner writes on every malloc and free (and the
// remote list, pushed once per batch), the second what free() reads to check a block, written
// only when the page is set up or changes owner or list.  Other threads' frees read the second
// line without taking the first from the owner's cache: with both in one 96-byte struct (and
// pages 96 bytes apart, neighbours sharing lines), a remote free pulled the owner's line over
// at every block (larson 1.06x, prodcon 1.06x, mstress 1.04x side by side).
struct alignas(64) page {
  block* free;                     // owner-only: malloc pops from it
  block* local_free;               // owner-only: local frees push here (and a collected remote
                                   // chain when `free` is not empty); becomes `free` when that
                                   // runs dry, so malloc's pops never wait on a just-made free
  std::atomic<uintptr_t> thread_free;  // frees by other threads: head | length << 48 (page.h remote_head,
                                       // remote_count), one CAS a chain
  // `used` and `frees` form one 8-byte word (`used` the low half) that malloc's and free's fast
  // paths change with one 8-byte add each (page_count_pop, page_count_local_free): free's
  // decrement of one and increment of the other is one instruction, and every access of the
  // fast paths has the same size and address, so that each store is forwarded to the next load
  // (a 4-byte store to `used` followed by an 8-byte load of both stalled every free after a
  // malloc of the same page, when gcc fused two 4-byte updates into one vector load and store).
  alignas(8) uint32_t used;        // blocks out (not on free; may be on thread_free)
  uint32_t frees;                  // local frees not yet added to the heap's counters (owner-only)
  uint16_t capacity;               // blocks carved from the span so far (carved lazily)
  std::atomic<uint8_t> flags;      // page_flag bits; written by the owner, read by any thread
  page* next;                      // in the heap's queue or full list of this size class
  page* prev;
  alignas(64) uint64_t block_mul;  // block_mul_of(block_size)
  std::atomic<uint64_t> block_bound;  // capacity * (block_mul * block_size mod 2^64)
  uint8_t* start;                  // first block
  // The owner thread's id (thread_id()) with bit 0 set while the page is on the full list; 0
  // while the segment has no owner.  free()'s fast path is one compare against thread_id():
  // another thread, no owner, or a full page all take the slow path.
  std::atomic<uintptr_t> owner_tid;
  // Set with the span, read by other threads' frees (the block's class and size: held or
  // batched by size), so kept off the owner's line: in it, every remote free of a block of
  // 2 KiB or less pulled the line the owner writes at each malloc.
  uint32_t block_size;
  uint16_t slice_count;            // span length (first slice of a span)
  uint16_t slice_offset;           // distance back to the span's first slice
  uint16_t reserved;               // blocks the span can hold (at most 64 KiB / 16 B)
  uint8_t size_class;
};
static_assert(sizeof(page) == 128);
static_assert(offsetof(page, frees) == offsetof(page, used) + 4 && offsetof(page, used) % 8 == 0 &&
              offsetof(page, prev) + sizeof(page*) <= 64 && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "page_count_pop and page_count_local_free change used and frees as one little-endian word");

// huge_cached: a freed huge mapping waiting for reuse (segment.cpp).
enum class segment_kind : uint32_t { normal, huge, huge_cached };

struct segment {
  std::atomic<heap*> owner;        // null while abandoned, cached or huge
  segment* next;                   // heap's list, abandoned list or cache
  segment* prev;
  segment_kind kind;
  uint32_t used_slices;            // slices in pages (the header not counted)
  size_t mapped_size;              // bytes mapped (huge: the whole mapping)
  size_t huge_size;                // huge: usable bytes from the block start
  // huge: the pages [lazy_from, lazy_to) of the mapping (offsets) that a calloc left to read as
  // the kernel's zero pages; how many the program touched is looked at when it frees the block
  // (huge_calloc).  0, 0: none.
  size_t lazy_from, lazy_to;
  int64_t purge_due_ms;            // when dirty free slices are to be purged (0: none);
                                   // huge_cached: when the mapping leaves the cache
  int64_t purged_ms;               // when slices were last purged (purged_bits)
  bool abandoned;                  // on the abandoned list (under its lock)
  std::atomic<uint64_t> freed_abandoned;  // bytes freed into it since it was abandoned or swept
  std::atomic<uint64_t> sweep_at;         // freed_abandoned that calls for a sweep
  uint64_t free_bits[bitmap_words];   // 1 = slice free
  uint64_t dirty_bits[bitmap_words];  // 1 = slice may hold physical memory
  uint64_t purge_bits[bitmap_words];  // free and dirty at the last purge pass: purged at the next
  uint64_t purged_bits[bitmap_words];  // purged and not used since (a reuse is a refault)
  // Loose pages (page_flag::loose) whose block another thread freed: set by the freeing thread
  // after its push (page_push_remote), taken by the owner (collect_remote_loose).  On a line of
  // its own: the owner writes the bitmaps above at every span it takes or gives back.
  alignas(64) std::atomic<uint64_t> loose_remote[bitmap_words];
  page pages[slices_per_segment];
};
// The header (the page table: 512 pages of 128 bytes, and the bitmaps) takes the first two slices.
constexpr size_t header_slices = 2;
static_assert(sizeof(segment) <= header_slices * slice_size, "the segment header must fit in its slices");

// The hardened build keeps a segment's last slice as a guard (never mapped readable), so that an
// overflow off the end of the last span faults instead of running into the next mapping.
constexpr size_t usable_slices = slices_per_segment - header_slices - (secure ? 1 : 0);

inline segment* segment_of(const void* p) noexcept {
  return reinterpret_cast<segment*>(reinterpret_cast<uintptr_t>(p) & ~(segment_size - 1));
}

inline page* page_lookup(const void* p) noexcept;
inline bool page_map_ready() noexcept;

// The page holding p, which lies in seg's slices.  With the page map, the map says (nullptr for
// a free slice or the header); without it, the span's first slice through slice_offset (only
// kept up to date when there is no page map) — a free slice gives a page without in_use.
inline page* page_of(segment* seg, const void* p) noexcept {
  if (STRATA_LIKELY(page_map_ready())) return page_lookup(p);
  size_t idx = (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(seg)) >> slice_shift;
  page* pg = &seg->pages[idx];
  return pg - pg->slice_offset;
}

inline uint8_t* slice_address(segment* seg, size_t idx) noexcept {
  return reinterpret_cast<uint8_t*>(seg) + (idx << slice_shift);
}

inline size_t slice_index(segment* seg, const page* pg) noexcept {
  return static_cast<size_t>(pg - seg->pages);
}

// The entry of the segment's page table for the slice holding p: p's page when p lies in its
// span's first slice (as a one-block page's block does: heap.cpp kept_page).
inline page* slice_page(const void* p) noexcept {
  segment* seg = segment_of(p);
  return &seg->pages[(reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(seg)) >> slice_shift];
}

// "Is this offset the start of a block carved so far?" in one multiply and one compare (after
// Lemire's divisibility test).  With c = floor(2^64 / bs) + 1 and e = c * bs - 2^64, 1 <= e <= bs:
// for offset = k * bs, offset * c = k * e (mod 2^64); for any other offset < 2^32 the product is
// at least c > 2^40 (bs <= 2^24).  So offset starts a block k < capacity iff
// offset * c < capacity * e, and block_bound = capacity * e (< 2^36) is the whole test.
constexpr uint64_t block_mul_of(uint64_t bs) noexcept {
  uint64_t c = UINT64_MAX / bs + 1;
  return c * bs == 0 ? c + 1 : c;  // a power of two: e would be 0
}
constexpr uint64_t block_bound_of(uint64_t bs, uint64_t capacity) noexcept {
  return capacity * (block_mul_of(bs) * bs);
}
inline bool is_carved_block_start(const page* pg, uint64_t offset) noexcept {
  return offset * pg->block_mul < pg->block_bound.load(std::memory_order_relaxed);
}

// A thread's id: its thread pointer (the TCB address, %fs:0 on x86-64), unique among live threads.
inline uintptr_t thread_id() noexcept { return reinterpret_cast<uintptr_t>(__builtin_thread_pointer()); }
constexpr uintptr_t owner_tid_full = 1;

inline uint8_t flags_of(const page* pg) noexcept { return pg->flags.load(std::memory_order_relaxed); }
// Flags are written by the owner only; in_full is mirrored into owner_tid's bit 0.
inline void flags_set(page* pg, uint8_t f) noexcept {
  pg->flags.store(flags_of(pg) | f, std::memory_order_relaxed);
  if (f & page_flag::in_full)
    pg->owner_tid.store(pg->owner_tid.load(std::memory_order_relaxed) | owner_tid_full, std::memory_order_relaxed);
}
inline void flags_clear(page* pg, uint8_t f) noexcept {
  pg->flags.store(static_cast<uint8_t>(flags_of(pg) & ~f), std::memory_order_relaxed);
  if (f & page_flag::in_full)
    pg->owner_tid.store(pg->owner_tid.load(std::memory_order_relaxed) & ~owner_tid_full, std::memory_order_relaxed);
}
// The owner word for a page of h's (0 for no owner), keeping the page's in_full bit.
inline uintptr_t owner_tid_of(const heap* h, const page* pg) noexcept;

// ---- the segment map: which 32 MiB chunks of the address space are strata's ----------------
constexpr size_t address_bits = 47;
constexpr size_t map_chunks = size_t{1} << (address_bits - segment_shift);
struct segment_map {
  std::atomic<uint64_t> start[map_chunks / 64];         // a segment starts here
  std::atomic<uint64_t> continuation[map_chunks / 64];  // inside a huge segment, past its start
};
extern STRATA_HIDDEN segment_map g_map;

inline bool map_has_segment(const void* seg) noexcept {
  uintptr_t chunk = reinterpret_cast<uintptr_t>(seg) >> segment_shift;
  if (STRATA_UNLIKELY(chunk >= map_chunks)) return false;
  return (g_map.start[chunk / 64].load(std::memory_order_relaxed) >> (chunk % 64)) & 1;
}

// ---- the page map: the page of every slice in use, for free()'s fast path ------------------
// One entry per 64 KiB of the 47-bit address space (2^31 entries, 16 GiB of sparse address
// space; a segment's 512 entries fill one 4 KiB OS page).  An entry is set while its slice is in
// a page (span) of a normal segment, and null otherwise: huge blocks, segment headers, free
// slices and memory strata never mapped all send free() to its slow path.  Until the table is
// mapped, `mask` is 0 and every lookup reads the one null entry of `boot`.
// The table is published by storing `entries`, then `mask` (release); a reader loads `mask`
// first (acquire), so a non-zero mask always comes with the table.
struct page_map {
  std::atomic<std::atomic<page*>*> entries;
  std::atomic<uintptr_t> mask;
};
extern STRATA_HIDDEN page_map g_pages;
constexpr size_t page_map_entries = size_t{1} << (address_bits - slice_shift);

inline bool page_map_ready() noexcept { return g_pages.mask.load(std::memory_order_acquire) != 0; }

inline page* page_lookup(const void* p) noexcept {
  uintptr_t idx = (reinterpret_cast<uintptr_t>(p) >> slice_shift) & g_pages.mask.load(std::memory_order_acquire);
  return g_pages.entries.load(std::memory_order_relaxed)[idx].load(std::memory_order_relaxed);
}

// ---- per-thread heaps ------------------------------------------------------------------------
// A counter written by one thread and read by any: relaxed load + store, no locked instruction.
// On x86-64 the add is one unlocked read-modify-write instruction on the memory operand (an
// aligned 8-byte access: readers never see a torn value); written in assembly because the
// compiler will not fuse a relaxed atomic load and store into one.
struct counter {
  std::atomic<uint64_t> v{0};
  void add(uint64_t n = 1) noexcept {
#if defined(__x86_64__)
    asm("addq %1, %0" : "+m"(v) : "er"(n));
#else
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
#endif
  }
  uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

// Huge blocks (over huge_min, each its own mapping) handed out and freed, and their bytes: live
// ones are the differences.  Each thread adds to its own heap's (segment.cpp, huge_count).
struct huge_counts {
  counter allocs, frees, bytes_in, bytes_out;
};

struct page_list {
  page* first = nullptr;
  page* last = nullptr;
};

extern STRATA_HIDDEN page empty_page;  // never has a free block: sends malloc to its slow path

// Requests up to small_table_max bytes index the heap by size, in 16-byte steps, not by class:
// malloc's fast path needs no class lookup.
constexpr size_t small_slots = small_table_max / 16 + 1;

// Frees of other heaps' blocks wait in the freeing heap, a chain per page, and go to each page's
// thread_free list with one CAS per chain (remote_free_batched, heap.cpp): a burst of frees into
// another thread's pages costs one atomic operation per page, not per block.
struct remote_batch {
  page* pg;
  block* head;
  block* tail;
  uint32_t count;  // blocks in the chain
};
// 64, not 16: a consumer of blocks of 15 sizes or more frees into more pages at once than 16
// slots hold, and each page whose slot another took was pushed as a chain of a block or two, one
// compare-and-swap on a line the producer was writing (prodcon, 16-256 B: 1.14x [1.11-1.17];
// prodcon-split-mixed 1.07x; the other cells level, docs/results/probes-s52-2core).
constexpr size_t remote_batch_slots = 64;
static_assert((remote_batch_slots & (remote_batch_slots - 1)) == 0, "slots are indexed by a hash's top bits");
constexpr size_t remote_batch_bytes = 256 * 1024;  // pending bytes that force a flush
// The same for a heap whose thread has freed but not allocated (heap::frees_only): it needs
// none of what it holds, so it holds less.
constexpr size_t remote_frees_only_bytes = 64 * 1024;
constexpr size_t remote_batch_block_max = 16 * 1024;  // larger blocks are pushed at once

// Blocks of other live heaps' pages that this heap's thread freed, kept for its own next
// allocations of their class instead of being sent back (heap.cpp, foreign_put): blocks that
// travel from thread to thread (producer/consumer) are reused where they are freed, as in a
// thread cache, with no atomic operation either way.  At most foreign_bytes_max per heap.  Each
// class's are the free list of a stand-in page of the heap's (heap::foreign), which becomes the
// class's direct page: malloc's fast path pops them (the stand-in counts pops in `used`, pushes
// in `frees`; it is on no list and in no segment).
constexpr size_t foreign_block_max = 2 * 1024;
constexpr size_t foreign_bytes_max = 512 * 1024;
constexpr size_t foreign_classes = size_class_of_computed(foreign_block_max) + 1;

// Kept empty one-block spans (heap::bins) are listed by length in slices, up to the longest,
// at most bin_length_max of each length.
constexpr size_t bin_slices_max = page_slices(size_class_count - 1);
constexpr size_t bin_mask_words = bin_slices_max / 64 + 1;
constexpr size_t bin_length_max = 16;
constexpr uint32_t bin_hot_allocs = 1024;
// The empty pages a class of many blocks to a page may keep in its queue (heap.cpp
// page_event_many).
constexpr uint8_t spare_pages_max = 8;
// At most this much memory (span bytes) sits in a heap's spare pages: the empty pages a class
// of many blocks to a page may keep in its queue and the kept one-block spans (heap.cpp
// page_local_event, the bins).  With 32 MiB, E1's large band (64 blocks of 64 KiB-1 MiB, random
// replacement, 36 MiB live) overflowed the bins, its spans went back and were cut again
// elsewhere, and over a run its blocks' ends touched 75 MiB; with 64 MiB, 33 MiB
// (docs/design.md).
constexpr size_t spare_budget = size_t{64} << 20;

struct heap {
  constexpr heap() noexcept : direct{}, direct_small{} {
    for (auto& d : direct) d = &empty_page;
    for (auto& d : direct_small) d = &empty_page;
  }
  page* direct[size_class_count];           // the page malloc pops from, per class
  page* direct_small[small_slots];          // the same pages, by (size + 15) / 16 (set_direct)
  page_list queue[size_class_count];        // pages with (possibly) free blocks; direct is first
  page_list full[size_class_count];         // pages found full
  std::atomic<uint8_t> remote_hint[size_class_count];  // a remote free hit this class
  std::atomic<uint8_t> remote_any;          // some remote_hint was set since collect_remote_all
  std::atomic<uint8_t> remote_loose;        // a remote free hit a loose page (segment::loose_remote)
  uint8_t spare_count[size_class_count] = {};  // pages flagged page_flag::spare in queue, per class
  remote_batch remote[remote_batch_slots] = {};  // frees into other heaps' pages, not yet pushed
  size_t remote_pending = 0;                // bytes in `remote`
  uint64_t slow_walks = 0;                  // heap_alloc_slow's page walks (purge check pacing)
  uint64_t slow_calls = 0;                  // heap_alloc_slow's calls (heap::active_tsc's pacing)
  uint64_t clock_tsc = 0;                   // time-stamp counter at the last purge check (heap_maybe_purge)
  size_t spare_bytes = 0;                   // span bytes of the pages flagged spare
  segment* segments = nullptr;              // owned segments (normal kind)
  heap* next_in_registry = nullptr;
  uintptr_t tid = 0;                        // thread_id() of the thread using it
  std::atomic<bool> alive{false};          // written under the registry lock, read by statistics without it
  // The time-stamp counter when the heap was taken and at every 64th call of heap_alloc_slow:
  // how recently the thread allocated, read by other threads' frees (heap_idle_beside).  On a
  // line of its own, so that those reads never share a line with the counters the owner adds to
  // at each allocation (not measured alone: docs/design.md).
  alignas(64) std::atomic<uint64_t> active_tsc{0};
  alignas(64) int64_t purge_due_ms = 0;
  // statistics (this thread's view; remote frees counted by the freeing thread)
  counter alloc_count[size_class_count];    // requests above small_table_max
  counter alloc_small[small_slots];         // requests up to small_table_max, by size slot
  counter free_count[size_class_count];
  counter remote_frees;
  huge_counts huge;                         // blocks over huge_min (segment.cpp, huge_count)
  // Last: the hot fields above keep their offsets.
  size_t foreign_bytes = 0;                 // block bytes pushed into `foreign` (pops not taken off)
  uint64_t remote_frees_at_purge = 0;       // remote_frees at the last purge pass (heap_purge's aging)
  bool frees_only = false;                  // made by a free (free_block): no foreign cache, remote_frees_only_bytes pending
  segment* huge_spare = nullptr;            // the last huge mapping its thread freed (huge_free), for its next
  page foreign[foreign_classes] = {};       // other heaps' blocks freed here, for reuse (foreign_put)
  // Empty one-block pages kept with their spans (flagged page_flag::spare), by the span's length
  // in slices, oldest first, each as its one block (the page is found from it: heap.cpp
  // kept_page) with its size class: any one-block class whose block the span holds reuses it
  // (heap.cpp bin_take).  Arrays in the heap, not lists through the pages: a kept span's page
  // struct is cold when the span is taken again, and a list made each put and take read it and
  // write its neighbour's (docs/design.md).  bin_mask has bit m set while bins[m] has a page.
  block* bins[bin_slices_max + 1][bin_length_max] = {};
  uint8_t bin_class[bin_slices_max + 1][bin_length_max] = {};
  uint8_t bin_count[bin_slices_max + 1] = {};
  uint64_t bin_mask[bin_mask_words] = {};
  // One-block allocations so far (bin_take's calls), and its value when each bin last served one
  // (0: never): a bin that served none of the last bin_hot_allocs is cold, and gives way before
  // fresh memory (heap_span_alloc).
  uint32_t one_block_allocs = 0;
  uint32_t bin_puts = 0;  // spans kept (page_local_event's purge check paces itself by it)
  uint32_t bin_served_at[bin_slices_max + 1] = {};
};

// Is pg the stand-in page through which h's held foreign blocks of class cls are served?
inline bool is_foreign_stand_in(const heap* h, size_t cls, const page* pg) noexcept {
  return cls < foreign_classes && pg == &h->foreign[cls];
}

extern STRATA_HIDDEN heap empty_heap;
extern STRATA_HIDDEN __thread heap* tl_heap;
extern STRATA_HIDDEN uint64_t g_secret;

inline uintptr_t owner_tid_of(const heap* h, const page* pg) noexcept {
  if (h == nullptr) return 0;
  return h->tid | ((pg->flags.load(std::memory_order_relaxed) & page_flag::in_full) ? owner_tid_full : 0);
}

inline uintptr_t canary_of(const block* b) noexcept { return reinterpret_cast<uintptr_t>(b) ^ g_secret; }

// A free block's link to the next, as stored in the block: in the hardened build encoded with a
// key of the process secret and the page, so that an overflow or a use-after-free write cannot
// plant an address of the attacker's choice (it decodes to garbage, caught at the pop); the
// plain build stores it as is.  The lists' heads live in the page (out of line) and are plain.
inline uintptr_t link_key(const page* pg) noexcept {
  return g_secret ^ (reinterpret_cast<uintptr_t>(pg) * 0x9E3779B97F4A7C15ull);
}
inline block* link_get(const page* pg, const block* b) noexcept {
  if constexpr (secure) return reinterpret_cast<block*>(reinterpret_cast<uintptr_t>(b->next) ^ link_key(pg));
  return b->next;
}
inline void link_set(const page* pg, block* b, block* next) noexcept {
  if constexpr (secure)
    b->next = reinterpret_cast<block*>(reinterpret_cast<uintptr_t>(next) ^ link_key(pg));
  else
    b->next = next;
}

}  // namespace strata::detail
