// Thread-churn stress in the shape of mimalloc's test-stress (mimalloc-bench "mstress"): ITER
// rounds each start THREADS threads; each thread allocates power-of-two word counts (8 B-128 B
// mostly, retained ones to 512 B; 1 % x100, 0.1 % x1000, 0.01 % x10000: up to 5 MiB), writes
// every word, frees two thirds at random, swaps a quarter through a process-wide table (so blocks
// outlive their thread), then frees what it holds; between rounds half the table is freed.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>

static int threads = 2, scale = 50, iters = 25;
#define SLOTS 1000
static _Atomic(uintptr_t*) table[SLOTS];
static const uintptr_t key = 0x9e3779b97f4a7c15u;

static uintptr_t next(uintptr_t* s) {  // splitmix64 step
  uintptr_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
static int percent(uintptr_t* s, int p) { return next(s) % 100 < (uintptr_t)p; }

static uintptr_t* make(size_t words, uintptr_t* s) {
  if (percent(s, 1)) words *= percent(s, 1) ? 10000 : percent(s, 10) ? 1000 : 100;
  uintptr_t* p = malloc(words * sizeof *p);
  for (size_t i = 0; i < words; ++i) p[i] = (words - i) ^ key;
  return p;
}
static void drop(uintptr_t* p) {
  if (p) {
    size_t words = p[0] ^ key;
    for (size_t i = 0; i < words; ++i)
      if ((p[i] ^ key) != words - i) { fprintf(stderr, "corrupt block %p\n", (void*)p); abort(); }
  }
  free(p);
}

static void* work(void* arg) {
  uintptr_t tid = (uintptr_t)arg, s = tid * 7919 + 42;
  size_t allocs = 100 * (size_t)scale * (tid % 8 + 1), keep = allocs / 2;
  uintptr_t** data = NULL; size_t cap = 0, top = 0;
  uintptr_t** kept = malloc(keep * sizeof *kept); size_t ktop = 0;
  while (allocs > 0 || keep > 0) {
    if (keep == 0 || (percent(&s, 50) && allocs > 0)) {
      --allocs;
      if (top >= cap) { cap += 100000; data = realloc(data, cap * sizeof *data); }
      data[top++] = make((size_t)1 << (next(&s) % 5), &s);
    } else {
      kept[ktop++] = make((size_t)1 << (next(&s) % 7), &s);
      --keep;
    }
    if (percent(&s, 66) && top > 0) { size_t i = next(&s) % top; drop(data[i]); data[i] = NULL; }
    if (percent(&s, 25) && top > 0) {
      size_t i = next(&s) % top, j = next(&s) % SLOTS;
      data[i] = atomic_exchange(&table[j], data[i]);
    }
  }
  for (size_t i = 0; i < ktop; ++i) drop(kept[i]);
  for (size_t i = 0; i < top; ++i) drop(data[i]);
  free(kept); free(data);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) threads = atoi(argv[1]);
  if (argc > 2) scale = atoi(argv[2]);
  if (argc > 3) iters = atoi(argv[3]);
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  uintptr_t s = 1;
  pthread_t t[256];
  for (int n = 0; n < iters; ++n) {
    for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, work, (void*)(uintptr_t)(n * threads + i));
    for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
    for (int i = 0; i < SLOTS; ++i)
      if (n + 1 == iters || percent(&s, 50)) drop(atomic_exchange(&table[i], NULL));
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  struct rusage ru; getrusage(RUSAGE_SELF, &ru);
  printf("%.3f s rss %ld MB minflt %ld cpu %.2f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9, ru.ru_maxrss / 1024,
         ru.ru_minflt, ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6);
  return 0;
}
