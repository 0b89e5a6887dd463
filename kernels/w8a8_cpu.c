/* W8A8 matmul for the CPU, the 8-bit twin of w4a8_cpu.c: weights of at most 8 bits in blocks of G = 16 or 32 along
 * the input (w = d*q + m: GGUF Q8_0, Q5_0, Q5_1, Q5_K's sub-blocks of 32, Q6_K's and Q3_K's of 16, each as its own
 * exact integers with the block's scale and minimum) times activations quantized on the fly to int8 in blocks of
 * 32 exactly as w4a8_cpu.c does, integer dot products per weight block. Built on the machine it runs on
 * (kernels/w8a8_cpu.py); AVX-512 VNNI where the CPU has it, else plain C (which the compiler vectorizes as it can).
 *
 * A layout is (G, bits, scales, sym); the caller picks the most compact one that holds a matrix exactly:
 *   bits 8: q 0..255;  bits 5 (G = 32 only): q 0..31, 5.5 bits a weight with float16 scales, as GGUF Q5_0;
 *           bits 6 (G = 16 only): q 0..63, 6.5625 bits a weight with scales 2, as GGUF Q6_K;
 *   scales: 0: d (and m) float32 (Q5_K's d*sc); 1: float16 (a file's own float16 scales); 2 (sym, G = 16,
 *           K % 256 == 0): d = sc * D, an int8 sc per block and a float16 D per 16 blocks (Q6_K's own scales
 *           and d; their product is exact in float32, so the kernel's d equals scales 0's);
 *   sym:    no stored minimum: m = -2**(bits-1) * d (blocks whole steps from zero: Q8_0, Q5_0, Q6_K).
 * Weights of one matrix [N, K] (K % 32 == 0, N % 16 == 0), packed by the caller in tiles of 16 rows:
 *   bits 8: qw [N/16][K/4][16][4] uint8   tile t, quad c: bytes 4r..4r+3 hold q[16t + r][4c .. 4c+3]
 *   bits 5: qw [N/16][K/32][320] uint8    tile t, block b: 256 bytes of nibbles in w4a8_cpu.c's order (quarter
 *           h, byte 4r + j: low nibble for q[32b + 8h + j], high nibble for q[32b + 8h + 4 + j]), then 8 uint64
 *           masks, mask c bit 4r + j for q = q[16t + r][32b + 4c + j]. A low nibble holds q's low 4 bits and its
 *           mask bit (c even) q's bit 4; a high nibble holds q's high 4 bits (q >> 1) and its mask bit (c odd) q's
 *           bit 0. So one AND and one masked byte add give each 64 bytes of weights: q from a low nibble, 8 q (at
 *           most 248, still a byte) from a high one, whose dot products are shifted back down by 3, exactly.
 *   bits 6: qw [N/16][K/16][192] uint8    tile t, block b: 128 bytes of nibbles (half h, byte 4r + j: low nibble
 *           for q[16b + 8h + j], high nibble for q[16b + 8h + 4 + j]), then 8 uint64 masks, mask 2c + p bit 4r + j
 *           for q = q[16t + r][16b + 4c + j]. A low nibble holds q's low 4 bits and its masks (p = 0, 1) q's
 *           bits 4 and 5; a high nibble holds q >> 2 and its masks q's bits 1 and 0. So an AND and two masked
 *           adds give q from a low nibble and 4 q (at most 252) from a high one, shifted back down by 2, exactly.
 *   wd [N/16][K/G][16]   float32, float16 or (scales 2) int8: d (or sc) of each row's block
 *   wm [N/16][K/G][16]   the same type: m of each row's block (absent when sym); scales 2: D [N/16][K/256][16]
 *                        float16, the super-scale of each row's 16 blocks
 * So a 64-byte load holds 4 values for each of 16 rows: one integer dot-product instruction against 4 activations
 * broadcast to every lane advances 16 outputs at once.
 * Activations x [M][K] and the result y [M][N] are bfloat16 bits; y rounds to nearest even.
 *
 * y[i][n] = sum_g d[n][g] s[i][g*G/32] (sum_k q a)  +  sum_g m[n][g] (s[i][g*G/32] sum_k a)   (each in g order)
 *   s = max|x| / 127 over the block of 32, a = round_half_even(x * 127 / max|x|)  (all zero for a zero block);
 *   two digits: x ~= s * (256 a0 + a1), s = max|x| / (127 * 256), as in w4a8_cpu.c.
 *   sym: the second term is d[n][g] * (-2**(bits-1) * s sum_k a), the same float32 value as m * (s sum_k a)
 *   (a power of two moves in and out of a rounding unchanged).
 *
 * Every row i goes through the same operations in the same order whatever M is, so a row's result does not
 * depend on the rows beside it.
 */
