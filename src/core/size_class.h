// Size classes.  Spacing: 16 bytes up to 128, then four classes per power of two up to 128 KiB,
// so a block is at most 25 % larger than the request (at most 20 % of a block is waste), mean
// ~12 %; then one class per span length (64 KiB slices) up to a little past huge_min, and four
// per power of two again up to large_max.
//   class  0..7   : 16, 32, ..., 128
//   class  8..47  : 160, 192, 224, 256, 320, 384, 448, 512, 640, ... 128 KiB
//   class 48..78  : 188 KiB, 252 KiB, ... (n slices - 4 KiB, n = 3..33), 2108 KiB
//   class 79..    : 2.5 MiB, 3 MiB, 3.5 MiB, 4 MiB, 5 MiB, ... up to large_max (16 MiB)
// A block of the slice classes ends in its span's last slice: a thread that frees and allocates
// such blocks of random sizes, reusing kept spans (heap.cpp, the bins), touches the end of each
// span only, where a block of a class 25 % wide ended anywhere in its span's last quarter.  The
// waste is address space, up to 64 KiB + 4 KiB a block: what is not written is not faulted in.
// Above large_max a request is huge (a segment of its own).  Pages (spans of 64 KiB slices):
//   block <= 1 KiB     : 1 slice (at least 64 blocks)
//   block <= 32 KiB    : enough slices for at least 32 blocks (a page with few blocks empties and
//                        fills often, each time through malloc's and free's slow paths: with 8
//                        blocks to a page E1's mid band ran at 0.55x the speed it has with 32)
//   block <= 128 KiB   : enough slices for at least 8 blocks
//   larger             : one block per page
// Blocks are carved lazily (4 KiB the first time, then 16 KiB at a time), so a bigger page costs
// address space, not memory.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>

