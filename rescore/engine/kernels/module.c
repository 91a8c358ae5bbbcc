/* The Python module rescore.engine.kernels._kernels: its table, and the generic or AVX2 code
 * chosen once at import (kernels.h). */
#include "kernels.h"

void (*cell_impl)(CELL_ARGS) = cell_generic;
void (*dot_impl)(DOT_ARGS) = dot_generic;
void (*lse_impl)(LSE_ARGS) = lse_generic;
void (*lq_impl)(LQ_ARGS) = lstm_int8_generic;
void (*lo_impl)(LO_ARGS) = lse_int8_generic;
void (*quant_impl)(QUANT_ARGS) = quant_generic;
static const char *variant = "generic";

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
     "levels_int8(fields, count): the levels of prefix tries through int8 LSTM layers in one call "
     "(fields: the address of count int64 in levels_fields() order; count is checked)."},
    {"levels_fields", py_levels_fields, METH_NOARGS,
     "levels_fields(): the names of levels_int8's fields, in their order (levels.c's LV_FIELD_LIST)."},
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

