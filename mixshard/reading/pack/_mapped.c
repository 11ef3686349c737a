/* Rows copied out of memory-mapped shards (mapped.py says why), safe against the file changing
 * underneath: a shard truncated (or copied over) while mapped makes any access past its new end
 * raise SIGBUS, whose default action ends the process, and so does an I/O error paging a block
 * in. Here such a fault interrupts the copy instead: `copy_rows` reports the row it stopped at
 * and the caller raises an error naming the shard.
 *
 * The SIGBUS handler is ours only while a copy runs (installed by the first thread to start one,
 * the one before put back by the last to end), so a handler installed between copies
 * (faulthandler.enable) is chained at the next copy and never points back at ours. A fault on a
 * thread that is not inside a copy goes to the handler that was there before. Each thread's jump
 * buffer is thread-local (initial-exec TLS, which a signal handler may read).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/uio.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef Py_ssize_t ssz;

#if defined(__GNUC__) && defined(__linux__)
#define SIGNAL_SAFE_TLS __attribute__((tls_model("initial-exec")))
#else
#define SIGNAL_SAFE_TLS
#endif

static __thread sigjmp_buf *volatile guard SIGNAL_SAFE_TLS;
static struct sigaction chained; /* SIGBUS's handler before ours */
static int copying = 0;          /* threads inside a copy: ours is installed while > 0 */
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    sigjmp_buf *jump = guard;
    if (jump != NULL) { /* a fault inside copy_rows on this thread: leave the copy */
        guard = NULL;
        siglongjmp(*jump, 1);
    }
    if (chained.sa_flags & SA_SIGINFO) {
        chained.sa_sigaction(sig, info, context);
    } else if (chained.sa_handler != SIG_DFL && chained.sa_handler != SIG_IGN) {
        chained.sa_handler(sig);
    } else { /* the default action (the kernel ignores SIG_IGN for a fault): end the process */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        raise(sig); /* pending until this handler returns, or the access faults again */
    }
}

/* A thread starts a copy: ours installed if it is the first; 0, or -1 with errno. */
static int enter_copy(void) {
    int failed = 0;
    pthread_mutex_lock(&install_lock);
    if (copying == 0) {
        struct sigaction ours;
        memset(&ours, 0, sizeof ours);
        ours.sa_sigaction = on_sigbus;
        ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&ours.sa_mask);
        failed = sigaction(SIGBUS, &ours, &chained);
    }
    if (failed == 0) copying++;
    pthread_mutex_unlock(&install_lock);
    return failed;
}

/* A thread ends a copy: the handler before ours put back if it is the last. */
static void leave_copy(void) {
    pthread_mutex_lock(&install_lock);
    if (--copying == 0) sigaction(SIGBUS, &chained, NULL);
    pthread_mutex_unlock(&install_lock);
}

/* A forked child has only the forking thread: no copy runs there. */
static void after_fork_in_child(void) {
    pthread_mutex_init(&install_lock, NULL);
    if (copying > 0) sigaction(SIGBUS, &chained, NULL);
    copying = 0;
}

/* The C-contiguous buffers of objs[0..n) into b (the first writable): how many were got (n, or
 * fewer with the error set; the caller releases those). */
static int buffers(PyObject **objs, Py_buffer *b, int n) {
    for (int got = 0; got < n; got++) {
        int flags = PyBUF_C_CONTIGUOUS | (got == 0 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[got], &b[got], flags) < 0) return got;
    }
    return n;
}

/* Where item (m, at) starts in mapping m, or NULL when its row_bytes lie past the mapping's end. */
static inline const uint8_t *row_at(int64_t m, int64_t at, const uint64_t *bases,
                                    const int64_t *lengths, ssz row_bytes) {
    if (at < 0 || at > lengths[m] - row_bytes) return NULL;
    return (const uint8_t *)(uintptr_t)bases[m] + at;
}

/* n bytes from `from` to `to`, stored past the caches where the CPU can (SSE2 streaming
 * stores; a fence ends the copy): a batch is read batches later (docs/design.md), so a cached
 * store would only read the line first and then evict a line of the pack about to be read. */
