// Statistics: aggregated on demand from every heap's counters (written without locked
// instructions by their owners), the retired heaps' totals and the OS layer's counters.
#pragma once
#include <cstddef>
#include <cstdint>

#include "strata/strata.h"

namespace strata::detail {
void stats_sum(strata_stats_t* out, uint64_t* class_allocs, uint64_t* class_frees) noexcept;
void stats_report_at_exit() noexcept;
}  // namespace strata::detail
