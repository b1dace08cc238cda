// Statistics: aggregated on demand from every heap's counters (written without locked
// instructions by their owners), the retired heaps' totals and the OS layer's counters.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/size_class.h"
#include "strata/strata.h"

namespace strata::detail {
// Each class's allocations and frees, summed over the heaps (1.6 KiB: static at exit, where the
// calling thread's stack may be a small one).
struct class_counts {
  uint64_t allocs[size_class_count], frees[size_class_count];
};
// Fills `counts` and *out from them.
void stats_sum(strata_stats_t* out, class_counts& counts) noexcept;
// At start-up (global_init): notes which file stderr is, for what strata writes there later
// (STRATA_SHOW_STATS's printout at exit, STRATA_STATS_FILE's and STRATA_TRACE's warnings), and
// keeps a copy of it for what is written at exit.
void stats_keep_stderr() noexcept;
// The descriptor still open on stderr as it was at start-up (the kept copy, or 2), or -1 where
// neither is: the program closed it, or put a file of its own on descriptor 2.
int startup_stderr() noexcept;
// In a forked child: closes the kept copy (descriptor 2 serves while it is still that file).  A
// daemon's child puts /dev/null on 0-2, and the copy held its starter's pipe open for its whole
// life: `$(cmd)`, a test harness's captured stderr or `strata-lab record` waited for it.
void stats_drop_stderr_copy() noexcept;
void stats_report_at_exit() noexcept;
}  // namespace strata::detail
