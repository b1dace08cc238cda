// The recorder (trace.h).  Call tree of one recorded malloc:
//   malloc (override.cpp, trace::active set) ─ trace::malloc ─ detail::malloc_inline (inlined:
//   no call through the PLT to strata_malloc) ─ record ─ (area full) flush ─ writev (writer thread)
#include "trace/trace.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include "core/alloc.h"
#include "core/init.h"
#include "core/options.h"
#include "core/stats.h"
#include "os/file.h"
#include "strata/strata.h"
#include "trace/format.h"

#define STRATA_TRACE_LIKELY(x) __builtin_expect(!!(x), 1)
#define STRATA_TRACE_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace strata::trace {

bool active = false;

namespace {

// One thread's events: this header, then two areas of area_words words each, of which the thread
// uses the first `fill` words (below), as 32-bit units (format.h).  The thread fills one while a
// writer thread writes the other (at most one area of a thread waits for the writer, so a thread's
// chunks reach the file in its order).
struct buffer {
  // The fast path's fields first, on one line.
  uint32_t* cursor;      // the next free unit
  uint32_t* limit;       // the last place for a long event (long_units) before the next time sample or `end`
  uint32_t* end;
  // The short events' registers (format.h): the address of the last free or realloc_from event
  // of the current chunk, and (below) of its last allocation event of each 16-byte size step
  // under short_size_limit.  A short event costs its thread half the bytes of a long one: under
  // CPython, bytes leaving the thread's core were most of recording's cost (docs/lab.md).
  uint64_t last_free;
  buffer* next;          // the registry of every thread's buffer
  buffer* next_queued;   // the writer's queue; of a buffer its thread is done with, the spare list
  uintptr_t owner;       // the thread pointer of the thread using it; 0 once given back (spare)
  uint64_t* area[2];
  int current;             // the area the thread fills
  std::atomic<bool> queued;  // the other area waits for the writer
  std::atomic<bool> flushing;  // its thread writes or queues an area (enter_flush): at_exit waits
  chunk_header queued_header;
  const uint64_t* queued_words;
  uint64_t base_cycles;  // the cycle counter before the first event of the current chunk
  uint32_t thread, os_tid;
  uint32_t fill;         // words of an area in use: doubled each time the thread waits for the writer

  uint64_t last_sized[short_size_limit >> 4];

