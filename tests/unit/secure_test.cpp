// Issue 13: the hardened build (libstrata-secure, STRATA_SECURE=1) under attack, through the
// strata_* API of strata_secure_api.  Each attack runs in a child (death tests): a hardened
// allocator's answer to a corrupted heap is to stop the program.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <thread>
#include <vector>

#include "strata/strata.h"

namespace {

constexpr size_t segment_size = size_t{32} << 20;
constexpr size_t slice_size = size_t{64} << 10;
constexpr size_t header_size = 2 * slice_size;  // a segment's header slices (types.h header_slices)

void* opaque(void* p) {
  asm volatile("" : "+r"(p));
  return p;
}

// Two live blocks of `size`, b right after a in memory (carving order is random, so search).
struct neighbours {
  char* a;
  char* b;
  std::vector<void*> others;
};
neighbours adjacent_pair(size_t size) {
  neighbours n{};
  std::vector<void*> all;
  for (int i = 0; i < 4096 && n.a == nullptr; ++i) {
    auto* p = static_cast<char*>(strata_malloc(size));
    for (void* q : all) {
      if (static_cast<char*>(q) + size == p) n = {static_cast<char*>(q), p, {}};
      if (p + size == q) n = {p, static_cast<char*>(q), {}};
      if (n.a) break;
    }
    all.push_back(p);
  }
  for (void* p : all)
    if (p != n.a && p != n.b) n.others.push_back(p);
  return n;
}

class SecureDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// A heap overflow from a live block into its free neighbour plants an address of the attacker's
// choice as the neighbour's free-list link.  Unhardened, the allocation after the neighbour's is
// that address; hardened, the link decodes to garbage and the pop aborts.
TEST_F(SecureDeathTest, OverflowIntoAFreeNeighbourCannotRedirectAllocations) {
  EXPECT_DEATH(
      {
        neighbours n = adjacent_pair(64);
        if (n.a == nullptr) _exit(2);
        static char target[64];
        strata_free(n.b);
        void* forged = target;
        std::memcpy(n.a + 64, &forged, sizeof forged);  // 8 bytes past a: b's link
        for (int i = 0; i < 100000; ++i)
          if (strata_malloc(64) == target) _exit(3);  // the attack worked
      },
      "free list of the page at .* corrupted");
}

// A write into a freed block (use after free) clobbers its canary: caught when the block comes
// back off the free list.
TEST_F(SecureDeathTest, UseAfterFreeWriteIsCaughtOnReuse) {
  EXPECT_DEATH(
      {
        auto* a = static_cast<char*>(strata_malloc(96));
        strata_free(a);
        std::memset(opaque(a), 0x41, 16);
        for (int i = 0; i < 100000; ++i) strata_malloc(96);
      },
      "corrupted");
}

// A use-after-free write of the link of a block on its page's local_free list, then another
// thread's free of a block of the same page: collecting that free walks local_free to its tail
// (page_collect), and the walk followed the forged link out of the page: a segmentation fault,
// no report.  Caught as a pop catches it now.
TEST_F(SecureDeathTest, AForgedLinkOnTheLocalFreeListIsCaughtWhenARemoteFreeJoinsIt) {
  EXPECT_DEATH(
      {
        std::thread([] {
          char* blocks[8];
          for (char*& b : blocks) b = static_cast<char*>(strata_malloc(64));  // one fresh page
          strata_free(blocks[0]);
          strata_free(blocks[1]);  // local_free: blocks[1] -> blocks[0]
          std::memset(opaque(blocks[1]), 0x41, 8);  // its link
          std::thread([b = blocks[2]] { strata_free(b); }).join();  // sent back at the thread's exit
          strata_collect(true);  // the page has free blocks, local frees and a remote one
        }).join();
      },
      "free list of the page at .* corrupted");
}

// A double free after other allocations and frees in between: the block still carries its free
// canary, and the hardened build aborts by default (STRATA_ABORT_ON_ERROR defaults to 1).
TEST_F(SecureDeathTest, DoubleFreeAfterInterveningAllocationsAborts) {
  EXPECT_DEATH(
      {
        void* a = strata_malloc(80);
        strata_free(a);
        void* x = strata_malloc(200);
        void* y = strata_malloc(32);
        strata_free(y);
        strata_free(opaque(a));
        strata_free(x);
      },
      "double free .*aborting");
}

// A use-after-free write over a freed block's first 16 bytes (its link and canary), then a second
// free of it.  The canary no longer says "free", so the free took the block for a live one.  A
// one-block page's block (300000 bytes) went onto its page's list a second time, linked to
// itself, with the page counting 2^32 - 1 blocks out: the next allocation of the size handed the
// block out and left it on the free list (a cycle: 1.5 MB blocks made the program loop for ever),
// no report.  The page has no block out to free: the free is refused as a double free.
TEST_F(SecureDeathTest, DoubleFreeOfAOneBlockPagesBlockWithItsCanaryOverwrittenAborts) {
  EXPECT_DEATH(
      {
        void* p = strata_malloc(300000);
        strata_free(p);
        std::memset(opaque(p), 0, 16);
        strata_free(opaque(p));
        _exit(0);  // not caught (a clean exit fails a death test)
      },
      "double free .*aborting");
}

// The same with a neighbour still out: the second free took the page's count of blocks out to 0
// with x live (a page that could give its span back under x); x's free finds the page with no
// block out.
TEST_F(SecureDeathTest, DoubleFreeWithItsCanaryOverwrittenIsCaughtByTheNextFreeOfThePage) {
  EXPECT_DEATH(
      {
        std::thread([] {  // a fresh heap: x and p come from one fresh page
          void* x = strata_malloc(48);
          void* p = strata_malloc(48);
          strata_free(p);
          std::memset(opaque(p), 0, 16);
          strata_free(opaque(p));
          strata_free(x);
        }).join();
        _exit(0);
      },
      "double free .*aborting");
}

// A write one byte past a huge block's usable end lands on the guard page after it.  (Any death
// counts: a fault kills the child, or, under ASan, its SEGV report ends it.)
TEST_F(SecureDeathTest, WritePastAHugeBlockFaults) {
  EXPECT_DEATH(
      {
        auto* p = static_cast<char*>(strata_malloc(5 << 20));
        size_t usable = strata_usable_size(p);
        static_cast<volatile char*>(p)[usable - 1] = 1;  // the last byte is the block's
        static_cast<volatile char*>(p)[usable] = 1;
        _exit(0);
      },
      "");
}

// Huge blocks resized with mremap (realloc growing and shrinking one; the huge cache growing a
// smaller mapping and trimming a much larger one for the next block) keep their contents and
// get their guard page back at the new end, and the header's guard stays.  nullptr if the
// contents were not kept.
// A block of `from` bytes filled, then realloc'ed to `to`: nullptr if its first min(from, to)
// bytes changed.
void* realloc_kept(size_t from, size_t to) {
  void* p = strata_malloc(from);
  memset(p, 0x5a, from);
  p = strata_realloc(p, to);
  return static_cast<char*>(p)[(from < to ? from : to) - 1] == 0x5a ? p : nullptr;
}

void* resized_huge_block(int how) {
  switch (how) {
    case 0:  // realloc grows
      return realloc_kept(5 << 20, 13 << 20);
    case 1:  // realloc shrinks
      return realloc_kept(13 << 20, 5 << 20);
    case 2:  // the cache grows a 5 MiB mapping for a 13 MiB block
      strata_free(strata_malloc(5 << 20));
      return strata_malloc(13 << 20);
    default:  // the cache trims a 40 MiB mapping for a 6 MiB block
      strata_free(strata_malloc(40 << 20));
      return strata_malloc(6 << 20);
  }
}

TEST_F(SecureDeathTest, AResizedHugeBlockKeepsItsGuardPages) {
  for (int how = 0; how < 4; ++how) {
    EXPECT_DEATH(
        {
          auto* p = static_cast<volatile char*>(resized_huge_block(how));
          if (p == nullptr) _exit(0);  // (a clean exit fails a death test)
          size_t usable = strata_usable_size(const_cast<char*>(p));
          p[usable - 1] = 1;
          p[usable] = 1;
          _exit(0);
        },
        "")
        << how;
    EXPECT_DEATH(
        {
          auto* p = static_cast<char*>(resized_huge_block(how));
          auto base = reinterpret_cast<uintptr_t>(p) & ~(segment_size - 1);
          if (p == nullptr || base + header_size > reinterpret_cast<uintptr_t>(p)) _exit(0);
          reinterpret_cast<volatile char*>(base + header_size - 1)[0] = 1;
          _exit(0);
        },
        "")
        << how;
  }
}

// The same, alive: the resized blocks are whole and usable to their end.
TEST(Secure, ResizedHugeBlocksAreUsableToTheirEnd) {
  for (int how = 0; how < 4; ++how) {
    auto* p = static_cast<char*>(resized_huge_block(how));
    ASSERT_NE(p, nullptr) << how;
    size_t usable = strata_usable_size(p);
    ASSERT_GE(usable, size_t{5} << 20) << how;
    memset(p, 1, usable);
    strata_free(p);
  }
  EXPECT_TRUE(strata_heap_check());
}

// The OS page below a segment's first slice past its header (the header's tail) and the
// segment's last slice are guard pages: a block's underflow cannot reach strata's metadata, nor an overflow the next
// mapping.
TEST_F(SecureDeathTest, SegmentHeaderTailIsAGuardPage) {
  EXPECT_DEATH(
      {
        auto base = reinterpret_cast<uintptr_t>(strata_malloc(64)) & ~(segment_size - 1);
        reinterpret_cast<volatile char*>(base + header_size - 1)[0] = 1;
        _exit(0);
      },
      "");
}

TEST_F(SecureDeathTest, SegmentLastSliceIsAGuard) {
  EXPECT_DEATH(
      {
        auto base = reinterpret_cast<uintptr_t>(strata_malloc(64)) & ~(segment_size - 1);
        reinterpret_cast<volatile char*>(base + segment_size - slice_size)[0] = 1;
        _exit(0);
      },
      "");
}

// Blocks of a fresh page come out in an order an attacker cannot predict: not address order.
TEST(Secure, AFreshPageHandsOutBlocksInARandomOrder) {
  std::vector<uintptr_t> got;
  for (int i = 0; i < 128; ++i) got.push_back(reinterpret_cast<uintptr_t>(strata_malloc(176)));
  int ascending = 0;
  for (size_t i = 1; i < got.size(); ++i) ascending += got[i] == got[i - 1] + 176;
  EXPECT_LT(ascending, 32) << "consecutive allocations were neighbours in memory " << ascending << " times of 127";
  for (uintptr_t p : got) strata_free(reinterpret_cast<void*>(p));
  EXPECT_TRUE(strata_heap_check());
}


// The carving order must not give the process secret away.  The generator behind it is linear
// (xorshift): the runs of a fresh page's first 16 carved blocks are 16 nibbles of its first
// output, from which its seed follows.  Seeded with the secret XOR the thread pointer, it handed
// an attacker who saw the addresses of 256 allocations the secret, and with it every free
// block's canary and every page's link key (the secret from a freed block's canary, below, is
// the test's oracle, not the attack).
TEST(Secure, TheCarvingOrderDoesNotRevealTheSecret) {
  constexpr int n = 256;  // one carve of 64-byte blocks (16 KiB): 16 runs of 16
  uint64_t seen = 0, secret = 0;
  std::thread([&] {
    auto tp = reinterpret_cast<uint64_t>(__builtin_thread_pointer());
    std::vector<char*> got;
    for (int i = 0; i < n; ++i) got.push_back(static_cast<char*>(strata_malloc(64)));
    char* lo = *std::min_element(got.begin(), got.end());
    // The list is linked at its front: the last blocks out are the first carved.
    uint64_t x = 0;
    for (int i = 0; i < 16; ++i) x |= static_cast<uint64_t>((got[n - 1 - i] - lo) / 64 / 16) << (4 * i);
    auto unshift = [](uint64_t y, int s, bool left) {
      uint64_t v = y;
      for (int k = 0; k < 64 / s + 1; ++k) v = y ^ (left ? v << s : v >> s);
      return v;
    };
    x = unshift(unshift(unshift(x, 17, true), 7, false), 13, true);  // the seed before that output
    seen = x ^ tp;
    auto* f = reinterpret_cast<uint64_t*>(got[0]);
    strata_free(f);
    secret = static_cast<uint64_t*>(opaque(f))[1] ^ reinterpret_cast<uint64_t>(f);  // its canary
    for (int i = 1; i < n; ++i) strata_free(got[i]);
  }).join();
  EXPECT_NE(seen, secret) << "the order of 256 allocations gave the process secret away";
}

// fork() recounts the pages of the threads it leaves behind by walking their free lists.  A
// link a write after free had overwrote was followed as an address: the child faulted inside
// fork(), with no report, where the parent's pop reports it.  The walk ends there now, and the
// child's pop of the block reports it.
TEST_F(SecureDeathTest, AForgedLinkOnAnotherThreadsListIsReportedInAForkChild) {
  EXPECT_EXIT(
      {
        std::atomic<int> stage{0};
        char* victim = nullptr;
        std::thread t([&] {
          std::vector<void*> keep;
          for (int i = 0; i < 10; ++i) keep.push_back(strata_malloc(64));
          victim = static_cast<char*>(keep[5]);
          strata_free(victim);  // onto t's local_free
          stage = 1;
          while (stage != 2) usleep(1000);
        });
        while (stage != 1) usleep(1000);
        std::memset(opaque(victim), 0x41, 8);  // its link
        pid_t pid = fork();
        if (pid == 0) {
          std::vector<void*> got;
          for (int i = 0; i < 200000; ++i) got.push_back(strata_malloc(64));  // reaches t's page
          _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        _exit(WIFSIGNALED(status) ? 100 + WTERMSIG(status) : WEXITSTATUS(status));
      },
      // The Debug build (the sanitizer run) checks the page's lists at the recount and aborts
      // there first, naming the stray link.
      testing::ExitedWithCode(100 + SIGABRT),
      "free list of the page at .* corrupted|local_free list holds a stray, unmarked or cyclic block");
}

// A popped block's link and canary words are cleared, but only those of the layout that wrote
// them: a span given back (or a kept one-block span reshaped) and carved again for a larger
// class held every old block's canary and encoded link inside the new blocks, and a program that
// leaked a fresh block's uninitialised bytes (a buffer sent before it was filled) leaked stale
// canaries, each its address XOR the secret.  Found with 64-byte blocks freed and 1000-byte
// ones allocated: about one word in nine of the new blocks was a canary.
TEST(Secure, UninitialisedMemoryShowsNoStaleCanary) {
  size_t stale = 0, words = 0;
  std::thread([&] {
    auto* f = static_cast<uint64_t*>(strata_malloc(64));
    strata_free(f);
    uint64_t secret = static_cast<uint64_t*>(opaque(f))[1] ^ reinterpret_cast<uint64_t>(f);  // the oracle
    std::vector<void*> got;
    for (int i = 0; i < 200000; ++i) got.push_back(strata_malloc(64));  // 12.8 MB of spans carved
    for (void* p : got) strata_free(p);
    got.clear();
    for (size_t size : {size_t{1000}, size_t{4096}, size_t{100000}}) {
      for (int i = 0; i < 2000; ++i) {
        auto* p = static_cast<uint64_t*>(opaque(strata_malloc(size)));
        for (size_t k = 1; k < size / 8; ++k, ++words)
          if ((p[k] ^ reinterpret_cast<uint64_t>(p + k - 1)) == secret) ++stale;
        got.push_back(p);
      }
    }
    for (void* p : got) strata_free(p);
  }).join();
  EXPECT_GT(words, 0u);
  EXPECT_EQ(stale, 0u) << "of " << words << " uninitialised words, " << stale << " are stale canaries";
}

// POSIX lets no cancellation point into malloc.  A thread's first carve seeded its carving order
// from getrandom, a cancellation point: a thread with a deferred cancel pending unwound out of
// strata_malloc there, the page's capacity already counting blocks it had linked on no list
// (strata_heap_check: "page block counts do not add up"), and a program holding a mutex across
// malloc (no cleanup handler: malloc is no cancellation point) would have kept it locked.
constexpr int cancel_blocks = 20000;  // 48-byte blocks: pages of their own, carved by this thread
void* cancel_got[cancel_blocks];
std::atomic<int> cancel_count{0};
void* allocate_with_a_cancel_pending(void*) {
  pthread_cancel(pthread_self());  // deferred: acts at the next cancellation point
  for (int i = 0; i < cancel_blocks; ++i) {
    cancel_got[i] = strata_malloc(48);
    cancel_count.store(i + 1, std::memory_order_relaxed);
  }
  pthread_testcancel();
  return nullptr;
}

TEST(Secure, AThreadsFirstCarveIsNoCancellationPoint) {
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, allocate_with_a_cancel_pending, nullptr), 0);
  void* result = nullptr;
  ASSERT_EQ(pthread_join(t, &result), 0);
  EXPECT_EQ(result, PTHREAD_CANCELED);  // at pthread_testcancel
  int got = cancel_count.load();
  EXPECT_EQ(got, cancel_blocks) << "the cancel acted inside strata_malloc after " << got << " blocks";
  for (int i = 0; i < got; ++i) strata_free(cancel_got[i]);
  EXPECT_TRUE(strata_heap_check());
}

}  // namespace
