// One conformance suite, run against every resource (and the adaptors over one), on the
// simulated device with its reuse checker on: any block reused on another stream before the
// event guarding it completed fails the test in TearDown.
#include <strata/gpu/gpu.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace strata::gpu;

namespace {

constexpr std::size_t capacity = std::size_t{512} << 20;  // simulated device memory

// A named resource under test, possibly an adaptor over one of the stacks.
struct under_test {
  std::unique_ptr<resource_stack> stack;
  std::unique_ptr<device_memory_resource> adaptor;
  device_memory_resource& top() { return adaptor ? *adaptor : stack->top(); }
};

under_test make(const std::string& name, std::shared_ptr<device_backend> dev) {
  stack_options o;
  o.initial_size = 16 << 20;
  under_test u;
  if (name == "statistics" || name == "limiting" || name == "tracking" || name == "logging") {
    u.stack = std::make_unique<resource_stack>("pool", dev, o);
    auto& up = u.stack->top();
    if (name == "statistics") u.adaptor = std::make_unique<statistics_adaptor>(up);
    if (name == "limiting") u.adaptor = std::make_unique<limiting_adaptor>(up, capacity / 2);
    if (name == "tracking") u.adaptor = std::make_unique<tracking_adaptor>(up);
    if (name == "logging") {
      static std::ostringstream sink;  // contents checked in the adaptor tests
      u.adaptor = std::make_unique<logging_adaptor>(up, sink);
    }
  } else {
    u.stack = std::make_unique<resource_stack>(name, dev, o);
  }
  return u;
}

struct conformance : ::testing::TestWithParam<std::string> {
  std::shared_ptr<sim_backend> dev = [] {
    sim_options o;
    o.capacity_bytes = capacity;
    return make_sim_backend(o);
  }();
  under_test ut = make(GetParam(), dev);
  device_memory_resource& mr = ut.top();

  void TearDown() override {
    ut = {};  // destroy the resource (returns everything) before looking at the device
    EXPECT_EQ(dev->violation_count(), 0u) << "a block was reused across streams unguarded";
    EXPECT_EQ(dev->mem_info().free_bytes, capacity) << "device memory leaked";
  }
};

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

// Writes a tag at both ends of a block and checks it back: overlapping blocks clobber tags.
void tag(void* p, std::size_t n, std::uint64_t v) {
  std::memcpy(p, &v, std::min(n, sizeof v));
  if (n >= 2 * sizeof v) std::memcpy(static_cast<char*>(p) + n - sizeof v, &v, sizeof v);
}
bool has_tag(const void* p, std::size_t n, std::uint64_t v) {
  std::uint64_t a = 0, b = v;
  std::memcpy(&a, p, std::min(n, sizeof a));
  if (n >= 2 * sizeof v) std::memcpy(&b, static_cast<const char*>(p) + n - sizeof b, sizeof b);
  if (n < sizeof v) return std::memcmp(&a, &v, n) == 0;
  return a == v && b == v;
}

TEST_P(conformance, zero_bytes_gives_nullptr_and_null_free_is_a_no_op) {
  EXPECT_EQ(mr.allocate(0), nullptr);
  mr.deallocate(nullptr, 0);
  mr.deallocate(nullptr, 128);
}

TEST_P(conformance, absurd_sizes_raise_typed_out_of_memory) {
  for (std::size_t bytes : {capacity + 1, std::size_t{1} << 45, std::size_t{1} << 62,
                            ~std::size_t{0}}) {
    try {
      mr.allocate(bytes);
      ADD_FAILURE() << "allocate(" << bytes << ") succeeded";
    } catch (const out_of_memory_error& e) {
      EXPECT_EQ(e.requested(), bytes);
      EXPECT_LE(e.free_total(), capacity);
      if (e.fragmentation_known()) {
        EXPECT_GE(e.fragmentation(), 0.0);
        EXPECT_LE(e.fragmentation(), 1.0);
      }
    }
  }
  void* p = mr.allocate(1000);  // still usable
  ASSERT_NE(p, nullptr);
  mr.deallocate(p, 1000);
}

TEST_P(conformance, alignment_is_honoured_and_invalid_alignment_rejected) {
  std::vector<std::pair<void*, std::size_t>> held;
  for (std::size_t a = 1; a <= device_memory_resource::max_alignment; a <<= 1) {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{3000}, std::size_t{1} << 20}) {
      void* p = mr.allocate(bytes, {}, a);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(aligned(p, std::max(a, device_memory_resource::native_alignment)))
          << "alignment " << a << " bytes " << bytes << " got " << p;
      tag(p, bytes, a);
      held.emplace_back(p, bytes);
    }
  }
  std::size_t i = 0;
  for (std::size_t a = 1; a <= device_memory_resource::max_alignment; a <<= 1)
    for (int k = 0; k < 3; ++k, ++i) {
      EXPECT_TRUE(has_tag(held[i].first, held[i].second, a));
      mr.deallocate(held[i].first, held[i].second, {}, a);
    }
  EXPECT_THROW(mr.allocate(64, {}, 3), std::invalid_argument);
  EXPECT_THROW(mr.allocate(64, {}, 0), std::invalid_argument);
  EXPECT_THROW(mr.allocate(64, {}, device_memory_resource::max_alignment * 2), std::invalid_argument);
}

