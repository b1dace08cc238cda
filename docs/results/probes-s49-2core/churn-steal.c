// Session 49: thread churn (short threads one after another, blocks of 8 B up to BIGMAX, 32 a
// thread handed on through 1024 shared slots), the main thread printing strata statistics between
// workers (its stdout buffer takes a span).  cc -O2 -DBIGMAX="(5<<20)" churn-steal.c -lm -lpthread
// ./a.out THREADS [quiet]  (under LD_PRELOAD; quiet: main prints only after the last worker).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef struct { uint64_t in_use, committed, cpeak, reserved, mc, fc, rfc, huge, mm, mu, ma, segs, ab, recl, thr, bad; } st_t;
static void (*stats_get)(st_t*);
static uint64_t s;
static uint64_t nx(uint64_t* x) { *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17; return *x; }
static double unit(uint64_t* x) { return (nx(x) >> 11) * (1.0 / 9007199254740992.0); }
static size_t logu(uint64_t* x, double lo, double hi) { return (size_t)exp(log(lo) + unit(x) * (log(hi) - log(lo))); }
static size_t csize(uint64_t* x) { double u = unit(x); if (u < .9) return logu(x, 8, 512); if (u < .99) return logu(x, 512, 65536); return logu(x, 65536, BIGMAX); }
static _Atomic(void*) shared[1024];
static void* worker(void* arg) {
  uint64_t x = (uint64_t)arg * 0x9e3779b97f4a7c15ull + 1;
  void* ws[128] = {0};
  for (int i = 0; i < 2000; i++) {
    size_t k = nx(&x) % 128, sz = csize(&x);
    free(ws[k]);
    char* p = malloc(sz);
    for (size_t j = 0; j < sz; j += 4096) p[j] = i;
    p[sz - 1] = i;
    ws[k] = p;
  }
  for (int i = 0; i < 32; i++) { void* old = atomic_exchange(&shared[nx(&x) % 1024], ws[i]); free(old); ws[i] = 0; }
  for (int i = 0; i < 128; i++) free(ws[i]);
  return 0;
}
static long rss_kb(void) { long a, b; FILE* f = fopen("/proc/self/statm", "r"); fscanf(f, "%ld %ld", &a, &b); fclose(f); return b * 4; }
int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 96, quiet = argc > 2;
  stats_get = dlsym(RTLD_DEFAULT, "strata_stats_get");
  for (int g = 0; g < n; g++) {
    pthread_t t; pthread_create(&t, 0, worker, (void*)(uintptr_t)(g + 1)); pthread_join(t, 0);
    if (quiet && g != n - 1) continue;
    if (stats_get && (g < 20 || g % 8 == 7 || g == n - 1)) { st_t st; stats_get(&st);
      printf("g%3d rss %6ld KB  in_use %6lu KB committed %6lu KB reserved %6lu KB segs %lu huge %lu mmap %lu munmap %lu madv %lu\n", g, rss_kb(), st.in_use >> 10, st.committed >> 10, st.reserved >> 10, st.segs, st.huge, st.mm, st.mu, st.ma); }
    else if (g % 8 == 7) printf("g%3d rss %6ld KB\n", g, rss_kb());
  }
  return 0;
}
