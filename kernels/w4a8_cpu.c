/* W4A8 matmul for the CPU: 4-bit weights in blocks of 32 (w = d*q + m, as GGUF Q4_1 stores them) times
 * activations quantized on the fly to int8 in blocks of 32 (x ~= s*a), integer dot products per block.
 * Built on the machine it runs on (kernels/w4a8_cpu.py: cc -O3 -march=native -fopenmp), so the path below is
 * the best the CPU has: AVX-512 VNNI, else AVX2, else plain C (which the compiler vectorizes as it can). Each path is
 * deterministic; they sum their floats in different orders, so two machines may differ in the last bits.
 *
 * Weights of one matrix [N, K] (K % 32 == 0, N % 16 == 0), packed by the caller in tiles of 16 rows:
 *   qw [N/16][K/32][4][64] uint8  tile t, block b, quarter h: byte 4r + j holds q[16t + r][32b + 8h + j] in
 *                                 its low nibble and q[16t + r][32b + 8h + 4 + j] in its high nibble
 *   wd [N/16][K/32][16]   fp16    d of each row's block
 *   wm [N/16][K/32][16]   fp16    m of each row's block; absent when sym: every block whole steps from zero
 *                                 (GGUF Q4_0, the output head's ranking grid), m = -8 d
 * So a 64-byte load holds 4 values of a block for each of 16 rows: one integer dot-product instruction against
 * 4 activations broadcast to every lane advances 16 outputs at once, and a tile's 16 outputs end in one
 * register with no horizontal sums.
 * Activations x [M][K] and the result y [M][N] are bfloat16 bits; y rounds to nearest even.
 *
 * y[i][n] = sum_b d[n][b] s[i][b] (sum_k q a)  +  sum_b m[n][b] (s[i][b] sum_k a)     (each sum in b order)
 *   sym: the second term is d[n][b] * (-8 s[i][b] sum_k a), the same float32 value as m * (s sum_k a) with m = -8 d
 *   s = max|x| / 127 over the block, a = round_half_even(x * 127 / max|x|)  (all zero for an all-zero block)
 *
 * Every row i goes through the same operations in the same order whatever M is, so a row's result does not
 * depend on the rows beside it (the runtime relies on this: outputs must not depend on batch composition).
 */
#include <stdlib.h>

#include "native.h"

/* the path this build takes: the best the CPU has (set once, tested wherever the paths differ) */
#define W4A8_AVX512 SGL_AVX512_VNNI
#define W4A8_AVX2 (!SGL_AVX512_VNNI && SGL_AVX2)

/* the quantized activations as the kernel makes them (for tests): x [M][K] -> a [M][digits][K], s and sa
 * [M][K/32] */
void w4a8_quantize(const uint16_t *x, int M, int K, int digits, int8_t *a, float *s, float *sa) {
    for (int i = 0; i < M; i++)
        quantize_row(x + (size_t)i * K, K, 32, digits, a + (size_t)i * digits * K, s + (size_t)i * (K / 32),
                     sa + (size_t)i * (K / 32));
}

#define MR 4 /* activation rows per pass over a tile's weights */

#if W4A8_AVX2
/* int32 [8]: the block's dot products for 8 rows, w[2h] / w[2h+1] = their values 8h..8h+3 / 8h+4..8h+7 (one
 * 4-byte group a row, as the layout stores them), ab the block's 32 activations. u8 x s8 pairs to int16 (at most
 * 2 * 15 * 127 = 3810 each), summed over the 8 groups in int16 (at most 8 * 3810 = 30480: no overflow), then
 * pairs to int32. */
static inline __attribute__((always_inline)) __m256i dot8_avx2(const __m256i w[8], const int8_t *ab) {
    __m256i p[8];
    for (int h = 0; h < 8; h++) {
        int32_t v4;
        memcpy(&v4, ab + 4 * h, 4);
        p[h] = _mm256_maddubs_epi16(w[h], _mm256_set1_epi32(v4));
    }
    const __m256i sum = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])),
                                         _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7])));
    return _mm256_madd_epi16(sum, _mm256_set1_epi16(1));
}

/* tile_rows for AVX2 (16 vector registers): the tile in two halves of 8 weight rows, each half's 8 unpacked
 * weight vectors held across `mr` (a constant) activation rows with one float accumulator each; per block, a
 * row adds m * (s * sum a) and then d * s * (sum q a). */
