// probes-s41 README section 4: realloc growth.  rgrow 0 LIMIT: one buffer grown by 1-64 B steps to LIMIT,
// 5 times; rgrow 1 LIMIT: 64 buffers grown in turn by 1-256 B steps.  gcc -O2 -o rgrow rgrow.c
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int mode=atoi(argv[1]); size_t limit=strtoull(argv[2],0,0);
  double t0=now(); unsigned long long ops=0;
  if(mode==0){ /* one buffer grown by 1..64 bytes to limit, 5 times */
    for(int rep=0;rep<5;rep++){ char*p=0; size_t n=0; unsigned r=rep;
      while(n<limit){ r=r*1103515245+12345; n+=1+(r>>16)%64; p=realloc(p,n); p[n-1]=1; ops++; }
      free(p);} }
  else { /* 64 buffers grown alternately */
    for(int rep=0;rep<3;rep++){ char*p[64]={0}; size_t n[64]={0}; unsigned r=rep; int done=0;
      while(!done){ for(int i=0;i<64;i++){ r=r*1103515245+12345; n[i]+=1+(r>>16)%256; p[i]=realloc(p[i],n[i]); p[i][n[i]-1]=1; ops++; if(n[i]>=limit) done=1; } }
      for(int i=0;i<64;i++) free(p[i]);} }
  printf("%.1f Mops/s\n", ops/(now()-t0)/1e6); return 0; }
