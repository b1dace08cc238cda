// A huge block's remap against another thread's mapping (ed94917).  huge_resize cleared the old
// range's marks in the segment map after mremap had given the range back: a huge block that
// another thread mapped there in between lost its mark, and strata no longer knew it (its usable
// size read 0, its free was reported as a pointer strata did not allocate).  The shadow stress
// test hit that window once in CI; 80 reruns did not.  This binary opens the window on demand: it
// defines mmap and mremap itself, so the strata_api library linked in calls these (the program's
// own definitions come first; glibc's internal calls, gtest's and the thread library's, do not),
// and the move makes another thread map its block in the range just given back, exactly there.
// Not built with the sanitizers: their runtimes map their own memory through mmap.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "core/types.h"
#include "strata/strata.h"
#include "test_support.h"

namespace {

constexpr size_t MiB = size_t{1} << 20;

// What the interposed calls do while a test arms them.
std::atomic<bool> refuse_in_place{false};  // mremap without MREMAP_MAYMOVE fails (a move follows)
std::atomic<bool> refuse_move{false};      // mremap with MREMAP_MAYMOVE fails too
std::atomic<void*> steer_to{nullptr};      // the next mmap(nullptr, n) with n <= steer_len goes here
std::atomic<size_t> steer_len{0};
std::atomic<int> refused{0};               // the mremap calls refused so far
// A move (MREMAP_FIXED, no resize) of more bytes than this fails with EFAULT, as before Linux 6.17
// for a range of several kernel mappings (0: none refused).
std::atomic<size_t> refuse_moves_over{0};
std::function<void(void* old, size_t old_size)> after_move;  // runs once the old range is free

void* syscall_result(long r) { return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r); }

using strata_test::stats;

void fill(void* p, size_t n, unsigned char seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; i += 4096) b[i] = static_cast<unsigned char>(seed + i / 4096);
  b[n - 1] = seed;
}

bool holds(const void* p, size_t n, unsigned char seed) {
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; i += 4096)
    if (b[i] != static_cast<unsigned char>(seed + i / 4096) && i != n - 1) return false;
  return b[n - 1] == seed;
}

}  // namespace

extern "C" void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) noexcept {
  void* want = steer_to.load();
  if (addr == nullptr && want != nullptr && len <= steer_len.load() &&
      steer_to.compare_exchange_strong(want, nullptr)) {
    addr = want;
    flags |= MAP_FIXED_NOREPLACE;
  }
  return syscall_result(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}

extern "C" void* mremap(void* old, size_t old_size, size_t new_size, int flags, ...) noexcept {
  void* target = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    target = va_arg(ap, void*);
    va_end(ap);
  }
  bool moves = flags & MREMAP_MAYMOVE;
  if ((!moves && refuse_in_place) || (moves && refuse_move)) {
    refused.fetch_add(1);
    return errno = ENOMEM, MAP_FAILED;
  }
  size_t over = refuse_moves_over.load();
  if ((flags & MREMAP_FIXED) && old_size == new_size && over != 0 && old_size > over) {
    refused.fetch_add(1);
    return errno = EFAULT, MAP_FAILED;
  }
  void* to = syscall_result(syscall(SYS_mremap, old, old_size, new_size, flags, target));
  if (moves && to != MAP_FAILED && after_move) std::exchange(after_move, nullptr)(old, old_size);
  return to;
}

