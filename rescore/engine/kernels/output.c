/* An fp32 output layer: its target rows and its rows' log-normalisers (kernels.h). */
#include "kernels.h"

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

void dot_generic(DOT_ARGS) { rows_dot_body(DOT_PASS); }
void lse_generic(LSE_ARGS) { lse_body(LSE_PASS); }
#ifdef HAVE_AVX2_VARIANT
__attribute__((target("avx2,fma"))) void dot_avx2(DOT_ARGS) { rows_dot_body(DOT_PASS); }
__attribute__((target("avx2,fma"))) void lse_avx2(LSE_ARGS) { lse_body(LSE_PASS); }
#endif

PyObject *py_rows_dot(PyObject *self, PyObject *args) {
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

PyObject *py_row_logsumexp(PyObject *self, PyObject *args) {
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
