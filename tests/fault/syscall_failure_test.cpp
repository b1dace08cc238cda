// The kernel refusing one call at a time (mmap, munmap, mremap, madvise, mprotect), as it does
// out of memory or out of kernel mappings (vm.max_map_count): strata's own calls go through the
// definitions below, which this executable gives precedence over libc's (libstrata.a and
// libstrata_secure_api.a are linked in; libc's own calls, its malloc's and pthread's, use its
// internal names and are not affected).  An allocation the refusal fails answers NULL with
// ENOMEM; none answers a block smaller than asked, a shrink does not fail, blocks handed out keep
// their contents and stay accessible, and allocation works again once the kernel does.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "strata/strata.h"

namespace {

enum call { call_mmap, call_munmap, call_mremap, call_madvise, call_mprotect, call_count };
const char* const call_names[call_count] = {"mmap", "munmap", "mremap", "madvise", "mprotect"};

// Per call: how many so far, and which of them fail (from `first`, `span` calls; 0: none).
struct injection {
  std::atomic<long> calls{0}, first{0}, span{0};
  std::atomic<int> error{ENOMEM};
  std::atomic<bool> only_rw{false};  // mprotect: only calls that make memory accessible fail
};
injection g_inject[call_count];
// mremap as before Linux 6.17 for a range of several kernel mappings: a move (MREMAP_FIXED)
// unmaps its destination, then fails with EFAULT; here, every resize and move that fails so, and
// every move of more than 2 MiB (those that spanned two mappings).
std::atomic<bool> g_old_kernel_moves{false};

bool refuse(call c, int prot = -1) {
  injection& in = g_inject[c];
  long n = in.calls.fetch_add(1, std::memory_order_relaxed) + 1;
  long first = in.first.load(std::memory_order_relaxed);
  if (first == 0 || n < first || n - first >= in.span.load(std::memory_order_relaxed)) return false;
  if (in.only_rw.load(std::memory_order_relaxed) && prot == PROT_NONE) return false;
  errno = in.error.load(std::memory_order_relaxed);
  return true;
}

// From the next call of c on, `span` calls fail with `error`.
void fail_from_next(call c, long span, int error = ENOMEM) {
  g_inject[c].error.store(error);
  g_inject[c].span.store(span);
  g_inject[c].first.store(g_inject[c].calls.load() + 1);
}
void fail_nth(call c, long nth, int error) {
  g_inject[c].error.store(error);
  g_inject[c].span.store(1);
  g_inject[c].first.store(nth);
}
void stop_failing() {
  for (auto& in : g_inject) {
    in.first.store(0);
    in.only_rw.store(false);
  }
}

}  // namespace

extern "C" {
void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) noexcept {
  if (refuse(call_mmap)) return MAP_FAILED;
  return reinterpret_cast<void*>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}
int munmap(void* addr, size_t len) noexcept {
  if (refuse(call_munmap)) return -1;
  return static_cast<int>(syscall(SYS_munmap, addr, len));
}
void* mremap(void* addr, size_t old_len, size_t new_len, int flags, ...) noexcept {
  void* to = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    to = va_arg(ap, void*);
    va_end(ap);
  }
  if (refuse(call_mremap)) return MAP_FAILED;
  if ((flags & MREMAP_FIXED) && g_old_kernel_moves.load()) {
    long r = old_len == new_len && old_len > (size_t{2} << 20) ? (errno = EFAULT, -1)
                                                              : syscall(SYS_mremap, addr, old_len, new_len, flags, to);
    if (r == -1 && errno == EFAULT) {
      syscall(SYS_munmap, to, new_len);
      errno = EFAULT;
    }
    return reinterpret_cast<void*>(r);
  }
  return reinterpret_cast<void*>(syscall(SYS_mremap, addr, old_len, new_len, flags, to));
}
int madvise(void* addr, size_t len, int advice) noexcept {
  if (refuse(call_madvise)) return -1;
  return static_cast<int>(syscall(SYS_madvise, addr, len, advice));
}
int mprotect(void* addr, size_t len, int prot) noexcept {
  if (refuse(call_mprotect, prot)) return -1;
  return static_cast<int>(syscall(SYS_mprotect, addr, len, prot));
}
}

namespace {
std::atomic<bool> g_refuse_getrandom{false};
std::atomic<long> g_getrandom_refused{0};
}  // namespace

extern "C" ssize_t getrandom(void* buf, size_t len, unsigned flags) noexcept {
  if (g_refuse_getrandom.load()) return g_getrandom_refused++, errno = ENOSYS, -1;
  return syscall(SYS_getrandom, buf, len, flags);
}

namespace strata::os {
uint64_t random_seed() noexcept;
}

