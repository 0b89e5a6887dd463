/* Paged decode attention for the CPU: each query row attends over the cached keys of its request, read where they
 * lie in the KV pool. The numba kernel in decode_attention_cpu.py does the same with the same job structure; this
 * one is C, built on the machine (kernels/native.py: cc -O3 -march=native -fopenmp -ffp-contract=fast), with GCC
 * vector types of 16 floats that the compiler maps onto the CPU's widest registers (one AVX-512 register, two
 * AVX2 ones, or four SSE ones).
 *
 * Shapes (numpy views, all contiguous):
 *   q        [B][Hq][D]    float32, one query row per entry (a request's decode row and its draft rows are
 *                          adjacent entries with the same table row)
 *   k, v     [S][Hk][D]    the layer's pool: bfloat16 bits (elem 2), float32 (elem 4), or one byte a value
 *                          (elem 1): int8 (quant 1) or float8 e4m3 bits (quant 2), value = stored * its scale;
 *                          Hq % Hk == 0
 *   ks, vs   [S][Hk]       bfloat16 bits of the quantized pool's scales, one per slot and KV head (unread
 *                          otherwise)
 *   rot      [D][D]        NULL, or the rotation the pool's vectors are stored under (orthonormal, symmetric):
 *                          q is taken times it, the output given back times it (q R . k R = q . k)
 *   table    [*][ld]       int32 slots per table row; rows[b] is entry b's table row
 *   seq_lens [B]           entry b attends over columns start .. seq_lens[b]-1 (at least one)
 *   out      [B][Hq][D]    float32, normalised; lse_max, lse_sum [B][Hq]: each head's score max and sum of
 *                          exp(score - max), to merge with attention over columns :start computed elsewhere
 *   softcap  > 0: each scaled score s becomes softcap * tanh(s / softcap) before the softmax (Gemma 2); 0: off
 *
 * Jobs: a run of adjacent entries with the same table row (one request, MAX_RUN entries at most) x a chunk of
 * CHUNK columns from `start`. A job reads each slot of the chunk whole (every KV head), widening a block of 16
 * slots to float32 once for all the run's entries and heads (on a CPU with AVX-512 BF16, bfloat16 queries read
 * the keys in place instead: qk16_bf16). Per (entry, head): scores of 16 keys at a time (16 partial dot products
 * over lanes of the head dimension, then one 16-way reduction tree to a vector of 16 scores), the chunk's max,
 * exp and sum, and the values weighted in key order. Chunks are merged in order.
 *
 * Invariant the runtime relies on: an entry's result depends only on its own query, its own columns and `start`,
 * never on the entries beside it (chunk edges are counted from `start`; masked lanes are selected away, not
 * multiplied), so a draft row attends bit for bit as the same token's lone decode row would.
 */
#include <omp.h>
#include <stdlib.h>

#include "native.h"

#define CHUNK 256      /* columns per job (as the numba kernel) */
#define MAX_D 256      /* head dims up to this, multiples of 16 */
#define MAX_RUN 64     /* entries in one run at most: a longer run of one request is split (a row's result does
                        * not depend on its run), which bounds a job's stack arrays and balances the threads */

typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef uint32_t vu __attribute__((vector_size(64)));
typedef uint16_t vh __attribute__((vector_size(32)));

static inline vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }

