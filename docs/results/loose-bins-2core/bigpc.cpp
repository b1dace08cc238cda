// Producer/consumer of one-block-sized buffers (128 KiB-1 MiB): every free is remote.
// Usage: bigpc [BLOCKS] [whole]: the producer writes each block whole, or (without `whole`) only
// its first and last byte.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <sys/resource.h>
int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 200000;
  const bool whole = argc > 2 && std::string(argv[2]) == "whole";
  constexpr int ring = 64;
  static std::atomic<char*> slot[ring];
  auto t0 = std::chrono::steady_clock::now();
  std::thread prod([&] {
    uint64_t s = 88172645463325252ull;
    for (long i = 0; i < n; ++i) {
      s ^= s << 13; s ^= s >> 7; s ^= s << 17;
      size_t size = (128 << 10) + s % (896 << 10);
      char* p = static_cast<char*>(malloc(size));
      if (whole) {
        memset(p, 1, size);
      } else {
        p[0] = 1;
        p[size - 1] = 2;
      }
      std::atomic<char*>& q = slot[i % ring];
      while (q.load(std::memory_order_acquire) != nullptr) std::this_thread::yield();
      q.store(p, std::memory_order_release);
    }
  });
  std::thread cons([&] {
    for (long i = 0; i < n; ++i) {
      std::atomic<char*>& q = slot[i % ring];
      char* p;
      while ((p = q.load(std::memory_order_acquire)) == nullptr) std::this_thread::yield();
      q.store(nullptr, std::memory_order_release);
      if (p[0] != 1) abort();
      free(p);
    }
  });
  prod.join(); cons.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage ru{}; getrusage(RUSAGE_SELF, &ru);
  printf("{\"ops_per_sec\":%.1f,\"peak_rss_kb\":%ld}\n", n / s, ru.ru_maxrss);
}
