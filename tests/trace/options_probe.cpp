// Prints strata_options_json() on stdout: run by trace_options_test with STRATA_TRACE set, once
// linked with libstrata.a (the recorder) and once with libstrata_api.a (none); then its effective
// user id (a setuid copy runs as another user).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "strata/strata.h"

int main() {
  // A program that allocates: its malloc is libstrata.a's, which links the recorder in (a program
  // that never names malloc gets the C library's, and no recorder).
  void* volatile p = malloc(24);
  free(p);
  char buf[8192];
  if (strata_options_json(buf, sizeof buf) >= sizeof buf) return 1;
  puts(buf);
  printf("euid %d\n", static_cast<int>(geteuid()));
  return 0;
}
