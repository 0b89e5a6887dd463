/* What the C kernels built by native.py share: which instruction set a build targets, conversions between
 * float32 and the 16-bit float formats, and the int8 quantizer of a row of bfloat16 activations (w4a8_cpu.c and
 * w8a8_cpu.c quantize the same way). Every function is static: a kernel that does not call one compiles none of it.
 * native.py keys its cache on this file's bytes too.
 *
 * ISA macros, each 0 or 1, from the compiler's own for the build's -march; a kernel's paths test these only:
 *   SGL_X86          x86 (the intrinsics headers exist)
 *   SGL_F16C         float16 <-> float32 conversion instructions
 *   SGL_AVX2         AVX2 with FMA and F16C (every -march GCC knows with AVX2 has both: x86-64-v3 and up)
 *   SGL_AVX512       AVX-512 F: 16-lane float32 / int32 registers
 *   SGL_AVX512_VNNI  AVX-512 F, BW and VNNI: 64 u8 x s8 products summed into 16 int32 lanes per instruction
 *   SGL_AVX512_BF16  AVX-512 F and BF16: bfloat16 pair dot products into float32 lanes
 */
#ifndef SGL_NATIVE_H
#define SGL_NATIVE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define SGL_X86 1
#include <immintrin.h>
#else
#define SGL_X86 0
#endif

#if defined(__F16C__) && SGL_X86
#define SGL_F16C 1
#else
#define SGL_F16C 0
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SGL_AVX2 1
#else
#define SGL_AVX2 0
#endif

#if defined(__AVX512F__)
#define SGL_AVX512 1
#else
#define SGL_AVX512 0
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SGL_AVX512_VNNI 1
#else
#define SGL_AVX512_VNNI 0
#endif

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define SGL_AVX512_BF16 1
#else
#define SGL_AVX512_BF16 0
#endif

static inline float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* round to nearest even (a NaN whose payload sits in the low half may round to infinity: never produced here) */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
#if SGL_F16C
    return _cvtsh_ss(h);
#else
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, f = h & 0x3FFu;
    float v = e == 0 ? ldexpf((float)f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexpf((float)(f | 0x400u), (int)e - 25);
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= sign;
    memcpy(&v, &u, 4);
    return v;
#endif
}

#if SGL_AVX512
/* 16 float32 -> 16 bfloat16 bits, each rounded to nearest even as f32_to_bf16 */
static inline __attribute__((always_inline)) __m256i f32x16_to_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF),
                                             _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
}
#endif

/* One row of K bfloat16 activations (K % 32 == 0) -> a [digits][K] int8, s [K/32] block scales, and sa [K/G] (G
 * = 16 or 32, the weight block) = s of the activation block times the sum of the weight block's integers.
 * digits 1: x ~= s * a0, s = max|x| / 127, a0 = round_half_even(x * 127 / max|x|) (all zero for a zero block).
 * digits 2: a second int8 digit quantizes what the first left, x ~= s * (256 a0 + a1) with s = max|x| / (127 *
 * 256): about 15 bits per block, finer than bfloat16's 8.
 * The AVX-512 path (taken on the builds whose dot products are VNNI's) does the same float operations lane by
 * lane (IEEE multiplies and roundings, the same bits) and sums integers, so every path gives the same a, s and
 * sa; a NaN is skipped by the block maximum in all. Not inlined: one copy serves a kernel's quantize entry point
 * and its GEMM; `unused`: a kernel that does not call it compiles none of it, without a warning. */
static __attribute__((noinline, unused)) void quantize_row(const uint16_t *x, int K, int G, int digits, int8_t *a,
                                                           float *s, float *sa) {
    for (int b = 0; b < K / 32; b++) {
        int sum[2] = {0, 0};     /* the integers of values 0..15 and 16..31 of the block */
        float amax = 0.f;
#if SGL_AVX512_VNNI
        __m512 xs[2];
        __m512 vmax = _mm512_setzero_ps();
        for (int h = 0; h < 2; h++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(x + b * 32 + 16 * h));
            xs[h] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
            vmax = _mm512_max_ps(_mm512_abs_ps(xs[h]), vmax);   /* a NaN lane keeps vmax */
        }
        amax = _mm512_reduce_max_ps(vmax);
        const __m512 inv = _mm512_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
        for (int h = 0; h < 2; h++) {
            const __m512 t = _mm512_mul_ps(xs[h], inv);
            const __m512 qf = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m512i q = _mm512_cvtps_epi32(qf);
            _mm_storeu_si128((__m128i *)(a + b * 32 + 16 * h), _mm512_cvtepi32_epi8(q));
            if (digits == 2) {
                const __m512 rf = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_sub_ps(t, qf), _mm512_set1_ps(256.f)),
                                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                const __m512i r = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(rf), _mm512_set1_epi32(127)),
                                                   _mm512_set1_epi32(-127));
                _mm_storeu_si128((__m128i *)(a + K + b * 32 + 16 * h), _mm512_cvtepi32_epi8(r));
                sum[h] = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(q, 8), r));
            } else {
                sum[h] = _mm512_reduce_add_epi32(q);
            }
        }
#else
        float xs[32];
        for (int j = 0; j < 32; j++) {
            xs[j] = bf16_to_f32(x[b * 32 + j]);
            const float v = fabsf(xs[j]);
            amax = v > amax ? v : amax;   /* fmaxf's result, without its library call */
        }
        const float inv = amax > 0.f ? 127.f / amax : 0.f;
        for (int j = 0; j < 32; j++) {
            const float t = xs[j] * inv;
            const int q = (int)nearbyintf(t);
            a[b * 32 + j] = (int8_t)q;
            if (digits == 2) {
                int r = (int)nearbyintf((t - (float)q) * 256.f);
                r = r > 127 ? 127 : r < -127 ? -127 : r;
                a[K + b * 32 + j] = (int8_t)r;
                sum[j / 16] += 256 * q + r;
            } else {
                sum[j / 16] += q;
            }
        }
#endif
        s[b] = digits == 2 ? amax / 127.f / 256.f : amax / 127.f;
        if (G == 32) {
            sa[b] = s[b] * (float)(sum[0] + sum[1]);
        } else {
            sa[2 * b] = s[b] * (float)sum[0];
            sa[2 * b + 1] = s[b] * (float)sum[1];
        }
    }
}

#endif
