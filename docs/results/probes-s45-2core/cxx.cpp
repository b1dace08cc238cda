#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>
#include <memory>
#include <cstdint>
static inline uint64_t xs(uint64_t& s){s^=s<<13;s^=s>>7;s^=s<<17;return s;}
int main(int argc,char**argv){
  const char* m=argv[1]; long n=atol(argv[2]); uint64_t r=88172645463325252ull; long sink=0;
  if(!strcmp(m,"vector")){ for(long i=0;i<n/1000;i++){ std::vector<int> v; for(int j=0;j<1000;j++) v.push_back(j); sink+=v.size(); } }
  else if(!strcmp(m,"umap")){ std::unordered_map<uint64_t,uint64_t> h; for(long i=0;i<n;i++){ uint64_t k=xs(r)%50000; if(i&1) h.erase(k); else h[k]=i; } sink=h.size(); }
  else if(!strcmp(m,"list")){ for(long i=0;i<n/1000;i++){ std::list<int> l; for(int j=0;j<1000;j++) l.push_back(j); sink+=l.size(); } }
  else if(!strcmp(m,"deque")){ std::deque<int> d; for(long i=0;i<n;i++){ d.push_back(i); if(d.size()>5000) d.pop_front(); } sink=d.size(); }
  else if(!strcmp(m,"strings")){ std::vector<std::string> v(1000); for(long i=0;i<n;i++){ size_t k=xs(r)%1000; v[k]=std::string(16+xs(r)%100,'x'); } sink=v[0].size(); }
  else if(!strcmp(m,"shared")){ std::vector<std::shared_ptr<int>> v(1000); for(long i=0;i<n;i++){ v[xs(r)%1000]=std::make_shared<int>(i);} sink=*v[0]; }
  else if(!strcmp(m,"map")){ std::map<int,int> mm; for(long i=0;i<n;i++){ int k=xs(r)%20000; if(i&1) mm.erase(k); else mm[k]=i; } sink=mm.size(); }
  printf("%ld\n", sink&1);
}
