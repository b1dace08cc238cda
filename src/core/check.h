// Invariant checkers: each walks one structure and says whether it is consistent, reporting
// the first broken invariant (report::message) when it is not.  Called by the expensive
// assertions (assert.h, STRATA_DEBUG >= 3) and by strata_heap_check() in any build.  Each must
// run on the thread that owns what it checks (other threads may only push remote frees
// meanwhile, which no checker reads).
#pragma once
#include "core/types.h"

namespace strata::detail {

// Block counts add up: blocks on free and local_free plus `used` equal `capacity`, every listed
// block is a carved block start, local frees carry the free canary; the in_full flag and bit 0
// of the owner word agree; the block bound matches the capacity.
bool page_is_valid(const page* pg) noexcept;
// The free-slice bitmap agrees with used_slices and with the spans of the pages in use; the
// page map names each span's page for its slices and nothing for free slices.
bool segment_is_valid(const segment* seg) noexcept;
// Every page of h's queues and full lists is valid, in use, of its list's class, on the full
// list exactly when flagged in_full, owned by h; direct pages are first in their queues; each
// bin's spans are empty one-block pages of its length, with the class and block the bin says;
// every page in use in h's segments is on one list or in one bin, or loose (a one-block page with
// its block out); every segment is valid and owned by h.
bool heap_is_valid(const heap* h) noexcept;

}  // namespace strata::detail
