#include "os/file.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <initializer_list>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "os/os.h"

namespace strata::os {

// Each call below that makes a cancellation point's system call (open, close, write, writev,
// read) holds cancellation off (os::no_cancel): the recorder calls them from inside malloc.

int file_open(const char* path, int flags) noexcept {
  no_cancel hold;
  // A FIFO's open waits for its reader, and a signal whose handler was installed without
  // SA_RESTART ends that wait with EINTR: the file was reported as one that cannot be opened.
  int fd;
  do fd = open(path, flags, 0644);
  while (fd < 0 && errno == EINTR);
  return fd;
}

int file_create(const char* path) noexcept {
  no_cancel hold;
  int fd = file_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC);
  if (fd < 0) return -1;
  // Emptied only once this process holds it: another one may be writing it (a program that a
  // process recording into the same path started).
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    close(fd);
    errno = EWOULDBLOCK;
    return -1;
  }
  // Only a regular file is emptied: a FIFO (the trace streamed to a reader) or /dev/null cannot
  // be, and refusing them (EINVAL) recorded nothing.
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  int high = file_dup_high(fd);
  // Under RLIMIT_NOFILE of 900 or less there is no such number, and the file stays where open put
  // it, but not on a standard descriptor the program started without (`program >&-`): what it
  // wrote to stdout went into the trace (unreadable after), where it fails with EBADF otherwise.
  if (high < 0 && fd <= 2) high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (high >= 0) {
    close(fd);
    fd = high;
  } else if (fd <= 2) {
    // No number above 2 either (RLIMIT_NOFILE of 3, or every one taken): refused rather than
    // left on the standard descriptor, where the program's output went into the file.
    close(fd);
    errno = EMFILE;
    return -1;
  }
  return fd;
}

int file_dup_high(int fd) noexcept { return fcntl(fd, F_DUPFD_CLOEXEC, 900); }

file_signals_hold::file_signals_hold() noexcept {
  sigemptyset(&both_);
  sigaddset(&both_, SIGPIPE);
  sigaddset(&both_, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &both_, &old_);
  if (sigpending(&pending_before_) != 0) sigfillset(&pending_before_);  // takes none back
}

file_signals_hold::~file_signals_hold() {
  int saved = errno;  // the failed write's, for the caller's message
  sigset_t now;
  if (sigpending(&now) == 0) {
    for (int sig : {SIGPIPE, SIGXFSZ}) {
      if (!sigismember(&now, sig) || sigismember(&pending_before_, sig)) continue;
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      timespec zero{};
      while (sigtimedwait(&one, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  errno = saved;
}

bool file_write2(int fd, const void* a, size_t na, const void* b, size_t nb) noexcept {
  no_cancel hold;
  file_signals_hold signals;
  iovec v[2] = {{const_cast<void*>(a), na}, {const_cast<void*>(b), nb}};
  int first = 0;
  while (first < 2) {
    ssize_t n = writev(fd, v + first, 2 - first);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    // A short write (a full disk, a signal): go on from where it stopped.
    auto done = static_cast<size_t>(n);
    while (first < 2 && done >= v[first].iov_len) done -= v[first++].iov_len;
    if (first < 2) {
      v[first].iov_base = static_cast<char*>(v[first].iov_base) + done;
      v[first].iov_len -= done;
    }
  }
  return true;
}

void file_close(int fd) noexcept {
  no_cancel hold;
  close(fd);
}

bool file_identity(int fd, uint64_t& device, uint64_t& inode) noexcept {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  device = st.st_dev;
  inode = st.st_ino;
  return true;
}

bool file_is(int fd, uint64_t device, uint64_t inode) noexcept {
  uint64_t d, i;
  return fd >= 0 && file_identity(fd, d, i) && d == device && i == inode;
}

void print_error(int fd, const char* text) noexcept {
  // To a stderr whose reader has gone (`program 2>&1 | head`), lost, not a SIGPIPE that ends the
  // program inside its malloc (the recorder's "recording stopped"); a write that a signal
  // interrupted (EINTR, or short on a full pipe) goes on.  file_write2 does both.
  int saved = errno;
  file_write2(fd, text, strlen(text), nullptr, 0);
  errno = saved;
}

void* map_plain(size_t size) noexcept {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap_plain(void* p, size_t size) noexcept { munmap(p, size); }
void discard_plain(void* p, size_t size) noexcept { madvise(p, size, MADV_DONTNEED); }

namespace {
// The file is read into a mapping, not onto the stack: the recorder reads it in exit(), on the
// stack of whichever thread calls it, and 8 KiB there was a SIGSEGV at exit for a thread made with
// PTHREAD_STACK_MIN (16 KiB) once it was 2 KiB deep (glibc's exit() lets it go 7 KiB deep).  Two
// system calls more, twice in a recording process's life.
uint64_t status_kib(std::initializer_list<const char*> keys) noexcept {
  constexpr size_t cap = 8192;
  char* buf = static_cast<char*>(map_plain(cap));
  if (buf == nullptr) return 0;
  no_cancel hold;
  uint64_t kib = 0;
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, cap - 1);
  if (fd >= 0) close(fd);
  if (n > 0) {
    buf[n] = 0;
    for (const char* key : keys)
      if (const char* at = strstr(buf, key)) kib += strtoull(at + strlen(key), nullptr, 10);
  }
  unmap_plain(buf, cap);
  return kib;
}
}  // namespace

uint64_t resident_file_kib() noexcept { return status_kib({"RssFile:", "RssShmem:"}); }
uint64_t resident_anon_kib() noexcept { return status_kib({"RssAnon:"}); }

uint32_t process_id() noexcept { return static_cast<uint32_t>(getpid()); }
uint32_t thread_os_id() noexcept { return static_cast<uint32_t>(syscall(SYS_gettid)); }

bool expand_path(const char* in, char* out, size_t cap) noexcept {
  size_t o = 0;
  for (const char* s = in; *s; s++) {
    char digits[12];  // reversed
    int n = 0;
    if (s[0] == '%' && s[1] == 'p') {
      for (uint32_t pid = process_id(); pid || n == 0; pid /= 10) digits[n++] = char('0' + pid % 10);
      s++;
    } else {
      digits[n++] = *s;
      if (s[0] == '%' && s[1] == '%') s++;
    }
    if (o + static_cast<size_t>(n) >= cap) return false;
    while (n) out[o++] = digits[--n];
  }
  if (cap == 0) return false;
  out[o] = 0;
  return true;
}

bool path_has_process_id(const char* in) noexcept {
  for (const char* s = in; *s; s++) {
    if (s[0] != '%') continue;
    if (s[1] == 'p') return true;
    if (s[1] == '%') s++;
  }
  return false;
}
uint64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace strata::os
