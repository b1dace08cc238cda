// Pages: the hardened build's carving order and its report of a corrupted free list (page.h).
#include "core/page.h"

#include <cstdlib>

#include "core/report.h"

namespace strata::detail {

namespace {
__thread uint64_t tl_shuffle __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

uint64_t shuffle_next() noexcept {
  uint64_t x = tl_shuffle;
  if (x == 0) x = (g_secret ^ thread_id()) | 1;
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
