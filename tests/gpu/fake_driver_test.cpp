// The real-driver backend (src/gpu/cuda_backend.cpp, driver.cpp) over a fake libcuda
// (fake_cuda.cpp, a test double over host memory and host threads) loaded through
// STRATA_CUDA_LIBRARY: the device resources' round trips, out-of-memory reports, driver errors,
// the fallbacks for older drivers, and stream-ordered reuse on recycled stream handles.
//
// The driver is loaded and cuInit'ed once per process, so each test suite below is a scenario
// (a driver build and its switches) that owns the process it runs in first; ctest runs every
// test in a process of its own, and a run of the whole binary skips the other scenarios' tests
// (the TSan build registers one run per scenario).
#include <strata/gpu/gpu.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace strata::gpu;

namespace {

std::string& claimed() {
  static std::string scenario;
  return scenario;
}
const char* claimed_library = nullptr;

// Sets the scenario's environment unless another scenario owns the process: false then.
bool enter(const char* scenario, const char* library,
           std::initializer_list<std::pair<const char*, const char*>> env = {}) {
  if (!claimed().empty()) return claimed() == scenario;
  claimed() = scenario;
  claimed_library = library;
  ::setenv("STRATA_CUDA_LIBRARY", library, 1);
  ::unsetenv("STRATA_FAKE_CUDA_FAIL");
  ::setenv("STRATA_FAKE_CUDA_TOTAL_MEMORY", "67108864", 1);  // 64 MiB
  for (auto [name, value] : env) ::setenv(name, value, 1);
  return true;
}

#define ENTER(...)                                                                     \
  if (!enter(__VA_ARGS__)) {                                                           \
    GTEST_SKIP() << "another scenario owns this process's driver (run it alone: "      \
                 << "--gtest_filter="                                                  \
                 << ::testing::UnitTest::GetInstance()->current_test_suite()->name() \
                 << ".*)";                                                             \
  }

// The fake's count of live objects (strata_fake_cuda_live).
long live(const char* what) {
  void* lib = ::dlopen(claimed_library, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return -2;
  auto f = reinterpret_cast<long (*)(const char*)>(::dlsym(lib, "strata_fake_cuda_live"));
  const long n = f ? f(what) : -3;
  ::dlclose(lib);
  return n;
}

// Device memory held when a test starts: a test with a failing cuMemFreeAsync loses its blocks
// for good (as on the driver), and a run of the whole suite shares one fake driver.
struct counts {
  long allocations = live("allocations");
  long device_bytes = live("device_bytes");
};

// Fails the named entry points with a code for the life of the object.
struct failing {
  explicit failing(const char* spec) { ::setenv("STRATA_FAKE_CUDA_FAIL", spec, 1); }
  ~failing() { ::unsetenv("STRATA_FAKE_CUDA_FAIL"); }
};

stack_options small_stack() {
  stack_options o;
  o.initial_size = std::size_t{4} << 20;
  o.strata.pressure_wait = std::chrono::milliseconds(0);
  return o;
}

// body(name, resource) for each resource of resource_stack::names() over backend b, each in a
// small stack of its own, destroyed before the next.
template <class Backend, class Body>
void for_each_resource(const Backend& b, Body body) {
  for (const auto& name : resource_stack::names()) {
    SCOPED_TRACE(name);
    resource_stack stack(name, b, small_stack());
    body(name, stack.top());
  }
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

constexpr const char* full = "fake_cuda";

// ---- a CUDA 12 driver --------------------------------------------------------------------------

TEST(fake_cuda, backend_describes_the_device_and_driver) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  EXPECT_EQ(b->name(), "cuda");
  EXPECT_EQ(b->description(), "strata fake CUDA device, driver API 12.4");
  EXPECT_TRUE(b->supports_async_pool());
  const memory_info m = b->mem_info();
  EXPECT_EQ(m.total_bytes, std::size_t{64} << 20);
  EXPECT_EQ(m.free_bytes, m.total_bytes);
  EXPECT_EQ(live("context_refs"), 1);
  b.reset();
  EXPECT_EQ(live("context_refs"), 0);
  EXPECT_EQ(live("modules"), 0);
}

TEST(fake_cuda, a_missing_device_ordinal_is_named) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  const std::string what = message_of([] { make_cuda_backend(1); });
  EXPECT_EQ(what, "CUDA device 1 does not exist (1 visible)");
  EXPECT_EQ(live("context_refs"), 0);
}

TEST(fake_cuda, every_resource_round_trips_and_gives_everything_back) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const counts before;
  const stream_view s = b->stream_create();
  for (const auto& name : resource_stack::names()) {
    SCOPED_TRACE(name);
    {
      resource_stack stack(name, b, small_stack());
      auto& r = stack.top();
      std::vector<std::pair<void*, std::size_t>> blocks;
      for (std::size_t bytes : {1ul, 255ul, 4096ul, 70000ul, 1ul << 20, 3ul << 20}) {
        for (stream_view on : {stream_view{}, s}) {
          void* p = r.allocate(bytes, on);
          ASSERT_NE(p, nullptr);
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
          std::memset(p, 0xab, bytes);  // the fake's device memory is host memory
          blocks.emplace_back(p, bytes);
        }
      }
      void* aligned = r.allocate(1000, s, 4096);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(aligned) % 4096, 0u);
      std::memset(aligned, 0, 1000);
      r.deallocate(aligned, 1000, s, 4096);
      for (std::size_t i = 0; i < blocks.size(); ++i)
        r.deallocate(blocks[i].first, blocks[i].second, i % 2 ? s : stream_view{});
    }
    b->device_synchronize();  // a pool's frees complete; the async pool's memory goes back
    EXPECT_EQ(live("allocations"), before.allocations);
    EXPECT_EQ(live("device_bytes"), before.device_bytes);
    EXPECT_EQ(live("pools"), 0);
  }
  b->stream_destroy(s);
  b->device_synchronize();
  EXPECT_EQ(live("streams"), 0);
}

