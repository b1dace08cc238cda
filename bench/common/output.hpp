// strata::bench::stdout_written — whether a workload program's result reached stdout.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace strata::bench {

// The JSON a program prints is its result: lost (stdout a full disk, a closed pipe), the run must
// not pass.  Flushes stdout; false, with "<program>: cannot write the <what>: <reason>" on stderr,
// when the result did not get out.
inline bool stdout_written(const char* program, const char* what) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return true;
  std::fprintf(stderr, "%s: cannot write the %s: %s\n", program, what, std::strerror(errno));
  return false;
}

}  // namespace strata::bench
