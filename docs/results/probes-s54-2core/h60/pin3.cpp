// The producer exits; the consumer (it allocated once) frees all of its blocks and idles; the
// main thread adopts what is left (strata_collect(true)).
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
#include "strata/strata.h"
int main(int argc, char** argv) {
  size_t size = argc > 1 ? atoi(argv[1]) : 128, n = (size_t{64} << 20) / size;
  std::vector<void*> v(n);
  std::thread([&] { for (auto& p : v) p = strata_malloc(size); }).join();
  std::shuffle(v.begin(), v.end(), std::mt19937_64(1));
  std::atomic<int> stage{0};
  std::thread c([&] {
    if (!getenv("FO")) strata_free(strata_malloc(size));
    for (void* p : v) strata_free(p);
    if (getenv("CC")) strata_collect(atoi(getenv("CC")));
    stage = 1;
    while (stage != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (stage != 1) std::this_thread::yield();
  for (int i = 0; i < 5; i++) { strata_collect(true); std::this_thread::sleep_for(std::chrono::milliseconds(50)); }
  strata_stats_t s; strata_stats_get(&s);
  strata_stats_t t; strata_stats_get(&t); printf("abandoned=%" PRIu64 " reclaimed=%" PRIu64 " in_use=%" PRIu64 "\n", t.abandoned_segments, t.reclaimed_segments, t.in_use_bytes);
  printf("%zu B x %zu (64 MiB) freed by an idle consumer: committed=%" PRIu64 " KiB segments=%" PRIu64 "\n", size, n, s.committed_bytes >> 10, s.segments);
  stage = 2; c.join();
  strata_collect(true); strata_stats_get(&s);
  printf("after its exit: committed=%" PRIu64 " KiB\n", s.committed_bytes >> 10);
}
