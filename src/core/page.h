// Pages: the operations on one page's free lists, below heaps and segments: malloc's and free's
// fast paths (alloc.h) and the slow paths' carving, collecting and remote pushes, all inline;
// page.cpp holds the hardened build's carving order and its report of a corrupted list.
#pragma once
#include "core/assert.h"
#include "core/check.h"
#include "core/types.h"

namespace strata::detail {

// The hardened build found a free list corrupted at a pop: reports and aborts.
[[noreturn]] void page_corrupted(const page* pg, const block* b) noexcept;

// Is next (a link just decoded, or a list's head) a carved block start of pg, or the list's end?
inline bool link_is_valid(const page* pg, const block* next) noexcept {
  if (next == nullptr) return true;
  auto offset = static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(next) - pg->start);
  return offset < uint64_t{pg->capacity} * pg->block_size && is_carved_block_start(pg, offset);
}

// `used` and `frees` as the one word the fast paths change (types.h, page).
using page_count_word = uint64_t __attribute__((may_alias));
inline page_count_word* page_counts(page* pg) noexcept { return reinterpret_cast<page_count_word*>(&pg->used); }
// A block handed out: used + 1.
inline void page_count_pop(page* pg) noexcept { *page_counts(pg) += 1; }
// The owner freed a block: used - 1 and frees + 1 in one add (used > 0: the borrow out of the
// low half is the high half's increment).  True when the page has no block out any more.
inline bool page_count_local_free(page* pg) noexcept {
  uint64_t w = *page_counts(pg) + 0xffffffffu;
  *page_counts(pg) = w;
  return static_cast<uint32_t>(w) == 0;
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
    page_count_pop(pg);
  }
  return b;
}

// The owner's free of b: onto local_free, marked free (the canary).  The caller counts it and
// decrements pg->used (page_count_local_free).
inline void page_push_local(page* pg, block* b) noexcept {
  STRATA_ASSERT_INTERNAL(pg->used > 0);
  b->canary = canary_of(b);  // first: free's fast path has just read g_secret for its test
  link_set(pg, b, pg->local_free);
  pg->local_free = b;
}

// Hardened build: the next number of the thread's xorshift generator (seeded from getrandom at
// the thread's first carve, independent of the process secret), for the carving order.
uint64_t shuffle_next() noexcept;

// Links the n blocks from `first` (block size bs) in front of pg's free list, in address order
// (plain build: the next allocations walk memory forwards), or in a random order, each block
// with its free canary (hardened build: an attacker cannot predict which block comes next, and
// every pop can check the canary).
inline void page_carve(page* pg, uint8_t* first, uint32_t n, uint32_t bs) noexcept {
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
    // Hardened: the n blocks are cut into `runs` runs of consecutive blocks (16, or fewer so
    // that each has two or more), and each next block is taken from a random run, the runs
    // read forwards.  The next allocation is one of up to 16 blocks, not one known one, while
    // blocks allocated together stay near each other: a full shuffle of the 16 KiB made
    // CPython (every object through malloc) 0.63x as fast as the plain build, 16 runs 0.79x
    // (docs/security.md).  Runs as mimalloc's secure mode cuts them.
    uint32_t runs = 16;
    while (runs > 1 && n < 2 * runs) runs /= 2;
    uint32_t left[16], next[16];  // per run: blocks not yet linked, its next block from the end
    for (uint32_t r = 0; r < runs; ++r) {
      uint32_t from = static_cast<uint32_t>(uint64_t{n} * r / runs), to = static_cast<uint32_t>(uint64_t{n} * (r + 1) / runs);
      left[r] = to - from;
      next[r] = to;
    }
    uint64_t rnd = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (i % 16 == 0) rnd = shuffle_next();
      uint32_t r = static_cast<uint32_t>(rnd >> (4 * (i % 16))) & (runs - 1);
      while (left[r] == 0) r = (r + 1) & (runs - 1);
      --left[r];
      // Linked at the front, so the list reads each run from its start: take from the end.
      block* b = at(--next[r]);
      b->canary = canary_of(b);
      link_set(pg, b, pg->free);
      pg->free = b;
    }
  }
}
// Carves more blocks from the span onto the free list: 4 KiB worth the first time (plain build),
// 16 KiB worth after (at least one block); false when the span is carved whole.  The carve
// writes a link into every block it carves, so it faults its memory in: a thread that uses a
// class for a few blocks only (a pool's thread holding one block of each of 40 small sizes)
// faulted in 16 KiB of each class's page, 312 KiB a thread (mimalloc 2: 188 KiB; now 144 KiB).
// The second carve costs a page one more slow call (E1's tiny band: about 1 %, within the noise).
inline bool page_extend(page* pg) noexcept {
  if (pg->capacity >= pg->reserved) return false;
  uint32_t bs = pg->block_size;
  // Hardened build: 16 KiB from the first, which docs/security.md's carving order is cut from.
  uint32_t carve_bytes = pg->capacity == 0 && !secure ? 4096 : 16384;
  uint32_t n = bs >= carve_bytes ? 1 : carve_bytes / bs;
  uint32_t room = static_cast<uint32_t>(pg->reserved - pg->capacity);
  if (n > room) n = room;
  // The bound first: carve's links must already count as carved blocks of the page.
  pg->capacity = static_cast<uint16_t>(pg->capacity + n);
  pg->block_bound.store(block_bound_of(bs, pg->capacity), std::memory_order_relaxed);
  page_carve(pg, pg->start + static_cast<size_t>(pg->capacity - n) * bs, n, bs);
  return true;
}