#include <stdlib.h>

#include "native.h"

#define W8A8_AVX512 SGL_AVX512_VNNI   /* the path this build takes */

/* the quantized activations as the kernel makes them (for tests): x [M][K] -> a [M][digits][K], s [M][K/32],
 * sa [M][K/G] */
void w8a8_quantize(const uint16_t *x, int M, int K, int G, int digits, int8_t *a, float *s, float *sa) {
    for (int i = 0; i < M; i++)
        quantize_row(x + (size_t)i * K, K, G, digits, a + (size_t)i * digits * K, s + (size_t)i * (K / 32),
                     sa + (size_t)i * (K / G));
}

#define MR 4 /* activation rows per pass over a tile's weights */

/* bytes of one tile's weight block of G values */
#define BLOCK_BYTES(G, BITS) ((BITS) == 8 ? 16 * (G) : (BITS) == 5 ? 320 : 192)
/* the right shift that brings a high nibble's dot products back down (they were taken on 2**shift q) */
#define HIGH_SHIFT(BITS) ((BITS) == 5 ? 3 : (BITS) == 6 ? 2 : 0)

/* the scalar path's view of a tile: q of row r, value k of block g; d and m of row r, block g */
static inline int q_at(const uint8_t *qw, int G, int BITS, int g, int r, int k) {
    const uint8_t *blk = qw + (size_t)g * BLOCK_BYTES(G, BITS);
    if (BITS == 8) return blk[(k / 4) * 64 + 4 * r + k % 4];
    if (BITS == 6) {
        const int c = k / 4, j = k % 4;
        const uint8_t v = blk[(k / 8) * 64 + 4 * r + j];
        uint64_t m0, m1;
        memcpy(&m0, blk + 128 + 8 * (2 * c), 8);
        memcpy(&m1, blk + 128 + 8 * (2 * c + 1), 8);
        const int b0 = (int)((m0 >> (4 * r + j)) & 1u), b1 = (int)((m1 >> (4 * r + j)) & 1u);
        return c % 2 == 0 ? (v & 0x0F) | b0 << 4 | b1 << 5 : (v >> 4) << 2 | b0 << 1 | b1;
    }
    const int h = k / 8, j = k % 4;
    const uint8_t v = blk[h * 64 + 4 * r + j];
    uint64_t mask;
    memcpy(&mask, blk + 256 + 8 * (k / 4), 8);
    const int bit = (int)((mask >> (4 * r + j)) & 1u);
    return (k % 8) < 4 ? (v & 0x0F) | bit << 4 : (v >> 4) << 1 | bit;
}

/* d (or m) of row r, block g, in a tile's scales of kind SK; scales 2 reads D of the row's 16 blocks from `super` */
static inline float scale_at(const void *v, const void *super, int SK, int g, int r) {
    const size_t i = (size_t)g * 16 + r;
    if (SK == 2)
        return (float)((const int8_t *)v)[i] * f16_to_f32(((const uint16_t *)super)[(size_t)(g / 16) * 16 + r]);
    return SK == 1 ? f16_to_f32(((const uint16_t *)v)[i]) : ((const float *)v)[i];
}

/* y[i][0..16) for mr <= MR activation rows (a: row i at i * digits * K; s at i * K/32, sa at i * K/G) against
 * one tile of 16 weight rows in layout (G, BITS, SK, SYM); y rows are ldy apart. */