static inline vf vsplat(float x) { return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

static inline vf vselect(vi mask, vf a, vf b) { return (vf)((mask & (vi)a) | (~mask & (vi)b)); }

/* 16 bfloat16 (or float32) values -> 16 float32 */
static inline vf widen16(const void *src, int elem) {
    if (elem == 4)
        return vload((const float *)src);
    vh h;
    memcpy(&h, src, sizeof h);
    return (vf)(__builtin_convertvector(h, vu) << 16);
}

/* exp(x) for x <= 0 (lanes above 0 are garbage; callers select them away), relative error ~3e-7, flushed to
 * 2^-126 below: 2^t, t = x log2(e), as 2^round(t) (exponent bits) times a degree-7 series of e^f. */
static inline vf exp_neg(vf x) {
    vf t = x * vsplat(1.4426950408889634f);
    t = vselect(t < vsplat(-126.f), vsplat(-126.f), t);
    const vf n = (t + vsplat(12582912.f)) - vsplat(12582912.f);           /* round to nearest, |t| < 2^22 */
    const vf f = (t - n) * vsplat(0.6931471805599453f);
    vf p = vsplat(1.f / 5040.f);
    p = p * f + vsplat(1.f / 720.f);
    p = p * f + vsplat(1.f / 120.f);
    p = p * f + vsplat(1.f / 24.f);
    p = p * f + vsplat(1.f / 6.f);
    p = p * f + vsplat(0.5f);
    p = p * f + vsplat(1.f);
    p = p * f + vsplat(1.f);
    const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    return p * (vf)e;
}

/* r[j] = sum of a[j]'s 16 lanes, for j < 16, in a fixed tree order */
static inline vf reduce16(vf *a) {
    const vi m1lo = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
    const vi m1hi = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
    const vi m2lo = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
    const vi m2hi = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
    const vi m3lo = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27};
    const vi m3hi = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
    const vi m4lo = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const vi m4hi = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    vf b[8], c[4], d[2];
    /* b[i] lanes 2l, 2l+1: pair sums of a[2i], a[2i+1] */
    for (int i = 0; i < 8; i++)
        b[i] = __builtin_shuffle(a[2 * i], a[2 * i + 1], m1lo) + __builtin_shuffle(a[2 * i], a[2 * i + 1], m1hi);
    /* c[i] lanes 4l + 0..3: a[4i + 0..3], sums of 4 lanes */
    for (int i = 0; i < 4; i++)
        c[i] = __builtin_shuffle(b[2 * i], b[2 * i + 1], m2lo) + __builtin_shuffle(b[2 * i], b[2 * i + 1], m2hi);
    /* d[i] lanes 8l + 0..7: a[8i + 0..7], sums of 8 lanes */
    for (int i = 0; i < 2; i++)
        d[i] = __builtin_shuffle(c[2 * i], c[2 * i + 1], m3lo) + __builtin_shuffle(c[2 * i], c[2 * i + 1], m3hi);
    /* lanes 0..15: a[0..15], sums of all 16 lanes */
    return __builtin_shuffle(d[0], d[1], m4lo) + __builtin_shuffle(d[0], d[1], m4hi);
}

/* scores of the query q [D] against 16 keys, key j at kf + j * ldk */
static inline __attribute__((always_inline)) vf qk16(const float *restrict q, const float *restrict kf, int ldk,
                                                      int D) {
    vf a[16];
    for (int j = 0; j < 16; j++) {
        vf acc = vload(q) * vload(kf + j * ldk);
        for (int c = 16; c < D; c += 16)
            acc = vload(q + c) * vload(kf + j * ldk + c) + acc;
        a[j] = acc;
    }
    return reduce16(a);
}

#if SGL_AVX512_BF16
#define BF16_DOT 1
/* scores (unscaled) of the bfloat16 query qb [D] against 16 bfloat16 keys krow[j] [D], D % 32 == 0: the same
 * 16-lane partial sums and reduction tree as qk16, each lane's products taken two at a time by one AVX-512 BF16
 * dot-product instruction straight from the pool (exact products, float32 sums), so the keys need no widening */
static inline vf qk16_bf16(const uint16_t *restrict qb, const uint16_t *const *krow, int D) {
    vf a[16];
    for (int j = 0; j < 16; j++) {
        __m512 acc = _mm512_setzero_ps();
        for (int c = 0; c < D; c += 32)
            acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(qb + c),
                                   (__m512bh)_mm512_loadu_si512(krow[j] + c));
        memcpy(&a[j], &acc, sizeof acc);
    }
    return reduce16(a);
}
#else
#define BF16_DOT 0
#endif

/* acc [D] += sum_j p[j] * value j for j < n, value j at vfb + j * ldv, in j order per lane */
static inline __attribute__((always_inline)) void pv(float *restrict acc, const float *restrict p, int n,
                                                      const float *restrict vfb, int ldv, int D) {
    vf o[MAX_D / 16];
    for (int c = 0; c < D / 16; c++)
        o[c] = vload(acc + 16 * c);
    for (int j = 0; j < n; j++) {
        const vf pj = vsplat(p[j]);
        for (int c = 0; c < D / 16; c++)
            o[c] = pj * vload(vfb + j * ldv + 16 * c) + o[c];
    }
    for (int c = 0; c < D / 16; c++)
        vstore(acc + 16 * c, o[c]);
}

