// replace: one thread replaces random entries of a table of `slots` blocks with new blocks of a
// uniform random size in [min, max] (free the old one, then malloc, then write the new block's
// first and last byte), `ops` times after filling the table.  Prints nanoseconds per replacement.
// Session 54's probe of free-then-malloc reuse (README.md, section 1).
//   g++ -O2 -o replace replace.cpp && LD_PRELOAD=lib.so ./replace SLOTS OPS [MAX [MIN]]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

struct rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: replace SLOTS OPS [MAX [MIN]]\n");
    return 2;
  }
  size_t slots = std::strtoul(argv[1], nullptr, 10);
  long ops = std::strtol(argv[2], nullptr, 10);
  size_t max_size = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 16384;
  size_t min_size = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 8;
  if (slots == 0 || ops <= 0 || min_size == 0 || min_size > max_size) {
    std::fprintf(stderr, "replace: need SLOTS > 0, OPS > 0, 0 < MIN <= MAX\n");
    return 2;
  }
  rng r{0x9e3779b97f4a7c15ull};
  auto size = [&] { return min_size + r.next() % (max_size - min_size + 1); };
  std::vector<char*> table(slots);
  for (auto& p : table) {
    size_t n = size();
    p = static_cast<char*>(std::malloc(n));
    if (p == nullptr) return 1;
    p[0] = p[n - 1] = 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (long k = 0; k < ops; ++k) {
    size_t i = r.next() % slots, n = size();
    std::free(table[i]);
    char* p = static_cast<char*>(std::malloc(n));
    if (p == nullptr) return 1;
    p[0] = p[n - 1] = static_cast<char>(k);
    table[i] = p;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.2f ns/op\n", s * 1e9 / static_cast<double>(ops));
  for (char* p : table) std::free(p);
  return 0;
}
