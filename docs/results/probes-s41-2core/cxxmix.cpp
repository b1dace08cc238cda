// probes-s41 README section 2: C++ container shapes.  cxxmix MODE  (0: std::map<string,string> churned,
// torn down and rebuilt 4 times; REPS=1 prints the minor faults after each round; 1: unordered_map of
// vectors built and dropped 10 times; 2: a list of shared_ptr<string>).  g++ -O2 -o cxxmix cxxmix.cpp
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>
#include <sys/resource.h>
static long flt(){struct rusage u;getrusage(RUSAGE_SELF,&u);return u.ru_minflt;}
#include <list>
#include <memory>
int main(int argc, char** argv) {
  int mode = atoi(argv[1]);
  auto t0 = std::chrono::steady_clock::now();
  unsigned r = 1; auto rnd = [&] { r = r * 1103515245 + 12345; return r >> 8; };
  size_t sink = 0;
  if (mode == 0) {  // map<string,string> churn
    for (int rep = 0; rep < 4; ++rep) {
      std::map<std::string, std::string> m;
      for (int i = 0; i < 300000; ++i) { m[std::to_string(rnd() % 200000) + "key-suffix-long-enough"] = std::string(rnd() % 64, 'x'); if (i % 3 == 0) m.erase(std::to_string(rnd() % 200000) + "key-suffix-long-enough"); }
      sink += m.size();
      if (getenv("REPS")) fprintf(stderr, "rep %d faults %ld\n", rep, flt());
    }
  } else if (mode == 1) {  // unordered_map<int, vector<int>> build/teardown phases
    for (int rep = 0; rep < 10; ++rep) {
      std::unordered_map<int, std::vector<int>> m;
      for (int i = 0; i < 200000; ++i) m[rnd() % 50000].push_back(i);
      sink += m.size();
    }
  } else {  // list of shared_ptr nodes, random erase/insert
    std::list<std::shared_ptr<std::string>> l;
    for (int i = 0; i < 2000000; ++i) {
      l.push_back(std::make_shared<std::string>(rnd() % 40 + 1, 'y'));
      if (l.size() > 100000) { l.pop_front(); }
    }
    sink += l.size();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("%.3f s (%zu)\n", s, sink);
}
