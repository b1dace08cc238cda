// Segments and spans: carving pages out of segments, returning them, purging, abandoning and
// reclaiming segments, huge mappings.  Called from the heap's slow paths only.
#pragma once
#include "core/page.h"
#include "core/types.h"

namespace strata::detail {

// A page for `cls` (its span of page_slices(cls) slices) from h's own segments (nullptr when
// none has room), or from a segment new to h: one from the segment cache, else a new mapping
// (nullptr when the OS refuses memory).  With warm_only, only free slices still resident
// serve (nullptr when none do): memory already touched goes before memory to fault in.
page* span_alloc_owned(heap* h, size_t cls, bool warm_only) noexcept;
page* span_alloc_new(heap* h, size_t cls, bool warm_only) noexcept;
// The same from seg alone (a segment of h's), or nullptr.
page* span_alloc_in(segment* seg, size_t cls, bool warm_only) noexcept;
// Sets up pg, an empty page of h's whose span is kept (a one-block span of heap::bins), for
// blocks of class cls, which its span holds: empty, in use, on no list.
void page_reshape(page* pg, size_t cls) noexcept;
// Gives a page's span back to its segment; the segment may leave h if that emptied it (and
// may_release_segment).
void span_free(heap* h, page* pg, bool may_release_segment = true) noexcept;
// An empty segment of h's leaves it (into the cache or back to the OS), unless it is h's last;
// true when it left (the caller reads it no more: it may be unmapped already).
bool segment_release_if_empty(heap* h, segment* seg) noexcept;

// Calls f(page) for every page in use in seg (f may release the page's span).
template <class F>
void for_each_page(segment* seg, F f) noexcept {
  for (size_t idx = header_slices; idx < slices_per_segment;) {
    page* pg = &seg->pages[idx];
    if (!(flags_of(pg) & page_flag::in_use)) {
      ++idx;
      continue;
    }
    idx += pg->slice_count;
    f(pg);
  }
}
// Collects the frees into every page of seg (h's counters take its local frees), gives the
// spans of the emptied pages back to seg (never releasing seg itself) and calls on_live(page)
// for each page still holding blocks.
template <class F>
void segment_collect_pages(heap* h, segment* seg, F on_live) noexcept {
  for_each_page(seg, [&](page* pg) {
    page_collect(h, pg);
    if (pg->used == 0)
      span_free(h, pg, false);
    else
      on_live(pg);
  });
}
// Purges the free slices of h's segments whose delay has passed (all of them when force);
// returns the earliest deadline still pending (0: none).
int64_t segments_purge(heap* h, bool force) noexcept;
// The earliest time a cached or abandoned segment has free memory to purge (0: none), and the
// pass that purges those whose delay has passed (any thread's slow path runs it).
int64_t segments_idle_due() noexcept;
void segments_purge_idle(int64_t now) noexcept;
// Moves every segment of h to the abandoned list (or releases it when empty).
void segments_abandon(heap* h) noexcept;
// In a child of fork, for a segment of a heap whose thread the child does not have: that thread
// changes its segments without a lock, and may have stopped inside span_init or span_free, its
// span's flags, the free bits and used_slices telling different stories (strata_heap_check
// failed in about 1 in 100 children of a program whose threads allocate while it forks).  The
// span's flags decide, as every walk of the segment's pages reads them: a span flagged in use
// keeps its slices (empty, it goes back when the segment is adopted), any other slice is free,
// and used_slices is counted again.  Counted low, it let the segment go back to the cache, or
// to the OS, under a live span; high, the segment never emptied.
void segment_repair_after_fork(segment* seg) noexcept;
// Takes one segment off the abandoned list (nullptr when there is none); the caller attaches it
// to its heap (segment_attach) and adopts its pages (heap.cpp).
segment* segment_take_abandoned() noexcept;
void segment_attach(heap* h, segment* seg) noexcept;
// A free of `bytes` into seg, whose owner exited: true once the frees since it was abandoned (or
// last swept) reach a quarter of the memory its pages hold.
bool segment_freed_into(segment* seg, size_t bytes) noexcept;
// Collects the frees into the abandoned segment seg and gives the spans of its emptied pages
// back to it (purged after the delay, like any unowned segment's), leaving it abandoned.  The
// caller's frees into seg are push(arg), made under the abandoned list's lock before the sweep:
// a block not yet pushed keeps seg in use, and the lock keeps it listed (so mapped) after the
// push; pushed before, seg could be adopted, released and unmapped under the sweep.  Pushed
// still when seg was adopted meanwhile (the new owner collects them), without a sweep.
void segment_sweep(heap* h, segment* seg, void (*push)(void* arg), void* arg) noexcept;
// Before strata maps `bytes` afresh from the OS: purges up to that much of the free, resident
// slices of h's segments, then of the cached ones, so that memory held free is given back
// rather than added to (a program going from small blocks to huge ones under a memory limit).
void purge_before_growth(heap* h, size_t bytes) noexcept;
// Empties the global segment cache (unmapping), e.g. for strata_collect(true).
void segment_cache_trim(size_t keep) noexcept;

// The delay before free memory goes back to the OS now (milliseconds; 0: at once, -1: never):
// STRATA_PURGE_DELAY, lengthened while memory given back is soon faulted in again (refaults)
// and shortened back when it is not (segment.cpp).
int64_t purge_delay() noexcept;
// Forgets the refaults that lengthened the purge delay (tests start from the option's own delay).
void purge_delay_reset() noexcept;

// Maps the page map (types.h) once, at initialisation.
void page_map_init() noexcept;

// A huge block of at least `size` bytes; *dirty (if given) is how many of its first bytes may
// hold old data (a reused mapping): the rest is fresh from the OS and reads as zero.
void* huge_alloc(size_t size, size_t alignment, size_t* dirty = nullptr) noexcept;
// calloc of a huge block: the pages a reused mapping brings are zeroed; the fresh ones are
// faulted in writable at once or left to read as zero, as recent huge callocs' pages were used.
void* huge_calloc(size_t size) noexcept;
// calloc of the block p (`size` bytes asked) alone in a page whose span came clean from the OS:
// its pages read as zero already; faulted in at once or left lazy as a huge block's fresh pages.
void calloc_clean_block(void* p, size_t size) noexcept;
// Resizes a huge block's mapping (growth with headroom, pages moved, never copied); its new
// address, or nullptr with errno = ENOMEM (the block untouched).
void* huge_realloc(segment* seg, size_t size) noexcept;
void huge_free(segment* seg) noexcept;
// The mapping h keeps from its thread's last huge free goes to the shared cache (purge pass,
// thread exit, strata_collect).
void huge_spare_release(heap* h) noexcept;
// Unmaps the cached huge mappings that waited too long (all of them when `all`); returns the
// earliest deadline of those left (0: none).
int64_t huge_cache_trim(bool all) noexcept;
// Whether p was the block of one of the last huge mappings unmapped (to label a double free).
bool huge_was_freed(const void* p) noexcept;
// The segment holding p when p lies inside a huge mapping past its first chunk; else nullptr.
segment* huge_segment_containing(const void* p) noexcept;

// Statistics over segments.
struct segment_totals {
  uint64_t segments, abandoned, reclaimed, huge_count, huge_bytes;
  uint64_t huge_allocs, huge_frees;  // huge blocks handed out and freed so far
};
segment_totals segment_stats() noexcept;

// fork(): hold the global locks across the fork so the child finds them consistent.
void segment_locks_acquire() noexcept;
void segment_locks_release(bool in_child) noexcept;

}  // namespace strata::detail
