#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cstdint>
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(int argc,char**argv){
  long n=atol(argv[1]); size_t sz=atol(argv[2]); int rounds=atoi(argv[3]);
  std::vector<char*> v(n);
  double ta=0, tf=0;
  for(int r=0;r<rounds;r++){
    double t0=now();
    for(long i=0;i<n;i++){ v[i]=(char*)malloc(sz); v[i][0]=1;}
    double t1=now();
    for(long i=0;i<n;i++) free(v[i]);
    double t2=now(); ta+=t1-t0; tf+=t2-t1;
  }
  fprintf(stderr,"alloc %.1f ns  free %.1f ns\n",ta/n/rounds*1e9,tf/n/rounds*1e9);
}
