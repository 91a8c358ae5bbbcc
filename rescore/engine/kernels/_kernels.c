/*
 * rescore.engine.kernels._kernels: a fused LSTM cell and an output layer's target rows, for inference on a
 * CPU (rescore.engine.kernels.native).
 *
 * PyTorch runs an LSTM cell's element-wise work as about ten separate kernels, each a pass
 * over memory with its own dispatch; with the table look-up, the additions and the
 * concatenation around them that was about a sixth of an unnormalised int8 scoring run.
 * Here the whole cell is one pass over the rows, with a vectorised exp. Unnormalised scoring
 * reads one output row per target: a dot product each, where PyTorch first gathers the rows
 * (and the hidden states) into copies. Exact scoring needs each row's log-normaliser and its
 * targets' logits only: a row's logsumexp in one max pass and one exp pass, where PyTorch's
 * log_softmax writes the whole (rows, V) result. With int8 products, a whole LSTM layer step
 * is one kernel (lstm_int8): the states quantised with a fixed scale (an LSTM's h lies in
 * [-1, 1]), the product with int8 weights in 32-bit integer sums, and the cell on each tile of
 * the result while it is in registers; the (rows, 4H) float pre-activations are never written.
 *
 * Every function takes raw addresses (the tensors' data_ptr()) and sizes; the Python side
 * (rescore/engine/kernels/native.py) checks dtypes, devices and strides before it calls. No state,
 * no allocation, the GIL released while a kernel runs.
 *
 * Accuracy: exp is Cephes' single-precision polynomial (relative error about 1e-7 over the
 * clamped range), so the results equal PyTorch's to a few units in the last place.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

/* exp(x) = 2^n p(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]; x clamped to
 * [-87, 88] (the float range). Branch-free so that compilers vectorise the loops calling it. */
static inline __attribute__((always_inline)) float fast_exp(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float t = x * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: round to nearest */
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f; /* ln 2 in two parts (Cody and Waite) */
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

static inline __attribute__((always_inline)) float sigmoid(float x) {
    return 1.0f / (1.0f + fast_exp(-x));
}

/* One LSTM cell step for `rows` rows of width H.
 * pre (rows, 4H) row-major, gate order i, f, u, o (PyTorch's), the cell input u's rows
 * doubled by the caller's weights (u = 2a), so that every gate takes one sigmoid:
 * tanh(a) = 2 sigmoid(2a) - 1. With `table` (non-NULL) row ids[b] of the (V, 4H) table is
 * added to row b first (layer 0's input projection, looked up instead of computed).
 * c = f c_prev + i tanh(a), h = o tanh(c); h also goes to h2 where h2 is non-NULL. */
static inline __attribute__((always_inline)) void
cell_body(const float *restrict pre, const float *restrict table, const int64_t *restrict ids,
          int64_t rows, int64_t H, const float *restrict c_prev, int64_t c_prev_stride,
          float *restrict c_out, int64_t c_out_stride, float *restrict h_out, int64_t h_out_stride,
          float *restrict h2, int64_t h2_stride) {
    for (int64_t b = 0; b < rows; b++) {
        const float *restrict g = pre + b * 4 * H;
        const float *restrict tab = table ? table + ids[b] * 4 * H : NULL;
        const float *restrict c0 = c_prev + b * c_prev_stride;
        float *restrict c1 = c_out + b * c_out_stride;
        float *restrict h1 = h_out + b * h_out_stride;
        if (tab) {
#pragma omp simd
            for (int64_t j = 0; j < H; j++) {
                float i = sigmoid(g[j] + tab[j]), f = sigmoid(g[H + j] + tab[H + j]);
                float u = 2.0f * sigmoid(g[2 * H + j] + tab[2 * H + j]) - 1.0f;
                float o = sigmoid(g[3 * H + j] + tab[3 * H + j]);
                float c = f * c0[j] + i * u;
                c1[j] = c;
                h1[j] = o * (2.0f * sigmoid(2.0f * c) - 1.0f);
            }
        } else {
#pragma omp simd
            for (int64_t j = 0; j < H; j++) {
                float i = sigmoid(g[j]), f = sigmoid(g[H + j]);
                float u = 2.0f * sigmoid(g[2 * H + j]) - 1.0f;
                float o = sigmoid(g[3 * H + j]);
                float c = f * c0[j] + i * u;
                c1[j] = c;
                h1[j] = o * (2.0f * sigmoid(2.0f * c) - 1.0f);
            }
        }
        if (h2)
            memcpy(h2 + b * h2_stride, h1, (size_t)H * sizeof(float));
    }
}

/* out[e] = hidden[b[e] * hs0 + t[e] * hs1, :] . weight[ids[e], :] + bias[ids[e]] for E edges
 * of width H: the target rows of an output layer, without gathering them into copies. */
static inline __attribute__((always_inline)) void
rows_dot_body(const float *restrict hidden, int64_t hs0, int64_t hs1, const int64_t *restrict b,
              const int64_t *restrict t, const float *restrict weight, int64_t ws,
              const float *restrict bias, const int64_t *restrict ids, int64_t E, int64_t H,
              float *restrict out) {
    for (int64_t e = 0; e < E; e++) {
        const float *restrict h = hidden + b[e] * hs0 + t[e] * hs1;
        const float *restrict w = weight + ids[e] * ws;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < H; j++)
            s += h[j] * w[j];
        out[e] = s + (bias ? bias[ids[e]] : 0.0f);
    }
}

/* out[b] = log sum_j exp(x[b, j]) for `rows` rows of V values (row stride `stride`): the max,
 * then the sum of exp(x - max) in float blocks added up in double. A row that holds +inf or
 * NaN, or only -inf, gives its max. */
#define LSE_BLOCK 512
static inline __attribute__((always_inline)) void
lse_body(const float *restrict x, int64_t rows, int64_t V, int64_t stride, float *restrict out) {
    for (int64_t b = 0; b < rows; b++) {
        const float *restrict r = x + b * stride;
        float m = r[0];
        int bad = 0;
#pragma omp simd reduction(max : m) reduction(| : bad)
        for (int64_t j = 0; j < V; j++) {
            m = r[j] > m ? r[j] : m;
            bad |= r[j] != r[j];
        }
        if (bad || m == INFINITY || m == -INFINITY) {
            out[b] = bad ? NAN : m;
            continue;
        }
        double total = 0.0;
        for (int64_t s = 0; s < V; s += LSE_BLOCK) {
            int64_t e = s + LSE_BLOCK < V ? s + LSE_BLOCK : V;
            float part = 0.0f;
#pragma omp simd reduction(+ : part)
            for (int64_t j = s; j < e; j++)
                part += fast_exp(r[j] - m);
            total += part;
        }
        out[b] = m + (float)log(total);
    }
}


