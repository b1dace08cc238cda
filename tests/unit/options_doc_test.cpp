// The README's options table lists every STRATA_* variable of the X-macro in src/core/options.h,
// with the same default and a description that starts with its help text: documentation that
// drifts from the code fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/options.h"

namespace {

struct option_doc {
  const char* env;
  bool text;
  long long def;
  const char* help;
};

constexpr option_doc all[] = {
#define STRATA_X(name, env, kind, def, lo, hi, help) {"STRATA_" #env, std::string_view(#kind) == "text", def, help},
    STRATA_OPTIONS(STRATA_X)
#undef STRATA_X
};

std::string readme() {
  std::ifstream f(STRATA_SOURCE_DIR "/README.md");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST(OptionsDoc, EveryOptionIsInTheReadmeWithItsDefault) {
  std::string doc = readme();
  ASSERT_FALSE(doc.empty()) << "cannot read " STRATA_SOURCE_DIR "/README.md";
  for (const option_doc& o : all) {
    std::string row = "| `" + std::string(o.env) + "` | " + (o.text ? std::string("unset") : std::to_string(o.def)) + " | " + o.help;
    EXPECT_NE(doc.find(row), std::string::npos) << "README.md lacks the row starting " << row;
  }
}
