// Replays an allocation trace (STRATA_TRACE, docs/trace-format.md) under whatever malloc the
// process has (LD_PRELOAD), one replay thread per recorded thread.  Prints one JSON object.
//
//   strata-bench-replay TRACE            replay; time, ops/s and the replay's peak RSS
//   strata-bench-replay --check TRACE    read and check the trace only: its counts, no replay
//   strata-bench-replay --smoke          write a small trace of known content, replay it, check
//
// Before the replay the trace is turned into per-thread operations on numbered blocks: events
// are merged across threads in cycle-counter order, and each address is followed from its
// allocation to its free, so a block freed by another thread than the one that allocated it
// carries a wait: the freeing replay thread waits until the allocating one has replayed the
// allocation.  Every block is written once per 4 KiB (and its last byte) when allocated.
//
// The replay's own tables (the operations, one pointer per block) are mapped outside malloc and
// fully resident; peak_rss_kib is the process's peak during the replay (VmHWM, reset before it
// starts) less those tables, with the recorded program's file-backed resident memory at exit
// (code, libraries, mapped files) in place of the replayer's (the preloaded allocator's pages
// are kept, as a live run has them).
#include <fcntl.h>
#include <link.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "proc_status.hpp"
#include "trace/format.h"

namespace {

using namespace strata::trace;

[[noreturn]] void fail(const std::string& what) {
  fprintf(stderr, "strata-bench-replay: %s\n", what.c_str());
  exit(2);
}

// Memory outside the allocator under test: the trace and the replay's tables.
template <typename T>
struct mapped {
  T* p = nullptr;
  size_t n = 0;  // elements
  void map(size_t count) {
    n = count;
    if (count == 0) return;
    void* m = mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail("out of memory for the replay's tables");
    p = static_cast<T*>(m);
  }
  void unmap() {
    if (p) munmap(p, bytes());
    p = nullptr;
    n = 0;
  }
  size_t bytes() const { return (n * sizeof(T) + 4095) & ~size_t{4095}; }
  T& operator[](size_t i) { return p[i]; }
};

// ---- reading ---------------------------------------------------------------------------------

// A chunk: its header in the file and its entries decoded (format.h decode_units).
struct chunk_ref {
  const chunk_header* h;
  const uint64_t* words;
  uint32_t n;  // entries in words
};

struct trace_file {
  mapped<char> data;
  size_t size = 0, valid_bytes = 0;
  file_header header{};
  // Each recorded thread's chunks, in the order of the recorder's thread numbers (0, the first
  // thread that allocated, first); numbers without chunks take no place (a number is not
  // checksummed: one flipped bit made the replayer start 131 072 threads).
  std::vector<std::vector<chunk_ref>> threads;
  // The chunks' entries, decoded (chunk_ref::words), outside the allocator under test like the
  // file's bytes: a unit gives at most one entry, so a quarter of the file's bytes bounds them.
  mapped<uint64_t> entries;  // `words` of them in use
  bool complete = false;                        // the end chunk was seen
  uint64_t program_file_kib = 0;                // the program's file-backed resident KiB at exit
  uint64_t last_cycles = 0, last_ns = 0;        // the latest chunk's clock pair (with the header's)
  // Whether the two clock pairs give a counter rate a machine can have (format.h): the times are
  // not checksummed, and a header's start time of 0 paced a replay for the machine's uptime.
  // And whether every chunk's times agree with them: its base cycles, time samples and flush
  // cycles in order and after the start, its flush pair on the rate's line (chunk headers are not
  // checksummed: one flipped bit in a base_cycles paced a 50 ms replay for 7 minutes).
  bool times_consistent = true;
  struct chunk_clock {
    uint64_t flush_cycles, flush_ns;
  };
  std::vector<chunk_clock> clocks;
  bool clock_plausible() const {
    return times_consistent && last_cycles > header.start_cycles && last_ns > header.start_ns &&
           clock_rate_plausible(last_cycles - header.start_cycles, last_ns - header.start_ns) &&
           std::all_of(clocks.begin(), clocks.end(), [this](const chunk_clock& c) {
             return chunk_clock_agrees(header.start_cycles, header.start_ns, last_cycles, last_ns, c.flush_cycles,
                                       c.flush_ns);
           });
  }
  std::string truncated;                        // why the trace stops early, if it does
  uint64_t words = 0, chunks = 0;  // words: the chunks' entries
  uint64_t samples = 0;            // of them, time samples (the merge steps over them)
};

void read_trace(const char* path, trace_file& t) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::string(path) + ": " + strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) fail(std::string(path) + ": " + strerror(errno));
  t.size = static_cast<size_t>(st.st_size);
  t.data.map(t.size + 1);
  for (size_t got = 0; got < t.size;) {
    ssize_t n = read(fd, t.data.p + got, t.size - got);
    if (n <= 0) fail(std::string(path) + ": read failed");
    got += static_cast<size_t>(n);
  }
  close(fd);
  t.entries.map(t.size / 4 + 1);
  auto where = [&](size_t off) { return std::string(path) + ": byte " + std::to_string(off) + ": "; };
  if (t.size < sizeof(file_header) || memcmp(t.data.p, file_magic, sizeof file_magic) != 0)
    fail(std::string(path) + ": not a strata trace (no STRTRACE header)");
  memcpy(&t.header, t.data.p, sizeof t.header);
  if (t.header.version < format_version_min || t.header.version > format_version)
    fail(std::string(path) + ": trace format version " + std::to_string(t.header.version) +
         ", this replayer reads versions " + std::to_string(format_version_min) + " to " +
         std::to_string(format_version));
  if (t.header.header_bytes != sizeof(file_header) || t.header.chunk_header_bytes != sizeof(chunk_header) ||
      t.header.word_bytes != 8)
    fail(where(8) + "unexpected header, chunk header or event sizes");
  size_t off = sizeof(file_header);
  std::map<uint32_t, std::vector<chunk_ref>> by_number;
  while (off < t.size) {
    if (t.size - off < sizeof(chunk_header)) {
      t.truncated = "a chunk header cut short at byte " + std::to_string(off);
      break;
    }
    auto* h = reinterpret_cast<const chunk_header*>(t.data.p + off);
    if (h->magic != chunk_magic) fail(where(off) + "corrupt trace: no chunk starts here");
    size_t payload = size_t{h->words} * 8;
    if (t.size - off - sizeof(chunk_header) < payload) {
      t.truncated = "a chunk cut short at byte " + std::to_string(off);
      break;
    }
    auto* w = reinterpret_cast<const uint64_t*>(t.data.p + off + sizeof(chunk_header));
    if (h->flush_cycles > t.last_cycles) {
      t.last_cycles = h->flush_cycles;
      t.last_ns = h->flush_ns;
    }
    if (checksum(w, h->words) != h->checksum) fail(where(off) + "corrupt trace: chunk checksum mismatch");
    // (The end chunk's base_cycles is a size: format.h.)
    if (!(h->flags & chunk_end) && (h->base_cycles < t.header.start_cycles || h->flush_cycles < h->base_cycles))
      t.times_consistent = false;
    t.clocks.push_back({h->flush_cycles, h->flush_ns});
    // The chunk's entries: version 1's words as they are, version 2's units decoded.
    uint64_t* entries = t.entries.p + t.words;
    uint32_t count = 0;
    // unit: where the entry starts, in 32-bit units (version 2's entries are not its words: an
    // extension after a time sample named a byte past the entry's, 16 bytes on after 4 short events).
    auto add = [&](uint64_t e, uint64_t unit) {
      unsigned o = word_op(e);
      bool extends = count > 0 && word_op(entries[count - 1]) < op_time;
      size_t at = off + sizeof(chunk_header) + 4 * static_cast<size_t>(unit);
      if (o == op_extension && !extends) fail(where(at) + "corrupt trace: an extension (word 15) that follows no event");
      if (o == 0 || (o > op_time && o != op_extension)) fail(where(at) + "corrupt trace: unknown word " + std::to_string(o));
      if (o == op_time && (time_cycles(e) < h->base_cycles || time_cycles(e) > h->flush_cycles))
        t.times_consistent = false;
      t.samples += o == op_time;
      entries[count++] = e;
    };
    if (t.header.version == 1) {
      for (uint32_t i = 0; i < h->words; i++) add(w[i], 2 * uint64_t{i});
    } else if (long bad = decode_units(w, h->words, add); bad >= 0) {
      fail(where(off + sizeof(chunk_header) + 4 * static_cast<size_t>(bad)) + "corrupt trace: unknown unit " +
           std::to_string(reinterpret_cast<const uint32_t*>(w)[bad] & op_mask));
    }
    off += sizeof(chunk_header) + payload;
    t.chunks++;
    if (h->flags & chunk_end) {
      t.complete = true;
      t.program_file_kib = h->base_cycles;
      if (off != t.size) fail(where(off) + "corrupt trace: data after the end chunk");
      break;
    }
    t.words += count;
    by_number[h->thread].push_back({h, entries, count});
  }
  for (auto& [number, chunks] : by_number) t.threads.push_back(std::move(chunks));
  t.valid_bytes = off;
  if (!t.complete && t.truncated.empty())
    t.truncated =
        "no end chunk: the program did not exit normally (killed, crashed or _exit), or recording "
        "stopped early (a write error, its descriptor closed, no memory: its stderr says which)";
}

