// The fast paths of malloc and free, inline so that both the strata_* API and the malloc
// overrides compile to the same few instructions.
//
// Call tree:
//   malloc(size) ─ malloc_inline ─┬─ pop from heap->direct[class]->free          (fast)
//                                 ├─ malloc_slow: collect remote frees, next page,
//                                 │   new span (span_alloc), new heap             (heap.cpp)
//                                 └─ huge_alloc for size > 16 MiB                 (segment.cpp)
//   free(p) ─ free_inline ─┬─ owner thread: push on page->free                  (fast)
//                          │    └─ page emptied / was full: page_local_event    (heap.cpp)
//                          └─ free_slow: another thread's page (one CAS on
//                               thread_free), huge, aligned, invalid, double free
#pragma once
#include <cstddef>

#include "core/heap.h"
#include "core/types.h"

namespace strata::detail {

void* malloc_huge(size_t size, size_t alignment) noexcept;
void free_slow(segment* seg, void* p) noexcept;
void* alloc_aligned(size_t alignment, size_t size) noexcept;

inline void* malloc_inline(size_t size) noexcept {
  if (STRATA_LIKELY(size <= large_max)) {
    size_t cls = size_class_of(size);
    heap* h = tl_heap;
    page* pg = h->direct[cls];
    block* b = pg->free;
    if (STRATA_LIKELY(b != nullptr)) {
      pg->free = b->next;
      b->canary = 0;
      pg->used++;
      h->alloc_count[cls].add();
      return b;
    }
    return malloc_slow(cls);
  }
  return malloc_huge(size, 0);
}

inline void free_inline(void* p) noexcept {
  segment* seg = segment_of(p);
  if (STRATA_UNLIKELY(!map_has_segment(seg))) return free_slow(nullptr, p);
  heap* h = tl_heap;
  if (STRATA_LIKELY(seg->owner.load(std::memory_order_relaxed) == h)) {
    page* pg = page_of(seg, p);
    auto* b = static_cast<block*>(p);
    uint32_t offset = static_cast<uint32_t>(static_cast<uint8_t*>(p) - pg->start);
    // One test for the rare cases: not a block start, not carved, not in use, already free.
    if (STRATA_LIKELY(offset < pg->carved_bytes.load(std::memory_order_relaxed) && is_block_start(pg, p) &&
                      b->canary != canary_of(b))) {
      b->next = pg->free;
      b->canary = canary_of(b);
      pg->free = b;
      h->free_count[pg->size_class].add();
      if (STRATA_UNLIKELY(--pg->used == 0 || (flags_of(pg) & page_flag::in_full))) page_local_event(h, pg);
      return;
    }
  }
  free_slow(seg, p);
}

}  // namespace strata::detail
