// perfcount: counts hardware events over a command and all its threads (perf_event_open,
// inherit), for a machine with a PMU but no perf tool.  Each event is opened on its own (the
// kernel multiplexes when there are more than counters: counts are scaled by enabled/running
// time and the share is printed).
// usage: perfcount CMD ARGS...   prints "event count running%" lines on stderr.
// Raw events (Intel, Sapphire Rapids names): ld_blocks_partial.address_alias 0x0107 (4K aliasing),
// ld_blocks.store_forward 0x0203, machine_clears.memory_ordering 0x02c3,
// dtlb_load_misses.walk_completed 0x0e12, dtlb_store_misses.walk_completed 0x0e13.
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

struct ev {
  const char* name;
  uint32_t type;
  uint64_t config;
};

#define CACHE(id, op, res) ((id) | ((op) << 8) | ((res) << 16))
static const struct ev events[] = {
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
    {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
    {"L1d-load-misses", PERF_TYPE_HW_CACHE,
     CACHE(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS)},
    {"dTLB-load-misses", PERF_TYPE_HW_CACHE,
     CACHE(PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS)},
    {"LLC-load-misses", PERF_TYPE_HW_CACHE,
     CACHE(PERF_COUNT_HW_CACHE_LL, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS)},
    {"4k-alias", PERF_TYPE_RAW, 0x0107},
    {"store-fwd-block", PERF_TYPE_RAW, 0x0203},
    {"mem-order-clears", PERF_TYPE_RAW, 0x02c3},
    {"dtlb-load-walks", PERF_TYPE_RAW, 0x0e12},
    {"dtlb-store-walks", PERF_TYPE_RAW, 0x0e13},
};
enum { n_events = sizeof events / sizeof events[0] };

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: perfcount CMD ARGS...\n");
    return 2;
  }
  int go[2];
  if (pipe(go) != 0) return 2;
  pid_t child = fork();
  if (child == 0) {
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) != 1) _exit(127);
    execvp(argv[1], argv + 1);
    _exit(127);
  }
  close(go[0]);
  int fd[n_events];
  for (int i = 0; i < n_events; ++i) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = events[i].type;
    a.config = events[i].config;
    a.disabled = 1;
    a.enable_on_exec = 1;
    a.inherit = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    fd[i] = (int)syscall(SYS_perf_event_open, &a, child, -1, -1, 0);
    if (fd[i] < 0) fprintf(stderr, "%-18s unavailable: %s\n", events[i].name, strerror(errno));
  }
  if (write(go[1], "x", 1) != 1) return 2;
  int status = 0;
  waitpid(child, &status, 0);
  for (int i = 0; i < n_events; ++i) {
    if (fd[i] < 0) continue;
    uint64_t v[3] = {0, 0, 0};
    if (read(fd[i], v, sizeof v) != sizeof v) continue;
    double scaled = v[2] ? (double)v[0] * (double)v[1] / (double)v[2] : 0;
    fprintf(stderr, "%-18s %16.0f %5.1f%%\n", events[i].name, scaled, v[1] ? 100.0 * v[2] / v[1] : 0);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
