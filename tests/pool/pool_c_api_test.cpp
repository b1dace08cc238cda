// The C API of strata/pool.h (compiled as C in pool_c_api_check.c as well).
#include "strata/pool.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <cstdint>
#include <set>
#include <thread>
#include <utility>
#include <vector>

extern "C" int strata_pool_c_smoke(void);  // pool_c_api_check.c

namespace {

TEST(PoolCApi, CompilesAndWorksFromC) { EXPECT_EQ(strata_pool_c_smoke(), 0); }

TEST(PoolCApi, RejectsBadArguments) {
  errno = 0;
  EXPECT_EQ(strata_pool_create(0, 8, 0, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(strata_pool_create(16, 3, 0, 0), nullptr);  // not a power of two
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(strata_pool_create(16, 8, 0, 0x80), nullptr);  // unknown flag
  EXPECT_EQ(errno, EINVAL);
}

// strata_pool_alloc(NULL) dereferenced the pool and crashed (found by probing): every function
// that takes a pool reports a NULL one as a bad argument, the way strata_pool_create does.
TEST(PoolCApi, RejectsANullPool) {
  errno = 0;
  EXPECT_EQ(strata_pool_alloc(nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(strata_pool_shrink(nullptr), 0u);
  EXPECT_EQ(errno, EINVAL);
  strata_pool_stats_t s;
  std::memset(&s, 0xff, sizeof s);
  errno = 0;
  strata_pool_get_stats(nullptr, &s);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(s.live, 0u);  // zeroed, not left as garbage
  EXPECT_EQ(s.allocations, 0u);
  int object = 0;
  errno = 0;
  strata_pool_free(nullptr, &object);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(object, 0);  // untouched
  strata_pool_t* pool = strata_pool_create(16, 8, 1, 0);
  ASSERT_NE(pool, nullptr);
  errno = 0;
  strata_pool_get_stats(pool, nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Like free(NULL), these stay quiet no-ops.
  errno = 0;
  strata_pool_free(pool, nullptr);
  strata_pool_free(nullptr, nullptr);
  strata_pool_destroy(nullptr);
  EXPECT_EQ(errno, 0);
  strata_pool_destroy(pool);
}

class PoolCApiFlags : public ::testing::TestWithParam<unsigned> {};

// Session 40b's probe: a capacity whose byte count wraps (24 x capacity = 2^64 + 8) gave a pool
// with an 8-byte chunk that handed out objects past its end.  It must fail like any capacity
// the upstream cannot give.
TEST_P(PoolCApiFlags, CapacityWhoseByteCountOverflowsIsRefused) {
  for (auto [size, align] : {std::pair<size_t, size_t>{24, 8}, {16, 16}}) {
    const size_t capacity = SIZE_MAX / size + 1;  // capacity * size wraps to a few bytes
    errno = 0;
    strata_pool_t* pool = strata_pool_create(size, align, capacity, GetParam());
    EXPECT_EQ(pool, nullptr) << size << " x " << capacity;
    EXPECT_EQ(errno, ENOMEM);
    strata_pool_destroy(pool);
  }
}

TEST_P(PoolCApiFlags, AllocFreeStatsShrink) {
  strata_pool_t* pool = strata_pool_create(48, 16, 100, GetParam());
  ASSERT_NE(pool, nullptr);
  strata_pool_stats_t s;
  strata_pool_get_stats(pool, &s);
  EXPECT_GE(s.capacity, 100u);
  EXPECT_EQ(s.refills, 1u);

  std::vector<void*> v;
  for (int i = 0; i < 10000; ++i) {
    void* p = strata_pool_alloc(pool);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u);
    std::memset(p, i & 0xff, 48);
    v.push_back(p);
  }
  EXPECT_EQ(std::set<void*>(v.begin(), v.end()).size(), v.size());
  strata_pool_get_stats(pool, &s);
  EXPECT_EQ(s.live, 10000u);
  EXPECT_EQ(s.allocations, 10000u);
  for (void* p : v) strata_pool_free(pool, p);
  strata_pool_get_stats(pool, &s);
  EXPECT_EQ(s.live, 0u);
  EXPECT_GT(strata_pool_shrink(pool), 0u);
  strata_pool_destroy(pool);
}

// Session 41's probe: a pool reserved at least 8 objects, so strata_pool_create(1 GiB, 0, 1, 0)
// asked malloc for 8 GiB and failed under a 4 GB address-space limit that 1 GiB fitted.  The
// capacity is what is reserved; objects this large then come one more at a time (and a thread's
// cache in the concurrent pool takes what one refill gives, not 64 of them).
TEST_P(PoolCApiFlags, CapacityReservesThatManyLargeObjects) {
  const size_t big = size_t{64} << 20;
  strata_pool_t* pool = strata_pool_create(big, 0, 1, GetParam());
  ASSERT_NE(pool, nullptr);
  strata_pool_stats_t s;
  strata_pool_get_stats(pool, &s);
  EXPECT_EQ(s.capacity, 1u);
  EXPECT_EQ(s.bytes_reserved, big);
  void* a = strata_pool_alloc(pool);
  void* b = strata_pool_alloc(pool);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  strata_pool_get_stats(pool, &s);
  EXPECT_EQ(s.capacity, 2u);
  EXPECT_EQ(s.bytes_reserved, 2 * big);
  strata_pool_free(pool, a);
  strata_pool_free(pool, b);
  strata_pool_destroy(pool);
}

INSTANTIATE_TEST_SUITE_P(Variants, PoolCApiFlags,
                         ::testing::Values(0u, unsigned(STRATA_POOL_CHECKED),
                                           unsigned(STRATA_POOL_CONCURRENT),
                                           unsigned(STRATA_POOL_CONCURRENT | STRATA_POOL_CHECKED)));

TEST(PoolCApi, ConcurrentPoolAcrossThreads) {
  strata_pool_t* pool = strata_pool_create(32, 8, 0, STRATA_POOL_CONCURRENT);
  ASSERT_NE(pool, nullptr);
  std::vector<void*> made(20000);
  std::thread producer([&] {
    for (auto& p : made) p = strata_pool_alloc(pool);
  });
  producer.join();
  std::thread consumer([&] {
    for (void* p : made) strata_pool_free(pool, p);
  });
  consumer.join();
  strata_pool_stats_t s;
  strata_pool_get_stats(pool, &s);
  EXPECT_EQ(s.live, 0u);
  EXPECT_EQ(s.allocations, 20000u);
  strata_pool_destroy(pool);
}

}  // namespace