// ---- turning events into replay operations --------------------------------------------------

constexpr uint32_t none = 0xffffffffu;

enum kind : uint8_t { k_nop, k_malloc, k_calloc, k_aligned, k_realloc, k_free, k_free_sized };

struct replay_op {
  uint64_t size : 40, kind : 4, align_log : 6, wait : 1, late : 1;  // late: a late match's wait (build_plan)
  uint32_t obj;  // the block allocated (malloc & co, realloc's new block) or freed
  uint32_t old;  // realloc's old block
};
static_assert(sizeof(replay_op) == 16);

// Per recorded thread: a cursor over its events (during the merge), then its operations.
struct thread_state {
  size_t chunk = 0, event = 0;
  uint64_t cycles = 0;  // the cycle counter of the event at the cursor
  // The first time sample after the cursor's event in chunk `after_chunk` (its entries' count:
  // none, the chunk's flush): merge_key's, found once per sample, not once per free (a chunk of
  // 160 000 frees and no sample took 11 s to read, 1 M of them 7 minutes).
  size_t after_chunk = SIZE_MAX;
  uint32_t after_at = 0;
  uint64_t pending_old = none, pending_old_addr = 0, pending_old_key = 0;
  mapped<replay_op> ops;
  size_t n_ops = 0;
  size_t n_nops = 0;  // of them, frees left unmatched (k_nop: a place a later allocation may match)
  // --pace: from operation `op` on, the thread's events happened at least `ns` after the trace
  // began (its time samples: format.h).
  struct pace_point {
    uint64_t op, ns;
  };
  mapped<pace_point> pace;
  size_t n_pace = 0;
  uint64_t paced_cycles = 0;
  double busy_seconds = 0;  // --pace: the time spent replaying, waits for the recorded times left out
};