/* cap * tanh(x / cap), through exp_neg of -2|x| / cap: tanh(a) = (1 - e) / (1 + e), e = exp(-2a), a >= 0 */
static inline vf soft_cap(vf x, float cap) {
    const vf t = x * vsplat(1.f / cap);
    const vi neg = t < vsplat(0.f);
    const vf a = vselect(neg, -t, t);
    const vf e = exp_neg(vsplat(-2.f) * a);
    const vf th = (vsplat(1.f) - e) / (vsplat(1.f) + e);
    return vsplat(cap) * vselect(neg, -th, th);
}

typedef struct {
    const float *q;
    const char *k, *v;
    const uint16_t *ks, *vs;       /* quantized pools: [S][Hk] bfloat16 scales */
    const float *rot;              /* [D][D] orthonormal, symmetric: the pool's vectors are stored times it (NULL:
                                    * not rotated); queries are rotated on the way in, outputs back on the way out */
    int elem, quant;
    const int32_t *table;
    int64_t ld;
    const int64_t *rows, *seq_lens;
    int Hq, Hk, D;
    int64_t start;
    float scale, softcap;
    int64_t max_chunks;
    float *acc, *cmax, *csum;      /* [B][Hk][max_chunks][G][D], [B][Hk][max_chunks][G] */
} Call;

/* float8 e4m3 (fn: no infinities; 0x7F / 0xFF are NaN) -> float32, all 256 values, filled once */
static float fp8_values[256];
static int fp8_ready;

static void fill_fp8_values(void) {
    for (int b = 0; b < 256; b++) {
        const int e = (b >> 3) & 15, m = b & 7;
        float x = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.f + m / 8.f, e - 7);
        if (e == 15 && m == 7)
            x = NAN;
        fp8_values[b] = b & 128 ? -x : x;
    }
    fp8_ready = 1;
}

/* 16 int8 values -> 16 float32 (sign-extend, convert: one instruction each with AVX-512, two with AVX2) */
static inline vf widen_i8(const void *src) {
    vf x;
#if SGL_AVX512
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)src)));
    memcpy(&x, &f, sizeof x);
#elif SGL_AVX2
    const __m128i b = _mm_loadu_si128((const __m128i *)src);
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
    memcpy(&x, &lo, 32);
    memcpy((char *)&x + 32, &hi, 32);
#else
    const int8_t *b = (const int8_t *)src;
    for (int l = 0; l < 16; l++)
        x[l] = (float)b[l];
#endif
    return x;
}

/* 16 bytes -> 16 int32 (zero-extended) */
static inline vi widen_u8(const void *src) {
    vi w;
#if SGL_AVX512
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)src));
    memcpy(&w, &v, sizeof w);
#elif SGL_AVX2
    const __m128i b = _mm_loadu_si128((const __m128i *)src);
    const __m256i lo = _mm256_cvtepu8_epi32(b), hi = _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8));
    memcpy(&w, &lo, 32);
    memcpy((char *)&w + 32, &hi, 32);
#else
    const uint8_t *u = (const uint8_t *)src;
    for (int l = 0; l < 16; l++)
        w[l] = u[l];
#endif
    return w;
}

/* 16 float8 e4m3 bytes -> 16 float32 (fp8_values' values, by bit arithmetic): a normal byte's exponent and
 * mantissa move into a float's, the exponent rebased by 127 - 7; a subnormal one (exponent 0) is m * 2^-9. The
 * byte 0x7F (NaN) is never stored: values are clamped to +-448 first. */
static inline vf widen_fp8(const void *src) {
    const vi w = widen_u8(src), mag = w & 0x7F, m = w & 7;
    const vi normal = (mag << 20) + (120 << 23);
    const vf sub = __builtin_convertvector(m, vf) * vsplat(1.f / 512.f);
    vf x = vselect((w & 0x78) == 0, sub, (vf)normal);
    return (vf)((vi)x | ((w & 0x80) << 24));
}

