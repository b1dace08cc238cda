#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char** argv) {
  int L = atoi(argv[1]); size_t sz = argc > 2 ? atoi(argv[2]) : 16; long ops = argc > 3 ? atol(argv[3]) : 20000000;
  void** a = malloc(sizeof(void*) * L);
  for (int i = 0; i < L; i++) a[i] = malloc(sz);
  unsigned x = 12345;
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < ops; i++) { x = x * 1103515245u + 12345u; int k = (x >> 8) % L; free(a[k]); a[k] = malloc(sz); *(char*)a[k] = 1; }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%d %.2f\n", L, ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / ops);
  return 0;
}