static inline __attribute__((always_inline)) void tile_rows(
    const uint8_t *qw, const void *wd, const void *wm, const int8_t *a, const float *s, const float *sa, int mr,
    int K, const int G, const int BITS, const int SK, const int SYM, const int digits, uint16_t *y, int ldy) {
    const size_t lda = (size_t)digits * K;
    const int nb = K / 32, ng = K / G;
    const float zp = (float)(1 << (BITS - 1));   /* sym: m = -zp * d */
#if W8A8_AVX512
    __m512 acc[MR], macc[MR];
    for (int i = 0; i < MR; i++) acc[i] = macc[i] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const uint8_t *blk = qw + (size_t)g * BLOCK_BYTES(G, BITS);
        __m512i w[8];   /* w[c]: values 4c..4c+3 of the block for 16 rows */
        if (BITS == 8) {
            for (int c = 0; c < G / 4; c++) w[c] = _mm512_loadu_si512((const void *)(blk + (size_t)c * 64));
        } else if (BITS == 6) {
            /* w[2h] = q, w[2h + 1] = 4 q: an AND and two masked adds each */
            const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8((char)0xF0);
            const __mmask64 *plane = (const __mmask64 *)(blk + 128);
            for (int h = 0; h < 2; h++) {
                const __m512i v = _mm512_loadu_si512((const void *)(blk + h * 64));
                __m512i lo = _mm512_and_si512(v, lo4), hi = _mm512_and_si512(v, hi4);
                lo = _mm512_mask_add_epi8(lo, _load_mask64((__mmask64 *)&plane[4 * h]), lo, _mm512_set1_epi8(0x10));
                lo = _mm512_mask_add_epi8(lo, _load_mask64((__mmask64 *)&plane[4 * h + 1]), lo, _mm512_set1_epi8(0x20));
                hi = _mm512_mask_add_epi8(hi, _load_mask64((__mmask64 *)&plane[4 * h + 2]), hi, _mm512_set1_epi8(0x08));
                hi = _mm512_mask_add_epi8(hi, _load_mask64((__mmask64 *)&plane[4 * h + 3]), hi, _mm512_set1_epi8(0x04));
                w[2 * h] = lo;
                w[2 * h + 1] = hi;
            }
        } else {
            /* w[2h] = q, w[2h + 1] = 8 q: an AND and a masked add each (the masks load straight from memory) */
            const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8((char)0xF0);
            const __m512i bit4 = _mm512_set1_epi8(0x10), bit3 = _mm512_set1_epi8(0x08);
            const __mmask64 *plane = (const __mmask64 *)(blk + 256);
            for (int h = 0; h < 4; h++) {
                const __m512i v = _mm512_loadu_si512((const void *)(blk + h * 64));
                const __m512i lo = _mm512_and_si512(v, lo4), hi = _mm512_and_si512(v, hi4);
                w[2 * h] = _mm512_mask_add_epi8(lo, _load_mask64((__mmask64 *)&plane[2 * h]), lo, bit4);
                w[2 * h + 1] = _mm512_mask_add_epi8(hi, _load_mask64((__mmask64 *)&plane[2 * h + 1]), hi, bit3);
            }
        }
        __m512 d, m = _mm512_setzero_ps();
        if (SK == 2) {
            const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                _mm_loadu_si128((const __m128i *)((const int8_t *)wd + (size_t)g * 16))));
            d = _mm512_mul_ps(sc, _mm512_cvtph_ps(
                _mm256_loadu_si256((const __m256i *)((const uint16_t *)wm + (size_t)(g / 16) * 16))));
        } else if (SK == 1) {
            d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)wd + (size_t)g * 16)));
            if (!SYM) m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)wm + (size_t)g * 16)));
        } else {
            d = _mm512_loadu_ps((const float *)wd + (size_t)g * 16);
            if (!SYM) m = _mm512_loadu_ps((const float *)wm + (size_t)g * 16);
        }
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
            /* bits 5 / 6: odd quads hold 8 q / 4 q, a multiple of 8 / 4 in every lane: the shift is exact */
            __m512i idot = _mm512_add_epi32(i0, _mm512_srai_epi32(i1, HIGH_SHIFT(BITS)));
            if (digits == 2) {   /* |sum q a0| <= 32 * 255 * 127: times 256 still fits int32 */
                __m512i j0 = _mm512_setzero_si512(), j1 = _mm512_setzero_si512();
                for (int c = 0; c < G / 4; c += 2) {
                    int32_t lo, hi;
                    memcpy(&lo, ab + K + 4 * c, 4);
                    memcpy(&hi, ab + K + 4 * c + 4, 4);
                    j0 = _mm512_dpbusd_epi32(j0, w[c], _mm512_set1_epi32(lo));
                    j1 = _mm512_dpbusd_epi32(j1, w[c + 1], _mm512_set1_epi32(hi));
                }
                idot = _mm512_add_epi32(_mm512_slli_epi32(idot, 8),
                                        _mm512_add_epi32(j0, _mm512_srai_epi32(j1, HIGH_SHIFT(BITS))));
            }
            const __m512 dots = _mm512_cvtepi32_ps(idot);
            const float sai = sa[(size_t)i * ng + g];
            acc[i] = _mm512_fmadd_ps(dots, _mm512_mul_ps(d, _mm512_set1_ps(s[(size_t)i * nb + g * G / 32])), acc[i]);
            macc[i] = SYM ? _mm512_fmadd_ps(d, _mm512_set1_ps(-zp * sai), macc[i])
                          : _mm512_fmadd_ps(m, _mm512_set1_ps(sai), macc[i]);
        }
    }
    for (int i = 0; i < mr; i++)
        _mm256_storeu_si256((__m256i *)(y + (size_t)i * ldy), f32x16_to_bf16(_mm512_add_ps(acc[i], macc[i])));
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
                    dot += q_at(qw, G, BITS, g, r, k) * v;
                }
                const float dr = scale_at(wd, wm, SK, g, r);
                acc[r] += (float)dot * (dr * sb);
                macc[r] += SYM ? dr * (-zp * sab) : scale_at(wm, NULL, SK, g, r) * sab;
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