// Open addressing from an address to its live blocks, oldest first (a free and the next
// allocation of the same address may come swapped between two time samples: a free ends the
// oldest, unless its own thread has a block there: below).  Later blocks at one address are
// chained through `next`, in the order they were made (block numbers rise).
struct live_map {
  mapped<uint64_t> keys;  // address + 1 (0: empty)
  mapped<uint32_t> vals;  // the oldest live block there
  mapped<uint32_t>* next = nullptr;
  size_t count = 0;
  static size_t slot(uint64_t a, size_t mask) { return (a * 0x9e3779b97f4a7c15ull >> 20) & mask; }
  void init(size_t cap) {
    keys.map(cap);
    vals.map(cap);
  }
  size_t find(uint64_t a) {
    size_t mask = keys.n - 1;
    size_t i = slot(a, mask);
    while (keys[i] != 0 && keys[i] != a + 1) i = (i + 1) & mask;
    return i;
  }
  bool put(uint64_t a, uint32_t v) {  // true when a block was live there already
    (*next)[v] = none;
    size_t i = find(a);
    if (keys[i] != 0) {
      uint32_t at = vals[i];
      while ((*next)[at] != none) at = (*next)[at];
      (*next)[at] = v;
      return true;
    }
    if ((count + 1) * 2 > keys.n) {
      grow();
      i = find(a);
    }
    keys[i] = a + 1;
    vals[i] = v;
    count++;
    return false;
  }
  // Removes and returns the block at a that a free by `thread` ends (owner: each block's thread),
  // or none: the latest of the thread's own blocks there, else the oldest.  The thread's order is
  // exact: its free follows its own allocation, so whatever it frees was made no earlier, and an
  // older block there is one whose free another thread's merge has not reached yet (its time is
  // the sample after it: a thread that went idle after freeing has its frees timed at its next
  // sample or exit).  Ending that one instead shifted every later pair at the address by one
  // block, each waiting for the allocation before its own: 4 243 of 320 000 frees of 16 threads
  // freeing each other's blocks paired with a block of another size.
  uint32_t take(uint64_t a, uint32_t thread, const uint32_t* owner) {
    size_t mask = keys.n - 1;
    size_t i = find(a);
    if (keys[i] == 0) return none;
    uint32_t v = vals[i];
    uint32_t before_mine = none;  // the block before the thread's latest, when that is not the oldest
    for (uint32_t at = v; (*next)[at] != none; at = (*next)[at])
      if (owner[(*next)[at]] == thread) before_mine = at;
    if (before_mine != none) {
      uint32_t mine = (*next)[before_mine];
      (*next)[before_mine] = (*next)[mine];
      return mine;
    }
    if ((*next)[v] != none) {
      vals[i] = (*next)[v];
      return v;
    }
    keys[i] = 0;
    count--;
    // Backward-shift deletion keeps every probe chain unbroken.
    for (size_t j = (i + 1) & mask; keys[j] != 0; j = (j + 1) & mask) {
      size_t home = slot(keys[j] - 1, mask);
      if (((j - home) & mask) >= ((j - i) & mask)) {
        keys[i] = keys[j];
        vals[i] = vals[j];
        keys[j] = 0;
        i = j;
      }
    }
    return v;
  }
  // Puts a block taken back in its place, by its number (a realloc that failed: its block lives on).
  void put_back(uint64_t a, uint32_t v) {
    size_t i = find(a);
    if (keys[i] == 0) {
      put(a, v);
    } else if (v < vals[i]) {
      (*next)[v] = vals[i];
      vals[i] = v;
    } else {
      uint32_t at = vals[i];
      while ((*next)[at] != none && (*next)[at] < v) at = (*next)[at];
      (*next)[v] = (*next)[at];
      (*next)[at] = v;
    }
  }
  void grow() {
    mapped<uint64_t> k = keys;
    mapped<uint32_t> v = vals;
    keys = {};
    vals = {};
    init(k.n * 2);
    for (size_t i = 0; i < k.n; i++)
      if (k[i]) {
        size_t j = find(k[i] - 1);
        keys[j] = k[i];
        vals[j] = v[i];
      }
    k.unmap();
    v.unmap();
  }
};

struct plan {
  std::vector<thread_state> threads;
  uint32_t objects = 0;
  uint32_t late_matches = 0;  // frees matched with an allocation merged after them (build_plan)
  uint64_t counts[9] = {};
  uint64_t unmatched_frees = 0, cross_thread_frees = 0, reused_live = 0, failed = 0;
};

bool cursor_valid(trace_file& t, size_t th, thread_state& s) {
  auto& cs = t.threads[th];
  while (s.chunk < cs.size() && s.event >= cs[s.chunk].n) {
    s.chunk++;
    s.event = 0;
    if (s.chunk < cs.size()) s.cycles = cs[s.chunk].h->base_cycles;  // each chunk restarts from its base
  }
  return s.chunk < cs.size();
}

// Moves the cursor onto the next event that is not op_time, taking up the samples it passes;
// false at the end.
bool advance_to_event(trace_file& t, size_t th, thread_state& s) {
  for (;;) {
    if (!cursor_valid(t, th, s)) return false;
    uint64_t w = t.threads[th][s.chunk].words[s.event];
    if (word_op(w) == op_time) {
      s.cycles = time_cycles(w);
      s.event++;
      continue;
    }
    return true;
  }
}

bool is_free(unsigned o) { return o == op_free || o == op_free_sized || o == op_realloc_from; }

// The merge order of the event at the cursor: an allocation at the sample before it, a free at
// the sample after it (or the chunk's flush); at one time, allocations first.
uint64_t merge_key(trace_file& t, size_t th, thread_state& s) {
  const chunk_ref& c = t.threads[th][s.chunk];
  if (!is_free(word_op(c.words[s.event]))) return s.cycles * 2;
  if (s.after_chunk != s.chunk || s.after_at <= s.event) {
    uint32_t i = static_cast<uint32_t>(s.event) + 1;
    while (i < c.n && word_op(c.words[i]) != op_time) i++;
    s.after_chunk = s.chunk;
    s.after_at = i;
  }
  uint64_t after = s.after_at < c.n ? time_cycles(c.words[s.after_at]) : c.h->flush_cycles;
  return after * 2 + 1;
}

