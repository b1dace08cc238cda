// Invariant checkers (check.h).
#include "core/check.h"

#include "core/page.h"
#include "core/report.h"
#include "strata/strata.h"

namespace strata::detail {

namespace {
bool broken(const char* what, const void* where) noexcept {
  report::message("strata: invariant broken: %s (%p)\n", what, where);
  return false;
}

// Blocks on a list of pg, or -1 when one is not a carved block start of pg or the list is
// longer than the page's capacity (a cycle).  With `freed`, each must carry the free canary.
long list_length(const page* pg, const block* b, bool freed) noexcept {
  long n = 0;
  for (; b != nullptr; b = link_get(pg, b)) {
    if (!link_is_valid(pg, b)) return -1;
    if (freed && b->canary != canary_of(b)) return -1;
    if (++n > pg->capacity) return -1;
  }
  return n;
}
}  // namespace

bool page_is_valid(const page* pg) noexcept {
  uint8_t flags = flags_of(pg);
  if (!(flags & page_flag::in_use)) return broken("page not in use", pg);
  if (pg->capacity > pg->reserved) return broken("page carved past its span", pg);
  if (pg->block_bound.load(std::memory_order_relaxed) != block_bound_of(pg->block_size, pg->capacity))
    return broken("page block bound does not match its capacity", pg);
  long free_n = list_length(pg, pg->free, secure);  // hardened: carving sets canaries too
  if (free_n < 0) return broken("page free list holds a stray block or a cycle", pg);
  long local_n = list_length(pg, pg->local_free, true);
  if (local_n < 0) return broken("page local_free list holds a stray, unmarked or cyclic block", pg);
  if (free_n + local_n + pg->used != pg->capacity) {
    uintptr_t w = pg->thread_free.load(std::memory_order_relaxed);
    report::message("strata: page %p: %ld free, %ld local_free, %u used, %u carved of %u, %u remote waiting, flags %#x\n",
                    static_cast<const void*>(pg), free_n, local_n, pg->used, unsigned{pg->capacity},
                    unsigned{pg->reserved}, remote_count(w), unsigned{flags});
    return broken("page block counts do not add up to its capacity", pg);
  }
  bool full_bit = pg->owner_tid.load(std::memory_order_relaxed) & owner_tid_full;
  if (full_bit != ((flags & page_flag::in_full) != 0)) return broken("page in_full flag and owner word disagree", pg);
  return true;
}

bool segment_is_valid(const segment* seg) noexcept {
  if (seg->kind != segment_kind::normal) return broken("segment is not a normal segment", seg);
  auto is_free = [seg](size_t i) { return (seg->free_bits[i / 64] >> (i % 64)) & 1; };
  for (size_t i = 0; i < header_slices; ++i)
    if (is_free(i)) return broken("segment header slice marked free", seg);
  auto* s = const_cast<segment*>(seg);
  size_t used = 0;
  for (size_t idx = header_slices; idx < slices_per_segment;) {
    const page* pg = &seg->pages[idx];
    if (!(flags_of(pg) & page_flag::in_use)) {
      bool guard = secure && idx == slices_per_segment - 1;  // the hardened build's guard slice
      if (!is_free(idx) && !guard) return broken("segment slice neither free nor in a span", slice_address(s, idx));
      if (page_map_ready() && page_lookup(slice_address(s, idx)) != nullptr)
        return broken("page map names a page for a free slice", slice_address(s, idx));
      ++idx;
      continue;
    }
    size_t n = pg->slice_count;
    if (n == 0 || idx + n > slices_per_segment) return broken("span runs past its segment", pg);
    for (size_t k = idx; k < idx + n; ++k) {
      if (is_free(k)) return broken("slice of a span marked free", slice_address(s, k));
      if (page_map_ready() && page_lookup(slice_address(s, k)) != pg)
        return broken("page map entry does not name its span's page", slice_address(s, k));
    }
    used += n;
    idx += n;
  }
  if (used != seg->used_slices) return broken("segment used_slices does not match its spans", seg);
  return true;
}

bool heap_is_valid(const heap* h) noexcept {
  size_t listed = 0, spare_bytes = 0;
  for (size_t c = 0; c < size_class_count; ++c) {
    size_t spares = 0;
    if (h->direct[c] != &empty_page && !is_foreign_stand_in(h, c, h->direct[c]) && h->direct[c] != h->queue[c].first)
      return broken("direct page is not first in its queue", h->direct[c]);
    for (const page_list* l : {&h->queue[c], &h->full[c]}) {
      bool full = l == &h->full[c];
      const page* prev = nullptr;
      for (const page* pg = l->first; pg; prev = pg, pg = pg->next) {
        if (pg->prev != prev) return broken("page list links disagree", pg);
        if (pg->size_class != c) return broken("page on another class's list", pg);
        if (((flags_of(pg) & page_flag::in_full) != 0) != full) return broken("in_full flag disagrees with the list", pg);
        if (segment_of(pg)->owner.load(std::memory_order_relaxed) != h) return broken("listed page of another heap's segment", pg);
        if ((pg->owner_tid.load(std::memory_order_relaxed) & ~owner_tid_full) != h->tid)
          return broken("page owner word is not its heap's thread", pg);
        if (!page_is_valid(pg)) return false;
        if (flags_of(pg) & page_flag::spare) {
          if (full) return broken("spare page on the full list", pg);
          ++spares;
          spare_bytes += size_t{pg->slice_count} << slice_shift;
        }
        ++listed;
      }
      if (l->last != prev) return broken("page list's last link is wrong", l);
    }
    if (spares != h->spare_count[c]) return broken("spare count disagrees with the pages flagged spare", h);
  }
  for (size_t m = 0; m <= bin_slices_max; ++m) {
    size_t kept = h->bin_count[m];
    if (kept > bin_length_max) return broken("bin holds more spans than its bound", h);
    if ((kept != 0) != ((h->bin_mask[m / 64] >> (m % 64)) & 1)) return broken("bin count and mask disagree", h);
    for (size_t i = 0; i < kept; ++i) {
      const block* b = h->bins[m][i];
      const page* pg = slice_page(b);
      // The bins find a kept span's page from its block (heap.cpp kept_page): the block must lie
      // in the span's first slice, whose page the page map names.
      if (page_map_ready() && page_lookup(b) != pg) return broken("bin holds a block outside its span's first slice", b);
      if (pg->slice_count != m || pg->reserved != 1) return broken("bin holds a page of another span length", pg);
      if (h->bin_class[m][i] != pg->size_class) return broken("bin's class of a page disagrees with the page", pg);
      if (b != (pg->free ? pg->free : pg->local_free)) return broken("bin's block of a page is not the page's free block", pg);
      if ((flags_of(pg) & (page_flag::spare | page_flag::in_full | page_flag::loose)) != page_flag::spare || !page_is_empty(pg))
        return broken("bin holds a page in use", pg);
      if (segment_of(pg)->owner.load(std::memory_order_relaxed) != h) return broken("bin page of another heap's segment", pg);
      ++listed;
      spare_bytes += size_t{pg->slice_count} << slice_shift;
    }
  }
  if (spare_bytes != h->spare_bytes) return broken("spare bytes disagree with the pages flagged spare", h);
  if (spare_bytes > spare_budget) return broken("spare pages hold more than the spare budget", h);
  for (size_t i = 0; i < small_slots; ++i)
    if (h->direct_small[i] != h->direct[small_classes.cls[i]]) return broken("direct page by size and by class differ", h);
  size_t in_use = 0, loose = 0;
  for (const segment* seg = h->segments; seg; seg = seg->next) {
    if (seg->owner.load(std::memory_order_relaxed) != h) return broken("heap's segment owned by another", seg);
    if (!segment_is_valid(seg)) return false;
    for (size_t idx = header_slices; idx < slices_per_segment;) {
      const page* pg = &seg->pages[idx];
      if (!(flags_of(pg) & page_flag::in_use)) {
        ++idx;
        continue;
      }
      if (flags_of(pg) & page_flag::loose) {
        // On no list: a one-block page whose block is out (or on its way back).
        if (pg->reserved != 1 || (flags_of(pg) & (page_flag::in_full | page_flag::spare)) || pg->used != 1)
          return broken("loose page that is not a one-block page with its block out", pg);
        ++loose;
      }
      ++in_use;
      idx += pg->slice_count;
    }
  }
  if (in_use != listed + loose) return broken("pages in use in the heap's segments are not all on its lists or loose", h);
  return true;
}

}  // namespace strata::detail

STRATA_EXPORT bool strata_heap_check(void) {
  using namespace strata::detail;
  return tl_heap == &empty_heap || heap_is_valid(tl_heap);
}