/* one slot of a quantized pool, every KV head, to float32: dst[h * D + d] = value(src[h][d]) * scale[h] */
static inline __attribute__((always_inline)) void dequant_slot(const Call *c, const char *buf,
                                                                const uint16_t *scales, int32_t slot, float *dst) {
    const int D = c->D, Hk = c->Hk;
    const char *src = buf + (size_t)slot * Hk * D;
    const uint16_t *sc = scales + (size_t)slot * Hk;
    for (int h = 0; h < Hk; h++) {
        const vf s = vsplat(bf16_to_f32(sc[h]));
        for (int d = 0; d < D; d += 16) {
            const void *p = src + (size_t)h * D + d;
            vstore(dst + (size_t)h * D + d, (c->quant == 1 ? widen_i8(p) : widen_fp8(p)) * s);
        }
    }
}

/* Head dims in the order widen_rows stores them: for bfloat16 slots with D % 32 == 0, each group of 32 values is
 * read as 16 32-bit words, whose high halves (the odd values) and shifted low halves (the even ones) widen with one
 * instruction each, so a group is stored as its 16 even values, then its 16 odd ones. Queries are permuted the
 * same way (dot products are the same sums in another order) and outputs permuted back in merge(). */
static inline int permuted(const Call *c) { return c->elem == 2 && c->D % 32 == 0; }

/* position in the widened order of natural dim d (identity when !permuted) */
static inline int widened_at(int d, int perm) { return perm ? (d & ~31) + ((d & 1) << 4) + ((d & 31) >> 1) : d; }

/* widen the slots of table row `row`, columns lo .. lo+n-1, of buf (every KV head: W = Hk * D values each) into
 * dst [n_pad][W] float32, rows n .. n_pad-1 zero */
static void widen_rows(const Call *c, const char *buf, int64_t row, int64_t lo, int n, int n_pad, float *dst) {
    const int W = c->Hk * c->D;
    const int32_t *slots = c->table + row * c->ld + lo;
    if (c->quant) {
        const uint16_t *scales = buf == c->k ? c->ks : c->vs;
        for (int j = 0; j < n; j++)
            dequant_slot(c, buf, scales, slots[j], dst + (size_t)j * W);
        memset(dst + (size_t)n * W, 0, (size_t)(n_pad - n) * W * sizeof(float));
        return;
    }
    for (int j = 0; j < n; j++) {
        const char *src = buf + (size_t)slots[j] * W * c->elem;
        float *out = dst + (size_t)j * W;
        if (permuted(c)) {
            for (int d = 0; d < W; d += 32) {
                vu w;
                memcpy(&w, src + (size_t)d * 2, sizeof w);
                vstore(out + d, (vf)(w << 16));
                vstore(out + d + 16, (vf)(w & 0xFFFF0000u));
            }
        } else {
            for (int d = 0; d < W; d += 16)
                vstore(out + d, widen16(src + (size_t)d * c->elem, c->elem));
        }
    }
    memset(dst + (size_t)n * W, 0, (size_t)(n_pad - n) * W * sizeof(float));
}

/* WORK_FLOATS(W, D, nq): a job's scratch for nq query vectors: a block of 16 slots widened (W = Hk * D floats
 * each), the scaled queries, their scores */
#define WORK_FLOATS(W, D, nq) ((size_t)16 * (W) + (size_t)(nq) * ((D) + CHUNK))

/* Query vector i: qs + i * D (scaled, widened order), of KV head kh[i], over n[i] columns of the chunk from `lo`:
 * scores into sc [nq][CHUNK], then their exps, the values weighted into acc[i] [D], the max and sum into cmax[i],
 * csum[i]. One block of 16 slots (keys, then values) at a time is widened to float32 for all the vectors. A vector
 * with bf[i] set (a bfloat16 pool, and its query exactly bfloat16, as the runtime's are) instead holds the query's
 * bfloat16 bits in natural order at qs + i * D and takes its scores from qk16_bf16, the keys read in place. */
