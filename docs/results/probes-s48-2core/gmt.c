// A replica of the shape of glibc's benchtests/bench-malloc-thread (written here from its
// description): each thread keeps 1024 blocks and replaces a random one, sizes 4 B-32 KiB with an
// inverse-square distribution; fixed iterations per thread.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define WS 1024
#define NSIZES 8000
static unsigned sizes[NSIZES];
static unsigned idx[WS * 7 + 1];
static long iters;
static unsigned block_size(double r) {
  double e = -2, mn = 4, mx = 32768, mnp = pow(mn, e + 1), mxp = pow(mx, e + 1);
  return (unsigned)pow((mxp - mnp) * r + mnp, 1 / (e + 1));
}
static void* run(void* a) {
  void* arr[WS] = {0};
  unsigned si = (unsigned)(long)a * 977, ii = (unsigned)(long)a * 131;
  for (long i = 0; i < iters; i++) {
    unsigned k = idx[ii++ % (WS * 7 + 1)];
    free(arr[k]);
    arr[k] = malloc(sizes[si++ % NSIZES]);
  }
  for (int k = 0; k < WS; k++) free(arr[k]);
  return 0;
}
int main(int argc, char** argv) {
  int threads = atoi(argv[1]); iters = atol(argv[2]);
  srand(88);
  for (int i = 0; i < NSIZES; i++) sizes[i] = block_size((double)rand() / RAND_MAX);
  for (int i = 0; i < WS * 7 + 1; i++) idx[i] = rand() % WS;
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t th[64];
  for (long t = 0; t < threads; t++) pthread_create(&th[t], 0, run, (void*)t);
  for (int t = 0; t < threads; t++) pthread_join(th[t], 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
  printf("%.1f Mops/s\n", threads * iters / s / 1e6);
}
