// strata::object_pool<T>: allocation, construction, stats, shrink, destruction.
#include "strata/object_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

// Array new/delete, counted: checked pools keep their live bits in arrays of their own, outside
// the upstream, and a test below checks that a failed refill gives them back.
namespace {
std::atomic<std::int64_t> arrays_outstanding{0};
}  // namespace
// Not inlined, so that the compiler pairs new[] with delete[] rather than seeing operator new.
__attribute__((noinline)) void* operator new[](std::size_t n) {
  ++arrays_outstanding;
  return ::operator new(n);
}
__attribute__((noinline)) void operator delete[](void* p) noexcept {
  if (p != nullptr) --arrays_outstanding;
  ::operator delete(p);
}
void operator delete[](void* p, std::size_t) noexcept { operator delete[](p); }

namespace {

struct tracked {
  static inline int alive = 0;
  explicit tracked(int v) : value(v) { ++alive; }
  ~tracked() { --alive; }
  int value;
  std::string name = "a string long enough to allocate on the heap, for the sanitizers";
};

struct throws_on_construct {
  explicit throws_on_construct(bool do_throw) {
    if (do_throw) throw std::runtime_error("constructor failed");
  }
};

// Counts what the pool asks its upstream for, to check that everything goes back.
struct counting_upstream {
  static inline std::int64_t outstanding_bytes = 0;
  static inline int calls = 0;
  static void* allocate(std::size_t bytes, std::size_t align) {
    ++calls;
    outstanding_bytes += std::int64_t(bytes);
    return strata::new_delete_upstream::allocate(bytes, align);
  }
  static void deallocate(void* p, std::size_t bytes, std::size_t align) noexcept {
    outstanding_bytes -= std::int64_t(bytes);
    strata::new_delete_upstream::deallocate(p, bytes, align);
  }
};

// An upstream that throws when told to, as new_delete_upstream does when memory runs out.  (One
// that always threw would let the compiler drop the pool's live-bit array, which it could then
// see is never used.)
struct throwing_upstream {
  static inline bool fail = false;
  static void* allocate(std::size_t bytes, std::size_t align) {
    if (fail) throw std::bad_alloc();
    return strata::new_delete_upstream::allocate(bytes, align);
  }
  static void deallocate(void* p, std::size_t bytes, std::size_t align) noexcept {
    strata::new_delete_upstream::deallocate(p, bytes, align);
  }
};

// Chunks carved from the top of an arena downwards: each lies below the one before, as large
// chunks do when they come from mmap.
struct falling_upstream {
  alignas(64) static inline char arena[1 << 20];
  static inline std::size_t top = sizeof(arena);
  static inline std::int64_t outstanding_bytes = 0;
  static void* allocate(std::size_t bytes, std::size_t align) {
    if (bytes > top) throw std::bad_alloc();
    top = (top - bytes) / align * align;
    outstanding_bytes += std::int64_t(bytes);
    return arena + top;
  }
  static void deallocate(void*, std::size_t bytes, std::size_t) noexcept {
    outstanding_bytes -= std::int64_t(bytes);
  }
};

// 1 KiB: chunks of 8, 16, 32 and 64 objects, so a hundred objects take four chunks.
struct kib_object {
  static inline int alive = 0;
  explicit kib_object(int v) : value(v) { ++alive; }
  ~kib_object() { --alive; }
  int value;
  char pad[1020];
};

struct three_words {
  std::uint64_t a, b, c;
};

struct alignas(64) over_aligned {
  char bytes[80];
};

template <class Pool>
class object_pool_both : public ::testing::Test {};
using pool_kinds = ::testing::Types<strata::object_pool<tracked, strata::new_delete_upstream, false>,
                                    strata::object_pool<tracked, strata::new_delete_upstream, true>>;
TYPED_TEST_SUITE(object_pool_both, pool_kinds);

TYPED_TEST(object_pool_both, CreateConstructsAndDestroyDestroys) {
  TypeParam pool;
  tracked* a = pool.create(7);
  tracked* b = pool.create(8);
  EXPECT_EQ(a->value, 7);
  EXPECT_EQ(b->value, 8);
  EXPECT_NE(a, b);
  EXPECT_EQ(tracked::alive, 2);
  pool.destroy(a);
  EXPECT_EQ(tracked::alive, 1);
  pool.destroy(b);
  EXPECT_EQ(tracked::alive, 0);
}

TYPED_TEST(object_pool_both, AddressesAreStableAndDistinct) {
  TypeParam pool;
  std::vector<tracked*> objects;
  for (int i = 0; i < 10000; ++i) objects.push_back(pool.create(i));  // many refills
  std::set<tracked*> unique(objects.begin(), objects.end());
  EXPECT_EQ(unique.size(), objects.size());
  for (int i = 0; i < 10000; ++i) {
    ASSERT_EQ(objects[std::size_t(i)]->value, i);  // nothing moved or got overwritten
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(objects[std::size_t(i)]) % alignof(tracked), 0u);
    ASSERT_TRUE(pool.owns(objects[std::size_t(i)]));
  }
  for (tracked* t : objects) pool.destroy(t);
}

