#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>
static double tsc_ghz;
static void tsc_calib(void){struct timespec a,b;clock_gettime(CLOCK_MONOTONIC,&a);uint64_t t0=__rdtsc();
 do clock_gettime(CLOCK_MONOTONIC,&b); while((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec)<50e6);
 uint64_t t1=__rdtsc(); tsc_ghz=(t1-t0)/((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec));}
typedef struct { uint64_t *v; size_t n, cap; uint64_t max; } lat_t;
static void lat_add(lat_t*l,uint64_t t){ if(l->n==l->cap){l->cap=l->cap?l->cap*2:1024;l->v=realloc(l->v,l->cap*8);} l->v[l->n++]=t; if(t>l->max)l->max=t;}
static int cmpu(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
static void lat_report(const char*name,lat_t*l){ if(!l->n){printf("%s: none\n",name);return;}
 qsort(l->v,l->n,8,cmpu); double us=1e-3/tsc_ghz;
 printf("%-28s n=%zu p50=%.2fus p99=%.2fus p99.99=%.2fus max=%.1fus\n",name,l->n,l->v[l->n/2]*us,l->v[(size_t)(l->n*0.99)]*us,l->v[(size_t)(l->n*0.9999)]*us,l->max*us);}
static long rss_kb(void){FILE*f=fopen("/proc/self/statm","r");long a,b;fscanf(f,"%ld %ld",&a,&b);fclose(f);return b*4;}
#define TIME(l, expr) do{uint64_t _t0=__rdtsc(); expr; uint64_t _t1=__rdtsc(); lat_add(l,_t1-_t0);}while(0)