typedef void (*tiles_fn)(const uint8_t *, const void *, const void *, const int8_t *, const float *, const float *,
                         int, int, uint16_t *, int);
#define TILES(G, B, SK, S, D)                                                                                         \
    static void tiles_##G##_##B##_##SK##_##S##_##D(const uint8_t *qw, const void *wd, const void *wm, const int8_t *a, \
                                                   const float *s, const float *sa, int mr, int K, uint16_t *y,     \
                                                   int ldy) {                                                       \
        tile_rows(qw, wd, wm, a, s, sa, mr, K, G, B, SK, S, D, y, ldy);                                             \
    }
/* scales 0 and 1, with or without a minimum; scales 2 (G = 16 only) sym only */
#define TILES_SD(G, B) \
    TILES(G, B, 0, 0, 1) TILES(G, B, 0, 0, 2) TILES(G, B, 0, 1, 1) TILES(G, B, 0, 1, 2) \
    TILES(G, B, 1, 0, 1) TILES(G, B, 1, 0, 2) TILES(G, B, 1, 1, 1) TILES(G, B, 1, 1, 2)
#define TILES_2(G, B) TILES(G, B, 2, 1, 1) TILES(G, B, 2, 1, 2)
TILES_SD(16, 8)
TILES_SD(32, 8)
TILES_SD(32, 5)
TILES_SD(16, 6)
TILES_2(16, 8)
TILES_2(16, 6)
#define ROW(G, B) {tiles_##G##_##B##_0_0_1, tiles_##G##_##B##_0_0_2, tiles_##G##_##B##_0_1_1, tiles_##G##_##B##_0_1_2, \
                   tiles_##G##_##B##_1_0_1, tiles_##G##_##B##_1_0_2, tiles_##G##_##B##_1_1_1, tiles_##G##_##B##_1_1_2}
#define ROW2(G, B) {tiles_##G##_##B##_2_1_1, tiles_##G##_##B##_2_1_2}
/* layouts: (16, 8), (32, 8), (32, 5), (16, 6); TABLE by 4 scales + 2 sym + digits - 1, TABLE2 (scales 2) by digits */
static const tiles_fn TABLE[4][8] = {ROW(16, 8), ROW(32, 8), ROW(32, 5), ROW(16, 6)};
static const tiles_fn TABLE2[4][2] = {ROW2(16, 8), {NULL, NULL}, {NULL, NULL}, ROW2(16, 6)};

/* y [M][N] = x [M][K] @ W^T on nthreads threads, weights in layout (G, bits, scales, sym) (see the top of this
 * file), activations in `digits` (1 or 2) int8 digits. Returns 0, -1 when out of memory (y is then untouched),
 * -2 for a layout or digits it does not take. */
int w8a8_gemm(const uint8_t *qw, const void *wd, const void *wm, const uint16_t *x, uint16_t *y, int M, int N, int K,
              int G, int bits, int scales, int sym, int digits, int nthreads) {
    const int layout = G == 16 && bits == 8 ? 0 : G == 32 && bits == 8 ? 1 : G == 32 && bits == 5 ? 2
                     : G == 16 && bits == 6 ? 3 : -1;
    if (layout < 0 || scales < 0 || scales > 2 || (sym != 0 && sym != 1) || (digits != 1 && digits != 2)) return -2;
    if (scales == 2 && (K % 256 != 0 || !sym || TABLE2[layout][0] == NULL)) return -2;
    const tiles_fn run = scales == 2 ? TABLE2[layout][digits - 1] : TABLE[layout][4 * scales + 2 * sym + digits - 1];
    const int nb = K / 32, ng = K / G, tiles = N / 16;
    /* per tile: its blocks' weights; their d (scales 2: sc); their m (scales 2: the D of each 16 blocks) */
    const size_t tile_bytes = (size_t)ng * BLOCK_BYTES(G, bits);
    const size_t tile_d = (size_t)ng * 16 * (scales == 0 ? 4 : scales == 1 ? 2 : 1);
    const size_t tile_m = scales == 2 ? (size_t)(ng / 16) * 16 * 2 : tile_d;
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
                    run(qw + (size_t)t * tile_bytes, (const char *)wd + (size_t)t * tile_d,
                        sym && scales != 2 ? NULL : (const char *)wm + (size_t)t * tile_m, a + (size_t)i0 * digits * K,
                        s + (size_t)i0 * nb, sa + (size_t)i0 * ng, M - i0 < MR ? M - i0 : MR, K,
                        y + (size_t)i0 * N + t * 16, N);
        }
    }
    free(a);
    free(s);
    free(sa);
    return failed ? -1 : 0;
}