static inline __attribute__((always_inline)) void rows_avx2(
    const uint8_t *qw, const uint16_t *wd, const uint16_t *wm, const int8_t *a, const float *s, const float *sa,
    const int mr, const int K, const int digits, const int sym, uint16_t *y, const int ldy) {
    const size_t lda = (size_t)digits * K;
    const int nb = K / 32;
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int g = 0; g < 2; g++) {
        __m256 acc[MR];
        for (int i = 0; i < mr; i++) acc[i] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m256i w[8];   /* w[2h]: values 8h..8h+3 of rows 8g..8g+7, w[2h+1]: 8h+4..8h+7 */
            for (int h = 0; h < 4; h++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(qw + (size_t)b * 256 + h * 64 + g * 32));
                w[2 * h] = _mm256_and_si256(v, lo4);
                w[2 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
            }
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wd + (size_t)b * 16 + g * 8)));
            const __m256 m = sym ? _mm256_mul_ps(d, _mm256_set1_ps(-8.f))
                                 : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wm + (size_t)b * 16 + g * 8)));
            for (int i = 0; i < mr; i++) {
                const int8_t *ab = a + (size_t)i * lda + b * 32;
                __m256i idot = dot8_avx2(w, ab);
                if (digits == 2)   /* |sum q a0| <= 32 * 15 * 127: times 256 still fits int32 */
                    idot = _mm256_add_epi32(_mm256_slli_epi32(idot, 8), dot8_avx2(w, ab + K));
                acc[i] = _mm256_fmadd_ps(m, _mm256_set1_ps(sa[(size_t)i * nb + b]), acc[i]);
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot), _mm256_mul_ps(d, _mm256_set1_ps(s[(size_t)i * nb + b])),
                                         acc[i]);
            }
        }
        for (int i = 0; i < mr; i++) {
            /* float32 -> bfloat16, round to nearest even */
            __m256i u = _mm256_castps_si256(acc[i]);
            u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF),
                                                     _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
            u = _mm256_srli_epi32(u, 16);   /* 8 values in the low halves of the 32-bit lanes */
            const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
            _mm_storeu_si128((__m128i *)(y + (size_t)i * ldy + g * 8), packed);
        }
    }
}
#endif

/* y[i][0..16) for mr <= MR activation rows (a: row i at i * digits * K; s, sa: at i * nb) against one tile of
 * 16 weight rows; y rows are ldy apart. The AVX-512 path writes the second digit's dot products out beside the
 * first's: a shared inline helper over the unpacked weights cost it 5-10% (GCC kept fewer of them in registers). */
static inline __attribute__((always_inline)) void tile_rows(
    const uint8_t *qw, const uint16_t *wd, const uint16_t *wm, const int8_t *a, const float *s, const float *sa, int mr,
    int K, const int digits, const int sym, uint16_t *y, int ldy) {
#if W4A8_AVX2
    switch (mr) {   /* a constant row count per call, so each row's accumulator stays in a register */
    case 1: rows_avx2(qw, wd, wm, a, s, sa, 1, K, digits, sym, y, ldy); break;
    case 2: rows_avx2(qw, wd, wm, a, s, sa, 2, K, digits, sym, y, ldy); break;
    case 3: rows_avx2(qw, wd, wm, a, s, sa, 3, K, digits, sym, y, ldy); break;
    default: rows_avx2(qw, wd, wm, a, s, sa, MR, K, digits, sym, y, ldy); break;
    }
#else
    const size_t lda = (size_t)digits * K;
    const int nb = K / 32;
#if W4A8_AVX512
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    __m512 acc[MR], macc[MR];
    for (int i = 0; i < MR; i++) acc[i] = macc[i] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i w[8];   /* w[2h]: values 8h..8h+3 of the block for 16 rows, w[2h+1]: 8h+4..8h+7 */
        for (int h = 0; h < 4; h++) {
            const __m512i v = _mm512_loadu_si512((const void *)(qw + (size_t)b * 256 + h * 64));
            w[2 * h] = _mm512_and_si512(v, lo4);
            w[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wd + (size_t)b * 16)));
        const __m512 m = sym ? _mm512_mul_ps(d, _mm512_set1_ps(-8.f))
                             : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wm + (size_t)b * 16)));
        for (int i = 0; i < mr; i++) {
            const int8_t *ab = a + (size_t)i * lda + b * 32;
            __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
            for (int h = 0; h < 4; h++) {
                int32_t lo, hi;
                memcpy(&lo, ab + 8 * h, 4);
                memcpy(&hi, ab + 8 * h + 4, 4);
                i0 = _mm512_dpbusd_epi32(i0, w[2 * h], _mm512_set1_epi32(lo));
                i1 = _mm512_dpbusd_epi32(i1, w[2 * h + 1], _mm512_set1_epi32(hi));
            }
            __m512i idot = _mm512_add_epi32(i0, i1);
            if (digits == 2) {   /* |sum q a0| <= 32 * 15 * 127: times 256 still fits int32 */
                __m512i j0 = _mm512_setzero_si512(), j1 = _mm512_setzero_si512();
                for (int h = 0; h < 4; h++) {
                    int32_t lo, hi;
                    memcpy(&lo, ab + K + 8 * h, 4);
                    memcpy(&hi, ab + K + 8 * h + 4, 4);
                    j0 = _mm512_dpbusd_epi32(j0, w[2 * h], _mm512_set1_epi32(lo));
                    j1 = _mm512_dpbusd_epi32(j1, w[2 * h + 1], _mm512_set1_epi32(hi));
                }
                idot = _mm512_add_epi32(_mm512_slli_epi32(idot, 8), _mm512_add_epi32(j0, j1));
            }
            const __m512 dots = _mm512_cvtepi32_ps(idot);
            acc[i] = _mm512_fmadd_ps(dots, _mm512_mul_ps(d, _mm512_set1_ps(s[(size_t)i * nb + b])), acc[i]);
            macc[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(sa[(size_t)i * nb + b]), macc[i]);
        }
    }
    for (int i = 0; i < mr; i++)
        _mm256_storeu_si256((__m256i *)(y + (size_t)i * ldy), f32x16_to_bf16(_mm512_add_ps(acc[i], macc[i])));