namespace {

constexpr size_t MiB = size_t{1} << 20;

void fill(void* p, size_t n, unsigned char tag) {
  auto* c = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; i += 4096) c[i] = tag;
  c[n - 1] = tag;
}
// Whether the first n bytes of p hold fill's tag (the last byte too, unless only a prefix is kept).
bool holds(const void* p, size_t n, unsigned char tag, bool whole = true) {
  if (n == 0) return true;
  auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; i += 4096)
    if (c[i] != tag) return false;
  return !whole || c[n - 1] == tag;
}

// Whether every page of [p, p+n) can be read, without faulting: the kernel copies from it into a
// pipe, and says EFAULT for a page the program cannot read (a guard page left inside a block).
bool all_readable(const void* p, size_t n) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  bool ok = true;
  char sink;
  for (size_t off = 0; off < n && ok; off += 4096) {
    ok = write(fds[1], static_cast<const char*>(p) + off, 1) == 1 && read(fds[0], &sink, 1) == 1;
  }
  close(fds[0]);
  close(fds[1]);
  return ok;
}

class syscall_failure : public ::testing::Test {
 protected:
  void TearDown() override { stop_failing(); }
};

// realloc to a smaller size of a huge block where mremap is refused (out of kernel mappings):
// it returned NULL/ENOMEM, though the block fits as it is; glibc returns the block.
TEST_F(syscall_failure, HugeShrinkSurvivesRefusedMremap) {
  size_t big = 64 * MiB, small = 8 * MiB;
  void* p = strata_malloc(big);
  ASSERT_NE(p, nullptr);
  fill(p, big, 0x5a);
  fail_from_next(call_mremap, 1 << 30);
  fail_from_next(call_mmap, 1 << 30);
  errno = EDOM;
  void* q = strata_realloc(p, small);
  int error = errno;
  stop_failing();
  ASSERT_EQ(q, p) << "a shrink failed: errno " << error;
  EXPECT_EQ(error, EDOM);
  EXPECT_TRUE(holds(q, small, 0x5a, false));
  EXPECT_GE(strata_usable_size(q), small);
  strata_free(q);
  EXPECT_TRUE(strata_heap_check());
}

// realloc of a huge block to a small size while no memory can be mapped (a thread with no segment
// of its own): the small block could not be had, and realloc answered NULL for a shrink.
TEST_F(syscall_failure, ShrinkToSmallSurvivesNoMemory) {
  std::thread t([] {
    void* p = strata_malloc(16 * MiB);
    ASSERT_NE(p, nullptr);
    fill(p, 16 * MiB, 0x33);
    strata_collect(true);  // no cached segment to take
    fail_from_next(call_mmap, 1 << 30);
    errno = EDOM;
    void* q = strata_realloc(p, 100);
    int error = errno;
    stop_failing();
    ASSERT_NE(q, nullptr) << "a shrink failed: errno " << error;
    EXPECT_TRUE(holds(q, 100, 0x33, false));
    if (q == p) {
      EXPECT_EQ(error, EDOM);
    }
    strata_free(q);
    EXPECT_TRUE(strata_heap_check());
  });
  t.join();
}

// Hardened build: a huge block grown while the kernel refuses to lift its guard pages (mprotect
// out of memory) kept the old last page's guard inside the grown block (moved with the pages):
// the program's first touch there faulted.  Either realloc fails, or every page is the program's.
TEST_F(syscall_failure, HugeGrowthKeepsNoGuardInside) {
  size_t small = 40 * MiB, big = 100 * MiB;
  void* p = strata_malloc(small);
  ASSERT_NE(p, nullptr);
  fill(p, small, 0x6b);
  g_inject[call_mprotect].only_rw.store(true);
  fail_from_next(call_mprotect, 1 << 30);
  errno = 0;
  void* q = strata_realloc(p, big);
  int error = errno;
  stop_failing();
  if (q == nullptr) {
    EXPECT_EQ(error, ENOMEM);
    EXPECT_TRUE(holds(p, small, 0x6b));
    EXPECT_TRUE(all_readable(p, small));
    q = p;
  } else {
    EXPECT_TRUE(holds(q, small, 0x6b, false));
    EXPECT_TRUE(all_readable(q, big)) << "a guard page inside the block";
  }
  strata_free(q);
  EXPECT_TRUE(strata_heap_check());
}

