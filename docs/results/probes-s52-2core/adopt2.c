#include "lat.h"
#include <pthread.h>
static int K=15; static size_t SZ=2u<<20; static void **keep; static int ki; static lat_t thfirst;
static void* th(void*a){ for(int i=0;i<K;i++){char*p; if(i==0){TIME(&thfirst,p=malloc(SZ));} else p=malloc(SZ); p[0]=1;keep[ki++]=p;} return 0;}
int main(int argc,char**argv){ int T=argc>1?atoi(argv[1]):500; if(argc>2)SZ=strtoull(argv[2],0,0); if(argc>3)K=atoi(argv[3]);
 tsc_calib(); keep=calloc((size_t)T*K+10000,sizeof(void*));
 for(int i=0;i<K;i++){char*p=malloc(SZ);p[0]=1;keep[ki++]=p;}
 for(int t=0;t<T;t++){pthread_t x;pthread_create(&x,0,th,0);pthread_join(x,0);}
 printf("after %d threads rss=%ld MB\n",T,rss_kb()/1024);
 lat_t first={0}, rest={0};
 TIME(&first, keep[ki++]=malloc(SZ)); ((char*)keep[ki-1])[0]=1;
 for(int i=0;i<200;i++){ TIME(&rest, keep[ki++]=malloc(SZ)); ((char*)keep[ki-1])[0]=1; }
 lat_report("threads' first malloc",&thfirst);
 lat_report("main first malloc after",&first); lat_report("main next 200 mallocs",&rest);
 printf("rss=%ld MB\n",rss_kb()/1024);
 return 0;}
