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
// A bad command line prints "<program>: <why>" and the usage on stderr and exits with status 2:
// the lab records that as a failed sample, never as a number.  Values convert the way the programs
// always did (atoi, atoll, atof, strtoull): each program checks its own ranges after parsing.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>

namespace strata::bench {

class arg_parser {
 public:
  arg_parser(int argc, char** argv, const char* program, const char* usage) noexcept
      : argc_(argc), argv_(argv), program_(program), usage_(usage) {}

  // Steps to the next argument; false once every argument has been read.
  bool next() noexcept { return ++i_ < argc_; }
  std::string_view current() const noexcept { return argv_[i_]; }
  bool is(std::string_view flag) const noexcept { return current() == flag; }

  // The value that follows the current flag (consumed), as T: std::string, const char*, a
  // floating-point type, or an integer type.
  template <class T = std::string>
  T value() {
    if (i_ + 1 >= argc_) fail("missing value for " + std::string(current()));
    const char* v = argv_[++i_];
    if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, const char*>) {
      return v;
    } else if constexpr (std::is_floating_point_v<T>) {
      return T(std::atof(v));
    } else if constexpr (std::is_same_v<T, int>) {
      return std::atoi(v);
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      return T(std::atoll(v));
    } else {
      static_assert(std::is_integral_v<T>, "value<T>: T must be a string, a number type");
      return T(std::strtoull(v, nullptr, 10));
    }
  }

  [[noreturn]] void unknown() const { fail("unknown argument " + std::string(current())); }

  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\n%s\n", program_, why.c_str(), usage_);
    std::exit(2);
  }

 private:
  int argc_;
  char** argv_;
  const char* program_;
  const char* usage_;
  int i_ = 0;
};

}  // namespace strata::bench