// A seccomp filter that refuses mremap for good (EPERM, or ENOSYS: a sandbox that allows no
// remapping): realloc of a huge block to a larger size answered NULL every time, with memory to
// spare; glibc's realloc copies the block into a new one.
TEST_F(syscall_failure, HugeGrowthSurvivesMremapRefusedForGood) {
  for (int refusal : {EPERM, ENOSYS}) {
    size_t small = 8 * MiB, big = 24 * MiB;
    void* p = strata_malloc(small);
    ASSERT_NE(p, nullptr);
    fill(p, small, 0x4c);
    fail_from_next(call_mremap, 1 << 30, refusal);
    errno = EDOM;
    void* q = strata_realloc(p, big);
    int error = errno;
    void* r = q == nullptr ? nullptr : strata_realloc(q, 2 * big);  // again, from the copy
    stop_failing();
    ASSERT_NE(q, nullptr) << "mremap refused with " << strerror(refusal) << ": errno " << strerror(error);
    EXPECT_EQ(error, EDOM);
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(holds(r, small, 0x4c, false));
    EXPECT_GE(strata_usable_size(r), 2 * big);
    fill(r, 2 * big, 0x4d);
    strata_free(r);
  }
  EXPECT_TRUE(strata_heap_check());
}

// A seccomp filter that refuses mprotect for good (EPERM): a new segment's piece of the page map
// could not be made writable, and each allocation that needed a new segment answered NULL (a
// new thread's malloc(30) too), with memory to spare; glibc goes on.
TEST_F(syscall_failure, NewSegmentsDespiteMprotectRefusedForGood) {
  std::thread t([] {
    strata_collect(true);  // no cached segment to take
    constexpr size_t block = 256 << 10;
    fail_from_next(call_mprotect, 1 << 30, EPERM);
    std::vector<void*> blocks;
    void* small = strata_malloc(30);
    for (int i = 0; i < 256; ++i) {  // 64 MiB: new segments
      void* p = strata_malloc(block);
      if (p == nullptr) break;
      fill(p, block, static_cast<unsigned char>(i | 1));
      blocks.push_back(p);
    }
    stop_failing();
    EXPECT_NE(small, nullptr);
    EXPECT_EQ(blocks.size(), 256u) << "malloc failed with mprotect refused";
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_TRUE(holds(blocks[i], block, static_cast<unsigned char>(i | 1)));
      EXPECT_GE(strata_usable_size(blocks[i]), block);
      strata_free(blocks[i]);
    }
    strata_free(small);
  });
  t.join();
  EXPECT_TRUE(strata_heap_check());
}

// A huge block whose mapping the program split (a read-only page) grows by moving its pages into
// a larger range, as before Linux 6.17's kernels do it: strata first tried one resize and move,
// which unmapped the whole destination before failing; the pages moved back after it, but the
// grown tail stayed unmapped, and the program's first write there faulted.
TEST_F(syscall_failure, SplitHugeBlockGrowsWholeOnOlderKernels) {
  strata_collect(true);  // no cached mapping big enough to serve the realloc whole
  size_t small = 8 * MiB, big = 24 * MiB;
  auto* p = static_cast<unsigned char*>(strata_malloc(small));
  ASSERT_NE(p, nullptr);
  fill(p, small, 0x42);
  auto* page = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(p) + small / 2) & ~uintptr_t{4095});
  ASSERT_EQ(mprotect(page, 4096, PROT_READ), 0);  // three kernel mappings now
  g_old_kernel_moves.store(true);
  auto* q = static_cast<unsigned char*>(strata_realloc(p, big));
  g_old_kernel_moves.store(false);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(holds(q, small, 0x42));
  ASSERT_EQ(mprotect(q + (page - p), 4096, PROT_READ | PROT_WRITE), 0);  // moved with its protection
  EXPECT_TRUE(all_readable(q, big)) << "part of the grown block is not mapped";
  strata_free(q);
  strata_collect(true);
}

