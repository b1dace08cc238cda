// The strata_* entry points: every allocation function a program can reach, with C/POSIX/glibc
// semantics, built on the fast paths in alloc.h.
#include "core/alloc.h"

#include <cerrno>
#include <cstring>

#include "core/init.h"
#include "core/segment.h"
#include "core/errors.h"
#include "os/os.h"
#include "strata/strata.h"

namespace strata::detail {

STRATA_NOINLINE void* malloc_huge(size_t size, size_t alignment) noexcept {
  global_init();
  // What other threads freed of this thread's counts as free before new memory is mapped
  // (huge_alloc gives back free memory first when it maps).
  if (heap* h = tl_heap; h != &empty_heap) collect_remote_all(h);
  return huge_alloc(size, alignment);
}

namespace {

// An aligned allocation that hands out a pointer inside its block leaves a mark in the block's
// first 16 bytes (which the user's data, starting at least 16 bytes in, never covers): the free
// canary, and as its link the pointer handed out, which no free block's link is (a link names a
// block start or nothing; this points inside the block).  Only that pointer can free the block
// (find_block).  The canary sends a free of the block's own start, never handed out, from free's
// fast path to the slow path with the test that catches a double free, and the slow path refuses
// it: with a tag of its own the fast path took the start for a live block and put the aligned
// block, still in use, back on the free list.
bool aligned_marked(const page* pg, const block* b) noexcept {
  uintptr_t d = reinterpret_cast<uintptr_t>(b->next) - reinterpret_cast<uintptr_t>(b);
  return b->canary == canary_of(b) && d - 1 < pg->block_size - 1;  // 0 < d < block size
}

enum class lookup_status { ok, invalid, huge, freed_huge };

struct lookup {
  lookup_status status;
  segment* seg;
  page* pg;
  block* b;  // the block start (differs from p for aligned pointers)
  bool aligned = false;  // p is the pointer an aligned allocation handed out inside b (live)
};

// Finds the block p points to, or says why p is not a live strata block.
lookup find_block(segment* seg, void* p) noexcept {
  if (seg == nullptr) {
    seg = huge_segment_containing(p);
    if (seg == nullptr) return {lookup_status::invalid, nullptr, nullptr, nullptr};
  }
  if (seg->kind != segment_kind::normal) {
    if (p != seg->pages[0].start) return {lookup_status::invalid, seg, nullptr, nullptr};
    auto status = seg->kind == segment_kind::huge ? lookup_status::huge : lookup_status::freed_huge;
    return {status, seg, nullptr, static_cast<block*>(p)};
  }
  page* pg = page_of(seg, p);
  if (pg == nullptr) return {lookup_status::invalid, seg, nullptr, nullptr};
  uint8_t flags = flags_of(pg);
  if (!(flags & page_flag::in_use)) return {lookup_status::invalid, seg, pg, nullptr};
  size_t offset = static_cast<size_t>(static_cast<uint8_t*>(p) - pg->start);
  if (!is_carved_block_start(pg, offset)) {
    // An aligned allocation may hand out a pointer inside its block.
    // Its block carries the mark alloc_aligned left (or, once freed, the free canary: the
    // caller reports the double free); any other interior pointer is refused.
    if (!(flags & page_flag::has_aligned)) return {lookup_status::invalid, seg, pg, nullptr};
    offset -= offset % pg->block_size;
    if (!is_carved_block_start(pg, offset)) return {lookup_status::invalid, seg, pg, nullptr};
    auto* b = reinterpret_cast<block*>(pg->start + offset);
    // Marked, only the pointer handed out frees it; unmarked and free, the caller reports the
    // double free.
    bool marked = aligned_marked(pg, b);
    if (marked ? b->next != static_cast<block*>(p) : b->canary != canary_of(b))
      return {lookup_status::invalid, seg, pg, nullptr};
    return {lookup_status::ok, seg, pg, b, marked};
  }
  if ((flags & page_flag::has_aligned) && aligned_marked(pg, static_cast<block*>(p))) {
    // The start of a block that an aligned allocation handed out further in: not a pointer
    // strata returned (freed, it gave the live aligned block back to the free list).
    return {lookup_status::invalid, seg, pg, nullptr};
  }
  return {lookup_status::ok, seg, pg, static_cast<block*>(p)};
}

void free_remote(page* pg, block* b, bool counted = false) noexcept {
  size_t cls = pg->size_class;
  b->canary = canary_of(b);
  heap* h = tl_heap;
  if (h != &empty_heap) {
    if (!counted) {
      h->free_count[cls].add();
      h->remote_frees.add();
    }
    remote_free_batched(h, pg, b);
  } else {
    if (!counted) {
      g_retired.free_count[cls].fetch_add(1, std::memory_order_relaxed);
      g_retired.remote_frees.fetch_add(1, std::memory_order_relaxed);
    }
    page_push_remote(pg, b, b, 1);
  }
}

// A block the lookup found that is free already (its canary says so), or a cached huge mapping.
bool is_freed(const lookup& l) noexcept {
  if (l.status == lookup_status::freed_huge) return true;
  return l.status == lookup_status::ok && !l.aligned && l.b->canary == canary_of(l.b);
}

// A block alone in its page, which has not been handed out since its span came clean from the
// OS (page_flag::clean): its bytes are all zero.
bool block_is_clean(const void* p) noexcept {
  page* pg = page_lookup(p);
  return pg != nullptr && (flags_of(pg) & page_flag::clean);
}

// A block that realloc grows past this size moves to a huge mapping of its own (strata_realloc).
constexpr size_t realloc_huge_min = size_t{1} << 20;

// (Not std::has_single_bit: without -mpopcnt that is a call into libgcc.)
inline bool is_power_of_two(size_t x) noexcept { return x != 0 && (x & (x - 1)) == 0; }

// The usable size of p when it is the start of a live block in a page of blocks, by free's
// fast-path test (carved, and not carrying the free canary, which also marks the start of a
// block that an aligned allocation handed out further in); 0 otherwise, where find_block
// decides.  realloc in place and malloc_usable_size of a plain block: about 40 instructions
// fewer than the full lookup.
inline size_t live_block_usable(const void* p) noexcept {
  page* pg = page_lookup(p);
  return pg != nullptr && is_live_block_start(pg, static_cast<const block*>(p)) ? pg->block_size : 0;
}

size_t usable_of(const lookup& l, const void* p) noexcept {
  if (l.status == lookup_status::huge) return l.seg->huge_size;
  return l.pg->block_size - static_cast<size_t>(static_cast<const uint8_t*>(p) - reinterpret_cast<uint8_t*>(l.b));
}

}  // namespace

STRATA_NOINLINE void free_of_idle_page(void* p) noexcept {
  report_bad_free(p, "double free (the block was written after its first free) of");
}

STRATA_NOINLINE void free_slow(void* p) noexcept {
  if (p == nullptr) return;
  segment* seg = segment_of(p);
  lookup l = find_block(map_has_segment(seg) ? seg : nullptr, p);
  switch (l.status) {
    case lookup_status::invalid:
      if (!huge_was_freed(p)) {
        report_bad_free(p, "free of a pointer strata did not allocate:");
        return;
      }
      [[fallthrough]];  // a huge block unmapped since its free
    case lookup_status::freed_huge:
      report_bad_free(p, "double free of the huge block");
      return;
    case lookup_status::huge:
      huge_free(l.seg);
      return;
    case lookup_status::ok:
      break;
  }
  block* b = l.b;
  if (is_freed(l)) {
    report_bad_free(p, "double free of");
    return;
  }
  free_block(l.pg, b);
}

namespace {
// free_block's cases other than a put into the calling heap's foreign cache (free_block tested
// for that one; a heap made here is frees_only, which takes none).
STRATA_NOINLINE void free_block_other(page* pg, block* b, bool from_foreign, heap* h, heap* owner) noexcept {
  segment* seg = segment_of(b);
  // A thread's first free of a live heap's block, before its first allocation (a consumer): it
  // takes a heap, so that its frees go back to each page as a chain with one CAS (heap::remote)
  // instead of one CAS (and two shared counters) per block.  Its heap holds no foreign blocks
  // until the thread allocates: it would reuse none of them.  prodcon (every free remote, one at
  // a time): 1.24x [1.19-1.27], with pages' remote lists counted (page.h remote_count) and 64 KiB
  // pending; with the foreign cache as the sorter instead, 1.21x at 64 KiB held, 1.32x at 256 KiB
  // but 1.12x the peak RSS.
  // So does its first free of an exited thread's block (owner nullptr): only a thread with a heap
  // sweeps an abandoned segment (below).  Without one, a thread that never allocated and freed
  // everything 10 000 exited threads had left (a reclaimer, a consumer of short-lived producers)
  // left all of it committed and resident (2.8 GB after freeing 2.7 GB), until some thread
  // happened to need a new segment or called malloc_trim.
  if (h == &empty_heap && !from_foreign) {
    if (heap* mine = heap_get_or_create()) {
      h = mine;
      h->frees_only = true;
      // The heap may be the owner's own: its thread exited after `owner` was read (the segment
      // abandoned) and heap_acquire handed its heap, dead now, to this thread.  Taken as the
      // owner's still, the block was pushed on local_free of an abandoned segment's page,
      // unlocked, and the page's events ran against a heap whose lists do not hold it.
      owner = seg->owner.load(std::memory_order_acquire);
    }
  }
  // A block of an exited thread's segment: it waits on its page's remote list, and each time a
  // quarter of what the segment holds has been freed into it, the freeing thread sweeps it (its
  // emptied pages' spans go back to it, then to the OS after the delay), so what the exited
  // thread left is not kept until some thread happens to need a new segment.  The segment stays
  // abandoned for the next thread that needs one: taking it over at the first free made
  // threads that free what earlier generations left (mstress) pass segments back and forth,
  // at 2.4x mimalloc's peak RSS and 4x its faults.
  // seg is read before b is pushed, never after: b keeps its page, and so seg, in use until
  // then.  Once pushed, another thread may adopt seg (strata_collect(true), a new span), find it
  // empty, release it and unmap it; the sweep's read of seg after the push was a SIGSEGV (a
  // freeing thread beside one calling strata_collect(true) while threads exit).  A sweep pushes
  // under the abandoned list's lock (segment_sweep), which keeps seg listed, and so mapped.
  if (owner == nullptr && h != &empty_heap) {
    if (!segment_freed_into(seg, pg->block_size)) return free_remote(pg, b, from_foreign);
    struct pending {
      heap* h;
      page* pg;
      block* b;
      bool counted;
    } push{h, pg, b, from_foreign};
    // h's own pending frees into seg reach its pages too, so that the sweep collects them.
    segment_sweep(h, seg, [](void* arg) {
      auto* p = static_cast<pending*>(arg);
      free_remote(p->pg, p->b, p->counted);
      remote_flush(p->h);
    }, &push);
    return;
  }
  if (owner == h) {
    if constexpr (secure)
      if (STRATA_UNLIKELY(pg->used == 0)) return free_of_idle_page(b);  // as free_inline
    page_push_local(pg, b);
    if (!from_foreign) h->free_count[pg->size_class].add();
    if (--pg->used == 0 || (flags_of(pg) & page_flag::in_full)) page_local_event(h, pg);
  } else {
    free_remote(pg, b, from_foreign);
  }
}
}  // namespace

// The common case first, with tail calls only (no frame): another live heap's block of up to
// 2 KiB, freed by a thread that allocates, goes to its foreign cache.  With every case in one
// function (a frame of five registers) and the trim inside foreign_put, this took ~50
// instructions in the two functions (cachegrind, larson); ~40 now, none of them a push or pop.
STRATA_NOINLINE void free_block(page* pg, block* b, bool from_foreign) noexcept {
  heap* h = tl_heap;
  // Acquire: pairs with the release that abandoned the segment, after its last owner's writes.
  heap* owner = segment_of(b)->owner.load(std::memory_order_acquire);
  if (!secure && STRATA_LIKELY(owner != h && owner != nullptr && !from_foreign && h != &empty_heap &&
                               pg->block_size <= foreign_block_max && !h->frees_only &&
                               !heap_idle_beside(owner, h)))
    return foreign_put(h, pg, b);
  free_block_other(pg, b, from_foreign, h, owner);
}

void* alloc_aligned(size_t alignment, size_t size) noexcept {
  // Only operator new with an std::align_val_t that is no power of two (undefined in C++) gets
  // here with one: refused, as libstdc++'s over glibc's aligned_alloc refuses it (bad_alloc).
  // The tables below are by the alignment's power of two.  Tested before the small alignments'
  // shortcut, which served 0, 3, 5-7 and 9-15 as malloc.
  if (STRATA_UNLIKELY(!is_power_of_two(alignment))) {
    errno = EINVAL;
    return nullptr;
  }
  if (alignment <= min_block) return malloc_inline(size);
  if (size <= small_table_max && alignment <= (size_t{1} << aligned_small_shift_max) && size != 0)
    if (size_t s = aligned_small.size[std::countr_zero(alignment) - aligned_shift_min][(size + 15) >> 4])
      return malloc_inline(s);
  if (size <= huge_min) {
    // Blocks laid out a multiple of the alignment apart sit aligned in their 64 KiB-aligned page
    // already, except a one-block page's block, which starts a colour (64-byte steps) in.  The
    // first such class from the size up serves (aligned_classes), where its block is no larger
    // than the over-allocation below would take: posix_memalign(64, 100) gets a 128-byte block,
    // not one of 192 with the mark, whose free then takes free's slow path (an interior
    // pointer).  Only the size's own class was tried before: alignas(32) objects of 48 bytes and
    // posix_memalign(64, 65..255) took the marked path.
    size_t want = size < alignment ? alignment : size;
    if (alignment <= slice_size && want <= huge_min) {
      size_t c = aligned_classes.next[std::countr_zero(alignment) - aligned_shift_min][size_class_of(want)];
      size_t over = size + alignment - 1;
      if (c < size_class_count && (over > huge_min || c <= size_class_of(over))) return malloc_inline(class_size(c));
    }
    if (size + alignment - 1 <= huge_min) {
      void* p = malloc_inline(size + alignment - 1);
      if (p == nullptr) return nullptr;
      auto a = (reinterpret_cast<uintptr_t>(p) + alignment - 1) & ~(alignment - 1);
      if (a != reinterpret_cast<uintptr_t>(p)) {
        segment* seg = segment_of(p);
        page* pg = page_of(seg, p);
        // The page is the calling heap's (malloc just served it): the owner writes flags.  A
        // thread whose heap is gone (still &empty_heap after a malloc that succeeded) shares
        // the orphan heap's pages with the other exiting threads: under its lock.
        if (!(flags_of(pg) & page_flag::has_aligned)) {
          if (STRATA_UNLIKELY(tl_heap == &empty_heap))
            orphan_page_flags_set(pg, page_flag::has_aligned);
          else
            flags_set(pg, page_flag::has_aligned);
        }
        auto* b = static_cast<block*>(p);
        b->next = reinterpret_cast<block*>(a);
        b->canary = canary_of(b);  // the mark (aligned_marked)
      }
      return reinterpret_cast<void*>(a);
    }
  }
  return malloc_huge(size, alignment);
}

}  // namespace strata::detail

