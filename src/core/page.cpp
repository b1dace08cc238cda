// Pages: carving blocks, collecting frees, remote pushes (page.h).
#include "core/page.h"

#include "core/check.h"

namespace strata::detail {

bool page_extend(page* pg) noexcept {
  if (pg->capacity >= pg->reserved) return false;
  uint32_t bs = pg->block_size;
  uint32_t n = bs >= 16384 ? 1 : 16384 / bs;
  uint32_t room = static_cast<uint32_t>(pg->reserved - pg->capacity);
  if (n > room) n = room;
  uint8_t* first = pg->start + static_cast<size_t>(pg->capacity) * bs;
  block* b = reinterpret_cast<block*>(first);
  for (uint32_t i = 1; i < n; ++i) {
    block* nb = reinterpret_cast<block*>(first + static_cast<size_t>(i) * bs);
    b->next = nb;
    b = nb;
  }
  b->next = pg->free;
  pg->free = reinterpret_cast<block*>(first);
  pg->capacity = static_cast<uint16_t>(pg->capacity + n);
  pg->block_bound.store(block_bound_of(bs, pg->capacity), std::memory_order_relaxed);
  return true;
}

uint32_t page_collect(heap* h, page* pg) noexcept {
  page_fold_frees(h, pg);
  if (block* lf = pg->local_free) {
    pg->local_free = nullptr;
    if (pg->free != nullptr) {
      block* tail = lf;
      while (tail->next) tail = tail->next;
      tail->next = pg->free;
    }
    pg->free = lf;
  }
  block* tf = pg->thread_free.exchange(nullptr, std::memory_order_acquire);
  if (tf == nullptr) return 0;
  page_unclean(pg);
  uint32_t n = 1;
  block* tail = tf;
  while (tail->next) {
    tail = tail->next;
    ++n;
  }
  tail->next = pg->free;
  pg->free = tf;
  STRATA_ASSERT(pg->used >= n);
  pg->used -= n;
  STRATA_ASSERT_EXPENSIVE(page_is_valid(pg));
  return n;
}

void page_push_remote(page* pg, block* head, block* tail) noexcept {
  heap* owner = segment_of(pg)->owner.load(std::memory_order_acquire);
  size_t cls = pg->size_class;
  block* old = pg->thread_free.load(std::memory_order_relaxed);
  do {
    tail->next = old;
  } while (!pg->thread_free.compare_exchange_weak(old, head, std::memory_order_release, std::memory_order_relaxed));
  // Heaps are never unmapped, so the hint is safe even if the owner exited meanwhile.  Read
  // first: a store to a hint already set would still take the owner's cache line.
  if (owner && !owner->remote_hint[cls].load(std::memory_order_relaxed))
    owner->remote_hint[cls].store(1, std::memory_order_release);
}

}  // namespace strata::detail