/* ---- int8 LSTM layers -------------------------------------------------------------------
 * States are quantised as q = round(63 x) + 64 in [1, 127] (x in [-1, 1]; 7 bits) and weights
 * (4H, K) per output row on 63 levels (scale s_n = max |w_n| / 63), so that AVX2's u8 x s8
 * multiply-add can sum four products of a column in 16 bits (4 x 127 x 63 = 32004 < 32767)
 * before one widening to 32 bits: a quarter fewer multiply instructions than widening every
 * pair. Weights are packed by
 * unit blocks of 8: block jb holds, for each group of 4 inputs kq, the 4 gates' 8 units x 4
 * inputs (128 bytes). Then x . w_n = (s_n / 63) (sum_k q_k w_nk - 64 sum_k w_nk): `cs64` holds
 * 64 sum_k w_nk, `mul` s_n / 63. */
#define Q_ZERO 64
#define Q_SCALE 63.0f

static inline __attribute__((always_inline)) uint8_t quant_one(float x) {
    float v = x * Q_SCALE + (Q_ZERO + 0.5f);
    v = v >= 1.0f ? v : 1.0f; /* (NaN too) */
    v = v <= 127.0f ? v : 127.0f;
    return (uint8_t)(int32_t)v;
}

static inline __attribute__((always_inline)) void
quant_body(const float *restrict src, int64_t src_stride, int64_t rows, int64_t width,
           uint8_t *restrict dst, int64_t dst_stride) {
    for (int64_t b = 0; b < rows; b++) {
        const float *restrict s = src + b * src_stride;
        uint8_t *restrict d = dst + b * dst_stride;
#pragma omp simd
        for (int64_t j = 0; j < width; j++)
            d[j] = quant_one(s[j]);
    }
}

/* The cell on 8 units (j0..j0+7) of one row from their integer sums acc[gate * 8 + u]: as
 * cell_body, pre-activation = (acc - cs64) mul + bias (+ the table row). h also goes to q
 * (quantised, the next layer's input) where q is non-NULL. */
static inline __attribute__((always_inline)) void
cell8_body(const int32_t *restrict acc, const int32_t *restrict cs64, const float *restrict mul,
           const float *restrict bias, const float *restrict tab, int64_t H, int64_t j0,
           const float *restrict c0, float *restrict c1, float *restrict h1, uint8_t *restrict q) {
    float g[4][8];
    for (int k = 0; k < 4; k++) {
        const int64_t n = k * H + j0;
#pragma omp simd
        for (int u = 0; u < 8; u++)
            g[k][u] = (float)(acc[k * 8 + u] - cs64[n + u]) * mul[n + u] + bias[n + u] +
                      (tab ? tab[n + u] : 0.0f);
    }
    float h[8];
#pragma omp simd
    for (int u = 0; u < 8; u++) {
        float i = sigmoid(g[0][u]), f = sigmoid(g[1][u]);
        float a = 2.0f * sigmoid(g[2][u]) - 1.0f;
        float o = sigmoid(g[3][u]);
        float c = f * c0[j0 + u] + i * a;
        c1[j0 + u] = c;
        h[u] = o * (2.0f * sigmoid(2.0f * c) - 1.0f);
        h1[j0 + u] = h[u];
    }
    if (q) {
#pragma omp simd
        for (int u = 0; u < 8; u++)
            q[j0 + u] = quant_one(h[u]);
    }
}

#define LQ_ARGS                                                                                \
    const uint8_t *a, int64_t a_stride, int64_t rows, int64_t Kq, int64_t H, const int8_t *w,  \
        const int32_t *cs64, const float *mul, const float *bias, const float *table,          \
        const int64_t *ids, const float *c_prev, int64_t c_prev_stride, const int64_t *c_rows, \
        float *c_out,                                                                          \
        int64_t c_out_stride, float *h_out, int64_t h_out_stride, uint8_t *q_out,              \
        int64_t q_out_stride
/* Row b's previous cell state: row c_rows[b] of c_prev where the rows are given (a trie level
 * reads its parents' rows), else row b. */
#define LQ_C_PREV(b) (c_prev + (c_rows ? c_rows[b] : (b)) * c_prev_stride)
#define LQ_ROW_EPILOGUE(acc, b)                                                                \
    cell8_body((acc), cs64, mul, bias, table ? table + ids[b] * 4 * H : NULL, H, jb * 8,       \
               LQ_C_PREV(b), c_out + (b) * c_out_stride,                                       \
               h_out + (b) * h_out_stride, q_out ? q_out + (b) * q_out_stride : NULL)
/* The cell on the tile's rows b and, if `two`, b + 1: row by row, or both at once in AVX2. */
#define LQ_CELL_GENERIC(acc, b, two)                                                           \
    do {                                                                                       \
        LQ_ROW_EPILOGUE(acc[0], b);                                                            \
        if (two)                                                                               \
            LQ_ROW_EPILOGUE(acc[1], (b) + 1);                                                  \
    } while (0)
#define LQ_ROW_AT(base, stride, b) ((base) ? (base) + (b) * (stride) : NULL)
#define LQ_CELL_AVX2(acc, b, two)                                                              \
    cell8x2_avx2(acc, two, cs64, mul, bias, table ? table + ids[b] * 4 * H : NULL,             \
                 table && two ? table + ids[(b) + 1] * 4 * H : NULL, H, jb * 8,                \
                 LQ_C_PREV(b), LQ_C_PREV((b) + two),                                           \
                 c_out + (b) * c_out_stride, c_out + ((b) + two) * c_out_stride,               \
                 h_out + (b) * h_out_stride, h_out + ((b) + two) * h_out_stride,               \
                 LQ_ROW_AT(q_out, q_out_stride, b), LQ_ROW_AT(q_out, q_out_stride, (b) + two))

/* The integer sums of two rows x0, x1 (x1 may be x0) against one block of 32 packed output
 * columns (Kq groups of 4 inputs, 128 bytes each: 32 columns x 4 inputs): acc[row][column]. */
static inline __attribute__((always_inline)) void
tile_generic(const uint8_t *restrict x0, const uint8_t *restrict x1, const int8_t *restrict wb,
             int64_t Kq, int32_t acc[2][32]) {
    memset(acc, 0, 2 * 32 * sizeof(int32_t));
    for (int64_t kq = 0; kq < Kq; kq++)
        for (int n = 0; n < 32; n++) {
            int32_t s0 = 0, s1 = 0;
            for (int k = 0; k < 4; k++) {
                s0 += (int32_t)x0[4 * kq + k] * (int32_t)wb[kq * 128 + n * 4 + k];
                s1 += (int32_t)x1[4 * kq + k] * (int32_t)wb[kq * 128 + n * 4 + k];
            }
            acc[0][n] += s0;
            acc[1][n] += s1;
        }
}

