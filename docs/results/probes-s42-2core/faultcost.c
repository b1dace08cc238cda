#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <string.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t sz=256<<20; int mode=argv[1][0]-'0'; size_t chunk=64<<10;
  char*p=mmap(0,sz+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  p=(char*)(((unsigned long)p+(2<<20)-1)&~((2ul<<20)-1));
  if(mode==2) madvise(p,sz,MADV_HUGEPAGE);
  double t0=now();
  if(mode==1) for(size_t o=0;o<sz;o+=chunk) { if(madvise(p+o,chunk,MADV_POPULATE_WRITE)) {perror("populate");return 1;} }
  for(size_t o=0;o<sz;o+=4096) p[o]=1;
  double t1=now();
  printf("mode %d: %.1f ns per 4K page\n",mode,(t1-t0)*1e9/(sz/4096));
}