// A replay thread waits at a free (or realloc) until its block has been allocated.  The merge
// makes every free after its allocation, except the late matches (build_plan): were one to close
// a cycle of waits (a trace with events lost), the replay would never end.  Replays the plan's
// waits without allocating and, where every unfinished thread waits, unmatches a late match's
// wait on a cycle of waits (its block is then not freed, as for an unmatched free).  Only late
// matches close cycles (every other wait is for a block merged before it); the first waiting
// thread's wait was unmatched before, usually one that waited behind the cycle, not on it: 16
// threads freeing each other's blocks had 147 of 320 000 frees unmatched from 26 late matches
// (now 2), blocks their replay never freed.
void unblock(plan& pl) {
  const size_t nt = pl.threads.size();
  mapped<uint8_t> made;
  made.map(pl.objects + 1);
  mapped<uint32_t> maker;  // the thread whose operation makes each block
  maker.map(pl.objects + 1);
  for (size_t th = 0; th < nt; th++)
    for (size_t i = 0; i < pl.threads[th].n_ops; i++) {
      const replay_op& r = pl.threads[th].ops[i];
      if (r.kind != k_free && r.kind != k_free_sized && r.obj != none) maker[r.obj] = static_cast<uint32_t>(th);
    }
  std::vector<size_t> at(nt, 0);
  std::vector<size_t> visited(nt, 0);  // the step of the walk below that reached each thread (0: none)
  auto needs = [&](const replay_op& r) -> uint32_t {
    if (r.kind == k_free || r.kind == k_free_sized) return r.obj;
    if (r.kind == k_realloc) return r.old;
    return none;
  };
  for (;;) {
    bool progress = false, left = false;
    for (size_t th = 0; th < nt; th++) {
      thread_state& s = pl.threads[th];
      size_t& i = at[th];
      for (; i < s.n_ops; i++) {
        uint32_t need = needs(s.ops[i]);
        if (need != none && !made[need]) break;
        if (s.ops[i].kind != k_free && s.ops[i].kind != k_free_sized && s.ops[i].obj != none) made[s.ops[i].obj] = 1;
        progress = true;
      }
      left |= i < s.n_ops;
    }
    if (!left) break;
    if (progress) continue;
    // Every unfinished thread waits for a block that an unfinished thread makes: from the first,
    // the waits lead round a cycle.  Its first late match is unmatched (its first wait if none).
    size_t th = 0, step = 0;
    while (at[th] == pl.threads[th].n_ops) th++;
    std::fill(visited.begin(), visited.end(), 0);
    while (visited[th] == 0) {
      visited[th] = ++step;
      th = maker[needs(pl.threads[th].ops[at[th]])];
    }
    size_t cut = th;
    for (size_t on = th, first = visited[th]; visited[on] >= first;) {
      if (pl.threads[on].ops[at[on]].late) {
        cut = on;
        break;
      }
      visited[on] = 0;  // left, so that the walk round the cycle ends
      on = maker[needs(pl.threads[on].ops[at[on]])];
    }
    thread_state& s = pl.threads[cut];
    replay_op& r = s.ops[at[cut]];
    if (r.kind == k_realloc) {
      r.old = none;
      r.wait = 0;
    } else {
      r.kind = k_nop;
      s.n_nops++;
    }
    pl.unmatched_frees++;
    pl.cross_thread_frees--;
  }
  made.unmap();
  maker.unmap();
}

