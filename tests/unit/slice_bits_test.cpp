// The slice bitmaps' run search (core/slice_bits.h): find_run returns the first run of n slices
// set in every given array, past the header's, as a bit-by-bit scan does.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/slice_bits.h"

using namespace strata::detail;

namespace {

bool bit(const uint64_t* bits, size_t i) { return (bits[i / 64] >> (i % 64)) & 1; }

// The first i >= header_slices with bits i .. i+n-1 set in a and b, or -1.
long reference_run(const uint64_t* a, const uint64_t* b, size_t n) {
  size_t len = 0;
  for (size_t i = header_slices; i < slices_per_segment; ++i) {
    len = bit(a, i) && bit(b, i) ? len + 1 : 0;
    if (len == n) return static_cast<long>(i + 1 - n);
  }
  return -1;
}

uint64_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

}  // namespace

TEST(SliceBits, FindRunAgreesWithABitByBitScan) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int trial = 0; trial < 4000; ++trial) {
    // Runs of random lengths, set with a probability that varies from trial to trial, so that
    // some bitmaps are nearly full and some nearly empty and runs cross word boundaries.
    uint64_t a[bitmap_words] = {}, b[bitmap_words] = {};
    uint64_t density = next(s) % 100;
    for (uint64_t* bits : {a, b}) {
      for (size_t i = 0; i < slices_per_segment;) {
        size_t len = 1 + next(s) % 90;
        bool set = next(s) % 100 < density;
        for (size_t k = i; k < i + len && k < slices_per_segment; ++k)
          if (set) bits[k / 64] |= uint64_t{1} << (k % 64);
        i += len;
      }
    }
    if (trial % 4 == 0) std::fill(std::begin(b), std::end(b), ~uint64_t{0});
    uint64_t ones[bitmap_words];
    std::fill(std::begin(ones), std::end(ones), ~uint64_t{0});
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{8}, size_t{13}, size_t{16}, size_t{31}, size_t{63},
                     size_t{64}, size_t{65}, size_t{100}, 1 + next(s) % 200}) {
      ASSERT_EQ(find_run({a, b}, n), reference_run(a, b, n)) << "trial " << trial << ", n " << n;
      ASSERT_EQ(find_run({a}, n), reference_run(a, ones, n)) << "trial " << trial << ", n " << n;
    }
  }
}

TEST(SliceBits, FindRunSkipsTheHeaderAndStopsAtTheEnd) {
  uint64_t all[bitmap_words];
  std::fill(std::begin(all), std::end(all), ~uint64_t{0});
  EXPECT_EQ(find_run({all}, 1), static_cast<long>(header_slices));
  EXPECT_EQ(find_run({all}, slices_per_segment - header_slices), static_cast<long>(header_slices));
  EXPECT_EQ(find_run({all}, slices_per_segment - header_slices + 1), -1);
  // Only the last word's top 10 bits: a run of 10 ends the segment, one of 11 does not fit.
  uint64_t top[bitmap_words] = {};
  top[bitmap_words - 1] = ~uint64_t{0} << 54;
  EXPECT_EQ(find_run({top}, 10), static_cast<long>(slices_per_segment - 10));
  EXPECT_EQ(find_run({top}, 11), -1);
  // A run of 64 that straddles two words (32 bits in each).
  uint64_t straddle[bitmap_words] = {};
  straddle[2] = ~uint64_t{0} << 32;
  straddle[3] = ~uint64_t{0} >> 32;
  EXPECT_EQ(find_run({straddle}, 64), 2 * 64 + 32);
  EXPECT_EQ(find_run({straddle}, 65), -1);
}
