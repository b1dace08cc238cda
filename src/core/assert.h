// Run-time assertions in three levels, chosen at build time by STRATA_DEBUG (0 in release
// builds; the Debug build that `make test` makes for the sanitizers uses 3):
//   STRATA_ASSERT(c)           level 1: cheap checks on slow paths;
//   STRATA_ASSERT_INTERNAL(c)  level 2: checks on fast paths and in inner loops;
//   STRATA_ASSERT_EXPENSIVE(c) level 3: the invariant checkers (check.h), which walk a page's
//                              free lists, a segment's slices or a heap's lists.
// A failed assertion names the condition and its place and aborts.  At level 0 the condition
// is not evaluated, but it is still compiled (so it cannot rot).
#pragma once

#ifndef STRATA_DEBUG
#define STRATA_DEBUG 0
#endif

namespace strata::detail {
[[noreturn]] void assert_fail(const char* condition, const char* file, int line) noexcept;
}  // namespace strata::detail

#define STRATA_ASSERT_LEVEL(level, c)                                                      \
  do {                                                                                     \
    if constexpr (STRATA_DEBUG >= (level)) {                                               \
      if (__builtin_expect(!(c), 0)) ::strata::detail::assert_fail(#c, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#define STRATA_ASSERT(c) STRATA_ASSERT_LEVEL(1, c)
#define STRATA_ASSERT_INTERNAL(c) STRATA_ASSERT_LEVEL(2, c)
#define STRATA_ASSERT_EXPENSIVE(c) STRATA_ASSERT_LEVEL(3, c)
