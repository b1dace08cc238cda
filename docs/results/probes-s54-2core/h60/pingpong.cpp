// One or two size classes, blocks going back half to their owner (local frees) and half through
// another thread (remote chains): pages holding free, local_free and a chain at once (the lazy
// collection), with the slow path's purge pass at every 64th call.
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <deque>
#include <vector>
#include "strata/strata.h"
struct q_t { std::mutex mu; std::deque<std::vector<void*>> q; };
static void chk(void* p, size_t n) { unsigned char* c = (unsigned char*)p; for (size_t i = 0; i < n; i++) if (c[i] != (unsigned char)((uintptr_t)p >> 4)) { fprintf(stderr, "FAIL corrupt %p\n", p); abort(); } }
static void fil(void* p, size_t n) { memset(p, (unsigned char)((uintptr_t)p >> 4), n); }
int main(int argc, char** argv) {
  uint64_t seed = argc > 1 ? atoll(argv[1]) : 1; long iters = argc > 2 ? atol(argv[2]) : 200000;
  int nth = argc > 3 ? atoi(argv[3]) : 2;
  size_t sizes[2] = {48 + 16 * (seed % 4), 700 + 100 * (seed % 5)};
  std::vector<q_t> to(nth), back(nth);
  std::atomic<int> running{nth};
  std::vector<std::thread> ts;
  for (int t = 0; t < nth; t++) ts.emplace_back([&, t] {
    std::mt19937_64 r(seed * 100 + t);
    std::vector<void*> mine;
    for (long i = 0; i < iters; i++) {
      size_t n = sizes[r() % 2];
      int k = 1 + r() % 64;
      std::vector<void*> b;
      for (int j = 0; j < k; j++) { void* p = strata_malloc(n); fil(p, n); b.push_back(p); }
      // half to the next thread, half kept and freed here later
      std::vector<void*> out;
      for (void* p : b) (r() % 2 ? out : mine).push_back(p);
      { std::lock_guard<std::mutex> g(to[(t + 1) % nth].mu); to[(t + 1) % nth].q.push_back(out); }
      std::vector<void*> in;
      { std::lock_guard<std::mutex> g(to[t].mu); if (!to[t].q.empty()) { in = to[t].q.front(); to[t].q.pop_front(); } }
      for (void* p : in) { chk(p, 48); strata_free(p); }
      while (mine.size() > (size_t)(r() % 2000)) { size_t j = r() % mine.size(); strata_free(mine[j]); mine[j] = mine.back(); mine.pop_back(); }
      if (r() % 5000 == 0) strata_collect(r() % 2);
      if (r() % 20000 == 0 && !strata_heap_check()) { fprintf(stderr, "FAIL heap_check\n"); abort(); }
    }
    for (void* p : mine) strata_free(p);
    running--;
    while (running > 0) { std::lock_guard<std::mutex> g(to[t].mu); while (!to[t].q.empty()) { for (void* p : to[t].q.front()) strata_free(p); to[t].q.pop_front(); } }
    { std::lock_guard<std::mutex> g(to[t].mu); while (!to[t].q.empty()) { for (void* p : to[t].q.front()) strata_free(p); to[t].q.pop_front(); } }
    if (!strata_heap_check()) { fprintf(stderr, "FAIL heap_check end\n"); abort(); }
  });
  for (auto& t : ts) t.join();
  for (auto& q : to) for (auto& b : q.q) for (void* p : b) strata_free(p);
  strata_collect(true);
  strata_stats_t s; strata_stats_get(&s);
  printf("final: in_use=%" PRIu64 " committed=%" PRIu64 "\n", s.in_use_bytes, s.committed_bytes);
  if (s.in_use_bytes) fprintf(stderr, "FAIL in_use\n");
}
