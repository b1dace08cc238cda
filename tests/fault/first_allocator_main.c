// Run with another allocator preloaded before strata (first_allocator.c, which has no
// reallocarray, as jemalloc and tcmalloc have none): every block the program gets, reallocarray's
// too, must be that allocator's, which serves malloc and free.  strata's reallocarray served the
// call itself: its block went to the other allocator's free (`ls` and `sort` crashed under
// jemalloc, aborted under tcmalloc), and a block of the other allocator's was refused as foreign.
// Prints "ok" and exits 0 when every check holds.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

int main(void) {
  int (*owns)(const void*) = (int (*)(const void*))dlsym(RTLD_DEFAULT, "first_allocator_owns");
  if (owns == NULL || dlsym(RTLD_DEFAULT, "strata_version") == NULL) {
    fprintf(stderr, "needs LD_PRELOAD=\"first_allocator.so libstrata.so\"\n");
    return 2;
  }
  void* fresh = reallocarray(NULL, 10, 10);
  check(fresh != NULL && owns(fresh), "reallocarray(NULL, 10, 10) is the first allocator's block");

  unsigned char* grown = malloc(64);
  check(grown != NULL && owns(grown), "malloc is the first allocator's");
  memset(grown, 0x5a, 64);
  unsigned char* moved = reallocarray(grown, 40, 8);
  check(moved != NULL && owns(moved), "reallocarray of the first allocator's block is its block");
  int kept = moved != NULL;
  for (int i = 0; kept && i < 64; ++i) kept = moved[i] == 0x5a;
  check(kept, "reallocarray kept the contents");

  volatile size_t half = SIZE_MAX / 2;  // not folded: the compiler would warn of the overflow
  errno = 0;
  check(reallocarray(NULL, half, 4) == NULL && errno == ENOMEM, "reallocarray overflow: NULL, ENOMEM");

  free(fresh);  // aborts (first_allocator.c) where it is not the first allocator's
  free(moved != NULL ? moved : grown);
  printf("%s\n", failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}
