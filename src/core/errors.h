// Errors strata detects in the program (bad and double frees) and in itself (a failed
// assertion, a broken invariant): reported without allocating (core/report.h).
#pragma once
#include <cstdint>

namespace strata::detail {

// A free that strata refused (invalid pointer or double free): counted, reported, maybe abort.
// The first bad_free_reports_max are reported one line each, then one line says the rest are
// only counted; the line of a free that aborts (STRATA_ABORT_ON_ERROR=1) is always printed.
inline constexpr uint64_t bad_free_reports_max = 32;
void report_bad_free(const void* p, const char* what) noexcept;
// Bad frees so far (the statistics' bad_free_count).
uint64_t bad_free_count() noexcept;

}  // namespace strata::detail
