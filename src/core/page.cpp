// Pages: carving blocks, collecting frees, remote pushes (page.h).
#include "core/page.h"

#include <cstdlib>

#include "core/check.h"
#include "core/errors.h"
#include "core/options.h"
#include "core/report.h"

namespace strata::detail {

namespace {
// Hardened build: a per-thread xorshift generator for the carving order, seeded from the
// process secret and the thread.
__thread uint64_t tl_shuffle __attribute__((tls_model("initial-exec"))) = 0;
uint64_t shuffle_next() noexcept {
  uint64_t x = tl_shuffle;
  if (x == 0) x = (g_secret ^ thread_id()) | 1;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  tl_shuffle = x;
  return x;
}

// Links the n blocks from `first` (block size bs) in front of pg's free list, in address order
// (plain build: the next allocations walk memory forwards), or in a random order, each block
// with its free canary (hardened build: an attacker cannot predict which block comes next, and
// every pop can check the canary).
void carve(page* pg, uint8_t* first, uint32_t n, uint32_t bs) noexcept {
  auto at = [&](uint32_t i) { return reinterpret_cast<block*>(first + static_cast<size_t>(i) * bs); };
  if constexpr (!secure) {
    block* b = at(0);
    for (uint32_t i = 1; i < n; ++i) {
      b->next = at(i);
      b = at(i);
    }
    b->next = pg->free;
    pg->free = at(0);
  } else {
    uint16_t order[16384 / 16];  // n <= 16 KiB / min_block
    for (uint32_t i = 0; i < n; ++i) order[i] = static_cast<uint16_t>(i);
    for (uint32_t i = n; i > 1; --i) {
      uint32_t j = static_cast<uint32_t>(shuffle_next() % i);
      uint16_t t = order[i - 1];
      order[i - 1] = order[j];
      order[j] = t;
    }
    for (uint32_t i = 0; i < n; ++i) {
      block* b = at(order[i]);
      b->canary = canary_of(b);
      link_set(pg, b, pg->free);
      pg->free = b;
    }
  }
}
}  // namespace

bool page_extend(page* pg) noexcept {
  if (pg->capacity >= pg->reserved) return false;
  uint32_t bs = pg->block_size;
  uint32_t n = bs >= 16384 ? 1 : 16384 / bs;
  uint32_t room = static_cast<uint32_t>(pg->reserved - pg->capacity);
  if (n > room) n = room;
  // The bound first: carve's links must already count as carved blocks of the page.
  pg->capacity = static_cast<uint16_t>(pg->capacity + n);
  pg->block_bound.store(block_bound_of(bs, pg->capacity), std::memory_order_relaxed);
  carve(pg, pg->start + static_cast<size_t>(pg->capacity - n) * bs, n, bs);
  return true;
}

void page_corrupted(const page* pg, const block* b) noexcept {
  report::message("strata: error: free list of the page at %p corrupted at the block %p (a write after free, or "
                  "an overflow from the block before it); aborting\n",
                  static_cast<const void*>(pg->start), static_cast<const void*>(b));
  abort();
}

uint32_t page_collect(heap* h, page* pg) noexcept {
  page_fold_frees(h, pg);
  if (block* lf = pg->local_free) {
    pg->local_free = nullptr;
    if (pg->free != nullptr) {
      block* tail = lf;
      while (block* next = link_get(pg, tail)) tail = next;
      link_set(pg, tail, pg->free);
    }
    pg->free = lf;
  }
  block* tf = pg->thread_free.exchange(nullptr, std::memory_order_acquire);
  if (tf == nullptr) return 0;
  page_unclean(pg);
  uint32_t n = 1;
  block* tail = tf;
  while (block* next = link_get(pg, tail)) {
    if constexpr (secure)
      if (!link_is_valid(pg, next) || n > pg->capacity) page_corrupted(pg, tail);
    tail = next;
    ++n;
  }
  link_set(pg, tail, pg->free);
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
    link_set(pg, tail, old);
  } while (!pg->thread_free.compare_exchange_weak(old, head, std::memory_order_release, std::memory_order_relaxed));
  // Heaps are never unmapped, so the hint is safe even if the owner exited meanwhile.  Read
  // first: a store to a hint already set would still take the owner's cache line.
  if (owner && !owner->remote_hint[cls].load(std::memory_order_relaxed))
    owner->remote_hint[cls].store(1, std::memory_order_release);
}

}  // namespace strata::detail
