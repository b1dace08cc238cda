// Memory the program locked (mlock, mlockall(MCL_FUTURE)): the kernel refuses MADV_DONTNEED on it
// (EINVAL) and the pages keep their bytes.  strata took a refused purge for a done one: the slices
// counted as fresh zero pages, and calloc of a block on them skipped its zeroing and returned the
// previous block's bytes (found by probing with mlockall(MCL_FUTURE), session 39).  This binary
// defines madvise itself, so the strata_api library linked in calls it (as huge_remap_test does
// mmap and mremap): a test arms it to refuse MADV_DONTNEED as the kernel does for locked pages.
// Not built with the sanitizers, whose runtimes call madvise themselves.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "strata/strata.h"

namespace {

constexpr size_t KiB = 1024, MiB = KiB * KiB;
std::atomic<bool> refuse_dontneed{false};
std::atomic<int> refused{0};

// The index of the first byte of [p, p + n) that is not zero, or -1.
long first_nonzero(const void* p, size_t n) {
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; i++)
    if (b[i] != 0) return static_cast<long>(i);
  return -1;
}

// Blocks of each kind calloc zeroes differently: a one-block page (over 128 KiB) and a long span,
// whose freed slices a purge gives back, and a huge block (over 2 MiB), whose cached mapping a
// sparse calloc gives back in part.  Each is dirtied, freed, its memory purged (strata_collect),
// and calloc'd again; then callocs that use little of the block leave its mapping to the next.
void calloc_after_purges() {
  for (size_t size : {200 * KiB, 1 * MiB, 2 * MiB - 4 * KiB, 6 * MiB}) {
    for (int round = 0; round < 3; round++) {
      void* p = strata_malloc(size);
      ASSERT_NE(p, nullptr);
      memset(p, 0xff, size);
      strata_free(p);
      strata_collect(true);
      auto* z = static_cast<unsigned char*>(strata_calloc(1, size));
      ASSERT_NE(z, nullptr);
      EXPECT_EQ(first_nonzero(z, size), -1) << size << " bytes, round " << round;
      memset(z, 0xee, size);
      strata_free(z);
    }
    for (int round = 0; round < 6; round++) {
      auto* z = static_cast<unsigned char*>(strata_calloc(1, size));
      ASSERT_NE(z, nullptr);
      EXPECT_EQ(first_nonzero(z, size), -1) << size << " bytes, sparse round " << round;
      memset(z, 0xdd, 8 * KiB);
      memset(z + size / 2, 0xcc, size / 4);
      strata_free(z);
    }
  }
}

// A field of /proc/self/status in KiB (VmRSS, VmLck ...).
long status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(strlen(field) + 1));
  return -1;
}

}  // namespace

extern "C" int madvise(void* addr, size_t len, int advice) noexcept {
  if (advice == MADV_DONTNEED && refuse_dontneed.load()) {
    refused.fetch_add(1);
    errno = EINVAL;
    return -1;
  }
  long r = syscall(SYS_madvise, addr, len, advice);
  return r == 0 ? 0 : -1;
}

TEST(LockedMemory, CallocZeroesWhatTheKernelWouldNotPurge) {
  strata_collect(true);
  refuse_dontneed = true;
  refused = 0;
  calloc_after_purges();
  refuse_dontneed = false;
  EXPECT_GT(refused.load(), 0) << "no purge was asked for: the test did not reach its case";
  // The memory whose purge was refused still counts as held (it is resident), and goes back once
  // the kernel lets it.
  strata_stats_t before, after;
  strata_stats_get(&before);
  strata_collect(true);
  strata_stats_get(&after);
  EXPECT_LT(after.committed_bytes, before.committed_bytes);
}

// The same with the kernel's own refusal, where the machine lets this process lock memory
// (root, or a large enough RLIMIT_MEMLOCK): every mapping strata makes from here on is locked.
TEST(LockedMemory, CallocUnderMlockallFuture) {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  if (geteuid() != 0 && lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < 512 * MiB)
    GTEST_SKIP() << "cannot lock 512 MiB here (RLIMIT_MEMLOCK " << lim.rlim_cur << ")";
  strata_collect(true);
  ASSERT_EQ(mlockall(MCL_FUTURE), 0) << strerror(errno);
  calloc_after_purges();
  munlockall();
}

// The page map (16 GiB of address space, core/types.h) is mapped read-only but for the 4 KiB of
// each of strata's segments: mlockall(MCL_CURRENT) pinned the whole table before, as root growing
// the process past 7.7 GB (session 39's probe).
TEST(LockedMemory, ThePageMapIsWritableOnlyWhereSegmentsAre) {
  void* p = strata_malloc(100);
  ASSERT_NE(p, nullptr);
  std::ifstream maps("/proc/self/maps");
  size_t read_only = 0, writable = 0;
  for (std::string line; std::getline(maps, line);) {
    unsigned long from, to;
    char perms[5];
    if (sscanf(line.c_str(), "%lx-%lx %4s", &from, &to, perms) != 3) continue;
    size_t bytes = to - from;
    if (bytes >= 8 * (size_t{1} << 30)) (perms[1] == 'w' ? writable : read_only) += bytes;
  }
  strata_free(p);
  EXPECT_GT(read_only, 15 * (size_t{1} << 30)) << "no read-only page map of about 16 GiB";
  EXPECT_EQ(writable, 0u) << "a writable mapping of 8 GiB or more";
}

TEST(LockedMemory, MlockallCurrentPinsLittle) {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  if (geteuid() != 0 && lim.rlim_cur != RLIM_INFINITY)
    GTEST_SKIP() << "mlockall(MCL_CURRENT) needs the address space under RLIMIT_MEMLOCK " << lim.rlim_cur;
  void* p = strata_malloc(100);
  ASSERT_NE(p, nullptr);
  long before = status_kib("VmRSS:");
  ASSERT_EQ(mlockall(MCL_CURRENT), 0) << strerror(errno);
  long after = status_kib("VmRSS:");
  munlockall();
  strata_free(p);
  // The segments strata has mapped (32 MiB each) are locked whole; the table is not.
  EXPECT_LT(after - before, 512 * 1024) << "KiB pinned by mlockall(MCL_CURRENT)";
}
