// Checked pools catch misuse and abort with a message naming it.  (Checked is the default
// without NDEBUG; these tests force it so they also run in Release builds.)
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "strata/concurrent_object_pool.hpp"
#include "strata/object_pool.hpp"
#include "strata/pool.h"

namespace {

struct item {
  std::uint64_t a, b;
};
using checked_pool = strata::object_pool<item, strata::new_delete_upstream, true>;
using checked_concurrent_pool =
    strata::concurrent_object_pool<item, strata::new_delete_upstream, true>;

class PoolMisuseDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(PoolMisuseDeathTest, DoubleDeallocate) {
  EXPECT_DEATH(
      {
        checked_pool pool;
        item* p = pool.create();
        pool.destroy(p);
        pool.destroy(p);
      },
      "object pool misuse: double deallocate");
  EXPECT_DEATH(
      {
        checked_pool pool;
        item* p = pool.allocate();
        pool.deallocate(p);
        pool.deallocate(p);
      },
      "double deallocate");
}

TEST_F(PoolMisuseDeathTest, ForeignPointer) {
  EXPECT_DEATH(
      {
        checked_pool a;
        checked_pool b;
        item* p = a.create();
        b.destroy(p);
      },
      "pointer does not come from this pool");
  EXPECT_DEATH(
      {
        checked_pool pool;
        (void)pool.create();
        auto heap = std::make_unique<item>();
        pool.destroy(heap.get());
      },
      "pointer does not come from this pool");
}

TEST_F(PoolMisuseDeathTest, InteriorPointer) {
  EXPECT_DEATH(
      {
        checked_pool pool;
        item* p = pool.create();
        pool.deallocate(reinterpret_cast<item*>(reinterpret_cast<char*>(p) + 8));
      },
      "not the start of an object");
}

TEST_F(PoolMisuseDeathTest, NeverAllocatedSlot) {
  EXPECT_DEATH(
      {
        checked_pool pool;
        item* p = pool.create();
        pool.destroy(p + 1);  // inside the chunk, but not handed out yet
      },
      "double deallocate \\(or never allocated\\)");
}

TEST_F(PoolMisuseDeathTest, ConcurrentPoolDoubleAndForeign) {
  EXPECT_DEATH(
      {
        checked_concurrent_pool pool;
        item* p = pool.create();
        pool.destroy(p);
        pool.destroy(p);
      },
      "double deallocate");
  EXPECT_DEATH(
      {
        checked_concurrent_pool a;
        checked_concurrent_pool b;
        item* p = a.create();
        b.destroy(p);
      },
      "pointer does not come from this pool");
}

TEST_F(PoolMisuseDeathTest, CApiCheckedPool) {
  EXPECT_DEATH(
      {
        strata_pool_t* pool = strata_pool_create(32, 8, 0, STRATA_POOL_CHECKED);
        void* p = strata_pool_alloc(pool);
        strata_pool_free(pool, p);
        strata_pool_free(pool, p);
      },
      "double deallocate");
}

// The checks must not fire on correct use, including frees after shrink and from other chunks.
// Session 45's probe: a pool destroyed with an object whose destructor destroy()s an object of
// the pool already destroyed by the walk (lower address) destroyed it twice, silently, though
// the pool was checked.  Now the second destroy() is a double deallocate.
struct destroys_a_neighbour {
  using pool_type = strata::object_pool<destroys_a_neighbour, strata::new_delete_upstream, true>;
  pool_type* pool;
  destroys_a_neighbour* other = nullptr;
  explicit destroys_a_neighbour(pool_type* p) : pool(p) {}
  ~destroys_a_neighbour() {
    if (other != nullptr) pool->destroy(other);
  }
};

TEST_F(PoolMisuseDeathTest, DestructorReachingAnObjectAlreadyDestroyedAtPoolDestruction) {
  EXPECT_DEATH(
      {
        destroys_a_neighbour::pool_type pool;
        destroys_a_neighbour* a = pool.create(&pool);
        destroys_a_neighbour* b = pool.create(&pool);
        (a < b ? b : a)->other = a < b ? a : b;  // the higher destroys the lower, walked first
      },
      "double deallocate");
}

TEST(PoolChecks, CorrectUseDoesNotTrip) {
  checked_pool pool;
  std::vector<item*> v;
  for (int i = 0; i < 5000; ++i) v.push_back(pool.create());
  for (std::size_t i = 0; i < v.size(); i += 2) pool.destroy(v[i]);
  pool.shrink();
  for (std::size_t i = 1; i < v.size(); i += 2) pool.destroy(v[i]);
  EXPECT_EQ(pool.stats().live, 0u);
}

}  // namespace
