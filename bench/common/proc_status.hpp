// strata::bench::status_kb — one "kB" line of /proc/self/status (VmRSS:, VmHWM:, ...).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace strata::bench {

// The value of `key` (with its colon, e.g. "VmHWM:") in KiB; -1 when it cannot be read.
inline long status_kb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  std::size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0) kb = std::strtol(line + n, nullptr, 10);
  std::fclose(f);
  return kb;
}

}  // namespace strata::bench
