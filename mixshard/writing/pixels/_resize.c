/* The compiled resize of `resample.py`: the same two passes, the same weights, in C.
 *
 * resize(out, pixels, height, width, rows, row_weights, cols, col_weights, whole)
 *   out          uint8 (3, sy, sx), C-contiguous, written
 *   pixels       uint8 (height, width, 3), C-contiguous
 *   rows         int32 (sy,): the first input row of each output row
 *   row_weights  float32 (sy, ky): its taps, rows[i] .. rows[i] + ky - 1
 *   cols, col_weights: the same for the columns (sx, kx)
 *   whole        1: pass 1 rounds to whole levels (PIL's 8-bit intermediate); 0: it keeps
 *                the fractions (F.interpolate's and tf.image.resize's one float sum)
 *
 * Pass 1 runs over the rows, into float32 (rounded to whole levels when `whole`); pass 2 over
 * the columns, rounded half up into CHW. Each sum adds its taps in
 * order, one multiply and one add each (no fused multiply-add: -ffp-contract=off), so every
 * build gives the same bytes on every machine. On x86-64 Linux the passes are also compiled
 * for AVX2 and the CPU picks a build at load time (the same arithmetic, wider registers).
 * The GIL is released while they run.
 *
 * fixed(out, pixels, height, width, rows, row_taps, cols, col_taps)
 *   PIL's own two passes (`bicubic.py`): int32 fixed-point taps (22 fraction bits), the
 *   columns first into whole levels, clipped, then the rows, each sum plus a half shifted down
 *   and clipped to 0..255 as PIL's `clip8`: PIL's bytes. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__)
#define CLONED __attribute__((target_clones("avx2", "default")))
#else
#define CLONED
#endif

typedef Py_ssize_t ssz;

/* Output rows `sy` of the columns [c0, c0 + nc), all three channels, to whole levels. */
CLONED static void rows_pass(const uint8_t *restrict px, ssz width, const int32_t *restrict ry,
                             const float *restrict wy, ssz sy, ssz ky, ssz c0, ssz nc,
                             int whole, float *restrict mid) {
    const ssz line = width * 3, n = nc * 3;
    for (ssz i = 0; i < sy; i++) {
        float *restrict acc = mid + i * n;
        const uint8_t *restrict src = px + (ssz)ry[i] * line + c0 * 3;
        const float w0 = wy[i * ky];
        for (ssz c = 0; c < n; c++) acc[c] = w0 * (float)src[c];
        for (ssz t = 1; t < ky; t++) {
            const float w = wy[i * ky + t];
            src += line;
            for (ssz c = 0; c < n; c++) acc[c] += w * (float)src[c];
        }
        /* floor(x + 0.5): the sums are >= 0, so truncation is the floor */
        if (whole)
            for (ssz c = 0; c < n; c++) acc[c] = (float)(int32_t)(acc[c] + 0.5f);
    }
}

#define ROWS 4 /* output rows of pass 2 at a time: their taps' weights loaded once */

/* Output columns `sx` of `rows` (<= ROWS) rows of `mid` (`n` floats a row), rounded half up
 * into CHW (`o`: the first row's plane 0; `plane`: bytes a channel). The sums lie in 0..255
 * (weights >= 0 summing to 1), so the casts are in range. */
static inline void cols_rows(const float *restrict m, ssz n, const int32_t *restrict rx,
                             const float *restrict wx, ssz sx, ssz kx, ssz c0, ssz plane,
                             uint8_t *restrict o, int rows) {
    for (ssz j = 0; j < sx; j++) {
        const float *p = m + (rx[j] - c0) * 3;
        const float *w = wx + j * kx;
#if defined(__GNUC__) && !defined(MIXSHARD_SCALAR) /* the portable loops: -DMIXSHARD_SCALAR */
        /* a pixel's three channels (and the next pixel's first, unused) at a time; `mid` has
         * a float to spare at its end for the last pixel's load */
        typedef float v4 __attribute__((vector_size(16)));
        v4 s[ROWS], x;
        for (int r = 0; r < rows; r++) {
            memcpy(&x, p + r * n, sizeof x);
            s[r] = w[0] * x;
        }
        for (ssz t = 1; t < kx; t++) {
            for (int r = 0; r < rows; r++) {
                memcpy(&x, p + r * n + 3 * t, sizeof x);
                s[r] += w[t] * x;
            }
        }
#else
        float s[ROWS][3];
        for (int r = 0; r < rows; r++)
            for (int ch = 0; ch < 3; ch++) s[r][ch] = w[0] * p[r * n + ch];
        for (ssz t = 1; t < kx; t++)
            for (int r = 0; r < rows; r++)
                for (int ch = 0; ch < 3; ch++) s[r][ch] += w[t] * p[r * n + 3 * t + ch];
#endif
        for (int r = 0; r < rows; r++) {
            o[r * sx + j] = (uint8_t)(s[r][0] + 0.5f);
            o[r * sx + plane + j] = (uint8_t)(s[r][1] + 0.5f);
            o[r * sx + 2 * plane + j] = (uint8_t)(s[r][2] + 0.5f);
        }
    }
}

