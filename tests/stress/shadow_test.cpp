// Randomized operations checked against a shadow model (issues 13 and 14).
//
// Each thread runs a fixed-seed stream of operations over a table of slots.  Every live block is
// recorded in the shadow (requested size, usable size, alignment asked for, how it was made, a
// tag) and filled over its whole usable size with a pattern derived from the tag, so that
// any overlap, stray write or lost content shows up at the next check: the pattern is verified
// before every free and every realloc, realloc must keep the prefix, calloc must return zeroes,
// malloc_usable_size must stay what it was at allocation (and not below the request), every
// result must carry the alignment asked for.  Blocks move between threads (cross-thread frees and
// reallocs), the last ones are freed after their threads have exited, and the calling thread's
// heap invariants are checked every few thousand operations (strata_heap_check).
//
// Built twice (tests/stress/CMakeLists.txt): through the strata_* API (also under ASan/UBSan, and
// TSan, in the Debug build with strata's invariant checkers), and with libstrata.a replacing the
// standard names, where each operation picks the standard name or its strata_* twin at random and
// operator new/delete join the mix.  The per-thread operation streams are fixed by the seed; how
// transfers interleave is up to the scheduler.  STRATA_SHADOW_OPS=N sets the operations per
// test, STRATA_SHADOW_SEED=S adds a seed (both for reproducing or longer runs by hand).
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"

#ifndef STRATA_SHADOW_API
#define STRATA_SHADOW_API 1
#endif

#if !STRATA_SHADOW_API
// glibc 2.36 declares neither; bound by symbol name so a newer glibc's declaration cannot clash.
extern "C" void shadow_free_sized(void*, size_t) __asm__("free_sized");
extern "C" void shadow_free_aligned_sized(void*, size_t, size_t) __asm__("free_aligned_sized");
#endif

