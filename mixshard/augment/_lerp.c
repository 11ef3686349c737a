/* `composite` and `blend` on a CPU in one pass: gather, flip and lerp fused.
 *
 * The torch path (`pasting.MaskedLerp`, `ops.blend`) makes a frame's blend from separate
 * passes: the uint8 backgrounds gathered, cast to floats, the mask turned into weights, then
 * `torch.lerp`. Each pass is cheap, but on one core their compute adds up to about twice an
 * `obs.clone()` (docs/benchmarks.md). Here each output value is made from its inputs at once:
 * the observation (float32), its background read straight from the uint8 frame store by index
 * (mirrored when the sample is flipped), the mask (bool or float32) and alpha. The arithmetic
 * is the torch path's, operation for operation (see `lerp`), so the bytes are the same.
 *
 * Shapes: obs and out `(N, K, 3, P)` float32 contiguous (P = H * W pixels; out may be obs);
 * frames `(F, 3, P)` uint8 contiguous; index `(N, K)` int64 (the frame of sample n's frame k);
 * flipped `(N,)` uint8 or None; keep None or `(N, K, 3, P)` given by element strides (0 where
 * it broadcasts), its pixels contiguous; alpha `(N,)` float32 read with stride 0 or 1.
 * The rows are split over `threads` threads; the GIL is released throughout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef Py_ssize_t ssz;

enum { KEEP_NONE = 0, KEEP_BOOL = 1, KEEP_FLOAT = 2 };

typedef struct {
    float *out;
    const float *obs;
    const uint8_t *frames;
    const int64_t *index;
    const uint8_t *flipped;
    const void *keep;
    ssz keep_n, keep_k, keep_c; /* element strides of keep's first three dims */
    const float *alpha;
    ssz alpha_step;
    int kind, plain;
    ssz n, k, h, w, nframes;
    ssz lo, hi; /* this thread's rows, a row being one (sample, frame, channel) */
    int bad;    /* an index out of range was met */
} Job;

/* torch's lerp as its vector kernel makes it: `start + w * (end - start)` for |w| < 0.5, else
 * `end + (w - 1) * (end - start)`, exact at w = 0 and w = 1; both made, then one chosen (a
 * vector select). Where the CPU has FMA, torch's kernel fuses the multiply and the add (one
 * rounding), and so does `row_fma`; elsewhere neither does. */
#define LERP(FMA, start, end, w)                                                                \
    (fabsf(w) < 0.5f ? FMA((w), (end) - (start), (start)) : FMA((w) - 1.0f, (end) - (start), (end)))
#define FUSED(a, b, c) fmaf(a, b, c)
#define UNFUSED(a, b, c) ((a) * (b) + (c))

/* One row of `p` values: out = the blend of obs and bg under the keep row and alpha `a`. `d`
 * may be `o` (`out=obs`): each value is read, then written at the same index, which the
 * vector loop keeps (no other value of `o` is read after its `d` is written). */
#define ROW(name, attr, FMA)                                                                    \
    attr static void name(float *restrict d, const float *restrict o, const uint8_t *restrict b,  \
                          const void *keep, int kind, int plain, float a, ssz p) {               \
        const uint8_t *restrict m8 = keep;                                                      \
        const float *restrict mf = keep;                                                        \
        if (kind == KEEP_NONE) {                                                                \
            for (ssz i = 0; i < p; i++) d[i] = LERP(FMA, o[i], (float)b[i], a);                 \
        } else if (kind == KEEP_BOOL && plain) { /* lerp(bg, obs, keep): obs or bg exactly */   \
            for (ssz i = 0; i < p; i++) d[i] = LERP(FMA, (float)b[i], o[i], (float)m8[i]);      \
        } else if (kind == KEEP_BOOL) { /* weights keep * -a + a: 0 where kept, else a */      \
            for (ssz i = 0; i < p; i++)                                                         \
                d[i] = LERP(FMA, o[i], (float)b[i], (float)m8[i] * -a + a);                     \
        } else if (plain) {                                                                     \
            for (ssz i = 0; i < p; i++) d[i] = LERP(FMA, (float)b[i], o[i], mf[i]);             \
        } else { /* weights (-keep + 1) * a */                                                  \
            for (ssz i = 0; i < p; i++)                                                         \
                d[i] = LERP(FMA, o[i], (float)b[i], (-mf[i] + 1.0f) * a);                       \
        }                                                                                       \
    }

typedef void (*RowFn)(float *, const float *, const uint8_t *, const void *, int, int, float, ssz);
ROW(row_plain, , UNFUSED)
#if defined(__GNUC__) && defined(__x86_64__)
ROW(row_fma, __attribute__((target("avx2,fma"))), FUSED)
static RowFn pick_row(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? row_fma : row_plain;
}
#else
static RowFn pick_row(void) { return row_plain; }
#endif
static RowFn row;

