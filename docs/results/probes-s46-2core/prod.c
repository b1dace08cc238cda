// fx.c's workers alone: THREADS threads swap blocks of 1-BIGMAX B (half of them up to 512 B) into
// a shared table of 4096 slots, freeing what they swap out (most frees remote), for SECONDS.
// gcc -O2 -pthread -include malloc.h prod.c -o prod; ./prod THREADS SECONDS [BIGMAX=70000]
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define Q 4096
static void* _Atomic q[Q];
static atomic_int stop;
static atomic_long ops; static unsigned bigmax = 70000;
static void* prod(void* a) {
  unsigned s = (unsigned)(long)a; long n_ops = 0;
  while (!stop) {
    for (int i = 0; i < 64; i++) { s = s * 1103515245 + 12345; size_t n = (s >> 8) % (s & 1 ? bigmax : 512) + 1; void* p = malloc(n); memset(p, 1, n < 64 ? n : 64); void* o = atomic_exchange(&q[(s >> 4) % Q], p); free(o); }
    n_ops += 64;
  }
  ops += n_ops; return 0;
}
int main(int argc, char** argv) {
  int threads = atoi(argv[1]); double secs = atof(argv[2]); if (argc > 3) bigmax = atoi(argv[3]);
  pthread_t t[16]; for (long i = 0; i < threads; i++) pthread_create(&t[i], 0, prod, (void*)(i + 1));
  usleep((useconds_t)(secs * 1e6)); stop = 1;
  for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
  size_t live = 0; for (int j = 0; j < Q; j++) if (q[j]) live += malloc_usable_size(q[j]);
  FILE* f = fopen("/proc/self/status", "r"); char line[256]; long hwm = 0, rss = 0;
  while (fgets(line, sizeof line, f)) { sscanf(line, "VmHWM: %ld", &hwm); sscanf(line, "VmRSS: %ld", &rss); }
  printf("%.1f M ops/s  live %.1f MiB  HWM %.1f MiB  RSS %.1f MiB\n", ops / secs / 1e6, live / 1048576.0, hwm / 1024.0, rss / 1024.0);
  return 0;
}
