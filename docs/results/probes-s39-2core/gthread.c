// glibc bench-malloc-thread's shape (probes-s39 README section 3): gthread THREADS SECONDS [UNIFORM]
// UNIFORM 0: sizes 4 B-32 KiB, inverse square (the benchmark's); 1: uniform.  Prints {"ops_per_sec":...}.
// gcc -O2 -pthread -o gthread gthread.c -lm
// glibc bench-malloc-thread's shape: per thread a working set of 1024 blocks, sizes 4 B-32 KiB
// with an inverse-square distribution, a random block replaced at each step; no writes.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define WS 1024
#define NSIZES 8000
static double secs;
static unsigned long long done[64];
static int uniform;
static unsigned get_block_size(unsigned r) {
  if (uniform) return 4 + r % 32765;
  const float e = -2, mn = 4, mx = 32768;
  float minp = powf(mn, e + 1), maxp = powf(mx, e + 1);
  float x = (float)r / RAND_MAX;
  return (unsigned)powf((maxp - minp) * x + minp, 1 / (e + 1));
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void* worker(void* arg) {
  long id = (long)arg;
  unsigned seed = 17 + id;
  unsigned sizes[NSIZES];
  for (int i = 0; i < NSIZES; i++) sizes[i] = get_block_size(rand_r(&seed));
  void* ptrs[WS] = {0};
  unsigned long long n = 0;
  double end = now() + secs;
  unsigned r = 99 + id;
  for (;;) {
    for (int k = 0; k < 1024; k++) {
      r = r * 1103515245 + 12345;
      unsigned idx = (r >> 8) % WS;
      r = r * 1103515245 + 12345;
      free(ptrs[idx]);
      ptrs[idx] = malloc(sizes[(r >> 8) % NSIZES]);
    }
    n += 1024;
    if (now() > end) break;
  }
  for (int i = 0; i < WS; i++) free(ptrs[i]);
  done[id] = n;
  return 0;
}
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  secs = argc > 2 ? atof(argv[2]) : 3;
  uniform = argc > 3 && atoi(argv[3]);
  pthread_t t[64];
  double t0 = now();
  for (long i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, (void*)i);
  unsigned long long total = 0;
  for (int i = 0; i < threads; i++) { pthread_join(t[i], 0); total += done[i]; }
  printf("{\"ops_per_sec\":%.1f}\n", total / (now() - t0));
}