  uint64_t* words() noexcept { return area[current]; }
  uint32_t* units() noexcept { return reinterpret_cast<uint32_t*>(area[current]); }
};
// An area is mapped at 1 MiB and used from 256 KiB up: a thread that records slowly faults in
// 512 KiB (faulting in 2 MiB was 1-2 % of a 50 ms CPython run), one that outruns the writer gets
// more room to even out the writer's pace (E1 tiny: 1.1 GB of trace per second).
constexpr size_t area_words = (size_t{1} << 20) / 8;
constexpr uint32_t fill_words_first = (uint32_t{1} << 18) / 8;
// The words by which all threads' areas may grow past fill_words_first, together (both areas of a
// buffer count): 16 MiB, of which a fully grown thread takes 1.5 MiB.  Growth evens out one
// thread's pace against the one writer; once a few threads have it, more only keeps memory
// resident: 200 threads allocating at once each grew to 1 MiB areas and kept 2 MiB resident
// (428 MB against 20 MB untraced), and the writer wrote no faster.
constexpr uint64_t growth_words_max = (uint64_t{16} << 20) / 8;
constexpr size_t header_bytes = 4096;
constexpr size_t buffer_bytes = header_bytes + 2 * area_words * 8;
static_assert(sizeof(buffer) <= header_bytes);
constexpr size_t path_max = 4096;
// The cycle counter costs about 10 ns (rdtsc, 2-core EPYC VM): a time sample is written every
// sample_units units (512 bytes) of a thread's events, not at every event (format.h: how events
// get their times); every 64th event rather than every 16th took about 1 % off a CPython run.
// The place of the next sample is the fast path's limit (buffer::limit): no counter to keep per
// event.
constexpr size_t sample_units = 128;

// A thread that has no buffer (yet, or any more) points at this one, whose cursor is past its
// limit: the fast path's one test sends it to the slow path, with no test for a null buffer.
uint32_t no_units[long_units + 2];
buffer no_buffer{no_units + long_units + 1, no_units, no_units + long_units + 1, 0, nullptr, nullptr, 0, {nullptr, nullptr}, 0,
                 {false}, {false}, {}, nullptr, 0, 0, 0, 0, {}};

// buffer::limit for a thread at `cursor` that writes the next time sample `sample_units` on.
uint32_t* limit_after(uint32_t* cursor, uint32_t* end) noexcept {
  return (cursor + sample_units < end ? cursor + sample_units : end) - long_units;
}

__thread buffer* tl_buffer __attribute__((tls_model("initial-exec"))) = &no_buffer;

int fd = -1;
uint64_t fd_device = 0, fd_inode = 0;  // the trace's file: the program may close fd and reuse the number
std::atomic<bool> writes_failed{false};  // a write failed: nothing more is written
// One write to the file at a time: the writer thread, a thread writing its own chunk (at its exit,
// or with no writer) and at_exit.  A regular file opened O_APPEND takes each writev whole, but a
// FIFO takes over 4 KiB (PIPE_BUF) in pieces when its reader lags, and two chunks written at once
// were interleaved (a thread's exit chunk beside the writer's: a checksum mismatch).
pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
// How many of the recorder's locks the calling thread holds (tl_held), and whether write_lock is
// one (tl_writing).  A signal handler that calls exit() (SIGTERM's, commonly) while its thread
// held one ran at_exit, which took it again, or waited on the writer that needed it: the program
// hung for ever instead of exiting.  A thread writes its own chunk at its exit or with no writer
// (a FIFO whose reader lags holds that write as long as it likes), and fork holds them all
// (before_fork: a signal that arrives during fork runs its handler with them held).
__thread int tl_held __attribute__((tls_model("initial-exec"))) = 0;
__thread bool tl_writing __attribute__((tls_model("initial-exec"))) = false;
// Set by at_exit (the end chunk follows): no thread writes or queues an area after it.  Threads
// keep running through exit(); one whose area filled, or that exited, while at_exit wrote a
// snapshot of its events wrote them again (a copy after the end chunk, or in the middle of
// at_exit's chunk through a FIFO) and emptied its area under at_exit's write.
std::atomic<bool> closing{false};
uint32_t traced_pid = 0;  // the process the open trace belongs to
char path_template[path_max];
pthread_key_t key;
std::atomic_flag registry_lock = ATOMIC_FLAG_INIT;
buffer* registry = nullptr;
// Buffers whose threads are done with them (on_thread_exit), for the next new thread: a program
// that starts threads all its life maps no more buffers than it has threads at once (each kept a
// 4 KiB header resident and 2 MiB of address space for good).  Under registry_lock.
buffer* spare_buffers = nullptr;
std::atomic<uint32_t> next_thread{0};
// Words of growth_words_max that threads' areas hold now: taken in flush, given back when a
// buffer's thread is done with it (its areas were discarded) or in a forked child.
std::atomic<uint64_t> growth_words{0};

// The writer thread and its queue of areas to write (pthread mutex and condition variable: no
// allocation).  It starts when the first area fills: a program that records less than one area
// never pays for a second thread (about 0.3 ms to start and stop on the lab's VM).  Without it
// (not started yet, it could not start, a forked child, after exit) threads write their chunks
// themselves.  It leaves after writer_idle_ms with nothing to write, and the next area to fill
// starts it again: a process ends when its last thread does, and a program whose main thread
// called pthread_exit never ended while the writer waited for work (all signals blocked in it,
// not even SIGTERM ended it).
pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t queue_ready = PTHREAD_COND_INITIALIZER;
buffer *queue_head = nullptr, *queue_tail = nullptr;
std::atomic<bool> writer_running{false};  // written under queue_lock; flush queues only when set
std::atomic<bool> writer_wanted{false};  // set at load and when the writer leaves; taken by the thread that starts it
constexpr long writer_idle_ms = 100;

void lock() noexcept {
  while (registry_lock.test_and_set(std::memory_order_acquire)) {
  }
  tl_held++;
}
void unlock() noexcept {
  tl_held--;
  registry_lock.clear(std::memory_order_release);
}

// A message goes to stderr as the process started with it (core/stats.h), or nowhere: a program
// that closed descriptor 2 and opened a file of its own there got "recording stopped" written
// into its file.
void say(const char* text) noexcept {
  if (int fd = detail::startup_stderr(); fd >= 0) os::print_error(fd, text);
}

void stop(const char* why) noexcept {
  active = false;
  say("strata: STRATA_TRACE: ");
  say(why);
  say(": recording stopped (the trace ends at its last written chunk)\n");
}

// Whether fd is still the trace's file: a program that closed every descriptor (close_range) and
// opened many had its own file at the trace's number, and got the trace's chunks written into it.
bool fd_is_trace() noexcept { return os::file_is(fd, fd_device, fd_inode); }

// A child that fork's handlers did not see (_Fork, a raw clone or fork system call): its memory
// is the parent's, with the parent's descriptor, buffers and writer state, but no writer thread.
// It records nothing (as a forked child without %p): its chunks and end chunk went into the
// parent's file after the parent's (unreadable: data after the end chunk), and its wait for an
// area queued at a writer that does not exist in it never ended.  (`active` stays set: a vfork
// child shares it with its parent.)
bool unseen_child() noexcept { return traced_pid != os::process_id(); }

// Writes a then b to the trace; after the first failure nothing more (a chunk written after one
// cut short, once a full disk had room again, made the whole trace unreadable), with one message.
void write_out(const void* a, size_t na, const void* b, size_t nb) noexcept {
  if (fd < 0 || writes_failed.load(std::memory_order_acquire)) return;
  if (unseen_child()) return;
  const char* why = nullptr;
  if (tl_writing) {
    // A signal handler that allocates interrupted this thread's write: nothing can follow a chunk
    // that may be cut short.
    why = "a signal handler allocated while its thread wrote the trace";
  } else {
    pthread_mutex_lock(&write_lock);
    tl_held++;
    tl_writing = true;
    if (writes_failed.load(std::memory_order_acquire)) {
    } else if (!fd_is_trace()) {
      why = "the program closed or replaced the trace's descriptor";
    } else if (!os::file_write2(fd, a, na, b, nb)) {
      why = strerror(errno);
    }
    tl_writing = false;
    tl_held--;
    pthread_mutex_unlock(&write_lock);
  }
  if (why != nullptr && !writes_failed.exchange(true, std::memory_order_acq_rel)) stop(why);
}

void write_words(chunk_header h, const uint64_t* words) noexcept {
  h.checksum = checksum(words, h.words);
  write_out(&h, sizeof h, words, size_t{h.words} * 8);
}

// The chunk of b's units up to `upto`, in whole words (an odd unit count is rounded down: the
// caller pads it first, or, for a thread still running, leaves its last unit out).
chunk_header header_of(buffer* b, uint32_t* upto, uint32_t flags) noexcept {
  return {chunk_magic, b->thread, static_cast<uint32_t>((upto - b->units()) / 2), flags, b->base_cycles,
          cycles_now(), os::now_ns(), b->os_tid, 0};
}

// The owner pads its area to a whole word.
uint32_t* pad_to_word(uint32_t* c) noexcept {
  if (reinterpret_cast<uintptr_t>(c) & 4) *c++ = 0;
  return c;
}

// Writes the events of b up to `upto` as one chunk, from the calling thread.
void write_chunk(buffer* b, uint32_t* upto, uint32_t flags) noexcept { write_words(header_of(b, upto, flags), b->words()); }

// The thread goes on at the start of its current area, whose first event's time is base_cycles.
void start_area(buffer* b) noexcept {
  b->cursor = b->units();
  b->end = b->cursor + 2 * size_t{b->fill};
  b->last_free = 0;
  for (auto& a : b->last_sized) a = 0;
  b->limit = limit_after(b->cursor, b->end);
  b->base_cycles = cycles_now();
}

void wait_queued(buffer* b) noexcept {
  while (b->queued.load(std::memory_order_acquire)) sched_yield();
}

// A thread about to write or queue its area (flush) or empty it (on_thread_exit) says so first;
// false: at_exit has begun, and the area stays as it is for at_exit to write.  (Sequentially
// consistent on both sides: either at_exit sees `flushing` and waits, or the thread sees
// `closing`.)
bool enter_flush(buffer* b) noexcept {
  b->flushing.store(true, std::memory_order_seq_cst);
  if (!closing.load(std::memory_order_seq_cst)) return true;
  b->flushing.store(false, std::memory_order_release);
  return false;
}
void leave_flush(buffer* b) noexcept { b->flushing.store(false, std::memory_order_release); }

// Whether an area of `fill` words may double (both of its buffer's areas), within
// growth_words_max.
bool take_growth(uint32_t fill) noexcept {
  uint64_t more = 2 * uint64_t{fill};
  if (growth_words.fetch_add(more, std::memory_order_relaxed) + more <= growth_words_max) return true;
  growth_words.fetch_sub(more, std::memory_order_relaxed);
  return false;
}
void give_back_growth(buffer* b) noexcept {
  growth_words.fetch_sub(2 * uint64_t{b->fill - fill_words_first}, std::memory_order_relaxed);
  b->fill = fill_words_first;
}

// The owner's flush: the chunk goes to the writer (or out, `now` or without one) and the
// thread goes on in its other area.
void flush(buffer* b, uint32_t flags, bool now = false) noexcept {
  if (b->queued.load(std::memory_order_acquire) && b->fill < area_words && take_growth(b->fill)) b->fill *= 2;
  wait_queued(b);
  b->cursor = pad_to_word(b->cursor);
  bool queued = false;
  if (!now && writer_running.load(std::memory_order_relaxed)) {
    b->queued_header = header_of(b, b->cursor, flags);
    b->queued_words = b->words();
    pthread_mutex_lock(&queue_lock);
    tl_held++;
    if (writer_running.load(std::memory_order_relaxed)) {  // under the lock: it may have left
      b->queued.store(true, std::memory_order_release);
      b->next_queued = nullptr;
      (queue_tail ? queue_tail->next_queued : queue_head) = b;
      queue_tail = b;
      pthread_cond_signal(&queue_ready);
      queued = true;
    }
    tl_held--;
    pthread_mutex_unlock(&queue_lock);
  }
  if (queued) b->current ^= 1;
  else write_chunk(b, b->cursor, flags);
  start_area(b);
}

void* writer_main(void*) noexcept {
  pthread_mutex_lock(&queue_lock);
  for (;;) {
    while (queue_head == nullptr) {
      timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += writer_idle_ms * 1000000;
      if (until.tv_nsec >= 1000000000) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000;
      }
      if (pthread_cond_timedwait(&queue_ready, &queue_lock, &until) == ETIMEDOUT && queue_head == nullptr) {
        // Idle: the next area to fill starts a writer again (unless the trace has ended).
        writer_running.store(false, std::memory_order_relaxed);
        if (!closing.load(std::memory_order_relaxed)) writer_wanted.store(true, std::memory_order_relaxed);
        pthread_mutex_unlock(&queue_lock);
        return nullptr;
      }
    }
    buffer* b = queue_head;
    queue_head = b->next_queued;
    if (queue_head == nullptr) queue_tail = nullptr;
    pthread_mutex_unlock(&queue_lock);
    write_words(b->queued_header, b->queued_words);
    b->queued.store(false, std::memory_order_release);
    pthread_mutex_lock(&queue_lock);
  }
}