static inline void store_uncached(uint8_t *to, const uint8_t *from, size_t n) {
#if defined(__SSE2__)
    for (; n > 0 && ((uintptr_t)to & 15); n--) *to++ = *from++;
    for (; n >= 64; n -= 64, to += 64, from += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)from);
        __m128i b = _mm_loadu_si128((const __m128i *)(from + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(from + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(from + 48));
        _mm_stream_si128((__m128i *)to, a);
        _mm_stream_si128((__m128i *)(to + 16), b);
        _mm_stream_si128((__m128i *)(to + 32), c);
        _mm_stream_si128((__m128i *)(to + 48), d);
    }
#endif
    memcpy(to, from, n);
}

/* A row copied while its next row (or NULL) is asked into the L2 cache, chunk by chunk: a row
 * starts at a random place of the pack, where the hardware prefetcher, which stops at page
 * ends, would leave each page's first lines to a miss (docs/design.md has the figures). A
 * prefetch never faults: a page past a truncated end is skipped, not read. */
#define PREFETCH_CHUNK 2048
static inline void copy_prefetching(uint8_t *to, const uint8_t *from, const uint8_t *next,
                                    ssz row_bytes) {
    for (ssz done = 0; done < row_bytes; done += PREFETCH_CHUNK) {
        ssz chunk = row_bytes - done < PREFETCH_CHUNK ? row_bytes - done : PREFETCH_CHUNK;
        for (ssz line = 0; next != NULL && line < chunk; line += 64)
            __builtin_prefetch(next + done + line, 0, 2);
        store_uncached(to + done, from + done, (size_t)chunk);
    }
}

/* copy_rows(out, rows, maps, offsets, bases, lengths, row_bytes) -> (status, item), as
 * mapped.ShardMaps.copy says (status 2: SIGBUS), where mapping m is at address bases[m], its
 * first lengths[m] bytes mapped. Arrays: rows, maps, offsets int64 (n); bases uint64, lengths
 * int64 (one per mapping); out writable and C-contiguous. The GIL is released while copying.
 */