// The move's window: once the block's pages are at their new address, another thread maps a huge
// block where they were.  Both blocks stay known to strata, and whole.
TEST(HugeRemap, AnotherThreadsMappingInTheRangeAMoveGaveBack) {
  // Another thread, its heap made before any steering (its first mappings go where they would).
  strata_test::worker other;
  other.run([] { strata_free(strata_malloc(64)); });
  constexpr size_t first = 40 * MiB, grown = 80 * MiB, theirs = 20 * MiB;
  void* p = strata_malloc(first);
  ASSERT_NE(p, nullptr);
  fill(p, first, 7);
  auto old_start = reinterpret_cast<uintptr_t>(p) & ~(strata::detail::segment_size - 1);

  void* q = nullptr;
  after_move = [&](void* old, size_t old_size) {
    steer_to = old;
    steer_len = old_size;
    other.run([&] {
      q = strata_malloc(theirs);
      if (q) fill(q, theirs, 9);
    });
    steer_to = nullptr;
  };
  refuse_in_place = true;
  void* moved = strata_realloc(p, grown);
  refuse_in_place = false;
  after_move = nullptr;

  ASSERT_NE(moved, nullptr);
  ASSERT_NE(q, nullptr);
  // The window was opened: the block moved, and the other thread's mapping is where it was.
  ASSERT_NE(moved, p);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(q) & ~(strata::detail::segment_size - 1), old_start);

  uint64_t bad_before = stats().bad_free_count;
  EXPECT_GE(strata_usable_size(q), theirs);  // read 0 before the fix
  EXPECT_GE(strata_usable_size(moved), grown);
  EXPECT_TRUE(holds(moved, first, 7));
  EXPECT_TRUE(holds(q, theirs, 9));
  other.run([&] { strata_free(q); });
  strata_free(moved);
  EXPECT_EQ(stats().bad_free_count, bad_before);  // q's free was reported as foreign before the fix
}

// A remap that fails leaves the block where it was, known and whole (the marks cleared before
// the attempt are put back): realloc then copies it into a new block, as glibc does, and frees
// it, which a block strata no longer knew would have reported as a bad free.
TEST(HugeRemap, AFailedRemapLeavesTheBlockKnown) {
  constexpr size_t first = 40 * MiB, grown = 80 * MiB;
  strata_collect(true);  // a mapping an earlier test left cached could serve the growth whole
  void* p = strata_malloc(first);
  ASSERT_NE(p, nullptr);
  fill(p, first, 3);
  int refused_before = refused;
  uint64_t bad_before = stats().bad_free_count;

  refuse_in_place = true;
  refuse_move = true;
  errno = 0;
  void* moved = strata_realloc(p, grown);
  int err = errno;
  refuse_in_place = false;
  refuse_move = false;

  ASSERT_NE(moved, nullptr);
  EXPECT_EQ(err, 0);
  EXPECT_GE(refused - refused_before, 2);  // in place, then the move: tried and refused
  EXPECT_GE(strata_usable_size(moved), grown);
  EXPECT_TRUE(holds(moved, first, 3));
  EXPECT_EQ(stats().bad_free_count, bad_before);
  strata_free(moved);
  EXPECT_EQ(stats().bad_free_count, bad_before);
}

// A program that changes the protection of part of a huge block (a read-only page, a guard) splits
// its mapping into several kernel mappings (VMAs), which mremap neither grows nor, before Linux
// 6.17, moves (EFAULT).  realloc to a larger size then returned NULL with memory to spare (glibc
// copies).  Now the pages move piece by piece into a larger range (os::remap_aligned), in halves
// where the kernel refuses a range (emulated here by refusing every move over 2 MiB).
TEST(HugeRemap, ReallocGrowsABlockWhoseMappingTheProgramSplit) {
  for (size_t refuse_over : {size_t{0}, 2 * MiB}) {
    SCOPED_TRACE(refuse_over ? "moves over 2 MiB refused" : "the kernel's own moves");
    strata_collect(true);  // no cached mapping big enough to serve the realloc whole
    auto* p = static_cast<unsigned char*>(strata_malloc(8 * MiB));
    ASSERT_NE(p, nullptr);
    fill(p, 8 * MiB, 5);
    auto* page = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p) + 4 * MiB) & ~uintptr_t{4095});
    ASSERT_EQ(mprotect(page, 4096, PROT_READ), 0);  // three kernel mappings now
    refused = 0;
    refuse_moves_over = refuse_over;
    auto* q = static_cast<unsigned char*>(strata_realloc(p, 24 * MiB));
    refuse_moves_over = 0;
    ASSERT_NE(q, nullptr) << "realloc failed with memory to spare";
    EXPECT_TRUE(holds(q, 8 * MiB, 5)) << "realloc lost the block's contents";
    if (refuse_over != 0) {
      EXPECT_GT(refused.load(), 0) << "no move was refused: the halves were not tried";
    }
    ASSERT_EQ(mprotect(q + (page - p), 4096, PROT_READ | PROT_WRITE), 0);  // the page moved with its protection
    fill(q, 24 * MiB, 6);
    EXPECT_TRUE(holds(q, 24 * MiB, 6));
    strata_free(q);
  }
  strata_collect(true);  // nothing of this test's left cached for the next one
}
