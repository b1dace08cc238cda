// Producer on stream A allocates, consumer stream B uses and frees; B always has k kernels queued
// (host waits for the event of k steps ago), so B is never idle, but old frees have completed.
#include <strata/gpu/gpu.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
using namespace strata::gpu;
int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  const char* which = argv[1];
  const long steps = argc > 2 ? atol(argv[2]) : 20000;
  const std::size_t sz = argc > 3 ? std::size_t(atol(argv[3])) : (256 << 10);
  const int k = 8;
  sim_options so; so.capacity_bytes = std::size_t{1} << 40; so.check_reuse = true;
  auto dev = make_sim_backend(so);
  cuda_resource up(dev);
  std::unique_ptr<device_memory_resource> mr;
  if (!strcmp(which, "pool")) mr = std::make_unique<pool_resource>(up);
  else if (!strcmp(which, "arena")) mr = std::make_unique<arena_resource>(up);
  else if (!strcmp(which, "strata")) mr = std::make_unique<strata_resource>(up);
  else if (!strcmp(which, "async")) mr = std::make_unique<async_resource>(dev);
  stream_view A = dev->stream_create(), B = dev->stream_create();
  std::deque<void*> evs;
  for (long i = 1; i <= steps; ++i) {
    void* p = mr->allocate(sz, A);
    void* e = dev->event_create(); dev->event_record(e, A); dev->stream_wait_event(B, e); dev->event_destroy(e);
    dev->launch_spin(B, 20000);  // 20 us of work on B using p
    mr->deallocate(p, sz, B);
    void* ev = dev->event_create(); dev->event_record(ev, B); evs.push_back(ev);
    if (evs.size() > k) { dev->event_synchronize(evs.front()); dev->event_destroy(evs.front()); evs.pop_front(); }
    if (i % (steps / 5) == 0) { auto inf = mr->info(); std::printf("%s step %ld live<=%zu KiB reserved %zu MiB violations %zu\n", which, i, (k + 2) * sz >> 10, inf.reserved_bytes >> 20, dev->violation_count()); }
  }
  dev->device_synchronize();
}
