/* Which execution pipes 512-bit instructions use on this machine (Zen 4 in the VM):
 * each line times 4 independent chains of a multiply-add (or an add) next to 4 chains
 * of the instruction named, in thread CPU time at the 3.65 GHz measured by a chain of
 * dependent integer adds. 4 cycles: the two share nothing; 8: they share the pipes.
 *
 *   gcc -O2 -mavx512f -mavx512dq -mavx512bw -o pipes pipes.c && taskset -c 1 ./pipes
 *
 * With -DFULL_WIDTH, for a host whose 512-bit operations are full width (Zen 5 in the VM
 * since 2026-11-28): each line times 8 independent chains of a multiply-add (or an add)
 * next to 8 chains of the instruction named, in ns an iteration of thread CPU time.
 * Eight chains of one instruction alone are bound by its latency (multiply-add: 4
 * cycles, ~0.95 ns at ~4.4 GHz); 16 multiply-adds on two pipes take 8 cycles (~1.8 ns).
 * So a pair near 1.0 shares nothing, near 1.8 shares the pipes.
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

#ifdef FULL_WIDTH
#define RUN(name, body)                                                           \
    {                                                                             \
        long n = 20000000;                                                        \
        double t = now();                                                         \
        for (long i = 0; i < n; i++) { body }                                     \
        printf("%-34s %5.2f\n", name, (now() - t) * 1e9 / n);          \
    }
#define EIGHT(X, p) X(p##0) X(p##1) X(p##2) X(p##3) X(p##4) X(p##5) X(p##6) X(p##7)
#define PAIR(label, X)                                                            \
    RUN("8 fma + 8 " label, EIGHT(FMA, a) EIGHT(X, d)) \
    RUN("8 add + 8 " label, EIGHT(ADD, a) EIGHT(X, d)) \
    RUN("8 " label, EIGHT(X, d))

int main(void) {
    __m512 a0 = _mm512_set1_ps(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0, a8 = a0, b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    __m512 d0 = a0, d1 = a0, d2 = a0, d3 = a0, d4 = a0, d5 = a0, d6 = a0, d7 = a0;
    __asm__ volatile("kxnorw %k1,%k1,%k1");
    RUN("8 div", EIGHT(DIV, d))
    RUN("8 fma + 8 div", EIGHT(FMA, a) EIGHT(DIV, d))
    RUN("8 add + 8 div", EIGHT(ADD, a) EIGHT(DIV, d))
    RUN("8 rcp", EIGHT(RCP, d))
    RUN("8 fma", EIGHT(FMA, a))
    RUN("8 fma + 8 fma", EIGHT(FMA, a) EIGHT(FMA, d))
    PAIR("add", ADD) PAIR("mul", MUL) PAIR("vcmpltps", CMP) PAIR("vpcmpltud", UCMP)
    PAIR("vpmovd2m", D2M) PAIR("vpternlogd", TERN) PAIR("vxorps {k}", MXOR)
    PAIR("vblendmps {k}", BLEND) PAIR("vpaddd", PADDD) PAIR("vandps", AND)
    PAIR("vpsrad", SHIFT) PAIR("vcvtdq2ps", CVT) PAIR("vminps", MIN) PAIR("vpermps", PERM)
    PAIR("vpermi2ps", PERM2) PAIR("vgetexpps", GETEXP) PAIR("vrcp14ps", RCP)
    RUN("8 fma + 1 vdivps", EIGHT(FMA, a) DIV(a8))
    RUN("8 fma + 2 vdivps", EIGHT(FMA, a) DIV(a8) DIV(d0))
    printf("%f\n", a0[0] + a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0] + a8[0] + d0[0]+d1[0]+d2[0]+d3[0]+d4[0]+d5[0]+d6[0]+d7[0]);
    return 0;
}
#else
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
#endif
