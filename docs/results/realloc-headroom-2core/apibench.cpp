// Per-entry-point cost: N operations of one malloc-family shape, fixed count.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <new>
#include <string>
#include <vector>
static inline uint64_t xs(uint64_t& s){s^=s<<13;s^=s>>7;s^=s<<17;return s;}
int main(int argc,char**argv){
  const char* m=argv[1]; long n=atol(argv[2]); uint64_t r=88172645463325252ull; long sink=0;
  std::vector<void*> slot(256,nullptr);
  if(!strcmp(m,"calloc")){ for(long i=0;i<n;i++){size_t k=xs(r)%200; free(slot[k]); size_t sz=8+(xs(r)%248); slot[k]=calloc(1,sz);} }
  else if(!strcmp(m,"calloc4k")){ for(long i=0;i<n;i++){size_t k=xs(r)&15; free(slot[k]); size_t sz=1024+(xs(r)%8192); slot[k]=calloc(1,sz);} }
  else if(!strcmp(m,"memalign64")){ for(long i=0;i<n;i++){size_t k=xs(r)%200; free(slot[k]); void*p; if(posix_memalign(&p,64,8+(xs(r)%248)))abort(); slot[k]=p;} }
  else if(!strcmp(m,"aligned_new")){ struct alignas(32) T{char c[48];}; std::vector<T*> v(200,nullptr); for(long i=0;i<n;i++){size_t k=xs(r)%200; delete v[k]; v[k]=new T;} for(auto*p:v) delete p; }
  else if(!strcmp(m,"sized_new")){ struct T{char c[40];}; std::vector<T*> v(200,nullptr); for(long i=0;i<n;i++){size_t k=xs(r)%200; delete v[k]; v[k]=new T;} for(auto*p:v) delete p; }
  else if(!strcmp(m,"usable")){ for(long i=0;i<n;i++){size_t k=xs(r)%200; free(slot[k]); slot[k]=malloc(8+(xs(r)%248)); sink+=malloc_usable_size(slot[k]);} }
  else if(!strcmp(m,"realloc_grow")){ for(long i=0;i<n/64;i++){ char*p=nullptr; size_t sz=0; for(int j=0;j<64;j++){sz+=1+(xs(r)%32); p=(char*)realloc(p,sz); p[sz-1]=1;} free(p);} }
  else if(!strcmp(m,"realloc_big")){ for(long i=0;i<n/256;i++){ char*p=nullptr; size_t sz=0; for(int j=0;j<256;j++){sz+=64+(xs(r)%512); p=(char*)realloc(p,sz); p[sz-1]=1;} free(p);} }
  else if(!strcmp(m,"string")){ for(long i=0;i<n/32;i++){ std::string s; for(int j=0;j<32;j++) s+= "abcdefghijklmnopq"; sink+=s.size(); } }
  else if(!strcmp(m,"strdup")){ const char* src="some key string of moderate length"; for(long i=0;i<n;i++){size_t k=xs(r)%200; free(slot[k]); slot[k]=strdup(src+(xs(r)%20));} }
  else if(!strcmp(m,"realloc_shrink")){ for(long i=0;i<n;i++){size_t k=xs(r)%200; free(slot[k]); char*p=(char*)malloc(1024); p=(char*)realloc(p,16+(xs(r)%200)); slot[k]=p;} }
  else { fprintf(stderr,"mode?\n"); return 2; }
  for(void*p:slot) free(p);
  printf("%ld\n", sink&1); return 0;
}
