#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>
#include <atomic>
#include "strata/strata.h"
int main(int argc, char** argv) {
  size_t n = 1 << 20, size = argc > 1 ? atoi(argv[1]) : 16;
  std::vector<void*> v(n);
  for (auto& p : v) p = strata_malloc(size);
  std::shuffle(v.begin(), v.end(), std::mt19937_64(1));
  std::atomic<int> stage{0};
  std::thread c([&] {
    strata_free(strata_malloc(size));  // allocates: not frees_only
    for (void* p : v) strata_free(p);
    stage = 1;
    while (stage != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // idle
  });
  while (stage != 1) std::this_thread::yield();
  for (int i = 0; i < 10; i++) { strata_collect(false); std::this_thread::sleep_for(std::chrono::milliseconds(50)); }
  strata_collect(true);
  strata_stats_t s; strata_stats_get(&s);
  printf("live %zu B blocks: %zu MiB; after the idle consumer freed all: in_use=%" PRIu64 " committed=%" PRIu64 " KiB\n", size, n * size >> 20, s.in_use_bytes, s.committed_bytes >> 10);
  stage = 2; c.join();
  strata_collect(true); strata_stats_get(&s);
  printf("after its exit: committed=%" PRIu64 " KiB\n", s.committed_bytes >> 10);
}
