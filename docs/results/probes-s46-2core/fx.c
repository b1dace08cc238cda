#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdatomic.h>
#define Q 4096
static void *_Atomic q[Q];
static atomic_int stop;
static pthread_key_t key;
static void dtor(void *p){ free(p); }
static void *prod(void *a){ unsigned s=(unsigned)(long)a; while(!stop){ for(int i=0;i<64;i++){ s=s*1103515245+12345; size_t n=(s>>8)%(s&1?70000:512)+1; void*p=malloc(n); memset(p,1,n<64?n:64); void*o=atomic_exchange(&q[(s>>4)%Q],p); free(o);} void*t=malloc(100); void*old=pthread_getspecific(key); pthread_setspecific(key,t); free(old);} return 0; }
static void *shortlived(void *a){ void*p=malloc(300); pthread_setspecific(key,malloc(50)); void*big=malloc(3<<20); free(big); return p; }
static void h(int s){ (void)s; }
int main(int argc,char**argv){ int iters=atoi(argv[1]); pthread_key_create(&key,dtor); signal(SIGUSR1,h);
 pthread_t t[3]; for(long i=0;i<3;i++) pthread_create(&t[i],0,prod,(void*)(i+1));
 int bad=0;
 for(int i=0;i<iters;i++){
   pthread_t s; pthread_create(&s,0,shortlived,0); void*r; 
   pid_t pid=fork();
   if(pid==0){ void*p[100]; for(int j=0;j<100;j++)p[j]=malloc(j*37+1); for(int j=0;j<100;j++)free(p[j]); 
     pthread_t c; pthread_create(&c,0,shortlived,0); void*rr; pthread_join(c,&rr); free(rr);
     for(int j=0;j<Q;j+=97){ void*o=atomic_exchange(&q[j],0); free(o);} _exit(0);} 
   pthread_join(s,&r); free(r); pthread_kill(t[i%3],SIGUSR1);
   int st; waitpid(pid,&st,0); if(!WIFEXITED(st)||WEXITSTATUS(st)){bad++; fprintf(stderr,"child %d status %x\n",i,st);} }
 stop=1; for(int i=0;i<3;i++) pthread_join(t[i],0);
 for(int j=0;j<Q;j++) free(q[j]);
 printf("bad=%d\n",bad); return bad!=0; }
