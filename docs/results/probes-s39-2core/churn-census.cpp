// Thread churn replica with a census (probes-s39 README section 3): churn-census MAXSIZE LANES GENERATIONS;
// DUMP=1 prints strata's committed and in-use bytes after every 16th generation, DUMP2=1 at each
// worker's end (strata_stats_get and, where the library has it, a scratch strata_debug_dump).
// g++ -O2 -pthread -o churn-census churn-census.cpp -ldl
// churn replica with knobs: MAXSZ (bytes), lanes
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <dlfcn.h>
#include <malloc.h>
struct st { uint64_t in_use, committed, peak, reserved, m, f, r, huge, a, b, c, segs, ab, rec, thr, bad; };
static std::atomic<long> live{0};
static long rss_kib() { long a, b; FILE* f = fopen("/proc/self/statm", "r"); fscanf(f, "%ld %ld", &a, &b); fclose(f); return b * 4; }
struct rng { uint64_t s; uint64_t next() { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; } double unit() { return (next() >> 11) * 0x1.0p-53; } };
static size_t lu(rng& r, double a, double b) { return size_t(std::exp(std::log(a) + r.unit() * (std::log(b) - std::log(a)))); }
static size_t maxsz;
size_t csz(rng& r) { double u = r.unit(); size_t s; if (u < 0.9) s = lu(r, 8, 512); else if (u < 0.99) s = lu(r, 512, 64 << 10); else s = lu(r, 64 << 10, 5 << 20); return s > maxsz ? maxsz : s; }
int main(int argc, char** argv) {
  maxsz = argc > 1 ? strtoull(argv[1], 0, 0) : (5 << 20);
  int lanes = argc > 2 ? atoi(argv[2]) : 1;
  int gens = argc > 3 ? atoi(argv[3]) : 384;
  std::vector<std::atomic<void*>> shared(1024);
  for (auto& s : shared) s = nullptr;
  auto worker = [&](uint64_t id) {
    rng r{id * 2654435761u + 12345};
    std::vector<void*> ws(128, nullptr);
    for (int i = 0; i < 2000; i++) {
      size_t k = r.next() % 128, sz = csz(r);
      if (ws[k]) live -= malloc_usable_size(ws[k]); free(ws[k]);
      char* p = (char*)malloc(sz); live += malloc_usable_size(p);
      for (size_t o = 0; o < sz; o += 4096) p[o] = char(i);
      p[sz - 1] = 1;
      ws[k] = p;
    }
    if (getenv("DUMP2")) { static auto get = (void (*)(st*))dlsym(RTLD_DEFAULT, "strata_stats_get"); st s{}; if (get) get(&s); printf("worker %lu end: live %ld KiB rss %ld KiB in_use %lu committed %lu\n", (unsigned long)id, live.load() / 1024, rss_kib(), s.in_use >> 10, s.committed >> 10);
      static auto dump = (void (*)())dlsym(RTLD_DEFAULT, "strata_debug_dump"); if (dump && id % 64 == 63) { fflush(stdout); dump(); } }
    for (int i = 0; i < 32; i++) { void* o = shared[r.next() % 1024].exchange(ws[i]); if (o) live -= malloc_usable_size(o); free(o); ws[i] = nullptr; }
    for (void* p : ws) if (p) { live -= malloc_usable_size(p); free(p); }
  };
  std::vector<std::thread> ls;
  for (int l = 0; l < lanes; l++) ls.emplace_back([&, l] { for (int g = 0; g < gens / lanes; g++) { std::thread(worker, l * 100000 + g).join();
    static auto get = (void (*)(st*))dlsym(RTLD_DEFAULT, "strata_stats_get");
    if (getenv("DUMP") && g % 16 == 15) { st s{}; if (get) get(&s); printf("gen %d live %ld KiB rss %ld KiB  strata in_use %lu committed %lu segs %lu\n", g, live.load() / 1024, rss_kib(), s.in_use >> 10, s.committed >> 10, s.segs); static auto dump = (void (*)())dlsym(RTLD_DEFAULT, "strata_debug_dump"); if (dump && g % 128 == 127) dump(); } } });
  for (auto& t : ls) t.join();
  for (auto& s : shared) free(s.load());
}
