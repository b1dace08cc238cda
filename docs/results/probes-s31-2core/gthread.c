// A glibc bench-malloc-thread-like loop, written from its description: per thread a working set
// of 1024 slots, sizes 4 B-32 KiB from an inverse-square distribution (8000 precomputed sizes),
// rand_r-driven slot and size choice, free then malloc, for a fixed time.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <stdatomic.h>
#define NSIZES 8000
#define WS 1024
static unsigned sizes[NSIZES];
static atomic_int stop_flag;
static long iters[64];
static unsigned block_size(unsigned r) {
  float e = -2, mn = 4, mx = 32768;
  float a = powf(mn, e + 1), b = powf(mx, e + 1);
  float u = (float)r / RAND_MAX;
  return (unsigned)powf((b - a) * u + a, 1 / (e + 1));
}
static void* worker(void* arg) {
  long id = (long)arg;
  void** ws = calloc(WS, sizeof(void*));
  unsigned off = 0, blk = 0; long n = 0;
  while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
    for (int k = 0; k < 64; k++) {
      unsigned i = off % WS, j = blk % NSIZES;
      off = rand_r(&off); blk = rand_r(&blk);
      free(ws[i]);
      ws[i] = malloc(sizes[j]);
      n++;
    }
  }
  for (int i = 0; i < WS; i++) free(ws[i]);
  free(ws);
  iters[id] = n; return 0;
}
int main(int argc, char** argv) {
  int nt = argc > 1 ? atoi(argv[1]) : 2; double secs = argc > 2 ? atof(argv[2]) : 1;
  for (int i = 0; i < NSIZES; i++) sizes[i] = block_size(rand());
  pthread_t t[64];
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < nt; i++) pthread_create(&t[i], 0, worker, (void*)i);
  struct timespec d = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)}; nanosleep(&d, 0);
  atomic_store(&stop_flag, 1);
  long tot = 0; for (int i = 0; i < nt; i++) { pthread_join(t[i], 0); tot += iters[i]; }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double el = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
  printf("{\"ops_per_sec\":%.1f}\n", tot / el); return 0;
}
