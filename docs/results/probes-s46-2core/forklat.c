// A thread holds a big heap of small blocks and waits; the main thread forks children that exit
// at once (as a fork + exec would): the time of each fork-to-exit round trip.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER; static pthread_cond_t c = PTHREAD_COND_INITIALIZER; static int ready, done;
static long nblocks;
static void* holder(void* a) {
  void** v = malloc(nblocks * sizeof(void*));
  for (long i = 0; i < nblocks; i++) v[i] = malloc(16 + (i % 8) * 16);
  for (long i = 0; i < nblocks; i += 2) free(v[i]);  // half free: pages with free lists
  pthread_mutex_lock(&m); ready = 1; pthread_cond_broadcast(&c); while (!done) pthread_cond_wait(&c, &m); pthread_mutex_unlock(&m);
  return 0;
}
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char** argv) {
  nblocks = atol(argv[1]); int forks = atoi(argv[2]);
  pthread_t t; pthread_create(&t, 0, holder, 0);
  pthread_mutex_lock(&m); while (!ready) pthread_cond_wait(&c, &m); pthread_mutex_unlock(&m);
  double t0 = now();
  for (int i = 0; i < forks; i++) { pid_t p = fork(); if (p == 0) _exit(0); int st; waitpid(p, &st, 0); }
  double t1 = now();
  printf("%ld blocks: %.2f ms a fork round trip\n", nblocks, (t1 - t0) / forks * 1e3);
  pthread_mutex_lock(&m); done = 1; pthread_cond_broadcast(&c); pthread_mutex_unlock(&m); pthread_join(t, 0);
  return 0;
}