namespace {

// Operations per test (shared by its threads): a million in the release build, where a test
// takes 3-6 s of CPU (the checks cost more than the allocator); an operation costs about 4x that
// under ASan/UBSan with the Debug build's invariant checkers, 10x under TSan.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(NDEBUG)
constexpr uint64_t default_ops = 150'000;
constexpr uint64_t check_every = 2'000;
#else
constexpr uint64_t default_ops = 1'000'000;
constexpr uint64_t check_every = 20'000;
#endif

uint64_t ops_per_test() {
  const char* v = getenv("STRATA_SHADOW_OPS");
  return v ? strtoull(v, nullptr, 10) : default_ops;
}

// ---- the entry points -------------------------------------------------------------------------

struct entry_points {
  const char* name;
  void* (*malloc)(size_t);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void* (*reallocarray)(void*, size_t, size_t);
  void (*free)(void*);
  void (*free_sized)(void*, size_t);
  void (*free_aligned_sized)(void*, size_t, size_t);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  void* (*memalign)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  size_t (*usable)(const void*);
};

const entry_points strata_names = {
    "strata_*",           strata_malloc,        strata_calloc,        strata_realloc,
    strata_reallocarray,  strata_free,          strata_free_sized,    strata_free_aligned_sized,
    strata_posix_memalign, strata_aligned_alloc, strata_memalign,     strata_valloc,
    strata_pvalloc,       strata_usable_size};

#if !STRATA_SHADOW_API
const entry_points standard_names = {
    "standard",
    [](size_t n) { return malloc(n); },
    [](size_t c, size_t n) { return calloc(c, n); },
    [](void* p, size_t n) { return realloc(p, n); },
    [](void* p, size_t c, size_t n) { return reallocarray(p, c, n); },
    [](void* p) { free(p); },
    [](void* p, size_t n) { shadow_free_sized(p, n); },
    [](void* p, size_t a, size_t n) { shadow_free_aligned_sized(p, a, n); },
    [](void** out, size_t a, size_t n) { return posix_memalign(out, a, n); },
    [](size_t a, size_t n) { return aligned_alloc(a, n); },
    [](size_t a, size_t n) { return memalign(a, n); },
    [](size_t n) { return valloc(n); },
    [](size_t n) { return pvalloc(n); },
    [](const void* p) { return malloc_usable_size(const_cast<void*>(p)); }};
#endif

// ---- the shadow -------------------------------------------------------------------------------

// How a block was made decides how it may be freed: free/free_sized/realloc for the malloc
// family, free/free_aligned_sized for the aligned forms, the matching delete for new.
enum class origin : uint8_t { malloc_family, aligned, cxx_new, cxx_new_array, cxx_new_aligned };

struct shadow_block {
  unsigned char* p = nullptr;
  size_t size = 0;    // requested
  size_t usable = 0;  // malloc_usable_size at allocation
  size_t align = 0;   // alignment asked for (0: the default, 16)
  uint64_t tag = 0;   // seeds the fill pattern
  origin from = origin::malloc_family;
};

inline uint64_t pattern_word(uint64_t tag, size_t i) { return tag ^ (i * 0x9e3779b97f4a7c15ull); }

// Where a block of n bytes carries its pattern: all of it up to dense_max; beyond, its first and
// last 4 KiB and one word in every 256 bytes between (what a neighbour overlapping by 256 bytes
// or more, or a stray write in the ends, must hit), so that megabyte blocks cost little.
constexpr size_t dense_max = 16 << 10, dense_ends = 4 << 10, sparse_step = 256;

template <typename Fn>
void for_each_pattern_span(size_t n, Fn&& fn) {  // fn(begin, end), begin a multiple of 8
  if (n <= dense_max) return fn(size_t{0}, n);
  fn(size_t{0}, dense_ends);
  size_t tail = (n - dense_ends) & ~size_t{7};
  for (size_t at = dense_ends; at < tail; at += sparse_step) fn(at, at + 8);
  fn(tail, n);
}

void fill(unsigned char* p, size_t n, uint64_t tag) {
  for_each_pattern_span(n, [&](size_t begin, size_t end) {
    size_t at = begin;
    for (; at + 8 <= end; at += 8) {
      uint64_t w = pattern_word(tag, at / 8);
      memcpy(p + at, &w, 8);
    }
    uint64_t w = pattern_word(tag, at / 8);
    memcpy(p + at, &w, end - at);
  });
}

// The first byte below limit of the pattern a block of n bytes was filled with (fill(p, n, tag))
// that differs, or limit.
size_t first_mismatch(const unsigned char* p, size_t n, size_t limit, uint64_t tag) {
  size_t bad = limit;
  auto check = [&](size_t at, size_t len) {  // len <= 8
    uint64_t want = pattern_word(tag, at / 8), have = 0;
    memcpy(&have, p + at, len);
    if (len < 8) want &= (uint64_t{1} << (8 * len)) - 1;
    if (have == want) return true;
    bad = at + static_cast<size_t>(__builtin_ctzll(have ^ want)) / 8;
    return false;
  };
  for_each_pattern_span(n, [&](size_t begin, size_t end) {
    if (end > limit) end = limit;
    if (bad != limit || begin >= end) return;
    size_t at = begin;
    for (; at + 8 <= end; at += 8)
      if (!check(at, 8)) return;
    if (at < end) check(at, end - at);
  });
  return bad;
}

// The first failure stops every thread; its message names seed, thread and operation.
std::atomic<bool> g_failed{false};
std::mutex g_failure_lock;
std::string g_failure;

void record_failure(const std::string& what) {
  std::lock_guard<std::mutex> g(g_failure_lock);
  if (g_failure.empty()) g_failure = what;
  g_failed.store(true);
}

class worker;

// A handful of threads that hand blocks to one another.
struct shared_state {
  std::vector<worker*> workers;
};

class worker {
 public:
  worker(uint64_t seed, unsigned index, shared_state& shared)
      : seed_(seed), index_(index), rng_(seed * 1000003 + index), shared_(shared), slots_(1024) {}

  void run(uint64_t ops) {
    for (op_ = 0; op_ < ops && !g_failed.load(std::memory_order_relaxed); ++op_) {
      if ((op_ & 31) == 0) adopt_inbox();
      if (op_ % check_every == check_every - 1) heap_check();
      if (rng_() % 256 == 0) {
        edge_case();
        continue;
      }
      shadow_block& b = slots_[rng_() % slots_.size()];
      if (b.p == nullptr) {
        allocate(b);
        continue;
      }
      unsigned r = rng_() % 100;
      if (r < 40) release(b);
      else if (r < 65) reallocate(b);
      else if (r < 72 && shared_.workers.size() > 1) hand_over(b);
      else if (r < 90) check_usable(b);
      else rewrite(b);
    }
  }

