// Allocates through the standard names only (malloc, new, containers, threads), then reads
// strata's statistics: if strata did not serve those allocations, its counts do not move.
// Prints one JSON line: {"before": n, "after": n, "allocations": n, "checksum": n}.
#include <strata/strata.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

int main() {
  strata_stats_t before, after;
  strata_stats_get(&before);
  constexpr int kRounds = 2000;
  unsigned long checksum = 0, allocations = 0;
  for (int i = 0; i < kRounds; i++) {
    void* p = std::malloc(16 + i % 512);
    checksum += p != nullptr;
    std::free(p);
    auto* s = new std::string(64 + i % 100, 'x');
    checksum += s->size();
    delete s;
    allocations += 2;
  }
  std::vector<std::thread> threads;
  std::vector<unsigned long> sums(2);
  for (int t = 0; t < 2; t++)
    threads.emplace_back([&sums, t] {
      std::map<int, std::string> m;
      for (int i = 0; i < 1000; i++) m[i] = std::to_string(i * (t + 1));
      for (auto& [k, v] : m) sums[t] += v.size();
    });
  for (auto& th : threads) th.join();
  checksum += sums[0] + sums[1];
  strata_stats_get(&after);
  std::printf("{\"before\": %llu, \"after\": %llu, \"allocations\": %lu, \"checksum\": %lu}\n",
              (unsigned long long)before.malloc_count, (unsigned long long)after.malloc_count,
              allocations, checksum);
  return 0;
}
