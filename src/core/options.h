// strata options: one table (X-macro) declares every option once — its enum name, its
// STRATA_* environment variable, its type, default, bounds and help text.  Parsing, the
// warnings for bad values (which quote the help text) and strata_options_json are generated
// from it; the README's table is written by hand and checked against it (options_doc_test: each
// row starts with the variable, its default and its help text).
#pragma once
#include <cstddef>
#include <cstdint>

#ifndef STRATA_SECURE
#define STRATA_SECURE 0
#endif

namespace strata {

// X(name, ENV_SUFFIX, kind, default, min, max, help)
//   kind: flag (0/1, also true/false/yes/no/on/off), integer (decimal, in [min, max]), text.
//   Flag and integer values may have leading and trailing whitespace (trimmed, both sides alike);
//   text values are taken verbatim (a path may end in a space); an empty one is the same as unset.
#define STRATA_OPTIONS(X)                                                                          \
  X(show_stats, SHOW_STATS, flag, 0, 0, 1, "print statistics to stderr at exit")                  \
  X(stats_file, STATS_FILE, text, 0, 0, 0, "write statistics as JSON to this path at exit")        \
  X(verbose, VERBOSE, flag, 0, 0, 1,                                                             \
    "say on stderr when the page map cannot be mapped (free() is then slower)")                   \
  X(purge_delay, PURGE_DELAY, integer, 40, -1, 3600000,                                            \
    "milliseconds before free memory goes back to the OS (0: at once, -1: never)")                 \
  X(huge_pages, HUGE_PAGES, flag, 0, 0, 1,                                                        \
    "back huge blocks (over 2 MiB) with transparent huge pages where the kernel allows")  \
  X(huge_segments, HUGE_SEGMENTS, flag, 0, 0, 1,                                                  \
    "back the 32 MiB segments (blocks up to 2 MiB) with transparent huge pages too: fewer faults "  \
    "and TLB misses for more resident memory")                                                    \
  X(segment_cache, SEGMENT_CACHE, integer, 4, 0, 1024, "empty 32 MiB segments kept mapped for reuse")     \
  X(abort_on_error, ABORT_ON_ERROR, flag, STRATA_SECURE, 0, 1,                                     \
    "abort on an invalid or double free instead of reporting it and going on")                    \
  X(numa, NUMA, text, 0, 0, 0, "NUMA placement of strata's memory")                               \
  X(trace, TRACE, text, 0, 0, 0, "record every allocation event of the program to this file")

enum class option : int {
#define STRATA_X(name, env, kind, def, lo, hi, help) name,
  STRATA_OPTIONS(STRATA_X)
#undef STRATA_X
      count
};

namespace options {
// Reads every STRATA_* variable once; a bad value warns (naming the variable) and keeps the
// default.  Safe to call before the C library is fully initialised: uses only getenv and write.
void init() noexcept;
int64_t get(option o) noexcept;            // flag / integer options
// Text options hold fewer bytes than this (their NUL included); nullptr when unset or empty.
inline constexpr size_t text_capacity = 4096;
const char* get_text(option o) noexcept;   // text options; nullptr when unset
void set(option o, int64_t value) noexcept;  // for tests and the strata_* API
// A text option's new value (copied; nullptr or "": unset), for the strata_* API that changes
// it after start-up (strata_numa_set_policy).  False, changing nothing, when it does not fit.
bool set_text(option o, const char* value) noexcept;
// STRATA_TRACE is carried out by the recorder, which only the libraries that replace malloc
// have: strata_options_json lists it once the recorder says it records (applied), and null until
// then (in libstrata_api.a for good, and where the trace file could not be created).
void applied(option o) noexcept;
// Back to the default (text: unset).  For a value a later layer rejects (STRATA_NUMA naming a
// node that does not exist, a trace file that cannot be created), so that strata_options_json
// shows what is in effect.
void reset(option o) noexcept;
size_t to_json(char* buf, size_t len) noexcept;
// The lock over text values, held across fork() (core/init.cpp's handlers): a child forked while
// another thread listed the options must not find it taken.
void lock_for_fork() noexcept;
void unlock_after_fork(bool child) noexcept;
}  // namespace options

}  // namespace strata