TYPED_TEST(object_pool_both, FreedSlotsAreReusedBeforeNewMemory) {
  TypeParam pool;
  tracked* a = pool.create(1);
  pool.destroy(a);
  tracked* b = pool.create(2);
  EXPECT_EQ(a, b);  // LIFO reuse: the hot slot comes back first
  pool.destroy(b);
}

TYPED_TEST(object_pool_both, StatsCountLiveFreeHighWaterHitsAndRefills) {
  TypeParam pool;
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.live, 0u);
  EXPECT_EQ(s.capacity, 0u);
  EXPECT_EQ(s.refills, 0u);

  std::vector<tracked*> objects;
  for (int i = 0; i < 1000; ++i) objects.push_back(pool.create(i));
  s = pool.stats();
  EXPECT_EQ(s.live, 1000u);
  EXPECT_EQ(s.high_water, 1000u);
  EXPECT_EQ(s.allocations, 1000u);
  EXPECT_GE(s.refills, 1u);
  EXPECT_EQ(s.hits + s.refills, 1000u);  // every miss is exactly one refill here
  EXPECT_EQ(s.live + s.free, s.capacity);
  EXPECT_GE(s.bytes_reserved, s.capacity * sizeof(tracked));

  for (int i = 0; i < 600; ++i) pool.destroy(objects[std::size_t(i)]);
  s = pool.stats();
  EXPECT_EQ(s.live, 400u);
  EXPECT_EQ(s.high_water, 1000u);
  EXPECT_EQ(s.live + s.free, s.capacity);

  std::uint64_t refills = s.refills;
  for (int i = 0; i < 600; ++i) objects[std::size_t(i)] = pool.create(i);  // all from the free list
  s = pool.stats();
  EXPECT_EQ(s.refills, refills);
  EXPECT_EQ(s.allocations, 1600u);
  EXPECT_EQ(s.hits, 1600u - refills);
  for (tracked* t : objects) pool.destroy(t);
}

TYPED_TEST(object_pool_both, WithCapacityServesThatManyWithoutRefills) {
  auto pool = TypeParam::with_capacity(5000);
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.refills, 1u);
  EXPECT_GE(s.capacity, 5000u);
  EXPECT_EQ(s.free, s.capacity);
  std::vector<tracked*> objects;
  for (int i = 0; i < 5000; ++i) objects.push_back(pool.create(i));
  s = pool.stats();
  EXPECT_EQ(s.refills, 1u);  // exhausted the reserve without asking for more
  EXPECT_EQ(s.hits, 5000u);
  for (tracked* t : objects) pool.destroy(t);
}

TYPED_TEST(object_pool_both, ShrinkReturnsOnlyWholeFreeChunks) {
  TypeParam pool;
  std::vector<tracked*> objects;
  for (int i = 0; i < 20000; ++i) objects.push_back(pool.create(i));
  std::size_t capacity = pool.stats().capacity;
  EXPECT_EQ(pool.shrink(), 0u);  // nothing is free

  // Keep every 50th object: most chunks keep one live object and cannot go.
  for (std::size_t i = 0; i < objects.size(); ++i)
    if (i % 50 != 0) pool.destroy(objects[i]), objects[i] = nullptr;
  std::size_t released = pool.shrink();
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.capacity * sizeof(tracked) + released, capacity * sizeof(tracked));
  for (std::size_t i = 0; i < objects.size(); ++i) {
    if (objects[i] != nullptr) {
      ASSERT_EQ(objects[i]->value, int(i));  // survivors intact
    }
  }

  for (tracked*& t : objects) {
    if (t != nullptr) pool.destroy(t), t = nullptr;
  }
  released = pool.shrink();
  s = pool.stats();
  EXPECT_GT(released, 0u);
  EXPECT_EQ(s.capacity, 0u);
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.live, 0u);

  // The pool still works after giving everything back.
  tracked* t = pool.create(42);
  EXPECT_EQ(t->value, 42);
  pool.destroy(t);
}

