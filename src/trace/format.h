// The trace file format, version 2 (docs/trace-format.md is the full description): shared by
// the recorder (trace.cpp), the replayer (bench/replay) and, in Python, strata_lab/trace.py.
//
//   file   = file_header chunk*          little-endian throughout
//   chunk  = chunk_header word[words]    one thread's events, written in one write()
// Version 2 reads a chunk's words as 32-bit units: most events are one unit (a short event,
// below); the rest are the 64-bit words of version 1 (long entries), which decode_units turns
// the chunk into.  Version 1's chunks hold long entries only, and read the same way.
// Each long entry's low 4 bits say what it is:
//   an event (op 1-7):  op | address / 8 (bits 4-48) | size (bits 49-63)
//       size 0x7fff: the size, and for op_aligned always, are in the extension that follows
//   an extension (15):  15 | size (bits 4-57) | log2 alignment (bits 58-63)
//   a time sample (8):  8 | the cycle counter (bits 4-63), written every 512 bytes of a thread's
//       events (reading it at every event would double the cost of recording a small malloc)
// An event's time is bounded by the samples around it (the chunk's base_cycles and flush_cycles
// at its ends): an allocation is given the sample before it, a free the sample after it, so
// that every block is allocated before it is freed also across threads.  The tools match a
// free with the oldest live block at its address (a free and the next allocation of the same
// address may appear swapped between two samples).
// A chunk with chunk_end set (and no words) closes a trace whose program exited normally; its
// base_cycles field holds the program's file-backed resident memory at exit in KiB (RssFile +
// RssShmem: program, libraries, mapped files), which a replay adds in place of its own.
#pragma once
#include <cstdint>
#include <cstring>

