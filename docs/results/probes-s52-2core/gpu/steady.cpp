#include <strata/gpu/gpu.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>
using namespace strata::gpu;
struct blk { void* p; std::size_t n; stream_view s; };
int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  const char* which = argv[1];
  const int nstreams = argc > 2 ? atoi(argv[2]) : 4;
  const long steps = argc > 3 ? atol(argv[3]) : 200000;
  const double maxlog = argc > 4 ? atof(argv[4]) : 23;  // sizes 2^8 .. 2^maxlog
  const int kernels = argc > 5 ? atoi(argv[5]) : 0;    // launch a 0-ns kernel every N steps
  sim_options so; so.capacity_bytes = std::size_t{1} << 40; so.check_reuse = false;
  auto dev = make_sim_backend(so);
  cuda_resource up(dev);
  std::unique_ptr<device_memory_resource> mr;
  if (!strcmp(which, "pool")) { pool_options po; if (getenv("GF")) po.growth_factor = atof(getenv("GF")); mr = std::make_unique<pool_resource>(up, po); }
  else if (!strcmp(which, "arena")) mr = std::make_unique<arena_resource>(up);
  else if (!strcmp(which, "strata")) mr = std::make_unique<strata_resource>(up);
  std::vector<stream_view> ss;
  for (int i = 0; i < nstreams; ++i) ss.push_back(dev->stream_create());
  device_memory_resource& r = mr ? *mr : static_cast<device_memory_resource&>(up);
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> lg(8, maxlog);
  auto size = [&] { return std::size_t(std::exp2(lg(rng))); };
  std::vector<blk> live; std::size_t live_bytes = 0;
  const std::size_t target = std::size_t{256} << 20;
  while (live_bytes < target) { auto s = ss[rng() % ss.size()]; auto n = size(); live.push_back({r.allocate(n, s), n, s}); live_bytes += n; }
  std::size_t max_live = live_bytes;
  for (long i = 1; i <= steps; ++i) {
    // free one, then allocate until back at target
    auto k = rng() % live.size();
    auto s = ss[rng() % ss.size()];  // freed on a random stream (stream-ordered after use there)
    dev->stream_synchronize(live[k].s);
    r.deallocate(live[k].p, live[k].n, s); live_bytes -= live[k].n; live[k] = live.back(); live.pop_back();
    while (live_bytes < target) { auto s2 = ss[rng() % ss.size()]; auto n = size(); live.push_back({r.allocate(n, s2), n, s2}); live_bytes += n; }
    max_live = std::max(max_live, live_bytes);
    if (kernels && i % kernels == 0) dev->launch_spin(ss[rng() % ss.size()], 0);
    if (i % (steps / 5) == 0) { auto inf = r.info(); std::printf("%s streams=%d step %ld live %zu MiB (max %zu) reserved %zu MiB peak %zu MiB\n", which, nstreams, i, live_bytes >> 20, max_live >> 20, inf.reserved_bytes >> 20, inf.peak_reserved_bytes >> 20); }
  }
  dev->device_synchronize();
  for (auto& b : live) r.deallocate(b.p, b.n, b.s);
}