// A block of pg came back: its memory is no longer known to be zero (page_flag::clean), and the
// page was in use since the last purge pass (page_flag::idle).
inline void page_block_back(page* pg) noexcept {
  if (flags_of(pg) & (page_flag::clean | page_flag::idle)) flags_clear(pg, page_flag::clean | page_flag::idle);
}
// The page's local frees join h's counters (the fast path counts them in the page).
inline void page_fold_frees(heap* h, page* pg) noexcept {
  if (pg->frees) {
    h->free_count[pg->size_class].add(pg->frees);
    pg->frees = 0;
  }
}
// A page's thread_free word: the head of the chain of blocks other threads freed into it, and
// the chain's length in the top 16 bits (a page holds at most 65535 blocks; user addresses are
// below 2^47).  Each push adds its chain's length, so the owner learns how many blocks it
// collects without walking the chain: the blocks were just written by the freeing threads, and
// walking them took each cache line over from the freeing core, one dependent miss after another
// (prodcon's producer spent 22 % of its time in that loop).
constexpr int remote_count_shift = 48;
inline block* remote_head(uintptr_t w) noexcept {
  return reinterpret_cast<block*>(w & ((uintptr_t{1} << remote_count_shift) - 1));
}
inline uint32_t remote_count(uintptr_t w) noexcept { return static_cast<uint32_t>(w >> remote_count_shift); }

// No block of pg is out, none on its way back: its span may go back to its segment.
inline bool page_is_empty(const page* pg) noexcept {
  return pg->used == 0 && pg->thread_free.load(std::memory_order_relaxed) == 0;
}

// Whether pg has a remote chain waiting that brings back every block still out: collected, the
// page is empty.
inline bool page_chain_empties(const page* pg) noexcept {
  uintptr_t w = pg->thread_free.load(std::memory_order_relaxed);
  return w != 0 && remote_count(w) >= pg->used;
}

// The last block of the chain from b.  Hardened: each link checked as a pop checks it, else an
// overwritten link (a write after free into a block on local_free) decoded to garbage and the
// walk followed it out of the page, a fault with no report instead of page_corrupted's abort.
inline block* chain_tail(const page* pg, block* b) noexcept {
  while (block* next = link_get(pg, b)) {
    if constexpr (secure)
      if (STRATA_UNLIKELY(!link_is_valid(pg, next))) page_corrupted(pg, b);
    b = next;
  }
  return b;
}

