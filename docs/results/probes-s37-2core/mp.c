#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
int main(){ size_t n=8<<20; unsigned char*p=malloc(n); for(size_t i=0;i<n;i++)p[i]=i%251;
  uintptr_t pg=((uintptr_t)p+(4<<20))&~4095ul; int r=mprotect((void*)pg,4096,PROT_READ); 
  unsigned char*q=realloc(p,24<<20); printf("mprotect %d realloc %p\n",r,q); if(!q) return 1;
  size_t bad=0; for(size_t i=0;i<n;i++) bad+=q[i]!=i%251; printf("bad %zu\n",bad); free(q); return 0;}
