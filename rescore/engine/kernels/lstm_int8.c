/* An int8 LSTM layer step and the fixed-scale quantisation of states (kernels.h: the int8 layout). */
#include "kernels.h"

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


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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

void lstm_int8_generic(LQ_ARGS) { LQ_BODY(tile_generic, LQ_CELL_GENERIC) }

void quant_generic(const float *src, int64_t src_stride, int64_t rows, int64_t width,
                          uint8_t *dst, int64_t dst_stride) {
    quant_body(src, src_stride, rows, width, dst, dst_stride);
}

#ifdef HAVE_AVX2_VARIANT
__attribute__((target("avx2,fma"))) void lstm_int8_avx2(LQ_ARGS) { LQ_BODY(tile_avx2, LQ_CELL_AVX2) }

__attribute__((target("avx2,fma"))) void quant_avx2(const float *src, int64_t src_stride,
                                                            int64_t rows, int64_t width,
                                                            uint8_t *dst, int64_t dst_stride) {
    quant_body(src, src_stride, rows, width, dst, dst_stride);
}
#endif

PyObject *py_lstm_int8(PyObject *self, PyObject *args) {
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

PyObject *py_quantize_rows(PyObject *self, PyObject *args) {
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
