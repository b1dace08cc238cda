// Issue 14: the invariant checkers (core/check.h) hold on a heap that has been through every
// path, and catch a heap that was corrupted behind strata's back.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "strata/strata.h"

namespace {

TEST(Invariants, HoldAfterMixedAllocationsAndFrees) {
  std::vector<void*> live;
  uint64_t x = 42;
  for (int i = 0; i < 200000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t size = 1 + (x >> 33) % (x & 1 ? 256 : 70000);
    if (!live.empty() && (x >> 20) % 3 == 0) {
      size_t k = (x >> 40) % live.size();
      strata_free(live[k]);
      live[k] = live.back();
      live.pop_back();
    } else {
      live.push_back(strata_malloc(size));
    }
    if (i % 20000 == 0) {
      ASSERT_TRUE(strata_heap_check()) << "after " << i << " operations";
    }
  }
  // Frees from another thread land on thread_free lists; collecting them keeps the counts right.
  std::thread other([&] {
    for (size_t k = 0; k < live.size(); k += 2) strata_free(live[k]);
  });
  other.join();
  EXPECT_TRUE(strata_heap_check());
  for (size_t k = 1; k < live.size(); k += 2) strata_free(live[k]);
  strata_collect(false);
  EXPECT_TRUE(strata_heap_check());
}

// A page's remote list carries its length (page.h remote_count): chains pushed by other threads
// are taken without a walk, onto `free` when it is empty, else behind the owner's own frees.
// The counts must hold whichever lists are empty when the owner collects.
TEST(Invariants, HoldWhenRemoteChainsMeetLocalFrees) {
  strata_stats_t before{}, after{};
  strata_stats_get(&before);
  std::vector<void*> blocks(6000);
  for (auto& p : blocks) p = strata_malloc(48);
  for (size_t i = 0; i < blocks.size(); i += 3) strata_free(blocks[i]);  // local_free
  std::thread([&] {  // frees only: its frees go back as chains, the last ones when it exits
    for (size_t i = 1; i < blocks.size(); i += 3) strata_free(blocks[i]);
  }).join();
  ASSERT_TRUE(strata_heap_check());
  // Allocations collect the pages: some with `free` empty, some not, some with local frees.
  std::vector<void*> again(5000);
  for (auto& p : again) p = strata_malloc(48);
  ASSERT_TRUE(strata_heap_check());
  std::thread([&] {  // more chains into pages the owner now allocates from
    for (size_t i = 0; i < again.size(); i += 2) strata_free(again[i]);
  }).join();
  for (size_t i = 2; i < blocks.size(); i += 3) strata_free(blocks[i]);
  for (size_t i = 1; i < again.size(); i += 2) strata_free(again[i]);
  strata_collect(true);
  EXPECT_TRUE(strata_heap_check());
  strata_stats_get(&after);
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes) << "blocks lost from the counts";
}

// Blocks of 128 KiB to 1 MiB are one to a page: such a page goes straight to its class's full
// list when its block is taken, and from there to its segment (or to the class's spares)
// when the block comes back, by its owner or by another thread.  The lists must stay right, and
// the spans must come back: the committed memory falls once everything is freed.
TEST(Invariants, HoldForOneBlockPagesFreedHereAndElsewhere) {
  std::vector<void*> live(48, nullptr);
  uint64_t x = 7;
  for (int i = 0; i < 20000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t k = (x >> 40) % live.size();
    strata_free(live[k]);
    live[k] = strata_malloc((size_t{128} << 10) + (x >> 33) % (size_t{896} << 10));
    ASSERT_NE(live[k], nullptr);
    static_cast<char*>(live[k])[0] = 1;
    if (i % 2000 == 0) {
      ASSERT_TRUE(strata_heap_check()) << "after " << i << " operations";
    }
  }
  size_t live_bytes = 0;
  for (void* p : live) live_bytes += strata_usable_size(p);
  std::thread other([&] {
    for (size_t k = 0; k < live.size(); k += 2) strata_free(live[k]);
  });
  other.join();
  for (int i = 0; i < 64; ++i) strata_free(strata_malloc((size_t{128} << 10) + i * 4096));  // collects them
  EXPECT_TRUE(strata_heap_check());
  for (size_t k = 1; k < live.size(); k += 2) strata_free(live[k]);
  strata_collect(true);
  EXPECT_TRUE(strata_heap_check());
  strata_stats_t s{};
  strata_stats_get(&s);
  EXPECT_LT(s.committed_bytes, live_bytes / 2) << s.committed_bytes << " of " << live_bytes << ": the spans of the freed one-block pages were not given back";
}