void build_plan(trace_file& t, plan& pl) {
  size_t nt = t.threads.size();
  pl.threads.resize(nt);
  pl.counts[op_time] = t.samples;
  live_map live;
  live.init(1 << 16);
  mapped<uint32_t> owner, next;  // the thread that allocated each block; live_map's chains
  owner.map(t.words + 1);
  next.map(t.words + 1);
  live.next = &next;
  // Frees that found no live block, by address, for a later-merged allocation of another thread
  // (below).  Few: frees of blocks from before the recording began, and these.
  struct orphan {
    uint32_t thread;
    uint64_t op, key;
  };
  std::unordered_multimap<uint64_t, orphan> orphans;
  // A min-heap of threads by the cycle count of their next event.
  std::vector<uint32_t> heap;
  auto key = [&](uint32_t th) { return merge_key(t, th, pl.threads[th]); };
  auto less = [&](uint32_t a, uint32_t b) { return key(a) > key(b); };  // for std::*_heap: a min-heap
  for (size_t th = 0; th < nt; th++) {
    thread_state& s = pl.threads[th];
    uint64_t n = 0;
    for (auto& c : t.threads[th]) n += c.n;
    s.ops.map(n);
    s.pace.map(n);  // resident only as far as written
    if (!t.threads[th].empty()) {
      s.cycles = t.threads[th][0].h->base_cycles;
      if (advance_to_event(t, th, s)) heap.push_back(static_cast<uint32_t>(th));
    }
  }
  std::make_heap(heap.begin(), heap.end(), less);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), less);
    uint32_t th = heap.back();
    heap.pop_back();
    thread_state& s = pl.threads[th];
    const chunk_ref& c = t.threads[th][s.chunk];
    const uint64_t event_key = merge_key(t, th, s);
    uint64_t w = c.words[s.event];
    unsigned o = word_op(w);
    uint64_t addr = word_address(w), size = word_inline_size(w);
    unsigned alog = 0;
    if (s.event + 1 < c.n && word_op(c.words[s.event + 1]) == op_extension) {
      s.event++;
      size = extension_size(c.words[s.event]);
      alog = extension_align_log(c.words[s.event]);
    }
    pl.counts[o]++;
    replay_op r{size, k_nop, alog, 0, 0, none, none};
    auto allocate = [&]() -> uint32_t {
      if (addr == 0) {
        pl.failed++;
        return none;
      }
      uint32_t id = pl.objects++;
      owner[id] = th;
      // A free by another thread that the merge took before this allocation, though its time (the
      // sample after it) is not before this one's (the sample before): a thread's events are
      // merged in its order, and a free at the head of this thread (its key the next sample) held
      // back the allocations after it.  1 % of a producer's blocks freed by a consumer were
      // unmatched, the replay never freed them, while trace-stats matched them all.
      const uint64_t alloc_key = s.cycles * 2;
      auto range = orphans.equal_range(addr);
      auto best = orphans.end();
      for (auto it = range.first; it != range.second; ++it)
        if (it->second.thread != th && it->second.key >= alloc_key &&
            (best == orphans.end() || it->second.key < best->second.key))
          best = it;
      if (best != orphans.end()) {
        thread_state& f = pl.threads[best->second.thread];
        replay_op& freed = f.ops[best->second.op];
        if (freed.kind == k_realloc) {  // a realloc's old block (op_realloc below)
          freed.old = id;
          freed.wait = 1;
          freed.late = 1;
        } else {
          freed = {0, k_free, 0, 1, 1, id, none};
          f.n_nops--;
        }
        orphans.erase(best);
        pl.unmatched_frees--;
        pl.cross_thread_frees++;
        pl.late_matches++;
        return id;
      }
      if (live.put(addr, id)) pl.reused_live++;  // a free swapped with it, or lost
      return id;
    };
    auto release = [&](uint64_t a) -> uint32_t {
      uint32_t id = live.take(a, th, owner.p);
      if (id == none) {
        pl.unmatched_frees++;
        return none;
      }
      if (owner[id] != th) {
        pl.cross_thread_frees++;
        r.wait = 1;
      }
      return id;
    };
    switch (o) {
      case op_malloc:
      case op_calloc:
      case op_aligned:
        r.obj = allocate();
        if (r.obj != none) r.kind = o == op_malloc ? k_malloc : o == op_calloc ? k_calloc : k_aligned;
        break;
      case op_free:
      case op_free_sized:
        r.obj = release(addr);
        if (r.obj != none) {
          r.kind = o == op_free ? k_free : k_free_sized;
        } else {
          // A place for a later-merged allocation to match (allocate above); else a no-op.
          orphans.insert({addr, {th, s.n_ops, event_key}});
          s.ops[s.n_ops++] = r;
          s.n_nops++;
        }
        break;
      case op_realloc_from:
        s.pending_old = release(addr);
        s.pending_old_addr = addr;
        s.pending_old_key = event_key;
        s.event++;
        if (advance_to_event(t, th, s)) {
          heap.push_back(th);
          std::push_heap(heap.begin(), heap.end(), less);
        }
        continue;  // the operation is made at op_realloc
      case op_realloc:
        r.old = static_cast<uint32_t>(s.pending_old);
        r.wait = r.old != none && owner[r.old] != th;
        if (addr == 0 && size > 0) {  // failed: the old block lives on
          // Nor did it free anything: release counted it as a free.
          if (s.pending_old != none) live.put_back(s.pending_old_addr, r.old);
          else pl.unmatched_frees--;
          if (r.wait) pl.cross_thread_frees--;
          pl.failed++;
          r.old = none;
          r.wait = 0;
        } else {
          r.obj = addr ? allocate() : none;
          r.kind = k_realloc;
          // Its old block found nothing live: like a free's (above), a place for a later-merged
          // allocation of another thread to match (a consumer that reallocates a producer's
          // block: the replay reallocated NULL and never freed the producer's).
          if (s.pending_old == none) orphans.insert({s.pending_old_addr, {th, s.n_ops, s.pending_old_key}});
        }
        s.pending_old = none;
        break;
    }
    if (r.kind != k_nop) {
      if (s.cycles > s.paced_cycles && s.cycles > t.header.start_cycles && t.clock_plausible()) {
        s.paced_cycles = s.cycles;
        double ns = double(s.cycles - t.header.start_cycles) * double(t.last_ns - t.header.start_ns) /
                    double(t.last_cycles - t.header.start_cycles);
        s.pace[s.n_pace++] = {s.n_ops, static_cast<uint64_t>(ns)};
      }
      s.ops[s.n_ops++] = r;
    }
    s.event++;
    if (advance_to_event(t, th, s)) {
      heap.push_back(th);
      std::push_heap(heap.begin(), heap.end(), less);
    }
  }
  live.keys.unmap();
  live.vals.unmap();
  owner.unmap();
  next.unmap();
  if (pl.late_matches) unblock(pl);
}

// ---- the replay ------------------------------------------------------------------------------

void* const failed_block = reinterpret_cast<void*>(1);  // an allocation the allocator refused

void touch(void* p, size_t size) {
  if (p == nullptr || size == 0) return;
  auto* c = static_cast<volatile char*>(p);
  for (size_t i = 0; i < size; i += 4096) c[i] = static_cast<char>(i);
  c[size - 1] = 1;
}

using replay_clock = std::chrono::steady_clock;

// Until `when`: sleeps while more than 200 us are left, then yields.
void wait_until(replay_clock::time_point when) {
  for (;;) {
    auto left = when - replay_clock::now();
    if (left <= replay_clock::duration::zero()) return;
    if (left > std::chrono::microseconds(200)) std::this_thread::sleep_for(left - std::chrono::microseconds(100));
    else sched_yield();
  }
}