TEST(fake_cuda, out_of_memory_is_a_bad_alloc_naming_the_resource) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const counts before;
  for_each_resource(b, [&](const auto& name, auto& r) {
    void* small = r.allocate(1000);
    try {
      r.allocate(std::size_t{128} << 20);  // twice the device
      FAIL() << "allocated more than the device has";
    } catch (const out_of_memory_error& e) {
      EXPECT_EQ(e.resource(), name);
      EXPECT_EQ(e.requested(), std::size_t{128} << 20);
      EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
    }
    // still usable, and the earlier block intact
    std::memset(small, 1, 1000);
    void* p = r.allocate(1 << 20);
    EXPECT_NE(p, nullptr);
    r.deallocate(p, 1 << 20);
    r.deallocate(small, 1000);
  });
  b->device_synchronize();
  EXPECT_EQ(live("device_bytes"), before.device_bytes);
}

TEST(fake_cuda, a_driver_error_is_a_driver_error_naming_call_and_code) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const counts before;
  cuda_resource r(b);
  {
    failing f("cuMemAlloc_v2=700");
    const std::string what = message_of([&] { r.allocate(4096); });
    EXPECT_EQ(what,
              "cuMemAlloc failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was "
              "encountered)");
    EXPECT_THROW(r.allocate(4096), driver_error);
  }
  {
    failing f("cuStreamCreateWithPriority=12345");  // a code the driver cannot name
    EXPECT_EQ(message_of([&] { b->stream_create(); }),
              "cuStreamCreateWithPriority failed: CUresult 12345");
  }
  void* p = r.allocate(4096);
  r.deallocate(p, 4096);
  EXPECT_EQ(live("allocations"), before.allocations);
}

// Other code on the thread (a CUDA runtime's cudaSetDevice, a library popping its context) may
// change the driver's current context between two calls into strata.
TEST(fake_cuda, a_context_changed_behind_strata_is_made_current_again) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const counts before;
  cuda_resource r(b);
  r.deallocate(r.allocate(4096), 4096);
  void* lib = ::dlopen(claimed_library, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto set_current = reinterpret_cast<int (*)(void*)>(::dlsym(lib, "cuCtxSetCurrent"));
  ASSERT_EQ(set_current(nullptr), 0);
  void* p = nullptr;
  EXPECT_NO_THROW(p = r.allocate(4096));
  r.deallocate(p, 4096);
  ASSERT_EQ(set_current(nullptr), 0);
  EXPECT_NO_THROW(b->stream_destroy(b->stream_create()));
  ::dlclose(lib);
  EXPECT_EQ(live("allocations"), before.allocations);
}

