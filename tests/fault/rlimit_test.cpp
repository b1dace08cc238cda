// Address-space exhaustion (ulimit -v, RLIMIT_AS) with libstrata.a replacing malloc and operator
// new (issue 13): every entry point answers NULL/ENOMEM (or std::bad_alloc, or nullptr for the
// nothrow forms), nothing crashes, a failed realloc leaves its block intact, and once the blocks
// are freed allocation works again: in their size, in another (a huge block after small ones),
// and for another thread's first allocation.
//
// Each test runs in a forked child whose address space is limited to what it maps already plus
// a margin, so that the limit cannot starve the test runner; the child reports its failures on a
// pipe and a crash shows as the signal that ended it.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"
#include "../unit/test_support.h"

namespace {

constexpr size_t MiB = size_t{1} << 20;
constexpr size_t margin = 256 * MiB;  // address space the child may map beyond what it has

// Keeps the compiler from eliding allocations whose results look unused.
void* opaque(void* p) {
  asm volatile("" : "+r"(p));
  return p;
}

size_t mapped_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0;
  f >> pages;
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// What a child found wrong, sent to the parent at exit.
std::string g_failures;
void child_fail(const std::string& what) { g_failures += what + "\n"; }
#define CHILD_CHECK(cond, what)                                       \
  do {                                                                \
    if (!(cond)) child_fail(std::string(#cond ": ") + (what));        \
  } while (0)

// The parent's side of a forked child writing to the pipe's read end `fd`: everything it wrote,
// then it must have exited 0, not died of a signal.
void collect_child(pid_t pid, int fd, std::string& report) {
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) report.append(buf, static_cast<size_t>(n));
  close(fd);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status)) << "the child died of signal " << WTERMSIG(status) << " ("
                                    << strsignal(WTERMSIG(status)) << ")\n" << report;
  EXPECT_EQ(WEXITSTATUS(status), 0) << report;
}

// Runs body in a child limited to its current address space + margin; fails the test with what
// the child reported, or with the signal that killed it.
template <typename Body>
void in_limited_child(Body body) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    rlimit lim{mapped_bytes() + margin, RLIM_INFINITY};
    lim.rlim_max = lim.rlim_cur;
    if (setrlimit(RLIMIT_AS, &lim) != 0) child_fail(std::string("setrlimit: ") + strerror(errno));
    else body();
    ssize_t n = write(fds[1], g_failures.data(), g_failures.size());
    (void)n;
    _exit(g_failures.empty() ? 0 : 1);
  }
  close(fds[1]);
  std::string report;
  ASSERT_NO_FATAL_FAILURE(collect_child(pid, fds[0], report));
  EXPECT_EQ(report, "");
}

// Blocks kept on a list through their first word: no bookkeeping that could itself hit the limit.
struct chain {
  void* head = nullptr;
  size_t count = 0;
  void push(void* p) {
    *static_cast<void**>(p) = head;
    head = p;
    count++;
  }
};

// Allocates blocks of `size` (at least 64 bytes, written) until malloc fails, which must say
// ENOMEM; at least `at_least` of them.
chain exhaust(size_t size, const std::string& what, size_t at_least = 1) {
  chain blocks;
  for (;;) {
    errno = 0;
    void* p = malloc(size);
    if (p == nullptr) {
      CHILD_CHECK(errno == ENOMEM, what + ": errno " + std::to_string(errno));
      break;
    }
    memset(p, 0x5a, size < 256 ? size : 256);
    blocks.push(p);
    if (blocks.count > 4 * margin / size + 100) {
      child_fail(what + ": the limit never came");
      break;
    }
  }
  CHILD_CHECK(blocks.count >= at_least, what + ": " + std::to_string(blocks.count) + " blocks before the limit");
  return blocks;
}

void free_all(chain& blocks) {
  while (blocks.head) {
    void* next = *static_cast<void**>(blocks.head);
    free(blocks.head);
    blocks.head = next;
  }
  blocks.count = 0;
}

// Sizes of every kind: small, medium, large (in segments' pages), huge (mapped alone).
constexpr size_t sizes[] = {64, 3000, 200 * 1024, 8 * MiB};

class EachSize : public ::testing::TestWithParam<size_t> {};

TEST_P(EachSize, FailsWithEnomemAndWorksAgainAfterFrees) {
  size_t size = GetParam();
  in_limited_child([size] {
    std::string what = "malloc(" + std::to_string(size) + ")";
    chain blocks = exhaust(size, what);
    size_t first = blocks.count;
    free_all(blocks);
    // The freed address space serves the same size again, and as much of it.
    blocks = exhaust(size, what + " after the frees");
    CHILD_CHECK(blocks.count * 10 >= first * 9, what + ": " + std::to_string(first) + " blocks before the frees, " +
                                                    std::to_string(blocks.count) + " after");
    free_all(blocks);
  });
}