void start_writer() noexcept {
  // Signals go to the program's threads, never to the writer.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  // Running before it starts: it clears the flag (under the lock) when it leaves.
  pthread_mutex_lock(&queue_lock);
  writer_running.store(true, std::memory_order_relaxed);
  pthread_mutex_unlock(&queue_lock);
  pthread_t t;
  if (pthread_create(&t, nullptr, writer_main, nullptr) == 0) {
    pthread_detach(t);
  } else {
    pthread_mutex_lock(&queue_lock);
    writer_running.store(false, std::memory_order_relaxed);
    pthread_mutex_unlock(&queue_lock);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// format.h's runtime_libs: the runtime libraries loaded now, by the file name of their path.
uint64_t runtime_libs_loaded() noexcept {
  uint64_t bits = runtime_libs_known;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) noexcept -> int {
        const char* base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : nullptr;
        base = base ? base + 1 : info->dlpi_name;
        for (size_t i = 0; base && i < std::size(runtime_lib_names); i++)
          if (strncmp(base, runtime_lib_names[i], strlen(runtime_lib_names[i])) == 0)
            *static_cast<uint64_t*>(out) |= uint64_t{1} << i;
        return 0;
      },
      &bits);
  return bits;
}

// Nothing is recorded: strata_options_json lists STRATA_TRACE as unset.
void not_recording() noexcept {
  active = false;
  options::reset(option::trace);
}

