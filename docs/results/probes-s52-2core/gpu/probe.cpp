#include <strata/gpu/gpu.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <random>
#include <vector>
using namespace strata::gpu;
using clk = std::chrono::steady_clock;
static double us(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

// A: strata release_threshold: N chunks each half live; time of each free.
static void probe_a(std::size_t n) {
  sim_options so; so.capacity_bytes = std::size_t{1} << 46; so.check_reuse = false;
  auto dev = make_sim_backend(so);
  cuda_resource up(dev);
  strata_options o; o.initial_size = 0; o.min_growth = 256 << 10; o.heap_cache_bytes = 0; o.release_threshold = 0;
  strata_resource mr(up, o);
  std::vector<void*> v;
  for (std::size_t i = 0; i < 2 * n; ++i) v.push_back(mr.allocate(128 << 10));
  double mx = 0, tot = 0;
  for (std::size_t i = 0; i < 2 * n; i += 2) {  // one of each chunk's two blocks
    auto t0 = clk::now(); mr.deallocate(v[i], 128 << 10); auto t1 = clk::now();
    mx = std::max(mx, us(t0, t1)); tot += us(t0, t1);
  }
  std::printf("A strata release_threshold=0 chunks=%zu  free max %.1f us mean %.2f us reserved %zu MiB\n", n, mx, tot / n, mr.info().reserved_bytes >> 20);
  for (std::size_t i = 1; i < 2 * n; i += 2) mr.deallocate(v[i], 128 << 10);
}

// B: strata page heap with n small ready ranges and one pending split: time of a miss.
static void probe_b(std::size_t n) {
  sim_options so; so.capacity_bytes = std::size_t{1} << 46; so.check_reuse = false;
  auto dev = make_sim_backend(so);
  cuda_resource up(dev);
  strata_options o; o.initial_size = 0; o.min_growth = 64 << 20; o.heap_cache_bytes = 0;
  strata_resource mr(up, o);
  stream_view a = dev->stream_create(), b = dev->stream_create();
  const std::size_t sz = 80 << 10;  // a large class (single block)
  std::vector<void*> v;
  for (std::size_t i = 0; i < 2 * n; ++i) v.push_back(mr.allocate(sz, a));
  for (std::size_t i = 0; i < 2 * n; i += 2) mr.deallocate(v[i], sz, a);  // n holes, ready
  dev->device_synchronize();
  // a pending split: two adjacent blocks freed on a (held) and b (held)
  void* ga = dev->gate_enqueue(a); void* gb = dev->gate_enqueue(b);
  void* x = mr.allocate(1 << 20, a); void* y = mr.allocate(1 << 20, a);
  mr.deallocate(x, 1 << 20, a); mr.deallocate(y, 1 << 20, b);
  double mx = 0, tot = 0; int m = 200;
  std::vector<void*> big;
  for (int i = 0; i < m; ++i) {  // 4 MiB requests: no ready fit among the holes -> miss
    auto t0 = clk::now(); big.push_back(mr.allocate(4 << 20, a)); auto t1 = clk::now();
    mx = std::max(mx, us(t0, t1)); tot += us(t0, t1);
  }
  std::printf("B strata coalesce per miss: holes=%zu  4MiB alloc max %.1f us mean %.1f us\n", n, mx, tot / m);
  dev->gate_open(ga); dev->gate_open(gb); dev->device_synchronize();
  for (void* p : big) mr.deallocate(p, 4 << 20, a);
  for (std::size_t i = 1; i < 2 * n; i += 2) mr.deallocate(v[i], sz, a);
  dev->device_synchronize();
  dev->stream_destroy(a); dev->stream_destroy(b);
}

// C: pool, two streams, n fragmented free ranges; alternating allocations steal the whole list.
static void probe_c(std::size_t n) {
  sim_options so; so.capacity_bytes = std::size_t{1} << 46; so.check_reuse = false;
  auto dev = make_sim_backend(so);
  cuda_resource up(dev);
  pool_options o; o.initial_size = std::size_t{1} << 30;
  pool_resource mr(up, o);
  stream_view a = dev->stream_create(), b = dev->stream_create();
  std::vector<void*> v;
  for (std::size_t i = 0; i < 2 * n; ++i) v.push_back(mr.allocate(4096, a));
  for (std::size_t i = 0; i < 2 * n; i += 2) mr.deallocate(v[i], 4096, a);
  double mx = 0, tot = 0; int m = 200;
  for (int i = 0; i < m; ++i) {
    stream_view s = (i % 2) ? a : b;
    auto t0 = clk::now(); void* p = mr.allocate(4096, s); auto t1 = clk::now();
    mr.deallocate(p, 4096, s);
    mx = std::max(mx, us(t0, t1)); tot += us(t0, t1);
  }
  std::printf("C pool steal ping-pong: ranges=%zu  alloc max %.1f us mean %.1f us\n", n, mx, tot / m);
  dev->device_synchronize();
  for (std::size_t i = 1; i < 2 * n; i += 2) mr.deallocate(v[i], 4096, a);
  dev->stream_destroy(a); dev->stream_destroy(b);
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  const char* w = argc > 1 ? argv[1] : "abc";
  for (std::size_t n : {std::size_t(argc > 2 ? atoi(argv[2]) : 1000)}) {
    if (std::strchr(w, 'a')) probe_a(n);
    if (std::strchr(w, 'b')) probe_b(n);
    if (std::strchr(w, 'c')) probe_c(n);
  }
}