/* Pass 2 over every row of `mid`, ROWS at a time. */
CLONED static void cols_pass(const float *restrict mid, ssz n, const int32_t *restrict rx,
                             const float *restrict wx, ssz sy, ssz sx, ssz kx, ssz c0,
                             uint8_t *restrict out) {
    const ssz plane = sy * sx;
    ssz i = 0;
    for (; i + ROWS <= sy; i += ROWS)
        cols_rows(mid + i * n, n, rx, wx, sx, kx, c0, plane, out + i * sx, ROWS);
    for (; i < sy; i++) cols_rows(mid + i * n, n, rx, wx, sx, kx, c0, plane, out + i * sx, 1);
}

/* The taps `k` of `count` outputs, each starting at `first[i]`, inside 0..`limit`: the
 * smallest start (into *lo) and the largest end (into *hi); -1 where one lies outside. */
static int span(const int32_t *first, ssz count, ssz k, ssz limit, ssz *lo, ssz *hi) {
    *lo = limit;
    *hi = 0;
    for (ssz i = 0; i < count; i++) {
        if (first[i] < 0 || first[i] + k > limit) return -1;
        if (first[i] < *lo) *lo = first[i];
        if (first[i] + k > *hi) *hi = first[i] + k;
    }
    return 0;
}

/* The buffers of a resize call (out, pixels, row starts and taps, column starts and taps) and
 * the sizes they say, checked against each other and the image's `height` x `width`. */
typedef struct {
    Py_buffer b[6];
    int got; /* buffers taken, released by `release_taps` */
    ssz sy, sx, ky, kx, r0, r1, c0, c1;
} Taps;

static int take_taps(PyObject **objs, ssz height, ssz width, const char *name, Taps *t) {
    for (t->got = 0; t->got < 6; t->got++) {
        int flags = PyBUF_C_CONTIGUOUS | (t->got == 0 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[t->got], &t->b[t->got], flags) < 0) return -1;
    }
    Py_buffer *b = t->b;
    t->sy = b[2].len / 4, t->sx = b[4].len / 4;
    t->ky = t->sy ? b[3].len / 4 / t->sy : 0, t->kx = t->sx ? b[5].len / 4 / t->sx : 0;
    if (height < 1 || width < 1 || t->sy < 1 || t->sx < 1 || t->ky < 1 || t->kx < 1 ||
        b[1].len != height * width * 3 || b[0].len != 3 * t->sy * t->sx ||
        b[3].len != 4 * t->sy * t->ky || b[5].len != 4 * t->sx * t->kx ||
        span(b[2].buf, t->sy, t->ky, height, &t->r0, &t->r1) < 0 ||
        span(b[4].buf, t->sx, t->kx, width, &t->c0, &t->c1) < 0) {
        PyErr_Format(PyExc_ValueError, "%s: buffers do not match the sizes and taps", name);
        return -1;
    }
    return 0;
}

static void release_taps(Taps *t) {
    while (t->got-- > 0) PyBuffer_Release(&t->b[t->got]);
}

