// strata::bench::median_ci_index — the distribution-free 95 % interval of a median.
#pragma once

#include <cmath>
#include <cstddef>

namespace strata::bench {

// The interval of the median of n sorted samples v is [v[k], v[n - 1 - k]] (0-based): it misses
// the median with probability 2 P(Binomial(n, 1/2) <= k), and k is the largest index that keeps
// this at or under 5 %.  Below 6 samples no k does: 0, the range, is returned (5 samples: 93.75 %).
// The lab's own intervals are the same (lab/strata_lab/stats.py, median_order_ci).
inline std::size_t median_ci_index(std::size_t n) {
  std::size_t k = 0;
  double term = std::pow(0.5, double(n)), cdf = term;  // P(X = j), P(X <= j), j = 0
  for (std::size_t j = 1; j < n / 2; ++j) {
    term = term * double(n - j + 1) / double(j);
    if (cdf + term > 0.025) break;
    cdf += term;
    k = j;
  }
  return k;
}

}  // namespace strata::bench
