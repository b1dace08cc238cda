// Files, processes and clocks for the allocation recorder (src/trace/): what it needs from the
// kernel without going through malloc.  Every call here is a raw system call or a vDSO read, so
// it is safe inside malloc itself.
#pragma once
#include <cstddef>
#include <cstdint>
#include <signal.h>

namespace strata::os {

// open(path, flags, 0644) with cancellation held off, retried while a signal interrupts it
// (EINTR: a FIFO waiting for its reader).  -1 on failure (errno set).
int file_open(const char* path, int flags) noexcept;
// Creates (or truncates, if it is a regular file: a FIFO or /dev/null is taken as it is) `path`
// for appending, close-on-exec, on a descriptor number >= 900 so
// that programs which close or dup2 over the low descriptors leave it alone (never on 0, 1 or 2
// where RLIMIT_NOFILE allows no such number: EMFILE where none above 2 is free either), and
// holds a lock on it (flock) while open.  -1 on failure (errno set; EWOULDBLOCK: another process
// holds it).
int file_create(const char* path) noexcept;
// A write the kernel refuses for the file's sake also raises a signal in the writing thread whose
// default action ends the process: SIGPIPE (a FIFO or pipe whose reader has gone: the compressor
// a trace was streamed to exited, `program 2>&1 | head`) and SIGXFSZ (past RLIMIT_FSIZE).  strata
// writes from inside the program's malloc and from its exit handler, where a failed write must be
// a warning, not the end of the program (rc -13, -25, or 141 in a shell).  While a hold lasts both
// are blocked in the calling thread; one that a write raised (pending now, not before) is taken
// back before the mask is restored, so that the program's own handler does not see it either.
class file_signals_hold {
 public:
  file_signals_hold() noexcept;
  ~file_signals_hold();
  file_signals_hold(const file_signals_hold&) = delete;
  file_signals_hold& operator=(const file_signals_hold&) = delete;

 private:
  sigset_t both_, old_, pending_before_;
};

// Writes a then b (a's `na` bytes, then b's `nb`) in one write, so that with O_APPEND two
// threads' writes never interleave; retries short writes and EINTR.  false on an error (errno
// set); an error never raises SIGPIPE or SIGXFSZ in the program (a FIFO's reader gone, a file
// size limit reached).
bool file_write2(int fd, const void* a, size_t na, const void* b, size_t nb) noexcept;
void file_close(int fd) noexcept;
// A close-on-exec copy of fd on a descriptor number >= 900 (file_create's reason), or -1.
int file_dup_high(int fd) noexcept;
// The device and inode of the file open at fd (false if none is).
bool file_identity(int fd, uint64_t& device, uint64_t& inode) noexcept;
// Whether fd is still open on the file file_identity named (device, inode): a program may close a
// descriptor and reuse its number for a file of its own.
bool file_is(int fd, uint64_t device, uint64_t inode) noexcept;
// Writes a message to fd, stderr or a copy of it (no formatting, no allocation); an error never
// raises SIGPIPE in the program.
void print_error(int fd, const char* text) noexcept;

// Anonymous read-write memory that no allocator statistic counts (the recorder's buffers).
// nullptr on failure.
void* map_plain(size_t size) noexcept;
void unmap_plain(void* p, size_t size) noexcept;
// Gives [p, p+size) back to the kernel; the range reads as zero afterwards.
void discard_plain(void* p, size_t size) noexcept;

// The process's file-backed and shared resident memory in KiB (RssFile + RssShmem of
// /proc/self/status: its program, libraries and mapped files), or 0 when it cannot be read.
uint64_t resident_file_kib() noexcept;
// The process's anonymous resident memory in KiB (RssAnon), or 0 when it cannot be read.
uint64_t resident_anon_kib() noexcept;

uint32_t process_id() noexcept;
uint32_t thread_os_id() noexcept;
// A path option's template (STRATA_TRACE, STRATA_STATS_FILE) with each "%p" replaced by the
// process id and each "%%" by "%", written to out with its NUL.  False when it does not fit in
// cap bytes.
bool expand_path(const char* in, char* out, size_t cap) noexcept;
// Whether expand_path puts the process id into the path ("%p", not the "%p" of "%%p").
bool path_has_process_id(const char* in) noexcept;
// Nanoseconds of CLOCK_MONOTONIC (vDSO).
uint64_t now_ns() noexcept;

}  // namespace strata::os