#else
    for (int i = 0; i < mr; i++) {
        float acc[16] = {0}, macc[16] = {0};
        for (int b = 0; b < nb; b++) {
            const int8_t *ab = a + (size_t)i * lda + b * 32;
            const float sb = s[(size_t)i * nb + b], sab = sa[(size_t)i * nb + b];
            for (int r = 0; r < 16; r++) {
                int dot = 0;
                for (int h = 0; h < 4; h++)
                    for (int j = 0; j < 4; j++) {
                        const uint8_t v = qw[(size_t)b * 256 + h * 64 + 4 * r + j];
                        int lo = ab[8 * h + j], hi = ab[8 * h + 4 + j];
                        if (digits == 2) {
                            lo = 256 * lo + ab[K + 8 * h + j];
                            hi = 256 * hi + ab[K + 8 * h + 4 + j];
                        }
                        dot += (int)(v & 0x0F) * lo + (int)(v >> 4) * hi;
                    }
                acc[r] += (float)dot * (f16_to_f32(wd[(size_t)b * 16 + r]) * sb);
                macc[r] += (sym ? -8.f * f16_to_f32(wd[(size_t)b * 16 + r]) : f16_to_f32(wm[(size_t)b * 16 + r])) * sab;
            }
        }
        for (int r = 0; r < 16; r++) y[(size_t)i * ldy + r] = f32_to_bf16(acc[r] + macc[r]);
    }
#endif
#endif
}

/* The ISA this build uses, for logs and cache keys. */
const char *w4a8_isa(void) {
#if W4A8_AVX512
    return "avx512_vnni";
#elif W4A8_AVX2
    return "avx2";
#else
    return "scalar";
#endif
}

typedef void (*tiles_fn)(const uint8_t *, const uint16_t *, const uint16_t *, const int8_t *, const float *,
                         const float *, int, int, uint16_t *, int);
#define TILES(D, S)                                                                                                 \
    static void tiles_##D##_##S(const uint8_t *qw, const uint16_t *wd, const uint16_t *wm, const int8_t *a,         \
                                const float *s, const float *sa, int mr, int K, uint16_t *y, int ldy) {             \
        tile_rows(qw, wd, wm, a, s, sa, mr, K, D, S, y, ldy);                                                       \
    }
TILES(1, 0)
TILES(1, 1)
TILES(2, 0)
TILES(2, 1)

/* y [M][N] = x [M][K] @ W^T on nthreads threads, activations in `digits` (1 or 2) int8 digits, `sym` 1 where wm
 * is absent (m = -8 d; see the top of this file). Returns 0, or -1 when out of memory (y is then untouched). */
int w4a8_gemm(const uint8_t *qw, const uint16_t *wd, const uint16_t *wm, const uint16_t *x, uint16_t *y, int M,
              int N, int K, int sym, int digits, int nthreads) {
    const int nb = K / 32, tiles = N / 16;
    const tiles_fn run = digits == 2 ? (sym ? tiles_2_1 : tiles_2_0) : (sym ? tiles_1_1 : tiles_1_0);
    int8_t *a = malloc((size_t)M * digits * K);
    float *s = malloc((size_t)M * nb * sizeof(float)), *sa = malloc((size_t)M * nb * sizeof(float));
    const int failed = a == NULL || s == NULL || sa == NULL;
    if (!failed) {
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
#pragma omp for schedule(static)
            for (int i = 0; i < M; i++)
                quantize_row(x + (size_t)i * K, K, 32, digits, a + (size_t)i * digits * K, s + (size_t)i * nb,
                             sa + (size_t)i * nb);
#pragma omp for schedule(static)
            for (int t = 0; t < tiles; t++)
                for (int i0 = 0; i0 < M; i0 += MR)
                    run(qw + (size_t)t * nb * 256, wd + (size_t)t * nb * 16, sym ? NULL : wm + (size_t)t * nb * 16,
                        a + (size_t)i0 * digits * K, s + (size_t)i0 * nb, sa + (size_t)i0 * nb,
                        M - i0 < MR ? M - i0 : MR, K, y + (size_t)i0 * N + t * 16, N);
        }
    }
    free(a);
    free(s);
    free(sa);
    return failed ? -1 : 0;
}