INSTANTIATE_TEST_SUITE_P(AddressSpaceLimit, EachSize, ::testing::ValuesIn(sizes));

TEST(AddressSpaceLimit, FreedSmallBlocksServeAHugeOneAndBack) {
  in_limited_child([] {
    // Half the margin in small blocks, freed, must leave room for a block of half the margin:
    // what strata keeps for reuse must not hold the address space a huge block needs.
    chain blocks;
    // Half the margin in 1000-byte blocks onto `blocks`; a failure is reported with `when`.
    auto fill_half = [&blocks](const char* when) {
      for (size_t used = 0; used < margin / 2; used += 1000) {
        void* p = malloc(1000);
        if (p == nullptr) {
          child_fail(std::string("malloc(1000) failed ") + when + ", at " + std::to_string(used) + " bytes");
          break;
        }
        blocks.push(p);
      }
    };
    fill_half("below half the margin");
    free_all(blocks);
    strata_collect(false);
    void* big = malloc(margin / 2);
    CHILD_CHECK(big != nullptr, "malloc(margin / 2) after freeing as much in small blocks");
    if (big) memset(big, 1, margin / 2);
    free(big);
    fill_half("after the huge block was freed");
    free_all(blocks);
  });
}

TEST(AddressSpaceLimit, EveryEntryPointAnswersTheLimit) {
  in_limited_child([] {
    chain hold = exhaust(64 * 1024, "malloc(64 KiB)");
    chain small = exhaust(64, "malloc(64)");  // the last scraps too
    errno = 0;
    CHILD_CHECK(calloc(1, 64 * MiB) == nullptr && errno == ENOMEM, "calloc");
    errno = 0;
    CHILD_CHECK(calloc(64 * 1024, 1024) == nullptr && errno == ENOMEM, "calloc (count x size)");
    void* p = nullptr;
    CHILD_CHECK(posix_memalign(&p, 4096, 64 * MiB) == ENOMEM && p == nullptr, "posix_memalign");
    errno = 0;
    CHILD_CHECK(aligned_alloc(65536, 64 * MiB) == nullptr && errno == ENOMEM, "aligned_alloc");
    errno = 0;
    CHILD_CHECK(memalign(256, 64 * MiB) == nullptr && errno == ENOMEM, "memalign");
    errno = 0;
    CHILD_CHECK(valloc(64 * MiB) == nullptr && errno == ENOMEM, "valloc");
    // A failed realloc keeps the block and its contents.
    auto* block = static_cast<unsigned char*>(small.head);
    errno = 0;
    CHILD_CHECK(realloc(block, 64 * MiB) == nullptr && errno == ENOMEM, "realloc");
    bool intact = true;  // past the link word
    for (int i = 8; i < 64; ++i) intact = intact && block[i] == 0x5a;
    CHILD_CHECK(intact, "the block a failed realloc kept");
    CHILD_CHECK(malloc_usable_size(block) >= 64, "the block a failed realloc kept is still live");
    errno = 0;
    CHILD_CHECK(reallocarray(block, 1024, 64 * 1024) == nullptr && errno == ENOMEM, "reallocarray");
    free_all(small);
    free_all(hold);
    for (size_t size : {size_t{64}, size_t{64 * 1024}}) {
      void* q = malloc(size);
      CHILD_CHECK(q != nullptr, "malloc(" + std::to_string(size) + ") after the frees");
      free(q);
    }
  });
}