// The expanded path: static, not 4 KiB of the stack of the thread that forks (the child's header
// is written on it), which may be a small one.  Written at start-up and in a forked child, each
// with one thread.
char path_expanded[path_max];

bool write_file_header(uint32_t parent) noexcept {
  char* path = path_expanded;
  if (!os::expand_path(path_template, path, sizeof path_expanded)) {
    // A path cut to fit would name another file (or none): say so, as STRATA_STATS_FILE does.
    not_recording();
    say("strata: warning: STRATA_TRACE is too long once expanded (over 4095 bytes): "
        "nothing is recorded\n");
    return false;
  }
  fd = os::file_create(path);
  if (fd < 0) {
    // Nothing was written: say which file could not be made, not where a trace ends.
    not_recording();
    // Another process records into it: without %p, a program that a recording process started
    // (fork and exec; a shell's every command) would empty the file under its parent and mix its
    // chunks with the parent's.  It records nothing, as a forked child does, without a message.
    if (errno == EWOULDBLOCK) return false;
    say("strata: STRATA_TRACE: cannot create ");
    say(path);
    say(": ");
    say(strerror(errno));
    say(": nothing is recorded\n");
    return false;
  }
  writes_failed.store(false, std::memory_order_relaxed);
  if (!os::file_identity(fd, fd_device, fd_inode)) fd_device = fd_inode = 0;
  file_header h = new_file_header();
  h.pid = traced_pid = os::process_id();
  h.parent_pid = parent;
  h.start_cycles = cycles_now();
  h.start_ns = os::now_ns();
  // A forked child's anonymous memory is its parent's heap: no baseline (0: unknown).
  h.start_anon_kib = parent == 0 ? os::resident_anon_kib() : 0;
  h.runtime_libs = runtime_libs_loaded();
  write_out(&h, sizeof h, nullptr, 0);
  return !writes_failed.load(std::memory_order_relaxed);
}

