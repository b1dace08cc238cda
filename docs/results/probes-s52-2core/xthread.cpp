// Cross-thread torture: blocks made by short-lived producers, freed/realloc'd by consumers that
// hold them a while, one thread calling strata_collect, threads exiting (abandon/adopt).
// Every block carries its address ^ tag in its first and last words; a block handed out twice is
// caught when the first holder checks it.  At the end: heap_check and in_use back to baseline.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>
#include "strata/strata.h"

struct item { void* p; size_t n; uint64_t tag; };
static std::mutex qm[4];
static std::vector<item> q[4];
static std::atomic<bool> stop{false};
static std::atomic<long> bad{0}, ops{0};

static size_t pick(std::mt19937_64& r) {
  unsigned k = r() % 100;
  if (k < 60) return 16 + r() % 2048;
  if (k < 85) return 2048 + r() % (30 * 1024);
  if (k < 97) return 64 * 1024 + r() % (960 * 1024);
  return (2u << 20) + r() % (3u << 20);
}
static void mark(void* p, size_t n, uint64_t tag) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) ^ tag;
  memcpy(p, &v, 8); memcpy(static_cast<char*>(p) + n - 8, &v, 8);
}
static void check(const item& it) {
  uint64_t v = reinterpret_cast<uintptr_t>(it.p) ^ it.tag, a, b;
  memcpy(&a, it.p, 8); memcpy(&b, static_cast<char*>(it.p) + it.n - 8, 8);
  if (a != v || b != v) { if (bad++ < 5) fprintf(stderr, "corrupt %p n=%zu\n", it.p, it.n); }
}
static void producer(unsigned seed, int rounds) {
  std::mt19937_64 r(seed);
  for (int i = 0; i < rounds && !stop; ++i) {
    size_t n = pick(r);
    void* p = strata_malloc(n);
    uint64_t tag = r();
    mark(p, n, tag);
    item it{p, n, tag};
    if (r() % 4 == 0) { check(it); strata_free(p); continue; }
    unsigned k = r() % 4;
    std::lock_guard<std::mutex> g(qm[k]);
    q[k].push_back(it);
  }
}
static void consumer(unsigned seed, bool allocates) {
  std::mt19937_64 r(seed);
  std::vector<item> held;
  while (!stop) {
    unsigned k = r() % 4;
    std::vector<item> got;
    { std::lock_guard<std::mutex> g(qm[k]); got.swap(q[k]); }
    for (auto& it : got) {
      check(it);
      if (r() % 8 == 0) {  // realloc of another thread's block
        size_t n = it.n / 2 + 16 + r() % it.n;
        void* p = strata_realloc(it.p, n);
        it.p = p; it.n = n; mark(p, n, it.tag);
      }
      held.push_back(it);
    }
    if (allocates && r() % 2) { size_t n = pick(r); void* p = strata_malloc(n); uint64_t t = r(); mark(p, n, t); held.push_back({p, n, t}); }
    while (held.size() > (r() % 512)) {
      size_t i = r() % held.size();
      check(held[i]); strata_free(held[i].p); held[i] = held.back(); held.pop_back(); ops++;
    }
    if (r() % 64 == 0) std::this_thread::yield();
  }
  for (auto& it : held) { check(it); strata_free(it.p); }
}
int main(int argc, char** argv) {
  int secs = argc > 1 ? atoi(argv[1]) : 10;
  strata_stats_t s0; strata_collect(true); strata_stats_get(&s0);
  std::vector<std::thread> cons;
  for (int i = 0; i < 3; ++i) cons.emplace_back(consumer, 100 + i, i != 0);  // consumer 0 frees only
  std::thread collector([] {
    std::mt19937_64 r(7);
    while (!stop) {
      void* p = strata_malloc(64); strata_free(p);
      strata_collect(r() % 4 == 0);
      std::this_thread::sleep_for(std::chrono::microseconds(r() % 2000));
    }
  });
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
  unsigned seed = 1; long gens = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::vector<std::thread> prods;
    for (int i = 0; i < 3; ++i) prods.emplace_back(producer, seed++, 200 + (seed % 7) * 100);
    for (auto& t : prods) t.join();
    ++gens;
  }
  stop = true;
  for (auto& t : cons) t.join();
  collector.join();
  for (auto& v : q) for (auto& it : v) { check(it); strata_free(it.p); }
  strata_collect(true);
  bool ok = strata_heap_check();
  strata_stats_t s1; strata_stats_get(&s1);
  printf("gens=%ld frees=%ld bad=%ld heap_check=%d in_use %llu -> %llu committed %llu abandoned=%llu threads=%llu\n", gens, ops.load(), bad.load(), ok,
         (unsigned long long)s0.in_use_bytes, (unsigned long long)s1.in_use_bytes, (unsigned long long)s1.committed_bytes,
         (unsigned long long)s1.abandoned_segments, (unsigned long long)s1.threads);
  return bad || !ok;
}
