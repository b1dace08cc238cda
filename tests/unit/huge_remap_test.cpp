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
#include <sys/resource.h>
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

#include "core/options.h"
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
// the attempt are put back).
TEST(HugeRemap, AFailedRemapLeavesTheBlockKnown) {
  constexpr size_t first = 40 * MiB, grown = 80 * MiB;
  void* p = strata_malloc(first);
  ASSERT_NE(p, nullptr);
  fill(p, first, 3);
  size_t usable = strata_usable_size(p);
  int refused_before = refused;

  refuse_in_place = true;
  refuse_move = true;
  errno = 0;
  void* moved = strata_realloc(p, grown);
  int err = errno;
  refuse_in_place = false;
  refuse_move = false;

  EXPECT_EQ(moved, nullptr);
  EXPECT_EQ(err, ENOMEM);
  EXPECT_GE(refused - refused_before, 2);  // in place, then the move: tried and refused
  EXPECT_EQ(strata_usable_size(p), usable);
  EXPECT_TRUE(holds(p, first, 3));
  uint64_t bad_before = stats().bad_free_count;
  strata_free(p);
  EXPECT_EQ(stats().bad_free_count, bad_before);
}

// A block gathered from several freed buffers is several kernel mappings.  Before Linux 6.17 the
// kernel moves no range that spans two (EFAULT), so os::move_pages moves halves until each move
// is one mapping's; emulated here by refusing every move of more than 2 MiB.  The gathering, a
// realloc that must move the block to grow it, and a shrink keep every byte.
TEST(HugeRemap, AKernelThatMovesOneMappingAtATimeStillGathersAndGrowsBlocks) {
  if (strata::detail::secure) GTEST_SKIP() << "the hardened build neither splits nor gathers";
  int64_t delay = strata::options::get(strata::option::purge_delay);
  strata::options::set(strata::option::purge_delay, 1000);  // the freed buffers stay cached
  strata_collect(true);
  std::thread([] {
    strata_free(strata_malloc(16));  // a heap, which keeps its thread's last huge mapping
    void* parts[3];
    for (unsigned char i = 0; i < 3; ++i) fill(parts[i] = strata_malloc(8 * MiB), 8 * MiB, i);
    for (void* q : parts) strata_free(q);
    refused = 0;
    refuse_moves_over = 2 * MiB;
    rusage before_use{};
    getrusage(RUSAGE_SELF, &before_use);
    void* p = strata_malloc(22 * MiB);
    ASSERT_NE(p, nullptr);
    memset(p, 7, 22 * MiB);
    rusage after_use{};
    getrusage(RUSAGE_SELF, &after_use);
    EXPECT_GT(refused.load(), 0) << "no donor's pages were moved: the test gathers nothing";
    // 5632 pages: moved in halves, the freed buffers' pages serve it; refused whole, it faults.
    EXPECT_LT(after_use.ru_minflt - before_use.ru_minflt, 563) << "the moves refused were not made in parts";
    fill(p, 22 * MiB, 7);
    int before = refused.load();
    void* q = strata_realloc(p, 40 * MiB);
    ASSERT_NE(q, nullptr);
    EXPECT_TRUE(holds(q, 22 * MiB, 7)) << "realloc of a gathered block lost its contents";
    EXPECT_GT(refused.load(), before) << "the gathered block grew without a move";
    fill(q, 40 * MiB, 9);
    void* r = strata_realloc(q, 12 * MiB);
    ASSERT_NE(r, nullptr);
    auto* b = static_cast<const unsigned char*>(r);
    size_t wrong = 0;
    for (size_t i = 0; i < 12 * MiB; i += 4096) wrong += b[i] != static_cast<unsigned char>(9 + i / 4096);
    EXPECT_EQ(wrong, 0u) << "a shrunk gathered block lost its contents";
    refuse_moves_over = 0;
    strata_free(r);
  }).join();
  strata_collect(true);
  strata::options::set(strata::option::purge_delay, delay);
}
