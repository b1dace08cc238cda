// aggressive: forks as fast as possible while spawners churn threads; child exits at once
// (the FORKDBG validation runs in the child's atfork handler).
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>
#include <stdbool.h>
__attribute__((weak)) bool strata_heap_check(void); __attribute__((weak)) void strata_collect(bool);
static volatile int stop;
static void* shared[256];
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static void* shortlived(void* a) {
  void* ps[300]; for (int i = 0; i < 300; i++) ps[i] = malloc(16 + (i * 97) % 20000);
  pthread_mutex_lock(&m); for (int i = 0; i < 8; i++) { int s = rand() % 256; free(shared[s]); shared[s] = ps[i]; } pthread_mutex_unlock(&m);
  for (int i = 8; i < 300; i++) free(ps[i]);
  return 0;
}
static void* spawner(void* a) { while (!stop) { pthread_t t; pthread_create(&t, 0, shortlived, 0); pthread_join(t, 0); } return 0; }
int main(int argc, char** argv) {
  int bad = 0; int n = atoi(argv[1]), ns = argc > 2 ? atoi(argv[2]) : 2;
  pthread_t s[16]; for (int i = 0; i < ns; i++) pthread_create(&s[i], 0, spawner, 0);
  for (int k = 0; k < n; k++) {
    usleep(rand() % 500);
    pid_t c = fork();
    if (c == 0) { alarm(10); strata_collect(1); _exit(strata_heap_check() ? 0 : 3); }
    int st; waitpid(c, &st, 0); if (!WIFEXITED(st) || WEXITSTATUS(st)) { bad++; fprintf(stderr, "child %d status %x\n", k, st); }
  }
  stop = 1; for (int i = 0; i < ns; i++) pthread_join(s[i], 0); printf("bad %d of %d\n", bad, n);
  return 0;
}
