/* W8A8 matmul for the CPU, the 8-bit twin of w4a8_cpu.c: 8-bit weights in blocks of G = 16 or 32 along the
 * input (w = d*q + m, q 0..255: GGUF Q8_0, Q5_0, Q5_1, Q5_K's sub-blocks of 32, Q6_K's and Q3_K's of 16, each as
 * its own exact integers with the block's scale and minimum) times activations quantized on the fly to int8 in
 * blocks of 32 exactly as w4a8_cpu.c does, integer dot products per weight block. Built on the machine it runs on
 * (kernels/w8a8_cpu.py); AVX-512 VNNI where the CPU has it, else plain C (which the compiler vectorizes as it can).
 *
 * Weights of one matrix [N, K] (K % 32 == 0, N % 16 == 0), packed by the caller in tiles of 16 rows:
 *   qw [N/16][K/4][16][4] uint8  tile t, quad c: bytes 4r..4r+3 hold q[16t + r][4c .. 4c+3]
 *   wd [N/16][K/G][16]   float32 d of each row's block (float32: Q5_K's d*sc and Q6_K's d*sc are exact in it)
 *   wm [N/16][K/G][16]   float32 m of each row's block
 * So a 64-byte load holds 4 values for each of 16 rows: one integer dot-product instruction against 4 activations
 * broadcast to every lane advances 16 outputs at once.
 * Activations x [M][K] and the result y [M][N] are bfloat16 bits; y rounds to nearest even.
 *
 * y[i][n] = sum_g d[n][g] s[i][g*G/32] (sum_k q a)  +  sum_g m[n][g] (s[i][g*G/32] sum_k a)   (each in g order)
 *   s = max|x| / 127 over the block of 32, a = round_half_even(x * 127 / max|x|)  (all zero for a zero block);
 *   two digits: x ~= s * (256 a0 + a1), s = max|x| / (127 * 256), as in w4a8_cpu.c.
 *
 * Every row i goes through the same operations in the same order whatever M is, so a row's result does not
 * depend on the rows beside it.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* one row of K activations -> a [digits][K] int8, s [K/32] block scales (as w4a8_cpu.c's quantize_row), and
 * sa [K/G] = s of the block times the sum of the weight block's integer activations */
static void quantize_row(const uint16_t *x, int K, int G, int digits, int8_t *a, float *s, float *sa) {
    for (int b = 0; b < K / 32; b++) {
        float xs[32], amax = 0.f;
        for (int j = 0; j < 32; j++) {
            xs[j] = bf16_to_f32(x[b * 32 + j]);
            amax = fmaxf(amax, fabsf(xs[j]));
        }
        const float inv = amax > 0.f ? 127.f / amax : 0.f;
        int sum[2] = {0, 0};
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
        s[b] = digits == 2 ? amax / 127.f / 256.f : amax / 127.f;
        if (G == 32) {
            sa[b] = s[b] * (float)(sum[0] + sum[1]);
        } else {
            sa[2 * b] = s[b] * (float)sum[0];
            sa[2 * b + 1] = s[b] * (float)sum[1];
        }
    }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#define W8A8_AVX512 1
#else
#define W8A8_AVX512 0
#endif

#define MR 4 /* activation rows per pass over a tile's weights */

/* y[i][0..16) for mr <= MR activation rows (a: row i at i * digits * K; s at i * K/32, sa at i * K/G) against
 * one tile of 16 weight rows; y rows are ldy apart. */
static inline __attribute__((always_inline)) void tile_rows(
    const uint8_t *qw, const float *wd, const float *wm, const int8_t *a, const float *s, const float *sa, int mr,
    int K, const int G, const int digits, uint16_t *y, int ldy) {
    const size_t lda = (size_t)digits * K;
    const int nb = K / 32, ng = K / G;
#if W8A8_AVX512
    __m512 acc[MR], macc[MR];
    for (int i = 0; i < MR; i++) acc[i] = macc[i] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i w[8];   /* w[c]: values 4c..4c+3 of the block for 16 rows */
        for (int c = 0; c < G / 4; c++) w[c] = _mm512_loadu_si512((const void *)(qw + ((size_t)g * (G / 4) + c) * 64));
        const __m512 d = _mm512_loadu_ps(wd + (size_t)g * 16);
        const __m512 m = _mm512_loadu_ps(wm + (size_t)g * 16);
        for (int i = 0; i < mr; i++) {
            const int8_t *ab = a + (size_t)i * lda + (size_t)g * G;
            __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
            for (int c = 0; c < G / 4; c += 2) {
                int32_t lo, hi;
                memcpy(&lo, ab + 4 * c, 4);
                memcpy(&hi, ab + 4 * c + 4, 4);
                i0 = _mm512_dpbusd_epi32(i0, w[c], _mm512_set1_epi32(lo));
                i1 = _mm512_dpbusd_epi32(i1, w[c + 1], _mm512_set1_epi32(hi));
            }
            __m512i idot = _mm512_add_epi32(i0, i1);
            if (digits == 2) {   /* |sum q a0| <= 32 * 255 * 127: times 256 still fits int32 */
                __m512i j0 = _mm512_setzero_si512(), j1 = _mm512_setzero_si512();
                for (int c = 0; c < G / 4; c += 2) {
                    int32_t lo, hi;
                    memcpy(&lo, ab + K + 4 * c, 4);
                    memcpy(&hi, ab + K + 4 * c + 4, 4);
                    j0 = _mm512_dpbusd_epi32(j0, w[c], _mm512_set1_epi32(lo));
                    j1 = _mm512_dpbusd_epi32(j1, w[c + 1], _mm512_set1_epi32(hi));
                }
                idot = _mm512_add_epi32(_mm512_slli_epi32(idot, 8), _mm512_add_epi32(j0, j1));
            }
            const __m512 dots = _mm512_cvtepi32_ps(idot);
            acc[i] = _mm512_fmadd_ps(dots, _mm512_mul_ps(d, _mm512_set1_ps(s[(size_t)i * nb + g * G / 32])), acc[i]);
            macc[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(sa[(size_t)i * ng + g]), macc[i]);
        }
    }
    for (int i = 0; i < mr; i++) {
        /* float32 -> bfloat16, round to nearest even */
        __m512i u = _mm512_castps_si512(_mm512_add_ps(acc[i], macc[i]));
        u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF),
                                                 _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
        _mm256_storeu_si256((__m256i *)(y + (size_t)i * ldy), _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
    }
#else
    for (int i = 0; i < mr; i++) {
        float acc[16] = {0}, macc[16] = {0};
        for (int g = 0; g < ng; g++) {
            const int8_t *ab = a + (size_t)i * lda + (size_t)g * G;
            const float sb = s[(size_t)i * nb + g * G / 32], sab = sa[(size_t)i * ng + g];
            for (int r = 0; r < 16; r++) {
                int dot = 0;
                for (int k = 0; k < G; k++) {
                    int v = ab[k];
                    if (digits == 2) v = 256 * v + ab[K + k];
                    dot += (int)qw[((size_t)g * (G / 4) + k / 4) * 64 + 4 * r + k % 4] * v;
                }
                acc[r] += (float)dot * (wd[(size_t)g * 16 + r] * sb);
                macc[r] += wm[(size_t)g * 16 + r] * sab;
            }
        }
        for (int r = 0; r < 16; r++) y[(size_t)i * ldy + r] = f32_to_bf16(acc[r] + macc[r]);
    }
#endif
}