  // Frees whatever the table and the inbox still hold (verified).
  void release_all() {
    adopt_inbox();
    for (shadow_block& b : slots_)
      if (b.p) release(b);
    heap_check();
  }

  uint64_t allocations() const { return allocations_; }

  // Blocks other threads handed over: appended under the lock, adopted by the owner.
  std::mutex inbox_lock;
  std::vector<shadow_block> inbox;

 private:
  // ---- reporting ----
  __attribute__((format(printf, 2, 3))) void fail(const char* fmt, ...) {
    char buf[512];
    int n = snprintf(buf, sizeof buf, "seed %" PRIu64 ", thread %u, operation %" PRIu64 " (%s names): ", seed_,
                     index_, op_, api_ ? api_->name : "-");
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf + n, sizeof buf - n, fmt, args);
    va_end(args);
    record_failure(buf);
  }

  // Checks b's pattern below limit (the kept prefix after a realloc; all of it by default).
  bool verify(const shadow_block& b, const char* when, size_t limit = SIZE_MAX) {
    if (limit > b.usable) limit = b.usable;
    size_t bad = first_mismatch(b.p, b.usable, limit, b.tag);
    if (bad == limit) return true;
    fail("%s: block %p (size %zu, usable %zu, alignment %zu, origin %d) differs from its pattern at byte %zu",
         when, static_cast<void*>(b.p), b.size, b.usable, b.align, static_cast<int>(b.from), bad);
    return false;
  }

  // Records a fresh block in b: checks alignment and usable size, fills it.
  bool take(shadow_block& b, void* p, size_t size, size_t align, origin from, const char* how) {
    if (p == nullptr) {
      fail("%s(%zu, alignment %zu) returned NULL", how, size, align);
      return false;
    }
    size_t want = align > 16 ? align : 16;
    if (reinterpret_cast<uintptr_t>(p) % want != 0) {
      fail("%s(%zu, alignment %zu) returned %p, not %zu-aligned", how, size, align, p, want);
      return false;
    }
    size_t usable = api_->usable(p);
    if (usable < size) {
      fail("%s(%zu, alignment %zu) returned %p with usable size %zu", how, size, align, p, usable);
      return false;
    }
    b = {static_cast<unsigned char*>(p), size, usable, align, next_tag(), from};
    fill(b.p, b.usable, b.tag);
    allocations_++;
    return true;
  }

  uint64_t next_tag() { return rng_() | 1; }

  const entry_points& pick_api() {
#if STRATA_SHADOW_API
    api_ = &strata_names;
#else
    api_ = rng_() % 2 ? &standard_names : &strata_names;
#endif
    return *api_;
  }

  size_t random_size() {
    unsigned r = rng_() % 1000;
    if (r < 600) return rng_() % 129;                                 // tiny (0 included)
    if (r < 850) return 129 + rng_() % (4096 - 129);                  // small
    if (r < 960) return 4096 + rng_() % ((64 << 10) - 4096);          // medium
    if (r < 985) return (64 << 10) + rng_() % ((1 << 20) - (64 << 10));  // large
    if (r < 999) {                                                    // at the boundaries
      static constexpr size_t edges[] = {1024, 1025, 16 << 10, (64 << 10) - 1, 64 << 10, (128 << 10) - 1,
                                         128 << 10, (128 << 10) + 1, 1 << 20, (1 << 20) + 1, 4 << 20,
                                         (4 << 20) + 1};
      return edges[rng_() % (sizeof edges / sizeof edges[0])];
    }
    return (4 << 20) + rng_() % (4 << 20);                            // huge
  }

  size_t random_alignment() {
    unsigned r = rng_() % 100;
    if (r < 70) return size_t{16} << (rng_() % 5);   // 16..256
    if (r < 95) return size_t{512} << (rng_() % 8);  // 512..64 KiB
    return size_t{128 << 10} << (rng_() % 5);        // 128 KiB..2 MiB
  }

