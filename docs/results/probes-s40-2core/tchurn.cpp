// Thread churn, generational: every round starts N threads that each make a few thousand
// zeroed blocks (mostly 8-128 B, some kept until the thread ends, rarely 50 KB, 500 KB or 5 MB),
// write every word, free most at random, swap some with a process-wide exchange table (so blocks
// outlive the thread that made them), free what is left and exit; then the next round.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <chrono>
#include <sys/resource.h>

static constexpr size_t exchange_slots = 1000;
static std::atomic<void*> exchange_table[exchange_slots];
static std::atomic<long> bad{0};

struct rng { uint64_t s; uint64_t next() { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; } bool one_in(unsigned pct100, unsigned of = 100) { return next() % of < pct100; } };

static void* make(size_t words, rng& r) {
  if (r.next() % 100 == 0) {               // 1 %: bigger
    uint64_t u = r.next() % 100;
    words *= u == 0 ? 10000 : u < 10 ? 1000 : 100;
  }
  auto* p = static_cast<uint64_t*>(calloc(words, 8));
  if (!p) { std::fprintf(stderr, "calloc failed\n"); std::exit(2); }
  for (size_t i = 0; i < words; ++i) { if (p[i]) bad++; p[i] = words - i; }
  return p;
}
static void drop(void* q) {
  if (!q) return;
  auto* p = static_cast<uint64_t*>(q);
  size_t words = p[0];
  if (words == 0 || p[words - 1] != 1) bad++;
  free(p);
}

static void worker(int id, int scale) {
  rng r{uint64_t(id + 1) * 0x9E3779B97F4A7C15ull};
  size_t allocs = 100 * size_t(scale) * (id % 8 + 1), keep = allocs / 2;
  std::vector<void*> live;  // grows by realloc inside std::vector
  void** kept = static_cast<void**>(calloc(keep, sizeof(void*)));
  size_t nkept = 0;
  while (allocs > 0 || keep > 0) {
    if (keep == 0 || (r.next() % 2 == 0 && allocs > 0)) {
      --allocs;
      live.push_back(make(size_t(1) << (r.next() % 5), r));
    } else {
      kept[nkept++] = make(size_t(1) << (r.next() % 7), r);
      --keep;
    }
    if (r.next() % 3 != 0 && !live.empty()) {
      size_t i = r.next() % live.size();
      drop(live[i]);
      live[i] = nullptr;
    }
    if (r.next() % 4 == 0 && !live.empty()) {
      size_t i = r.next() % live.size();
      live[i] = exchange_table[r.next() % exchange_slots].exchange(live[i]);
    }
  }
  for (size_t i = 0; i < nkept; ++i) drop(kept[i]);
  for (void* p : live) drop(p);
  free(kept);
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, scale = argc > 2 ? atoi(argv[2]) : 50, rounds = argc > 3 ? atoi(argv[3]) : 25;
  auto t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back(worker, round * threads + t, scale);
    for (auto& t : ts) t.join();
  }
  for (auto& s : exchange_table) drop(s.exchange(nullptr));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage ru{}; getrusage(RUSAGE_SELF, &ru);
  std::printf("%.3f s  %ld KB  %ld flt  bad=%ld\n", s, ru.ru_maxrss, ru.ru_minflt, bad.load());
  return bad.load() != 0;
}
