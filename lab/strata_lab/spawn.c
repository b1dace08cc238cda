/* strata-lab-spawn: runs one sample's command as its own child and reports that child's exact
 * resource usage.
 *
 * Why a launcher: Linux carries the high-water RSS of the memory image a process had before
 * exec() into its ru_maxrss, so a workload spawned straight from the lab (a Python process with
 * numpy loaded, ~100 MiB) would report at least the lab's own size as its peak.  This launcher is
 * small, and the workload it forks and execs inherits only that small image.
 *
 * usage: strata-lab-spawn PREFIX COMMAND [ARGS...]
 *   writes PREFIX.pid    "<pid of the command>\n" as soon as it is started
 *          PREFIX.rusage "<wait status> <maxrss KiB> <utime s> <stime s> <nvcsw> <nivcsw>
 *                         <minflt> <majflt>\n" after it ended
 *   exits with the command's status (128+signal when it was killed by a signal).
 * STRATA_LAB_SPAWN_PRELOAD=LIB in its environment becomes the command's LD_PRELOAD, so that the
 * launcher itself never runs under the allocator being measured.
 * If the lab dies (even by SIGKILL) the launcher and then the command are killed too
 * (PR_SET_PDEATHSIG), so no workload outlives the run that started it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int write_file(const char* prefix, const char* suffix, const char* text) {
  char path[4096], tmp[4096];
  snprintf(path, sizeof path, "%s%s", prefix, suffix);
  snprintf(tmp, sizeof tmp, "%s%s.tmp", prefix, suffix);
  FILE* f = fopen(tmp, "w");
  if (!f) return -1;
  fputs(text, f);
  if (fclose(f) != 0) return -1;
  return rename(tmp, path); /* the lab never sees half a file */
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: strata-lab-spawn PREFIX COMMAND [ARGS...]\n");
    return 125;
  }
  pid_t lab = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != lab) return 125; /* the lab died before the line above */
  pid_t self = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("strata-lab-spawn: fork");
    return 125;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* kept across exec: dies with the launcher */
    if (getppid() != self) _exit(125);
    const char* preload = getenv("STRATA_LAB_SPAWN_PRELOAD");
    if (preload && *preload) setenv("LD_PRELOAD", preload, 1);
    unsetenv("STRATA_LAB_SPAWN_PRELOAD");
    execvp(argv[2], argv + 2);
    fprintf(stderr, "strata-lab-spawn: cannot run %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  char buf[256];
  snprintf(buf, sizeof buf, "%d\n", (int)pid);
  write_file(argv[1], ".pid", buf);
  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("strata-lab-spawn: wait4");
      return 125;
    }
  }
  snprintf(buf, sizeof buf, "%d %ld %.6f %.6f %ld %ld %ld %ld\n", status, ru.ru_maxrss,
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
           ru.ru_nvcsw, ru.ru_nivcsw, ru.ru_minflt, ru.ru_majflt);
  write_file(argv[1], ".rusage", buf);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 125;
}
