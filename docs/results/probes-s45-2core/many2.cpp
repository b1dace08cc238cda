#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cstdint>
static inline uint64_t xs(uint64_t& s){s^=s<<13;s^=s>>7;s^=s<<17;return s;}
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(int argc,char**argv){
  long n=atol(argv[1]); uint64_t r=88172645463325252ull;
  std::vector<char*> v(n);
  double t0=now();
  for(long i=0;i<n;i++){size_t sz=8+(xs(r)%57); v[i]=(char*)malloc(sz); v[i][0]=1;}
  double t1=now();
  for(long i=0;i<n;i+=2){ long k=xs(r)%n; free(v[k]); v[k]=nullptr; }
  double t2=now();
  for(long i=0;i<n;i++) if(!v[i]){size_t sz=8+(xs(r)%57); v[i]=(char*)malloc(sz); v[i][0]=2;}
  double t3=now();
  for(long i=0;i<n;i++) free(v[i]);
  double t4=now();
  fprintf(stderr,"alloc %.3f  randfree %.3f  refill %.3f  freeall %.3f\n",t1-t0,t2-t1,t3-t2,t4-t3);
  return 0;
}