  // ---- operations ----
  void allocate(shadow_block& b) {
    const entry_points& e = pick_api();
    size_t size = random_size();
    switch (rng_() % 12) {
      case 0:
      case 1:
      case 2: take(b, e.malloc(size), size, 0, origin::malloc_family, "malloc"); return;
      case 3: {
        size_t count = 1 + rng_() % 8, each = size / count;
        void* p = e.calloc(count, each);
        if (!take_zeroed(b, p, count * each, "calloc")) return;
        return;
      }
      case 4: take(b, e.realloc(nullptr, size), size, 0, origin::malloc_family, "realloc(NULL)"); return;
      case 5: {
        size_t count = 1 + rng_() % 4, each = size / count;
        take(b, e.reallocarray(nullptr, count, each), count * each, 0, origin::malloc_family, "reallocarray(NULL)");
        return;
      }
      case 6: {
        size_t align = random_alignment();
        void* p = nullptr;
        int rc = e.posix_memalign(&p, align, size);
        if (rc != 0) {
          fail("posix_memalign(%zu, %zu) returned %d", align, size, rc);
          return;
        }
        take(b, p, size, align, origin::aligned, "posix_memalign");
        return;
      }
      case 7: {
        size_t align = rng_() % 4 == 0 ? size_t{1} << (rng_() % 4) : random_alignment();  // 1, 2, 4, 8 too
        take(b, e.aligned_alloc(align, size), size, align, origin::aligned, "aligned_alloc");
        return;
      }
      case 8: {
        // memalign rounds an alignment that is not a power of two up to the next one (glibc).
        size_t align = random_alignment(), asked = rng_() % 4 == 0 ? align - align / 4 : align;
        take(b, e.memalign(asked, size), size, align, origin::aligned, "memalign");
        return;
      }
      case 9: {
        size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        if (rng_() % 2) {
          take(b, e.valloc(size), size, page, origin::aligned, "valloc");
        } else if (take(b, e.pvalloc(size), size, page, origin::aligned, "pvalloc")) {
          size_t rounded = size == 0 ? page : (size + page - 1) / page * page;
          if (b.usable < rounded) fail("pvalloc(%zu): usable size %zu, below %zu", size, b.usable, rounded);
        }
        return;
      }
      default: allocate_cxx(b, size); return;
    }
  }

  bool take_zeroed(shadow_block& b, void* p, size_t size, const char* how) {
    if (p != nullptr) {
      auto* c = static_cast<unsigned char*>(p);
      for (size_t i = 0; i < size; ++i)
        if (c[i] != 0) {
          fail("%s(%zu bytes) returned %p, whose byte %zu is %d, not zero", how, size, p, i, c[i]);
          return false;
        }
    }
    return take(b, p, size, 0, origin::malloc_family, how);
  }

  void allocate_cxx(shadow_block& b, size_t size) {
#if STRATA_SHADOW_API
    take(b, api_->malloc(size), size, 0, origin::malloc_family, "malloc");
#else
    api_ = &standard_names;
    switch (rng_() % 4) {
      case 0: take(b, ::operator new(size), size, 0, origin::cxx_new, "operator new"); return;
      case 1: take(b, ::operator new[](size), size, 0, origin::cxx_new_array, "operator new[]"); return;
      case 2: take(b, ::operator new(size, std::nothrow), size, 0, origin::cxx_new, "operator new(nothrow)"); return;
      default: {
        size_t align = size_t{32} << (rng_() % 8);
        take(b, ::operator new(size, std::align_val_t{align}), size, align, origin::cxx_new_aligned,
             "operator new(align_val_t)");
        return;
      }
    }
#endif
  }

  void release(shadow_block& b) {
    if (!verify(b, "before free")) return;
    const entry_points& e = pick_api();
    unsigned r = rng_() % 4;
    switch (b.from) {
      case origin::malloc_family:
        if (r == 0) {
          e.free_sized(b.p, b.size);
        } else if (r == 1) {
          if (e.realloc(b.p, 0) != nullptr) fail("realloc(p, 0) returned a block (glibc frees, returns NULL)");
        } else {
          e.free(b.p);
        }
        break;
      case origin::aligned:
        if (r == 0) e.free_aligned_sized(b.p, b.align, b.size);
        else e.free(b.p);
        break;
#if !STRATA_SHADOW_API
      case origin::cxx_new:
        if (r % 2) ::operator delete(b.p, b.size);
        else ::operator delete(b.p);
        break;
      case origin::cxx_new_array:
        if (r % 2) ::operator delete[](b.p, b.size);
        else ::operator delete[](b.p);
        break;
      case origin::cxx_new_aligned:
        if (r % 2) ::operator delete(b.p, b.size, std::align_val_t{b.align});
        else ::operator delete(b.p, std::align_val_t{b.align});
        break;
#else
      default: fail("operator new's block in the API build"); return;
#endif
    }
    b.p = nullptr;
  }

