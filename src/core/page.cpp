// Pages: the hardened build's carving order and its report of a corrupted free list (page.h).
#include "core/page.h"

#include <cstdlib>

#include "core/report.h"
#include "os/os.h"

namespace strata::detail {

namespace {
__thread uint64_t tl_shuffle __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

uint64_t shuffle_next() noexcept {
  uint64_t x = tl_shuffle;
  // Seeded from getrandom, not from the process secret: xorshift is linear, and the order of one
  // carve (the addresses of 256 allocations) gives its state and so its seed, which was the
  // secret XOR the thread pointer (docs/security.md).
  if (x == 0) x = os::random_seed();  // never 0 (bit 0 set)
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  tl_shuffle = x;
  return x;
}

void page_corrupted(const page* pg, const block* b) noexcept {
  report::message("strata: error: free list of the page at %p corrupted at the block %p (a write after free, or "
                  "an overflow from the block before it); aborting\n",
                  static_cast<const void*>(pg->start), static_cast<const void*>(b));
  abort();
}

}  // namespace strata::detail
