#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <errno.h>
#include <sys/resource.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static long flt(){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_minflt;}
static void maps(char*lo,char*hi){FILE*f=fopen("/proc/self/maps","r");char l[256];int n=0;while(fgets(l,256,f)){unsigned long a,b;sscanf(l,"%lx-%lx",&a,&b);if(a<(unsigned long)hi&&b>(unsigned long)lo){n++;printf("  %s",l);}}fclose(f);printf("  vmas=%d\n",n);}
int main(){
  size_t M=1<<20; size_t a=20*M,b=10*M;
  char*A=mmap(0,a,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); memset(A,1,a);
  char*B=mmap(0,b,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); memset(B,2,b);
  double t0=now(); long f0=flt();
  char*A2=mremap(A,a,a+b,MREMAP_MAYMOVE); double t1=now();
  char*B2=mremap(B,b,b,MREMAP_MAYMOVE|MREMAP_FIXED,A2+a); double t2=now();
  printf("grow %.1f us, move %.1f us, %p %p\n",(t1-t0)*1e6,(t2-t1)*1e6,A2,B2);
  maps(A2,A2+a+b);
  memset(A2,3,a+b); printf("faults after touching all: %ld (pages %zu)\n",flt()-f0,(a+b)/4096);
  char*A3=mremap(A2,a+b,a+b+M,MREMAP_MAYMOVE); printf("grow multi-vma: %p errno %d\n",A3,errno);
  char*t=mmap(0,64*M,PROT_NONE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  char*A4=mremap(A2,a+b,a+b,MREMAP_MAYMOVE|MREMAP_FIXED,t); printf("move multi-vma: %p errno %d\n",A4,errno);
  // time a fault-in of 10MB fresh
  char*C=mmap(0,b,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); double t3=now(); memset(C,1,b); double t4=now();
  printf("fault 10MB: %.1f us; memset again %.1f us\n",(t4-t3)*1e6,({double x=now();memset(C,2,b);(now()-x)*1e6;}));
  // unaligned move cost of 10MB resident
  char*D=mmap(0,b+4096,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); memset(D,1,b+4096);
  double t5=now(); char*D2=mremap(D+4096,b,b,MREMAP_MAYMOVE|MREMAP_FIXED,t+4096*3); double t6=now(); printf("unaligned move 10MB: %.1f us %p\n",(t6-t5)*1e6,D2);
  return 0;}