// A class keeps up to 8 emptied one-block pages for its next allocations (its spares), but they
// give their spans back before the heap touches memory it has not touched yet: 8 blocks of 1 MiB
// freed, then 6 of 1.25 MiB (another class) fit in their slices and commit nothing new.
TEST(Invariants, SparePagesGiveWayBeforeFreshMemoryIsTouched) {
  strata_collect(true);  // whatever earlier tests left free is given back: only a's slices are warm
  std::vector<void*> a(8), b(6);
  for (void*& p : a) {
    p = strata_malloc(size_t{1} << 20);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, size_t{1} << 20);
  }
  strata_stats_t before{}, after{};
  strata_stats_get(&before);
  for (void* p : a) strata_free(p);
  for (void*& p : b) {
    p = strata_malloc(size_t{1280} << 10);
    ASSERT_NE(p, nullptr);
    std::memset(p, 2, size_t{1280} << 10);
  }
  strata_stats_get(&after);
  EXPECT_TRUE(strata_heap_check());
  EXPECT_LE(after.committed_bytes, before.committed_bytes + (size_t{1} << 20))
      << "the freed pages were kept while fresh memory was committed for the next allocations";
  for (void* p : b) strata_free(p);
}

// A use-after-free write that redirects a freed block's link into the middle of a live block
// is what a heap overflow exploit does; the checker must see it.
TEST(Invariants, DetectAFreeListLinkOverwritten) {
  void* a = strata_malloc(48);
  void* b = strata_malloc(48);
  ASSERT_TRUE(strata_heap_check());
  strata_free(a);  // a is on its page's local free list now, its first word the link
  void* saved;
  std::memcpy(&saved, a, sizeof saved);
  void* forged = static_cast<char*>(b) + 8;
  std::memcpy(a, &forged, sizeof forged);
  testing::internal::CaptureStderr();
  bool ok = strata_heap_check();
  std::string said = testing::internal::GetCapturedStderr();
  std::memcpy(a, &saved, sizeof saved);  // repair before anything pops from that list
  EXPECT_FALSE(ok);
  EXPECT_NE(said.find("invariant broken"), std::string::npos) << said;
  EXPECT_TRUE(strata_heap_check());
  strata_free(b);
}

// In the Debug build (STRATA_DEBUG=3) the expensive assertions run the checkers on the slow
// paths: the next collection of the corrupted page aborts with the broken invariant named.
TEST(InvariantsDeathTest, DebugBuildAbortsOnACorruptedFreeList) {
#if !STRATA_TEST_DEBUG_CHECKS
  GTEST_SKIP() << "assertions are compiled out of this build type (core/assert.h)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto* b = static_cast<char*>(strata_malloc(48));
        void* a = strata_malloc(48);
        strata_free(a);
        void* forged = b + 8;
        std::memcpy(a, &forged, sizeof forged);
        std::memset(b + 8, 0, 8);  // the forged block's own link ends the list
        strata_collect(false);
      },
      "invariant broken");
#endif
}

// A thread that never allocated has no heap: nothing to check, nothing broken.
TEST(Invariants, AThreadWithoutHeapPasses) {
  bool ok = false;
  std::thread t([&] { ok = strata_heap_check(); });
  t.join();
  EXPECT_TRUE(ok);
}

}  // namespace
