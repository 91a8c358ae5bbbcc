/* An int8 output layer's row log-normalisers (kernels.h: the int8 layout). */
#include "kernels.h"

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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
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

void lse_int8_generic(LO_ARGS) { LO_BODY(tile_generic, LO_LSE_GENERIC) }

#ifdef HAVE_AVX2_VARIANT
__attribute__((target("avx2,fma"))) void lse_int8_avx2(LO_ARGS) { LO_BODY(tile_avx2, LO_LSE_AVX2) }
#endif

PyObject *py_logsumexp_int8(PyObject *self, PyObject *args) {
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
