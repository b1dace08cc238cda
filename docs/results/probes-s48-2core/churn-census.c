// ../probes-s47-2core/churn.c with a census at the end: after the lanes are joined (every short
// thread exited, the shared table still full), the resident pages of each 32 MiB-aligned chunk of
// anonymous memory (mincore), to stderr.  ./churn-census LANES THREADS MAXBIG
// churn replica: LANES lanes start THREADS short threads one after another; each allocates 2000
// blocks (90% 8-512 B, 9% 512 B-64 KiB, 1% 64 KiB-MAXBIG, log-uniform), touching every page,
// working set 128, leaves 32 in a shared table of 1024 slots.  ./churn LANES THREADS MAXBIG
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>
static void census(void) {
  FILE* f = fopen("/proc/self/maps", "r"); char line[512]; static unsigned char vec[8192];
  size_t total = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b; char perms[8]; if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3) continue;
    if (strchr(line, '/') || strstr(line, "[")) continue;
    for (unsigned long c = a & ~((32ul << 20) - 1); c < b; c += 32ul << 20) {
      unsigned long lo = c < a ? a : c, hi = c + (32ul << 20) > b ? b : c + (32ul << 20);
      if (mincore((void*)lo, hi - lo, vec) != 0) continue;
      size_t n = 0, pages = (hi - lo) / 4096, first = 0, last = 0; for (size_t i = 0; i < pages; i++) if (vec[i] & 1) { if (!n) first = i; n++; last = i; }
      if (n > 16) fprintf(stderr, "chunk %lx [%lx-%lx) resident %zu KB, span %zu-%zu KB\n", c, lo, hi, n * 4, first * 4, last * 4);
      total += n;
    }
  }
  fprintf(stderr, "total resident anon %zu KB\n", total * 4);
  fclose(f);
}
static void* _Atomic shared[1024];
static int lanes, per_lane; static double maxbig;
static unsigned long long xs(unsigned long long* s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static double unit(unsigned long long* s) { return (xs(s) >> 11) * (1.0 / 9007199254740992.0); }
static size_t lu(unsigned long long* s, double lo, double hi) { return (size_t)(lo * pow(hi / lo, unit(s))); }
static size_t sz(unsigned long long* s) { double u = unit(s); return u < 0.9 ? lu(s, 8, 512) : u < 0.99 ? lu(s, 512, 65536) : lu(s, 65536, maxbig); }
static void* worker(void* a) {
  unsigned long long s = (unsigned long long)(size_t)a * 0x9E3779B97F4A7C15ull + 1; void* ws[128] = {0};
  for (int i = 0; i < 2000; i++) { int k = xs(&s) % 128; free(ws[k]); size_t n = sz(&s); char* p = malloc(n); for (size_t o = 0; o < n; o += 4096) p[o] = 1; p[n - 1] = 1; ws[k] = p; }
  for (int i = 0; i < 32; i++) { void* o = atomic_exchange(&shared[xs(&s) % 1024], ws[i]); free(o); ws[i] = 0; }
  for (int i = 0; i < 128; i++) free(ws[i]);
  return 0;
}
static void* lane(void* a) {
  for (int g = 0; g < per_lane; g++) { pthread_t t; pthread_create(&t, 0, worker, (void*)((size_t)a * 100000 + g + 1)); pthread_join(t, 0); }
  return 0;
}
int main(int argc, char** argv) {
  lanes = atoi(argv[1]); per_lane = atoi(argv[2]) / lanes; maxbig = atof(argv[3]);
  pthread_t t[64]; for (long i = 0; i < lanes; i++) pthread_create(&t[i], 0, lane, (void*)i);
  for (int i = 0; i < lanes; i++) pthread_join(t[i], 0);
  census();
  return 0;
}