void replay_thread(thread_state& s, std::atomic<void*>* slots, std::atomic<int>& go, bool pace,
                   const replay_clock::time_point* start) {
  while (go.load(std::memory_order_acquire) == 0) sched_yield();
  size_t next_pace = pace ? 0 : s.n_pace;
  replay_clock::time_point busy_since = replay_clock::now();
  replay_clock::duration busy{};
  auto get = [&](uint32_t id, bool wait) -> void* {
    void* p = slots[id].load(wait ? std::memory_order_acquire : std::memory_order_relaxed);
    while (p == nullptr) {  // allocated by another thread that has not got there yet
      sched_yield();
      p = slots[id].load(std::memory_order_acquire);
    }
    return p == failed_block ? nullptr : p;
  };
  auto put = [&](uint32_t id, void* p, size_t size) {
    if (id == none) return;
    touch(p, size);
    slots[id].store(p ? p : failed_block, std::memory_order_release);
  };
  for (size_t i = 0; i < s.n_ops; i++) {
    const replay_op& r = s.ops[i];
    if (next_pace < s.n_pace && s.pace[next_pace].op == i) {
      auto when = *start + std::chrono::nanoseconds(s.pace[next_pace++].ns);
      if (auto now = replay_clock::now(); now < when) {
        busy += now - busy_since;
        wait_until(when);
        busy_since = replay_clock::now();
      }
    }
    switch (r.kind) {
      case k_malloc:
        put(r.obj, malloc(r.size), r.size);
        break;
      case k_calloc:
        put(r.obj, calloc(1, r.size), r.size);
        break;
      case k_aligned: {
        void* p = nullptr;
        size_t al = size_t{1} << r.align_log;
        if (al < sizeof(void*)) al = sizeof(void*);
        if (posix_memalign(&p, al, r.size) != 0) p = nullptr;
        put(r.obj, p, r.size);
        break;
      }
      case k_realloc: {
        void* old = r.old == none ? nullptr : get(r.old, r.wait);
        if (r.obj == none) {
          free(old);  // realloc to size 0 freed it
        } else {
          put(r.obj, realloc(old, r.size), r.size);
        }
        break;
      }
      case k_free:
      case k_free_sized:
        free(get(r.obj, r.wait));
        break;
    }
  }
  busy += replay_clock::now() - busy_since;
  s.busy_seconds = std::chrono::duration<double>(busy).count();
}

struct replay_result {
  double seconds = 0;
  uint64_t ops = 0;
  long peak_kib = -1, tables_kib = 0, process_peak_kib = -1, own_file_kib = 0;
  double busy_seconds = 0;  // every thread's time replaying, its waits for recorded times left out
  // CLOCK_MONOTONIC when the peak began to be measured and when the replay ended: the lab keeps
  // its RSS samples of this window for the RSS over time (rss_window below).
  uint64_t began_ns = 0, ended_ns = 0;
};

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// The libraries a live run under the preloaded allocator has that the recorded program did not:
// the preloaded ones and those of their DT_NEEDED libraries that the program lacked when recording
// began (runtime_libs: format.h; unknown, 0: the preloaded ones only).  By the file name of their
// path: a path whose file name starts with one of these is the allocator's.
std::vector<std::string> allocator_libs(uint64_t runtime_libs) {
  struct walk {
    std::vector<std::string> preload, libs;
    uint64_t runtime_libs;
  } w;
  w.runtime_libs = runtime_libs;
  const char* preload = getenv("LD_PRELOAD");
  for (std::string rest = preload ? preload : ""; !rest.empty();) {
    size_t end = rest.find_first_of(": ");
    std::string lib = rest.substr(0, end);
    rest = end == std::string::npos ? "" : rest.substr(end + 1);
    char real[4096];
    if (!lib.empty() && realpath(lib.c_str(), real)) w.preload.push_back(real);
  }
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        auto& w = *static_cast<walk*>(arg);
        char real[4096];
        if (!info->dlpi_name || !*info->dlpi_name || !realpath(info->dlpi_name, real) ||
            std::find(w.preload.begin(), w.preload.end(), real) == w.preload.end())
          return 0;
        const char* base = strrchr(real, '/');
        w.libs.push_back(base ? base + 1 : real);
        if (!(w.runtime_libs & runtime_libs_known)) return 0;
        for (int i = 0; i < info->dlpi_phnum; i++) {
          if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
          auto* dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
          const char* strtab = nullptr;
          for (auto* d = dyn; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_STRTAB)  // relocated by the loader, or still relative on some ports
              strtab = reinterpret_cast<const char*>(d->d_un.d_ptr < info->dlpi_addr ? info->dlpi_addr + d->d_un.d_ptr
                                                                                    : d->d_un.d_ptr);
          for (auto* d = dyn; strtab && d->d_tag != DT_NULL; d++) {
            if (d->d_tag != DT_NEEDED) continue;
            const char* name = strtab + d->d_un.d_val;
            bool had = strncmp(name, "libc.so", 7) == 0 || strncmp(name, "ld-linux", 8) == 0;
            for (size_t k = 0; k < std::size(runtime_lib_names); k++)
              if (strcmp(name, runtime_lib_names[k]) == 0 && (w.runtime_libs >> k & 1)) had = true;
            if (!had) w.libs.push_back(name);
          }
        }
        return 0;
      },
      &w);
  return w.libs;
}

// The replayer's file-backed resident KiB, less the allocator's libraries' (allocator_libs: a live
// run has their pages too).
long own_file_kib(uint64_t runtime_libs) {
  long f = strata::bench::status_kb("RssFile:"), s = strata::bench::status_kb("RssShmem:");
  long kib = (f > 0 ? f : 0) + (s > 0 ? s : 0);
  std::vector<std::string> libs = allocator_libs(runtime_libs);
  FILE* maps = libs.empty() ? nullptr : fopen("/proc/self/smaps", "r");
  if (maps == nullptr) return kib;
  char line[4096];
  bool allocators = false;
  while (fgets(line, sizeof line, maps)) {
    char* path = strchr(line, '/');
    if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ') && line[0] != ' ') {
      // A mapping's first line: "start-end perms offset dev inode [path]".
      allocators = false;
      if (path) {
        path[strcspn(path, "\n")] = 0;
        const char* base = strrchr(path, '/') + 1;
        for (auto& lib : libs)
          if (strncmp(base, lib.c_str(), lib.size()) == 0) allocators = true;
      }
    } else if (allocators && strncmp(line, "Rss:", 4) == 0) {
      kib -= strtol(line + 4, nullptr, 10);
    }
  }
  fclose(maps);
  return kib;
}

