/*
 * rescore.engine.kernels._kernels: fused CPU kernels for inference (rescore.engine.kernels.native),
 * one file per kernel, this header their shared contract:
 *   cell.c        the fp32 LSTM cell (lstm_cell)
 *   output.c      an fp32 output layer's target rows (rows_dot) and row log-normalisers (row_logsumexp)
 *   lstm_int8.c   an int8 LSTM layer step (lstm_int8) and the fixed-scale state quantisation
 *   logz_int8.c   an int8 output layer's row log-normalisers (logsumexp_int8)
 *   levels.c      the levels of prefix tries through int8 LSTM layers in one call (levels_int8)
 *   module.c      the Python module: its table and the choice of the generic or AVX2 code
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
#ifndef RESCORE_KERNELS_H
#define RESCORE_KERNELS_H

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

/* ---- the kernels' signatures; each has a generic and (x86 with GCC or Clang) an AVX2 variant,
 * chosen once at import (module.c) through these pointers */
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

#define LQ_ARGS                                                                                \
    const uint8_t *a, int64_t a_stride, int64_t rows, int64_t Kq, int64_t H, const int8_t *w,  \
        const int32_t *cs64, const float *mul, const float *bias, const float *table,          \
        const int64_t *ids, const float *c_prev, int64_t c_prev_stride, const int64_t *c_rows, \
        float *c_out,                                                                          \
        int64_t c_out_stride, float *h_out, int64_t h_out_stride, uint8_t *q_out,              \
        int64_t q_out_stride

/* ---- an int8 output layer's log-normaliser (logz_int8.c) ------------------------------------------------
 * out[b] = log sum_n exp(x_b . w_n + bias_n) for a (V, K) output layer in int8 (packed as
 * the LSTM layers', 32 output rows per block; V padded to whole blocks with bias -inf), each
 * input row quantised on its own scale s_b = max |x_b| / 63 (q = round(x / s_b) + 64): so a row's
 * result does not depend on the other rows. The (rows, V) logits are never written: each tile's
 * 32 logits go into its row's running max and sum of exp (the sum in double). */
#define LO_ARGS                                                                                \
    const float *x, int64_t x_stride, int64_t rows, int64_t K, int64_t Kq, int64_t NB,         \
        const int8_t *w, const int32_t *cs64, const float *mul, const float *bias, uint8_t *q, \
        float *qscale, float *out
#define QUANT_ARGS const float *src, int64_t src_stride, int64_t rows, int64_t width, uint8_t *dst, int64_t dst_stride

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_VARIANT 1
#endif

void cell_generic(CELL_ARGS);
void dot_generic(DOT_ARGS);
void lse_generic(LSE_ARGS);
void lstm_int8_generic(LQ_ARGS);
void lse_int8_generic(LO_ARGS);
void quant_generic(QUANT_ARGS);
#ifdef HAVE_AVX2_VARIANT
void cell_avx2(CELL_ARGS);
void dot_avx2(DOT_ARGS);
void lse_avx2(LSE_ARGS);
void lstm_int8_avx2(LQ_ARGS);
void lse_int8_avx2(LO_ARGS);
void quant_avx2(QUANT_ARGS);
#endif

extern void (*cell_impl)(CELL_ARGS);
extern void (*dot_impl)(DOT_ARGS);
extern void (*lse_impl)(LSE_ARGS);
extern void (*lq_impl)(LQ_ARGS);
extern void (*lo_impl)(LO_ARGS);
extern void (*quant_impl)(QUANT_ARGS);

/* ---- int8 arithmetic shared by the int8 LSTM layer, the int8 log-normaliser and the levels */
/* ---- int8 LSTM layers (lstm_int8.c) -------------------------------------------------------------------
 * States are quantised as q = round(63 x) + 64 in [1, 127] (x in [-1, 1]; 7 bits) and weights
 * (4H, K) per output row on 63 levels (scale s_n = max |w_n| / 63), so that AVX2's u8 x s8
 * multiply-add can sum four products of a column in 16 bits (4 x 127 x 63 = 32004 < 32767)
 * before one widening to 32 bits: a quarter fewer multiply instructions than widening every
 * pair. Weights are packed by
 * unit blocks of 8: block jb holds, for each group of 4 inputs kq, the 4 gates' 8 units x 4
 * inputs (128 bytes). Then x . w_n = (s_n / 63) (sum_k q_k w_nk - 64 sum_k w_nk): `cs64` holds
 * 64 sum_k w_nk, `mul` s_n / 63. Python writes this layout in one place, native.pack_int8_blocks
 * (byte jb * Kq * 128 + kq * 128 + n * 4 + k = column 32 jb + n, input 4 kq + k), and
 * tests/engine/test_native.py checks it against that index. */
#define Q_ZERO 64
#define Q_SCALE 63.0f

static inline __attribute__((always_inline)) uint8_t quant_one(float x) {
    float v = x * Q_SCALE + (Q_ZERO + 0.5f);
    v = v >= 1.0f ? v : 1.0f; /* (NaN too) */
    v = v <= 127.0f ? v : 127.0f;
    return (uint8_t)(int32_t)v;
}

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
#endif

/* ---- the Python entry points (one per kernel file; module.c's table) */
PyObject *py_lstm_cell(PyObject *self, PyObject *args);
PyObject *py_rows_dot(PyObject *self, PyObject *args);
PyObject *py_row_logsumexp(PyObject *self, PyObject *args);
PyObject *py_lstm_int8(PyObject *self, PyObject *args);
PyObject *py_quantize_rows(PyObject *self, PyObject *args);
PyObject *py_logsumexp_int8(PyObject *self, PyObject *args);
PyObject *py_levels_int8(PyObject *self, PyObject *args);
PyObject *py_levels_fields(PyObject *self, PyObject *noargs);

#endif
