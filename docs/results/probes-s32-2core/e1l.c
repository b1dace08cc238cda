// E1 large-band-like loop: ring of SLOTS blocks, free slot, malloc random 64K..1M, write to it (TOUCH: 0 nothing,
// 1 first and last byte, 2 last byte only, 3 first byte only),
// then EXTRA stores to a hot array.  ./e1l SLOTS TOUCH OPS [EXTRA]
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
int main(int argc, char** argv) {
  int slots = atoi(argv[1]), touch = atoi(argv[2]); long ops = atol(argv[3]); int extra = argc > 4 ? atoi(argv[4]) : 0; static volatile long hot[64];
  void** s = calloc(slots, sizeof(void*));
  uint64_t x = 88172645463325252ull;
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < ops; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    size_t k = i % slots;
    free(s[k]);
    size_t sz = (64 << 10) + x % ((1 << 20) - (64 << 10) + 1);
    char* p = malloc(sz);
    if (touch == 1 || touch == 3) p[0] = (char)i;
    if (touch == 1 || touch == 2) p[sz - 1] = (char)i;
    for (int j = 0; j < extra; ++j) hot[j & 63] = i;
    s[k] = p;
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double t = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  printf("slots %d touch %d: %.2f Mops/s\n", slots, touch, ops / t / 1e6);
  return 0;
}