void reset(buffer* b) noexcept {
  b->queued.store(false, std::memory_order_relaxed);
  b->fill = fill_words_first;
  start_area(b);
}

// The events a thread that is gone left in b, written as its exit chunk by the thread that takes
// b over; false: at_exit has begun, and writes them.
bool write_left_events(buffer* b) noexcept {
  if (!enter_flush(b)) return false;
  if (b->cursor != b->units()) flush(b, chunk_thread_exit, true);
  os::discard_plain(reinterpret_cast<char*>(b) + header_bytes, buffer_bytes - header_bytes);
  leave_flush(b);
  give_back_growth(b);
  return true;
}

__attribute__((noinline)) buffer* new_buffer() noexcept {
  // A buffer still held under this thread's pointer is a thread's that is gone (thread pointers
  // are unique among live threads; glibc gives a new thread the stack and TCB of one that
  // exited): it recorded after its last round of key destructors had begun (a destructor that
  // sets its key again allocates in every round), and no round followed to give the buffer back.
  // Each such thread kept its buffer mapped for good (2 MiB of address space, 8 KiB resident).
  // The thread that now has the pointer writes what is left and takes the buffer over, as
  // heap_acquire does the heap.
  const uintptr_t me = detail::thread_id();
  lock();
  buffer* b = registry;
  while (b != nullptr && b->owner != me) b = b->next;
  const bool left = b != nullptr;
  if (!left) {
    b = spare_buffers;
    if (b != nullptr) spare_buffers = b->next_queued;
  }
  unlock();
  if (left && !write_left_events(b)) return nullptr;
  const bool fresh = b == nullptr;
  if (fresh) {
    b = static_cast<buffer*>(os::map_plain(buffer_bytes));
    if (b == nullptr) {
      stop("no memory for a thread's buffer");
      return nullptr;
    }
    b->area[0] = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(b) + header_bytes);
    b->area[1] = b->area[0] + area_words;
  }
  // A new thread number (numbers are never reused), and the buffer reset under the lock: at_exit
  // reads every registered buffer (a spare one is registered already, and empty).
  lock();
  b->thread = next_thread.fetch_add(1, std::memory_order_relaxed);
  b->os_tid = os::thread_os_id();
  b->owner = me;
  reset(b);
  if (fresh) {
    b->next = registry;
    registry = b;
  }
  unlock();
  tl_buffer = b;  // before pthread_setspecific, which may allocate
  pthread_setspecific(key, b);
  return b;
}

// The calling thread's buffer, created or emptied, or nullptr (recording stopped).
buffer* make_room_inner(buffer* b) noexcept {
  if (!active || unseen_child()) return nullptr;
  if (b == &no_buffer) return new_buffer();
  if (!enter_flush(b)) return nullptr;
  if (writer_wanted.exchange(false, std::memory_order_relaxed)) {
    // This area goes out from here; what pthread_create allocates is recorded in the next.
    flush(b, 0, true);
    start_writer();
  } else {
    flush(b, 0);
  }
  leave_flush(b);
  return active ? b : nullptr;
}

