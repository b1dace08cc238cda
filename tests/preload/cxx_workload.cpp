// A C++ program using the standard containers and threads; prints a checksum that does not
// depend on the allocator, so the run under strata can be compared with the run without it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

int main() {
  // redis, nginx and others overwrite their environment block to set the process title; the
  // statistics must still reach the STRATA_STATS_FILE named at start-up.
  if (char* v = getenv("STRATA_STATS_FILE")) memset(v, 'X', strlen(v));
  std::mutex m;
  std::map<std::string, long> totals;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::unordered_map<std::string, long> local;
      std::vector<std::unique_ptr<std::vector<int>>> keep;
      for (int i = 0; i < 60000; ++i) {
        std::string key = "k" + std::to_string((i * 7919 + t) % 5000);
        local[key] += i % 13;
        keep.push_back(std::make_unique<std::vector<int>>(i % 50, i));
        if (keep.size() > 500) keep.erase(keep.begin(), keep.begin() + 250);
      }
      std::lock_guard g(m);
      for (auto& [k, v] : local) totals[k] += v;
    });
  }
  for (auto& th : threads) th.join();
  unsigned long long sum = 0;
  for (auto& [k, v] : totals) sum = sum * 31 + static_cast<unsigned long long>(v) + k.size();
  std::printf("keys=%zu checksum=%llu\n", totals.size(), sum);
  return 0;
}
