// STRATA_TRACE as strata_options_json and stderr report it: listed only where the process
// records (the recorder is in libstrata.a as in the preload library, not in libstrata_api.a), and
// an expanded path that does not fit is refused with a warning, as STRATA_STATS_FILE's is.
//
// Each test runs a probe (options_probe.cpp) with STRATA_TRACE set: the recorder reads it once,
// when the program starts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct result {
  int status;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class TraceOptions : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/strata-trace-options-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { ASSERT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0); }

  // Runs probe with STRATA_TRACE=trace (the variable is set in this process, which does not
  // record: it is linked with libstrata_api.a).
  result run(const char* probe, const std::string& trace) {
    setenv("STRATA_TRACE", trace.c_str(), 1);
    std::string out = dir_ + "/out", err = dir_ + "/err";
    int status = system((std::string(probe) + " >" + out + " 2>" + err).c_str());
    unsetenv("STRATA_TRACE");
    return {status, slurp(out), slurp(err)};
  }
  bool exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
  }

  std::string dir_;
};

TEST_F(TraceOptions, StaticLibraryRecordsAndListsThePath) {
  std::string path = dir_ + "/app.trace";
  result r = run(STRATA_PROBE_STATIC, path);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("\"STRATA_TRACE\":\"" + path + "\""), std::string::npos) << r.out;
  EXPECT_TRUE(exists(path));
}

TEST_F(TraceOptions, ApiLibraryHasNoRecorderAndListsNull) {
  std::string path = dir_ + "/app.trace";
  result r = run(STRATA_PROBE_API, path);
  ASSERT_EQ(r.status, 0) << r.err;
  // Before: "STRATA_TRACE":"<path>", with nothing recorded.
  EXPECT_NE(r.out.find("\"STRATA_TRACE\":null"), std::string::npos) << r.out;
  EXPECT_FALSE(exists(path));
}

TEST_F(TraceOptions, FileThatCannotBeCreatedIsListedNull) {
  std::string path = dir_ + "/no-such-directory/app.trace";
  result r = run(STRATA_PROBE_STATIC, path);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("cannot create " + path), std::string::npos) << r.err;
  // Before: "STRATA_TRACE":"<path>" after "cannot create <path>: ...: nothing is recorded".
  EXPECT_NE(r.out.find("\"STRATA_TRACE\":null"), std::string::npos) << r.out;
}

TEST_F(TraceOptions, PathTooLongOnceExpandedWarnsAndRecordsNothing) {
  // 4095 bytes (the most an option keeps), each %p at least two digits once expanded.
  std::string path = dir_ + "/";
  while (path.size() + 2 <= 4095) path += "%p";
  ASSERT_LE(path.size(), 4095u);
  result r = run(STRATA_PROBE_STATIC, path);
  ASSERT_EQ(r.status, 0) << r.err;
  // Before: the path was cut at 4096 bytes and tried: "cannot create <cut path>: File name too long".
  EXPECT_EQ(r.err, "strata: warning: STRATA_TRACE is too long once expanded (over 4095 bytes): "
                   "nothing is recorded\n");
  EXPECT_NE(r.out.find("\"STRATA_TRACE\":null"), std::string::npos) << r.out;
}

TEST_F(TraceOptions, EmptyValueIsUnset) {
  result r = run(STRATA_PROBE_STATIC, "");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // Before: "STRATA_TRACE":"".
  EXPECT_NE(r.out.find("\"STRATA_TRACE\":null"), std::string::npos) << r.out;
}

}  // namespace
