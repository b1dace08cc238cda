// Statistics: aggregated on demand from every heap's counters (written without locked
// instructions by their owners), the retired heaps' totals and the OS layer's counters.
#pragma once
#include <cstddef>

#include "strata/strata.h"

namespace strata::detail {
void stats_collect(strata_stats_t* out, uint64_t* class_allocs, uint64_t* class_frees) noexcept;
void stats_report_at_exit() noexcept;
// A free that strata refused (invalid pointer or double free): counted, reported, maybe abort.
void report_bad_free(const void* p, const char* what) noexcept;
}  // namespace strata::detail
