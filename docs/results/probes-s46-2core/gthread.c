// glibc's thread benchmark's shape, from its published description: per thread a working set of
// 1024 slots; each step frees a slot and puts a new block there; sizes 4 B-32 KiB drawn from an
// inverse-square distribution (a table of 8000 drawn once), slots from a table of 4096 drawn once.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#define WS 1024
static unsigned sizes[8000], offs[4096];
static long iters_per_thread;
static unsigned draw(double u) { double lo = 1.0 / 4, hi = 1.0 / 32768; return (unsigned)(1.0 / (lo + (hi - lo) * u)); }
static void* run(void* a) {
  void* ws[WS]; memset(ws, 0, sizeof ws);
  unsigned si = 0, oi = 0;
  for (long k = 0; k < iters_per_thread; k++) {
    si = si + 1 >= 8000 ? 0 : si + 1; oi = oi + 1 >= 4096 ? 0 : oi + 1;
    free(ws[offs[oi]]); ws[offs[oi]] = malloc(sizes[si]);
  }
  for (int i = 0; i < WS; i++) free(ws[i]);
  return 0;
}
int main(int argc, char** argv) {
  int n = atoi(argv[1]); iters_per_thread = atol(argv[2]);
  srand(88);
  for (int i = 0; i < 8000; i++) sizes[i] = draw((double)rand() / RAND_MAX);
  for (int i = 0; i < 4096; i++) offs[i] = rand() % WS;
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t t[64]; for (int i = 0; i < n; i++) pthread_create(&t[i], 0, run, 0);
  for (int i = 0; i < n; i++) pthread_join(t[i], 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
  struct rusage u; getrusage(RUSAGE_SELF, &u);
  printf("%.1f Mops/s  %.3f s  rss %ld kB  minflt %ld\n", n * iters_per_thread / s / 1e6, s, u.ru_maxrss, u.ru_minflt);
  return 0;
}