static inline __attribute__((always_inline)) void attend_chunk(const Call *c, int64_t row, int64_t lo, int nk,
                                                                 int nq, const float *qs, const int *kh,
                                                                 const int *n, const int *bf, float *sc,
                                                                 float *blk, float *const *acc,
                                                                 float *const *cmax, float *const *csum, int D) {
    const vi lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const int W = c->Hk * D, blocks = (nk + 15) / 16;
    int widen_keys = 0;
    for (int i = 0; i < nq; i++)
        widen_keys |= !bf[i];
#define BLOCK_ROWS(b) (nk - 16 * (b) < 16 ? nk - 16 * (b) : 16)
    for (int b = 0; b < blocks; b++) {
        if (widen_keys)
            widen_rows(c, c->k, row, lo + 16 * b, BLOCK_ROWS(b), 16, blk);
#if BF16_DOT
        static const uint16_t zeros[MAX_D] = {0};
        const uint16_t *keys[16];
        const int32_t *slots = c->table + row * c->ld + lo + 16 * b;
        for (int j = 0; j < 16; j++)
            keys[j] = j < BLOCK_ROWS(b) ? (const uint16_t *)c->k + (size_t)slots[j] * W : zeros;
        const uint16_t *kk[16] = {0};  /* keys[] at KV head kk_head (vectors come head by head) */
        int kk_head = -1;
#endif
        for (int i = 0; i < nq; i++) {
            if (n[i] <= 16 * b)
                continue;
#if BF16_DOT
            if (bf[i]) {
                if (kh[i] != kk_head) {
                    kk_head = kh[i];
                    for (int j = 0; j < 16; j++)
                        kk[j] = keys[j] == zeros ? zeros : keys[j] + kk_head * D;
                }
                vstore(sc + (size_t)i * CHUNK + 16 * b,
                       qk16_bf16((const uint16_t *)(qs + (size_t)i * D), kk, D) * vsplat(c->scale));
                continue;
            }
#endif
            vstore(sc + (size_t)i * CHUNK + 16 * b, qk16(qs + (size_t)i * D, blk + kh[i] * D, W, D));
        }
    }
    for (int i = 0; i < nq; i++) {
        float *s = sc + (size_t)i * CHUNK;
        const int nb = (n[i] + 15) / 16;
        if (c->softcap > 0.f)
            for (int b = 0; b < nb; b++)
                vstore(s + 16 * b, soft_cap(vload(s + 16 * b), c->softcap));
        vf mv = vsplat(-INFINITY);
        for (int b = 0; b < nb; b++) {
            const vf x = vload(s + 16 * b);
            const vi valid = lane < (vi){0} + (n[i] - 16 * b);
            mv = vselect(valid & (x > mv), x, mv);
        }
        float mx = mv[0];
        for (int l = 1; l < 16; l++)
            mx = mv[l] > mx ? mv[l] : mx;
        vf sum = vsplat(0.f);
        for (int b = 0; b < nb; b++) {
            const vi valid = lane < (vi){0} + (n[i] - 16 * b);
            const vf e = vselect(valid, exp_neg(vload(s + 16 * b) - vsplat(mx)), vsplat(0.f));
            vstore(s + 16 * b, e);
            sum += e;
        }
        float total = 0.f;
        for (int l = 0; l < 16; l++)
            total += sum[l];
        *cmax[i] = mx;
        *csum[i] = total;
        memset(acc[i], 0, (size_t)D * sizeof(float));
    }
    for (int b = 0; b < blocks; b++) {
        widen_rows(c, c->v, row, lo + 16 * b, BLOCK_ROWS(b), BLOCK_ROWS(b), blk);
        for (int i = 0; i < nq; i++)
            if (n[i] > 16 * b)
                pv(acc[i], sc + (size_t)i * CHUNK + 16 * b, n[i] - 16 * b < 16 ? n[i] - 16 * b : 16,
                   blk + kh[i] * D, W, D);
    }
#undef BLOCK_ROWS
}

/* job: entries b0 .. b1-1 (one request's run), every head, chunk `chunk`; work: WORK_FLOATS(Hk * D, D,
 * (b1 - b0) * Hq) floats */
