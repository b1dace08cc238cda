// Output that is safe inside the allocator: formats into a stack buffer and write(2)s it, so it
// never allocates and never re-enters malloc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace strata::report {

// printf-style message to stderr.
void message(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));
// Same, to a file descriptor.
void to_fd(int fd, const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));

// A value of the user's (an option, a NUMA spec) quoted in a message, cut to its first
// quote_max bytes with "..." after them: a message is one line of at most 1023 bytes, and the
// reason after a long value was cut off.  Print as "%.*s%s", quote_len(v), v, quote_cut(v).
constexpr size_t quote_max = 200;
inline int quote_len(const char* v) noexcept { return static_cast<int>(strnlen(v, quote_max)); }
inline const char* quote_cut(const char* v) noexcept { return v[strnlen(v, quote_max)] ? "..." : ""; }

// A tiny JSON writer over a caller's buffer: truncates safely, and finish() returns the length
// the whole document needed (the snprintf contract).
class json_writer {
 public:
  json_writer(char* buf, size_t len) noexcept : buf_(buf), len_(len) {}
  void open() noexcept { raw("{"); first_ = true; }
  void close() noexcept { raw("}"); first_ = false; }
  void key(const char* k) noexcept;  // "k": (opens a nested value)
  void field_int(const char* k, int64_t v) noexcept;
  void field_uint(const char* k, uint64_t v) noexcept;
  void field_double(const char* k, double v) noexcept;
  void field_text(const char* k, const char* v) noexcept;  // null -> JSON null
  void open_object(const char* k) noexcept { key(k); open(); }
  void open_array(const char* k) noexcept { key(k); raw("["); first_ = true; }
  void close_array() noexcept { raw("]"); first_ = false; }
  void array_object() noexcept { comma(); open(); }
  size_t finish() noexcept;

 private:
  void comma() noexcept;
  void raw(const char* s) noexcept;
  void printf(const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));
  char* buf_;
  size_t len_;
  size_t pos_ = 0;
  bool first_ = true;
};

}  // namespace strata::report
