// Per-thread working set of 1024 blocks, sizes 4 B-32 KiB with many more small than large
// (probability ~ 1/size), each iteration frees a random slot and allocates a new block there.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
static int nthreads = 2; static double seconds = 2.0; static long total_ops[64];
static inline unsigned long long xs(unsigned long long* s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static size_t rsize(unsigned long long* s) { double u = (xs(s) >> 11) * (1.0 / 9007199254740992.0); return (size_t)(4.0 * pow(32768.0 / 4.0, u)); }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void* worker(void* arg) {
  long id = (long)arg; unsigned long long s = 0x9E3779B97F4A7C15ull * (id + 1);
  void* ws[1024] = {0}; long ops = 0; double end = now() + seconds;
  while (1) {
    for (int k = 0; k < 4096; k++) { int i = xs(&s) % 1024; free(ws[i]); size_t n = rsize(&s); ws[i] = malloc(n); ((char*)ws[i])[0] = 1; ops++; }
    if (now() >= end) break;
  }
  for (int i = 0; i < 1024; i++) free(ws[i]);
  total_ops[id] = ops; return NULL;
}
int main(int argc, char** argv) {
  if (argc > 1) nthreads = atoi(argv[1]); if (argc > 2) seconds = atof(argv[2]);
  pthread_t t[64]; for (long i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, worker, (void*)i);
  long ops = 0; for (int i = 0; i < nthreads; i++) { pthread_join(t[i], NULL); ops += total_ops[i]; }
  printf("{\"ops_per_sec\":%.1f}\n", ops / seconds); return 0;
}
