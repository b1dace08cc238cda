// strata::bench::arg_parser — the command line of a workload program (bench/), one flag at a time.
//
//   strata::bench::arg_parser args(argc, argv, "strata-bench-x",
//                                  "usage: strata-bench-x [--threads N] [--seconds S] [--smoke]");
//   while (args.next()) {
//     if (args.is("--threads")) o.threads = args.value<int>();
//     else if (args.is("--seconds")) o.seconds = args.value<double>();
//     else if (args.is("--smoke")) o.smoke = true;
//     else args.unknown();
//   }
//   if (o.threads < 1 || o.threads > 1024) args.fail("--threads must be 1..1024");
//
// `--help` prints the usage on stdout and exits with status 0.
// A bad command line prints "<program>: <why>" and the usage on stderr and exits with status 2:
// the lab records that as a failed sample, never as a number.  A number must be the whole value:
// "5abc", "", " 5", "5.5" for an integer, "-5" for an unsigned one or a value out of the type's
// range is refused (strtol/strtod alone would read 5, 0 or a wrapped value).  strtod's "inf" and
// "nan" are numbers: each program checks its own ranges after parsing.
#pragma once

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

namespace strata::bench {

class arg_parser {
 public:
  arg_parser(int argc, char** argv, const char* program, const char* usage) noexcept
      : argc_(argc), argv_(argv), program_(program), usage_(usage) {}

  // Steps to the next argument; false once every argument has been read.  --help prints the
  // usage on stdout and exits with status 0, as command-line programs do.
  bool next() noexcept {
    if (++i_ >= argc_) return false;
    if (is("--help")) {
      std::printf("%s\n", usage_);
      std::exit(0);
    }
    return true;
  }
  std::string_view current() const noexcept { return argv_[i_]; }
  bool is(std::string_view flag) const noexcept { return current() == flag; }

  // The value that follows the current flag (consumed), as T: std::string, const char*, a
  // floating-point type, or an integer type.
  template <class T = std::string>
  T value() {
    if (i_ + 1 >= argc_) fail("missing value for " + std::string(current()));
    const std::string flag(current());
    const char* v = argv_[++i_];
    if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, const char*>) {
      return v;
    } else {
      static_assert(std::is_arithmetic_v<T>, "value<T>: T must be a string, a number type");
      // strto* skip leading blanks and stop at the first character they cannot read: the whole
      // value must be the number, or the command line is refused.
      const bool blank = v[0] == 0 || std::isspace(static_cast<unsigned char>(v[0]));
      char* end = nullptr;
      errno = 0;
      if constexpr (std::is_floating_point_v<T>) {
        const long double x = std::strtold(v, &end);
        if (blank || *end != 0) bad(flag, v, "a number");
        if (errno == ERANGE || (std::isfinite(x) && (x > std::numeric_limits<T>::max() ||
                                                     x < std::numeric_limits<T>::lowest())))
          bad(flag, v, "a number in range");
        return T(x);
      } else if constexpr (std::is_signed_v<T>) {
        const long long x = std::strtoll(v, &end, 10);
        if (blank || *end != 0) bad(flag, v, "an integer");
        if (errno == ERANGE || x < (long long)std::numeric_limits<T>::min() ||
            x > (long long)std::numeric_limits<T>::max())
          bad(flag, v, "an integer in range");
        return T(x);
      } else {
        // strtoull reads "-5" as 2^64 - 5.
        const unsigned long long x = std::strtoull(v, &end, 10);
        if (blank || *end != 0 || v[0] == '-') bad(flag, v, "a non-negative integer");
        if (errno == ERANGE || x > (unsigned long long)std::numeric_limits<T>::max())
          bad(flag, v, "a non-negative integer in range");
        return T(x);
      }
    }
  }

  [[noreturn]] void unknown() const { fail("unknown argument " + std::string(current())); }

  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\n%s\n", program_, why.c_str(), usage_);
    std::exit(2);
  }

 private:
  [[noreturn]] void bad(const std::string& flag, const char* v, const char* want) const {
    fail(flag + " wants " + want + ", not \"" + v + "\"");
  }

  int argc_;
  char** argv_;
  const char* program_;
  const char* usage_;
  int i_ = 0;
};

}  // namespace strata::bench