using namespace strata::detail;

STRATA_EXPORT void* strata_malloc(size_t size) { return malloc_inline(size); }
STRATA_EXPORT void strata_free(void* p) { free_inline(p); }
STRATA_EXPORT void strata_free_sized(void* p, size_t) { free_inline(p); }
STRATA_EXPORT void strata_free_aligned_sized(void* p, size_t, size_t) { free_inline(p); }

STRATA_EXPORT void* strata_calloc(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (bytes > huge_min) {
    global_init();
    return huge_calloc(bytes);
  }
  void* p = malloc_inline(bytes);
  if (p == nullptr) return nullptr;
  // A block alone in a page whose span was fresh from the OS (or purged) is zero already: calloc
  // need not write it (faulting every page in), and treats its pages as a huge block's fresh ones.
  if (bytes > one_block_page_min && block_is_clean(p)) calloc_clean_block(p, bytes);
  else memset(p, 0, bytes);
  return p;
}

STRATA_EXPORT size_t strata_usable_size(const void* p) {
  // The page map keeps an address's low address_bits only: past them, p would pass for the
  // block at those bits, and its canary would be read at p (a fault).  No block of strata's is
  // there (strata_alloc::usable_size promises 0 for any pointer not strata's, however wild).
  if (p == nullptr || reinterpret_cast<uintptr_t>(p) >> address_bits != 0) return 0;
  if (size_t usable = live_block_usable(p)) return usable;
  segment* seg = segment_of(p);
  lookup l = find_block(map_has_segment(seg) ? seg : nullptr, const_cast<void*>(p));
  if (l.status == lookup_status::invalid || is_freed(l)) return 0;
  return usable_of(l, p);
}

