#include <cstdio>
#include <thread>
#include <vector>
#include "strata/strata.h"
int main() {
  // main's heap: one segment, used, then emptied (kept: its last), purged at once (delay 0)
  std::vector<void*> mine;
  for (int i = 0; i < 64; ++i) mine.push_back(strata_malloc(8192));
  std::vector<void*> theirs;
  std::thread([&] { for (int i = 0; i < 200; ++i) theirs.push_back(strata_malloc(8192)); }).join();
  for (void* p : theirs) strata_free(p);
  for (void* p : mine) strata_free(p);
  strata_stats_t s; strata_stats_get(&s);
  printf("abandoned %lu segments %lu\n", (unsigned long)s.abandoned_segments, (unsigned long)s.segments);
  void* p = strata_malloc(100 * 1024);  // a class main never used: span search adopts
  strata_stats_get(&s);
  printf("ok %p abandoned %lu segments %lu reclaimed %lu\n", p, (unsigned long)s.abandoned_segments, (unsigned long)s.segments, (unsigned long)s.reclaimed_segments);
  strata_free(p);
}