static inline __attribute__((always_inline)) int32_t load4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* AVX2: the 2 x 32 sums in 8 registers; per group of 4 inputs, each row's 4 bytes broadcast,
 * vpmaddubsw (u8 x s8 -> pairs summed in 16 bits) and vpmaddwd by 1 (-> 32 bits). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
tile_avx2(const uint8_t *x0, const uint8_t *x1, const int8_t *wb, int64_t Kq, int32_t acc[2][32]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s00 = _mm256_setzero_si256(), s01 = s00, s02 = s00, s03 = s00;
    __m256i s10 = s00, s11 = s00, s12 = s00, s13 = s00;
#define LQ_BCAST(x, kq) _mm256_set1_epi32(load4((x) + 4 * (kq)))
#define LQ_W(kq, j) _mm256_loadu_si256((const __m256i *)(wb + (kq) * 128 + 32 * (j)))
#define LQ_MUL(av, kq, j) _mm256_maddubs_epi16(av, LQ_W(kq, j))
#define LQ_ADD(s, p) s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones))
    int64_t kq = 0;
    /* two groups of 4 inputs per 32-bit widening: |w| <= 63, so four products of a column sum
     * to at most 4 x 127 x 63 = 32004 in 16 bits. In assembly: compilers spill accumulators
     * here (8 of them, the 4 broadcast inputs and the constant take 13 of the 16 registers). */
    for (; kq + 2 <= Kq; kq += 2) {
        __m256i a0, b0, a1, b1, t0, t1, t2;
        const int8_t *wk = wb + kq * 128;
        const uint8_t *p0 = x0 + 4 * kq, *p1 = x1 + 4 * kq;
#define LQ_COL(J, S0, S1)                                                                      \
    "vpmaddubsw " #J "*32(%[w]), %[a0], %[t0]\n\t"                                             \
    "vpmaddubsw 128+" #J "*32(%[w]), %[b0], %[t1]\n\t"                                         \
    "vpaddw %[t1], %[t0], %[t0]\n\t"                                                           \
    "vpmaddwd %[ones], %[t0], %[t0]\n\t"                                                       \
    "vpaddd %[t0], %[" #S0 "], %[" #S0 "]\n\t"                                                 \
    "vpmaddubsw " #J "*32(%[w]), %[a1], %[t1]\n\t"                                             \
    "vpmaddubsw 128+" #J "*32(%[w]), %[b1], %[t2]\n\t"                                         \
    "vpaddw %[t2], %[t1], %[t1]\n\t"                                                           \
    "vpmaddwd %[ones], %[t1], %[t1]\n\t"                                                       \
    "vpaddd %[t1], %[" #S1 "], %[" #S1 "]\n\t"
        __asm__("vpbroadcastd (%[p0]), %[a0]\n\t"
                "vpbroadcastd 4(%[p0]), %[b0]\n\t"
                "vpbroadcastd (%[p1]), %[a1]\n\t"
                "vpbroadcastd 4(%[p1]), %[b1]\n\t"
                LQ_COL(0, s00, s10) LQ_COL(1, s01, s11) LQ_COL(2, s02, s12) LQ_COL(3, s03, s13)
                : [s00] "+x"(s00), [s01] "+x"(s01), [s02] "+x"(s02), [s03] "+x"(s03),
                  [s10] "+x"(s10), [s11] "+x"(s11), [s12] "+x"(s12), [s13] "+x"(s13),
                  [a0] "=&x"(a0), [b0] "=&x"(b0), [a1] "=&x"(a1), [b1] "=&x"(b1),
                  [t0] "=&x"(t0), [t1] "=&x"(t1), [t2] "=&x"(t2)
                : [w] "r"(wk), [p0] "r"(p0), [p1] "r"(p1), [ones] "x"(ones)
                : "memory");
#undef LQ_COL
    }
    if (kq < Kq) {
        const __m256i a0 = LQ_BCAST(x0, kq), a1 = LQ_BCAST(x1, kq);
        LQ_ADD(s00, LQ_MUL(a0, kq, 0)); LQ_ADD(s01, LQ_MUL(a0, kq, 1));
        LQ_ADD(s02, LQ_MUL(a0, kq, 2)); LQ_ADD(s03, LQ_MUL(a0, kq, 3));
        LQ_ADD(s10, LQ_MUL(a1, kq, 0)); LQ_ADD(s11, LQ_MUL(a1, kq, 1));
        LQ_ADD(s12, LQ_MUL(a1, kq, 2)); LQ_ADD(s13, LQ_MUL(a1, kq, 3));
    }
#undef LQ_BCAST
#undef LQ_W
#undef LQ_MUL
#undef LQ_ADD
    _mm256_storeu_si256((__m256i *)acc[0], s00);
    _mm256_storeu_si256((__m256i *)(acc[0] + 8), s01);
    _mm256_storeu_si256((__m256i *)(acc[0] + 16), s02);
    _mm256_storeu_si256((__m256i *)(acc[0] + 24), s03);
    _mm256_storeu_si256((__m256i *)acc[1], s10);
    _mm256_storeu_si256((__m256i *)(acc[1] + 8), s11);
    _mm256_storeu_si256((__m256i *)(acc[1] + 16), s12);
    _mm256_storeu_si256((__m256i *)(acc[1] + 24), s13);
}

/* cell8_body in AVX2 on two rows at once (b and b + 1, the tile's), each step of the sigmoids
 * done for all of their registers before the next (step-major), so that the core overlaps
 * their dependency chains. sigmoid(x) = 1 / (1 + 2^t), t = -x log2 e: 2^t = 2^n 2^f with n =
 * round(t), f in [-1/2, 1/2], 2^f by a degree-5 polynomial (relative error 2.4e-7 in float;
 * exp2_avx2), the division by a reciprocal estimate and one Newton step. */
#define SIG_C5 1.3277778634801507e-3f
#define SIG_C4 9.675553068518639e-3f
#define SIG_C3 5.550709366798401e-2f
#define SIG_C2 2.4022118747234344e-1f
#define SIG_C1 6.931469440460205e-1f
#define SIG_C0 1.0000001192092896f