STRATA_EXPORT void* strata_realloc(void* p, size_t size) {
  if (p == nullptr) return malloc_inline(size);
  if (size == 0) {  // glibc: frees and returns NULL
    free_inline(p);
    return nullptr;
  }
  size_t usable = live_block_usable(p);
  if (usable == 0) {
    segment* seg = segment_of(p);
    lookup l = find_block(map_has_segment(seg) ? seg : nullptr, p);
    if (l.status == lookup_status::invalid || is_freed(l)) {
      // A freed block must not come back: it is on a free list (or in the huge cache).
      bool freed = is_freed(l) || huge_was_freed(p);
      report_bad_free(p, freed ? "realloc of the freed block" : "realloc of a pointer strata did not allocate:");
      errno = EINVAL;
      return nullptr;
    }
    // A huge block grows or shrinks in its own mapping (mremap: pages move, never copied).
    if (l.status == lookup_status::huge && size > realloc_huge_min / 2) {
      int saved = errno;
      if (void* q = huge_realloc(l.seg, size)) return q;
      // Growth the kernel would not give in place or by moving the pages: out of memory, or
      // mremap refused for good (a seccomp filter: EPERM, ENOSYS), where every huge growth
      // answered NULL with memory to spare.  A new block and a copy, as glibc's realloc does;
      // out of memory, that fails too.
      errno = saved;
    }
    usable = usable_of(l, p);
  }
  if (size <= usable && size >= usable / 2) return p;  // fits without wasting half
  // A block that grows by less than half takes half again as much: a buffer grown in small
  // steps (a string or array appended to, a file read piece by piece) moved at every size
  // class, four a doubling, and was copied about five times its final size; with the headroom,
  // twice.  Buffers of 16-512 B steps up to 256 KiB (the patterns suite's realloc): 1.91x
  // [1.75-1.98] / 2.05x [2.02-2.15] at 1/2 threads, peak RSS 0.84x (fewer blocks left behind
  // half-used); the real programs' peak RSS and time unchanged (docs/design.md).  tcmalloc
  // grows by a quarter at least, rpmalloc by 37.5 %.
  size_t want = size > usable && size < usable + usable / 2 ? usable + usable / 2 : size;
  int saved = errno;
  void* q;
  if (size > usable && size > realloc_huge_min) {
    // A block growing past realloc_huge_min moves to a mapping of its own, with the same
    // headroom, so that further growth is an mremap (a buffer grown step by step to 64 MiB is
    // not copied at every size class).
    global_init();
    q = huge_alloc(want, 0);
  } else {
    q = malloc_inline(want);
  }
  if (q == nullptr) {
    if (size > usable) return nullptr;  // p is untouched, errno = ENOMEM
    errno = saved;  // a shrink needs no memory: p, which fits (glibc never fails one)
    return p;
  }
  memcpy(q, p, size < usable ? size : usable);
  free_inline(p);
  return q;
}