  void reallocate(shadow_block& b) {
    if (b.from != origin::malloc_family && b.from != origin::aligned) return check_usable(b);
    if (!verify(b, "before realloc")) return;
    const entry_points& e = pick_api();
    // Mostly small steps (in place or the next classes), sometimes anywhere.
    size_t size = rng_() % 2 ? random_size() : b.size + b.size / 4 - rng_() % (b.size / 2 + 1);
    size_t keep = size < b.size ? size : b.size;
    void* p = rng_() % 4 ? e.realloc(b.p, size) : e.reallocarray(b.p, 1, size);
    if (p == nullptr) {
      if (size == 0) {  // freed (glibc)
        b.p = nullptr;
        return;
      }
      fail("realloc(%p, %zu) returned NULL", static_cast<void*>(b.p), size);
      return;
    }
    shadow_block moved = b;
    moved.p = static_cast<unsigned char*>(p);
    if (!verify(moved, "after realloc (the kept prefix)", keep)) return;
    take(b, p, size, 0, origin::malloc_family, "realloc");
  }

  void check_usable(shadow_block& b) {
    size_t u = pick_api().usable(b.p);
    if (u != b.usable) fail("usable size of %p is %zu, was %zu at allocation", static_cast<void*>(b.p), u, b.usable);
  }

  // Writes a new pattern over the block (after checking the old one).
  void rewrite(shadow_block& b) {
    if (!verify(b, "before rewriting")) return;
    b.tag = next_tag();
    fill(b.p, b.usable, b.tag);
  }

  void hand_over(shadow_block& b) {
    worker* to = shared_.workers[rng_() % shared_.workers.size()];
    if (to == this) return;
    {
      std::lock_guard<std::mutex> g(to->inbox_lock);
      to->inbox.push_back(b);
    }
    b.p = nullptr;
  }

  // Takes over the blocks handed to this thread: into an empty slot, or freed at once.
  void adopt_inbox() {
    std::vector<shadow_block> got;
    {
      std::lock_guard<std::mutex> g(inbox_lock);
      got.swap(inbox);
    }
    for (shadow_block& b : got) {
      shadow_block& slot = slots_[rng_() % slots_.size()];
      if (slot.p == nullptr) {
        if (verify(b, "handed over")) slot = b;
      } else {
        release(b);
      }
    }
  }

  void heap_check() {
    if (!strata_heap_check()) fail("strata_heap_check failed (its message is on stderr)");
  }

  // Rare cases with a defined answer: errors, zero sizes, the statistics and options API.
  void edge_case() {
    const entry_points& e = pick_api();
    constexpr size_t impossible = SIZE_MAX / 2;
    switch (rng_() % 10) {
      case 0: {
        errno = 0;
        void* p = e.malloc(impossible);
        if (p != nullptr || errno != ENOMEM) fail("malloc(SIZE_MAX/2) gave %p, errno %d", p, errno);
        return;
      }
      case 1: {
        errno = 0;
        void* p = e.calloc(SIZE_MAX / 8, 16);
        if (p != nullptr || errno != ENOMEM) fail("calloc overflow gave %p, errno %d", p, errno);
        return;
      }
      case 2: {
        void* p = reinterpret_cast<void*>(0x1);
        int rc = e.posix_memalign(&p, 24, 64);
        if (rc != EINVAL || p != reinterpret_cast<void*>(0x1)) fail("posix_memalign(24) returned %d", rc);
        errno = 0;
        void* q = e.aligned_alloc(48, 64);
        if (q != nullptr || errno != EINVAL) fail("aligned_alloc(48) gave %p, errno %d", q, errno);
        return;
      }
      case 3: {
        // A failed realloc leaves the block as it was.
        shadow_block& b = slots_[rng_() % slots_.size()];
        if (b.p == nullptr || (b.from != origin::malloc_family && b.from != origin::aligned)) return;
        errno = 0;
        void* p = e.realloc(b.p, impossible);
        if (p != nullptr || errno != ENOMEM) fail("realloc(p, SIZE_MAX/2) gave %p, errno %d", p, errno);
        verify(b, "after a failed realloc");
        return;
      }
      case 4:
        e.free(nullptr);
        if (e.usable(nullptr) != 0) fail("malloc_usable_size(NULL) is not 0");
        return;
      case 5: {
        strata_stats_t s;
        strata_stats_get(&s);
        if (s.reserved_bytes < s.committed_bytes)
          fail("statistics: committed %" PRIu64 " beyond reserved %" PRIu64, s.committed_bytes, s.reserved_bytes);
        char small[16];
        size_t need = strata_stats_json(small, sizeof small);
        if (need < sizeof small || small[sizeof small - 1] != '\0') fail("strata_stats_json: needs %zu", need);
        return;
      }
      case 6: {
        char buf[4096];
        size_t need = strata_options_json(buf, sizeof buf);
        if (need == 0 || need >= sizeof buf || buf[0] != '{') fail("strata_options_json: needs %zu", need);
        if (strata_version() == nullptr) fail("strata_version() is NULL");
        return;
      }
      case 7: {
        shadow_block& b = slots_[rng_() % slots_.size()];
        if (b.p == nullptr) return;
        int node = strata_numa_node_of(b.p);
        if (node < -1 || node >= strata_numa_node_count()) fail("strata_numa_node_of: node %d", node);
        return;
      }
      case 8: strata_collect(rng_() % 16 == 0); return;
      default: {
        // malloc(0): a unique pointer that can be freed.
        void* p = e.malloc(0);
        if (p == nullptr) fail("malloc(0) returned NULL");
        e.free(p);
        return;
      }
    }
  }

