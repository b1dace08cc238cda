#include "core/errors.h"

#include <atomic>
#include <cstdlib>

#include "core/assert.h"
#include "core/options.h"
#include "core/report.h"

namespace strata::detail {

namespace {
std::atomic<uint64_t> bad_frees{0};
}  // namespace

void report_bad_free(const void* p, const char* what) noexcept {
  uint64_t n = bad_frees.fetch_add(1, std::memory_order_relaxed) + 1;
  if (options::get(option::abort_on_error)) {
    report::message("strata: error: %s %p; aborting (STRATA_ABORT_ON_ERROR=1)\n", what, p);
    abort();
  }
  if (n <= bad_free_reports_max)
    report::message("strata: error: %s %p (ignored; STRATA_ABORT_ON_ERROR=1 aborts instead)\n", what, p);
  if (n == bad_free_reports_max)
    report::message("strata: error: %llu bad frees reported; further bad frees are not reported "
                    "(they are still counted in the statistics: bad_free_count)\n",
                    static_cast<unsigned long long>(bad_free_reports_max));
}

uint64_t bad_free_count() noexcept { return bad_frees.load(std::memory_order_relaxed); }

void assert_fail(const char* condition, const char* file, int line) noexcept {
  report::message("strata: internal error: assertion failed: %s (%s:%d)\n", condition, file, line);
  abort();
}

}  // namespace strata::detail