static void *run(void *arg) {
    Job *j = arg;
    ssz p = j->h * j->w;
    size_t unit = j->kind == KEEP_FLOAT ? sizeof(float) : 1;
    uint8_t mirror[4096];
    for (ssz r = j->lo; r < j->hi; r++) {
        ssz c = r % 3, f = (r / 3) % j->k, n = r / (3 * j->k);
        int64_t frame = j->index[n * j->k + f];
        if (frame < 0 || frame >= j->nframes) {
            j->bad = 1;
            return NULL;
        }
        const uint8_t *b = j->frames + (frame * 3 + c) * p;
        const char *m = NULL;
        if (j->kind != KEEP_NONE)
            m = (const char *)j->keep + (n * j->keep_n + f * j->keep_k + c * j->keep_c) * unit;
        float a = j->alpha[n * j->alpha_step];
        float *d = j->out + r * p;
        const float *o = j->obs + r * p;
        if (j->flipped == NULL || !j->flipped[n]) {
            row(d, o, b, m, j->kind, j->plain, a, p);
            continue;
        }
        for (ssz y = 0; y < j->h; y++) { /* mirrored: each line's background reversed */
            const uint8_t *line = b + y * j->w;
            for (ssz x = 0; x < j->w; x++) mirror[x] = line[j->w - 1 - x];
            ssz at = y * j->w;
            row(d + at, o + at, mirror, m ? m + at * unit : NULL, j->kind, j->plain, a, j->w);
        }
    }
    return NULL;
}

/* A buffer of at least `need` bytes (writable if asked), or an exception. */
static int take(PyObject *obj, Py_buffer *view, ssz need, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)))
        return -1;
    if (view->len < need) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, needs %zd", name, view->len, need);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *blend_frames(PyObject *self, PyObject *args) {
    PyObject *out_o, *obs_o, *frames_o, *index_o, *flipped_o, *keep_o, *alpha_o;
    Job job;
    int threads;
    memset(&job, 0, sizeof job);
    if (!PyArg_ParseTuple(args, "OOOOOO(nnn)iOnpnnnni", &out_o, &obs_o, &frames_o, &index_o,
                          &flipped_o, &keep_o, &job.keep_n, &job.keep_k, &job.keep_c, &job.kind,
                          &alpha_o, &job.alpha_step, &job.plain, &job.n, &job.k, &job.h, &job.w,
                          &threads))
        return NULL;
    if (job.w > 4096 || job.kind < KEEP_NONE || job.kind > KEEP_FLOAT || job.n < 0 || job.k < 1)
        return PyErr_Format(PyExc_ValueError, "blend_frames: bad shape or keep kind");
    ssz rows = job.n * job.k * 3, p = job.h * job.w;
    Py_buffer bufs[7];
    int got = 0, failed = 0;
    PyObject *objs[7] = {out_o, obs_o, frames_o, index_o, flipped_o, keep_o, alpha_o};
    ssz last = job.n ? (job.n - 1) * job.keep_n + (job.k - 1) * job.keep_k + 2 * job.keep_c : 0;
    ssz need[7] = {rows * p * 4, rows * p * 4, 0, job.n * job.k * 8, job.n,
                   (last + p) * (job.kind == KEEP_FLOAT ? 4 : 1), (job.alpha_step ? job.n : 1) * 4};
    const char *names[7] = {"out", "obs", "frames", "index", "flipped", "keep", "alpha"};
    for (; got < 7; got++) {
        if (objs[got] == Py_None) {
            bufs[got].buf = NULL;
            bufs[got].obj = NULL;
            continue;
        }
        if (take(objs[got], &bufs[got], need[got], got == 0, names[got])) {
            failed = 1;
            break;
        }
    }
    if (!failed) {
        job.out = bufs[0].buf;
        job.obs = bufs[1].buf;
        job.frames = bufs[2].buf;
        job.nframes = bufs[2].len / (3 * (p ? p : 1));
        job.index = bufs[3].buf;
        job.flipped = bufs[4].buf;
        job.keep = bufs[5].buf;
        job.alpha = bufs[6].buf;
        failed = job.out == NULL || job.obs == NULL || job.frames == NULL || job.index == NULL ||
                 job.alpha == NULL || (job.kind != KEEP_NONE && job.keep == NULL);
        if (failed) PyErr_SetString(PyExc_ValueError, "blend_frames: a required buffer is None");
    }
    if (!failed) {
        Job jobs[64];
        pthread_t ids[64];
        int started[64] = {0};
        int n = threads < 1 ? 1 : threads > 64 ? 64 : threads, bad = 0;
        if (rows < n) n = rows ? (int)rows : 1;
        if (rows * p < (1 << 18)) n = 1; /* under 1 MB of output a thread costs more than it saves */
        Py_BEGIN_ALLOW_THREADS;
        for (int t = 0; t < n; t++) {
            jobs[t] = job;
            jobs[t].lo = rows * t / n;
            jobs[t].hi = rows * (t + 1) / n;
        }
        for (int t = 1; t < n; t++) started[t] = pthread_create(&ids[t], NULL, run, &jobs[t]) == 0;
        run(&jobs[0]);
        for (int t = 1; t < n; t++) {
            if (started[t])
                pthread_join(ids[t], NULL);
            else /* a thread that could not start: its rows run here */
                run(&jobs[t]);
            bad |= jobs[t].bad;
        }
        bad |= jobs[0].bad;
        Py_END_ALLOW_THREADS;
        if (bad) {
            PyErr_SetString(PyExc_IndexError, "blend_frames: a frame index is out of range");
            failed = 1;
        }
    }
    for (int i = 0; i < got; i++)
        if (bufs[i].obj != NULL) PyBuffer_Release(&bufs[i]);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"blend_frames", blend_frames, METH_VARARGS,
     "blend_frames(out, obs, frames, index, flipped, keep, keep_strides, kind, alpha, "
     "alpha_step, plain, n, k, h, w, threads): out = the blend of obs and its backgrounds."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lerp", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lerp(void) {
    row = pick_row();
    return PyModule_Create(&module);
}
