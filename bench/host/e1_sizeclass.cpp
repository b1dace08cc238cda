// E1 — size-class throughput (EXPERIMENTS.md).  Per band, N threads each loop over a ring of
// live slots: free the slot's block, allocate a random size in the band, touch its first and last
// byte.  One op = one malloc + one free.  Prints one JSON object.  The allocator under test is
// whatever malloc the process has (LD_PRELOAD).
//
//   strata-bench-e1-sizeclass --band tiny|mid|large|big [--threads N] [--seconds S]
//                             [--slots K] [--seed X] [--smoke]
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"

namespace {

struct band {
  const char* name;
  size_t lo, hi;
};
constexpr band bands[] = {
    {"tiny", 8, 64},
    {"mid", 2 << 10, 32 << 10},
    {"large", 64 << 10, 1 << 20},
    {"big", 2 << 20, 4 << 20},
};

struct options {
  const band* b = nullptr;
  int threads = 1;
  double seconds = 1.0;
  size_t slots = 64;
  uint64_t seed = 42;
};

constexpr const char* usage =
    "usage: strata-bench-e1-sizeclass --band tiny|mid|large|big [--threads N] [--seconds S] [--slots K] "
    "[--seed X] [--smoke]";

options parse(int argc, char** argv) {
  options o;
  strata::bench::arg_parser args(argc, argv, "e1_sizeclass", usage);
  while (args.next()) {
    if (args.is("--band")) {
      std::string v = args.value();
      for (const band& b : bands)
        if (v == b.name) o.b = &b;
      if (o.b == nullptr) args.fail("unknown band '" + v + "'");
    } else if (args.is("--threads")) {
      o.threads = args.value<int>();
      if (o.threads < 1 || o.threads > 1024) args.fail("--threads must be 1..1024");
    } else if (args.is("--seconds")) {
      o.seconds = args.value<double>();
      if (!(o.seconds > 0)) args.fail("--seconds must be > 0");
    } else if (args.is("--slots")) {
      o.slots = args.value<size_t>();
      if (o.slots < 1) args.fail("--slots must be >= 1");
    } else if (args.is("--seed")) {
      o.seed = args.value<uint64_t>();
    } else if (args.is("--smoke")) {
      o.seconds = 0.05;
    } else {
      args.unknown();
    }
  }
  if (o.b == nullptr) args.fail("--band is required");
  return o;
}

inline uint64_t next(uint64_t& s) {  // xorshift64*
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s * 0x2545F4914F6CDD1Dull;
}

}  // namespace

int main(int argc, char** argv) {
  options o = parse(argc, argv);
  std::atomic<bool> go{false}, stop{false};
  std::vector<uint64_t> ops(o.threads, 0);
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < o.threads; ++t) {
    workers.emplace_back([&, t] {
      uint64_t rng = o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(t) + 1;
      size_t span = o.b->hi - o.b->lo + 1;
      std::vector<char*> slot(o.slots, nullptr);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 256; ++k) {
          uint64_t r = next(rng);
          size_t i = r % o.slots;
          size_t size = o.b->lo + (r >> 20) % span;
          std::free(slot[i]);
          char* p = static_cast<char*>(std::malloc(size));
          if (p == nullptr) {
            failures.fetch_add(1);
            slot[i] = nullptr;
            continue;
          }
          p[0] = static_cast<char>(n);
          p[size - 1] = static_cast<char>(n);
          slot[i] = p;
          ++n;
        }
      }
      for (char* p : slot) std::free(p);
      ops[t] = n;
    });
  }
  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  stop.store(true);
  for (auto& w : workers) w.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t total = 0;
  for (uint64_t n : ops) total += n;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "{\"workload\":\"e1\",\"band\":\"%s\",\"min_size\":%zu,\"max_size\":%zu,\"threads\":%d,\"slots\":%zu,"
      "\"seconds\":%.4f,\"ops\":%llu,\"ops_per_sec\":%.1f,\"peak_rss_kb\":%ld,\"failures\":%d}\n",
      o.b->name, o.b->lo, o.b->hi, o.threads, o.slots, elapsed, static_cast<unsigned long long>(total),
      static_cast<double>(total) / elapsed, ru.ru_maxrss, failures.load());
  return failures.load() == 0 ? 0 : 1;
}