/* 2^t[k] in place for n registers, t in [-126, 126] */
__attribute__((target("avx2,fma"), always_inline)) static inline void exp2_avx2(__m256 *t, int n) {
    __m256 f[8];
    __m256i e[8];
    for (int k = 0; k < n; k++) {
        const __m256 r = _mm256_round_ps(t[k], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        f[k] = _mm256_sub_ps(t[k], r);
        e[k] = _mm256_slli_epi32(_mm256_cvtps_epi32(r), 23);
    }
    for (int k = 0; k < n; k++) t[k] = _mm256_fmadd_ps(_mm256_set1_ps(SIG_C5), f[k], _mm256_set1_ps(SIG_C4));
    for (int k = 0; k < n; k++) t[k] = _mm256_fmadd_ps(t[k], f[k], _mm256_set1_ps(SIG_C3));
    for (int k = 0; k < n; k++) t[k] = _mm256_fmadd_ps(t[k], f[k], _mm256_set1_ps(SIG_C2));
    for (int k = 0; k < n; k++) t[k] = _mm256_fmadd_ps(t[k], f[k], _mm256_set1_ps(SIG_C1));
    for (int k = 0; k < n; k++) t[k] = _mm256_fmadd_ps(t[k], f[k], _mm256_set1_ps(SIG_C0));
    for (int k = 0; k < n; k++) /* 2^n 2^f: n added to the exponent */
        t[k] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(t[k]), e[k]));
}

__attribute__((target("avx2,fma"), always_inline)) static inline void sigmoid_avx2(__m256 *v, int n) {
    __m256 t[8];
    for (int k = 0; k < n; k++) {
        t[k] = _mm256_mul_ps(v[k], _mm256_set1_ps(-1.44269504088896341f));
        t[k] = _mm256_min_ps(_mm256_max_ps(t[k], _mm256_set1_ps(-126.0f)), _mm256_set1_ps(126.0f));
    }
    exp2_avx2(t, n);
    for (int k = 0; k < n; k++) { /* 1 / (1 + 2^t) */
        const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), t[k]);
        const __m256 r = _mm256_rcp_ps(d);
        v[k] = _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(2.0f)));
    }
}

/* The cell on 8 units (j0..j0+7) of rows b and, if `two`, b + 1, from the tile's sums acc[2][32]. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
cell8x2_avx2(const int32_t (*acc)[32], int two, const int32_t *restrict cs64, const float *restrict mul,
             const float *restrict bias, const float *restrict tab0, const float *restrict tab1, int64_t H,
             int64_t j0, const float *restrict c0a, const float *restrict c0b, float *restrict c1a,
             float *restrict c1b, float *restrict h1a, float *restrict h1b, uint8_t *restrict qa,
             uint8_t *restrict qb) {
    __m256 g[8];
    for (int r = 0; r < 2; r++) {
        const float *tab = r ? tab1 : tab0;
        for (int k = 0; k < 4; k++) {
            const int64_t n = k * H + j0;
            const __m256i a = _mm256_sub_epi32(_mm256_load_si256((const __m256i *)(acc[r] + 8 * k)),
                                               _mm256_loadu_si256((const __m256i *)(cs64 + n)));
            __m256 b = _mm256_loadu_ps(bias + n);
            if (tab)
                b = _mm256_add_ps(b, _mm256_loadu_ps(tab + n));
            g[4 * r + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_loadu_ps(mul + n), b);
        }
    }
    sigmoid_avx2(g, 8);
    const __m256 one = _mm256_set1_ps(1.0f), two_ = _mm256_set1_ps(2.0f);
    __m256 c[2], t[2];
    for (int r = 0; r < 2; r++) {
        const __m256 a = _mm256_fmsub_ps(two_, g[4 * r + 2], one);
        c[r] = _mm256_fmadd_ps(g[4 * r + 1], _mm256_loadu_ps((r ? c0b : c0a) + j0), _mm256_mul_ps(g[4 * r], a));
        t[r] = _mm256_add_ps(c[r], c[r]);
    }
    sigmoid_avx2(t, 2);
    for (int r = 0; r < 1 + two; r++) {
        const __m256 h = _mm256_mul_ps(g[4 * r + 3], _mm256_fmsub_ps(two_, t[r], one));
        _mm256_storeu_ps((r ? c1b : c1a) + j0, c[r]);
        _mm256_storeu_ps((r ? h1b : h1a) + j0, h);
        uint8_t *q = r ? qb : qa;
        if (q) { /* quant_one: truncation of 63 h + 64.5 clamped to [1, 127] */
            __m256 v = _mm256_fmadd_ps(h, _mm256_set1_ps(Q_SCALE), _mm256_set1_ps(Q_ZERO + 0.5f));
            v = _mm256_min_ps(_mm256_max_ps(v, one), _mm256_set1_ps(127.0f));
            const __m256i w = _mm256_cvttps_epi32(v); /* 8 x int32 in [1, 127] */
            const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storel_epi64((__m128i *)(q + j0), _mm_packus_epi16(w16, w16));
        }
    }
}