static PyObject *resize(PyObject *self, PyObject *args) {
    PyObject *objs[6];
    ssz height, width;
    int whole;
    if (!PyArg_ParseTuple(args, "OOnnOOOOp", &objs[0], &objs[1], &height, &width, &objs[2],
                          &objs[3], &objs[4], &objs[5], &whole))
        return NULL;
    Taps t;
    PyObject *result = NULL;
    if (take_taps(objs, height, width, "resize", &t) < 0) goto done;
    Py_buffer *b = t.b;
    const ssz sy = t.sy, sx = t.sx, ky = t.ky, kx = t.kx, c0 = t.c0;
    const ssz nc = t.c1 - c0;
    float *mid = PyMem_RawMalloc(sizeof(float) * (sy * nc * 3 + 1));
    if (mid == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rows_pass(b[1].buf, width, b[2].buf, b[3].buf, sy, ky, c0, nc, whole, mid);
    mid[sy * nc * 3] = 0.0f;
    cols_pass(mid, nc * 3, b[4].buf, b[5].buf, sy, sx, kx, c0, b[0].buf);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(mid);
    result = Py_None;
    Py_INCREF(result);
done:
    release_taps(&t);
    return result;
}

#define PRECISION_BITS 22 /* PIL's */

/* PIL's `clip8`: a sum (its half added) to a level, clipped to 0..255. */
static inline uint8_t clip8(int32_t v) {
    if (v < 0) return 0;
    v >>= PRECISION_BITS;
    return v > 255 ? 255 : (uint8_t)v;
}

/* PIL's horizontal pass over `nr` rows of `px` (`width` pixels a row) into `mid` (`sx`
 * pixels a row, whole levels). */
CLONED static void fixed_cols(const uint8_t *restrict px, ssz width, ssz nr,
                              const int32_t *restrict rx, const int32_t *restrict kx, ssz sx,
                              ssz k, uint8_t *restrict mid) {
    for (ssz r = 0; r < nr; r++) {
        const uint8_t *restrict row = px + r * width * 3;
        uint8_t *restrict o = mid + r * sx * 3;
        for (ssz j = 0; j < sx; j++) {
            const uint8_t *p = row + (ssz)rx[j] * 3;
            const int32_t *w = kx + j * k;
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (ssz t = 0; t < k; t++) {
                s0 += p[3 * t] * w[t];
                s1 += p[3 * t + 1] * w[t];
                s2 += p[3 * t + 2] * w[t];
            }
            o[3 * j] = clip8(s0);
            o[3 * j + 1] = clip8(s1);
            o[3 * j + 2] = clip8(s2);
        }
    }
}

/* PIL's vertical pass over `mid` (rows from `r0`, `n` values a row) into CHW `out`. */
CLONED static void fixed_rows(const uint8_t *restrict mid, ssz n, ssz r0,
                              const int32_t *restrict ry, const int32_t *restrict ky, ssz sy,
                              ssz k, int32_t *restrict acc, uint8_t *restrict out) {
    const ssz plane = sy * (n / 3);
    for (ssz i = 0; i < sy; i++) {
        for (ssz c = 0; c < n; c++) acc[c] = 1 << (PRECISION_BITS - 1);
        for (ssz t = 0; t < k; t++) {
            const uint8_t *restrict row = mid + ((ssz)ry[i] - r0 + t) * n;
            const int32_t w = ky[i * k + t];
            for (ssz c = 0; c < n; c++) acc[c] += row[c] * w;
        }
        uint8_t *o = out + i * (n / 3);
        for (ssz j = 0; j < n / 3; j++) {
            o[j] = clip8(acc[3 * j]);
            o[plane + j] = clip8(acc[3 * j + 1]);
            o[2 * plane + j] = clip8(acc[3 * j + 2]);
        }
    }
}

static PyObject *fixed(PyObject *self, PyObject *args) {
    PyObject *objs[6];
    ssz height, width;
    if (!PyArg_ParseTuple(args, "OOnnOOOO", &objs[0], &objs[1], &height, &width, &objs[2],
                          &objs[3], &objs[4], &objs[5]))
        return NULL;
    Taps t;
    PyObject *result = NULL;
    if (take_taps(objs, height, width, "fixed", &t) < 0) goto done;
    Py_buffer *b = t.b;
    const ssz sy = t.sy, sx = t.sx, ky = t.ky, kx = t.kx, r0 = t.r0;
    const ssz nr = t.r1 - r0;
    uint8_t *mid = PyMem_RawMalloc(nr * sx * 3);
    int32_t *acc = PyMem_RawMalloc(sizeof(int32_t) * sx * 3);
    if (mid == NULL || acc == NULL) {
        PyMem_RawFree(mid);
        PyMem_RawFree(acc);
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    fixed_cols((const uint8_t *)b[1].buf + r0 * width * 3, width, nr, b[4].buf, b[5].buf, sx,
               kx, mid);
    fixed_rows(mid, sx * 3, r0, b[2].buf, b[3].buf, sy, ky, acc, b[0].buf);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(mid);
    PyMem_RawFree(acc);
    result = Py_None;
    Py_INCREF(result);
done:
    release_taps(&t);
    return result;
}

static PyMethodDef methods[] = {
    {"resize", resize, METH_VARARGS, "Resize uint8 HWC pixels into uint8 CHW (see the file)."},
    {"fixed", fixed, METH_VARARGS, "PIL's fixed-point two passes, uint8 HWC into CHW."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_resize", "The compiled resizes of mixshard.writing.resample and bicubic.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__resize(void) { return PyModule_Create(&module); }
