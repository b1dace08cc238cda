// Session 51: bigbuf's shape linked with strata (cc -O2 -I include bbpeak.c -L build/lib -lstrata).
// bigbuf's shape with strata linked: at the committed peak, how much is live, in use by blocks
// (usable sizes) and elsewhere (cached mappings).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <malloc.h>
#include "strata/strata.h"
static uint64_t s = 88172645463325252ull;
static uint64_t nx(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
int main(int argc, char** argv) {
  int ops = argc > 1 ? atoi(argv[1]) : 500;
  void* t[20] = {0}; size_t sz[20] = {0};
  size_t live = 0, usable = 0, best = 0, best_live = 0, best_usable = 0, max_live = 0;
  for (int i = 0; i < 20 + ops; ++i) {
    int k = i < 20 ? i : (int)(nx() % 20);
    if (t[k]) { live -= sz[k]; usable -= malloc_usable_size(t[k]); free(t[k]); }
    size_t n = (5u << 20) + nx() % (20u << 20);
    void* p = malloc(n);
    memset(p, 0, n);
    t[k] = p; sz[k] = n; live += n; usable += malloc_usable_size(p);
    if (live > max_live) max_live = live;
    strata_stats_t st; strata_stats_get(&st);
    if (st.committed_bytes > best) { best = st.committed_bytes; best_live = live; best_usable = usable; }
  }
  printf("peak committed %.1f MiB: live %.1f, usable %.1f (max live %.1f)\n", best / 1048576.0, best_live / 1048576.0, best_usable / 1048576.0, max_live / 1048576.0);
  return 0;
}
