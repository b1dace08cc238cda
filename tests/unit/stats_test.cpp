// Regression tests for issue 17's introspection probes: every number strata reports must be
// true, also while other threads allocate, free and exit (strata_* API only).
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"
#include "test_support.h"

namespace {

using strata_test::stats;

// Threads that allocate a few thousand blocks, free them and exit, one after the other, while
// the calling thread reads the statistics: each cumulative count must never go back, and no
// count of frees may pass the allocations it frees.
TEST(Issue17Stats, CumulativeCountsNeverGoBackWhileThreadsExit) {
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int round = 0; round < 1500 && !stop.load(); ++round) {
      std::thread t([] {
        std::vector<void*> blocks;
        for (int i = 0; i < 2000; ++i) blocks.push_back(strata_malloc(static_cast<size_t>(i % 500)));
        blocks.push_back(strata_malloc(size_t{3} << 20));  // a huge one: counted apart
        for (void* p : blocks) strata_free(p);
      });
      t.join();
    }
    stop = true;
  });
  uint64_t samples = 0, back = 0, most = 0, frees_past = 0;
  strata_stats_t last = stats();
  while (!stop.load()) {
    strata_stats_t s = stats();
    ++samples;
    for (auto [now, before] : {std::pair{s.malloc_count, last.malloc_count}, std::pair{s.free_count, last.free_count},
                               std::pair{s.remote_free_count, last.remote_free_count}}) {
      if (now < before) {
        ++back;
        if (before - now > most) most = before - now;
      }
    }
    if (s.free_count > s.malloc_count) ++frees_past;
    last = s;
  }
  churn.join();
  // Before: a reading that began before a thread's heap retired missed its counts (or counted
  // them twice): malloc_count went back by up to a thread's 2001 allocations 700-5000 times in
  // 0.1-0.8 M readings, and free_count passed malloc_count 250-1300 times.
  EXPECT_EQ(back, 0u) << "of " << samples << " readings; by up to " << most;
  EXPECT_EQ(frees_past, 0u) << "of " << samples << " readings";
  EXPECT_GT(samples, 0u);
}

pthread_key_t late_key;

// A thread-key destructor that runs after strata's (its key was made later) allocates from the
// shared orphan heap.
void allocate_late(void*) {
  void* p = strata_malloc(100);
  strata_free(p);
}

TEST(Issue17Stats, TheOrphanHeapIsNotCountedAsAThread) {
  strata_free(strata_malloc(1));  // this thread's heap, before the count
  uint64_t before = stats().threads;
  ASSERT_EQ(pthread_key_create(&late_key, allocate_late), 0);
  std::thread t([] {
    strata_free(strata_malloc(1));
    pthread_setspecific(late_key, reinterpret_cast<void*>(1));
  });
  t.join();
  // Before: one more thread for good, the heap of late allocations, which belongs to none.
  EXPECT_EQ(stats().threads, before);
  pthread_key_delete(late_key);
}

}  // namespace
