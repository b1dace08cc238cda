// Cold remote frees: thread A allocates B batches of 4096 blocks (mixed sizes 8 B-2 KiB from 17
// classes, or fixed), writing up to 128 B of each; thread B then frees them all (the lines long
// evicted); then A allocates the same again (recycling what B freed).  Prints ns per op of each phase.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define PER 4096
static const long sizes[] = {8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};
static int batches = 100; static long fixed = -1;
static void*** tab;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static unsigned long x = 88172645463325252ul;
static void produce(void) {
  for (int b = 0; b < batches; ++b) {
    tab[b] = malloc(PER * sizeof(void*));
    for (int i = 0; i < PER; ++i) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      long s = fixed > 0 ? fixed : sizes[x % 17];
      tab[b][i] = malloc(s); memset(tab[b][i], i, s > 128 ? 128 : s);
    }
  }
}
static void* consume(void* a) {
  (void)a;
  for (int b = 0; b < batches; ++b) { for (int i = 0; i < PER; ++i) free(tab[b][i]); free(tab[b]); }
  return NULL;
}
int main(int argc, char** argv) {
  if (argc > 1) batches = atoi(argv[1]);
  if (argc > 2) fixed = atol(argv[2]);
  int rounds = argc > 3 ? atoi(argv[3]) : 3;
  tab = malloc(batches * sizeof *tab);
  double n = (double)batches * PER;
  for (int r = 0; r < rounds; ++r) {
    double t0 = now(); produce(); double t1 = now();
    pthread_t t; pthread_create(&t, NULL, consume, NULL); pthread_join(t, NULL); double t2 = now();
    printf("round %d: produce %.1f ns/op, remote free %.1f ns/op\n", r, (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9);
  }
  return 0;
}
