// strata::concurrent_object_pool<T>: many threads, cross-thread frees, stats, shrink.
#include "strata/concurrent_object_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

struct payload {
  std::uint64_t owner;
  std::uint64_t serial;
  std::uint64_t check;
};

struct counting_upstream {
  static inline std::atomic<std::int64_t> outstanding_bytes{0};
  static void* allocate(std::size_t bytes, std::size_t align) {
    outstanding_bytes += std::int64_t(bytes);
    return strata::new_delete_upstream::allocate(bytes, align);
  }
  static void deallocate(void* p, std::size_t bytes, std::size_t align) noexcept {
    outstanding_bytes -= std::int64_t(bytes);
    strata::new_delete_upstream::deallocate(p, bytes, align);
  }
};

template <class Pool>
class concurrent_pool_both : public ::testing::Test {};
using pool_kinds =
    ::testing::Types<strata::concurrent_object_pool<payload, strata::new_delete_upstream, false>,
                     strata::concurrent_object_pool<payload, strata::new_delete_upstream, true>>;
TYPED_TEST_SUITE(concurrent_pool_both, pool_kinds);

TYPED_TEST(concurrent_pool_both, SingleThreadBasics) {
  TypeParam pool;
  std::vector<payload*> objects;
  for (std::uint64_t i = 0; i < 1000; ++i) objects.push_back(pool.create(payload{0, i, ~i}));
  std::set<payload*> unique(objects.begin(), objects.end());
  EXPECT_EQ(unique.size(), 1000u);
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.live, 1000u);
  EXPECT_EQ(s.allocations, 1000u);
  EXPECT_GE(s.high_water, 1000u);
  EXPECT_EQ(s.live + s.free, s.capacity);
  for (std::uint64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(objects[i]->serial, i);
    ASSERT_TRUE(pool.owns(objects[i]));
  }
  for (payload* p : objects) pool.destroy(p);
  EXPECT_EQ(pool.stats().live, 0u);
}

// Each thread allocates and hands its objects to the next thread, which checks and frees them:
// every object is freed by a thread other than the one that made it.
TYPED_TEST(concurrent_pool_both, CrossThreadFreesUnderContention) {
  constexpr int threads = 4;
  constexpr int rounds = TypeParam::checked ? 20 : 200;
  constexpr int batch = 250;
  TypeParam pool;
  std::mutex handoff_mutex;
  std::vector<std::vector<payload*>> inbox(threads);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(std::uint64_t(t) * 7919 + 1);
      for (int r = 0; r < rounds; ++r) {
        std::vector<payload*> mine;
        for (int i = 0; i < batch; ++i) {
          std::uint64_t serial = rng();
          mine.push_back(pool.create(payload{std::uint64_t(t), serial, serial ^ 0x5a5a}));
        }
        std::vector<payload*> received;
        {
          std::lock_guard<std::mutex> lock(handoff_mutex);
          auto& next = inbox[std::size_t((t + 1) % threads)];
          next.insert(next.end(), mine.begin(), mine.end());
          received.swap(inbox[std::size_t(t)]);
        }
        for (payload* p : received) {
          if (p->owner == std::uint64_t(t) || (p->serial ^ 0x5a5a) != p->check) ++failures;
          pool.destroy(p);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  for (auto& box : inbox)
    for (payload* p : box) {
      if ((p->serial ^ 0x5a5a) != p->check) ++failures;
      pool.destroy(p);
    }
  EXPECT_EQ(failures.load(), 0);
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.live, 0u);
  EXPECT_EQ(s.allocations, std::uint64_t(threads) * rounds * batch);
  EXPECT_EQ(s.free, s.capacity);
  EXPECT_GT(s.depot_trips, 0u);  // magazines really travelled through the depot
}

TEST(ConcurrentObjectPool, NoObjectIsHandedOutTwiceAcrossThreads) {
  strata::concurrent_object_pool<std::uint64_t, strata::new_delete_upstream, false> pool;
  constexpr int threads = 4, per_thread = 20000;
  std::vector<std::vector<std::uint64_t*>> got(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        std::uint64_t* p = pool.create(std::uint64_t(t));
        got[std::size_t(t)].push_back(p);
        if (i % 3 == 2) {  // free some, keep most
          pool.destroy(got[std::size_t(t)].back());
          got[std::size_t(t)].pop_back();
        }
      }
    });
  for (auto& w : workers) w.join();
  std::set<std::uint64_t*> all;
  std::size_t total = 0;
  for (int t = 0; t < threads; ++t)
    for (std::uint64_t* p : got[std::size_t(t)]) {
      ASSERT_EQ(*p, std::uint64_t(t));
      all.insert(p);
      ++total;
    }
  EXPECT_EQ(all.size(), total);
  EXPECT_EQ(pool.stats().live, total);
}

