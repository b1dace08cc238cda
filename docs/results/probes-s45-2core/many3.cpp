#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cstdint>
static inline uint64_t xs(uint64_t& s){s^=s<<13;s^=s>>7;s^=s<<17;return s;}
// phase selector: 1 = stop before freeall (baseline), 2 = include freeall
int main(int argc,char**argv){
  long n=atol(argv[1]); int full=atoi(argv[2]); uint64_t r=88172645463325252ull;
  std::vector<char*> v(n);
  for(long i=0;i<n;i++){size_t sz=8+(xs(r)%57); v[i]=(char*)malloc(sz); v[i][0]=1;}
  for(long i=0;i<n;i+=2){ long k=xs(r)%n; free(v[k]); v[k]=nullptr; }
  for(long i=0;i<n;i++) if(!v[i]){size_t sz=8+(xs(r)%57); v[i]=(char*)malloc(sz); v[i][0]=2;}
  if(full) for(long i=0;i<n;i++) free(v[i]);
  _Exit(0);
}