namespace strata::trace {

inline constexpr char file_magic[8] = {'S', 'T', 'R', 'T', 'R', 'A', 'C', 'E'};
inline constexpr uint32_t format_version = 2;
inline constexpr uint32_t format_version_min = 1;  // the oldest version the tools read
inline constexpr uint32_t chunk_magic = 0x4b4e4843;  // "CHNK"

enum op : uint8_t {
  op_malloc = 1,        // malloc, operator new: address, size
  op_calloc = 2,        // calloc: address, count * size
  op_realloc_from = 3,  // realloc's old block (recorded before the call); op_realloc follows
  op_realloc = 4,       // realloc's new block and size (0 address: failed, or size 0 freed it)
  op_aligned = 5,       // posix_memalign, aligned_alloc, memalign, valloc, pvalloc, aligned new
  op_free = 6,          // free, cfree, operator delete (recorded before the call)
  op_free_sized = 7,    // free_sized, free_aligned_sized, sized delete: address, size
  op_time = 8,          // a sample of the cycle counter
  op_extension = 15,    // the size and alignment of the event before
};

inline constexpr uint64_t op_mask = 15;
inline constexpr int address_shift = 3;  // blocks are 8-byte aligned: the low 3 bits are not kept
inline constexpr uint64_t address_field = (uint64_t{1} << 45) - 1;
inline constexpr uint64_t inline_size_max = 0x7ffe, size_in_extension = 0x7fff;
inline constexpr uint64_t extension_size_mask = (uint64_t{1} << 54) - 1;

inline uint64_t event_word(op o, uint64_t address, uint64_t size_field) noexcept {
  return o | ((address >> address_shift) & address_field) << 4 | size_field << 49;
}
// The same for a block the allocator returned: 8-byte aligned and below 2^47 (the x86-64 user
// address space), so its bits fit the field as they are (one instruction less an event).
inline uint64_t event_word_returned(op o, uint64_t address, uint64_t size_field) noexcept {
  return o | address << (4 - address_shift) | size_field << 49;
}
inline uint64_t extension_word(uint64_t size, unsigned align_log) noexcept {
  return op_extension | (size > extension_size_mask ? extension_size_mask : size) << 4 |
         uint64_t{align_log} << 58;
}
inline uint64_t time_word(uint64_t cycles) noexcept { return op_time | cycles << 4; }

// Version 2: a chunk's words are read as 32-bit units (little-endian: a word's low half first).
// A long entry (an event word, its extension, a time sample) starts at an even unit and takes
// two; a unit whose low 4 bits are 0 is padding before one.  A short event is one unit:
//   allocation (malloc 9, calloc 10, realloc 12): tag | size (bits 4-12, < 512) |
//       (address - the last allocation event's of the same size / 16 + 2^18) (bits 13-31)
//   free (14) and realloc's old block (11): tag | (address - the last such event's + 2^31) / 16
//       (bits 4-31)
// "The last" counts long events too, and starts at 0 in each chunk.
inline constexpr unsigned short_tag_offset = 8;  // a short event's tag: its op + 8
inline constexpr uint64_t short_size_limit = 512;
inline constexpr uint64_t short_sized_bias = uint64_t{1} << 22, short_sized_field = (uint64_t{1} << 23) - 16;
inline constexpr uint64_t short_free_bias = uint64_t{1} << 31, short_free_field = (uint64_t{1} << 32) - 16;
inline constexpr int long_units = 5;  // the most units a long event takes: padding, word, extension
inline constexpr int time_units = 3;  // padding and a time sample
// The events with a short form: allocations (their size step's register) and frees (one register).
inline constexpr bool is_sized_short(unsigned o) noexcept { return o == op_malloc || o == op_calloc || o == op_realloc; }
inline constexpr bool is_free_short(unsigned o) noexcept { return o == op_free || o == op_realloc_from; }
inline constexpr bool is_short_tag(unsigned tag) noexcept {
  return tag > short_tag_offset && (is_sized_short(tag - short_tag_offset) || is_free_short(tag - short_tag_offset));
}
inline uint32_t short_sized_unit(op o, uint64_t size, uint64_t biased_delta) noexcept {
  return static_cast<uint32_t>((o + short_tag_offset) | size << 4 | (biased_delta >> 4) << 13);
}
inline uint32_t short_free_unit(op o, uint64_t biased_delta) noexcept {
  return static_cast<uint32_t>((o + short_tag_offset) | (biased_delta >> 4) << 4);
}

inline unsigned word_op(uint64_t w) noexcept { return static_cast<unsigned>(w & op_mask); }
inline uint64_t word_address(uint64_t w) noexcept { return ((w >> 4) & address_field) << address_shift; }
inline uint64_t word_inline_size(uint64_t w) noexcept { return w >> 49; }
inline uint64_t extension_size(uint64_t w) noexcept { return (w >> 4) & extension_size_mask; }
inline unsigned extension_align_log(uint64_t w) noexcept { return static_cast<unsigned>(w >> 58); }
inline uint64_t time_cycles(uint64_t w) noexcept { return w >> 4; }

struct file_header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;        // sizeof(file_header)
  uint32_t chunk_header_bytes;  // sizeof(chunk_header)
  uint32_t word_bytes;          // 8
  uint32_t pid;
  uint32_t parent_pid;          // the process this one forked from while recording, else 0
  uint64_t start_cycles;        // the cycle counter and CLOCK_MONOTONIC at the start
  uint64_t start_ns;
  uint64_t start_anon_kib;      // the program's anonymous resident KiB when recording began
  uint64_t runtime_libs;        // runtime_libs_known | a bit per runtime_lib_names entry loaded at start
};
static_assert(sizeof(file_header) == 64);

// The shared runtime libraries that allocators depend on (jemalloc and tcmalloc on libstdc++ and
// libgcc_s, mimalloc 3 on libatomic...): which of them the program had loaded when recording
// began.  A live run under such an allocator has the pages of those the program lacks, which the
// replayer counts as the allocator's (docs/trace-format.md).  0: unknown (an older recorder).
inline constexpr const char* runtime_lib_names[] = {"libstdc++.so.6", "libgcc_s.so.1", "libm.so.6",
                                                    "libatomic.so.1", "librt.so.1", "libpthread.so.0",
                                                    "libdl.so.2"};
inline constexpr uint64_t runtime_libs_known = uint64_t{1} << 63;

enum chunk_flags : uint32_t {
  chunk_thread_exit = 1,  // written by the thread's exit (more may follow from late destructors)
  chunk_end = 2,          // the program exited normally: nothing follows
};

struct chunk_header {
  uint32_t magic;          // chunk_magic
  uint32_t thread;         // the recorder's thread number, 0 for the first thread seen
  uint32_t words;          // 64-bit words that follow
  uint32_t flags;          // chunk_flags
  uint64_t base_cycles;    // the cycle counter before the chunk's first event
                           //   (end chunk: the program's file-backed resident KiB at exit)
  uint64_t flush_cycles;   // the cycle counter (after the chunk's last event) and CLOCK_MONOTONIC
  uint64_t flush_ns;       //   when the chunk was written: with the header's, cycles to time
  uint32_t os_tid;         // the kernel's thread id
  uint32_t checksum;       // the words summed (mod 2^64), high half xor low half
};
static_assert(sizeof(chunk_header) == 48);

