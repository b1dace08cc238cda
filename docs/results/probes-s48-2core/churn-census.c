// ../probes-s47-2core/churn.c with a census at the end: after the lanes are joined (every short
// thread exited, the shared table still full), the resident pages of each 32 MiB-aligned chunk of
// anonymous memory (mincore), to stderr.  ./churn-census LANES THREADS MAXBIG
// (gcc -O2 -pthread churn-census.c -lm: churn.c is included, its main renamed.)
#define main churn_main
#include "../probes-s47-2core/churn.c"
#undef main
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

int main(int argc, char** argv) {
  int rc = churn_main(argc, argv);  // returns once the lanes are joined; the table is not freed
  census();
  return rc;
}
