/* Which execution pipes 512-bit instructions use on this machine (Zen 4 in the VM):
 * each line times 4 independent chains of a multiply-add (or an add) next to 4 chains
 * of the instruction named, in thread CPU time at the 3.65 GHz measured by a chain of
 * dependent integer adds. 4 cycles: the two share nothing; 8: they share the pipes.
 *
 *   gcc -O2 -mavx512f -mavx512dq -mavx512bw -o pipes pipes.c && taskset -c 1 ./pipes
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define FMA(r) __asm__ volatile("vfmadd213ps %2,%1,%0" : "+v"(r) : "v"(b), "v"(c));
#define ADD(r) __asm__ volatile("vaddps %1,%0,%0" : "+v"(r) : "v"(b));
#define MUL(r) __asm__ volatile("vmulps %1,%0,%0" : "+v"(r) : "v"(b));
#define CMP(r) __asm__ volatile("vcmpltps %1,%0,%%k2" ::"v"(r), "v"(b));
#define UCMP(r) __asm__ volatile("vpcmpltud %1,%0,%%k2" ::"v"(r), "v"(b));
#define D2M(r) __asm__ volatile("vpmovd2m %0,%%k2" ::"v"(r));
#define TERN(r) __asm__ volatile("vpternlogd $226,%1,%1,%0" : "+v"(r) : "v"(b));
#define MXOR(r) __asm__ volatile("vxorps %1,%0,%0%{%%k1%}" : "+v"(r) : "v"(b));
#define BLEND(r) __asm__ volatile("vblendmps %1,%0,%0%{%%k1%}" : "+v"(r) : "v"(b));
#define PADDD(r) __asm__ volatile("vpaddd %1,%0,%0" : "+v"(r) : "v"(b));
#define AND(r) __asm__ volatile("vandps %1,%0,%0" : "+v"(r) : "v"(b));
#define SHIFT(r) __asm__ volatile("vpsrad $23,%0,%0" : "+v"(r));
#define CVT(r) __asm__ volatile("vcvtdq2ps %0,%0" : "+v"(r));
#define MIN(r) __asm__ volatile("vminps %1,%0,%0" : "+v"(r) : "v"(b));
#define PERM(r) __asm__ volatile("vpermps %1,%2,%0" : "+v"(r) : "v"(b), "v"(c));
#define PERM2(r) __asm__ volatile("vpermi2ps %2,%1,%0" : "+v"(r) : "v"(b), "v"(c));
#define GETEXP(r) __asm__ volatile("vgetexpps %0,%0" : "+v"(r));
#define RCP(r) __asm__ volatile("vrcp14ps %0,%0" : "+v"(r));
#define DIV(r) __asm__ volatile("vdivps %1,%0,%0" : "+v"(r) : "v"(b));

#define RUN(name, body)                                                           \
    {                                                                             \
        long n = 20000000;                                                        \
        double t = now();                                                         \
        for (long i = 0; i < n; i++) { body }                                     \
        printf("%-34s %5.2f cycles\n", name, (now() - t) * 3.65e9 / n);          \
    }
#define PAIR(label, X)                                                            \
    RUN("4 fma + 4 " label, FMA(a0) FMA(a1) FMA(a2) FMA(a3) X(a4) X(a5) X(a6) X(a7)) \
    RUN("4 add + 4 " label, ADD(a0) ADD(a1) ADD(a2) ADD(a3) X(a4) X(a5) X(a6) X(a7))

int main(void) {
    __m512 a0 = _mm512_set1_ps(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0, a8 = a0, b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    __asm__ volatile("kxnorw %k1,%k1,%k1");
    RUN("8 fma", FMA(a0) FMA(a1) FMA(a2) FMA(a3) FMA(a4) FMA(a5) FMA(a6) FMA(a7))
    PAIR("add", ADD) PAIR("mul", MUL) PAIR("vcmpltps", CMP) PAIR("vpcmpltud", UCMP)
    PAIR("vpmovd2m", D2M) PAIR("vpternlogd", TERN) PAIR("vxorps {k}", MXOR)
    PAIR("vblendmps {k}", BLEND) PAIR("vpaddd", PADDD) PAIR("vandps", AND)
    PAIR("vpsrad", SHIFT) PAIR("vcvtdq2ps", CVT) PAIR("vminps", MIN) PAIR("vpermps", PERM)
    PAIR("vpermi2ps", PERM2) PAIR("vgetexpps", GETEXP) PAIR("vrcp14ps", RCP)
    RUN("12 fma + 1 vdivps (a chain)", FMA(a0) FMA(a1) FMA(a2) FMA(a3) FMA(a4) FMA(a5)
        FMA(a6) FMA(a7) FMA(a0) FMA(a1) FMA(a2) FMA(a3) DIV(a8))
    printf("%f\n", a0[0] + a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0] + a8[0]);
    return 0;
}
