// The fast paths of malloc and free, inline so that both the strata_* API and the malloc
// overrides compile to the same few instructions.
//
// Call tree:
//   malloc(size) ─ malloc_inline ─┬─ pop from heap->direct_small[size/16]->free    (fast)
//                                 ├─ or heap->direct[class]->free (over 1 KiB)    (fast)
//                                 ├─ malloc_slow: collect remote frees, next page,
//                                 │   new span (heap_span_alloc), new heap          (heap.cpp)
//                                 └─ huge_alloc for size > 2 MiB                  (segment.cpp)
//   free(p) ─ free_inline ─┬─ page map → page; owner thread: push on local_free (fast)
//                          │    └─ page emptied: page_local_event              (heap.cpp)
//                          ├─ free_block: another thread's page (batched onto its
//                          │    thread_free), a full page, an abandoned segment's page
//                          └─ free_slow: huge, aligned, invalid, double free
#pragma once
#include <cstddef>

#include "core/heap.h"
#include "core/page.h"
#include "core/types.h"

namespace strata::detail {

void* malloc_huge(size_t size, size_t alignment) noexcept;
void free_slow(void* p) noexcept;
// A live block b of pg that free's fast path did not take: another heap's page, a page on its
// owner's full list, or a page of an abandoned segment.  A block of another live heap's page may
// stay in the calling heap's foreign cache (foreign_put); from_foreign: it comes out of that
// cache (foreign_flush), its free counted already, and goes back to its page.
void free_block(page* pg, block* b, bool from_foreign = false) noexcept;
void* alloc_aligned(size_t alignment, size_t size) noexcept;
// Hardened build: the owner's free of p, a block of a page with no block out.  Reports it (a
// double free whose canary a write after the first free overwrote).
void free_of_idle_page(void* p) noexcept;

inline void* malloc_inline(size_t size) noexcept {
  heap* h = tl_heap;
  if (STRATA_LIKELY(size <= small_table_max)) {
    size_t slot = (size + 15) >> 4;
    if (block* b = page_pop_fast(h->direct_small[slot]); STRATA_LIKELY(b != nullptr)) {
      h->alloc_small[slot].add();
      return b;
    }
    return malloc_slow(small_classes.cls[slot]);
  }
  if (STRATA_LIKELY(size <= huge_min)) {
    size_t cls = size_class_of(size);
    if (block* b = page_pop_fast(h->direct[cls]); STRATA_LIKELY(b != nullptr)) {
      h->alloc_count[cls].add();
      return b;
    }
    return malloc_slow(cls);
  }
  return malloc_huge(size, 0);
}

// The start of a live block of pg: carved, and not carrying the free canary (a free block does,
// and so does the start of a block that an aligned allocation handed out further in: alloc.cpp
// aligned_marked).  Free's fast path's one test for the rare cases (not a block start, not
// carved, not in use, already free); realloc and malloc_usable_size take it first too.
// (The secret is read before the carve test, which lets free's load of it start first.)
inline bool is_live_block_start(const page* pg, const block* b) noexcept {
  size_t offset = static_cast<size_t>(reinterpret_cast<const uint8_t*>(b) - pg->start);
  uintptr_t canary = canary_of(b);
  return is_carved_block_start(pg, offset) && b->canary != canary;
}

inline void free_inline(void* p) noexcept {
  page* pg = page_lookup(p);
  if (STRATA_UNLIKELY(pg == nullptr)) return free_slow(p);
  auto* b = static_cast<block*>(p);
  if (STRATA_LIKELY(is_live_block_start(pg, b))) {
    if (STRATA_LIKELY(pg->owner_tid.load(std::memory_order_relaxed) == thread_id())) {
      // Hardened: a page with no block out has none to free.  The canary test misses a double
      // free once a write after the first free overwrote the canary; pushed again, the block sat
      // on its list twice and the page's count went below zero (a one-block page handed its
      // block out and kept it listed; a page of many could give its span back under a live one).
      if constexpr (secure)
        if (STRATA_UNLIKELY(pg->used == 0)) return free_of_idle_page(p);
      page_push_local(pg, b);
      if (STRATA_UNLIKELY(page_count_local_free(pg))) page_local_event(tl_heap, pg);
      return;
    }
    return free_block(pg, b);
  }
  free_slow(p);
}

}  // namespace strata::detail