// Random sizes (log-uniform 1 B .. 4 MiB), random frees; live blocks must never overlap.
TEST_P(conformance, random_alloc_free_never_overlaps) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> logsize(0.0, 22.0);
  struct live {
    void* p;
    std::size_t n;
    std::uint64_t t;
  };
  std::vector<live> blocks;
  std::map<std::uintptr_t, std::uintptr_t> ranges;  // start -> end of live blocks
  for (std::uint64_t step = 0; step < 1500; ++step) {
    if (blocks.size() < 64 && (blocks.empty() || rng() % 3 != 0)) {
      const auto n = static_cast<std::size_t>(std::exp2(logsize(rng)));
      void* p = mr.allocate(n);
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(aligned(p, 256));
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      auto next = ranges.lower_bound(a);
      ASSERT_TRUE(next == ranges.end() || next->first >= a + n) << "overlaps the next block";
      ASSERT_TRUE(next == ranges.begin() || std::prev(next)->second <= a) << "overlaps the previous";
      ranges.emplace(a, a + n);
      tag(p, n, step);
      blocks.push_back({p, n, step});
    } else {
      const std::size_t i = rng() % blocks.size();
      ASSERT_TRUE(has_tag(blocks[i].p, blocks[i].n, blocks[i].t));
      ranges.erase(reinterpret_cast<std::uintptr_t>(blocks[i].p));
      mr.deallocate(blocks[i].p, blocks[i].n);
      blocks[i] = blocks.back();
      blocks.pop_back();
    }
  }
  for (auto& b : blocks) mr.deallocate(b.p, b.n);
}

// Threads, each with its own stream and kernels between allocations; frees are stream-ordered
// and some blocks are freed on another thread's stream.  Tags catch overlap across threads; the
// checker catches unguarded cross-stream reuse.
TEST_P(conformance, threads_with_their_own_streams) {
  constexpr int threads = 4;
  std::vector<stream_view> streams;
  for (int i = 0; i < threads; ++i) streams.push_back(dev->stream_create());
  std::mutex handoff_m;
  std::vector<std::pair<void*, std::size_t>> handoff;  // freed by someone else
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      std::uniform_real_distribution<double> logsize(8.0, 21.0);
      std::vector<std::pair<void*, std::size_t>> mine;
      const stream_view s = streams[t];
      for (int i = 0; i < 300; ++i) {
        const auto n = static_cast<std::size_t>(std::exp2(logsize(rng)));
        void* p = mr.allocate(n, s);
        tag(p, n, (std::uint64_t(t) << 32) | std::uint64_t(reinterpret_cast<std::uintptr_t>(p) & 0xffffffff));
        mine.emplace_back(p, n);
        if (i % 16 == 0) dev->launch_spin(s, 1000);
        if (mine.size() > 8) {
          auto [q, m] = mine[rng() % mine.size()];
          std::erase(mine, std::make_pair(q, m));
          if (!has_tag(q, m, (std::uint64_t(t) << 32) | std::uint64_t(reinterpret_cast<std::uintptr_t>(q) & 0xffffffff)))
            ++failures;
          if (rng() % 8 == 0) {
            // hand the block to another thread: it frees it on its own stream, which is only
            // safe once our stream's work is done
            dev->stream_synchronize(s);
            std::lock_guard lock(handoff_m);
            handoff.emplace_back(q, m);
          } else {
            mr.deallocate(q, m, s);
          }
        }
        std::vector<std::pair<void*, std::size_t>> take;
        {
          std::lock_guard lock(handoff_m);
          if (!handoff.empty() && rng() % 4 == 0) {
            take.push_back(handoff.back());
            handoff.pop_back();
          }
        }
        for (auto [q, m] : take) mr.deallocate(q, m, s);
      }
      for (auto [q, m] : mine) mr.deallocate(q, m, s);
    });
  }
  for (auto& th : pool) th.join();
  for (auto [q, m] : handoff) mr.deallocate(q, m, streams[0]);
  EXPECT_EQ(failures.load(), 0) << "a live block was overwritten by another allocation";
  dev->device_synchronize();
  for (auto s : streams) dev->stream_destroy(s);
}

TEST_P(conformance, info_is_consistent) {
  void* p = mr.allocate(10000);
  const resource_info i = mr.info();
  EXPECT_GE(i.peak_reserved_bytes, i.reserved_bytes);
  EXPECT_GE(i.reserved_bytes, 10000u);
  EXPECT_GE(i.allocated_bytes, 10000u);
  const double f = i.fragmentation();
  if (i.largest_free_block) {
    EXPECT_LE(*i.largest_free_block, i.free_bytes);
    EXPECT_GE(f, 0.0);
    EXPECT_LE(f, 1.0);
  } else {
    EXPECT_TRUE(std::isnan(f));
  }
  mr.deallocate(p, 10000);
}

INSTANTIATE_TEST_SUITE_P(resources, conformance,
                         ::testing::Values("cuda", "async", "pool", "arena", "strata", "statistics",
                                           "limiting", "tracking", "logging"),
                         [](const auto& info) { return info.param; });

}  // namespace