TEST(fake_cuda, a_failing_constructor_releases_what_it_took) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  {
    failing f("cuModuleLoadData=221");  // no PTX JIT compiler
    EXPECT_THROW(make_cuda_backend(0), driver_error);
  }
  EXPECT_EQ(live("context_refs"), 0);
  {
    failing f("cuModuleGetFunction=500");
    EXPECT_THROW(make_cuda_backend(0), driver_error);
  }
  EXPECT_EQ(live("context_refs"), 0);
  EXPECT_EQ(live("modules"), 0);
}

TEST(fake_cuda, async_reports_and_trims_the_drivers_pool) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const counts before;
  async_resource r(b);  // release threshold: unlimited
  void* p = r.allocate(std::size_t{2} << 20);
  resource_info i = r.info();
  EXPECT_EQ(i.allocated_bytes, std::size_t{2} << 20);
  EXPECT_EQ(i.reserved_bytes, std::size_t{2} << 20);
  EXPECT_FALSE(i.largest_free_block.has_value());
  r.deallocate(p, std::size_t{2} << 20);
  b->device_synchronize();
  i = r.info();
  EXPECT_EQ(i.allocated_bytes, 0u);
  EXPECT_EQ(i.reserved_bytes, std::size_t{2} << 20);  // kept across the synchronisation
  EXPECT_EQ(i.peak_reserved_bytes, std::size_t{2} << 20);
  r.trim(0);
  EXPECT_EQ(r.info().reserved_bytes, 0u);
  EXPECT_EQ(live("device_bytes"), before.device_bytes);
}

TEST(fake_cuda, a_failing_pool_setup_destroys_the_pool) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  {
    failing f("cuMemPoolSetAttribute=1");
    EXPECT_THROW(async_resource r(b), driver_error);
  }
  EXPECT_EQ(live("pools"), 0);
  {
    failing f("cuMemPoolCreate=2");
    EXPECT_THROW(async_resource r(b), driver_error);
  }
  EXPECT_EQ(live("pools"), 0);
}

TEST(fake_cuda, a_device_without_memory_pools_refuses_only_async) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  ::setenv("STRATA_FAKE_CUDA_MEMORY_POOLS", "0", 1);
  auto b = make_cuda_backend(0);
  ::unsetenv("STRATA_FAKE_CUDA_MEMORY_POOLS");
  EXPECT_FALSE(b->supports_async_pool());
  EXPECT_THROW(async_resource r(b), driver_error);
  EXPECT_THROW(resource_stack("async", b), driver_error);
  for (const char* name : {"cuda", "pool", "arena", "strata"}) {
    resource_stack stack(name, b, small_stack());
    void* p = stack.top().allocate(5000);
    stack.top().deallocate(p, 5000);
  }
  EXPECT_EQ(live("pools"), 0);
}

TEST(fake_cuda, deallocate_survives_failing_driver_calls) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const stream_view s = b->stream_create();
  for_each_resource(b, [&](const auto&, auto& r) {
    void* small = r.allocate(1000, s);
    void* large = r.allocate(std::size_t{3} << 20, s);
    {
      failing f("cuEventRecord=700,cuMemFreeAsync=700,cuStreamGetId=700");
      r.deallocate(small, 1000, s);  // noexcept: must not terminate
      r.deallocate(large, std::size_t{3} << 20, s);
    }
    void* p = r.allocate(1000, s);
    r.deallocate(p, 1000, s);
  });
  b->stream_destroy(s);
}

TEST(fake_cuda, stream_ids_tell_recycled_handles_apart) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const stream_view a = b->stream_create();
  const std::uint64_t id_a = b->stream_id(a);
  EXPECT_NE(id_a, 0u);
  b->stream_destroy(a);
  EXPECT_EQ(b->stream_id(a), 0u);  // a destroyed handle: unknown
  const stream_view c = b->stream_create();
  ASSERT_EQ(c.handle(), a.handle());  // the driver hands the handle out again
  EXPECT_NE(b->stream_id(c), 0u);
  EXPECT_NE(b->stream_id(c), id_a);
  b->stream_destroy(c);
}

