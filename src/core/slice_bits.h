// Slice bitmaps: a segment's slices, one bit each in bitmap_words words (segment.cpp keeps which
// are free, dirty, due for purging, purged), and the search for a run of free slices.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace strata::detail {

// Calls f(word index, mask) for the words covering bits [from, from + n).
template <class F>
inline void bits_for_range(size_t from, size_t n, F f) noexcept {
  while (n > 0) {
    size_t w = from / 64, bit = from % 64, take = 64 - bit < n ? 64 - bit : n;
    uint64_t mask = (take == 64 ? ~uint64_t{0} : ((uint64_t{1} << take) - 1)) << bit;
    f(w, mask);
    from += take;
    n -= take;
  }
}

inline void bits_assign(uint64_t* bits, size_t from, size_t n, bool value) noexcept {
  bits_for_range(from, n, [&](size_t w, uint64_t mask) {
    if (value)
      bits[w] |= mask;
    else
      bits[w] &= ~mask;
  });
}

inline size_t bits_count(const uint64_t* bits, size_t from, size_t n) noexcept {
  size_t count = 0;
  bits_for_range(from, n, [&](size_t w, uint64_t mask) { count += static_cast<size_t>(__builtin_popcountll(bits[w] & mask)); });
  return count;
}

// The first index >= from whose bit equals `value`, or slices_per_segment.
inline size_t bits_next(const uint64_t* bits, size_t from, bool value) noexcept {
  if (from >= slices_per_segment) return slices_per_segment;
  size_t w = from / 64;
  uint64_t word = (value ? bits[w] : ~bits[w]) & (~uint64_t{0} << (from % 64));
  while (word == 0) {
    if (++w == bitmap_words) return slices_per_segment;
    word = value ? bits[w] : ~bits[w];
  }
  return w * 64 + static_cast<size_t>(__builtin_ctzll(word));
}

inline bool bits_all(const uint64_t* bits, size_t from, size_t n) noexcept {
  bool all = true;
  bits_for_range(from, n, [&](size_t w, uint64_t mask) { all &= (bits[w] & mask) == mask; });
  return all;
}

inline bool bits_any(const uint64_t* bits, size_t from, size_t n) noexcept {
  bool any = false;
  bits_for_range(from, n, [&](size_t w, uint64_t mask) { any |= (bits[w] & mask) != 0; });
  return any;
}

// First fit: the start of a run of n slices whose bits are set in every array of `sets` (free
// slices, or free and resident ones), past the header's, or -1.  A run of up to 64 (4 MiB) is
// found a word at a time: one within a word by log2(n) + 1 shift-and steps (bit i then says
// "bits i .. i+n-1 are set"), one across words by the set bits ending the word before.  Walking
// the runs one by one took 10 runs (20 bit scans) a call on E1's large band: a third of its
// instructions and a branch miss at each run.
template <size_t N>
long find_run(const uint64_t* const (&sets)[N], size_t n) noexcept {
  auto word = [&](size_t w) {
    uint64_t x = sets[0][w];
    for (size_t k = 1; k < N; ++k) x &= sets[k][w];
    return w == 0 ? x & ~((uint64_t{1} << header_slices) - 1) : x;
  };
  if (n > 64) {
    uint64_t all[bitmap_words];
    for (size_t w = 0; w < bitmap_words; ++w) all[w] = word(w);
    for (size_t i = header_slices; i + n <= slices_per_segment;) {
      size_t start = bits_next(all, i, true);
      if (start + n > slices_per_segment) return -1;
      size_t end = bits_next(all, start, false);
      if (end - start >= n) return static_cast<long>(start);
      i = end;
    }
    return -1;
  }
  size_t carry = 0;  // the set bits that end the previous word
  for (size_t w = 0; w < bitmap_words; ++w) {
    uint64_t x = word(w);
    if (x == 0) {
      carry = 0;
      continue;
    }
    size_t low = x == ~uint64_t{0} ? 64 : static_cast<size_t>(__builtin_ctzll(~x));
    if (carry != 0 && carry + low >= n) return static_cast<long>(w * 64 - carry);
    uint64_t m = x;
    for (size_t len = 1; len < n && m != 0;) {
      size_t step = len * 2 <= n ? len : n - len;
      m &= m >> step;
      len += step;
    }
    if (m != 0) return static_cast<long>(w * 64 + static_cast<size_t>(__builtin_ctzll(m)));
    carry = low == 64 ? carry + 64 : static_cast<size_t>(__builtin_clzll(~x));
  }
  return -1;
}

}  // namespace strata::detail