// make_room_inner with the program's errno kept: its system calls run inside the program's
// malloc and free.  A write to a pipe that a signal interrupted (a handler installed without
// SA_RESTART) is retried, and free returned with errno EINTR (glibc's free keeps errno, and
// posix_memalign leaves it alone: README); a failure that stops recording left its errno too.
buffer* make_room(buffer* b) noexcept {
  int saved = errno;
  b = make_room_inner(b);
  errno = saved;
  return b;
}

// A long event at c: padded to a word, then the event's word and its extension if any.
// (Words are stored with memcpy: the area is read as units and as words.)
uint32_t* put_word(uint32_t* c, uint64_t w) noexcept {
  memcpy(c, &w, sizeof w);
  return c + 2;
}
uint32_t* put_long(uint32_t* c, op o, uint64_t address, uint64_t size, unsigned align_log, bool returned) noexcept {
  c = pad_to_word(c);
  if (STRATA_TRACE_LIKELY(size <= inline_size_max && o != op_aligned))
    return put_word(c, returned ? event_word_returned(o, address, size) : event_word(o, address, size));
  c = put_word(c, event_word(o, address, size_in_extension));
  return put_word(c, extension_word(size, align_log));
}

// Writes the event at b's cursor: one unit when it fits a short form (format.h), else long.
inline void put_event(buffer* b, op o, const void* p, uint64_t size, unsigned align_log) noexcept {
  auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t* c = b->cursor;
  // A block the program passes (free, realloc's old block) may be anything; one the allocator
  // returned fits the address field as it is.
  bool returned = o != op_free && o != op_free_sized && o != op_realloc_from;
  if (is_sized_short(o)) {
    if (STRATA_TRACE_LIKELY(size < short_size_limit)) {
      uint64_t& last = b->last_sized[size >> 4];
      uint64_t d = address - last + short_sized_bias;
      last = address;
      if (STRATA_TRACE_LIKELY((d & ~short_sized_field) == 0)) {
        *c = short_sized_unit(o, size, d);
        b->cursor = c + 1;
        return;
      }
    }
  } else if (is_free_short(o)) {
    uint64_t d = address - b->last_free + short_free_bias;
    b->last_free = address;
    if (STRATA_TRACE_LIKELY((d & ~short_free_field) == 0)) {
      *c = short_free_unit(o, d);
      b->cursor = c + 1;
      return;
    }
  }
  b->cursor = put_long(c, o, address, size, align_log, returned);
}

// `room`: the units an event may take, long_units (padding, a word and its extension), or twice
// that for realloc's first event, which leaves room for its second in the same chunk (the pair
// must not be split across chunks).
// The slow path: no buffer yet, the area full (it goes out) or a time sample due (written before
// the event: a free's sample, taken after the free was recorded, is after it; a malloc's, taken
// before its pointer reached the program, is before anything the program does with the block).
// Returns p, so that the fast path's callers tail-call it and keep no registers across a call.
template <int room>
__attribute__((noinline)) void* record_slow(op o, void* p, uint64_t size, unsigned align_log) noexcept {
  buffer* b = tl_buffer;
  if (b == &no_buffer || b->cursor + room + time_units > b->end) {
    b = make_room(b);
    if (b == nullptr) return p;
  } else {
    b->cursor = put_word(pad_to_word(b->cursor), time_word(cycles_now()));
    b->limit = limit_after(b->cursor, b->end);
  }
  put_event(b, o, p, size, align_log);
  return p;
}

// Records one event if the thread's area has room and no time sample is due (buffer::limit):
// a few instructions.  False: record_slow's turn.
template <int room = long_units>
inline bool record_fast(op o, void* p, uint64_t size, unsigned align_log = 0) noexcept {
  buffer* b = tl_buffer;
  if (STRATA_TRACE_UNLIKELY(b->cursor + (room - long_units) > b->limit)) return false;
  put_event(b, o, p, size, align_log);
  return true;
}

// Records one event and returns p.
template <int room = long_units>
inline void* record(op o, void* p, uint64_t size, unsigned align_log = 0) noexcept {
  if (STRATA_TRACE_LIKELY(record_fast<room>(o, p, size, align_log))) return p;
  return record_slow<room>(o, p, size, align_log);
}

