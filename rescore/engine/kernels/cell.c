/* The fp32 LSTM cell (kernels.h). */
#include "kernels.h"

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

void cell_generic(CELL_ARGS) { cell_body(CELL_PASS); }
#ifdef HAVE_AVX2_VARIANT
__attribute__((target("avx2,fma"))) void cell_avx2(CELL_ARGS) { cell_body(CELL_PASS); }
#endif

PyObject *py_lstm_cell(PyObject *self, PyObject *args) {
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