TEST(ObjectPool, ShrinkKeepsChunksWithLiveObjectsAndTheirData) {
  strata::object_pool<std::uint64_t> pool;
  std::vector<std::uint64_t*> objects;
  for (std::uint64_t i = 0; i < 50000; ++i) objects.push_back(pool.create(i * 3));
  for (std::size_t i = 0; i < objects.size(); ++i)
    if (i % 1000 != 0) pool.destroy(objects[i]);
  pool.shrink();
  for (std::size_t i = 0; i < objects.size(); i += 1000) {
    ASSERT_EQ(*objects[i], i * 3);
    ASSERT_TRUE(pool.owns(objects[i]));
  }
  // The remaining free slots are valid: allocate them all and check they are distinct.
  std::size_t free_slots = pool.stats().free;
  std::uint64_t refills = pool.stats().refills;
  std::set<std::uint64_t*> more;
  for (std::size_t i = 0; i < free_slots; ++i) more.insert(pool.create(0));
  EXPECT_EQ(more.size(), free_slots);
  EXPECT_EQ(pool.stats().refills, refills);  // the free slots sufficed
  for (std::size_t i = 0; i < objects.size(); i += 1000) ASSERT_EQ(*objects[i], i * 3);
}

TEST(ObjectPool, DestructionDestroysLiveObjectsAndReturnsEveryChunk) {
  counting_upstream::outstanding_bytes = 0;
  {
    strata::object_pool<tracked, counting_upstream> pool;
    std::vector<tracked*> objects;
    for (int i = 0; i < 3000; ++i) objects.push_back(pool.create(i));
    for (int i = 0; i < 3000; i += 2) pool.destroy(objects[std::size_t(i)]);
    EXPECT_EQ(tracked::alive, 1500);
    EXPECT_GT(counting_upstream::outstanding_bytes, 0);
  }
  EXPECT_EQ(tracked::alive, 0);
  EXPECT_EQ(counting_upstream::outstanding_bytes, 0);
}

// Session 45's probe: a pool destroyed with a tree alive whose nodes destroy() their children
// destroyed every child twice (the walk had listed it as live before its parent's destructor
// returned it): a double free of each child's string, checked or not.
template <class Pool>
struct owning_node {
  static inline int destructions = 0;
  Pool* pool;
  owning_node* child = nullptr;
  std::string text = std::string(64, 'x');  // a second destruction frees it twice
  explicit owning_node(Pool* p) : pool(p) {}
  ~owning_node() {
    ++destructions;
    if (child != nullptr) pool->destroy(child);
  }
};
template <bool Checked>
struct owning_pool : strata::object_pool<owning_node<owning_pool<Checked>>,
                                         strata::new_delete_upstream, Checked> {};

template <class Pool>
void expect_owned_objects_destroyed_once() {
  using node = typename Pool::value_type;
  node::destructions = 0;
  {
    Pool pool;
    for (int i = 0; i < 100; ++i) {
      node* a = pool.create(&pool);
      node* b = pool.create(&pool);
      // The owner is the lower address, walked first: it returns its child before the child's turn.
      (a < b ? a : b)->child = a < b ? b : a;
    }
  }
  EXPECT_EQ(node::destructions, 200);
}

TEST(ObjectPool, DestructorsThatDestroyWhatTheyOwnDestroyEachObjectOnce) {
  expect_owned_objects_destroyed_once<owning_pool<false>>();
  expect_owned_objects_destroyed_once<owning_pool<true>>();
}

// Session 50's probe: an object created by a destructor while the pool was being destroyed (a
// node that hands its work to a successor) was never destroyed, where destruction promises to
// destroy the objects still alive: 100 of 100 successors' destructors never ran, their strings
// leaked.  A successor may itself make one, up to `generation` times.
template <class Pool>
struct spawning_node {
  static inline int constructions = 0;
  static inline int destructions = 0;
  Pool* pool;
  int generation;
  std::string text = std::string(64, 'x');  // leaked when the destructor never runs
  spawning_node(Pool* p, int g) : pool(p), generation(g) { ++constructions; }
  ~spawning_node() {
    ++destructions;
    if (generation > 0) pool->create(pool, generation - 1);
  }
};
template <bool Checked>
struct spawning_pool : strata::object_pool<spawning_node<spawning_pool<Checked>>,
                                           strata::new_delete_upstream, Checked> {};