// Moves the page's thread_free list to it and adds its counted local frees to h's counters;
// returns the number of blocks that came from thread_free.  Afterwards the page has a free block
// if and only if `free` is not empty.  No chain is walked on the common path: with `free` empty
// (a page that ran dry) the collected chain becomes it; otherwise the chain goes onto
// local_free, behind what is there.
// Lazy (the allocation paths, which only need a page with a free block): a page with blocks on
// both lists keeps its chain on thread_free until it runs dry, when the chain becomes `free`
// without a walk.  Appended, the chain went behind local_free's end, and local_free is often the
// chain an earlier collection put there (a page the owner allocates from while another thread
// frees its blocks): each collection walked the earlier chains, lines the other core had
// written, one dependent miss a block (a producer whose consumer frees its blocks of 17 sizes:
// 13 % of the producer's time in collect_remote_hinted, 93 % of that on the walk).  The page is
// on its class's queue (it has free blocks), so a walk reaches it.  A chain that brings every
// block back is collected still: the page is empty, and its span goes back (a thread that moved
// on to other sizes would keep it until it allocated this one again).
inline uint32_t page_collect(heap* h, page* pg, bool lazy = false) noexcept {
  page_fold_frees(h, pg);
  if (lazy && pg->free != nullptr && pg->local_free != nullptr && !page_chain_empties(pg)) return 0;
  // Read before the exchange: most pages a walk visits have no chain, and a plain load of the
  // line the walk reads anyway spares them the locked instruction.
  uintptr_t w = pg->thread_free.load(std::memory_order_relaxed);
  if (w != 0) w = pg->thread_free.exchange(0, std::memory_order_acquire);
  block* tf = remote_head(w);
  uint32_t n = 0;
  if (tf != nullptr) {
    n = remote_count(w);
    page_block_back(pg);
    if constexpr (secure) {  // hardened: the chain's links and length checked before any is used
      uint32_t k = 1;
      for (block* b = tf; block* next = link_get(pg, b); b = next)
        if (!link_is_valid(pg, next) || ++k > n) page_corrupted(pg, b);
      if (k != n) page_corrupted(pg, tf);
    }
    STRATA_ASSERT(pg->used >= n);
    pg->used -= n;
  }
  block* lf = pg->local_free;
  if (tf != nullptr) {
    if (pg->free == nullptr) {
      pg->free = tf;
    } else if (lf == nullptr) {
      lf = tf;
    } else {
      link_set(pg, chain_tail(pg, lf), tf);
    }
  }
  if (lf != nullptr && pg->free == nullptr) {
    pg->free = lf;
    lf = nullptr;
  }
  pg->local_free = lf;
  STRATA_ASSERT_EXPENSIVE(page_is_valid(pg));
  return n;
}

// Pushes the chain head..tail of n blocks of pg (another heap's page) onto its thread_free list
// and tells the owner, if any.
inline void page_push_remote(page* pg, block* head, block* tail, uint32_t n) noexcept {
  segment* seg = segment_of(pg);
  heap* owner = seg->owner.load(std::memory_order_acquire);
  size_t cls = pg->size_class;
  // Read before the push: once pushed, the owner may take the block back and the page with it.
  // The flag cannot change before that: only the owner clears it, when the block is back.
  bool loose = flags_of(pg) & page_flag::loose;
  STRATA_ASSERT_INTERNAL((reinterpret_cast<uintptr_t>(head) >> remote_count_shift) == 0);
  uintptr_t old = pg->thread_free.load(std::memory_order_relaxed);
  uintptr_t pushed;
  do {
    link_set(pg, tail, remote_head(old));
    pushed = reinterpret_cast<uintptr_t>(head) |
             ((old & ~((uintptr_t{1} << remote_count_shift) - 1)) + (uintptr_t{n} << remote_count_shift));
  } while (!pg->thread_free.compare_exchange_weak(old, pushed, std::memory_order_release, std::memory_order_relaxed));
  if (owner == nullptr) return;
  // Heaps are never unmapped, so the hint is safe even if the owner exited meanwhile.  Read
  // first: a store to a hint already set would still take the owner's cache line.
  std::atomic<uint8_t>* hint = &owner->remote_hint[cls];
  if (STRATA_UNLIKELY(loose)) {
    // A loose page is on no list the owner walks: its bit in the segment says where it is.  The
    // bit after the push, then the hint, the bit's update and the hint's load sequentially
    // consistent: if this load finds the hint set, the owner's exchange of it (collect_remote_
    // loose, also sequentially consistent) comes later and its walk sees the bit; if not, the
    // hint stored here (release: after the bit) waits for the next collection.
    size_t idx = slice_index(seg, pg);
    seg->loose_remote[idx / 64].fetch_or(uint64_t{1} << (idx % 64), std::memory_order_seq_cst);
    hint = &owner->remote_loose;
    if (!hint->load(std::memory_order_seq_cst)) {
      hint->store(1, std::memory_order_release);
      if (!owner->remote_any.load(std::memory_order_relaxed)) owner->remote_any.store(1, std::memory_order_release);
    }
    return;
  }
  if (!hint->load(std::memory_order_relaxed)) {
    hint->store(1, std::memory_order_release);
    if (!owner->remote_any.load(std::memory_order_relaxed)) owner->remote_any.store(1, std::memory_order_release);
  }
}


}  // namespace strata::detail