// free's slow path records and frees, so that free's fast path makes tail calls only (no frame).
__attribute__((noinline)) void record_slow_and_free(op o, void* p, uint64_t size) noexcept {
  detail::free_inline(record_slow<long_units>(o, p, size, 0));
}

unsigned log2_of(size_t alignment) noexcept {
  return alignment ? static_cast<unsigned>(__builtin_ctzll(alignment)) : 0;
}

// pthread key destructor: the exiting thread's events go out.  Destructors that run after this
// one may still allocate: the key is set again, so the next round writes what they recorded.
void on_thread_exit(void* arg) noexcept {
  auto* b = static_cast<buffer*>(arg);
  if (b == &no_buffer || unseen_child()) return;
  if (b->cursor == b->units()) {
    // Nothing since the last round: the thread is done with b, and a later thread may take it.
    // Were this thread to record again (a destructor after this one), it gets a buffer of its
    // own, not this one: tl_buffer no longer points here.
    tl_buffer = &no_buffer;
    give_back_growth(b);
    lock();
    b->owner = 0;
    b->next_queued = spare_buffers;
    spare_buffers = b;
    unlock();
    return;
  }
  if (!enter_flush(b)) return;  // exit() has begun: at_exit writes what the area holds
  flush(b, chunk_thread_exit, true);
  os::discard_plain(reinterpret_cast<char*>(b) + header_bytes, buffer_bytes - header_bytes);
  leave_flush(b);
  pthread_setspecific(key, b);
}

// Another thread's events up to `upto`, for at_exit: its thread may still be running, or be gone,
// having recorded in its last round of key destructors with no thread started since to take its
// buffer over (write_left_events).  An odd count ends in a whole short event, written padded from
// a copy (the unit after it may be its running thread's to write): the chunk was cut to whole
// words, and 4 threads that ended before exit(), none started after them, each lost its last free.
void write_snapshot(buffer* b, uint32_t* upto) noexcept {
  const size_t units = static_cast<size_t>(upto - b->units());
  const size_t bytes = (units + 1) * sizeof(uint32_t);
  auto* copy = units % 2 != 0 ? static_cast<uint32_t*>(os::map_plain(bytes)) : nullptr;
  if (copy == nullptr) {
    if (units >= 2) write_chunk(b, upto, 0);  // (no memory: without the odd unit)
    return;
  }
  memcpy(copy, b->units(), units * sizeof(uint32_t));
  copy[units] = 0;  // padding
  write_words(header_of(b, upto + 1, 0), reinterpret_cast<const uint64_t*>(copy));
  os::unmap_plain(copy, bytes);
}

void at_exit() noexcept {
  if (!active || fd < 0 || unseen_child()) return;
  if (tl_held != 0) {
    // exit() from a signal handler that interrupted this thread inside the recorder: the trace
    // ends at its last whole chunk (the one being written may be cut short).
    if (!writes_failed.exchange(true, std::memory_order_acq_rel))
      stop("a signal handler called exit() inside the recorder (writing, queueing an area or forking)");
    return;
  }
  active = false;
  closing.store(true, std::memory_order_seq_cst);
  writer_wanted.store(false, std::memory_order_relaxed);
  writer_running.store(false, std::memory_order_relaxed);
  // Other threads may still be running: their chunks are written from a snapshot of their
  // cursors, once no flush of theirs is under way (none starts now), and their buffers are left
  // as they are.  Each waits for its area at the writer.  (The calling thread's own flag may be
  // set: a signal handler that called exit() inside its flush.)
  lock();
  for (buffer* b = registry; b; b = b->next) {
    if (b != tl_buffer)
      while (b->flushing.load(std::memory_order_acquire)) sched_yield();
    wait_queued(b);
    if (b == tl_buffer) {
      flush(b, 0, true);
    } else {
      write_snapshot(b, __atomic_load_n(&b->cursor, __ATOMIC_ACQUIRE));
    }
  }
  unlock();
  // The end chunk's base_cycles carries the program's file-backed resident KiB (format.h).
  chunk_header end{chunk_magic, 0, 0, chunk_end, os::resident_file_kib(), cycles_now(), os::now_ns(),
                   os::thread_os_id(), 0};
  write_out(&end, sizeof end, nullptr, 0);
  if (fd_is_trace()) os::file_close(fd);  // not the program's file at that number
  fd = -1;
}