template <class Pool>
void expect_objects_made_during_destruction_destroyed() {
  using node = typename Pool::value_type;
  node::constructions = node::destructions = 0;
  {
    Pool pool;
    for (int i = 0; i < 100; ++i) pool.create(&pool, i % 4);
    pool.destroy(pool.create(&pool, 0));  // a free slot on the list as well as the bump region
  }
  EXPECT_EQ(node::constructions, 101 + 100 * 3 / 2);  // 0+1+2+3 successors a group of four
  EXPECT_EQ(node::destructions, node::constructions);
}

TEST(ObjectPool, ObjectsCreatedWhileThePoolIsDestroyedAreDestroyedToo) {
  expect_objects_made_during_destruction_destroyed<spawning_pool<false>>();
  expect_objects_made_during_destruction_destroyed<spawning_pool<true>>();
}

// Session 40b's probe: 24 x capacity wrapped to 8 bytes, and the pool handed out objects at
// +24, +48... past its one chunk.  A capacity whose bytes do not fit in a size_t is one the
// upstream cannot give: with_capacity throws, reserve says false, and nothing is allocated.
template <class Pool>
void expect_overflowing_capacity_refused() {
  const std::size_t capacity = SIZE_MAX / sizeof(three_words) + 1;  // x 24 = 2^64 + 8
  EXPECT_THROW(Pool::with_capacity(capacity), std::bad_alloc);
  Pool pool;
  EXPECT_FALSE(pool.reserve(capacity));
  EXPECT_FALSE(pool.reserve(SIZE_MAX));
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.capacity, 0u);
  EXPECT_EQ(s.bytes_reserved, 0u);
  three_words* p = pool.create(three_words{1, 2, 3});  // still usable
  EXPECT_EQ(p->c, 3u);
  pool.destroy(p);
}

TEST(ObjectPool, CapacityWhoseByteCountOverflowsIsRefused) {
  expect_overflowing_capacity_refused<
      strata::object_pool<three_words, strata::new_delete_upstream, false>>();
  expect_overflowing_capacity_refused<
      strata::object_pool<three_words, strata::new_delete_upstream, true>>();
  expect_overflowing_capacity_refused<
      strata::object_pool<three_words, strata::malloc_upstream, false>>();
  expect_overflowing_capacity_refused<
      strata::object_pool<three_words, strata::malloc_upstream, true>>();
}

// Session 40b's probe: a checked pool whose upstream threw (with_capacity beyond memory) lost
// the live-bit array it had allocated for the chunk, 128 MiB for 2^30 objects, on every try.
TEST(ObjectPool, UpstreamExceptionLeavesNothingAllocated) {
  using pool_type = strata::object_pool<three_words, throwing_upstream, true>;
  const std::int64_t before = arrays_outstanding.load();
  throwing_upstream::fail = true;
  EXPECT_THROW(pool_type::with_capacity(100000), std::bad_alloc);
  {
    pool_type pool;
    EXPECT_THROW(pool.create(three_words{}), std::bad_alloc);
    EXPECT_THROW(pool.reserve(10), std::bad_alloc);
  }
  throwing_upstream::fail = false;
  EXPECT_EQ(arrays_outstanding.load(), before);
}

TEST(ObjectPool, ConstructorExceptionReturnsTheSlot) {
  strata::object_pool<throws_on_construct> pool;
  EXPECT_THROW(pool.create(true), std::runtime_error);
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.live, 0u);
  throws_on_construct* ok = pool.create(false);
  EXPECT_NE(ok, nullptr);
  pool.destroy(ok);
}

TEST(ObjectPool, OverAlignedTypes) {
  strata::object_pool<over_aligned> pool;
  for (int i = 0; i < 1000; ++i) {
    over_aligned* p = pool.create();
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  }
}

TEST(ObjectPool, TinyTypesGetPointerSizedSlots) {
  strata::object_pool<char> pool;
  std::vector<char*> objects;
  for (int i = 0; i < 100; ++i) objects.push_back(pool.create(char(i)));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(*objects[std::size_t(i)], char(i));
}