TEST(ConcurrentObjectPool, ExitedThreadsIndicesAreReused) {
  strata::concurrent_object_pool<int, strata::new_delete_upstream, false> pool;
  for (int i = 0; i < 50; ++i) {
    std::thread([&] {
      int* p = pool.create(i);
      pool.destroy(p);
    }).join();
  }
  // 50 short-lived threads in sequence: their caches were reused, so the objects they left in
  // their magazines were too and the pool did not grow beyond its first chunk.
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.refills, 1u);
  EXPECT_EQ(s.live, 0u);
}

// A thread_local made before the thread's first pool call is destroyed after the thread's index
// is given back; its destructor's free took an index again that was never given back, so after
// 4096 such threads every thread went through the depot lock on every call.
strata::concurrent_object_pool<int, strata::new_delete_upstream, false>* exit_pool = nullptr;
struct frees_at_thread_exit {
  int* p = nullptr;
  ~frees_at_thread_exit() {
    if (p != nullptr) exit_pool->destroy(p);
  }
};
thread_local frees_at_thread_exit exit_keeper;

TEST(ConcurrentObjectPool, FreesInLateThreadExitDestructorsDoNotUseUpThreadIndices) {
  strata::concurrent_object_pool<int, strata::new_delete_upstream, false> pool;
  exit_pool = &pool;
  for (std::uint32_t i = 0; i < strata::detail::max_cached_threads + 100; ++i) {
    std::thread([&] {
      frees_at_thread_exit& keeper = exit_keeper;  // made before the first pool call
      keeper.p = pool.create(1);
    }).join();
  }
  EXPECT_EQ(pool.stats().live, 0u);
  const std::uint64_t trips = pool.stats().depot_trips;
  std::thread([&] {
    for (int i = 0; i < 10000; ++i) pool.destroy(pool.create(i));
  }).join();
  // A thread with a cache: a handful of depot trips; without one, two per create/destroy.
  EXPECT_LT(pool.stats().depot_trips - trips, 100u);
  exit_pool = nullptr;
}

TEST(ConcurrentObjectPool, ShrinkReturnsChunksWhoseObjectsAreAllInTheDepot) {
  strata::concurrent_object_pool<payload> pool;
  std::vector<payload*> objects;
  for (int i = 0; i < 20000; ++i) objects.push_back(pool.create());
  std::thread([&] {  // another thread frees them all: they travel to the depot in magazines
    for (payload* p : objects) pool.destroy(p);
  }).join();
  std::size_t before = pool.stats().bytes_reserved;
  std::size_t released = pool.shrink();
  EXPECT_GT(released, before / 2);  // at most two magazines' worth stay cached in a thread
  EXPECT_EQ(pool.stats().bytes_reserved + released, before);
  payload* p = pool.create();  // still usable
  pool.destroy(p);
}

TEST(ConcurrentObjectPool, DestructionReturnsEverything) {
  counting_upstream::outstanding_bytes = 0;
  {
    strata::concurrent_object_pool<payload, counting_upstream> pool(1000);
    std::vector<std::thread> workers;
    for (int t = 0; t < 3; ++t)
      workers.emplace_back([&] {
        for (int i = 0; i < 5000; ++i) {
          payload* p = pool.create();
          if (i % 2) pool.destroy(p);  // leaves live objects behind on purpose
        }
      });
    for (auto& w : workers) w.join();
    EXPECT_EQ(pool.stats().live, 3u * 2500u);
  }
  EXPECT_EQ(counting_upstream::outstanding_bytes.load(), 0);
}

// Session 45's probe: a pool destroyed with live objects whose destructors destroy() the objects
// they own destroyed those twice (unchecked: a double free of their strings) or deadlocked
// (checked: the walk held the depot lock that the destructor's destroy() takes).
template <bool Checked>
struct owning_node {
  using pool_type = strata::concurrent_object_pool<owning_node, strata::new_delete_upstream, Checked>;
  static inline int destructions = 0;
  pool_type* pool;
  owning_node* child = nullptr;
  std::string text = std::string(64, 'x');
  explicit owning_node(pool_type* p) : pool(p) {}
  ~owning_node() {
    ++destructions;
    if (child != nullptr) pool->destroy(child);
  }
};

template <bool Checked>
void expect_owned_objects_destroyed_once() {
  using node = owning_node<Checked>;
  node::destructions = 0;
  {
    typename node::pool_type pool;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {  // over a magazine's worth: objects in the depot too
          node* a = pool.create(&pool);
          node* b = pool.create(&pool);
          (a < b ? a : b)->child = a < b ? b : a;  // the owner, walked first, is the lower address
        }
      });
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(node::destructions, 800);
}

TEST(ConcurrentObjectPool, DestructorsThatDestroyWhatTheyOwnDestroyEachObjectOnce) {
  expect_owned_objects_destroyed_once<false>();
  expect_owned_objects_destroyed_once<true>();
}