// The recorded program's file-backed resident KiB at exit (program_file_kib) replaces the
// replayer's own in peak_kib; 0: unknown, the replayer's own is kept.  (Anonymous memory is not
// corrected: at the replayer's start it already holds the allocator's own, tcmalloc's 3.8 MiB.)
// pace: each thread's operations wait for their recorded times (from the replay's start), so an
// allocator that gives memory back on a timer does so as often as under the program.
replay_result replay(plan& pl, long program_file_kib = 0, uint64_t runtime_libs = 0, bool pace = false) {
  replay_result res;
  mapped<std::atomic<void*>> slots;
  slots.map(pl.objects + 1);
  memset(static_cast<void*>(slots.p), 0, slots.bytes());  // resident from the start
  size_t tables = slots.bytes();
  for (auto& s : pl.threads) {
    // Only the operations written are resident (the table was sized for every word, samples
    // and extensions included).
    tables += (s.n_ops * sizeof(replay_op) + 4095) & ~size_t{4095};
    tables += (s.n_pace * sizeof(thread_state::pace_point) + 4095) & ~size_t{4095};
    res.ops += s.n_ops - s.n_nops;
  }
  res.tables_kib = static_cast<long>(tables / 1024);
  std::atomic<int> go{0};
  std::vector<std::thread> workers;
  workers.reserve(pl.threads.size());
  // The peak is measured from here: the reader's memory is gone, the tables are resident.
  if (FILE* f = fopen("/proc/self/clear_refs", "w")) {
    fputs("5", f);
    fclose(f);
  }
  res.began_ns = monotonic_ns();
  // The recorded program's first thread is replayed by this one, its main thread, as the program
  // ran it (allocators treat the main thread's heap apart: mimalloc 3 kept 6 MiB more of sqlite3's
  // memory when a second thread replayed it).
  replay_clock::time_point t0;
  for (size_t i = 1; i < pl.threads.size(); i++)
    workers.emplace_back(replay_thread, std::ref(pl.threads[i]), slots.p, std::ref(go), pace, &t0);
  t0 = replay_clock::now();
  go.store(1, std::memory_order_release);
  if (!pl.threads.empty()) replay_thread(pl.threads[0], slots.p, go, pace, &t0);
  for (auto& w : workers) w.join();
  res.seconds = std::chrono::duration<double>(replay_clock::now() - t0).count();
  for (auto& s : pl.threads) res.busy_seconds += s.busy_seconds;
  res.ended_ns = monotonic_ns();
  res.process_peak_kib = strata::bench::status_kb("VmHWM:");
  res.own_file_kib = own_file_kib(runtime_libs);
  if (res.process_peak_kib >= 0) {
    res.peak_kib = res.process_peak_kib - res.tables_kib;
    if (program_file_kib > 0) res.peak_kib += program_file_kib - res.own_file_kib;
  }
  return res;
}

void print_counts(const trace_file& t, const plan& pl) {
  printf("\"threads\": %zu, \"words\": %" PRIu64 ", \"chunks\": %" PRIu64 ", \"complete\": %s, "
         "\"valid_bytes\": %zu, \"file_bytes\": %zu, \"truncated\": \"%s\", \"pid\": %u, \"parent_pid\": %u, "
         "\"blocks\": %u, \"unmatched_frees\": %" PRIu64 ", \"cross_thread_frees\": %" PRIu64
         ", \"failed\": %" PRIu64 ", \"reused_live\": %" PRIu64 ", \"counts\": {",
         t.threads.size(), t.words, t.chunks, t.complete ? "true" : "false", t.valid_bytes, t.size,
         t.truncated.c_str(), t.header.pid, t.header.parent_pid, pl.objects, pl.unmatched_frees,
         pl.cross_thread_frees, pl.failed, pl.reused_live);
  const char* names[] = {"", "malloc", "calloc", "realloc_from", "realloc", "aligned", "free", "free_sized", "time"};
  for (int i = 1; i <= 8; i++) printf("%s\"%s\": %" PRIu64, i > 1 ? ", " : "", names[i], pl.counts[i]);
  printf("}");
}

// ---- --smoke: a trace of known content -------------------------------------------------------

struct writer {
  FILE* f;
  std::vector<uint64_t> words;
  uint64_t cycles = 1000, base = 1000;
  uint32_t thread;
  void event(strata::trace::op o, uint64_t addr, uint64_t size, unsigned alog = 0) {
    cycles += 100;
    if (o == op_aligned || size > inline_size_max) {
      words.push_back(event_word(o, addr, size_in_extension));
      words.push_back(extension_word(size, alog));
    } else {
      words.push_back(event_word(o, addr, size));
    }
    words.push_back(time_word(cycles));  // a sample after every event
  }
  void flush(uint32_t flags = 0) {
    chunk_header h{chunk_magic, thread, static_cast<uint32_t>(words.size()), flags, base, cycles, 0, 1,
                   checksum(words.data(), words.size())};
    fwrite(&h, sizeof h, 1, f);
    fwrite(words.data(), 8, words.size(), f);
    words.clear();
    base = cycles;
  }
};

// A trace for --smoke: the header, what write_threads writes (its writers flushed), an end chunk;
// read back into t and planned into pl.
template <class F>
void smoke_plan(trace_file& t, plan& pl, F write_threads) {
  char path[] = "/tmp/strata-replay-smoke-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) fail("--smoke: cannot create a temporary file");
  FILE* f = fdopen(fd, "wb");
  file_header fh = new_file_header();
  fwrite(&fh, sizeof fh, 1, f);
  write_threads(f);
  writer end{f, {}, 0, 0, 0};
  end.flush(chunk_end);
  fclose(f);
  read_trace(path, t);
  unlink(path);
  build_plan(t, pl);
}