TEST(ObjectPool, MoveKeepsObjects) {
  strata::object_pool<int> a;
  int* p = a.create(5);
  strata::object_pool<int> b(std::move(a));
  EXPECT_TRUE(b.owns(p));
  EXPECT_EQ(*p, 5);
  EXPECT_EQ(b.stats().live, 1u);
  b.destroy(p);
}

// Session 41's probe: moving an unchecked pool forgot that its chunk table was not sorted yet
// (chunks at falling addresses), and the moved-to pool binary-searched it: owns() denied its own
// objects, shrink() followed a null chunk and the destructor crashed.
TEST(ObjectPool, MovedPoolFindsChunksThatCameAtFallingAddresses) {
  using pool_type = strata::object_pool<kib_object, falling_upstream, false>;
  {
    pool_type a;
    std::vector<kib_object*> objects;
    for (int i = 0; i < 100; ++i) objects.push_back(a.create(i));
    ASSERT_EQ(a.stats().refills, 4u);
    ASSERT_LT(objects.back(), objects.front());  // the newest chunk is the lowest
    pool_type b(std::move(a));  // no lookup before the move: the table is still unsorted
    for (kib_object* p : objects) EXPECT_TRUE(b.owns(p));
    for (int i = 0; i < 24; ++i) b.destroy(objects[std::size_t(i)]);  // the first two chunks
    EXPECT_EQ(b.shrink(), 24 * sizeof(kib_object));
    EXPECT_EQ(kib_object::alive, 76);
  }  // b destroys the 76 objects still alive
  EXPECT_EQ(kib_object::alive, 0);
  EXPECT_EQ(falling_upstream::outstanding_bytes, 0);
}

// Session 45's probe: a moved-from pool kept its live and allocation counters while its chunks
// went with the move: live 3 with capacity 0 (the stats promise capacity = live + free), and
// live 3 with 1024 free of 1024 once used again.
TEST(ObjectPool, MovedFromPoolIsEmptyAndItsStatsSaySo) {
  strata::object_pool<std::uint64_t> a;
  for (std::uint64_t i = 0; i < 3; ++i) a.create(i);
  auto b = std::move(a);
  strata::pool_stats s = a.stats();  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_EQ(s.live, 0u);
  EXPECT_EQ(s.capacity, 0u);
  EXPECT_EQ(s.allocations, 0u);
  EXPECT_EQ(s.high_water, 0u);
  a.destroy(a.create(7));
  s = a.stats();
  EXPECT_EQ(s.live, 0u);
  EXPECT_EQ(s.capacity, s.live + s.free);
  s = b.stats();
  EXPECT_EQ(s.live, 3u);
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.capacity, s.live + s.free);
}

// Session 41's probe: a reserve took at least 8 objects' worth (512 here); it takes what was asked.
TEST(ObjectPool, WithCapacityReservesExactlyThatMany) {
  auto pool = strata::object_pool<std::uint64_t>::with_capacity(3);
  EXPECT_EQ(pool.stats().capacity, 3u);
  EXPECT_EQ(pool.stats().bytes_reserved, 3 * sizeof(std::uint64_t));
  std::uint64_t* p[4];
  for (std::uint64_t i = 0; i < 4; ++i) p[i] = pool.create(i);  // the 4th grows automatically
  EXPECT_EQ(pool.stats().refills, 2u);
  EXPECT_GE(pool.stats().capacity, 3u + 8u);
  for (std::uint64_t* q : p) pool.destroy(q);
}

TEST(ObjectPool, RandomisedAgainstAModel) {
  strata::object_pool<std::uint64_t, strata::new_delete_upstream, true> pool;
  std::mt19937_64 rng(20240611);
  std::vector<std::uint64_t*> live;
  for (int step = 0; step < 200000; ++step) {
    if (live.empty() || rng() % 100 < 55) {
      std::uint64_t* p = pool.create(std::uint64_t(step));
      live.push_back(p);
    } else {
      std::size_t k = rng() % live.size();
      std::swap(live[k], live.back());
      pool.destroy(live.back());
      live.pop_back();
    }
    if (step % 20000 == 0) pool.shrink();
  }
  strata::pool_stats s = pool.stats();
  EXPECT_EQ(s.live, live.size());
  EXPECT_EQ(s.live + s.free, s.capacity);
  std::set<std::uint64_t*> unique(live.begin(), live.end());
  EXPECT_EQ(unique.size(), live.size());
}

}  // namespace