// A block freed on stream a while a's work is pending and handed out on stream c must come with
// c ordered after that work: c's later event completes only after a's.
void check_cross_stream_order(device_backend& b, device_memory_resource& r) {
  const stream_view a = b.stream_create();
  const stream_view c = b.stream_create();
  void* ea = b.event_create();
  void* ec = b.event_create();
  for (std::size_t bytes : {std::size_t{4096}, std::size_t{3} << 20}) {
    void* p = r.allocate(bytes, a);
    b.launch_spin(a, 30'000'000);  // 30 ms of "kernel" using p
    b.event_record(ea, a);
    r.deallocate(p, bytes, a);
    std::vector<void*> got;
    bool reused = false;
    for (int i = 0; i < 6 && !reused; ++i) {  // until the freed block comes back, if soon
      got.push_back(r.allocate(bytes, c));
      reused = got.back() == p;
    }
    b.event_record(ec, c);
    b.event_synchronize(ec);
    if (reused) {
      EXPECT_TRUE(b.event_query(ea)) << r.name() << " reused a block across streams unordered";
    }
    for (void* q : got) r.deallocate(q, bytes, c);
    b.device_synchronize();
  }
  b.event_destroy(ea);
  b.event_destroy(ec);
  b.stream_destroy(a);
  b.stream_destroy(c);
}

TEST(fake_cuda, stream_ordered_reuse_across_streams) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  for_each_resource(b, [&](const auto&, auto& r) {
    check_cross_stream_order(*b, r);
  });
  b->device_synchronize();
  EXPECT_EQ(live("streams"), 0);
  EXPECT_EQ(live("events"), 0);
}

// Per-stream state kept under a handle the driver then gives to a new stream.
void check_recycled_streams(device_backend& b, device_memory_resource& r) {
  for (int round = 0; round < 4; ++round) {
    const stream_view s = b.stream_create();
    void* p = r.allocate(2000, s);
    void* q = r.allocate(std::size_t{3} << 20, s);
    b.launch_spin(s, 1'000'000);
    r.deallocate(p, 2000, s);
    r.deallocate(q, std::size_t{3} << 20, s);
    b.stream_destroy(s);  // the next round's stream gets this handle
  }
  // the last stream's handle stays destroyed for these: state kept for it is stale
  for (std::size_t bytes : {std::size_t{2000}, std::size_t{3} << 20}) {
    void* d = r.allocate(bytes);
    r.deallocate(d, bytes);
  }
  const stream_view other = b.stream_create();
  void* p = r.allocate(2000, other);
  r.deallocate(p, 2000, other);
  b.stream_destroy(other);
}

TEST(fake_cuda, recycled_stream_handles) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const counts before;
  for_each_resource(b, [&](const auto&, auto& r) {
    check_recycled_streams(*b, r);
  });
  b->device_synchronize();
  EXPECT_EQ(live("allocations"), before.allocations);
}

TEST(fake_cuda, threads_on_their_own_streams) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  auto b = make_cuda_backend(0);
  const counts before;
  for (const char* name : {"async", "pool", "arena", "strata"}) {
    SCOPED_TRACE(name);
    resource_stack stack(name, b, small_stack());
    auto& r = stack.top();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        const stream_view s = b->stream_create();
        std::vector<void*> held;
        for (int i = 0; i < 200; ++i) {
          const std::size_t bytes = 256u << ((i + t) % 8);
          void* p = r.allocate(bytes, s);
          std::memset(p, t, bytes);
          held.push_back(p);
          if (held.size() > 8) {
            r.deallocate(held.front(), 256u << ((i - 8 + t) % 8), s);
            held.erase(held.begin());
          }
        }
        for (std::size_t k = 0; k < held.size(); ++k)
          r.deallocate(held[k], 256u << ((200 - held.size() + k + t) % 8), s);
        b->stream_synchronize(s);
        b->stream_destroy(s);
      });
    for (auto& th : threads) th.join();
  }
  b->device_synchronize();
  EXPECT_EQ(live("allocations"), before.allocations);
}

// ---- a CUDA 11.2 driver: no cuStreamGetId ------------------------------------------------------