void before_fork() noexcept {
  lock();
  pthread_mutex_lock(&queue_lock);
  pthread_mutex_lock(&write_lock);
}
void after_fork_parent() noexcept {
  pthread_mutex_unlock(&write_lock);
  pthread_mutex_unlock(&queue_lock);
  unlock();
}
// The child: a new trace (%p) holding only the forking thread, whose buffer's events are the
// parent's to write; or, without %p, no recording (the parent's file is the parent's).
void after_fork_child() noexcept {
  buffer* mine = tl_buffer;
  buffer* others = registry;
  registry = nullptr;
  spare_buffers = nullptr;  // unmapped below with the other threads' buffers
  growth_words.store(0, std::memory_order_relaxed);  // the only buffer left is reset below
  // No writer here: the child's threads write their own chunks.
  queue_head = queue_tail = nullptr;
  writer_wanted.store(false, std::memory_order_relaxed);
  writer_running.store(false, std::memory_order_relaxed);
  pthread_mutex_unlock(&write_lock);
  pthread_mutex_unlock(&queue_lock);
  unlock();
  if (!active) return;
  if (fd_is_trace()) os::file_close(fd);  // the parent's (its lock stays with the parent's descriptor)
  fd = -1;
  if (!os::path_has_process_id(path_template)) {
    not_recording();
    return;
  }
  for (buffer* b = others; b;) {
    buffer* next = b->next;
    if (b != mine) os::unmap_plain(b, buffer_bytes);
    b = next;
  }
  next_thread.store(0, std::memory_order_relaxed);
  if (!write_file_header(traced_pid)) return;
  if (mine != &no_buffer) {
    mine->thread = next_thread.fetch_add(1, std::memory_order_relaxed);
    mine->os_tid = os::thread_os_id();
    mine->next = nullptr;
    registry = mine;
    reset(mine);
  }
}

__attribute__((constructor(102))) void init_at_load() noexcept {
  // The options (read once, usually by the allocator's own constructor, 101): unset when empty,
  // or too long (the options' check said so already).
  detail::global_init();
  const char* path = options::get_text(option::trace);
  if (path == nullptr) return;
  strcpy(path_template, path);
  if (pthread_key_create(&key, on_thread_exit) != 0) {
    stop("no thread key");
    options::reset(option::trace);
    return;
  }
  if (!write_file_header(0)) return;
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  atexit(at_exit);
  // quick_exit runs only at_quick_exit's handlers: a program leaving through it (exit status and
  // output as exit's) lost every thread's last areas, and its trace read as killed or crashed.
  at_quick_exit(at_exit);
  writer_wanted.store(true, std::memory_order_relaxed);
  active = true;
  options::applied(option::trace);
}

}  // namespace

void* malloc(size_t size) noexcept {
  return record(op_malloc, detail::malloc_inline(size), size);
}

void* calloc(size_t count, size_t size) noexcept {
  void* p = strata_calloc(count, size);
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) bytes = extension_size_mask;
  return record(op_calloc, p, bytes);
}

void* realloc(void* p, size_t size) noexcept {
  if (p == nullptr) return malloc(size);
  p = record<2 * long_units>(op_realloc_from, p, 0);
  return record(op_realloc, strata_realloc(p, size), size);
}

int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  int r = strata_posix_memalign(out, alignment, size);
  record(op_aligned, r == 0 ? *out : nullptr, size, log2_of(alignment));  // refused: a failed allocation
  return r;
}

void* aligned_alloc(size_t alignment, size_t size) noexcept {
  void* p = strata_aligned_alloc(alignment, size);
  return record(op_aligned, p, size, log2_of(alignment));
}

void* memalign(size_t alignment, size_t size) noexcept {
  void* p = strata_memalign(alignment, size);
  return record(op_aligned, p, size, log2_of(alignment));
}

void* valloc(size_t size) noexcept {
  void* p = strata_valloc(size);
  return record(op_aligned, p, size, log2_of(4096));
}

void* pvalloc(size_t size) noexcept {
  void* p = strata_pvalloc(size);
  return record(op_aligned, p, size, log2_of(4096));
}

void free(void* p) noexcept {
  if (p != nullptr && !record_fast(op_free, p, 0)) return record_slow_and_free(op_free, p, 0);
  detail::free_inline(p);
}

void free_sized(void* p, size_t size) noexcept {
  if (p != nullptr && !record_fast(op_free_sized, p, size)) return record_slow_and_free(op_free_sized, p, size);
  detail::free_inline(p);
}

}  // namespace strata::trace
