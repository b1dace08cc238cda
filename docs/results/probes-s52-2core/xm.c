// Producer/consumer in batches, xmalloc-test's shape: P producer threads only allocate (batches of
// 4096 blocks and the batch itself), P consumer threads only free; a shared LIFO of batches under
// one mutex, at most 100 batches queued.  Prints frees per second after a fixed run time.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#define PER_BATCH 4096
struct batch { struct batch* next; void* obj[PER_BATCH]; };
static struct batch* stack; static int depth; static int depth_max = 100;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static atomic_int stop;
static double tprod[64], tcons[64]; static long nprod[64], ncons[64];
static long size_arg = 64;
static const long sizes[] = {8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};
struct alignas_counter { _Alignas(64) long n; };
static struct alignas_counter freed[64];

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static void* producer(void* arg) {
  unsigned long x = 88172645463325252ul ^ (unsigned long)(size_t)arg;
  while (!atomic_load(&stop)) {
    double a0 = now();
    struct batch* b = malloc(sizeof *b);
    for (int i = 0; i < PER_BATCH; ++i) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      long s = size_arg > 0 ? size_arg : sizes[x % (sizeof sizes / sizeof *sizes)];
      b->obj[i] = malloc(s);
      memset(b->obj[i], i & 255, s > 128 ? 128 : s);
    }
    tprod[(size_t)arg] += now() - a0; nprod[(size_t)arg]++;
    pthread_mutex_lock(&mu);
    while (depth >= depth_max && !atomic_load(&stop)) pthread_cond_wait(&not_full, &mu);
    b->next = stack; stack = b; depth++;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

static void* consumer(void* arg) {
  long id = (long)(size_t)arg;
  while (!atomic_load(&stop)) {
    pthread_mutex_lock(&mu);
    while (!stack && !atomic_load(&stop)) pthread_cond_wait(&not_empty, &mu);
    struct batch* b = stack;
    if (b) { stack = b->next; depth--; pthread_cond_signal(&not_full); }
    pthread_mutex_unlock(&mu);
    if (!b) break;
    double c0 = now();
    for (int i = 0; i < PER_BATCH; ++i) free(b->obj[i]);
    free(b);
    tcons[id] += now() - c0; ncons[id]++;
    freed[id].n += PER_BATCH;
  }
  return NULL;
}

int main(int argc, char** argv) {
  int workers = argc > 1 ? atoi(argv[1]) : 1;
  double secs = argc > 2 ? atof(argv[2]) : 2.0;
  if (argc > 3) size_arg = atol(argv[3]);
  if (argc > 4) depth_max = atoi(argv[4]);
  pthread_t t[128];
  double t0 = now();
  int prefill = getenv("PREFILL") != NULL;
  for (long i = 0; i < workers; ++i) pthread_create(&t[2 * i + 1], NULL, producer, (void*)i);
  if (prefill) for (;;) { pthread_mutex_lock(&mu); int d = depth; pthread_mutex_unlock(&mu); if (d >= depth_max) break; struct timespec d1 = {0, 100000}; nanosleep(&d1, NULL); }
  t0 = now();
  for (long i = 0; i < workers; ++i) pthread_create(&t[2 * i], NULL, consumer, (void*)i);
  int trace_depth = getenv("TRACE_DEPTH") != NULL; double last = 0;
  while (now() - t0 < secs) {
    struct timespec d = {0, 1000000}; nanosleep(&d, NULL);
    if (trace_depth && now() - last > 0.05) { last = now(); fprintf(stderr, "%.2f:%d/%ld ", now() - t0, depth, nprod[0]); }
  }
  atomic_store(&stop, 1);
  pthread_mutex_lock(&mu); pthread_cond_broadcast(&not_empty); pthread_cond_broadcast(&not_full); pthread_mutex_unlock(&mu);
  for (int i = 0; i < 2 * workers; ++i) pthread_join(t[i], NULL);
  double el = now() - t0;
  long total = 0;
  for (int i = 0; i < workers; ++i) total += freed[i].n;
  struct rusage ru; getrusage(RUSAGE_SELF, &ru);
  printf("%.2f Mfree/s rss %ld MB minflt %ld cpu %.2f\n", total / el * 1e-6, ru.ru_maxrss / 1024, ru.ru_minflt,
         ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6);
  fprintf(stderr, "produce %.1f us/batch (%ld), consume %.1f us/batch (%ld), depth at end %d\n", tprod[0]/nprod[0]*1e6, nprod[0], tcons[0]/ncons[0]*1e6, ncons[0], depth);
  while (stack) { struct batch* b = stack; stack = b->next; for (int i = 0; i < PER_BATCH; ++i) free(b->obj[i]); free(b); }
  return 0;
}