// Session 50's probe: objects a destructor created while the pool was being destroyed were never
// destroyed (their strings leaked), checked or not.
template <bool Checked>
struct spawning_node {
  using pool_type = strata::concurrent_object_pool<spawning_node, strata::new_delete_upstream, Checked>;
  static inline std::atomic<int> constructions{0};  // the threads create concurrently
  static inline std::atomic<int> destructions{0};
  pool_type* pool;
  int generation;
  std::string text = std::string(64, 'x');
  spawning_node(pool_type* p, int g) : pool(p), generation(g) { ++constructions; }
  ~spawning_node() {
    ++destructions;
    if (generation > 0) pool->create(pool, generation - 1);
  }
};

template <bool Checked>
void expect_objects_made_during_destruction_destroyed() {
  using node = spawning_node<Checked>;
  node::constructions = 0;
  node::destructions = 0;
  {
    typename node::pool_type pool;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) pool.create(&pool, i % 4);  // objects in the depot too
        pool.destroy(pool.create(&pool, 0));  // and a slot in the thread's magazine
      });
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(node::constructions.load(), 2 * (201 + 200 * 3 / 2));  // 0+1+2+3 a group of four
  EXPECT_EQ(node::destructions.load(), node::constructions.load());
}

TEST(ConcurrentObjectPool, ObjectsCreatedWhileThePoolIsDestroyedAreDestroyedToo) {
  expect_objects_made_during_destruction_destroyed<false>();
  expect_objects_made_during_destruction_destroyed<true>();
}

// Session 45's probe: a thread without a cache (one whose index holder is gone, as in a late
// thread-exit destructor) took objects from the store without raising high_water: live 1 with
// high_water 0, where the header promises an upper bound of live.
TEST(ConcurrentObjectPool, HighWaterBoundsLiveForAThreadWithoutACache) {
  strata::concurrent_object_pool<std::uint64_t, strata::new_delete_upstream, false> pool;
  std::vector<std::uint64_t*> objects;
  std::thread([&] {
    strata::detail::t_thread_index_plus1 = strata::detail::thread_index_exited;
    for (int i = 0; i < 3; ++i) objects.push_back(pool.create(std::uint64_t(i)));
  }).join();
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.live, 3u);
  EXPECT_GE(s.high_water, s.live);
  for (std::uint64_t* p : objects) pool.destroy(p);
}

// Session 45's probe: when the upstream threw while a thread's cache was set up, the magazines
// already taken for it were lost (one or two 528-byte blocks never given back).
struct failing_upstream {
  static inline std::int64_t outstanding = 0;
  static inline int calls = 0;
  static inline int fail_at = -1;
  static void* allocate(std::size_t bytes, std::size_t align) {
    if (calls++ == fail_at) throw std::bad_alloc();
    ++outstanding;
    return strata::new_delete_upstream::allocate(bytes, align);
  }
  static void deallocate(void* p, std::size_t bytes, std::size_t align) noexcept {
    --outstanding;
    strata::new_delete_upstream::deallocate(p, bytes, align);
  }
};

TEST(ConcurrentObjectPool, UpstreamExceptionWhileAttachingAThreadLosesNothing) {
  for (int fail_at = 0; fail_at < 8; ++fail_at) {
    failing_upstream::calls = 0;
    failing_upstream::fail_at = fail_at;
    failing_upstream::outstanding = 0;
    {
      strata::concurrent_object_pool<std::uint64_t, failing_upstream, false> pool;
      std::thread([&] {
        try {
          pool.destroy(pool.create(1));
        } catch (const std::bad_alloc&) {
        }
      }).join();
    }
    EXPECT_EQ(failing_upstream::outstanding, 0) << "upstream call " << fail_at << " threw";
  }
  failing_upstream::fail_at = -1;
}

// Session 40b's probe: 24 x capacity wrapped to 8 bytes and the pool handed out objects past
// its chunk.  A capacity that cannot be addressed is refused like one the upstream cannot give.
TYPED_TEST(concurrent_pool_both, CapacityWhoseByteCountOverflowsIsRefused) {
  static_assert(sizeof(payload) == 24);
  const std::size_t capacity = SIZE_MAX / sizeof(payload) + 1;  // x 24 = 2^64 + 8
  EXPECT_THROW(TypeParam pool(capacity), std::bad_alloc);
  TypeParam pool;
  EXPECT_FALSE(pool.reserve(capacity));
  EXPECT_EQ(pool.stats().bytes_reserved, 0u);
}

TEST(ConcurrentObjectPool, StatsWhileOtherThreadsAllocate) {
  strata::concurrent_object_pool<std::uint64_t> pool;
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    std::vector<std::uint64_t*> v;
    while (!stop.load(std::memory_order_relaxed)) {
      for (int i = 0; i < 100; ++i) v.push_back(pool.create(1));
      for (auto* p : v) pool.destroy(p);
      v.clear();
    }
  });
  for (int i = 0; i < 2000; ++i) {
    strata::pool_stats s = pool.stats();
    ASSERT_LE(s.live, 100u);
    ASSERT_LE(s.live, s.capacity);
  }
  stop = true;
  worker.join();
}

}  // namespace
