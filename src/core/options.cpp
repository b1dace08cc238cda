#include "core/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "core/lock.h"
#include "core/report.h"
#include "os/os.h"

namespace strata::options {
namespace {

enum class kind { flag, integer, text };

struct descriptor {
  const char* env;
  kind type;
  int64_t def, lo, hi;
  const char* help;
};

constexpr descriptor table[] = {
#define STRATA_X(name, env, k, def, lo, hi, help) {"STRATA_" #env, kind::k, def, lo, hi, help},
    STRATA_OPTIONS(STRATA_X)
#undef STRATA_X
};
constexpr int count = static_cast<int>(option::count);

int64_t values[count] = {
#define STRATA_X(name, env, k, def, lo, hi, help) def,
    STRATA_OPTIONS(STRATA_X)
#undef STRATA_X
};
// Text values are copied: the environment block may be overwritten later (redis, nginx and
// others rewrite argv/environ to set their process title), and the value is read again at exit.
char text_storage[count][text_capacity];
const char* texts[count] = {};
// set_text may rewrite a value while strata_options_json reads it.
detail::spin_lock text_lock;

// Options that a layer above the core carries out, if it is linked in, and says so (applied).
constexpr bool applied_by_its_layer(int i) { return i == static_cast<int>(option::trace); }
bool is_applied[count] = {
#define STRATA_X(name, env, k, def, lo, hi, help) !applied_by_its_layer(static_cast<int>(option::name)),
    STRATA_OPTIONS(STRATA_X)
#undef STRATA_X
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// The value without its leading and trailing whitespace, as [begin, end): " 1" and "1 " are both
// accepted (strtoll alone would skip leading whitespace only, strcasecmp neither).
struct span {
  const char* begin;
  const char* end;
};
span trim(const char* s) {
  while (is_space(*s)) ++s;
  const char* e = s + strlen(s);
  while (e > s && is_space(e[-1])) --e;
  return {s, e};
}

bool parse_flag(const char* raw, int64_t* out) {
  static constexpr const char* yes[] = {"1", "true", "yes", "on"};
  static constexpr const char* no[] = {"0", "false", "no", "off"};
  span t = trim(raw);
  size_t n = static_cast<size_t>(t.end - t.begin);
  auto is = [&](const char* word) { return strlen(word) == n && strncasecmp(t.begin, word, n) == 0; };
  for (const char* y : yes)
    if (is(y)) return *out = 1, true;
  for (const char* w : no)
    if (is(w)) return *out = 0, true;
  return false;
}

bool parse_integer(const char* raw, const descriptor& d, int64_t* out) {
  span t = trim(raw);
  if (t.begin == t.end) return false;
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(t.begin, &end, 10);
  if (errno != 0 || end != t.end || v < d.lo || v > d.hi) return false;
  *out = v;
  return true;
}

char fold(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// The edit distance between a and b (insertions, deletions, substitutions; letters compared
// without case), or limit + 1 once it is past limit.  Names are short: the rows fit the stack.
size_t distance_within(const char* a, size_t na, const char* b, size_t nb, size_t limit) {
  constexpr size_t longest = 64;
  if (na > longest || nb > longest) return limit + 1;
  size_t row[longest + 1];
  for (size_t j = 0; j <= nb; ++j) row[j] = j;
  for (size_t i = 1; i <= na; ++i) {
    size_t diagonal = row[0], smallest = row[0] = i;
    for (size_t j = 1; j <= nb; ++j) {
      size_t above = row[j];
      bool same = fold(a[i - 1]) == fold(b[j - 1]);
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
      smallest = std::min(smallest, row[j]);
    }
    if (smallest > limit) return limit + 1;
  }
  return row[nb];
}

// A variable named like an option but not one (STRATA_PURGE_DELY, strata_purge_delay): a typo
// would otherwise leave the default in force without a word.  Only names within two edits of an
// option's are warned about: the GPU layer, the lab and the tests read STRATA_* variables of
// their own, none of them that close.
void warn_near_misses() {
  constexpr size_t near = 2;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* entry = *e;
    if (strncasecmp(entry, "STRATA_", 7) != 0) continue;
    const char* eq = strchr(entry, '=');
    size_t n = eq ? static_cast<size_t>(eq - entry) : strlen(entry);
    const char* meant = nullptr;
    size_t best = near + 1;
    for (const descriptor& d : table) {
      size_t dn = strlen(d.env);
      if (dn == n && strncmp(entry, d.env, n) == 0) {
        meant = nullptr;  // an option's own name
        break;
      }
      size_t k = distance_within(entry, n, d.env, dn, near);
      if (k < best) {
        best = k;
        meant = d.env;
      }
    }
    if (meant != nullptr)
      report::message("strata: warning: %.*s is not a strata option (did you mean %s?); ignored\n",
                      static_cast<int>(n < 200 ? n : 200), entry, meant);
  }
}

}  // namespace

void init() noexcept {
  // A setuid or setgid program (or one with file capabilities) takes no STRATA_* variable from
  // its caller, as glibc ignores LD_PRELOAD and the MALLOC_ tunables there: STRATA_TRACE and
  // STRATA_STATS_FILE would have it create and write files of the caller's choosing with its
  // privileges, STRATA_ABORT_ON_ERROR=0 would take the hardened build's abort away.
  if (os::secure_execution()) return;
  int saved = errno;
  for (int i = 0; i < count; ++i) {
    const descriptor& d = table[i];
    const char* s = getenv(d.env);
    if (s == nullptr) continue;
    int64_t v = 0;
    bool ok = true;
    switch (d.type) {
      case kind::flag: ok = parse_flag(s, &v); break;
      case kind::integer: ok = parse_integer(s, d, &v); break;
      case kind::text:
        // Empty is unset, as `STRATA_STATS_FILE= program` means to most programs' variables.
        if (*s == 0) {
          texts[i] = nullptr;
        } else if (strlen(s) >= text_capacity) {
          report::message("strata: warning: %s is longer than %zu bytes; ignored\n", d.env,
                          text_capacity - 1);
        } else {
          memcpy(text_storage[i], s, strlen(s) + 1);
          texts[i] = text_storage[i];
        }
        continue;
    }
    if (ok) {
      values[i] = v;
    } else if (d.type == kind::flag) {
      report::message("strata: warning: %s=\"%.*s%s\" is not a flag (use 0/1, true/false, yes/no, on/off); keeping the default %lld (%s: %s)\n",
                      d.env, report::quote_len(s), s, report::quote_cut(s), static_cast<long long>(d.def), d.env, d.help);
    } else {
      report::message("strata: warning: %s=\"%.*s%s\" is not an integer in [%lld, %lld]; keeping the default %lld (%s: %s)\n",
                      d.env, report::quote_len(s), s, report::quote_cut(s), static_cast<long long>(d.lo), static_cast<long long>(d.hi),
                      static_cast<long long>(d.def), d.env, d.help);
    }
  }
  warn_near_misses();
  errno = saved;
}

int64_t get(option o) noexcept { return values[static_cast<int>(o)]; }
const char* get_text(option o) noexcept { return texts[static_cast<int>(o)]; }
void set(option o, int64_t value) noexcept { values[static_cast<int>(o)] = value; }
bool set_text(option o, const char* value) noexcept {
  int i = static_cast<int>(o);
  if (value != nullptr && strlen(value) >= text_capacity) return false;
  detail::lock_guard g(text_lock);
  if (value == nullptr || *value == 0) {
    texts[i] = nullptr;
  } else {
    memcpy(text_storage[i], value, strlen(value) + 1);
    texts[i] = text_storage[i];
  }
  return true;
}
void applied(option o) noexcept { is_applied[static_cast<int>(o)] = true; }
void reset(option o) noexcept {
  int i = static_cast<int>(o);
  detail::lock_guard g(text_lock);
  values[i] = table[i].def;
  texts[i] = nullptr;
}

void lock_for_fork() noexcept { text_lock.lock(); }
void unlock_after_fork(bool child) noexcept {
  if (child) text_lock.reset();
  else text_lock.unlock();
}

size_t to_json(char* buf, size_t len) noexcept {
  report::json_writer w(buf, len);
  detail::lock_guard g(text_lock);
  w.open();
  for (int i = 0; i < count; ++i) {
    if (table[i].type == kind::text)
      w.field_text(table[i].env, is_applied[i] ? texts[i] : nullptr);
    else
      w.field_int(table[i].env, values[i]);
  }
  w.close();
  return w.finish();
}

}  // namespace strata::options