namespace strata::detail {

constexpr size_t min_block = 16;
constexpr size_t large_max = size_t{16} << 20;
// malloc serves requests above this with a huge mapping (segment.cpp), not a size class: a big
// buffer then reuses a cached mapping's resident pages (grown or shrunk with mremap) instead of
// needing a run of free slices in a segment, and goes back to the OS whole.  Classes up to
// large_max remain for aligned requests.
constexpr size_t huge_min = size_t{2} << 20;
constexpr size_t small_table_max = 1024;  // sizes served by table lookup

// Four classes per power of two (the classes above 128 KiB before the slice classes replaced
// them: `geometric` below).
constexpr size_t geometric_class_of(size_t size) noexcept {
  if (size <= 128) return size == 0 ? 0 : (size - 1) >> 4;
  size_t b = std::bit_width(size - 1) - 1;  // floor(log2(size-1)), >= 7
  size_t sub = ((size - 1) >> (b - 2)) & 3;
  return 8 + (b - 7) * 4 + sub;
}
constexpr size_t geometric_class_size(size_t c) noexcept {
  if (c < 8) return (c + 1) * 16;
  size_t b = 7 + (c - 8) / 4, sub = (c - 8) % 4;
  return (size_t{1} << b) + ((sub + 1) << (b - 2));
}

// Above 128 KiB up to a little past huge_min, a class per span length: n slices of 64 KiB hold
// a block of n * 64 KiB - 4 KiB (the 4 KiB leave room for the block's colour, segment.cpp).
constexpr size_t slice_class_first = geometric_class_of(size_t{128} << 10) + 1;
constexpr size_t slice_class_min_slices = 3, slice_class_max_slices = 33;
constexpr size_t slice_class_last = slice_class_first + slice_class_max_slices - slice_class_min_slices;
constexpr size_t slice_class_bytes(size_t n) noexcept { return (n << 16) - 4096; }
// Past the slice classes, the geometric classes again, shifted by the classes added.
constexpr size_t geometric_shift = slice_class_last + 1 - geometric_class_of(slice_class_bytes(slice_class_max_slices) + 1);

constexpr size_t size_class_of_computed(size_t size) noexcept {
  if (size <= (size_t{128} << 10)) return geometric_class_of(size);
  if (size <= slice_class_bytes(slice_class_max_slices)) {
    size_t n = (size + 4096 + 0xffff) >> 16;
    return slice_class_first + (n < slice_class_min_slices ? slice_class_min_slices : n) - slice_class_min_slices;
  }
  return geometric_class_of(size) + geometric_shift;
}

constexpr size_t class_size(size_t c) noexcept {
  if (c < slice_class_first) return geometric_class_size(c);
  if (c <= slice_class_last) return slice_class_bytes(c - slice_class_first + slice_class_min_slices);
  return geometric_class_size(c - geometric_shift);
}

constexpr size_t size_class_count = size_class_of_computed(large_max) + 1;
static_assert(class_size(size_class_count - 1) == large_max);
static_assert(class_size(size_class_of_computed(129)) == 160);
static_assert(class_size(size_class_of_computed(257)) == 320);

struct small_table {
  uint8_t cls[small_table_max / 16 + 1];
  constexpr small_table() : cls{} {
    for (size_t i = 0; i <= small_table_max / 16; ++i) cls[i] = static_cast<uint8_t>(size_class_of_computed(i * 16));
  }
};
inline constexpr small_table small_classes{};

inline size_t size_class_of(size_t size) noexcept {
  if (size <= small_table_max) return small_classes.cls[(size + 15) >> 4];
  return size_class_of_computed(size);
}

// Blocks larger than this have a page each (page_slices).
constexpr size_t one_block_page_min = 128 * 1024;
// Such a block starts a "colour" into its span where the span has room past the block, a
// multiple of 64 bytes below 4 KiB that changes from page to page (segment.cpp), as jemalloc's
// cache-oblivious large allocations do: blocks that all started on a 64 KiB boundary would share
// their cache sets and alias each other in the 4 KiB-granular store-to-load checks (arrays walked
// side by side).  Room is not made for it: a slice more per page cost E1's large band 5 % more
// instructions (spans of uneven lengths fragment the segment).
constexpr size_t colour_span = 4096;

// The distance between blocks of class c in a page: the class size, but 64 bytes more for the
// classes from 8 KiB to one_block_page_min that are multiples of 4 KiB, whose blocks would
// otherwise all share one colour (the same page offset; arrays of 1000 doubles side by side).
constexpr size_t block_stride(size_t c) noexcept {
  size_t bs = class_size(c);
  return bs >= 8192 && bs <= one_block_page_min && bs % colour_span == 0 ? bs + 64 : bs;
}

// Aligned requests (alloc_aligned), alignments of 32 B to 64 KiB: the first class at or above c
// whose blocks all sit aligned in their 64 KiB-aligned pages (laid out a multiple of the
// alignment apart; a one-block page's block starts a colour in, so only up to 64 B there) and are
// at most huge_min, or size_class_count where none is.
constexpr size_t aligned_shift_min = 5, aligned_shift_max = 16;
struct aligned_table {
  uint8_t next[aligned_shift_max - aligned_shift_min + 1][size_class_count];
  constexpr aligned_table() : next{} {
    for (size_t s = aligned_shift_min; s <= aligned_shift_max; ++s) {
      size_t a = size_t{1} << s, found = size_class_count;
      for (size_t c = size_class_count; c-- > 0;) {
        size_t bs = block_stride(c);
        if (class_size(c) <= huge_min && bs % a == 0 && (bs <= one_block_page_min || a <= 64)) found = c;
        next[s - aligned_shift_min][c] = static_cast<uint8_t>(found);
      }
    }
  }
};
inline constexpr aligned_table aligned_classes{};
static_assert(size_class_count < 256);

// The same for requests of up to small_table_max bytes aligned to 32 B - 1 KiB, by size slot
// (16 bytes each, as malloc's table): the class size to ask malloc for, when that class is no
// larger than the over-allocation of alloc_aligned's fallback would take for any size of the
// slot; 0 otherwise.  One lookup instead of the classes' arithmetic.
constexpr size_t aligned_small_shift_max = 10;
struct aligned_small_table {
  uint16_t size[aligned_small_shift_max - aligned_shift_min + 1][small_table_max / 16 + 1];
  constexpr aligned_small_table() : size{} {
    for (size_t s = aligned_shift_min; s <= aligned_small_shift_max; ++s) {
      size_t a = size_t{1} << s;
      for (size_t i = 1; i <= small_table_max / 16; ++i) {
        size_t hi = i * 16, lo = hi - 15, want = hi < a ? a : hi;
        size_t c = aligned_classes.next[s - aligned_shift_min][size_class_of_computed(want)];
        if (c < size_class_count && c <= size_class_of_computed(lo + a - 1))
          size[s - aligned_shift_min][i] = static_cast<uint16_t>(class_size(c));
      }
    }
  }
};
inline constexpr aligned_small_table aligned_small{};

constexpr size_t page_slices(size_t c) noexcept {
  size_t bs = class_size(c);
  constexpr size_t slice = size_t{1} << 16;
  if (bs <= 1024) return 1;
  if (bs <= 32 * 1024) return (32 * bs + slice - 1) / slice;
  if (bs <= 128 * 1024) return (8 * bs + slice - 1) / slice;
  return (bs + slice - 1) / slice;
}

}  // namespace strata::detail