TEST(fake_cuda_11_2, stream_ids_are_unknown_and_resources_still_work) {
  ENTER("fake_cuda_11_2", STRATA_FAKE_CUDA_11_2);
  auto b = make_cuda_backend(0);
  const counts before;
  EXPECT_EQ(b->description(), "strata fake CUDA device, driver API 11.2");
  EXPECT_TRUE(b->supports_async_pool());
  const stream_view s = b->stream_create();
  EXPECT_EQ(b->stream_id(s), 0u);
  b->stream_destroy(s);
  for_each_resource(b, [&](const auto&, auto& r) {
    check_recycled_streams(*b, r);
    check_cross_stream_order(*b, r);
  });
  b->device_synchronize();
  EXPECT_EQ(live("allocations"), before.allocations);
  EXPECT_EQ(live("streams"), 0);
}

// ---- a CUDA 11.0 driver: no stream-ordered memory pools ----------------------------------------

TEST(fake_cuda_11_0, no_pool_entry_points_refuses_only_async) {
  ENTER("fake_cuda_11_0", STRATA_FAKE_CUDA_11_0);
  auto b = make_cuda_backend(0);
  EXPECT_EQ(b->description(), "strata fake CUDA device, driver API 11.0");
  EXPECT_FALSE(b->supports_async_pool());
  EXPECT_THROW(b->pool_create(0), driver_error);
  EXPECT_THROW(async_resource r(b), driver_error);
  for (const char* name : {"cuda", "pool", "arena", "strata"}) {
    SCOPED_TRACE(name);
    resource_stack stack(name, b, small_stack());
    check_recycled_streams(*b, stack.top());
  }
}

// ---- no driver to speak of ---------------------------------------------------------------------

TEST(fake_cuda_no_device, cuinit_failure_names_the_reason) {
  ENTER("fake_cuda_no_device", STRATA_FAKE_CUDA_12, {{"STRATA_FAKE_CUDA_DEVICES", "0"}});
  const std::string what = message_of([] { make_cuda_backend(0); });
  EXPECT_EQ(what,
            "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected) - no "
            "CUDA-capable GPU is visible");
  EXPECT_EQ(message_of([] { make_backend("cuda"); }), what);  // remembered
}

TEST(fake_cuda_old_runtime, cuinit_error_code_is_named) {
  ENTER("fake_cuda_old_runtime", STRATA_FAKE_CUDA_12, {{"STRATA_FAKE_CUDA_INIT_RESULT", "35"}});
  EXPECT_EQ(message_of([] { make_cuda_backend(0); }),
            "cuInit failed: CUDA_ERROR_INSUFFICIENT_DRIVER (CUDA driver version is insufficient "
            "for CUDA runtime version)");
}

}  // namespace

// ---- every driver generation: many threads, own and shared streams, stacked adaptors ----------

