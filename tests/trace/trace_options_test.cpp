// STRATA_TRACE as strata_options_json and stderr report it: listed only where the process
// records (the recorder is in libstrata.a as in the preload library, not in libstrata_api.a), and
// an expanded path that does not fit is refused with a warning, as STRATA_STATS_FILE's is.
//
// Each test runs a probe (options_probe.cpp) with STRATA_TRACE set: the recorder reads it once,
// when the program starts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

// A setuid program takes no STRATA_* variable from its caller: STRATA_TRACE and STRATA_STATS_FILE
// would have it create files of the caller's choosing with its privileges (as root, anywhere).
// The probe is copied, owned by nobody, with the setuid bit, and run by root with every kind of
// variable set; the files' folder is writable by anyone, so that only strata's refusal keeps
// them from being made.
TEST_F(TraceOptions, SetuidProgramTakesNoVariableFromItsCaller) {
  if (getuid() != 0) GTEST_SKIP() << "needs root, to make a program setuid to another user";
  const uid_t nobody = 65534;
  std::string probe = dir_ + "/probe", open_dir = dir_ + "/anyone";
  ASSERT_EQ(system(("cp '" STRATA_PROBE_STATIC "' '" + probe + "'").c_str()), 0);
  ASSERT_EQ(chown(probe.c_str(), nobody, nobody), 0);
  ASSERT_EQ(chmod(probe.c_str(), 04755), 0);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 01777), 0);
  std::string trace = open_dir + "/app.trace", stats = open_dir + "/stats.json";
  setenv("STRATA_STATS_FILE", stats.c_str(), 1);
  setenv("STRATA_PURGE_DELAY", "7", 1);
  result r = run(probe.c_str(), trace);
  unsetenv("STRATA_STATS_FILE");
  unsetenv("STRATA_PURGE_DELAY");
  ASSERT_EQ(r.status, 0) << r.err;
  if (r.out.find("euid 65534") == std::string::npos)
    GTEST_SKIP() << "the setuid bit had no effect here (a nosuid mount?): " << r.out;
  EXPECT_EQ(r.err, "");
  // Before: both files created, owned by nobody; "STRATA_PURGE_DELAY":7.
  EXPECT_FALSE(exists(trace));
  EXPECT_FALSE(exists(stats));
  EXPECT_NE(r.out.find("\"STRATA_TRACE\":null"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"STRATA_STATS_FILE\":null"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"STRATA_PURGE_DELAY\":40"), std::string::npos) << r.out;
  // The same copy without the setuid bit takes them (the folder lets it create both files).
  ASSERT_EQ(chmod(probe.c_str(), 0755), 0);
  setenv("STRATA_STATS_FILE", stats.c_str(), 1);
  r = run(probe.c_str(), trace);
  unsetenv("STRATA_STATS_FILE");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(exists(trace));
  EXPECT_TRUE(exists(stats));
}

}  // namespace