static void run_job(const Call *c, int64_t b0, int64_t b1, int64_t chunk, float *work) {
    const int D = c->D, G = c->Hq / c->Hk;
    const int64_t lo = c->start + chunk * CHUNK, row = c->rows[b0];
    int64_t hi = lo;
    for (int64_t b = b0; b < b1; b++)
        hi = c->seq_lens[b] > hi ? c->seq_lens[b] : hi;
    hi = hi < lo + CHUNK ? hi : lo + CHUNK;
    const int cap = (int)(b1 - b0) * c->Hq;
    float *blk = work, *qs = blk + (size_t)16 * c->Hk * D, *sc = qs + (size_t)cap * D;
    int n[cap], kh[cap], bf[cap];
    float *acc[cap], *cmax[cap], *csum[cap];
    int nq = 0;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t end = c->seq_lens[b] < lo + CHUNK ? c->seq_lens[b] : lo + CHUNK;
        if (end <= lo)
            continue;
        for (int h = 0; h < c->Hq; h++, nq++) {
            const float *qrow = c->q + ((size_t)b * c->Hq + h) * D;
            bf[nq] = BF16_DOT && c->elem == 2 && D % 32 == 0;
            for (int d = 0; d < D && bf[nq]; d++) {
                uint32_t u;
                memcpy(&u, qrow + d, 4);
                bf[nq] = (u & 0xFFFFu) == 0;
            }
            if (bf[nq]) {
                uint16_t *qb = (uint16_t *)(qs + (size_t)nq * D);
                for (int d = 0; d < D; d++) {
                    uint32_t u;
                    memcpy(&u, qrow + d, 4);
                    qb[d] = (uint16_t)(u >> 16);
                }
            } else if (c->rot) {
                for (int d = 0; d < D; d++) {
                    float acc = 0.f;
                    for (int e = 0; e < D; e++)
                        acc += qrow[e] * c->rot[(size_t)e * D + d];
                    qs[(size_t)nq * D + d] = acc * c->scale;
                }
            } else {
                const int perm = permuted(c);
                for (int d = 0; d < D; d++)
                    qs[(size_t)nq * D + widened_at(d, perm)] = qrow[d] * c->scale;
            }
            const size_t part = (((size_t)b * c->Hk + h / G) * c->max_chunks + chunk) * G + h % G;
            n[nq] = (int)(end - lo);
            kh[nq] = h / G;
            acc[nq] = c->acc + part * D;
            cmax[nq] = c->cmax + part;
            csum[nq] = c->csum + part;
        }
    }
    const int nk = (int)(hi - lo);
    if (D == 64)
        attend_chunk(c, row, lo, nk, nq, qs, kh, n, bf, sc, blk, acc, cmax, csum, 64);
    else if (D == 128)
        attend_chunk(c, row, lo, nk, nq, qs, kh, n, bf, sc, blk, acc, cmax, csum, 128);
    else
        attend_chunk(c, row, lo, nk, nq, qs, kh, n, bf, sc, blk, acc, cmax, csum, D);
}

/* entry b, KV head kh: its chunks merged in order into out, lse_max, lse_sum */
static void merge(const Call *c, int64_t b, int kh, float *out, float *lse_max, float *lse_sum) {
    const int D = c->D, G = c->Hq / c->Hk;
    const int64_t chunks = (c->seq_lens[b] - c->start + CHUNK - 1) / CHUNK;
    const int perm = permuted(c);
    for (int g = 0; g < G; g++) {
        const int h = kh * G + g;
        const size_t first = (((size_t)b * c->Hk + kh) * c->max_chunks) * G + g;
        float m = c->cmax[first];
        for (int64_t ch = 1; ch < chunks; ch++)
            m = c->cmax[first + ch * G] > m ? c->cmax[first + ch * G] : m;
        float *o = out + ((size_t)b * c->Hq + h) * D, total = 0.f;
        memset(o, 0, (size_t)D * sizeof(float));
        for (int64_t ch = 0; ch < chunks; ch++) {
            const size_t part = first + ch * G;
            const float w = exp_neg(vsplat(c->cmax[part] - m))[0];
            total += w * c->csum[part];
            for (int d = 0; d < D; d++)
                o[d] += w * c->acc[part * D + widened_at(d, perm)];
        }
        const float inv = 1.f / total;
        for (int d = 0; d < D; d++)
            o[d] *= inv;
        if (c->rot) {
            float t[MAX_D];
            memcpy(t, o, (size_t)D * sizeof(float));
            for (int d = 0; d < D; d++) {
                float acc = 0.f;
                for (int e = 0; e < D; e++)
                    acc += t[e] * c->rot[(size_t)e * D + d];
                o[d] = acc;
            }
        }
        lse_max[(size_t)b * c->Hq + h] = m;
        lse_sum[(size_t)b * c->Hq + h] = total;
    }
}

/* The path this build takes, for logs and the kernel registry (kernels/registry.py). */
const char *attn_decode_isa(void) {
#if BF16_DOT
    return "avx512_bf16";
#elif SGL_AVX512
    return "avx512";
#elif SGL_AVX2
    return "avx2";
#else
    return "generic";
#endif
}