static PyObject *copy_rows(PyObject *self, PyObject *args) {
    PyObject *objs[6];
    ssz row_bytes;
    if (!PyArg_ParseTuple(args, "OOOOOOn", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &row_bytes))
        return NULL;
    Py_buffer b[6];
    PyObject *result = NULL;
    int got = buffers(objs, b, 6);
    if (got < 6) goto done;
    ssz n = b[1].len / 8, maps = b[4].len / 8;
    const int64_t *rows = b[1].buf, *map = b[2].buf, *offsets = b[3].buf, *lengths = b[5].buf;
    const uint64_t *bases = b[4].buf;
    ssz out_rows = row_bytes > 0 ? b[0].len / row_bytes : 0;
    int shapes = row_bytes > 0 && b[1].len % 8 == 0 && b[2].len == b[1].len &&
                 b[3].len == b[1].len && b[4].len % 8 == 0 && b[5].len == b[4].len;
    for (ssz i = 0; shapes && i < n; i++)
        shapes = rows[i] >= 0 && rows[i] < out_rows && map[i] >= 0 && map[i] < maps &&
                 bases[map[i]] != 0;
    if (!shapes) {
        PyErr_SetString(PyExc_ValueError, "copy_rows: arrays do not match (rows, maps, sizes)");
        goto done;
    }
    if (enter_copy() != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    uint8_t *out = b[0].buf;
    volatile ssz i = 0; /* kept across the jump out of the handler */
    volatile int status = 0;
    sigjmp_buf jump;
    Py_BEGIN_ALLOW_THREADS
    if (sigsetjmp(jump, 1) == 0) {
        guard = &jump;
        __atomic_signal_fence(__ATOMIC_SEQ_CST); /* no copy before the guard is set */
        const uint8_t *next = n > 0 ? row_at(map[0], offsets[0], bases, lengths, row_bytes) : NULL;
        for (; i < n; i++) {
            const uint8_t *from = next;
            if (from == NULL) {
                status = 1;
                break;
            }
            next = i + 1 < n ? row_at(map[i + 1], offsets[i + 1], bases, lengths, row_bytes) : NULL;
            copy_prefetching(out + rows[i] * row_bytes, from, next, row_bytes);
        }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        guard = NULL;
    } else {
        status = 2; /* the handler cleared the guard */
    }
#if defined(__SSE2__)
    _mm_sfence(); /* the streaming stores done */
#endif
    leave_copy();
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("in", (int)status, (ssz)i);
done:
    while (got-- > 0) PyBuffer_Release(&b[got]);
    return result;
}

/* read_rows(out, rows, fds, offsets, row_bytes) -> (status, item), as mapped.read_rows says
 * (a pread each, all with the GIL released): status 0: all read (item = n); 1: item i ended
 * short, 3: its pread failed. Items before i are read. Arrays: rows, fds, offsets int64 (n).
 */
static PyObject *read_rows(PyObject *self, PyObject *args) {
    PyObject *objs[4];
    ssz row_bytes;
    if (!PyArg_ParseTuple(args, "OOOOn", &objs[0], &objs[1], &objs[2], &objs[3], &row_bytes))
        return NULL;
    Py_buffer b[4];
    PyObject *result = NULL;
    int got = buffers(objs, b, 4);
    if (got < 4) goto fail;
    ssz n = b[1].len / 8;
    const int64_t *rows = b[1].buf, *fds = b[2].buf, *offsets = b[3].buf;
    ssz out_rows = row_bytes > 0 ? b[0].len / row_bytes : 0;
    int shapes = row_bytes > 0 && b[1].len % 8 == 0 && b[2].len == b[1].len &&
                 b[3].len == b[1].len;
    for (ssz i = 0; shapes && i < n; i++) shapes = rows[i] >= 0 && rows[i] < out_rows;
    if (!shapes) {
        PyErr_SetString(PyExc_ValueError, "read_rows: arrays do not match (rows, fds, sizes)");
        goto fail;
    }
    uint8_t *out = b[0].buf;
    char *cached = calloc((size_t)n + 1, 1);
    if (!cached) {
        PyErr_NoMemory();
        goto fail;
    }
    ssz i = 0;
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
#ifdef RWF_NOWAIT
    /* Rows in the page cache are read now; every other row is asked for at once (WILLNEED
     * starts its read), then read below: read one by one, a cold batch's reads would each wait
     * behind whatever the disk is doing (the warm pass), one at a time. */
    for (ssz j = 0; j < n; j++) {
        struct iovec v = {out + rows[j] * row_bytes, (size_t)row_bytes};
        ssize_t done = preadv2((int)fds[j], &v, 1, (off_t)offsets[j], RWF_NOWAIT);
        if (done < 0 && errno == EOPNOTSUPP) break; /* a file system that cannot say */
        cached[j] = done == row_bytes;
        if (!cached[j])
            posix_fadvise((int)fds[j], (off_t)offsets[j], (off_t)row_bytes, POSIX_FADV_WILLNEED);
    }
#endif
    for (; i < n; i++) {
        if (cached[i]) continue;
        ssize_t done = pread((int)fds[i], out + rows[i] * row_bytes, (size_t)row_bytes,
                             (off_t)offsets[i]);
        if (done != row_bytes) {
            status = done < 0 ? 3 : 1;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    free(cached);
    result = Py_BuildValue("in", status, i);
fail:
    while (got-- > 0) PyBuffer_Release(&b[got]);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_rows", copy_rows, METH_VARARGS, "Copy rows out of mapped shards, surviving SIGBUS."},
    {"read_rows", read_rows, METH_VARARGS, "Read rows with pread, the GIL released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_mapped", "Guarded copies out of memory-mapped shards.", -1, methods,
};

PyMODINIT_FUNC PyInit__mapped(void) {
    if (pthread_atfork(NULL, NULL, after_fork_in_child) != 0) {
        PyErr_SetString(PyExc_OSError, "_mapped: pthread_atfork failed");
        return NULL;
    }
    return PyModule_Create(&module);
}
