// Statistics: aggregated on demand from every heap's counters (written without locked
// instructions by their owners), the retired heaps' totals and the OS layer's counters.
#pragma once
#include <cstddef>
#include <cstdint>

#include "strata/strata.h"

namespace strata::detail {
void stats_collect(strata_stats_t* out, uint64_t* class_allocs, uint64_t* class_frees) noexcept;
void stats_report_at_exit() noexcept;
// A free that strata refused (invalid pointer or double free): counted, reported, maybe abort.
// The first bad_free_reports_max are reported one line each, then one line says the rest are
// only counted; the line of a free that aborts (STRATA_ABORT_ON_ERROR=1) is always printed.
inline constexpr uint64_t bad_free_reports_max = 32;
void report_bad_free(const void* p, const char* what) noexcept;
}  // namespace strata::detail