/* See the top of this file. Returns 0; -1 when out of memory or given shapes it does not take (D not a multiple
 * of 16 or above MAX_D, elem not 2 or 4), with out untouched. */
int attn_decode(const float *q, const void *k, const void *v, const uint16_t *ks, const uint16_t *vs,
                const float *rot, int elem, int quant, const int32_t *table, int64_t ld, const int64_t *rows, const int64_t *seq_lens, int64_t B,
                int Hq, int Hk, int D, int64_t start, float scale, float softcap, float *out, float *lse_max,
                float *lse_sum, int nthreads) {
    if (D % 16 || D > MAX_D || D <= 0 || Hk <= 0 || Hq % Hk || (quant == 0 && elem != 2 && elem != 4)
            || (quant != 0 && (elem != 1 || quant > 2)))
        return -1;
    if (quant == 2 && !fp8_ready)
        fill_fp8_values();    /* idempotent: threads that race here write the same values */
    const int G = Hq / Hk;
    int64_t max_chunks = 1, runs = 0, jobs = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t ch = (seq_lens[b] - start + CHUNK - 1) / CHUNK;
        max_chunks = ch > max_chunks ? ch : max_chunks;
    }
    /* runs of adjacent entries with one table row, MAX_RUN at most: run r is entries run_at[r] .. run_at[r+1]-1 */
    int64_t *run_at = malloc((size_t)(B + 1) * sizeof(int64_t)), *run_chunks = malloc((size_t)B * sizeof(int64_t));
    float *scratch = malloc((size_t)B * Hk * max_chunks * G * (D + 2) * sizeof(float));
    int64_t longest = 1;          /* entries in the longest run */
    for (int64_t b = 0, len = 0; b < B; b++) {
        len = b > 0 && rows[b] == rows[b - 1] && len < MAX_RUN ? len + 1 : 1;
        longest = len > longest ? len : longest;
    }
    const size_t work_floats = WORK_FLOATS((size_t)Hk * D, D, longest * Hq);
    float *work = malloc((size_t)(nthreads > 1 ? nthreads : 1) * work_floats * sizeof(float));
    int64_t *job_run = NULL;
    int failed = run_at == NULL || run_chunks == NULL || scratch == NULL || work == NULL;
    if (!failed) {
        for (int64_t b = 0; b < B; b++) {
            const int64_t ch = (seq_lens[b] - start + CHUNK - 1) / CHUNK;
            if (b == 0 || rows[b] != rows[b - 1] || b - run_at[runs - 1] >= MAX_RUN) {
                run_at[runs] = b;
                run_chunks[runs++] = ch;
            } else if (ch > run_chunks[runs - 1]) {
                run_chunks[runs - 1] = ch;
            }
        }
        run_at[runs] = B;
        for (int64_t r = 0; r < runs; r++)
            jobs += run_chunks[r];
        job_run = malloc((size_t)jobs * 2 * sizeof(int64_t));
        failed = job_run == NULL;
    }
    if (!failed) {
        /* job j: (run, chunk), every KV head: a job reads whole slots, in order */
        int64_t j = 0;
        for (int64_t r = 0; r < runs; r++)
            for (int64_t ch = 0; ch < run_chunks[r]; ch++, j++) {
                job_run[2 * j] = r;
                job_run[2 * j + 1] = ch;
            }
        const size_t parts = (size_t)B * Hk * max_chunks * G;
        Call c = {q, (const char *)k, (const char *)v, ks, vs, rot, elem, quant, table, ld, rows, seq_lens, Hq, Hk, D,
                  start, scale, softcap, max_chunks, scratch, scratch + parts * D, scratch + parts * (D + 1)};
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
        {
#pragma omp for schedule(static)
            for (int64_t i = 0; i < jobs; i++) {
                const int64_t r = job_run[2 * i];
                run_job(&c, run_at[r], run_at[r + 1], job_run[2 * i + 1],
                        work + (size_t)omp_get_thread_num() * work_floats);
            }
#pragma omp for schedule(static)
            for (int64_t i = 0; i < B * Hk; i++)
                merge(&c, i / Hk, (int)(i % Hk), out, lse_max, lse_sum);
        }
    }
    free(run_at);
    free(run_chunks);
    free(scratch);
    free(work);
    free(job_run);
    return failed ? -1 : 0;
}