TEST(AddressSpaceLimit, NewThrowsBadAllocAndNothrowGivesNull) {
  in_limited_child([] {
    chain blocks;
    bool threw = false;
    try {
      for (size_t i = 0; i < 4 * margin / MiB; ++i) blocks.push(new char[MiB]);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    CHILD_CHECK(threw, "new char[1 MiB] until the limit");
    CHILD_CHECK(blocks.count > 0, "not one block before the limit");
    CHILD_CHECK(new (std::nothrow) char[64 * MiB] == nullptr, "new (nothrow)");
    bool aligned_threw = false;
    try {
      opaque(::operator new(64 * MiB, std::align_val_t{4096}));
    } catch (const std::bad_alloc&) {
      aligned_threw = true;
    }
    CHILD_CHECK(aligned_threw, "operator new(align_val_t)");
    CHILD_CHECK(::operator new(64 * MiB, std::align_val_t{4096}, std::nothrow) == nullptr,
                "operator new(align_val_t, nothrow)");
    // A container growing into the limit throws, and leaves the process able to go on.
    bool vector_threw = false;
    try {
      std::vector<long> v;
      for (;;) v.push_back(1);
    } catch (const std::bad_alloc&) {
      vector_threw = true;
    } catch (const std::length_error&) {
    }
    CHILD_CHECK(vector_threw, "std::vector growing into the limit");
    while (blocks.head) {
      void* next = *static_cast<void**>(blocks.head);
      delete[] static_cast<char*>(blocks.head);
      blocks.head = next;
    }
    std::vector<std::string> after(1000, std::string(1000, 'x'));
    CHILD_CHECK(after.back().size() == 1000, "allocation after the frees");
  });
}

TEST(AddressSpaceLimit, AThreadsFirstAllocationAfterTheFrees) {
  in_limited_child([] {
    // A thread made before the limit is reached allocates for the first time after: its heap
    // (and the segment it needs) cannot be had, and malloc must say so, not crash.
    std::mutex m;
    std::condition_variable cv;
    int stage = 0;
    void* got = reinterpret_cast<void*>(1);
    int got_errno = 0;
    void* later = nullptr;
    std::thread t([&] {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return stage == 1; });
      errno = 0;
      got = malloc(100000);
      got_errno = errno;
      stage = 2;
      cv.notify_all();
      cv.wait(lock, [&] { return stage == 3; });
      later = malloc(100000);
      stage = 4;
      cv.notify_all();
    });
    chain hold = exhaust(1 * MiB, "malloc(1 MiB)");
    // The scraps the 1 MiB blocks left, if any (a 1 MiB block takes 17 slices, and 30 of them
    // fill a segment's 510).
    chain small = exhaust(100000, "malloc(100000)", 0);
    {
      std::unique_lock<std::mutex> lock(m);
      stage = 1;
      cv.notify_all();
      cv.wait(lock, [&] { return stage == 2; });
    }
    // It may fit in a slice the others left; if not, NULL and ENOMEM.
    CHILD_CHECK(got != nullptr || got_errno == ENOMEM, "errno " + std::to_string(got_errno));
    free(got);
    free_all(small);
    free_all(hold);
    {
      std::unique_lock<std::mutex> lock(m);
      stage = 3;
      cv.notify_all();
      cv.wait(lock, [&] { return stage == 4; });
    }
    t.join();
    CHILD_CHECK(later != nullptr, "the thread's malloc after the frees");
    free(later);
  });
}

// Probe (CPython's regression tests preloaded under `ulimit -v 3000000`): a process
// started with less address space than the page map's 16 GiB runs without it (every free takes
// the slow path).  A thread's foreign cache (blocks of other live threads it freed) went back to
// the blocks' pages through page_lookup, which then answers nullptr for every block: the flush
// (trim, a purge pass, thread exit) crashed in free_remote on a null page.  The limit must be
// set before the process starts, so the test runs itself again, in a child exec'd under the limit.
constexpr char no_page_map_child[] = "STRATA_TEST_NO_PAGE_MAP_CHILD";

void foreign_flush_scenario() {
  // The owner: a fresh thread (recently active, so that frees of its blocks go to the other
  // thread's foreign cache), alive until the other has freed them and trimmed.
  constexpr int count = 1000;
  std::vector<void*> blocks(count);
  {
    strata_test::worker owner;
    owner.run([&] {
      for (auto& b : blocks) b = opaque(malloc(48));
    });
    std::thread freer([&] {
      void* mine = opaque(malloc(64));  // a thread that allocates keeps other heaps' blocks
      for (void* b : blocks) free(b);
      malloc_trim(0);  // the foreign cache goes back to the blocks' pages
      free(mine);
    });
    freer.join();
  }
  void* again = opaque(malloc(48));
  CHILD_CHECK(again != nullptr, "malloc after the flush");
  free(again);
}

TEST(AddressSpaceLimit, ForeignCacheFlushWithoutThePageMap) {
  if (getenv(no_page_map_child) != nullptr) {  // the exec'd child: runs the scenario, says how
    foreign_flush_scenario();
    fputs(g_failures.c_str(), stderr);
    _exit(g_failures.empty() ? 0 : 1);
  }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    rlimit lim{size_t{4} << 30, size_t{4} << 30};  // far below the page map's 16 GiB
    setrlimit(RLIMIT_AS, &lim);
    setenv(no_page_map_child, "1", 1);
    setenv("STRATA_VERBOSE", "1", 1);  // says that the page map could not be mapped
    execl("/proc/self/exe", "fault_rlimit_test",
          "--gtest_filter=AddressSpaceLimit.ForeignCacheFlushWithoutThePageMap", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string report;
  ASSERT_NO_FATAL_FAILURE(collect_child(pid, fds[0], report));
  EXPECT_NE(report.find("cannot map the page map"), std::string::npos) << "the child had a page map:\n" << report;
}

}  // namespace