STRATA_EXPORT void* strata_reallocarray(void* p, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return strata_realloc(p, bytes);
}

STRATA_EXPORT int strata_posix_memalign(void** out, size_t alignment, size_t size) {
  if (!is_power_of_two(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  int saved = errno;
  void* p = alloc_aligned(alignment, size);
  errno = saved;
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

STRATA_EXPORT void* strata_aligned_alloc(size_t alignment, size_t size) {
  if (!is_power_of_two(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return alloc_aligned(alignment, size);
}

STRATA_EXPORT void* strata_memalign(size_t alignment, size_t size) {
  // glibc: a non-power-of-two alignment is rounded up to the next power of two.
  if (alignment > (SIZE_MAX >> 1) + 1) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_power_of_two(alignment)) alignment = alignment <= 1 ? 1 : size_t{1} << (64 - __builtin_clzll(alignment - 1));
  return alloc_aligned(alignment, size);
}

STRATA_EXPORT void* strata_valloc(size_t size) { return alloc_aligned(strata::os::page_size(), size); }

STRATA_EXPORT void* strata_pvalloc(size_t size) {
  size_t ps = strata::os::page_size();
  size_t rounded = size == 0 ? ps : (size + ps - 1) & ~(ps - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return nullptr;
  }
  return alloc_aligned(ps, rounded);
}

STRATA_EXPORT void strata_collect(bool force) {
  if (force) orphan_trim();
  heap* h = force ? heap_get_or_create() : tl_heap;
  if (h == nullptr || h == &empty_heap) return;
  heap_trim(h, force);
}