// A workload of every kind of allocation, each result checked: NULL only with ENOMEM, a block at
// least as large as asked and aligned as asked, contents kept across realloc and to the end.
// Returns how many checks failed.
int workload() {
  int bad = 0;
  struct kept {
    unsigned char* p;
    size_t n;
    unsigned char tag;
  };
  kept live[256];
  size_t count = 0;
  unsigned char next_tag = 1;
  auto keep = [&](void* p, size_t n) {
    if (p == nullptr) {
      bad += errno != ENOMEM;
      return;
    }
    bad += strata_usable_size(p) < n;
    fill(p, n, next_tag);
    live[count++] = {static_cast<unsigned char*>(p), n, next_tag++};
  };
  for (size_t n : {size_t{24}, size_t{700}, size_t{5000}, size_t{70000}, size_t{600000}, 3 * MiB, 9 * MiB}) {
    errno = 0;
    keep(strata_malloc(n), n);
  }
  for (size_t a = 4096; a <= 64 * MiB; a <<= 3) {
    void* p = nullptr;
    int r = strata_posix_memalign(&p, a, 3 * MiB);
    if (r != 0) {
      bad += r != ENOMEM;
      continue;
    }
    bad += reinterpret_cast<uintptr_t>(p) % a != 0;
    keep(p, 3 * MiB);
  }
  for (size_t n : {size_t{3000}, 5 * MiB}) {
    auto* p = static_cast<unsigned char*>(strata_calloc(1, n));
    if (p) bad += p[0] != 0 || p[n / 2] != 0 || p[n - 1] != 0;
    keep(p, n);
  }
  // realloc across classes and huge sizes, growing and shrinking (mremap).
  void* r = nullptr;
  size_t have = 0;
  unsigned char tag = 0xa0;
  for (size_t n : {size_t{100}, size_t{90000}, 3 * MiB, 20 * MiB, 45 * MiB, 6 * MiB, size_t{5000}, 12 * MiB}) {
    errno = 0;
    void* q = strata_realloc(r, n);
    if (q == nullptr) {
      bad += errno != ENOMEM || n <= have;  // a shrink does not fail
      bad += r != nullptr && !holds(r, have, tag);
      continue;
    }
    bad += strata_usable_size(q) < n || !holds(q, have < n ? have : n, tag, have <= n);
    r = q;
    have = n;
    fill(r, n, ++tag);
  }
  if (r) live[count++] = {static_cast<unsigned char*>(r), have, tag};
  for (size_t i = 0; i < count; i += 2) strata_free(live[i].p);
  strata_collect(true);
  for (size_t i = 1; i < count; i += 2) {
    bad += !holds(live[i].p, live[i].n, live[i].tag) || !all_readable(live[i].p, live[i].n);
    strata_free(live[i].p);
  }
  strata_collect(true);
  return bad;
}

// For each call site in turn, the workload with the nth call of c refused, in a child: it must
// end, pass its own checks, and allocate again once the kernel stops refusing.
void sweep(call c, int error) {
  // The calls a workload makes, counted in a child without failures (a bound: the first refusal
  // past it fails nothing).
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long before = g_inject[c].calls.load();
    workload();
    long n = g_inject[c].calls.load() - before;
    _exit(write(fds[1], &n, sizeof n) == sizeof n ? 0 : 1);
  }
  long calls = 0;
  ASSERT_EQ(read(fds[0], &calls, sizeof calls), static_cast<ssize_t>(sizeof calls));
  close(fds[0]);
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  for (long nth = 1; nth <= calls; ++nth) {
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(60);
      fail_nth(c, g_inject[c].calls.load() + nth, error);
      int bad = workload();
      stop_failing();
      void* p = strata_malloc(3 * MiB);
      void* q = strata_malloc(100);
      bad += p == nullptr || q == nullptr;
      strata_free(p);
      strata_free(q);
      bad += !strata_heap_check();
      strata_stats_t s;
      strata_stats_get(&s);
      bad += static_cast<int64_t>(s.committed_bytes) < 0 || static_cast<int64_t>(s.reserved_bytes) < 0 ||
             static_cast<int64_t>(s.in_use_bytes) < 0;
      _exit(bad == 0 ? 0 : 1);
    }
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << call_names[c] << " call " << nth << " of " << calls << " refused (" << strerror(error)
        << "): " << (WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "checks failed");
  }
}

// getrandom refused (a seccomp filter, ENOSYS): the canaries' secret and the hardened build's
// carving seeds come from a keyed hash under the kernel's AT_RANDOM bytes (session 51; before,
// from the time, a stack address and the process id alone), a new value at each call.
TEST_F(syscall_failure, RandomSeedsWithoutGetrandom) {
  g_refuse_getrandom = true;
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = strata::os::random_seed();
    EXPECT_EQ(v & 1, 1u) << "a seed is odd (never 0)";
    seen.insert(v);
  }
  g_refuse_getrandom = false;
  EXPECT_EQ(g_getrandom_refused.load(), 1000) << "strata's calls did not reach the refusing getrandom";
  EXPECT_EQ(seen.size(), 1000u) << "seeds repeated without getrandom";
}

TEST_F(syscall_failure, EachMmapRefused) { sweep(call_mmap, ENOMEM); }
TEST_F(syscall_failure, EachMunmapRefused) { sweep(call_munmap, ENOMEM); }
TEST_F(syscall_failure, EachMremapRefused) { sweep(call_mremap, ENOMEM); }
TEST_F(syscall_failure, EachMadviseRefused) { sweep(call_madvise, EAGAIN); }
TEST_F(syscall_failure, EachMprotectRefused) { sweep(call_mprotect, ENOMEM); }

}  // namespace