// Late matches (build_plan) that would make two replay threads wait for each other: thread 1 frees
// X (nothing live there: a block from before the recording), then allocates Y; thread 0 frees Y
// and Z, then allocates X, its frees merged after thread 1's (its chunk written later).  Thread
// 1's free of X is matched with thread 0's X, thread 0's free of Y with thread 1's Y: each waits
// for the other.  unblock unmatches thread 0's free of Y, and the replay ends.
bool smoke_wait_cycle() {
  trace_file t;
  plan pl;
  smoke_plan(t, pl, [](FILE* f) {
    const uint64_t x = 0x200000, y = 0x300000, z = 0x400000;
    writer a{f, {}, 3000, 1000, 0}, b{f, {}, 2000, 1000, 1};  // no samples: keys from base and flush
    a.words = {event_word(op_free, y, 0), event_word(op_free, z, 0), event_word_returned(op_malloc, x, 32)};
    b.words = {event_word(op_free, x, 0), event_word_returned(op_malloc, y, 32)};
    a.flush();
    b.flush();
  });
  replay_result r = replay(pl);
  bool ok = pl.late_matches == 1 && pl.unmatched_frees == 2 && pl.cross_thread_frees == 1 && r.ops == 3;
  if (!ok)
    fprintf(stderr, "--smoke: a cycle of waits: late %u unmatched %" PRIu64 " cross %" PRIu64 " ops %" PRIu64 "\n",
            pl.late_matches, pl.unmatched_frees, pl.cross_thread_frees, r.ops);
  return ok;
}

int smoke() {
  // Thread 0 allocates 1000 blocks (every fifth aligned, every seventh reallocated), thread 1
  // frees the odd ones after thread 0 made them, thread 0 frees the even ones.
  const int n = 1000;
  trace_file t;
  plan pl;
  smoke_plan(t, pl, [](FILE* f) {
    writer a{f, {}, 1000, 1000, 0}, b{f, {}, 1000, 1000, 1};
    uint64_t base = 0x100000;
    for (int i = 0; i < n; i++) {
      uint64_t addr = base + 64 * uint64_t(i);
      if (i % 5 == 0) a.event(op_aligned, addr, 48, 6);
      else a.event(op_malloc, addr, 16 + i % 48);
    }
    for (int i = 0; i < n; i += 7) {
      uint64_t addr = base + 64 * uint64_t(i);
      a.event(op_realloc_from, addr, 0);
      a.event(op_realloc, addr, 40);
    }
    b.cycles = b.base = a.cycles;
    for (int i = 1; i < n; i += 2) b.event(op_free, base + 64 * uint64_t(i), 0);
    for (int i = 0; i < n; i += 2) a.event(op_free_sized, base + 64 * uint64_t(i), 48);
    a.event(op_free, 0xdead0, 0);  // never allocated in the trace
    a.flush();
    b.flush();
  });
  replay_result r = replay(pl);
  uint64_t reallocs = (n + 6) / 7;
  bool ok = pl.objects == n + reallocs && pl.cross_thread_frees == n / 2 && pl.unmatched_frees == 1 &&
            r.ops == uint64_t(n) + reallocs + n && t.complete;
  printf("{\"smoke\": true, \"ok\": %s, \"ops\": %" PRIu64 ", \"seconds\": %.6f, \"ops_per_sec\": %.1f, "
         "\"peak_rss_kib\": %ld, ",
         ok ? "true" : "false", r.ops, r.seconds, r.seconds > 0 ? double(r.ops) / r.seconds : 0.0, r.peak_kib);
  print_counts(t, pl);
  printf("}\n");
  return ok && smoke_wait_cycle() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = "usage: strata-bench-replay [--check] [--pace] TRACE | --smoke";
  bool check = false, pace = false;
  const char* path = nullptr;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--smoke") return smoke();
    if (a == "--check") check = true;
    else if (a == "--pace") pace = true;
    else if (a == "--help" || a == "-h") {
      puts(usage.c_str());
      return 0;
    } else if (a[0] == '-') fail("unknown option " + a + " (" + usage + ")");
    else path = argv[i];
  }
  if (path == nullptr) fail(usage);
  trace_file t;
  read_trace(path, t);
  if (pace && t.chunks > 0 && !t.clock_plausible())
    fail(std::string(path) + ": the trace's times cannot pace a replay: its clock pairs (file header, last chunk) " +
         "give no plausible counter rate, or a chunk's times disagree with it (corrupt or cut-short times); " +
         "replay it back to back, without --pace");
  if (!t.truncated.empty()) fprintf(stderr, "strata-bench-replay: %s: %s; replaying its %zu valid bytes\n", path,
                                    t.truncated.c_str(), t.valid_bytes);
  plan pl;
  build_plan(t, pl);
  t.data.unmap();
  t.entries.unmap();
  if (check) {
    printf("{");
    print_counts(t, pl);
    printf("}\n");
    return 0;
  }
  replay_result r = replay(pl, static_cast<long>(t.program_file_kib), t.header.runtime_libs, pace);
  // Paced, the replay lasts as long as the program: its speed is ops per second of replaying
  // (every thread's, its waits for the recorded times left out).
  double per = pace ? r.busy_seconds : r.seconds;
  printf("{\"ops\": %" PRIu64 ", \"paced\": %s, \"seconds\": %.6f, \"busy_seconds\": %.6f, "
         "\"ops_per_sec\": %.1f, \"peak_rss_kib\": %ld, "
         "\"process_peak_rss_kib\": %ld, \"tables_kib\": %ld, \"program_file_kib\": %ld, "
         "\"replayer_file_kib\": %ld, \"program_anon_kib_at_start\": %" PRIu64 ", ",
         r.ops, pace ? "true" : "false", r.seconds, r.busy_seconds, per > 0 ? double(r.ops) / per : 0.0, r.peak_kib,
         r.process_peak_kib, r.tables_kib, static_cast<long>(t.program_file_kib), r.own_file_kib,
         t.header.start_anon_kib);
  // The lab's RSS samples of the replay, less what peak_rss_kib leaves out (the tables, the
  // replayer's own file pages for the program's): the whole process's, reading the trace
  // included, drew 310 MB for a program with 12 KiB live beside its 2 MiB peak.
  if (r.peak_kib >= 0)
    printf("\"rss_window\": {\"begin_monotonic_ns\": %" PRIu64 ", \"end_monotonic_ns\": %" PRIu64
           ", \"less_kib\": %ld}, ",
           r.began_ns, r.ended_ns, r.process_peak_kib - r.peak_kib);
  print_counts(t, pl);
  printf("}\n");
  return 0;
}
