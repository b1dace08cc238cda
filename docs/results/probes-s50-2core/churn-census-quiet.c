// Session 50: thread churn at one lane, measured without disturbing the allocator.  A lane thread
// starts short threads one after another (each makes 2000 blocks of 8 B to BIGMAX, touching every
// page, keeps 128, hands 32 on through 1024 shared slots and exits), as the bench's churn does.
// Between workers the lane thread reads strata's statistics (strata_stats_get, no allocation),
// its RSS with open/read on a stack buffer, and for some workers a census of the resident pages
// of every 32 MiB chunk of anonymous memory (mincore, into static buffers).  Session 49's replica
// printed with stdio between workers instead: that printf's and fopen's buffers made the printing
// thread take over the exited worker's segment, so the next worker mapped a new one.
//   cc -O2 -DBIGMAX="(5<<20)" churn-census-quiet.c -lm -lpthread
//   LD_PRELOAD=.../libstrata.so ./a.out [WORKERS]     (report on stdout at the end)
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef BIGMAX
#define BIGMAX (5 << 20)
#endif

typedef struct { uint64_t in_use, committed, cpeak, reserved, mc, fc, rfc, huge, mm, mu, ma, segs, ab, recl, thr, bad; } stats_t;
static void (*stats_get)(stats_t*);

static uint64_t next(uint64_t* x) { *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17; return *x; }
static double unit(uint64_t* x) { return (next(x) >> 11) * (1.0 / 9007199254740992.0); }
static size_t log_uniform(uint64_t* x, double lo, double hi) { return (size_t)exp(log(lo) + unit(x) * (log(hi) - log(lo))); }
static size_t churn_size(uint64_t* x) {
  double u = unit(x);
  if (u < .90) return log_uniform(x, 8, 512);
  if (u < .99) return log_uniform(x, 512, 65536);
  return log_uniform(x, 65536, BIGMAX);
}

static _Atomic(void*) shared[1024];

static void* worker(void* arg) {
  uint64_t x = (uint64_t)arg * 0x9e3779b97f4a7c15ull + 1;
  void* ws[128] = {0};
  for (int i = 0; i < 2000; i++) {
    size_t k = next(&x) % 128, sz = churn_size(&x);
    free(ws[k]);
    char* p = malloc(sz);
    for (size_t j = 0; j < sz; j += 4096) p[j] = (char)i;
    p[sz - 1] = (char)i;
    ws[k] = p;
  }
  for (int i = 0; i < 32; i++) {
    free(atomic_exchange(&shared[next(&x) % 1024], ws[i]));
    ws[i] = 0;
  }
  for (int i = 0; i < 128; i++) free(ws[i]);
  return 0;
}

static long rss_kb(void) {
  char b[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  long n = read(fd, b, sizeof b - 1);
  close(fd);
  b[n > 0 ? n : 0] = 0;
  long size = 0, resident = 0;
  sscanf(b, "%ld %ld", &size, &resident);
  return resident * 4;
}

static char out[1 << 20];
static size_t out_len;
#define say(...) (out_len += snprintf(out + out_len, sizeof out - out_len, __VA_ARGS__))

static void census(int g) {
  static char maps[1 << 18];
  static unsigned char vec[8192];
  int fd = open("/proc/self/maps", O_RDONLY);
  size_t n = 0;
  long r;
  while ((r = read(fd, maps + n, sizeof maps - 1 - n)) > 0) n += r;
  close(fd);
  maps[n] = 0;
  size_t total = 0;
  say("-- census after worker %d\n", g);
  for (char* line = maps; *line;) {
    char* nl = strchr(line, '\n');
    if (!nl) break;
    *nl = 0;
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx", &a, &b) == 2 && !strchr(line, '/') && !strstr(line, "[")) {
      for (unsigned long c = a & ~((32ul << 20) - 1); c < b; c += 32ul << 20) {
        unsigned long lo = c < a ? a : c, hi = c + (32ul << 20) > b ? b : c + (32ul << 20);
        if (mincore((void*)lo, hi - lo, vec) != 0) continue;
        size_t k = 0;
        for (size_t i = 0; i < (hi - lo) / 4096; i++) k += vec[i] & 1;
        if (k > 16) say("  [%lx-%lx) resident %zu KB of %lu KB\n", lo, hi, k * 4, (hi - lo) >> 10);
        total += k;
      }
    }
    line = nl + 1;
  }
  say("  total resident anonymous %zu KB\n", total * 4);
}

static int workers = 96;

static void* lane(void* unused) {
  (void)unused;
  for (int g = 0; g < workers; g++) {
    pthread_t t;
    pthread_create(&t, 0, worker, (void*)(uintptr_t)(g + 1));
    pthread_join(t, 0);
    if (g < 4 || g == 40 || g == workers - 1) census(g);
    stats_t st = {0};
    if (stats_get) stats_get(&st);
    if (g < 12 || g % 8 == 7)
      say("worker %3d: rss %6ld KB, in use %6lu KB, committed %6lu KB, segments %lu, abandoned %lu, adopted %lu\n", g,
          rss_kb(), (unsigned long)(st.in_use >> 10), (unsigned long)(st.committed >> 10), (unsigned long)st.segs,
          (unsigned long)st.ab, (unsigned long)st.recl);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1) workers = atoi(argv[1]);
  stats_get = (void (*)(stats_t*))dlsym(RTLD_DEFAULT, "strata_stats_get");
  pthread_t l;
  pthread_create(&l, 0, lane, 0);
  pthread_join(l, 0);
  fputs(out, stdout);
  return 0;
}
