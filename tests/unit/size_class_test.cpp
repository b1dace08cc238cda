// Size classes: every size maps to the smallest class that holds it, and waste stays bounded.
#include <gtest/gtest.h>

#include "core/size_class.h"
#include "core/types.h"

using namespace strata::detail;

TEST(SizeClass, SmallestClassThatFits) {
  for (size_t size = 0; size <= large_max; size += (size < 4096 ? 1 : size < (size_t{4} << 20) ? 61 : 4093)) {
    size_t c = size_class_of(size);
    ASSERT_LT(c, size_class_count);
    ASSERT_GE(class_size(c), size) << size;
    if (c > 0) {
      ASSERT_LT(class_size(c - 1), size) << size;  // the next smaller class is too small
    }
  }
}

TEST(SizeClass, TableAgreesWithComputation) {
  for (size_t size = 0; size <= small_table_max; ++size) ASSERT_EQ(size_class_of(size), size_class_of_computed(size)) << size;
}

// A quarter of the request at most, except in the classes of one span length each (128 KiB to
// 2108 KiB), where the block is its span less 4 KiB, and the waste less than a slice and 4 KiB.
TEST(SizeClass, WasteIsAtMostAQuarterOfTheRequestOrUnderASlice) {
  for (size_t size = 129; size <= large_max; size += 97) {
    size_t c = size_class_of(size);
    size_t bs = class_size(c);
    if (c >= slice_class_first && c <= slice_class_last) {
      ASSERT_EQ(bs + 4096, page_slices(c) * slice_size) << size;
      ASSERT_LT(bs - size, slice_size + 4096) << size;
      ASSERT_GT(size, size_t{128} << 10);
    } else {
      ASSERT_LE(bs - size, size / 4) << size;
    }
  }
  EXPECT_EQ(class_size(slice_class_first - 1), size_t{128} << 10);
  EXPECT_GE(class_size(slice_class_last), huge_min);
}

TEST(SizeClass, ClassesAreSixteenByteMultiplesAndIncreasing) {
  for (size_t c = 0; c < size_class_count; ++c) {
    EXPECT_EQ(class_size(c) % 16, 0u);
    if (c) {
      EXPECT_GT(class_size(c), class_size(c - 1));
    }
  }
  EXPECT_EQ(class_size(size_class_count - 1), large_max);
}

TEST(SizeClass, PagesHoldEnoughBlocks) {
  for (size_t c = 0; c < size_class_count; ++c) {
    size_t bytes = page_slices(c) * (size_t{1} << 16);
    size_t blocks = bytes / class_size(c);
    if (class_size(c) <= 128 * 1024) {
      EXPECT_GE(blocks, 8u) << class_size(c);
    }
    EXPECT_GE(blocks, 1u);
    EXPECT_LE(page_slices(c), 511u);
  }
}

// free()'s one-compare validity test (types.h) against plain arithmetic, for every class, at
// every 16-byte offset of a page (and the bytes around each block start), for several counts of
// carved blocks.
TEST(SizeClass, CarvedBlockStartTestMatchesDivision) {
  using namespace strata::detail;
  for (size_t c = 0; c < size_class_count; ++c) {
    uint64_t bs = class_size(c);
    uint64_t span = page_slices(c) * slice_size;
    uint64_t reserved = span / bs;
    page pg{};
    pg.block_mul = block_mul_of(bs);
    for (uint64_t capacity : {uint64_t{0}, uint64_t{1}, reserved / 2, reserved}) {
      pg.block_bound.store(block_bound_of(bs, capacity));
      uint64_t step = span > (uint64_t{1} << 20) ? 4096 : 16;
      for (uint64_t off = 0; off < span; off += step) {
        bool expected = off % bs == 0 && off / bs < capacity;
        ASSERT_EQ(is_carved_block_start(&pg, off), expected) << "class " << bs << " capacity " << capacity << " offset " << off;
      }
      for (uint64_t k = 0; k <= reserved && k * bs < span; ++k)
        for (uint64_t off : {k * bs, k * bs + 1, k * bs + 8, k * bs + bs - 1})
          ASSERT_EQ(is_carved_block_start(&pg, off), off % bs == 0 && off / bs < capacity)
              << "class " << bs << " capacity " << capacity << " offset " << off;
    }
  }
}
