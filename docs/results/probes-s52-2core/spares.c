#include "lat.h"
// N pages of the 1 KiB class, each holding one live block (its others freed); then, per step,
// free the live block of one page (the page empties: a spare) and malloc a 256 KiB block kept live
// (it needs fresh slices).  Times the 256 KiB mallocs.
int main(int argc,char**argv){ size_t N=argc>1?atol(argv[1]):5000; int steps=argc>2?atoi(argv[2]):2000;
 tsc_calib(); size_t per=64, total=N*per; void**b=malloc(total*sizeof(void*));
 for(size_t i=0;i<total;i++){b[i]=malloc(1000);}
 void**live=malloc(N*sizeof(void*)); for(size_t i=0;i<N;i++) live[i]=b[i*per];
 for(size_t i=0;i<total;i++) if(i%per) free(b[i]);
 printf("setup rss=%ld MB\n",rss_kb()/1024);
 lat_t big={0}, sm={0}; void**bigs=malloc(steps*sizeof(void*));
 for(int s=0;s<steps;s++){ TIME(&sm, free(live[(size_t)s*7919%N])); live[(size_t)s*7919%N]=0; TIME(&big, bigs[s]=malloc(256<<10)); ((char*)bigs[s])[0]=1; }
 lat_report("free 1KiB",&sm); lat_report("malloc 256KiB",&big); printf("rss=%ld MB\n",rss_kb()/1024); return 0;}
