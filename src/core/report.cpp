#include "core/report.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "os/file.h"
#include "os/os.h"

namespace strata::report {
namespace {
// The length of the well-formed UTF-8 character at s (its first byte 0x80 or more), or 0 when
// there is none: a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, or a
// truncated sequence (the NUL ends it).
size_t utf8_length(const unsigned char* s) noexcept {
  unsigned char b = s[0];
  size_t n = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
  if (n == 0) return 0;
  // The second byte's range narrows after E0 (overlong), ED (surrogates), F0 (overlong), F4.
  unsigned char lo = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80;
  unsigned char hi = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; ++i)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return n;
}

void vto_fd(int fd, const char* fmt, va_list ap) noexcept {
  int saved = errno;
  os::no_cancel hold;  // write is a cancellation point: free's reports, malloc_stats
  // A report to a stderr whose reader has gone (`program 2>&1 | head`) is lost, not a SIGPIPE
  // raised inside free() that ends a program strata lets go on past a bad free.
  os::file_signals_hold signals;
  char line[1024];
  int n = vsnprintf(line, sizeof line, fmt, ap);
  if (n > static_cast<int>(sizeof line) - 1) {
    // Cut short, it still ends as a line, and says it was cut: the next message started on it.
    n = sizeof line - 1;
    memcpy(line + n - 4, "...\n", 4);
  }
  for (int off = 0; n > off;) {
    ssize_t w = write(fd, line + off, static_cast<size_t>(n - off));
    // A signal whose handler was installed without SA_RESTART (a profiler's SIGPROF) while the
    // write waited on a full pipe: EINTR, and the line was dropped.
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += static_cast<int>(w);
  }
  errno = saved;
}
}  // namespace

void message(const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  vto_fd(2, fmt, ap);
  va_end(ap);
}

void to_fd(int fd, const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  vto_fd(fd, fmt, ap);
  va_end(ap);
}

void json_writer::printf(const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  size_t room = pos_ < len_ ? len_ - pos_ : 0;
  int n = vsnprintf(room ? buf_ + pos_ : nullptr, room, fmt, ap);
  va_end(ap);
  if (n > 0) pos_ += static_cast<size_t>(n);
}

void json_writer::raw(const char* s) noexcept { printf("%s", s); }

void json_writer::comma() noexcept {
  if (!first_) raw(",");
  first_ = false;
}

void json_writer::key(const char* k) noexcept {
  comma();
  printf("\"%s\":", k);
  first_ = true;
}

void json_writer::field_int(const char* k, int64_t v) noexcept {
  key(k);
  printf("%lld", static_cast<long long>(v));
  first_ = false;
}

void json_writer::field_uint(const char* k, uint64_t v) noexcept {
  key(k);
  printf("%llu", static_cast<unsigned long long>(v));
  first_ = false;
}

// Written digit by digit, six decimals at most: printf's %g takes its decimal point from the
// program's locale, and a program that had called setlocale(LC_ALL, "") under de_DE got
// "fragmentation":0,995833 from strata_stats_json and in its STRATA_STATS_FILE (no longer JSON).
// A value that is not finite has no JSON number: null.  (Integer arithmetic: no libm.)
void json_writer::field_double(const char* k, double v) noexcept {
  key(k);
  double a = v < 0 ? -v : v;
  if (!__builtin_isfinite(v)) {
    raw("null");
  } else if (a >= 1e12) {  // a * 1e6 below stays under 2^64
    printf("%s%.0f", v < 0 ? "-" : "", a);  // no decimal point, and no grouping without '
  } else {
    auto scaled = static_cast<unsigned long long>(a * 1e6 + 0.5);
    unsigned long long whole = scaled / 1000000, micros = scaled % 1000000;
    printf("%s%llu", v < 0 && scaled != 0 ? "-" : "", whole);
    if (micros != 0) {
      char frac[8];
      snprintf(frac, sizeof frac, "%06llu", micros);
      int n = 6;
      while (frac[n - 1] == '0') --n;
      printf(".%.*s", n, frac);
    }
  }
  first_ = false;
}

void json_writer::field_text(const char* k, const char* v) noexcept {
  key(k);
  if (v == nullptr) {
    raw("null");
  } else {
    raw("\"");
    for (const char* c = v; *c; ++c) {
      if (*c == '"' || *c == '\\') {
        printf("\\%c", *c);
      } else if (static_cast<unsigned char>(*c) < 0x20) {
        printf("\\u%04x", *c);
      } else if (static_cast<unsigned char>(*c) < 0x80) {
        printf("%c", *c);
      } else if (size_t n = utf8_length(reinterpret_cast<const unsigned char*>(c)); n != 0) {
        printf("%.*s", static_cast<int>(n), c);
        c += n - 1;
      } else {
        // JSON is UTF-8: a byte of no character (a path's Latin-1 name, say) would make the whole
        // document unreadable to a strict parser.
        raw("\\ufffd");
      }
    }
    raw("\"");
  }
  first_ = false;
}

size_t json_writer::finish() noexcept {
  if (len_ > 0) buf_[pos_ < len_ ? pos_ : len_ - 1] = 0;
  return pos_;
}

}  // namespace strata::report