// A file header with the format's constants (magic, version, the three sizes) set and the rest 0,
// for the recorder and for traces the replayer's smoke test writes.
inline file_header new_file_header() noexcept {
  file_header h{};
  memcpy(h.magic, file_magic, sizeof h.magic);
  h.version = format_version;
  h.header_bytes = sizeof(file_header);
  h.chunk_header_bytes = sizeof(chunk_header);
  h.word_bytes = 8;
  return h;
}

inline uint32_t checksum(const uint64_t* words, uint64_t count) noexcept {
  uint64_t s = 0;
  for (uint64_t i = 0; i < count; i++) s += words[i];
  return static_cast<uint32_t>(s ^ (s >> 32));
}

// A counter rate a machine can have, in ticks a nanosecond: x86's TSC runs at 1-5 GHz, Arm's
// generic timer at 10 MHz-1 GHz.  The readers turn cycles into time only when the file header's
// clock pair and the last chunk's give a rate in this range (the times are not checksummed).
constexpr double clock_ticks_per_ns_min = 0.01, clock_ticks_per_ns_max = 20;
inline bool clock_rate_plausible(uint64_t cycles, uint64_t ns) noexcept {
  if (ns == 0) return false;
  double rate = static_cast<double>(cycles) / static_cast<double>(ns);
  return rate >= clock_ticks_per_ns_min && rate <= clock_ticks_per_ns_max;
}

// Whether a chunk's flush pair (cycles, ns: read together when it was written) lies on the line
// through the file header's pair and the last chunk's, within 100 ms or a tenth of the trace's
// span (a thread preempted between its two reads): a flipped high bit in a chunk header's cycles
// is off by minutes.  The end chunk's base_cycles is no time (format above).
inline bool chunk_clock_agrees(uint64_t start_cycles, uint64_t start_ns, uint64_t last_cycles, uint64_t last_ns,
                               uint64_t cycles, uint64_t ns) noexcept {
  if (cycles < start_cycles || last_cycles <= start_cycles) return false;
  double span = static_cast<double>(last_ns - start_ns);
  double at = static_cast<double>(start_ns) +
              static_cast<double>(cycles - start_cycles) * span / static_cast<double>(last_cycles - start_cycles);
  double off = at - static_cast<double>(ns);
  double slack = span / 10 > 1e8 ? span / 10 : 1e8;
  return off <= slack && off >= -slack;
}

inline uint64_t cycles_now() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return __builtin_readcyclecounter();
#endif
}

// A chunk's `count` words as long entries (version 1's words: events, extensions, time samples),
// each passed to emit(word, unit), unit the index of its first unit (an error names its byte);
// short events get their addresses back from the same registers the recorder kept (trace.cpp
// put_event).  Returns the unit index of the first unit that is
// neither, or -1.
template <class Emit>
long decode_units(const uint64_t* words, uint64_t count, Emit emit) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(words);
  auto unit = [bytes](uint64_t i) {
    uint32_t x;
    memcpy(&x, bytes + 4 * i, sizeof x);
    return x;
  };
  uint64_t n = 2 * count, last_free = 0, last_sized[short_size_limit >> 4] = {};
  for (uint64_t i = 0; i < n;) {
    uint32_t x = unit(i);
    unsigned tag = x & op_mask;
    if (tag == 0) {  // padding before a long entry, or at the chunk's end
      i++;
    } else if (is_short_tag(tag)) {
      auto o = static_cast<op>(tag - short_tag_offset);
      uint64_t address, size = 0;
      if (is_sized_short(o)) {
        size = (x >> 4) & (short_size_limit - 1);
        uint64_t& last = last_sized[size >> 4];
        address = last = last + (uint64_t{x >> 13} << 4) - short_sized_bias;
      } else {
        address = last_free = last_free + (uint64_t{x >> 4} << 4) - short_free_bias;
      }
      emit(event_word(o, address, size), i);
      i++;
    } else {
      if ((i & 1) != 0 || !(tag <= op_time || tag == op_extension)) return static_cast<long>(i);
      uint64_t w = x | uint64_t{unit(i + 1)} << 32;
      if (tag >= op_malloc && tag <= op_free_sized) {
        uint64_t size = word_inline_size(w);
        if (is_sized_short(static_cast<op>(tag)) && size < short_size_limit) last_sized[size >> 4] = word_address(w);
        if (is_free_short(tag)) last_free = word_address(w);
      }
      emit(w, i);
      i += 2;
    }
  }
  return -1;
}

}  // namespace strata::trace