/* The ISA this build uses, for logs and cache keys. */
const char *w8a8_isa(void) {
#if W8A8_AVX512
    return "avx512_vnni";
#else
    return "scalar";
#endif
}

typedef void (*tiles_fn)(const uint8_t *, const float *, const float *, const int8_t *, const float *, const float *,
                         int, int, uint16_t *, int);
#define TILES(G, D)                                                                                                 \
    static void tiles_##G##_##D(const uint8_t *qw, const float *wd, const float *wm, const int8_t *a, const float *s, \
                                const float *sa, int mr, int K, uint16_t *y, int ldy) {                             \
        tile_rows(qw, wd, wm, a, s, sa, mr, K, G, D, y, ldy);                                                       \
    }
TILES(16, 1)
TILES(16, 2)
TILES(32, 1)
TILES(32, 2)

/* y [M][N] = x [M][K] @ W^T on nthreads threads, weights in blocks of G (16 or 32), activations in `digits`
 * (1 or 2) int8 digits. Returns 0, -1 when out of memory (y is then untouched), -2 for a G or digits it
 * does not take. */
int w8a8_gemm(const uint8_t *qw, const float *wd, const float *wm, const uint16_t *x, uint16_t *y, int M, int N,
              int K, int G, int digits, int nthreads) {
    if ((G != 16 && G != 32) || (digits != 1 && digits != 2)) return -2;
    const int nb = K / 32, ng = K / G, tiles = N / 16;
    const tiles_fn run = G == 16 ? (digits == 2 ? tiles_16_2 : tiles_16_1) : (digits == 2 ? tiles_32_2 : tiles_32_1);
    int8_t *a = malloc((size_t)M * digits * K);
    float *s = malloc((size_t)M * nb * sizeof(float)), *sa = malloc((size_t)M * ng * sizeof(float));
    const int failed = a == NULL || s == NULL || sa == NULL;
    if (!failed) {
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
#pragma omp for schedule(static)
            for (int i = 0; i < M; i++)
                quantize_row(x + (size_t)i * K, K, G, digits, a + (size_t)i * digits * K, s + (size_t)i * nb,
                             sa + (size_t)i * ng);
#pragma omp for schedule(static)
            for (int t = 0; t < tiles; t++)
                for (int i0 = 0; i0 < M; i0 += MR)
                    run(qw + (size_t)t * K * 16, wd + (size_t)t * ng * 16, wm + (size_t)t * ng * 16,
                        a + (size_t)i0 * digits * K, s + (size_t)i0 * nb, sa + (size_t)i0 * ng,
                        M - i0 < MR ? M - i0 : MR, K, y + (size_t)i0 * N + t * 16, N);
        }
    }
    free(a);
    free(s);
    free(sa);
    return failed ? -1 : 0;
}