// 8 threads, each running tasks on a stream of its own (created, used, destroyed: with
// destroy_unsynced, every other one with work still queued) beside three shared streams and the
// default stream; blocks of every stream are freed by other threads on theirs.  Everything comes
// back: adaptors' counts, the resource's allocated bytes, the fake's allocations.
namespace {
struct tagged_block {
  void* p;
  std::size_t n;
  std::size_t align;
  stream_view s;
  std::uint64_t tag;
};
void many_threads(const std::shared_ptr<device_backend>& b, bool destroy_unsynced) {
  const counts before;
  for (const auto& name : resource_stack::names()) {
    if (name == "async" && !b->supports_async_pool()) continue;
    SCOPED_TRACE(name);
    std::atomic<int> overwritten{0}, errors{0};
    {
      resource_stack stack(name, b, small_stack());
      statistics_adaptor stats(stack.top());
      limiting_adaptor limit(stats, std::size_t{48} << 20);
      tracking_adaptor track(limit);
      device_memory_resource& r = track;
      std::vector<stream_view> shared;
      for (int i = 0; i < 3; ++i) shared.push_back(b->stream_create());
      std::mutex pile_m;
      std::vector<tagged_block> pile;
      std::vector<std::thread> ts;
      const int threads = 8;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          std::mt19937_64 rng(31 + t);
          for (int task = 0; task < 4; ++task) {
            const stream_view own = b->stream_create();
            std::vector<tagged_block> mine;
            for (int i = 0; i < 60; ++i) {
              tagged_block q{};
              q.n = 16 + rng() % (rng() % 8 == 0 ? (std::size_t{2} << 20) : 20000);
              q.align = rng() % 5 == 0 ? std::size_t{1} << (8 + rng() % 6) : 256;
              const int k = static_cast<int>(rng() % 4);
              q.s = k == 0 ? stream_view{} : k == 1 ? shared[rng() % 3] : own;
              q.tag = (std::uint64_t(t) << 48) | (std::uint64_t(task) << 32) | std::uint64_t(i);
              try {
                q.p = r.allocate(q.n, q.s, q.align);
              } catch (const std::bad_alloc&) {  // 64 MiB device, 48 MiB limit
                continue;
              } catch (const std::exception& e) {
                ++errors;
                std::fprintf(stderr, "%s allocate: %s\n", name.c_str(), e.what());
                continue;
              }
              if (reinterpret_cast<std::uintptr_t>(q.p) % q.align) ++errors;
              std::memcpy(q.p, &q.tag, 8);
              std::memcpy(static_cast<char*>(q.p) + q.n - 8, &q.tag, 8);
              if (rng() % 8 == 0) b->launch_spin(q.s, 1000);
              mine.push_back(q);
              if (mine.size() > 10) {
                const std::size_t j = rng() % mine.size();
                tagged_block v = mine[j];
                mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(j));
                std::uint64_t x, y;
                std::memcpy(&x, v.p, 8);
                std::memcpy(&y, static_cast<char*>(v.p) + v.n - 8, 8);
                if (x != v.tag || y != v.tag) ++overwritten;
                if (rng() % 5 == 0) {
                  b->stream_synchronize(v.s);
                  std::lock_guard lock(pile_m);
                  pile.push_back(v);
                } else {
                  r.deallocate(v.p, v.n, v.s, v.align);
                }
              }
              std::vector<tagged_block> take;
              {
                std::lock_guard lock(pile_m);
                if (!pile.empty() && rng() % 3 == 0) {
                  take.push_back(pile.back());
                  pile.pop_back();
                }
              }
              for (auto& v : take) r.deallocate(v.p, v.n, own, v.align);
              if (i % 20 == 0) (void)r.info();
            }
            for (auto& v : mine) {
              if (v.s == own) r.deallocate(v.p, v.n, own, v.align);
              else {
                b->stream_synchronize(v.s);
                r.deallocate(v.p, v.n, own, v.align);
              }
            }
            if (!destroy_unsynced || task % 2 == 0) b->stream_synchronize(own);
            b->stream_destroy(own);
          }
        });
      for (auto& th : ts) th.join();
      for (auto& v : pile) r.deallocate(v.p, v.n, shared[0], v.align);
      b->device_synchronize();
      for (auto s : shared) b->stream_destroy(s);
      EXPECT_EQ(overwritten.load(), 0);
      EXPECT_EQ(errors.load(), 0);
      EXPECT_EQ(track.outstanding_bytes(), 0u);
      EXPECT_EQ(track.mismatched_deallocations(), 0u);
      EXPECT_EQ(limit.used(), 0u);
      EXPECT_EQ(stats.counts().current_bytes, 0);
      EXPECT_EQ(stack.top().info().allocated_bytes, 0u);
    }
    b->device_synchronize();
    EXPECT_EQ(live("allocations"), before.allocations);
    EXPECT_EQ(live("device_bytes"), before.device_bytes);
  }
}
}  // namespace

TEST(fake_cuda, many_threads_share_streams_through_stacked_adaptors) {
  ENTER(full, STRATA_FAKE_CUDA_12);
  many_threads(make_cuda_backend(0), true);
}
// Without cuStreamGetId a recycled handle is not told apart (docs/gpu.md): every stream is
// synchronised before its destroy.
TEST(fake_cuda_11_2, many_threads_share_streams_through_stacked_adaptors) {
  ENTER("fake_cuda_11_2", STRATA_FAKE_CUDA_11_2);
  many_threads(make_cuda_backend(0), false);
}
TEST(fake_cuda_11_0, many_threads_share_streams_through_stacked_adaptors) {
  ENTER("fake_cuda_11_0", STRATA_FAKE_CUDA_11_0);
  many_threads(make_cuda_backend(0), false);
}
