// Exit storm: producers allocate (many loose pages) and exit at once; frees-only threads free
// what they left while the main thread adopts (strata_collect(true), loose-sized mallocs).
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>
#include "strata/strata.h"
struct blk { uint64_t* p; size_t n; };
std::mutex mu; std::vector<blk> pool; std::atomic<bool> done{false};
static void fill(blk b) { b.p[0] = (uintptr_t)b.p; b.p[1] = b.n; b.p[b.n / 8 - 1] = ~(uintptr_t)b.p; }
static void check(blk b) {
  if (b.p[0] != (uintptr_t)b.p || b.p[1] != b.n || b.p[b.n / 8 - 1] != ~(uintptr_t)b.p) {
    fprintf(stderr, "FAIL corrupt %p n=%zu\n", (void*)b.p, b.n); abort(); }
}
static size_t sz(std::mt19937_64& r) {
  switch (r() % 4) { case 0: return 32 + r() % 2000; case 1: return 2048 + r() % 30000;
    case 2: return 131072 + 8 + r() % (1900u << 10); default: return 64 + r() % 512; }
}
int main(int argc, char** argv) {
  uint64_t seed = argc > 1 ? atoll(argv[1]) : 1; int rounds = argc > 2 ? atoi(argv[2]) : 50;
  std::mt19937_64 R(seed);
  for (int round = 0; round < rounds; round++) {
    done = false;
    std::vector<std::thread> prod, cons;
    std::atomic<int> live_prod{0};
    int np = 2 + R() % 6, nc = 1 + R() % 3;
    for (int i = 0; i < np; i++) { live_prod++; prod.emplace_back([s = R(), &live_prod] {
      std::mt19937_64 r(s); std::vector<blk> mine;
      int n = 20 + r() % 200;
      for (int k = 0; k < n; k++) { size_t m = sz(r); blk b{(uint64_t*)strata_malloc(m), m}; fill(b); mine.push_back(b);
        if (r() % 5 == 0 && !mine.empty()) { size_t j = r() % mine.size(); check(mine[j]); strata_free(mine[j].p); mine[j] = mine.back(); mine.pop_back(); } }
      { std::lock_guard<std::mutex> g(mu); for (auto& b : mine) pool.push_back(b); }
      live_prod--; }); }
    for (int i = 0; i < nc; i++) cons.emplace_back([s = R(), &live_prod] {
      std::mt19937_64 r(s);
      for (;;) { blk b{nullptr, 0};
        { std::lock_guard<std::mutex> g(mu); if (!pool.empty()) { size_t j = r() % pool.size(); b = pool[j]; pool[j] = pool.back(); pool.pop_back(); } }
        if (!b.p) { if (live_prod == 0) break; std::this_thread::yield(); continue; }
        check(b); strata_free(b.p);
        if (r() % 300 == 0) strata_collect(r() % 2);
      } });
    std::vector<blk> mine;
    while (live_prod > 0) {
      if (R() % 3 == 0) strata_collect(true);
      size_t m = 131072 + 8 + R() % (1u << 20); blk b{(uint64_t*)strata_malloc(m), m}; fill(b); mine.push_back(b);
      if (mine.size() > 4) { check(mine.front()); strata_free(mine.front().p); mine.erase(mine.begin()); }
      std::this_thread::yield();
    }
    for (auto& t : prod) t.join();
    for (auto& t : cons) t.join();
    for (auto& b : pool) { check(b); strata_free(b.p); } pool.clear();
    for (auto& b : mine) { check(b); strata_free(b.p); }
    strata_collect(true);
    if (!strata_heap_check()) { fprintf(stderr, "FAIL heap_check round %d\n", round); abort(); }
    strata_stats_t s; strata_stats_get(&s);
    if (s.in_use_bytes != 0 || s.abandoned_segments != 0 || s.committed_bytes > (4u << 20))
      fprintf(stderr, "FAIL round %d: in_use=%" PRIu64 " abandoned=%" PRIu64 " committed=%" PRIu64 " segments=%" PRIu64 "\n", round, s.in_use_bytes, s.abandoned_segments, s.committed_bytes, s.segments);
  }
  strata_stats_t s; strata_stats_get(&s);
  printf("final: in_use=%" PRIu64 " committed=%" PRIu64 " segments=%" PRIu64 " abandoned=%" PRIu64 "\n", s.in_use_bytes, s.committed_bytes, s.segments, s.abandoned_segments);
}