  uint64_t seed_;
  unsigned index_;
  std::mt19937_64 rng_;
  shared_state& shared_;
  std::vector<shadow_block> slots_;
  uint64_t op_ = 0;
  uint64_t allocations_ = 0;
  const entry_points* api_ = nullptr;
};

struct totals {
  uint64_t mallocs, frees, in_use, bad_frees;
};
totals read_totals() {
  strata_stats_t s;
  strata_stats_get(&s);
  return {s.malloc_count, s.free_count, s.in_use_bytes, s.bad_free_count};
}

// Runs `threads` workers with one seed; the leftovers are freed by this thread after they exit.
void run_shadow(uint64_t seed, unsigned threads) {
  g_failed = false;
  g_failure.clear();
  totals before = read_totals();
  shared_state shared;
  std::vector<std::unique_ptr<worker>> workers;
  for (unsigned i = 0; i < threads; ++i) workers.push_back(std::make_unique<worker>(seed, i, shared));
  for (auto& w : workers) shared.workers.push_back(w.get());
  uint64_t ops = ops_per_test() / threads;
  if (threads == 1) {
    workers[0]->run(ops);
  } else {
    std::vector<std::thread> running;
    for (auto& w : workers) running.emplace_back([&w, ops] { w->run(ops); });
    for (auto& t : running) t.join();
  }
  // What the exited threads still held, freed here: frees into their abandoned segments.
  for (auto& w : workers) w->release_all();
  ASSERT_FALSE(g_failed.load()) << g_failure;
  totals after = read_totals();
  EXPECT_EQ(after.bad_frees, before.bad_frees);
  uint64_t allocations = 0;
  for (auto& w : workers) allocations += w->allocations();
  EXPECT_GE(allocations, ops * threads / 4) << "too few allocations: the operation mix is off";
#if STRATA_SHADOW_API
  // Nothing else in this process calls strata: every block made was freed, and counted so.
  EXPECT_EQ(after.in_use - before.in_use, 0u);
  EXPECT_EQ(after.mallocs - before.mallocs, after.frees - before.frees);
#endif
}

std::vector<uint64_t> seeds() {
  std::vector<uint64_t> s = {1, 2};
  if (const char* v = getenv("STRATA_SHADOW_SEED")) s.push_back(strtoull(v, nullptr, 10));
  return s;
}

class Shadow : public ::testing::TestWithParam<uint64_t> {};

TEST_P(Shadow, OneThread) { run_shadow(GetParam(), 1); }
TEST_P(Shadow, FourThreadsHandingBlocksOver) { run_shadow(GetParam(), 4); }

INSTANTIATE_TEST_SUITE_P(Seeds, Shadow, ::testing::ValuesIn(seeds()));

#if !STRATA_SHADOW_API
TEST(ShadowOverride, MallocIsStrata) {
  uint64_t before = read_totals().mallocs;
  void* p = malloc(100);
  ASSERT_NE(p, nullptr);
  EXPECT_GT(read_totals().mallocs, before);
  EXPECT_GE(strata_usable_size(p), 100u);
  free(p);
}
#endif

}  // namespace
