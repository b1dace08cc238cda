// Pages: the operations on one page's free lists, below heaps and segments.  The inlines are
// malloc's and free's fast paths (alloc.h); the rest is the slow paths' (page.cpp).
#pragma once
#include "core/assert.h"
#include "core/types.h"

namespace strata::detail {

// The hardened build found a free list corrupted at a pop: reports and aborts.
[[noreturn]] void page_corrupted(const page* pg, const block* b) noexcept;

// Is next (a link just decoded) a block start of pg, or the list's end?
inline bool link_is_valid(const page* pg, const block* next) noexcept {
  if (next == nullptr) return true;
  auto offset = static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(next) - pg->start);
  return offset < uint64_t{pg->capacity} * pg->block_size && is_carved_block_start(pg, offset);
}

// Pops the first free block of pg, or returns nullptr.
inline block* page_pop_fast(page* pg) noexcept {
  block* b = pg->free;
  if (STRATA_LIKELY(b != nullptr)) {
    block* next = link_get(pg, b);
    // Hardened: the block must still carry its free canary (a use-after-free write clobbers
    // it) and its link must lead into the page (an overwritten link decodes to garbage).
    if constexpr (secure)
      if (STRATA_UNLIKELY(b->canary != canary_of(b) || !link_is_valid(pg, next))) page_corrupted(pg, b);
    pg->free = next;
    // Hardened: the encoded link goes too, so that the block's bytes never show a link (from
    // which its key could be worked out), and a clean page's block stays zero for calloc.
    if constexpr (secure) b->next = nullptr;
    b->canary = 0;
    pg->used++;
  }
  return b;
}

// The owner's free of b: onto local_free, marked free (the canary).  The caller counts it and
// decrements pg->used.
inline void page_push_local(page* pg, block* b) noexcept {
  STRATA_ASSERT_INTERNAL(pg->used > 0);
  b->canary = canary_of(b);  // first: free's fast path has just read g_secret for its test
  link_set(pg, b, pg->local_free);
  pg->local_free = b;
}

// Carves more blocks from the span (16 KiB worth, at least one) onto the free list; false when
// the span is carved whole.
bool page_extend(page* pg) noexcept;
// A block of pg came back (page_flag::clean): its memory is no longer known to be zero.
inline void page_unclean(page* pg) noexcept {
  if (flags_of(pg) & page_flag::clean) flags_clear(pg, page_flag::clean);
}
// The page's local frees join h's counters (the fast path counts them in the page).
inline void page_fold_frees(heap* h, page* pg) noexcept {
  if (pg->frees) {
    h->free_count[pg->size_class].add(pg->frees);
    pg->frees = 0;
  }
}
// Moves the page's local_free and thread_free lists onto its free list and adds its counted
// local frees to h's counters; returns the number of blocks that came from thread_free.
uint32_t page_collect(heap* h, page* pg) noexcept;
// Pushes the chain head..tail of blocks of pg (another heap's page) onto its thread_free list
// and tells the owner, if any.
void page_push_remote(page* pg, block* head, block* tail) noexcept;

}  // namespace strata::detail
