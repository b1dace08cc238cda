// The e2-frag fragmented probe alone: fragment (objects), then time `batches` probes; an optional
// fifth argument masks the 11 sizes the batches draw from (bit c: kSizes[c]; default all).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cstdint>
static uint64_t s = 88172645463325252ull;
static uint64_t nxt() { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
constexpr size_t kSizes[] = {32, 48, 96, 160, 256, 512, 1200, 4000, 8192, 20000, 65536};
constexpr size_t kN = 11;
static char* mm(size_t n) { char* p = (char*)malloc(n); p[0] = 1; p[n - 1] = 1; return p; }
int main(int argc, char** argv) {
  size_t objects = argc > 1 ? atol(argv[1]) : 200000, batches = argc > 2 ? atol(argv[2]) : 20000;
  int frag = argc > 3 ? atoi(argv[3]) : 1; unsigned mask = argc > 4 ? strtoul(argv[4], 0, 0) : 0x7ff;
  std::vector<char*> surv;
  if (frag) {
    std::vector<char*> all(objects);
    for (size_t i = 0; i < objects; ++i) all[i] = mm(kSizes[(i * 5) % kN]);
    std::vector<size_t> odd;
    for (size_t i = 1; i < objects; i += 2) odd.push_back(i);
    for (size_t i = odd.size(); i > 1; --i) std::swap(odd[i - 1], odd[nxt() % i]);
    for (size_t i : odd) free(all[i]);
    for (size_t i = 0; i < objects; i += 2) surv.push_back(all[i]);
  }
  std::vector<char*> live(256);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t b = 0; b < batches; ++b) {
    for (size_t i = 0; i < 256; ++i) { size_t c = nxt() % kN; while (!((mask >> c) & 1)) c = nxt() % kN; live[i] = mm(kSizes[c]); }
    for (size_t i = 256; i-- > 0;) free(live[i]);
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  printf("%.1f ms\n", ms);
}
