/* ---- the levels of prefix tries through int8 LSTM layers, in one call -------------------
 * The engine's level schedule (rescore/engine/levels.py) for an LSTM with a softmax output under
 * --precision int8: level d's rows (its trie nodes, numbered level by level) each consume one
 * token from their parent's state in level d - 1 (level 0's, the roots', from the start states),
 * through every layer (lstm_int8's step), then every edge scored from a row of level d gets
 * log P = h . w_target + b_target - log Z (the last only for exact costs: logsumexp_int8's).
 * Two buffers of level states (h, c, h quantised: rows x L x H) take turns; the states of the
 * nodes where hypotheses end are copied out. Fields, an int64 each (addresses as integers), in
 * this order (LV_LOGZ's 6 int64: w, cs64, mul, bias, Kq, NB). This is the one list of them:
 * rescore.engine.kernels.native fills them by the names levels_fields() gives, and passes their
 * count, which levels_int8 checks. */
#include "kernels.h"

#define LV_FIELD_LIST(X)                                                                       \
    X(LV_LEVELS, levels)           /* D: levels */                                             \
    X(LV_LEVEL_START, level_start) /* (D + 1,) first node of each level (0 at level 0) */      \
    X(LV_PARENT, parent)           /* (N,) node -> its parent (a node of the level before; unread at level 0) */\
    X(LV_TOKEN, token)             /* (N,) node -> the token it consumes (the row of the layer-0 table) */\
    X(LV_L, L)                     /* layers */                                                \
    X(LV_H, H)                     /* units */                                                 \
    X(LV_LAYERS, layers)           /* (L, 4) addresses of each layer's packed weights, cs64, mul, bias */\
    X(LV_TABLE, table)             /* (V, 4H) float: layer 0's input product of every token */ \
    X(LV_H0, h0)                   /* two buffers (R, L, H) of h, c, q; */                     \
    X(LV_C0, c0)                   /* buffer 0 holds the start states */                       \
    X(LV_Q0, q0)                                                                               \
    X(LV_H1, h1)                                                                               \
    X(LV_C1, c1)                                                                               \
    X(LV_Q1, q1)                                                                               \
    X(LV_X, x)                     /* (R, 2H) uint8 scratch: a layer's input rows */           \
    X(LV_ROWS, rows)               /* (R,) int64 scratch: each row's parent row */             \
    X(LV_EDGES, edges)             /* E: edges */                                              \
    X(LV_E_NODE, e_node)           /* (E,) each, sorted by node: */                            \
    X(LV_E_TARGET, e_target)       /* scored from node's output */                             \
    X(LV_E_SLOT, e_slot)                                                                       \
    X(LV_W_OUT, w_out)             /* (V, H) float output weights */                           \
    X(LV_B_OUT, b_out)             /* (V,) bias or 0 */                                        \
    X(LV_LOGZ, logz)               /* 0, or 6 int64: logsumexp_int8's layer */                 \
    X(LV_LOGZ_Q, logz_q)           /* scratch (R, 4 Kq) uint8 */                               \
    X(LV_LOGZ_QSCALE, logz_qscale) /* (R,) */                                                  \
    X(LV_LOGZ_OUT, logz_out)       /* (R,) float */                                            \
    X(LV_LP, lp)                   /* (slots,) float out: log P of edge e at LV_E_SLOT[e] */   \
    X(LV_ENDS, ends)               /* n */                                                     \
    X(LV_END_NODES, end_nodes)     /* (n,) sorted nodes */                                     \
    X(LV_END_H, end_h)             /* (n, L, H) float out each (0: none) */                    \
    X(LV_END_C, end_c)

enum {
#define LV_ENUM(id, name) id,
    LV_FIELD_LIST(LV_ENUM)
#undef LV_ENUM
    LV_FIELDS
};

static const char *const lv_names[LV_FIELDS] = {
#define LV_NAME(id, name) #name,
    LV_FIELD_LIST(LV_NAME)
#undef LV_NAME
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

PyObject *py_levels_int8(PyObject *self, PyObject *args) {
    unsigned long long fields;
    long long count;
    if (!PyArg_ParseTuple(args, "KL", &fields, &count))
        return NULL;
    if (count != LV_FIELDS) {
        PyErr_Format(PyExc_ValueError, "levels_int8: %lld fields given, these kernels take %d (levels.c's "
                     "LV_FIELD_LIST): the Python side and the compiled kernels are out of step", count,
                     (int)LV_FIELDS);
        return NULL;
    }
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

PyObject *py_levels_fields(PyObject *self, PyObject *noargs) {
    PyObject *names = PyTuple_New(LV_FIELDS);
    if (!names)
        return NULL;
    for (Py_ssize_t i = 0; i < LV_FIELDS; i++) {
        PyObject *s = PyUnicode_FromString(lv_names[i]);
        if (!s) {
            Py_DECREF(names);
            return NULL;
        }
        PyTuple_SET_ITEM(names, i, s);
    }
    return names;
}