/* lse_tile (below) on the tile's two rows in AVX2: their 2 x 32 logits, each row's running
 * max, and the exps of both rows' logits step-major (exp2_avx2). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
lse_tile2_avx2(const int32_t (*acc)[32], int two, const int32_t *restrict cs64, const float *restrict mul,
               const float *restrict bias, const float *rs, float *m, double *s) {
    __m256 t[8];
    float m2[2] = {m[0], two ? m[1] : m[0]};  /* (without a second row: the first one again, unkept) */
    double s2[2] = {s[0], two ? s[1] : s[0]};
    const float rs2[2] = {rs[0], two ? rs[1] : rs[0]};
    for (int r = 0; r < 2; r++) {
        const __m256 scale = _mm256_set1_ps(rs2[r]);
        __m256 tm = _mm256_set1_ps(-INFINITY);
        for (int k = 0; k < 4; k++) {
            const __m256i a = _mm256_sub_epi32(_mm256_load_si256((const __m256i *)(acc[r] + 8 * k)),
                                               _mm256_loadu_si256((const __m256i *)(cs64 + 8 * k)));
            t[4 * r + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(_mm256_loadu_ps(mul + 8 * k), scale),
                                           _mm256_loadu_ps(bias + 8 * k));
            tm = _mm256_max_ps(tm, t[4 * r + k]);
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(tm), _mm256_extractf128_ps(tm, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float mx = _mm_cvtss_f32(h);
        if (mx > m2[r]) {
            s2[r] *= exp((double)m2[r] - (double)mx);
            m2[r] = mx;
        }
        const __m256 mm = _mm256_set1_ps(m2[r]);
        for (int k = 0; k < 4; k++) /* (t - m) log2 e in [-126, 0] */
            t[4 * r + k] = _mm256_max_ps(_mm256_mul_ps(_mm256_sub_ps(t[4 * r + k], mm),
                                                       _mm256_set1_ps(1.44269504088896341f)),
                                         _mm256_set1_ps(-126.0f));
    }
    exp2_avx2(t, 8);
    for (int r = 0; r < 1 + two; r++) {
        const __m256 v = _mm256_add_ps(_mm256_add_ps(t[4 * r], t[4 * r + 1]), _mm256_add_ps(t[4 * r + 2], t[4 * r + 3]));
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        m[r] = m2[r];
        s[r] = s2[r] + (double)_mm_cvtss_f32(h);
    }
}
#endif

/* Rows are taken in blocks: a block's table rows and states stay in L2 while every unit block
 * passes over them (a unit block's weights in L1). */
#define LQ_ROW_BLOCK 16

/* One int8 LSTM layer step: for each block of rows, each unit block's tiles, then the cell on
 * them (the integer sums are exact, so the generic and AVX2 code give the same ones). */
#define LQ_BODY(TILE, CELL)                                                                    \
    int32_t acc[2][32] __attribute__((aligned(32)));                                           \
    for (int64_t b0 = 0; b0 < rows; b0 += LQ_ROW_BLOCK) {                                      \
        const int64_t b1 = b0 + LQ_ROW_BLOCK < rows ? b0 + LQ_ROW_BLOCK : rows;                \
        for (int64_t jb = 0; jb < H / 8; jb++) {                                               \
            const int8_t *wb = w + jb * Kq * 128;                                              \
            for (int64_t b = b0; b < b1; b += 2) {                                             \
                const int two = b + 1 < b1;                                                    \
                const uint8_t *x0 = a + b * a_stride;                                          \
                TILE(x0, two ? x0 + a_stride : x0, wb, Kq, acc);                               \
                CELL(acc, b, two);                                                             \
            }                                                                                  \
        }                                                                                      \
    }

static void lstm_int8_generic(LQ_ARGS) { LQ_BODY(tile_generic, LQ_CELL_GENERIC) }

static void quant_generic(const float *src, int64_t src_stride, int64_t rows, int64_t width,
                          uint8_t *dst, int64_t dst_stride) {
    quant_body(src, src_stride, rows, width, dst, dst_stride);
}

/* ---- an int8 output layer's log-normaliser ------------------------------------------------
 * out[b] = log sum_n exp(x_b . w_n + bias_n) for a (V, K) output layer in int8 (packed as
 * the LSTM layers', 32 output rows per block; V padded to whole blocks with bias -inf), each
 * input row quantised on its own scale s_b = max |x_b| / 63 (q = round(x / s_b) + 64): so a row's
 * result does not depend on the other rows. The (rows, V) logits are never written: each tile's
 * 32 logits go into its row's running max and sum of exp (the sum in double). */
#define LO_ARGS                                                                                \
    const float *x, int64_t x_stride, int64_t rows, int64_t K, int64_t Kq, int64_t NB,         \
        const int8_t *w, const int32_t *cs64, const float *mul, const float *bias, uint8_t *q, \
        float *qscale, float *out
#define LO_ROW_BLOCK 32

static inline __attribute__((always_inline)) void
quant_scaled_body(const float *restrict x, int64_t x_stride, int64_t rows, int64_t K, int64_t Kq,
                  uint8_t *restrict q, float *restrict qscale) {
    for (int64_t b = 0; b < rows; b++) {
        const float *restrict r = x + b * x_stride;
        uint8_t *restrict d = q + b * 4 * Kq;
        float m = 0.0f;
#pragma omp simd reduction(max : m)
        for (int64_t j = 0; j < K; j++) {
            float v = r[j] < 0.0f ? -r[j] : r[j];
            m = v > m ? v : m;
        }
        const float inv = m > 0.0f ? 1.0f / m : 1.0f; /* x / max |x| in [-1, 1] */
        qscale[b] = m > 0.0f ? m / Q_SCALE : 1.0f;
#pragma omp simd
        for (int64_t j = 0; j < K; j++)
            d[j] = quant_one(r[j] * inv);
        for (int64_t j = K; j < 4 * Kq; j++)
            d[j] = Q_ZERO;
    }
}

static inline __attribute__((always_inline)) void
lse_tile(const int32_t *restrict acc, const int32_t *restrict cs64, const float *restrict mul,
         const float *restrict bias, float rs, float *restrict m, double *restrict s) {
    float t[32], tm = -INFINITY;
#pragma omp simd reduction(max : tm)
    for (int c = 0; c < 32; c++) {
        t[c] = (float)(acc[c] - cs64[c]) * (mul[c] * rs) + bias[c];
        tm = t[c] > tm ? t[c] : tm;
    }
    if (tm > *m) {
        *s *= exp((double)*m - (double)tm);
        *m = tm;
    }
    const float mm = *m;
    float part = 0.0f;
#pragma omp simd reduction(+ : part)
    for (int c = 0; c < 32; c++)
        part += fast_exp(t[c] - mm);
    *s += part;
}

#define LO_BODY(TILE, LSE)                                                                     \
    int32_t acc[2][32] __attribute__((aligned(32)));                                           \
    float m[LO_ROW_BLOCK];                                                                     \
    double s[LO_ROW_BLOCK];                                                                    \
    const int64_t Kp = 4 * Kq;                                                                 \
    quant_scaled_body(x, x_stride, rows, K, Kq, q, qscale);                                    \
    for (int64_t b0 = 0; b0 < rows; b0 += LO_ROW_BLOCK) {                                      \
        const int64_t b1 = b0 + LO_ROW_BLOCK < rows ? b0 + LO_ROW_BLOCK : rows;                \
        for (int64_t b = b0; b < b1; b++) {                                                    \
            m[b - b0] = -FLT_MAX;                                                              \
            s[b - b0] = 0.0;                                                                   \
        }                                                                                      \
        for (int64_t nb = 0; nb < NB; nb++) {                                                  \
            const int8_t *wb = w + nb * Kq * 128;                                              \
            const int64_t n0 = nb * 32;                                                        \
            for (int64_t b = b0; b < b1; b += 2) {                                             \
                const int two = b + 1 < b1;                                                    \
                const uint8_t *x0 = q + b * Kp;                                                \
                TILE(x0, two ? x0 + Kp : x0, wb, Kq, acc);                                     \
                LSE(acc, two, b, b - b0, n0);                                                  \
            }                                                                                  \
        }                                                                                      \
        for (int64_t b = b0; b < b1; b++)                                                      \
            out[b] = m[b - b0] + (float)log(s[b - b0]);                                        \
    }

/* The log-normaliser's sums of the tile's rows b and, if `two`, b + 1 (i: b's place in m, s). */
#define LO_LSE_GENERIC(acc, two, b, i, n0)                                                     \
    do {                                                                                       \
        lse_tile(acc[0], cs64 + n0, mul + n0, bias + n0, qscale[b], &m[i], &s[i]);             \
        if (two)                                                                               \
            lse_tile(acc[1], cs64 + n0, mul + n0, bias + n0, qscale[(b) + 1], &m[(i) + 1],     \
                     &s[(i) + 1]);                                                             \
    } while (0)
#define LO_LSE_AVX2(acc, two, b, i, n0)                                                        \
    lse_tile2_avx2(acc, two, cs64 + n0, mul + n0, bias + n0, qscale + (b), &m[i], &s[i])

static void lse_int8_generic(LO_ARGS) { LO_BODY(tile_generic, LO_LSE_GENERIC) }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static void lstm_int8_avx2(LQ_ARGS) { LQ_BODY(tile_avx2, LQ_CELL_AVX2) }
__attribute__((target("avx2,fma"))) static void lse_int8_avx2(LO_ARGS) { LO_BODY(tile_avx2, LO_LSE_AVX2) }

__attribute__((target("avx2,fma"))) static void quant_avx2(const float *src, int64_t src_stride,
                                                            int64_t rows, int64_t width,
                                                            uint8_t *dst, int64_t dst_stride) {
    quant_body(src, src_stride, rows, width, dst, dst_stride);
}
#endif

#define CELL_ARGS                                                                              \
    const float *pre, const float *table, const int64_t *ids, int64_t rows, int64_t H,         \
        const float *c_prev, int64_t c_prev_stride, float *c_out, int64_t c_out_stride,        \
        float *h_out, int64_t h_out_stride, float *h2, int64_t h2_stride
#define CELL_PASS                                                                              \
    pre, table, ids, rows, H, c_prev, c_prev_stride, c_out, c_out_stride, h_out, h_out_stride, \
        h2, h2_stride

#define DOT_ARGS                                                                               \
    const float *hidden, int64_t hs0, int64_t hs1, const int64_t *b, const int64_t *t,         \
        const float *weight, int64_t ws, const float *bias, const int64_t *ids, int64_t E,     \
        int64_t H, float *out
#define DOT_PASS hidden, hs0, hs1, b, t, weight, ws, bias, ids, E, H, out

#define LSE_ARGS const float *x, int64_t rows, int64_t V, int64_t stride, float *out
#define LSE_PASS x, rows, V, stride, out

static void cell_generic(CELL_ARGS) { cell_body(CELL_PASS); }
static void lse_generic(LSE_ARGS) { lse_body(LSE_PASS); }
static void dot_generic(DOT_ARGS) { rows_dot_body(DOT_PASS); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_VARIANT 1
__attribute__((target("avx2,fma"))) static void cell_avx2(CELL_ARGS) { cell_body(CELL_PASS); }
__attribute__((target("avx2,fma"))) static void dot_avx2(DOT_ARGS) { rows_dot_body(DOT_PASS); }
__attribute__((target("avx2,fma"))) static void lse_avx2(LSE_ARGS) { lse_body(LSE_PASS); }
#endif

static void (*cell_impl)(CELL_ARGS) = cell_generic;
static void (*dot_impl)(DOT_ARGS) = dot_generic;
static void (*lse_impl)(LSE_ARGS) = lse_generic;
static void (*lq_impl)(LQ_ARGS) = lstm_int8_generic;
static void (*lo_impl)(LO_ARGS) = lse_int8_generic;
static void (*quant_impl)(const float *, int64_t, int64_t, int64_t, uint8_t *, int64_t) = quant_generic;
static const char *variant = "generic";

/* ---- the levels of prefix tries through int8 LSTM layers, in one call -------------------
 * The engine's level schedule (rescore/engine/levels.py) for an LSTM with a softmax output under
 * --precision int8: level d's rows (its trie nodes, numbered level by level) each consume one
 * token from their parent's state in level d - 1 (level 0's, the roots', from the start states),
 * through every layer (lstm_int8's step), then every edge scored from a row of level d gets
 * log P = h . w_target + b_target - log Z (the last only for exact costs: logsumexp_int8's).
 * Two buffers of level states (h, c, h quantised: rows x L x H) take turns; the states of the
 * nodes where hypotheses end are copied out. Fields, an int64 each (addresses as integers): */
enum {
    LV_LEVELS,      /* D: levels */
    LV_LEVEL_START, /* (D + 1,) first node of each level (0 at level 0) */
    LV_PARENT,      /* (N,) node -> its parent (a node of the level before; unread at level 0) */
    LV_TOKEN,       /* (N,) node -> the token it consumes (the row of the layer-0 table) */
    LV_L, LV_H,     /* layers, units */
    LV_LAYERS,      /* (L, 4) addresses of each layer's packed weights, cs64, mul, bias */
    LV_TABLE,       /* (V, 4H) float: layer 0's input product of every token */
    LV_H0, LV_C0, LV_Q0, LV_H1, LV_C1, LV_Q1, /* two buffers (R, L, H); buffer 0 holds the start states */
    LV_X,           /* (R, 2H) uint8 scratch: a layer's input rows */
    LV_ROWS,        /* (R,) int64 scratch: each row's parent row */
    LV_EDGES,       /* E: edges */
    LV_E_NODE, LV_E_TARGET, LV_E_SLOT, /* (E,) each, sorted by node: scored from node's output */
    LV_W_OUT, LV_B_OUT, /* (V, H) float output weights, (V,) bias or 0 */
    LV_LOGZ,        /* 0 (unnormalised) or the address of 6 int64: logsumexp_int8's packed layer
                       (w, cs64, mul, bias, Kq, NB) */
    LV_LOGZ_Q, LV_LOGZ_QSCALE, LV_LOGZ_OUT, /* scratch (R, 4 Kq) uint8, (R,), (R,) float */
    LV_LP,          /* (slots,) float out: log P of edge e at LV_E_SLOT[e] */
    LV_ENDS, LV_END_NODES, LV_END_H, LV_END_C, /* n, (n,) sorted nodes, (n, L, H) float out each (0: none) */
    LV_FIELDS
};

#define LV_PTR(T, i) ((T)(uintptr_t)f[i])

static void levels_int8(const int64_t *f) {
    const int64_t D = f[LV_LEVELS], L = f[LV_L], H = f[LV_H], LH = L * H;
    const int64_t *start = LV_PTR(const int64_t *, LV_LEVEL_START), *parent = LV_PTR(const int64_t *, LV_PARENT);
    const int64_t *token = LV_PTR(const int64_t *, LV_TOKEN), *layers = LV_PTR(const int64_t *, LV_LAYERS);
    float *hb[2] = {LV_PTR(float *, LV_H0), LV_PTR(float *, LV_H1)};
    float *cb[2] = {LV_PTR(float *, LV_C0), LV_PTR(float *, LV_C1)};
    uint8_t *qb[2] = {LV_PTR(uint8_t *, LV_Q0), LV_PTR(uint8_t *, LV_Q1)};
    uint8_t *x = LV_PTR(uint8_t *, LV_X);
    int64_t *rows = LV_PTR(int64_t *, LV_ROWS);
    const int64_t E = f[LV_EDGES], *e_node = LV_PTR(const int64_t *, LV_E_NODE);
    const int64_t *e_target = LV_PTR(const int64_t *, LV_E_TARGET), *e_slot = LV_PTR(const int64_t *, LV_E_SLOT);
    const float *w_out = LV_PTR(const float *, LV_W_OUT), *b_out = LV_PTR(const float *, LV_B_OUT);
    const int64_t *lz = LV_PTR(const int64_t *, LV_LOGZ);
    float *logz = LV_PTR(float *, LV_LOGZ_OUT), *lp = LV_PTR(float *, LV_LP);
    const int64_t n_ends = f[LV_ENDS], *ends = LV_PTR(const int64_t *, LV_END_NODES);
    float *end_h = LV_PTR(float *, LV_END_H), *end_c = LV_PTR(float *, LV_END_C);
    int64_t e = 0, k_end = 0;
    for (int64_t d = 0; d < D; d++) {
        const int64_t lo = start[d], n = start[d + 1] - lo, plo = d ? start[d - 1] : 0;
        const int prev = (int)(d % 2), cur = 1 - prev; /* level d - 1 (the start states) in prev */
        float *h = hb[cur], *c = cb[cur];
        uint8_t *q = qb[cur];
        for (int64_t b = 0; b < n; b++)
            rows[b] = d ? parent[lo + b] - plo : b;
        for (int64_t k = 0; k < L; k++) {
            const int64_t K = k ? 2 * H : H; /* [h of layer k - 1 now, h of layer k before] */
            for (int64_t b = 0; b < n; b++) {
                uint8_t *xr = x + b * K;
                if (k)
                    memcpy(xr, q + b * LH + (k - 1) * H, (size_t)H);
                memcpy(xr + (k ? H : 0), qb[prev] + rows[b] * LH + k * H, (size_t)H);
            }
            const int64_t *w = layers + 4 * k;
            lq_impl(x, K, n, K / 4, H, (const int8_t *)(uintptr_t)w[0], (const int32_t *)(uintptr_t)w[1],
                    (const float *)(uintptr_t)w[2], (const float *)(uintptr_t)w[3],
                    k ? NULL : LV_PTR(const float *, LV_TABLE), k ? NULL : token + lo, cb[prev] + k * H, LH,
                    rows, c + k * H, LH, h + k * H, LH, q + k * H, LH);
        }
        const float *top = h + (L - 1) * H;
        if (lz && n)
            lo_impl(top, LH, n, H, lz[4], lz[5], (const int8_t *)(uintptr_t)lz[0], (const int32_t *)(uintptr_t)lz[1],
                    (const float *)(uintptr_t)lz[2], (const float *)(uintptr_t)lz[3], LV_PTR(uint8_t *, LV_LOGZ_Q),
                    LV_PTR(float *, LV_LOGZ_QSCALE), logz);
        for (; e < E && e_node[e] < lo + n; e++) {
            const int64_t r = e_node[e] - lo, t = e_target[e];
            dot_impl(top + r * LH, 0, 0, &(int64_t){0}, &(int64_t){0}, w_out, H, b_out, &t, 1, H, lp + e_slot[e]);
            if (lz)
                lp[e_slot[e]] -= logz[r];
        }
        for (; k_end < n_ends && ends[k_end] < lo + n; k_end++) {
            const int64_t r = ends[k_end] - lo;
            if (end_h) {
                memcpy(end_h + k_end * LH, h + r * LH, (size_t)LH * sizeof(float));
                memcpy(end_c + k_end * LH, c + r * LH, (size_t)LH * sizeof(float));
            }
        }
    }
}

static PyObject *py_levels_int8(PyObject *self, PyObject *args) {
    unsigned long long fields;
    if (!PyArg_ParseTuple(args, "K", &fields))
        return NULL;
    const int64_t *f = (const int64_t *)(uintptr_t)fields;
    if (!f || f[LV_LEVELS] < 0 || f[LV_L] < 1 || f[LV_H] < 8 || f[LV_H] % 8 || !f[LV_LAYERS] || !f[LV_TABLE] ||
        !f[LV_W_OUT] || !f[LV_LP] || (f[LV_ENDS] && f[LV_END_H] && !f[LV_END_C])) {
        PyErr_SetString(PyExc_ValueError, "levels_int8: null address or bad size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    levels_int8(f);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_lstm_cell(PyObject *self, PyObject *args) {
    unsigned long long pre, table, ids, c_prev, c_out, h_out, h2;
    long long rows, H, c_prev_stride, c_out_stride, h_out_stride, h2_stride;
    if (!PyArg_ParseTuple(args, "KKKLLKLKLKLKL", &pre, &table, &ids, &rows, &H, &c_prev,
                          &c_prev_stride, &c_out, &c_out_stride, &h_out, &h_out_stride, &h2,
                          &h2_stride))
        return NULL;
    if (rows < 0 || H < 0 || !pre || !c_prev || !c_out || !h_out || (table && !ids)) {
        PyErr_SetString(PyExc_ValueError, "lstm_cell: null address or negative size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    cell_impl((const float *)(uintptr_t)pre, (const float *)(uintptr_t)table,
              (const int64_t *)(uintptr_t)ids, rows, H, (const float *)(uintptr_t)c_prev,
              c_prev_stride, (float *)(uintptr_t)c_out, c_out_stride, (float *)(uintptr_t)h_out,
              h_out_stride, (float *)(uintptr_t)h2, h2_stride);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_rows_dot(PyObject *self, PyObject *args) {
    unsigned long long hidden, b, t, weight, bias, ids, out;
    long long hs0, hs1, ws, E, H;
    if (!PyArg_ParseTuple(args, "KLLKKKLKKLLK", &hidden, &hs0, &hs1, &b, &t, &weight, &ws, &bias,
                          &ids, &E, &H, &out))
        return NULL;
    if (E < 0 || H < 0 || !hidden || !b || !t || !weight || !ids || !out) {
        PyErr_SetString(PyExc_ValueError, "rows_dot: null address or negative size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    dot_impl((const float *)(uintptr_t)hidden, hs0, hs1, (const int64_t *)(uintptr_t)b,
             (const int64_t *)(uintptr_t)t, (const float *)(uintptr_t)weight, ws,
             (const float *)(uintptr_t)bias, (const int64_t *)(uintptr_t)ids, E, H,
             (float *)(uintptr_t)out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_row_logsumexp(PyObject *self, PyObject *args) {
    unsigned long long x, out;
    long long rows, V, stride;
    if (!PyArg_ParseTuple(args, "KLLLK", &x, &rows, &V, &stride, &out))
        return NULL;
    if (rows < 0 || V < 1 || !x || !out) {
        PyErr_SetString(PyExc_ValueError, "row_logsumexp: null address or bad size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    lse_impl((const float *)(uintptr_t)x, rows, V, stride, (float *)(uintptr_t)out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_lstm_int8(PyObject *self, PyObject *args) {
    unsigned long long a, w, cs64, mul, bias, table, ids, c_prev, c_rows, c_out, h_out, q_out;
    long long a_stride, rows, Kq, H, c_prev_stride, c_out_stride, h_out_stride, q_out_stride;
    if (!PyArg_ParseTuple(args, "KLLLLKKKKKKKLKKLKLKL", &a, &a_stride, &rows, &Kq, &H, &w, &cs64,
                          &mul, &bias, &table, &ids, &c_prev, &c_prev_stride, &c_rows, &c_out,
                          &c_out_stride, &h_out, &h_out_stride, &q_out, &q_out_stride))
        return NULL;
    if (rows < 0 || Kq < 1 || H < 8 || H % 8 || !a || !w || !cs64 || !mul || !bias || !c_prev ||
        !c_out || !h_out || (table && !ids)) {
        PyErr_SetString(PyExc_ValueError, "lstm_int8: null address or bad size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    lq_impl((const uint8_t *)(uintptr_t)a, a_stride, rows, Kq, H, (const int8_t *)(uintptr_t)w,
            (const int32_t *)(uintptr_t)cs64, (const float *)(uintptr_t)mul,
            (const float *)(uintptr_t)bias, (const float *)(uintptr_t)table,
            (const int64_t *)(uintptr_t)ids, (const float *)(uintptr_t)c_prev, c_prev_stride,
            (const int64_t *)(uintptr_t)c_rows, (float *)(uintptr_t)c_out, c_out_stride, (float *)(uintptr_t)h_out, h_out_stride,
            (uint8_t *)(uintptr_t)q_out, q_out_stride);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_logsumexp_int8(PyObject *self, PyObject *args) {
    unsigned long long x, w, cs64, mul, bias, q, qscale, out;
    long long x_stride, rows, K, Kq, NB;
    if (!PyArg_ParseTuple(args, "KLLLLLKKKKKKK", &x, &x_stride, &rows, &K, &Kq, &NB, &w, &cs64,
                          &mul, &bias, &q, &qscale, &out))
        return NULL;
    if (rows < 0 || K < 1 || Kq * 4 < K || NB < 1 || !x || !w || !cs64 || !mul || !bias || !q ||
        !qscale || !out) {
        PyErr_SetString(PyExc_ValueError, "logsumexp_int8: null address or bad size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    lo_impl((const float *)(uintptr_t)x, x_stride, rows, K, Kq, NB, (const int8_t *)(uintptr_t)w,
            (const int32_t *)(uintptr_t)cs64, (const float *)(uintptr_t)mul,
            (const float *)(uintptr_t)bias, (uint8_t *)(uintptr_t)q, (float *)(uintptr_t)qscale,
            (float *)(uintptr_t)out);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_quantize_rows(PyObject *self, PyObject *args) {
    unsigned long long src, dst;
    long long src_stride, rows, width, dst_stride;
    if (!PyArg_ParseTuple(args, "KLLLKL", &src, &src_stride, &rows, &width, &dst, &dst_stride))
        return NULL;
    if (rows < 0 || width < 0 || !src || !dst) {
        PyErr_SetString(PyExc_ValueError, "quantize_rows: null address or negative size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    quant_impl((const float *)(uintptr_t)src, src_stride, rows, width, (uint8_t *)(uintptr_t)dst,
               dst_stride);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_variant(PyObject *self, PyObject *noargs) {
    return PyUnicode_FromString(variant);
}

static PyMethodDef methods[] = {
    {"lstm_cell", py_lstm_cell, METH_VARARGS,
     "lstm_cell(pre, table, ids, rows, H, c_prev, c_prev_stride, c_out, c_out_stride, h_out, "
     "h_out_stride, h2, h2_stride): one fused LSTM cell step on float32 rows (addresses; 0 for "
     "no table / no h2)."},
    {"rows_dot", py_rows_dot, METH_VARARGS,
     "rows_dot(hidden, hs0, hs1, b, t, weight, ws, bias, ids, E, H, out): out[e] = "
     "hidden[b[e], t[e]] . weight[ids[e]] + bias[ids[e]] (addresses; 0 for no bias)."},
    {"row_logsumexp", py_row_logsumexp, METH_VARARGS,
     "row_logsumexp(x, rows, V, stride, out): out[b] = log sum_j exp(x[b, j]), float32."},
    {"lstm_int8", py_lstm_int8, METH_VARARGS,
     "lstm_int8(a, a_stride, rows, Kq, H, w, cs64, mul, bias, table, ids, c_prev, c_prev_stride, "
     "c_rows, c_out, c_out_stride, h_out, h_out_stride, q_out, q_out_stride): one int8 LSTM layer "
     "step (addresses; 0 for no table / c_rows / q_out)."},
    {"levels_int8", py_levels_int8, METH_VARARGS,
     "levels_int8(fields): the levels of prefix tries through int8 LSTM layers in one call "
     "(fields: the address of LV_FIELDS int64, _kernels.c's LV_* order)."},
    {"logsumexp_int8", py_logsumexp_int8, METH_VARARGS,
     "logsumexp_int8(x, x_stride, rows, K, Kq, NB, w, cs64, mul, bias, q, qscale, out): each "
     "row's log-normaliser of an int8 output layer (addresses; q, qscale: scratch)."},
    {"quantize_rows", py_quantize_rows, METH_VARARGS,
     "quantize_rows(src, src_stride, rows, width, dst, dst_stride): uint8 round(63 x) + 64."},
    {"variant", py_variant, METH_NOARGS, "The code path in use: 'avx2' or 'generic'."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "Fused CPU kernels for scoring (rescore.engine.kernels.native).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__kernels(void) {
#ifdef HAVE_AVX2_VARIANT
    /* RESCORE_NATIVE=generic keeps the generic code (to test it on a CPU with AVX2) */
    const char *env = getenv("RESCORE_NATIVE");
    __builtin_cpu_init();
    if (!(env && strcmp(env, "generic") == 0) && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma")) {
        cell_impl = cell_avx2;
        dot_impl = dot_avx2;
        lse_impl = lse_avx2;
        lq_impl = lstm_int8_avx2;
        lo_impl = lse_int8_avx2;
        quant_impl = quant_avx2;
        variant = "avx2";
    }
#endif
    return PyModule_Create(&module);
}
