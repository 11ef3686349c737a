/* `composite` and `blend` on a CPU in one pass: key, gather, flip and lerp fused.
 *
 * The torch path (`pasting._masked_lerp`) makes a frame's blend from separate passes: the
 * backgrounds gathered, cast to floats, the mask built (a key) and turned into weights, then
 * `torch.lerp`. Each pass is cheap, but on a CPU their compute and memory traffic add up. Here
 * each output value is made from its inputs at once: the observation (uint8 or float32), its
 * background read straight from where it lies (a frame store by index, mirrored when the sample
 * is flipped, or the caller's images), the keep weight (a bool or float mask, or a key made from
 * the pixel itself, its segmentation id or its depth) and alpha. The arithmetic is the torch
 * path's, operation for operation (see `LERP`), so the bytes are the same.
 *
 * Every tensor is read through element strides over a logical (sample n, frame f, channel c,
 * pixel p) index, p = y * W + x, so channels-first (NCHW) and channels-last (NHWC) tensors are
 * read where they lie, no permuted copy made. Two shapes of loop, each vectorised by the
 * compiler: *planar* (channels-first: a channel's pixels one after another) and *interleaved*
 * (channels-last: a pixel's frames and their C = 3 or 4 channels one after another, walked as
 * pixel-frames q = pixel * k + frame with the C channels a fixed group; the background's
 * channel planes and the weights are first laid out by pixel-frame in a small buffer; for
 * RGB they are then laid out value by value, as the obs lies, and blended by a planar row).
 * Channels from the 4th on (RGBA's alpha) are copied. A uint8 observation gives uint8 (rounded
 * half up), a float32 one float32. The work is split over threads by (sample, span of
 * pixels); the GIL is released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef Py_ssize_t ssz;

enum { KEEP_NONE = 0, KEEP_BOOL = 1, KEEP_FLOAT = 2 };
enum { KEY_NONE = 0, KEY_GREEN = 1, KEY_RANGE = 2, KEY_IDS = 3, KEY_DEPTH = 4 };
enum { T_U8 = 0, T_I8, T_I16, T_I32, T_I64, T_F32, T_F64 }; /* a key map's dtype */
static const ssz TYPE_SIZE[] = {1, 1, 2, 4, 8, 4, 8};

/* The int64 parameters by position (`fused.py` names them in this order). Strides count
 * elements of the tensor's own dtype; a broadcast dimension has stride 0. */
enum {
    P_N, P_K, P_C, P_H, P_W,
    P_U8,                      /* obs and out are uint8 (else float32) */
    P_OBS, P_OUT = P_OBS + 4,  /* strides: sample, frame, channel, pixel */
    P_BG = P_OUT + 4,          /* strides: frame index unit, sample, frame, channel, pixel */
    P_BG_COUNT = P_BG + 5,     /* frames the index may name (0: no index) */
    P_KEEP, P_KEEP_S,          /* kind; strides: sample, frame, channel, pixel */
    P_KEY = P_KEEP_S + 4, P_KEY_TYPE, P_KEY_S, /* kind, map dtype; map strides: n, f, pixel */
    P_INVERT = P_KEY_S + 3, P_IDS,             /* keep where the id is not listed; ids */
    P_PLAIN, P_ALPHA_STEP, P_THREADS, P_COUNT
};

/* Pixels a unit of work covers at most: whole lines, long runs of each plane (a hardware
 * prefetcher restarts at each 4 KB page: runs of a page or two ran 1.6x slower). */
#define SPAN 16384
#define QMAX 8192
#define ISTEP 2048 /* pixel-frames a channels-last step blends at once: its inputs stay in L1 */
/* Software prefetch: the keys' loops read the obs first, plane by plane, each a few KB long
 * and over before a hardware prefetcher ramps up (each restarts at a 4 KB page): they ask for
 * their inputs AHEAD bytes on (20% off the whole step; the blend's rows, reading three
 * streams at once, ran slower with it). */
#define AHEAD 1024 /* pixel-frames (or pixels) a key or a channels-last step handles at once */
/* Outputs of at least this many bytes are streamed past the caches (`store_out`); a smaller
 * one, which the caches hold, is stored, for the reads that follow it. */
#define STREAM_MIN (8 << 20)

typedef struct {
    void *out;
    const void *obs, *keep, *key_src;
    const uint8_t *bg, *flipped;
    const int64_t *index, *ids;
    const double *values;
    const float *alpha;
    int64_t p[P_COUNT];
    int bounds[16];    /* the green screen's bounds, whether grey is in them, and `green`'s */
    int lo8[3], hi8[3]; /* a colour key's bounds for uint8 values (integers) */
    float lof[3], hif[3]; /* ... for float32 values (exact: the nearest floats inside) */
    int interleaved;   /* obs and out are channels-last: frames and channels per pixel */
    int fused;         /* uint8 obs, a colour key at alpha 1 and AVX2: `fused_*` do it all */
    int fused_f32;     /* float32 obs, the same, with FMA: `fused_planar_f32` */
    int fused_map;     /* uint8 obs, a depth or ids key at alpha 1, AVX-512: `fused_planar_map` */
    int stream;        /* out is not obs: stream it (`store_out`) */
    ssz spans, span;   /* spans per sample, pixels per span */
    ssz *next;         /* the next unit (sample, span) no thread has taken, shared */
    int *stop;         /* a thread met an error: the others take no more units */
    int bad;           /* 1: an index out of range was met; 2: no memory */
} Job;

typedef struct {
    uint8_t keep[SPAN], fix[SPAN];
    float weight[SPAN];
    uint8_t t[3][QMAX + 320]; /* the background's channels by pixel-frame */
    uint8_t colour[3][QMAX + 448]; /* a key's colours as uint8 */
    float plane[3][QMAX + 80];   /* a key's float colours, or a map's values (any dtype) */
    uint8_t line[4096];     /* a mirrored line of background */
    uint8_t flat[3 * ISTEP + 64], flat_keep[3 * ISTEP + 64]; /* channels-last RGB by value */
    float flat_weight[3 * ISTEP + 64];
} Scratch;

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(__clang__) && \
    __GNUC__ >= 12 /* keys: AVX-512's narrowing moves make a map's bytes in one instruction */
#define WIDE __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#elif defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(__clang__)
#define WIDE __attribute__((target_clones("avx2", "default"))) /* keys: 8 lanes where AVX2 is */
#else
#define WIDE
#endif

/* -- the blend ------------------------------------------------------------------------------ */

/* torch's lerp as its vector kernel makes it: `start + w * (end - start)` for |w| < 0.5, else
 * `end + (w - 1) * (end - start)`, exact at w = 0 and w = 1; both made, then one chosen (a
 * vector select). Where the CPU has FMA, torch's kernel fuses the multiply and the add (one
 * rounding), and so do the `_fma` rows; elsewhere neither does. */
#define LERP(FMA, start, end, w)                                                                \
    (fabsf(w) < 0.5f ? FMA((w), (end) - (start), (start)) : FMA((w) - 1.0f, (end) - (start), (end)))
#define FUSED(a, b, c) fmaf(a, b, c)
#define UNFUSED(a, b, c) ((a) * (b) + (c))
#define HALF_UP(x) ((uint8_t)floorf((x) + 0.5f)) /* the torch path's add_(0.5).floor_() */
#define AS_FLOAT(x) (x)

/* A value from obs o, background b and keep weight m (bool 0/1 or float) at alpha a, for each
 * kind of weight: none (blend at a), a bool mask at alpha 1 (`lerp(b, o, m)`: o or b exactly;
 * uint8: a select; float: LERP's own ops at w 0 and at w 1, fma(0, o - b, b or o), without
 * the other branch), a bool one at alpha a (weights m * -a + a: 0 where kept), a float one at 1
 * (`lerp(b, o, m)`) and at a (weights (-m + 1) * a). */
#define V_NONE(FMA, TO, o, b, m) TO(LERP(FMA, (float)(o), (float)(b), a))
#define V_SELECT(FMA, TO, o, b, m) (((uint8_t)(o) & (uint8_t)-(m)) | ((b) & (uint8_t) ~(uint8_t)-(m)))
#define V_BPLAIN(FMA, TO, o, b, m) TO(FMA(0.0f, (float)(o) - (float)(b), (m) ? (float)(o) : (float)(b)))
#define V_BOOL(FMA, TO, o, b, m) TO(LERP(FMA, (float)(o), (float)(b), (float)(m) * -a + a))
#define V_FPLAIN(FMA, TO, o, b, m) TO(LERP(FMA, (float)(b), (float)(o), (m)))
#define V_FLOAT(FMA, TO, o, b, m) TO(LERP(FMA, (float)(o), (float)(b), (-(m) + 1.0f) * a))

/* LOOP(V, M) with the value V of each kind, M the weight row (bool or float). */
#define KINDS(LOOP, U8)                                                                         \
    if (kind == KEEP_NONE)                                                                      \
        LOOP(V_NONE, m8);                                                                       \
    else if (kind == KEEP_BOOL && plain && U8)                                                  \
        LOOP(V_SELECT, m8);                                                                     \
    else if (kind == KEEP_BOOL && plain)                                                        \
        LOOP(V_BPLAIN, m8);                                                                     \
    else if (kind == KEEP_BOOL)                                                                 \
        LOOP(V_BOOL, m8);                                                                       \
    else if (plain)                                                                             \
        LOOP(V_FPLAIN, mf);                                                                     \
    else                                                                                        \
        LOOP(V_FLOAT, mf)

/* Planar: one channel's `len` values at strides ds, os (obs and out) and bs (background).
 * `d` may be `o` (`out=obs`): each value is read, then written at the same index. */
#define PLANAR(V, M)                                                                            \
    for (ssz i = 0; i < len; i++) d[i * DS] = (T)(V(FMA, TO, o[i * OS], b[i * BS], M[i]))
#define ROW(name, T_, attr)                                                          \
    attr static void name(T_ *restrict d, ssz ds, const T_ *restrict o, ssz os,                  \
                          const uint8_t *restrict b, ssz bs, const void *w, int kind, int plain, \
                          float a, ssz len) {                                                   \
        typedef T_ T;                                                                           \
        const uint8_t *restrict m8 = w;                                                         \
        const float *restrict mf = w;                                                           \
        if (ds == 1 && os == 1 && bs == 1) {                                                    \
            enum { DS = 1, OS = 1, BS = 1 };                                                    \
            KINDS(PLANAR_, sizeof(T) == 1);                                                     \
        } else {                                                                                \
            KINDS(PLANAR_S, sizeof(T) == 1);                                                    \
        }                                                                                       \
    }
#define PLANAR_(V, M) PLANAR(V, M)
#define PLANAR_S(V, M)                                                                          \
    for (ssz i = 0; i < len; i++) d[i * ds] = (T)(V(FMA, TO, o[i * os], b[i * bs], M[i]))

/* Interleaved: `len` pixel-frames of C channels; the background's channels t0, t1, t2 and
 * the weights by pixel-frame. A 4th channel (alpha) is copied. */
#define GROUP(V, M)                                                                             \
    do {                                                                                        \
        for (ssz q = 0; q < len; q++) {                                                         \
            d[q * C] = (T)(V(FMA, TO, o[q * C], t0[q], M[q]));                                  \
            d[q * C + 1] = (T)(V(FMA, TO, o[q * C + 1], t1[q], M[q]));                          \
            d[q * C + 2] = (T)(V(FMA, TO, o[q * C + 2], t2[q], M[q]));                          \
            if (C == 4) d[q * C + 3] = o[q * C + 3];                                            \
        }                                                                                       \
    } while (0)
#define IROW(name, T_, C_, attr)                                                     \
    attr static void name(T_ *restrict d, const T_ *restrict o, const uint8_t *restrict t0,      \
                          const uint8_t *restrict t1, const uint8_t *restrict t2, const void *w, \
                          int kind, int plain, float a, ssz len) {                              \
        typedef T_ T;                                                                           \
        enum { C = C_ };                                                                        \
        const uint8_t *restrict m8 = w;                                                         \
        const float *restrict mf = w;                                                           \
        KINDS(GROUP, sizeof(T) == 1);                                                           \
    }

typedef void (*RowF)(float *, ssz, const float *, ssz, const uint8_t *, ssz, const void *, int,
                     int, float, ssz);
typedef void (*RowU)(uint8_t *, ssz, const uint8_t *, ssz, const uint8_t *, ssz, const void *,
                     int, int, float, ssz);
typedef void (*IRowF)(float *, const float *, const uint8_t *, const uint8_t *, const uint8_t *,
                      const void *, int, int, float, ssz);
typedef void (*IRowU)(uint8_t *, const uint8_t *, const uint8_t *, const uint8_t *,
                      const uint8_t *, const void *, int, int, float, ssz);

#define FMA UNFUSED
#define TO AS_FLOAT
ROW(row_f32_plain, float, )
IROW(irow4_f32_plain, float, 4, )
#undef TO
#define TO HALF_UP
ROW(row_u8_plain, uint8_t, )
IROW(irow4_u8_plain, uint8_t, 4, )
#undef FMA
#undef TO
#if defined(__GNUC__) && defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma")))
#define FMA FUSED
#define TO AS_FLOAT
ROW(row_f32_fma, float, AVX2)
IROW(irow4_f32_fma, float, 4, AVX2)
#undef TO
#define TO HALF_UP
ROW(row_u8_fma, uint8_t, AVX2)
IROW(irow4_u8_fma, uint8_t, 4, AVX2)
#undef FMA
#undef TO
static int has_fma(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define row_f32_fma row_f32_plain
#define row_u8_fma row_u8_plain
#define irow4_f32_fma irow4_f32_plain
#define irow4_u8_fma irow4_u8_plain
static int has_fma(void) { return 0; }
#endif
static RowF row_f32;
static RowU row_u8;
static IRowF irow_f32; /* RGBA channels-last rows (RGB: `flat_row`) */
static IRowU irow_u8;

/* -- layout helpers: values by pixel-frame ------------------------------------------------- */

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define X86 1
static int avx2; /* the CPU has AVX2: the hand-written byte shuffles below may run */
/* 32 bytes of output: streamed past the caches where `stream` (16-byte aligned, out not obs:
 * the obs's lines are in the cache already; an output larger than the caches), else stored. A
 * stored line is first read from memory (to be written in the cache); a streamed one is not:
 * a quarter less traffic for the select of uint8 obs (`obs.clone()` stores). */
__attribute__((target("avx2"), always_inline)) static inline void store_out(uint8_t *d, __m256i v,
                                                                            int stream) {
    if (stream) {
        _mm_stream_si128((__m128i *)d, _mm256_castsi256_si128(v));
        _mm_stream_si128((__m128i *)(d + 16), _mm256_extracti128_si256(v, 1));
    } else {
        _mm256_storeu_si256((__m256i *)d, v);
    }
}

/* Three byte streams and their interleave (a0 b0 c0 a1 b1 c1 ...: a pixel's RGB, a pixel's
 * three frames), 32 of each at a time with AVX2's in-lane byte shuffles: a 16-byte lane of
 * each source makes 48 interleaved bytes, three lanes; the two lanes' results are put in order
 * with 128-bit permutes. SHUF[k][s]: where output lane k takes bytes of source s (0x80: none);
 * ONE[k]: the same for one source repeated three times (a mask per pixel-frame, per value). */
static uint8_t SHUF[3][3][16], UNSHUF[3][3][16], ONE[3][16];
static void shuffles(void) {
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < 16; t++) {
            int at = 16 * k + t;
            for (int s = 0; s < 3; s++) SHUF[k][s][t] = at % 3 == s ? (uint8_t)(at / 3) : 0x80;
            ONE[k][t] = (uint8_t)(at / 3);
            for (int s = 0; s < 3; s++) /* source s's byte t lies at 3 t + s of the 48 */
                UNSHUF[k][s][t] = (3 * t + s) / 16 == k ? (uint8_t)((3 * t + s) % 16) : 0x80;
        }
}
#define LANE(table) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table)))
#define SH(x, table) _mm256_shuffle_epi8(x, LANE(table))

/* 96 interleaved bytes (a0 b0 c0 a1 ...) in r0, r1, r2 split into their three streams x[0..2],
 * 32 each: each 16-byte lane's 48 bytes put together by 128-bit permutes, then shuffled. */
__attribute__((target("avx2"), always_inline)) static inline void
split96(__m256i r0, __m256i r1, __m256i r2, __m256i *x) {
    __m256i v[3] = {_mm256_permute2x128_si256(r0, r1, 0x30), /* lanes 0 of 48 and 48' */
                    _mm256_permute2x128_si256(r0, r2, 0x21),
                    _mm256_permute2x128_si256(r1, r2, 0x30)};
    for (int s = 0; s < 3; s++)
        x[s] = _mm256_or_si256(_mm256_or_si256(SH(v[0], UNSHUF[0][s]), SH(v[1], UNSHUF[1][s])),
                               SH(v[2], UNSHUF[2][s]));
}

/* The same with AVX-512's whole-register byte permutes (VBMI), where the CPU has them: 64
 * pixel-frames (192 bytes) at a time, each of the three vectors made by two permutes (a
 * permute of two registers, then the third register's bytes put in under a mask) where AVX2
 * takes three shuffles, two ors and a lane permute. WEAVE[v]: output vector v's source byte
 * (bit 6: the second register), WEAVE_C[v]: its bytes from the third; SPLIT[s]: stream s's
 * bytes of r0 | r1 (and SPLIT_C[s] of r2); TRIPLE[v]: a byte per pixel-frame repeated 3 times. */
static int wide; /* AVX-512 BW and VBMI are there, and in use (`_lerp.wide`) */
static int wide_cpu;
static uint8_t WEAVE[3][64], SPLIT[3][64], SPLIT_HI[3][64], TRIPLE[3][64];
static uint64_t WEAVE_C[3], SPLIT_C[3];
static void shuffles512(void) {
    for (int v = 0; v < 3; v++)
        for (int b = 0; b < 64; b++) {
            int at = 64 * v + b, i = at / 3, s = at % 3, from = 3 * b + v; /* (split: v is s) */
            WEAVE[v][b] = (uint8_t)(i | (s == 1) << 6);
            WEAVE_C[v] |= (uint64_t)(s == 2) << b;
            TRIPLE[v][b] = (uint8_t)i;
            SPLIT[v][b] = (uint8_t)(from < 128 ? from : 0);
            SPLIT_HI[v][b] = (uint8_t)(from < 128 ? 0 : from - 128);
            SPLIT_C[v] |= (uint64_t)(from >= 128) << b;
        }
}
#define AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vbmi")))
/* store_out (above) of 64 bytes: streamed in one where d is 64-byte aligned, else in four
 * where it is 16-byte aligned, else stored. */
AVX512 __attribute__((always_inline)) static inline void store64(uint8_t *d, __m512i v, int stream) {
    if (!stream || ((uintptr_t)d & 15) != 0) {
        _mm512_storeu_si512(d, v);
    } else if (((uintptr_t)d & 63) == 0) {
        _mm512_stream_si512((void *)d, v);
    } else {
        _mm_stream_si128((__m128i *)d, _mm512_castsi512_si128(v));
        _mm_stream_si128((__m128i *)(d + 16), _mm512_extracti32x4_epi32(v, 1));
        _mm_stream_si128((__m128i *)(d + 32), _mm512_extracti32x4_epi32(v, 2));
        _mm_stream_si128((__m128i *)(d + 48), _mm512_extracti32x4_epi32(v, 3));
    }
}
/* The tables in registers, loaded once a call: kept in the tables, a store through a uint8_t
 * pointer could alias them, and they were loaded again after every store. */
typedef struct {
    __m512i weave[3], split[3], split_hi[3], triple[3];
    __mmask64 weave_c[3], split_c[3];
} Perms;
AVX512 __attribute__((always_inline)) static inline Perms perms512(void) {
    Perms P;
    for (int k = 0; k < 3; k++) {
        P.weave[k] = _mm512_loadu_si512(WEAVE[k]), P.triple[k] = _mm512_loadu_si512(TRIPLE[k]);
        P.split[k] = _mm512_loadu_si512(SPLIT[k]), P.split_hi[k] = _mm512_loadu_si512(SPLIT_HI[k]);
        P.weave_c[k] = WEAVE_C[k], P.split_c[k] = SPLIT_C[k];
    }
    return P;
}

/* a, b, c interleaved: a0 b0 c0 a1 ... in v[0..2] (weave1: v[k] alone). */
AVX512 __attribute__((always_inline)) static inline __m512i weave1(const Perms *P, int k, __m512i a,
                                                                  __m512i b, __m512i c) {
    return _mm512_mask_permutexvar_epi8(_mm512_permutex2var_epi8(a, P->weave[k], b),
                                        P->weave_c[k], P->weave[k], c);
}
AVX512 __attribute__((always_inline)) static inline void weave192(const Perms *P, __m512i a,
                                                                 __m512i b, __m512i c, __m512i *v) {
    for (int k = 0; k < 3; k++) v[k] = weave1(P, k, a, b, c);
}

/* 192 interleaved bytes in r0, r1, r2 split into their three streams x[0..2]. */
AVX512 __attribute__((always_inline)) static inline void split192(const Perms *P, __m512i r0,
                                                                 __m512i r1, __m512i r2, __m512i *x) {
    for (int s = 0; s < 3; s++)
        x[s] = _mm512_mask_permutexvar_epi8(_mm512_permutex2var_epi8(r0, P->split[s], r1),
                                            P->split_c[s], P->split_hi[s], r2);
}

/* d = kept ? obs : background, 192 bytes: keep has a byte per pixel-frame (0xff: kept). */
AVX512 __attribute__((always_inline)) static inline void select192(const Perms *P, uint8_t *d,
                                                                  const __m512i *ob, __m512i keep,
                                                                  const __m512i *bg, int stream) {
    for (int k = 0; k < 3; k++) /* bit by bit */
        store64(d + 64 * k, _mm512_ternarylogic_epi64(_mm512_permutexvar_epi8(P->triple[k], keep),
                                                      ob[k], bg[k], 0xca), stream);
}

/* interleave3, 64 at a time. */
AVX512 static ssz interleave3_512(uint8_t *dst, const uint8_t *a, const uint8_t *b,
                                  const uint8_t *c, ssz n) {
    const Perms P = perms512();
    ssz i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i v[3];
        weave192(&P, _mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i), _mm512_loadu_si512(c + i), v);
        for (int k = 0; k < 3; k++) _mm512_storeu_si512(dst + 3 * i + 64 * k, v[k]);
    }
    return i;
}

/* dst[3 i + s] = src_s[i]; returns how many i it did (whole 32s). */
__attribute__((target("avx2"))) static ssz interleave3(uint8_t *dst, const uint8_t *a,
                                                      const uint8_t *b, const uint8_t *c, ssz n) {
    ssz i = wide ? interleave3_512(dst, a, b, c, n) : 0;
    for (; i + 32 <= n; i += 32) {
        __m256i x[3] = {_mm256_loadu_si256((const __m256i *)(a + i)),
                        _mm256_loadu_si256((const __m256i *)(b + i)),
                        _mm256_loadu_si256((const __m256i *)(c + i))}, v[3];
        for (int k = 0; k < 3; k++)
            v[k] = _mm256_or_si256(_mm256_or_si256(SH(x[0], SHUF[k][0]), SH(x[1], SHUF[k][1])),
                                   SH(x[2], SHUF[k][2]));
        _mm256_storeu_si256((__m256i *)(dst + 3 * i), _mm256_permute2x128_si256(v[0], v[1], 0x20));
        _mm256_storeu_si256((__m256i *)(dst + 3 * i + 32), _mm256_permute2x128_si256(v[2], v[0], 0x30));
        _mm256_storeu_si256((__m256i *)(dst + 3 * i + 64), _mm256_permute2x128_si256(v[1], v[2], 0x31));
    }
    return i;
}

/* a[i], b[i], c[i] = src[3 i], src[3 i + 1], src[3 i + 2]; returns how many i it did. */
__attribute__((target("avx2"))) static ssz deinterleave3(uint8_t *a, uint8_t *b, uint8_t *c,
                                                        const uint8_t *src, ssz n) {
    ssz i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i r0 = _mm256_loadu_si256((const __m256i *)(src + 3 * i));
        __m256i r1 = _mm256_loadu_si256((const __m256i *)(src + 3 * i + 32));
        __m256i r2 = _mm256_loadu_si256((const __m256i *)(src + 3 * i + 64)), x[3];
        uint8_t *out[3] = {a, b, c};
        split96(r0, r1, r2, x);
        for (int s = 0; s < 3; s++) _mm256_storeu_si256((__m256i *)(out[s] + i), x[s]);
    }
    return i;
}

static ssz fused_interleaved_512(const Job *job, uint8_t *d, const uint8_t *o,
                                  const uint8_t *const *t, const uint8_t *keep8, ssz n);

/* d = obs where the pixel-frame is kept, else its background, for n pixel-frames of 3 uint8
 * channels (a bool mask at alpha 1: a select, the torch path's `torch.where`); with AVX-512,
 * `fused_interleaved_512` with these keep bytes. */
__attribute__((target("avx2"))) static ssz select3(const Job *j, uint8_t *d, const uint8_t *o,
                                                  const uint8_t *const *t, const uint8_t *m8,
                                                  ssz n) {
    const __m256i zero = _mm256_setzero_si256();
    const uint8_t *t0 = t[0], *t1 = t[1], *t2 = t[2];
    ssz i = wide ? fused_interleaved_512(j, d, o, t, m8, n) : 0;
    int stream = j->stream && ((uintptr_t)d & 15) == 0;
    for (; i + 32 <= n; i += 32) {
        __builtin_prefetch(o + 3 * (i + AHEAD), 0, 3);
        __builtin_prefetch(o + 3 * (i + AHEAD) + 64, 0, 3);
        __m256i x[3] = {_mm256_loadu_si256((const __m256i *)(t0 + i)),
                        _mm256_loadu_si256((const __m256i *)(t1 + i)),
                        _mm256_loadu_si256((const __m256i *)(t2 + i))}, v[3], w[3];
        __m256i keep = _mm256_sub_epi8(zero, _mm256_loadu_si256((const __m256i *)(m8 + i)));
        for (int k = 0; k < 3; k++) {
            v[k] = _mm256_or_si256(_mm256_or_si256(SH(x[0], SHUF[k][0]), SH(x[1], SHUF[k][1])),
                                   SH(x[2], SHUF[k][2]));
            w[k] = SH(keep, ONE[k]);
        }
        __m256i bg[3] = {_mm256_permute2x128_si256(v[0], v[1], 0x20),
                         _mm256_permute2x128_si256(v[2], v[0], 0x30),
                         _mm256_permute2x128_si256(v[1], v[2], 0x31)};
        __m256i mk[3] = {_mm256_permute2x128_si256(w[0], w[1], 0x20),
                         _mm256_permute2x128_si256(w[2], w[0], 0x30),
                         _mm256_permute2x128_si256(w[1], w[2], 0x31)};
        for (int k = 0; k < 3; k++) {
            __m256i ob = _mm256_loadu_si256((const __m256i *)(o + 3 * i + 32 * k));
            store_out(d + 3 * i + 32 * k, _mm256_blendv_epi8(bg[k], ob, mk[k]), stream);
        }
    }
    return i;
}

/* colours32 (below) with AVX-512, 64 at a time: the same ops, 16 lanes, the bytes narrowed. */
AVX512 static ssz colours64_512(uint8_t *d, const float *x, ssz m) {
    const __m512 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.0f);
    ssz i = 0;
    for (; i + 64 <= m; i += 64) {
        __builtin_prefetch(x + i + AHEAD, 0, 3);
        __builtin_prefetch(x + i + AHEAD + 16, 0, 3);
        __builtin_prefetch(x + i + AHEAD + 32, 0, 3);
        __builtin_prefetch(x + i + AHEAD + 48, 0, 3);
        for (int k = 0; k < 4; k++) {
            __m512 r = _mm512_roundscale_ps(_mm512_loadu_ps(x + i + 16 * k),
                                            _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
            __m512i v = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(r, zero), top));
            _mm_storeu_si128((__m128i *)(d + i + 16 * k), _mm512_cvtepi32_epi8(v));
        }
    }
    return i;
}

/* d = obs where kept, else the background, a planar row of n uint8 values with a keep byte
 * each (V_SELECT), 32 at a time, the output streamed (`store_out`): bound on memory. */
__attribute__((target("avx2"))) static ssz select_row(uint8_t *d, const uint8_t *o, const uint8_t *b,
                                                     const uint8_t *m8, ssz n, int stream) {
    const __m256i zero = _mm256_setzero_si256();
    ssz i = 0;
    stream = stream && ((uintptr_t)d & 15) == 0;
    for (; i + 32 <= n; i += 32) {
        __m256i keep = _mm256_sub_epi8(zero, _mm256_loadu_si256((const __m256i *)(m8 + i)));
        __m256i v = _mm256_blendv_epi8(_mm256_loadu_si256((const __m256i *)(b + i)),
                                       _mm256_loadu_si256((const __m256i *)(o + i)), keep);
        store_out(d + i, v, stream);
    }
    return i;
}

/* select_row for float32 obs (V_BPLAIN with FMA: fma(0, o - b, kept ? o : b), which every
 * AVX-512 CPU has), 16 at a time, the output streamed (`store64`). */
AVX512 static ssz select_row_f32(float *d, const float *o, const uint8_t *b, const uint8_t *m8,
                                 ssz n, int stream) {
    const __m512 zero = _mm512_setzero_ps();
    ssz i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 ov = _mm512_loadu_ps(o + i);
        __m512 bv = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + i))));
        __mmask16 kept = _mm_test_epi8_mask(_mm_loadu_si128((const __m128i *)(m8 + i)),
                                            _mm_set1_epi8(-1));
        __m512 v = _mm512_fmadd_ps(zero, _mm512_sub_ps(ov, bv), _mm512_mask_blend_ps(kept, bv, ov));
        store64((uint8_t *)(d + i), _mm512_castps_si512(v), stream);
    }
    return i;
}

/* Whether 0 < x[i] < far (`depth_keep`) for 64 float32 depths: four compares, a bit each. */
AVX512 __attribute__((always_inline)) static inline uint64_t depth_bits(const float *x, __m512 far) {
    uint64_t bits = 0;
    for (int k = 0; k < 4; k++) {
        __m512 v = _mm512_loadu_ps(x + 16 * k);
        __mmask16 in = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ) &
                       _mm512_cmp_ps_mask(v, far, _CMP_LT_OQ);
        bits |= (uint64_t)in << (16 * k);
    }
    return bits;
}

/* keep[i] = 0 < x[i] < far, 64 at a time, the bits made bytes at once. */
AVX512 static ssz depth_512(const float *x, float far, uint8_t *keep, ssz m) {
    const __m512 f = _mm512_set1_ps(far);
    ssz i = 0;
    for (; i + 64 <= m; i += 64) {
        for (int k = 0; k < 4; k++) __builtin_prefetch(x + i + AHEAD + 16 * k, 0, 3);
        _mm512_storeu_si512(keep + i, _mm512_maskz_mov_epi8(depth_bits(x + i, f), _mm512_set1_epi8(1)));
    }
    return i;
}

/* d[i] = the uint8 a float colour x[i] is read as (`colours`), 32 at a time: rounded to even,
 * clamped to [0, 255] in floats (max with 0 first: a NaN gives 0), converted and packed. */
__attribute__((target("avx2"))) static ssz colours32(uint8_t *d, const float *x, ssz m) {
    const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7); /* undo the packs' lanes */
    ssz i = wide ? colours64_512(d, x, m) : 0;
    for (; i + 32 <= m; i += 32) {
        __m256i v[4];
        __builtin_prefetch(x + i + AHEAD, 0, 3);
        __builtin_prefetch(x + i + AHEAD + 16, 0, 3);
        for (int k = 0; k < 4; k++) {
            __m256 r = _mm256_round_ps(_mm256_loadu_ps(x + i + 8 * k),
                                       _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
            v[k] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, zero), top));
        }
        __m256i packed = _mm256_packus_epi16(_mm256_packs_epi32(v[0], v[1]),
                                             _mm256_packs_epi32(v[2], v[3]));
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_permutevar8x32_epi32(packed, order));
    }
    return i;
}

/* A colour key on RGB floats side by side, 32 pixels (96 values) at a time: each value's `off
 * its bounds` made where it lies (the bounds in the three phases a vector of 8 meets them),
 * packed to bytes in order, split by channel as `fused_interleaved` splits the obs, or-ed. */
__attribute__((target("avx2"))) static ssz range_rgb32(const float *x, const float *lo,
                                                      const float *hi, uint8_t *keep, ssz m) {
    __m256 l[3], h[3];
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int p = 0; p < 3; p++) { /* vector j starts at channel 2j mod 3 */
        float a[8], b[8];
        for (int lane = 0; lane < 8; lane++) a[lane] = lo[(p + lane) % 3], b[lane] = hi[(p + lane) % 3];
        l[p] = _mm256_loadu_ps(a), h[p] = _mm256_loadu_ps(b);
    }
    ssz i = 0;
    for (; i + 32 <= m; i += 32) {
        __m256i r[3];
        for (int q = 0; q < 3; q++) { /* 32 values: 4 vectors */
            __m256i v[4];
            for (int k = 0; k < 4; k++) {
                int j = 4 * q + k, p = (2 * j) % 3;
                __m256 x8 = _mm256_loadu_ps(x + 3 * i + 8 * j);
                v[k] = _mm256_castps_si256(_mm256_or_ps(_mm256_cmp_ps(x8, l[p], _CMP_LT_OQ),
                                                        _mm256_cmp_ps(x8, h[p], _CMP_GT_OQ)));
            }
            __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]),
                                                _mm256_packs_epi32(v[2], v[3]));
            r[q] = _mm256_permutevar8x32_epi32(packed, order);
        }
        __builtin_prefetch(x + 3 * (i + AHEAD), 0, 3);
        __m256i c[3];
        split96(r[0], r[1], r[2], c);
        __m256i off = _mm256_or_si256(_mm256_or_si256(c[0], c[1]), c[2]);
        _mm256_storeu_si256((__m256i *)(keep + i), _mm256_and_si256(off, _mm256_set1_epi8(1)));
    }
    return i;
}
#else
#define X86 0
static int avx2, wide, wide_cpu;
static void shuffles(void) {}
static ssz range_rgb32(const float *x, const float *lo, const float *hi, uint8_t *keep, ssz m) {
    return 0;
}
static ssz colours32(uint8_t *d, const float *x, ssz m) { return 0; }
static ssz interleave3(uint8_t *d, const uint8_t *a, const uint8_t *b, const uint8_t *c, ssz n) {
    return 0;
}
static ssz deinterleave3(uint8_t *a, uint8_t *b, uint8_t *c, const uint8_t *s, ssz n) { return 0; }
static ssz select3(const Job *j, uint8_t *d, const uint8_t *o, const uint8_t *const *t,
                   const uint8_t *m8, ssz n) {
    return 0;
}
static ssz select_row(uint8_t *d, const uint8_t *o, const uint8_t *b, const uint8_t *m8, ssz n,
                      int stream) {
    return 0;
}
static ssz depth_512(const float *x, float far, uint8_t *keep, ssz m) {
    return 0;
}
static ssz select_row_f32(float *d, const float *o, const uint8_t *b, const uint8_t *m8, ssz n,
                          int stream) {
    return 0;
}
#endif

/* dst[i * k + f] = the K planes' values at i (a frame's planes interleaved by pixel); a
 * constant K is a fixed group of stores, which the compiler vectorises. */
#define SPREAD(K)                                                                               \
    for (ssz i = 0; i < m; i++)                                                                 \
        for (int f = 0; f < K; f++) dst[i * K + f] = src[f][i]
WIDE static void spread_u8(uint8_t *restrict dst, const uint8_t *const *src, ssz k, ssz m) {
    ssz done = k == 3 && avx2 ? interleave3(dst, src[0], src[1], src[2], m) : 0;
    if (done) {
        const uint8_t *rest[3] = {src[0] + done, src[1] + done, src[2] + done};
        spread_u8(dst + 3 * done, rest, k, m - done);
        return;
    }
    switch (k) {
    case 2: SPREAD(2); break;
    case 3: SPREAD(3); break;
    case 4: SPREAD(4); break;
    default:
        for (ssz i = 0; i < m; i++)
            for (ssz f = 0; f < k; f++) dst[i * k + f] = src[f][i];
    }
}

/* dst[i * k + f] = src[i]: one value per pixel repeated for each of its k frames. */
#define REPEAT(T, K)                                                                            \
    for (ssz i = 0; i < m; i++)                                                                 \
        for (int f = 0; f < K; f++) ((T *)dst)[i * K + f] = ((const T *)src)[i]
#define REPEATS(T)                                                                              \
    switch (k) {                                                                                \
    case 2: REPEAT(T, 2); break;                                                                \
    case 3: REPEAT(T, 3); break;                                                                \
    case 4: REPEAT(T, 4); break;                                                                \
    default:                                                                                    \
        for (ssz i = 0; i < m; i++)                                                             \
            for (ssz f = 0; f < k; f++) ((T *)dst)[i * k + f] = ((const T *)src)[i];            \
    }
WIDE static void repeat(void *restrict dst, const void *restrict src, ssz size, ssz k, ssz m) {
    ssz done = size == 1 && k == 3 && avx2 ? interleave3(dst, src, src, src, m) : 0;
    dst = (char *)dst + 3 * done, src = (const char *)src + done, m -= done;
    if (size == 1) { REPEATS(uint8_t) }
    else if (size == 2) { REPEATS(uint16_t) }
    else if (size == 4) { REPEATS(uint32_t) }
    else { REPEATS(uint64_t) }
}

/* dst[i] = src[i * step] for values of `size` bytes (a strided read made contiguous). */
#define GATHER(T) for (ssz i = 0; i < m; i++) ((T *)dst)[i] = ((const T *)src)[i * step]
static void gather(void *restrict dst, const void *restrict src, ssz size, ssz step, ssz m) {
    if (size == 1)
        GATHER(uint8_t);
    else if (size == 2)
        GATHER(uint16_t);
    else if (size == 4)
        GATHER(uint32_t);
    else
        GATHER(uint64_t);
}

/* Three channel planes from values a group of `step` apart (channels-last pixels). */
#define SPLIT(T, S)                                                                             \
    for (ssz i = 0; i < m; i++) {                                                               \
        r[i] = src[i * S];                                                                      \
        g[i] = src[i * S + 1];                                                                  \
        b[i] = src[i * S + 2];                                                                  \
    }
WIDE static void split_u8(uint8_t *restrict r, uint8_t *restrict g, uint8_t *restrict b,
                          const uint8_t *restrict src, ssz step, ssz m) {
    ssz done = step == 3 && avx2 ? deinterleave3(r, g, b, src, m) : 0;
    r += done, g += done, b += done, src += 3 * done, m -= done;
    if (step == 3) { SPLIT(uint8_t, 3) }
    else if (step == 4) { SPLIT(uint8_t, 4) }
    else { SPLIT(uint8_t, step) }
}
WIDE static void split_f32(float *restrict r, float *restrict g, float *restrict b,
                           const float *restrict src, ssz step, ssz m) {
    if (step == 3) { SPLIT(float, 3) }
    else if (step == 4) { SPLIT(float, 4) }
    else { SPLIT(float, step) }
}

/* -- keys: the keep mask made from the pixel, its id or its depth --------------------------- */

/* The keys' loops are written with the compiler's vector types where its vectoriser widened
 * 8- and 16-bit lanes to 32 bits (4x fewer a vector): lane by lane the same operations as the
 * scalar loop after each, which does the rest (and all, without vector types). */
#if defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 9)
#define VECTORS 1
typedef uint8_t u8x32 __attribute__((vector_size(32)));
typedef int8_t i8x32 __attribute__((vector_size(32)));
typedef int16_t i16x16 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));
typedef uint8_t u8x8 __attribute__((vector_size(8)));
/* 64 bytes: one register where AVX-512 is (the maps' keys narrow their lanes to bytes in one
 * instruction there), two where AVX2 is */
typedef int16_t i16x32 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint8_t u8x4 __attribute__((vector_size(4)));
#else
#define VECTORS 0
#endif

/* A float colour as the uint8 the builders read it as: rounded half to even, clamped (NaN 0). */
WIDE static void colours(uint8_t *restrict d, const float *restrict x, ssz m) {
    for (ssz i = avx2 ? colours32(d, x, m) : 0; i < m; i++) {
        float v = nearbyintf(x[i]);
        d[i] = v >= 255.0f ? 255 : v > 0.0f ? (uint8_t)v : 0;
    }
}

/* The uint8 colours (as `colours` reads them) of m pixels of channels side by side, `step`
 * apart, into three planes: the split and the rounding in one loop. */
#define ROUNDED(x) (nearbyintf(x) >= 255.0f ? 255 : nearbyintf(x) > 0.0f ? (uint8_t)nearbyintf(x) : 0)
#define SPLIT_ROUND(S)                                                                          \
    for (ssz i = 0; i < m; i++) {                                                               \
        r[i] = (uint8_t)ROUNDED(src[i * S]);                                                    \
        g[i] = (uint8_t)ROUNDED(src[i * S + 1]);                                                \
        b[i] = (uint8_t)ROUNDED(src[i * S + 2]);                                                \
    }
WIDE static void split_colours(uint8_t *restrict r, uint8_t *restrict g, uint8_t *restrict b,
                               const float *restrict src, ssz step, ssz m) {
    if (step == 3 && avx2) { /* rounded as they lie (a loop that vectorises), then split */
        uint8_t tmp[3 * 256];
        for (ssz i = 0; i < m; i += 256) {
            ssz c = m - i < 256 ? m - i : 256, done;
            colours(tmp, src + 3 * i, 3 * c);
            done = deinterleave3(r + i, g + i, b + i, tmp, c);
            for (; done < c; done++)
                r[i + done] = tmp[3 * done], g[i + done] = tmp[3 * done + 1], b[i + done] = tmp[3 * done + 2];
        }
    }
    else if (step == 3) { SPLIT_ROUND(3) }
    else if (step == 4) { SPLIT_ROUND(4) }
    else { SPLIT_ROUND(step) }
}

/* DMC-GB's green screen on uint8 colours, as `greenscreen._maybe_replaced` states it exactly in
 * integers: keep[i] = 0 where the rule replaces the colour. Off its bounds the float64 rule
 * DMC-GB evaluates agrees with this one (greenscreen.py says why); on a bound (hue, saturation
 * or value exactly on one) rounding decides, so fix[i] = 1 sends the colour to the rule itself.
 *
 * The hue is 60 * X / span degrees, X = (b - g) (+ 6 span) from red, 2 span + (b - r) from
 * green, 4 span + (r - g) from blue; a bound `hue >= lo` is `60 X >= lo span`, both sides
 * divided by gcd(60, lo) (and the saturation's `255 span >= lo top` by gcd(255, lo)). Where
 * every side then fits in 16 bits (DMC-GB's bounds do) the loop runs on 16-bit lanes, twice as
 * many a vector as 32-bit ones; `bounds[7..]` hold those factors (k[7] = 0: they do not fit). */
#define GREEN(T)                                                                                \
    for (ssz i = 0; i < m; i++) {                                                               \
        T R = r[i], G = g[i], B = b[i];                                                         \
        T top = R > G ? (R > B ? R : B) : (G > B ? G : B);                                      \
        T low = R < G ? (R < B ? R : B) : (G < B ? G : B);                                      \
        T span = (T)(top - low);                                                                \
        T x = R == top ? (T)(B - G + (B < G ? 6 * span : 0))                                    \
                       : G == top ? (T)(2 * span + B - R) : (T)(4 * span + R - G);              \
        T h0 = (T)(a0 * x), s0 = (T)(b0 * span), h1 = (T)(a1 * x), s1 = (T)(b1 * span);         \
        T c0 = (T)(e0 * span), t0 = (T)(f0 * top), c1 = (T)(e1 * span), t1 = (T)(f1 * top);     \
        int coloured = (span > 0) & (h0 >= s0) & (h1 <= s1) & (c0 >= t0) & (c1 <= t1);          \
        int maybe = (coloured | ((span == 0) & grey_in)) & (top >= vlo) & (top <= vhi);         \
        int bound = ((span > 0) & ((h0 == s0) | (h1 == s1) | ((c0 == t0) & inexact(k[2])) |     \
                                   ((c1 == t1) & inexact(k[3])))) |                             \
                    ((top == vlo) & inexact(k[4])) | ((top == vhi) & inexact(k[5]));            \
        keep[i] = (uint8_t)!maybe;                                                              \
        fix[i] = (uint8_t)(maybe & bound);                                                      \
    }
/* DMC-GB's rule itself on a colour marked in fix (rare: 0.3% of a green-screen scene's), in
 * `greenscreen.replaced`'s float64 steps and order (this module is built without contracting
 * a multiply and an add, so each step rounds as Python's and torch's do): 1 = kept. */
static int green_rule(int red, int green_, int blue, const int *k) {
    double r = red / 255.0, g = green_ / 255.0, b = blue / 255.0;
    double top = r > g ? (r > b ? r : b) : (g > b ? g : b);
    double low = r < g ? (r < b ? r : b) : (g < b ? g : b);
    double span = top - low, hue = 0.0, sat = 0.0;
    if (span != 0.0) {
        double rc = (top - r) / span, gc = (top - g) / span, bc = (top - b) / span;
        hue = r == top ? bc - gc : g == top ? (2.0 + rc) - bc : (4.0 + gc) - rc;
        hue = hue / 6.0;
        hue = hue - floor(hue); /* Python's % 1.0 (torch.remainder): the divisor's sign */
        sat = span / top;
    }
    hue = hue * 360, sat = sat * 255;
    double val = top * 255;
    return !(hue >= k[0] && hue <= k[1] && sat >= k[2] && sat <= k[3] && val >= k[4] &&
             val <= k[5]);
}

static void green_fix(const uint8_t *r, const uint8_t *g, const uint8_t *b, const int *k,
                      uint8_t *keep, const uint8_t *fix, ssz m) {
    for (ssz i0 = 0; i0 < m; i0 += 8) {
        uint64_t word = 0;
        if (m - i0 >= 8)
            memcpy(&word, fix + i0, 8);
        else
            for (ssz i = m - 1; i >= i0; i--) word = word << 8 | fix[i];
        for (ssz i = i0; word != 0; i++, word >>= 8)
            if (word & 0xff) keep[i] = (uint8_t)green_rule(r[i], g[i], b[i], k);
    }
}

/* Whether a saturation or value bound (on 0..255) can fall either way in DMC-GB's float64
 * steps: at 0 and 255 they are exact (x / x, 0 / x, 255 / 255 * 255): no check needed. */
static inline int inexact(int bound) { return bound != 0 && bound != 255; }

#if VECTORS
#define VMAX(a, b) ((a) ^ (((a) ^ (b)) & ((b) > (a))))
#define VMIN(a, b) ((a) ^ (((a) ^ (b)) & ((b) < (a))))
#define PICK(m, a, b) (((a) & (m)) | ((b) & ~(m)))
/* GREEN(int16_t) on 16 pixels at a time, written as vectors: the compiler left 16-bit lanes
 * at 32 bits. The same operations, lane by lane. */
WIDE static ssz green16(const uint8_t *r, const uint8_t *g, const uint8_t *b, const int *k,
                        uint8_t *keep, uint8_t *fix, ssz m) {
    i16x16 zero = {0}, one = zero + 1, six = zero + 6, two = zero + 2, four = zero + 4;
    i16x16 a0 = zero + (int16_t)k[8], b0 = zero + (int16_t)k[9], a1 = zero + (int16_t)k[10], b1 = zero + (int16_t)k[11];
    i16x16 e0 = zero + (int16_t)k[12], f0 = zero + (int16_t)k[13], e1 = zero + (int16_t)k[14], f1 = zero + (int16_t)k[15];
    i16x16 vlo = zero + (int16_t)k[4], vhi = zero + (int16_t)k[5], grey_in = zero - (int16_t)k[6];
    i16x16 sx0 = zero - (int16_t)inexact(k[2]), sx1 = zero - (int16_t)inexact(k[3]);
    i16x16 vx0 = zero - (int16_t)inexact(k[4]), vx1 = zero - (int16_t)inexact(k[5]);
    ssz i = 0;
    for (; i + 16 <= m; i += 16) {
        u8x16 r8, g8, b8;
        memcpy(&r8, r + i, 16), memcpy(&g8, g + i, 16), memcpy(&b8, b + i, 16);
        i16x16 R = __builtin_convertvector(r8, i16x16), G = __builtin_convertvector(g8, i16x16);
        i16x16 B = __builtin_convertvector(b8, i16x16);
        i16x16 top = VMAX(VMAX(R, G), B), span = top - VMIN(VMIN(R, G), B);
        i16x16 from_r = B - G + (six * span & (B < G)), from_g = two * span + B - R;
        i16x16 x = PICK(R == top, from_r, PICK(G == top, from_g, four * span + R - G));
        i16x16 h0 = a0 * x, s0 = b0 * span, h1 = a1 * x, s1 = b1 * span;
        i16x16 c0 = e0 * span, t0 = f0 * top, c1 = e1 * span, t1 = f1 * top;
        i16x16 some = span > zero;
        i16x16 coloured = some & (h0 >= s0) & (h1 <= s1) & (c0 >= t0) & (c1 <= t1);
        i16x16 maybe = (coloured | (~some & grey_in)) & (top >= vlo) & (top <= vhi);
        i16x16 bound = (some & ((h0 == s0) | (h1 == s1) | ((c0 == t0) & sx0) | ((c1 == t1) & sx1))) |
                       ((top == vlo) & vx0) | ((top == vhi) & vx1);
        u8x16 kept = __builtin_convertvector(~maybe & one, u8x16);
        u8x16 fixed = __builtin_convertvector(maybe & bound & one, u8x16);
        memcpy(keep + i, &kept, 16), memcpy(fix + i, &fixed, 16);
    }
    return i;
}
#else
static ssz green16(const uint8_t *r, const uint8_t *g, const uint8_t *b, const int *k,
                   uint8_t *keep, uint8_t *fix, ssz m) {
    return 0; /* (the loop below does them all) */
}
#endif

#if X86
#define DMCGB_AVX2 1
/* DMC-GB's bounds (h 100-185, s 80-255, v 70-255) with AVX2 on 32 pixels at a time, in
 * bytes. For them the rule is: green the largest channel (after red) and 3 (r - b) <= span
 * (hue >= 100), or blue the largest and 12 (g - r) >= 11 span (hue <= 185), red largest never;
 * 51 span >= 16 max (s >= 80), max >= 70; the other bounds always hold there. Each test is made
 * exact in unsigned bytes with saturating adds (a saturated side only ever exceeds the other
 * where the exact one does too): 3 (r - b) as u + u + u; 12 v >= 11 span (v = g - r) as
 * v >= 11 (span - v); 16 max <= 51 span as max - 3 span <= (3 span) >> 4 (whole sixteenths).
 * Where rounding decides (those four tests equal; v 255 and s 255 are exact) the rule itself
 * decides. */

/* The keys' byte ops at a width W (256: AVX2, 32 bytes; 512: AVX-512 BW, 64), so that each
 * key is written once: X(op) the intrinsic, SI(op) the whole-register one, EQ a byte compare
 * (0xff: equal), BITS each byte's top bit, LE unsigned a <= b, SATS a saturating add. */
#define X256(op) _mm256_##op
#define SI256(op) _mm256_##op##_si256
#define EQ256(a, b) _mm256_cmpeq_epi8(a, b)
#define BITS256(x) (uint64_t)(uint32_t)_mm256_movemask_epi8(x)
#define X512(op) _mm512_##op
#define SI512(op) _mm512_##op##_si512
#define EQ512(a, b) _mm512_movm_epi8(_mm512_cmpeq_epi8_mask(a, b))
#define BITS512(x) (uint64_t)_mm512_movepi8_mask(x)
#define LE_(W, a, b) EQ##W(X##W(max_epu8)(a, b), b)
#define SATS_(W, a, b) X##W(adds_epu8)(a, b)

/* The keep mask (0xff: kept) of W / 8 colours under DMC-GB's bounds, the rule itself on the
 * rare ones where rounding decides. */
#define GREEN_VEC(W, V, ATTR)                                                                   \
    ATTR __attribute__((always_inline)) static inline V green_vec##W(V R, V G, V B, const int *k) { \
        const V v70 = X##W(set1_epi8)(70), low4 = X##W(set1_epi8)(15);                         \
        const V zero = SI##W(setzero)(), all = X##W(set1_epi8)(-1);                             \
        V top = X##W(max_epu8)(X##W(max_epu8)(R, G), B);                                        \
        V span = X##W(sub_epi8)(top, X##W(min_epu8)(X##W(min_epu8)(R, G), B));                  \
        V rtop = EQ##W(R, top);                                                                 \
        V gtop = SI##W(andnot)(rtop, EQ##W(G, top));                                            \
        V btop = SI##W(andnot)(SI##W(or)(rtop, gtop), EQ##W(B, top));                          \
        V u = X##W(subs_epu8)(R, B), u3 = SATS_(W, SATS_(W, u, u), u);                          \
        V v = X##W(subs_epu8)(G, R), w = X##W(sub_epi8)(span, v);                               \
        V w2 = SATS_(W, w, w), w4 = SATS_(W, w2, w2);                                           \
        V w11 = SATS_(W, SATS_(W, SATS_(W, w4, w4), w2), w);                                    \
        V s3 = SATS_(W, SATS_(W, span, span), span), over = X##W(subs_epu8)(top, s3);           \
        V sixteenths = SI##W(and)(X##W(srli_epi16)(s3, 4), low4);                              \
        V hue = SI##W(or)(SI##W(and)(gtop, LE_(W, u3, span)), SI##W(and)(btop, LE_(W, w11, v))); \
        V maybe = SI##W(and)(SI##W(and)(hue, LE_(W, over, sixteenths)), LE_(W, v70, top));      \
        V whole = EQ##W(SI##W(and)(s3, low4), zero);                                            \
        V bound = SI##W(or)(                                                                    \
            SI##W(or)(SI##W(and)(gtop, EQ##W(u3, span)), SI##W(and)(btop, EQ##W(w11, v))),      \
            SI##W(or)(SI##W(and)(EQ##W(over, sixteenths), whole), EQ##W(top, v70)));           \
        V keep = SI##W(xor)(maybe, all);                                                        \
        uint64_t rare = BITS##W(SI##W(and)(maybe, bound));                                      \
        if (rare) { /* the rule itself where rounding decides */                                \
            uint8_t r[W / 8], g[W / 8], b[W / 8], kept[W / 8];                                  \
            SI##W(storeu)((void *)r, R), SI##W(storeu)((void *)g, G);                           \
            SI##W(storeu)((void *)b, B), SI##W(storeu)((void *)kept, keep);                     \
            for (; rare; rare &= rare - 1) {                                                    \
                int at = __builtin_ctzll(rare);                                                 \
                kept[at] = green_rule(r[at], g[at], b[at], k) ? 0xff : 0;                       \
            }                                                                                   \
            keep = SI##W(loadu)((const void *)kept);                                            \
        }                                                                                       \
        return keep;                                                                            \
    }

/* The keep mask (0xff: kept) of W / 8 colours under a colour key: off [lo, hi] in a channel,
 * as one unsigned compare each: (v - lo) <= hi - lo. */
#define RANGE_VEC(W, V, ATTR)                                                                   \
    ATTR __attribute__((always_inline)) static inline V range_vec##W(V R, V G, V B, const int *lo, \
                                                                      const int *hi) {          \
        V x[3] = {R, G, B}, in = X##W(set1_epi8)(-1);                                           \
        for (int c = 0; c < 3; c++)                                                             \
            in = SI##W(and)(in, LE_(W, X##W(sub_epi8)(x[c], X##W(set1_epi8)((char)lo[c])),       \
                                    X##W(set1_epi8)((char)(hi[c] - lo[c]))));                   \
        return SI##W(xor)(in, X##W(set1_epi8)(-1));                                             \
    }

/* The keep mask of a colour key (the green screen or a range) on W / 8 colours. */
#define KEY_VEC(W, V, ATTR)                                                                     \
    GREEN_VEC(W, V, ATTR)                                                                       \
    RANGE_VEC(W, V, ATTR)                                                                       \
    ATTR __attribute__((always_inline)) static inline V key_vec##W(const Job *j, V R, V G, V B) { \
        return j->p[P_KEY] == KEY_GREEN ? green_vec##W(R, G, B, j->bounds)                      \
                                        : range_vec##W(R, G, B, j->lo8, j->hi8);                \
    }
KEY_VEC(256, __m256i, __attribute__((target("avx2"))))
KEY_VEC(512, __m512i, AVX512)
#define green_vec green_vec256
#define key_vec key_vec256

__attribute__((target("avx2"))) static ssz green_dmcgb(const uint8_t *r, const uint8_t *g,
                                                      const uint8_t *b, const int *k,
                                                      uint8_t *keep, ssz m) {
    const __m256i ones = _mm256_set1_epi8(1);
    ssz i = 0;
    for (; i + 32 <= m; i += 32) {
        _mm_prefetch((const char *)(r + i + AHEAD), _MM_HINT_T0);
        _mm_prefetch((const char *)(g + i + AHEAD), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + i + AHEAD), _MM_HINT_T0);
        __m256i kept = green_vec(_mm256_loadu_si256((const __m256i *)(r + i)),
                                 _mm256_loadu_si256((const __m256i *)(g + i)),
                                 _mm256_loadu_si256((const __m256i *)(b + i)), k);
        _mm256_storeu_si256((__m256i *)(keep + i), _mm256_and_si256(kept, ones));
    }
    return i;
}

/* Fused, channels-first uint8: 32 pixels at a time (64 with AVX-512), the key made from the
 * obs's three planes and the select made with it, in one loop (no keep row). Returns the
 * pixels it did. */
AVX512 static ssz fused_planar_512(const Job *job, uint8_t *const *d, const uint8_t *const *o,
                                   const uint8_t *const *b, ssz m) {
    const Job j = *job; /* (copied, as `fused_interleaved_512` does) */
    const uint8_t *oc[3] = {o[0], o[1], o[2]}, *bc[3] = {b[0], b[1], b[2]};
    uint8_t *dc[3] = {d[0], d[1], d[2]};
    ssz i = 0;
    for (; i + 64 <= m; i += 64) {
        __m512i x[3];
        for (int c = 0; c < 3; c++) {
            _mm_prefetch((const char *)(oc[c] + i + AHEAD), _MM_HINT_T0);
            x[c] = _mm512_loadu_si512(oc[c] + i);
        }
        __mmask64 keep = _mm512_movepi8_mask(key_vec512(&j, x[0], x[1], x[2]));
        for (int c = 0; c < 3; c++)
            store64(dc[c] + i, _mm512_mask_blend_epi8(keep, _mm512_loadu_si512(bc[c] + i), x[c]),
                    j.stream);
    }
    return i;
}

__attribute__((target("avx2"))) static ssz fused_planar(const Job *j, uint8_t *const *d,
                                                       const uint8_t *const *o,
                                                       const uint8_t *const *b, ssz m) {
    ssz i = wide ? fused_planar_512(j, d, o, b, m) : 0;
    int stream[3];
    for (int c = 0; c < 3; c++) stream[c] = j->stream && ((uintptr_t)d[c] & 15) == 0;
    for (; i + 32 <= m; i += 32) {
        __m256i x[3];
        for (int c = 0; c < 3; c++) {
            _mm_prefetch((const char *)(o[c] + i + AHEAD), _MM_HINT_T0);
            x[c] = _mm256_loadu_si256((const __m256i *)(o[c] + i));
        }
        __m256i keep = key_vec(j, x[0], x[1], x[2]);
        for (int c = 0; c < 3; c++) {
            __m256i bg = _mm256_loadu_si256((const __m256i *)(b[c] + i));
            store_out(d[c] + i, _mm256_blendv_epi8(bg, x[c], keep), stream[c]);
        }
    }
    return i;
}

/* Fused, channels-first uint8 with a depth (float32) or ids (int16, int32; a few) key, at
 * alpha 1, with AVX-512: 64 pixels at a time, the keep bits made from the map in registers
 * (0 < depth < far, as `depth_keep`; an id listed, xor invert, as `ids_keep`: an id the dtype
 * cannot hold matches nothing) and each channel's select streamed out in the same loop. */
AVX512 static ssz fused_planar_map(const Job *j, uint8_t *const *d, const uint8_t *const *o,
                                   const uint8_t *const *b, const void *map, ssz m) {
    int type = (int)j->p[P_KEY_TYPE], depth = j->p[P_KEY] == KEY_DEPTH, count = 0;
    uint64_t invert = !depth && j->p[P_INVERT] ? ~(uint64_t)0 : 0;
    __m512i id[8];
    for (ssz q = 0; q < j->p[P_IDS] && !depth; q++) {
        int64_t v = j->ids[q];
        if (type == T_I16 ? v < -32768 || v > 32767 : v < INT32_MIN || v > INT32_MAX) continue;
        id[count++] = type == T_I16 ? _mm512_set1_epi16((short)v) : _mm512_set1_epi32((int)v);
    }
    const __m512 far = _mm512_set1_ps(depth ? (float)j->values[0] : 0);
    const uint8_t *oc[3] = {o[0], o[1], o[2]}, *bc[3] = {b[0], b[1], b[2]};
    uint8_t *dc[3] = {d[0], d[1], d[2]};
    const char *x = map;
    ssz size = TYPE_SIZE[type], i = 0;
    int stream = j->stream;
    for (; i + 64 <= m; i += 64) {
        uint64_t keep = 0;
        for (ssz line = 0; line < size; line++) /* (64 values: `size` lines) */
            _mm_prefetch(x + (i + AHEAD) * size + 64 * line, _MM_HINT_T0);
        if (depth) {
            keep = depth_bits((const float *)x + i, far);
        } else if (type == T_I16) {
            for (int k = 0; k < 2; k++) {
                __m512i v = _mm512_loadu_si512(x + (i + 32 * k) * 2);
                uint64_t hit = 0;
                for (int q = 0; q < count; q++) hit |= _mm512_cmpeq_epi16_mask(v, id[q]);
                keep |= hit << (32 * k);
            }
        } else {
            for (int k = 0; k < 4; k++) {
                __m512i v = _mm512_loadu_si512(x + (i + 16 * k) * 4);
                uint64_t hit = 0;
                for (int q = 0; q < count; q++) hit |= _mm512_cmpeq_epi32_mask(v, id[q]);
                keep |= hit << (16 * k);
            }
        }
        keep ^= invert;
        for (int c = 0; c < 3; c++) {
            _mm_prefetch((const char *)(oc[c] + i + AHEAD), _MM_HINT_T0);
            __m512i v = _mm512_mask_blend_epi8(keep, _mm512_loadu_si512(bc[c] + i),
                                               _mm512_loadu_si512(oc[c] + i));
            store64(dc[c] + i, v, stream);
        }
    }
    return i;
}

/* 8 float colours as the uint8 they are read as (`colours`): rounded half to even, clamped
 * to 0..255 (maxps gives its second operand, 0, for a NaN), in the low 8 bytes. */
__attribute__((target("avx2"), always_inline)) static inline __m256i u8_of(__m256 x) {
    __m256 r = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
    return _mm256_cvttps_epi32(r);
}

/* 32 float colours of a plane as 32 bytes, in order. */
__attribute__((target("avx2"), always_inline)) static inline __m256i bytes_of(const float *x) {
    __m256i a = u8_of(_mm256_loadu_ps(x)), b = u8_of(_mm256_loadu_ps(x + 8));
    __m256i c = u8_of(_mm256_loadu_ps(x + 16)), d = u8_of(_mm256_loadu_ps(x + 24));
    __m256i ab = _mm256_packus_epi32(a, b), cd = _mm256_packus_epi32(c, d); /* per 128 bits */
    __m256i abcd = _mm256_packus_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Fused, channels-first float32 at alpha 1: the key from the colours the obs round to, then
 * the torch path's lerp with the keep weight 0 or 1 (`lerp(bg, obs, keep)`: the vector lerp at
 * w = 0 and 1 is fma(0, obs - bg, bg or obs), kept here op for op). 32 pixels at a time. */
__attribute__((target("avx2,fma"))) static ssz fused_planar_f32(const Job *j, float *const *d,
                                                                const float *const *o,
                                                                const uint8_t *const *b, ssz m) {
    ssz i = 0;
    const __m256 zero = _mm256_setzero_ps();
    for (; i + 32 <= m; i += 32) {
        for (int c = 0; c < 3; c++) _mm_prefetch((const char *)(o[c] + i) + 4 * AHEAD, _MM_HINT_T0);
        __m256i keep = key_vec(j, bytes_of(o[0] + i), bytes_of(o[1] + i), bytes_of(o[2] + i));
        for (int q = 0; q < 4; q++) { /* 8 pixels: their keep bytes widened to lanes */
            __m256i kq = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const char *)&keep + 8 * q)));
            __m256 mask = _mm256_castsi256_ps(kq);
            for (int c = 0; c < 3; c++) {
                __m256 ov = _mm256_loadu_ps(o[c] + i + 8 * q);
                __m256i b8 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b[c] + i + 8 * q)));
                __m256 bv = _mm256_cvtepi32_ps(b8);
                __m256 base = _mm256_blendv_ps(bv, ov, mask);
                _mm256_storeu_ps(d[c] + i + 8 * q, _mm256_fmadd_ps(zero, _mm256_sub_ps(ov, bv), base));
            }
        }
    }
    return i;
}

/* fused_interleaved (below) with AVX-512's byte permutes, 64 pixel-frames (192 bytes) at a
 * time: the obs split and the background woven in two permutes a vector, the key made on all
 * 64. `frames3_512` weaves a 3-frame stack's background from the frame store's planes itself
 * (the frames, then the channels: 64 pixels, 576 bytes at a time), with no pass of its own to
 * lay them out by pixel-frame, and takes the keep bytes given or makes the key. The Job is
 * copied so that the key's bounds, which no store can then alias, are loaded once. */
AVX512 __attribute__((always_inline)) static inline void
fused192(const Job *j, const Perms *P, uint8_t *d, const uint8_t *o, const uint8_t *keep8,
         const __m512i *bg) {
    __m512i ob[3], x[3], keep;
    for (int k = 0; k < 3; k++) {
        __builtin_prefetch(o + 3 * AHEAD + 64 * k, 0, 3);
        ob[k] = _mm512_loadu_si512(o + 64 * k);
    }
    if (keep8 != NULL) {
        keep = _mm512_sub_epi8(_mm512_setzero_si512(), _mm512_loadu_si512(keep8));
    } else {
        split192(P, ob[0], ob[1], ob[2], x);
        keep = key_vec512(j, x[0], x[1], x[2]);
    }
    select192(P, d, ob, keep, bg, j->stream);
}

/* keep8: a byte per pixel-frame (`select3`), or NULL: the key made from the obs. */
AVX512 static ssz fused_interleaved_512(const Job *job, uint8_t *d, const uint8_t *o,
                                        const uint8_t *const *t, const uint8_t *keep8, ssz n) {
    const Job j = *job;
    const Perms P = perms512();
    ssz i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i bg[3];
        weave192(&P, _mm512_loadu_si512(t[0] + i), _mm512_loadu_si512(t[1] + i), _mm512_loadu_si512(t[2] + i), bg);
        fused192(&j, &P, d + 3 * i, o + 3 * i, keep8 ? keep8 + i : NULL, bg);
    }
    return i;
}

/* plane[3 f + c]: frame f's channel c from the span's first pixel; m pixels of 3 frames; keep8
 * (a byte per pixel-frame) or NULL: the key made from the obs. */
AVX512 static ssz frames3_512(const Job *job, uint8_t *d, const uint8_t *o,
                              const uint8_t *const *plane, const uint8_t *keep8, ssz m) {
    const Job j = *job;
    const Perms P = perms512();
    const uint8_t *at[9]; /* (copied: a store could alias the caller's) */
    memcpy(at, plane, sizeof at);
    ssz i = 0;
    for (; i + 64 <= m; i += 64) {
        for (int q = 0; q < 3; q++) { /* pixel-frames 64 q on: channel c's by weave1 */
            __m512i t[3], bg[3];
            for (int c = 0; c < 3; c++)
                t[c] = weave1(&P, q, _mm512_loadu_si512(at[c] + i), _mm512_loadu_si512(at[3 + c] + i),
                              _mm512_loadu_si512(at[6 + c] + i));
            weave192(&P, t[0], t[1], t[2], bg);
            fused192(&j, &P, d + 9 * i + 192 * q, o + 9 * i + 192 * q,
                     keep8 ? keep8 + 3 * i + 64 * q : NULL, bg);
        }
    }
    return i;
}

/* Fused, channels-last uint8 RGB: 32 pixel-frames (96 bytes) at a time, the obs split into its
 * channels in registers, the key made, the background's channels (by pixel-frame) interleaved
 * and the select made. Returns the pixel-frames it did. */
__attribute__((target("avx2"))) static ssz fused_interleaved(const Job *j, uint8_t *d,
                                                            const uint8_t *o,
                                                            const uint8_t *const *t, ssz n) {
    ssz i = wide ? fused_interleaved_512(j, d, o, t, NULL, n) : 0;
    int stream = j->stream && ((uintptr_t)d & 15) == 0;
    for (; i + 32 <= n; i += 32) {
        __builtin_prefetch(o + 3 * (i + AHEAD), 0, 3);
        __builtin_prefetch(o + 3 * (i + AHEAD) + 64, 0, 3);
        __m256i r0 = _mm256_loadu_si256((const __m256i *)(o + 3 * i));
        __m256i r1 = _mm256_loadu_si256((const __m256i *)(o + 3 * i + 32));
        __m256i r2 = _mm256_loadu_si256((const __m256i *)(o + 3 * i + 64)), x[3], y[3], w[3];
        split96(r0, r1, r2, x);
        __m256i keep = key_vec(j, x[0], x[1], x[2]);
        __m256i bgs[3] = {_mm256_loadu_si256((const __m256i *)(t[0] + i)),
                          _mm256_loadu_si256((const __m256i *)(t[1] + i)),
                          _mm256_loadu_si256((const __m256i *)(t[2] + i))};
        for (int k = 0; k < 3; k++) {
            y[k] = _mm256_or_si256(_mm256_or_si256(SH(bgs[0], SHUF[k][0]), SH(bgs[1], SHUF[k][1])),
                                   SH(bgs[2], SHUF[k][2]));
            w[k] = SH(keep, ONE[k]);
        }
        __m256i bg[3] = {_mm256_permute2x128_si256(y[0], y[1], 0x20),
                         _mm256_permute2x128_si256(y[2], y[0], 0x30),
                         _mm256_permute2x128_si256(y[1], y[2], 0x31)};
        __m256i mk[3] = {_mm256_permute2x128_si256(w[0], w[1], 0x20),
                         _mm256_permute2x128_si256(w[2], w[0], 0x30),
                         _mm256_permute2x128_si256(w[1], w[2], 0x31)};
        __m256i ob[3] = {r0, r1, r2};
        for (int k = 0; k < 3; k++)
            store_out(d + 3 * i + 32 * k, _mm256_blendv_epi8(bg[k], ob[k], mk[k]), stream);
    }
    return i;
}
#endif

#ifndef DMCGB_AVX2 /* (without AVX2 the fused loops never run: `prepare` leaves them off) */
static ssz fused_planar(const Job *j, uint8_t *const *d, const uint8_t *const *o,
                        const uint8_t *const *b, ssz m) {
    return 0;
}
static ssz fused_planar_f32(const Job *j, float *const *d, const float *const *o,
                            const uint8_t *const *b, ssz m) {
    return 0;
}
static ssz fused_planar_map(const Job *j, uint8_t *const *d, const uint8_t *const *o,
                            const uint8_t *const *b, const void *map, ssz m) {
    return 0;
}
static ssz fused_interleaved(const Job *j, uint8_t *d, const uint8_t *o, const uint8_t *const *t,
                             ssz n) {
    return 0;
}
static ssz frames3_512(const Job *j, uint8_t *d, const uint8_t *o, const uint8_t *const *plane,
                       const uint8_t *keep8, ssz m) {
    return 0;
}
#endif

WIDE static void green(const uint8_t *restrict r, const uint8_t *restrict g,
                       const uint8_t *restrict b, const int *k, uint8_t *restrict keep,
                       uint8_t *restrict fix, ssz m) {
    int vlo = k[4], vhi = k[5], grey_in = k[6];
    int a0 = 60, b0 = k[0], a1 = 60, b1 = k[1], e0 = 255, f0 = k[2], e1 = 255, f1 = k[3];
    ssz done = 0;
#ifdef DMCGB_AVX2
    int dmcgb = k[0] == 100 && k[1] == 185 && k[2] == 80 && k[3] == 255 && k[4] == 70 && k[5] == 255;
    if (avx2 && dmcgb) done = green_dmcgb(r, g, b, k, keep, m);
#endif
    r += done, g += done, b += done, keep += done, fix += done, m -= done;
    done = k[7] ? green16(r, g, b, k, keep, fix, m) : 0;
    const uint8_t *r0 = r, *g0 = g, *b0_ = b;
    uint8_t *keep0 = keep, *fix0 = fix;
    ssz m0 = m;
    r += done, g += done, b += done, keep += done, fix += done, m -= done;
    GREEN(int32_t)
    green_fix(r0, g0, b0_, k, keep0, fix0, m0);
}

/* A colour key: keep where a channel lies off [lo, hi] (float64 bounds, as torch compares:
 * for uint8 values their integer bounds, for float32 ones the nearest floats inside). */
WIDE static void range_u8(const uint8_t *restrict r, const uint8_t *restrict g,
                          const uint8_t *restrict b, const int *lo, const int *hi,
                          uint8_t *restrict keep, ssz m) {
    ssz i = 0;
    if (lo[0] > hi[0] || lo[1] > hi[1] || lo[2] > hi[2]) { /* a channel no value is inside */
        memset(keep, 1, (size_t)m);
        return;
    }
#if VECTORS /* inside [lo, hi] as one unsigned compare: (v - lo) <= hi - lo */
    u8x32 zero = {0}, l0 = zero + (uint8_t)lo[0], l1 = zero + (uint8_t)lo[1], l2 = zero + (uint8_t)lo[2];
    u8x32 w0 = zero + (uint8_t)(hi[0] - lo[0]), w1 = zero + (uint8_t)(hi[1] - lo[1]);
    u8x32 w2 = zero + (uint8_t)(hi[2] - lo[2]);
    for (; i + 32 <= m; i += 32) {
        u8x32 R, G, B;
        __builtin_prefetch(r + i + AHEAD, 0, 3);
        __builtin_prefetch(g + i + AHEAD, 0, 3);
        __builtin_prefetch(b + i + AHEAD, 0, 3);
        memcpy(&R, r + i, 32), memcpy(&G, g + i, 32), memcpy(&B, b + i, 32);
        u8x32 in = (u8x32)((R - l0) <= w0) & (u8x32)((G - l1) <= w1) & (u8x32)((B - l2) <= w2);
        u8x32 out = ~in & 1;
        memcpy(keep + i, &out, 32);
    }
#endif
    for (; i < m; i++)
        keep[i] = (uint8_t)((r[i] < lo[0]) | (r[i] > hi[0]) | (g[i] < lo[1]) | (g[i] > hi[1]) |
                            (b[i] < lo[2]) | (b[i] > hi[2]));
}
WIDE static void range_f32(const float *restrict r, const float *restrict g,
                           const float *restrict b, const float *lo, const float *hi,
                           uint8_t *restrict keep, ssz m) {
    float l0 = lo[0], l1 = lo[1], l2 = lo[2], h0 = hi[0], h1 = hi[1], h2 = hi[2];
    for (ssz i = 0; i < m; i++)
        keep[i] = (uint8_t)((r[i] < l0) | (r[i] > h0) | (g[i] < l1) | (g[i] > h1) | (b[i] < l2) |
                            (b[i] > h2));
}

static int listed(int64_t id, const int64_t *ids, ssz count) {
    ssz lo = 0, hi = count;
    while (lo < hi) {
        ssz mid = (lo + hi) / 2;
        if (ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < count && ids[lo] == id;
}

/* Segmentation ids: keep[i] = whether x[i] is listed (xor invert). A few ids: one vectorised
 * pass each; many: a binary search per value (ids sorted). Ids the dtype cannot hold match
 * nothing, as in torch's comparison after type promotion. */
#define IDS(T, V, U, LANES, LO, HI)                                                             \
    do {                                                                                        \
        const T *x = src;                                                                       \
        ssz i = 0;                                                                              \
        if (count > 16) { /* many: a binary search each */                                     \
            for (; i < m; i++) keep[i] = (uint8_t)listed((int64_t)x[i], ids, count);            \
            break;                                                                              \
        }                                                                                       \
        IDS_VECTOR(T, V, U, LANES, LO, HI);                                                     \
        for (; i < m; i++) {                                                                    \
            uint8_t hit = 0;                                                                    \
            for (ssz j = 0; j < count; j++) hit |= (uint8_t)((int64_t)x[i] == ids[j]);          \
            keep[i] = hit;                                                                      \
        }                                                                                       \
    } while (0)
#if VECTORS
#define IDS_VECTOR(T, V, U, LANES, LO, HI)                                                      \
    for (; i + LANES <= m; i += LANES) {                                                        \
        V v, hit = {0};                                                                         \
        __builtin_prefetch(x + i + AHEAD, 0, 3);                                                \
        memcpy(&v, x + i, sizeof v);                                                            \
        for (ssz j = 0; j < count; j++)                                                         \
            if (ids[j] >= (LO) && ids[j] <= (HI)) hit |= (V)(v == (T)ids[j]);                   \
        U k = __builtin_convertvector(hit & 1, U);                                              \
        memcpy(keep + i, &k, LANES);                                                            \
    }
#else
#define IDS_VECTOR(T, V, U, LANES, LO, HI)
#endif

/* Segmentation ids: keep[i] = whether x[i] is listed (xor invert). A few ids: compared with
 * each; many: a binary search (ids sorted). An id the dtype cannot hold matches nothing, as in
 * torch's comparison after type promotion. */
WIDE static void ids_keep(const void *src, int type, const int64_t *ids, ssz count, int invert,
                          uint8_t *restrict keep, ssz m) {
    switch (type) {
    case T_U8: IDS(uint8_t, u8x32, u8x32, 32, 0, 255); break;
    case T_I8: IDS(int8_t, i8x32, u8x32, 32, -128, 127); break;
    case T_I16: IDS(int16_t, i16x32, u8x32, 32, -32768, 32767); break;
    case T_I32: IDS(int32_t, i32x16, u8x16, 16, INT32_MIN, INT32_MAX); break;
    default: IDS(int64_t, i64x4, u8x4, 4, INT64_MIN, INT64_MAX);
    }
    if (invert)
        for (ssz i = 0; i < m; i++) keep[i] ^= 1;
}

/* Depth: keep where above 0 (0 or less: no hit) and nearer than far (NaN and inf fail one of
 * the two), as masks.from_depth; compared in the depth's own precision (torch compares a
 * float32 tensor with a Python float as float32). */
#if VECTORS
#define DEPTHS(T, V, U, LANES)                                                                  \
    for (; i + LANES <= m; i += LANES) {                                                        \
        V v, f = {0};                                                                           \
        __builtin_prefetch(x + i + AHEAD, 0, 3);                                                \
        memcpy(&v, x + i, sizeof v);                                                            \
        f += far_t;                                                                             \
        U k = __builtin_convertvector((v > 0) & (v < f) & 1, U);                              \
        memcpy(keep + i, &k, LANES);                                                            \
    }
#else
#define DEPTHS(T, V, U, LANES)
#endif
WIDE static void depth_keep(const void *src, int type, double far, uint8_t *restrict keep,
                            ssz m) {
    ssz i = 0;
    if (type == T_F32) {
        const float *x = src;
        float far_t = (float)far;
        i = wide ? depth_512(x, far_t, keep, m) : 0;
        DEPTHS(float, f32x8, u8x8, 8)
        for (; i < m; i++) keep[i] = (uint8_t)((x[i] > 0.0f) & (x[i] < far_t));
    } else {
        const double *x = src;
        double far_t = far;
        DEPTHS(double, f64x4, u8x4, 4)
        for (; i < m; i++) keep[i] = (uint8_t)((x[i] > 0.0) & (x[i] < far_t));
    }
}

/* keep[0..m) from the colours of m pixel(-frame)s: channel planes `cs` apart, a pixel `ps`
 * apart (planar: ps 1; channels-last: cs 1, ps C). */
static void key_colours(const Job *j, const char *at, ssz cs, ssz ps, ssz m, uint8_t *keep,
                        Scratch *s) {
    ssz size = j->p[P_U8] ? 1 : 4;
    const void *r = at, *g = at + cs * size, *b = at + 2 * cs * size;
    if (ps != 1 && cs == 1 && size == 4 && j->p[P_KEY] == KEY_GREEN) { /* the colours only */
        split_colours(s->colour[0], s->colour[1], s->colour[2], r, ps, m);
        green(s->colour[0], s->colour[1], s->colour[2], j->bounds, keep, s->fix, m);
        return;
    }
    ssz done = ps == 3 && cs == 1 && size == 4 && j->p[P_KEY] == KEY_RANGE && avx2
                   ? range_rgb32(r, j->lof, j->hif, keep, m) : 0;
    at += ps * done * size, keep += done, m -= done;
    r = at, g = at + cs * size, b = at + 2 * cs * size;
    if (ps != 1 && cs == 1) { /* a pixel's channels side by side: split into planes */
        if (size == 1)
            split_u8(s->colour[0], s->colour[1], s->colour[2], r, ps, m);
        else
            split_f32(s->plane[0], s->plane[1], s->plane[2], r, ps, m);
    } else if (ps != 1) {
        for (int c = 0; c < 3; c++)
            gather(size == 1 ? (void *)s->colour[c] : (void *)s->plane[c], at + c * cs * size,
                   size, ps, m);
    }
    if (ps != 1 && size == 1) r = s->colour[0], g = s->colour[1], b = s->colour[2];
    if (ps != 1 && size == 4) r = s->plane[0], g = s->plane[1], b = s->plane[2];
    if (j->p[P_KEY] == KEY_RANGE) {
        if (size == 1)
            range_u8(r, g, b, j->lo8, j->hi8, keep, m);
        else
            range_f32(r, g, b, j->lof, j->hif, keep, m);
        return;
    }
    if (size == 4) { /* float colours: read as the uint8 they round to */
        colours(s->colour[0], r, m);
        colours(s->colour[1], g, m);
        colours(s->colour[2], b, m);
        r = s->colour[0], g = s->colour[1], b = s->colour[2];
    }
    green(r, g, b, j->bounds, keep, s->fix, m);
}

/* keep[0..m) from m contiguous values of the key's map (ids or depths). */
static void key_map(const Job *j, const void *values, ssz m, uint8_t *keep) {
    int type = (int)j->p[P_KEY_TYPE];
    if (j->p[P_KEY] == KEY_IDS)
        ids_keep(values, type, j->ids, j->p[P_IDS], (int)j->p[P_INVERT], keep, m);
    else
        depth_keep(values, type, j->values[0], keep, m);
}

/* The values of a (frame, pixel) map by pixel-frame q = i * k + f for m pixels from `at`:
 * the map itself where it lies so, else laid out in `buf` (`tmp`: scratch). */
static const void *by_pixel_frame(const char *at, ssz size, ssz fstep, ssz pstep, ssz k, ssz m,
                                  void *buf, void *tmp) {
    if ((k == 1 || fstep == 1) && pstep == k) return at;
    if (k == 1) {
        gather(buf, at, size, pstep, m);
        return buf;
    }
    if (fstep == 0) { /* one value per pixel for all its frames */
        if (pstep != 1) gather(tmp, at, size, pstep, m);
        repeat(buf, pstep == 1 ? at : tmp, size, k, m);
        return buf;
    }
#define TWO_D(T)                                                                                \
    for (ssz i = 0; i < m; i++)                                                                 \
        for (ssz f = 0; f < k; f++) ((T *)buf)[i * k + f] = ((const T *)at)[i * pstep + f * fstep]
    if (size == 1)
        TWO_D(uint8_t);
    else if (size == 2)
        TWO_D(uint16_t);
    else if (size == 4)
        TWO_D(uint32_t);
    else
        TWO_D(uint64_t);
    return buf;
}

/* -- the pass ------------------------------------------------------------------------------ */

static int frame_of(const Job *j, ssz n, ssz f, const uint8_t **bg) {
    const int64_t *p = j->p, *sb = p + P_BG;
    int64_t frame = 0;
    if (p[P_BG_COUNT]) {
        frame = j->index[n * p[P_K] + f];
        if (frame < 0 || frame >= p[P_BG_COUNT]) return 1;
    }
    *bg = j->bg + frame * sb[0] + n * sb[1] + f * sb[2];
    return 0;
}

static void row(const Job *j, void *d, ssz ds, const void *o, ssz os, const uint8_t *b, ssz bs,
                const void *w, float a, ssz len) {
    int kind = j->p[P_KEY] != KEY_NONE ? KEEP_BOOL : (int)j->p[P_KEEP], plain = (int)j->p[P_PLAIN];
    if (kind == KEEP_BOOL && plain && ds == 1 && os == 1 && bs == 1 && avx2) {
        ssz size = j->p[P_U8] ? 1 : 4; /* the select, its output streamed */
        ssz done = size == 1 ? select_row(d, o, b, w, len, j->stream)
                   : wide    ? select_row_f32(d, o, b, w, len, j->stream)
                             : 0;
        d = (char *)d + done * size, o = (const char *)o + done * size, b += done;
        w = (const uint8_t *)w + done, len -= done;
    }
    if (j->p[P_U8])
        row_u8(d, ds, o, os, b, bs, w, kind, plain, a, len);
    else
        row_f32(d, ds, o, os, b, bs, w, kind, plain, a, len);
}

/* The keep weights of frame f, channel c over pixels [px, px + m): a key made into s->keep,
 * or the mask (a pointer into it where its pixels are contiguous), or NULL. */
static const void *planar_weights(const Job *j, ssz n, ssz f, ssz c, ssz px, ssz m, Scratch *s) {
    const int64_t *p = j->p, *so = p + P_OBS, *sm = p + P_KEY_S;
    for (ssz i = 0; i < m && p[P_KEY] != KEY_NONE; i += QMAX) { /* (QMAX: the keys' scratch) */
        ssz q = m - i < QMAX ? m - i : QMAX;
        if (p[P_KEY] == KEY_GREEN || p[P_KEY] == KEY_RANGE) {
            ssz size = p[P_U8] ? 1 : 4;
            const char *at = (const char *)j->obs + (n * so[0] + f * so[1] + (px + i) * so[3]) * size;
            key_colours(j, at, so[2], so[3], q, s->keep + i, s);
        } else {
            ssz msize = TYPE_SIZE[p[P_KEY_TYPE]];
            const char *at = (const char *)j->key_src + (n * sm[0] + f * sm[1] + (px + i) * sm[2]) * msize;
            key_map(j, by_pixel_frame(at, msize, 0, sm[2], 1, q, s->plane, NULL), q, s->keep + i);
        }
    }
    if (p[P_KEY] != KEY_NONE) return s->keep;
    if (p[P_KEEP] == KEEP_NONE) return NULL;
    const int64_t *sk = p + P_KEEP_S;
    ssz wsize = p[P_KEEP] == KEEP_BOOL ? 1 : 4;
    const char *at = (const char *)j->keep + (n * sk[0] + f * sk[1] + c * sk[2] + px * sk[3]) * wsize;
    return by_pixel_frame(at, wsize, 0, sk[3], 1, m, wsize == 1 ? (void *)s->keep : (void *)s->weight, NULL);
}

/* Channel c of frame f over pixels [px, px + m) (whole lines when mirrored). */
static void planar_channel(const Job *j, ssz n, ssz f, ssz c, ssz px, ssz m, const uint8_t *bg,
                           int flip, const void *w, float a, Scratch *s) {
    const int64_t *p = j->p, *so = p + P_OBS, *sd = p + P_OUT, *sb = p + P_BG;
    ssz size = p[P_U8] ? 1 : 4, width = p[P_W];
    char *d = (char *)j->out + (n * sd[0] + f * sd[1] + c * sd[2] + px * sd[3]) * size;
    const char *o = (const char *)j->obs + (n * so[0] + f * so[1] + c * so[2] + px * so[3]) * size;
    if (c >= 3) { /* RGBA's alpha: copied */
        for (ssz i = 0; i < m && (d != o || sd[3] != so[3]); i++)
            memcpy(d + i * sd[3] * size, o + i * so[3] * size, (size_t)size);
        return;
    }
    const uint8_t *b = bg + c * sb[3] + px * sb[4];
    if (!flip) {
        row(j, d, sd[3], o, so[3], b, sb[4], w, a, m);
        return;
    }
    ssz wsize = p[P_KEEP] == KEEP_FLOAT && p[P_KEY] == KEY_NONE ? 4 : 1;
    for (ssz y = 0; y < m; y += width) { /* mirrored: each line's background reversed */
        for (ssz x = 0; x < width; x++) s->line[x] = b[(y + width - 1 - x) * sb[4]];
        const void *wy = w == NULL ? NULL : (const char *)w + y * wsize;
        row(j, d + y * sd[3] * size, sd[3], o + y * so[3] * size, so[3], s->line, 1, wy, a, width);
    }
}

/* Planar (and any other layout): frame by frame, the frame's key made over the span and then
 * each channel blended as one row (a whole plane at 84 or 128 px: long runs of memory; rows
 * cut to a few KB, the key made and used chunk by chunk, ran 1.5x slower). */
#define CHUNK SPAN
static int unit_planar(const Job *j, ssz n, ssz p0, ssz len, Scratch *s) {
    const int64_t *p = j->p, *so = p + P_OBS, *sd = p + P_OUT, *sb = p + P_BG;
    ssz width = p[P_W], step = CHUNK;
    int flip = j->flipped != NULL && j->flipped[n];
    int fused = (j->fused || j->fused_f32 || (j->fused_map && p[P_KEY_S + 2] == 1)) && !flip &&
                so[3] == 1 && sd[3] == 1 && sb[4] == 1;
    float a = j->alpha[n * p[P_ALPHA_STEP]];
    if (flip) step = width > CHUNK ? width : CHUNK - CHUNK % width;
    for (ssz f = 0; f < p[P_K]; f++) {
        const uint8_t *bg;
        if (frame_of(j, n, f, &bg)) return 1;
        ssz done = 0;
        if (fused) { /* the key and the blend in one loop; the last few pixels below */
            void *d[3];
            const void *o[3];
            const uint8_t *b[3];
            ssz size = p[P_U8] ? 1 : 4;
            for (int c = 0; c < 3; c++) {
                d[c] = (char *)j->out + (n * sd[0] + f * sd[1] + c * sd[2] + p0) * size;
                o[c] = (const char *)j->obs + (n * so[0] + f * so[1] + c * so[2] + p0) * size;
                b[c] = bg + c * sb[3] + p0;
            }
            const int64_t *sm = p + P_KEY_S;
            if (j->fused_map) {
                ssz at = (n * sm[0] + f * sm[1] + p0) * TYPE_SIZE[p[P_KEY_TYPE]];
                done = fused_planar_map(j, (uint8_t *const *)d, (const uint8_t *const *)o, b,
                                        (const char *)j->key_src + at, len);
            } else if (j->fused)
                done = fused_planar(j, (uint8_t *const *)d, (const uint8_t *const *)o, b, len);
            else
                done = fused_planar_f32(j, (float *const *)d, (const float *const *)o, b, len);
        }
        for (ssz i = done; i < len; i += step) {
            ssz m = len - i < step ? len - i : step, px = p0 + i;
            const void *w = NULL;
            for (ssz c = 0; c < p[P_C]; c++) {
                if (c == 0 || (c < 3 && p[P_KEY] == KEY_NONE && p[P_KEEP_S + 2]))
                    w = planar_weights(j, n, f, c, px, m, s);
                planar_channel(j, n, f, c, px, m, bg, flip, w, a, s);
            }
        }
    }
    return 0;
}

/* The background's three channels by pixel-frame for m pixels from pixel `px` (frames at
 * `frames[f]`), into t (or pointing into a frame store plane when k is 1). */
static void backgrounds_by_pixel_frame(const Job *j, const uint8_t **frames, ssz px, ssz m,
                                       int flip, Scratch *s, const uint8_t **t) {
    const int64_t *p = j->p, *sb = p + P_BG;
    ssz k = p[P_K], width = p[P_W], ps = sb[4];
    if (ps != 1 && sb[3] == 1 && (ps == 3 * k && sb[2] == 3)) { /* caller's channels-last imgs, */
        split_u8(s->t[0], s->t[1], s->t[2], frames[0] + px * ps, 3, m * k); /* one per frame */
    } else if (ps == 3 && sb[3] == 1 && (k == 1 || sb[2] == 0)) { /* one for all frames */
        uint8_t *dst[3] = {k == 1 ? s->t[0] : s->colour[0], k == 1 ? s->t[1] : s->colour[1],
                           k == 1 ? s->t[2] : s->colour[2]};
        split_u8(dst[0], dst[1], dst[2], frames[0] + px * ps, 3, m);
        for (int c = 0; c < 3 && k > 1; c++) repeat(s->t[c], s->colour[c], 1, k, m);
    } else {
        for (int c = 0; c < 3; c++) {
            const uint8_t *src[64];
            for (ssz f = 0; f < k && f < 64; f++) src[f] = frames[f] + c * sb[3] + px * ps;
            if (!flip && ps == 1 && k == 1) {
                t[c] = src[0]; /* the plane itself */
                continue;
            }
            if (!flip && ps == 1 && k <= 64) {
                spread_u8(s->t[c], src, k, m);
            } else { /* mirrored lines (px and m whole lines), or any other strides */
                for (ssz i = 0; i < m; i++) {
                    ssz at = flip ? (i - i % width) + width - 1 - i % width : i;
                    for (ssz f = 0; f < k; f++)
                        s->t[c][i * k + f] = frames[f][c * sb[3] + (px + at) * ps];
                }
            }
            t[c] = s->t[c];
        }
        return;
    }
    t[0] = s->t[0], t[1] = s->t[1], t[2] = s->t[2];
}

/* The keep weights by pixel-frame for m pixels from pixel px (None: NULL). */
static const void *weights_by_pixel_frame(const Job *j, ssz n, ssz px, ssz m, Scratch *s) {
    const int64_t *p = j->p, *so = p + P_OBS;
    ssz k = p[P_K], size = p[P_U8] ? 1 : 4;
    if (p[P_KEY] == KEY_GREEN || p[P_KEY] == KEY_RANGE) {
        const char *at = (const char *)j->obs + (n * so[0] + px * so[3]) * size;
        key_colours(j, at, 1, p[P_C], m * k, s->keep, s);
        return s->keep;
    }
    if (p[P_KEY] != KEY_NONE) {
        const int64_t *sm = p + P_KEY_S;
        ssz msize = TYPE_SIZE[p[P_KEY_TYPE]];
        const char *at = (const char *)j->key_src + (n * sm[0] + px * sm[2]) * msize;
        key_map(j, by_pixel_frame(at, msize, sm[1], sm[2], k, m, s->plane, s->weight), m * k, s->keep);
        return s->keep;
    }
    if (p[P_KEEP] == KEEP_NONE) return NULL;
    const int64_t *sk = p + P_KEEP_S;
    ssz wsize = p[P_KEEP] == KEEP_BOOL ? 1 : 4;
    const char *at = (const char *)j->keep + (n * sk[0] + px * sk[3]) * wsize;
    return by_pixel_frame(at, wsize, sk[1], sk[3], k, m, wsize == 1 ? (void *)s->keep : (void *)s->weight, s->plane);
}

/* Channels-last RGB, q pixel-frames: the background's channels and the weights laid out as
 * the obs's values are (3 a pixel-frame), then one contiguous row, which vectorises as the
 * planar rows do (a loop over groups of 3 mixed floats did not: 2-3x slower). */
static void flat_row(const Job *j, char *d, const char *o, const uint8_t *const *t,
                     const void *w, float a, ssz q, Scratch *s) {
    int kind = j->p[P_KEY] != KEY_NONE ? KEEP_BOOL : (int)j->p[P_KEEP];
    ssz i = avx2 ? interleave3(s->flat, t[0], t[1], t[2], q) : 0;
    for (; i < q; i++)
        s->flat[3 * i] = t[0][i], s->flat[3 * i + 1] = t[1][i], s->flat[3 * i + 2] = t[2][i];
    void *w3 = kind == KEEP_FLOAT ? (void *)s->flat_weight : (void *)s->flat_keep;
    if (w) repeat(w3, w, kind == KEEP_FLOAT ? 4 : 1, 3, q);
    row(j, d, 1, o, 1, s->flat, 1, w ? w3 : NULL, a, 3 * q);
}

/* Channels-last: pixel-frames of C channels, QMAX at a time (whole lines when mirrored). */
static int unit_interleaved(const Job *j, ssz n, ssz p0, ssz len, Scratch *s) {
    const int64_t *p = j->p, *so = p + P_OBS, *sd = p + P_OUT;
    ssz k = p[P_K], width = p[P_W], size = p[P_U8] ? 1 : 4, step = ISTEP / k;
    int flip = j->flipped != NULL && j->flipped[n], four = p[P_C] == 4;
    int kind = p[P_KEY] != KEY_NONE ? KEEP_BOOL : (int)p[P_KEEP], plain = (int)p[P_PLAIN];
    float a = j->alpha[n * p[P_ALPHA_STEP]];
    const uint8_t *frames[64];
    for (ssz f = 0; f < k; f++)
        if (frame_of(j, n, f, &frames[f])) return 1;
    /* a 3-frame stack of uint8 RGB, a select: woven straight from the frame store's planes */
    int frames3 = wide && !four && !flip && k == 3 && p[P_BG + 4] == 1 && size == 1 &&
                  (j->fused || (kind == KEEP_BOOL && plain));
    if (flip)
        step -= step % width; /* (prepare keeps width * k <= ISTEP then) */
    else if (step >= 32)
        step -= step % (step >= 64 ? 64 : 32); /* whole 64s (32s) of pixel-frames: no tail */
    if (step < 1) step = 1;          /* (never a loop that does not move) */
    for (ssz i = 0; i < len; i += step) {
        ssz m = len - i < step ? len - i : step, px = p0 + i;
        char *d = (char *)j->out + (n * sd[0] + px * sd[3]) * size;
        const char *o = (const char *)j->obs + (n * so[0] + px * so[3]) * size;
        const uint8_t *keep8 = frames3 && !j->fused ? weights_by_pixel_frame(j, n, px, m, s) : NULL;
        if (frames3 && (j->fused || keep8 != NULL)) {
            const uint8_t *plane[9];
            for (int f = 0; f < 3; f++)
                for (int c = 0; c < 3; c++) plane[3 * f + c] = frames[f] + c * p[P_BG + 3] + px;
            ssz did = frames3_512(j, (uint8_t *)d, (const uint8_t *)o, plane, keep8, m);
            if (did == m) continue;
            px += did, m -= did, d += 9 * did, o += 9 * did;
        }
        const void *w = j->fused && !four ? NULL : weights_by_pixel_frame(j, n, px, m, s);
        const uint8_t *t[3];
        backgrounds_by_pixel_frame(j, frames, px, m, flip, s, t);
        ssz q = m * k, done = 0;
        if (j->fused && !four) { /* the key and the select in one loop; the last few after */
            done = fused_interleaved(j, (uint8_t *)d, (const uint8_t *)o, t, q);
            key_colours(j, o + 3 * done, 1, 3, q - done, s->keep, s);
            w = s->keep - done;
        } else if (size == 1 && !four && kind == KEEP_BOOL && plain && avx2) /* a select */
            done = select3(j, (uint8_t *)d, (const uint8_t *)o, t, w, q);
        if (four && size == 1)
            irow_u8((uint8_t *)d, (const uint8_t *)o, t[0], t[1], t[2], w, kind, plain, a, q);
        else if (four)
            irow_f32((float *)d, (const float *)o, t[0], t[1], t[2], w, kind, plain, a, q);
        else if (done < q) {
            const uint8_t *rest[3] = {t[0] + done, t[1] + done, t[2] + done};
            const char *wr = w ? (const char *)w + done * (kind == KEEP_FLOAT ? 4 : 1) : NULL;
            flat_row(j, d + 3 * done * size, o + 3 * done * size, rest, wr, a, q - done, s);
        }
    }
    return 0;
}

/* Units taken GRAB at a time from a shared counter until none are left: a thread slowed down
 * (torch's OpenMP workers spin on the other cores for a while after each torch op, and share
 * them with ours) takes fewer, so the work ends when the fastest thread's does. Split in
 * equal fixed shares, the composite at two threads right after an `obs.clone()` took as long
 * as at one. */
#define GRAB 4

static void *run(void *arg) {
    Job *j = arg;
    Scratch *s = malloc(sizeof(Scratch)); /* off the stack */
    ssz pixels = j->p[P_H] * j->p[P_W], units = j->p[P_N] * j->spans;
    if (s == NULL) {
        j->bad = 2;
        return NULL;
    }
    for (;;) {
        ssz first = __atomic_fetch_add(j->next, GRAB, __ATOMIC_RELAXED);
        if (first >= units || __atomic_load_n(j->stop, __ATOMIC_RELAXED)) break;
        for (ssz u = first; u < first + GRAB && u < units && !j->bad; u++) {
            ssz n = u / j->spans, p0 = (u % j->spans) * j->span;
            ssz len = pixels - p0 < j->span ? pixels - p0 : j->span;
            j->bad = j->interleaved ? unit_interleaved(j, n, p0, len, s) : unit_planar(j, n, p0, len, s);
        }
        if (j->bad) __atomic_store_n(j->stop, 1, __ATOMIC_RELAXED); /* the others stop too */
    }
    free(s);
#if X86
    if (avx2) _mm_sfence(); /* the streamed stores seen before the caller's reads */
#endif
    return NULL;
}

/* The threads: OpenMP's team where the module was built with it. Built against the libgomp
 * torch loads (pip's torch ships it: the same soname, the library already loaded), it is
 * torch's own team, whose workers wait spinning after each torch op: a pass of our own
 * threads right after one (an `obs.clone()`) shared the other cores with them and ran at
 * the speed of one. A child forked from this process uses threads of its own (libgomp's team
 * is not in the child, and a parallel region there would wait for it forever). */
#ifdef _OPENMP
static int forked;
static void in_child(void) { forked = 1; }
#endif

static void run_threads(Job *job) {
    Job jobs[64];
    pthread_t ids[64];
    int started[64] = {0}, stop = 0;
    ssz units = job->p[P_N] * job->spans, next = 0;
    ssz values = job->p[P_N] * job->p[P_K] * job->p[P_C] * job->p[P_H] * job->p[P_W];
    int n = job->p[P_THREADS] < 1 ? 1 : job->p[P_THREADS] > 64 ? 64 : (int)job->p[P_THREADS];
    if (units < n) n = units ? (int)units : 1;
    if (values < (1 << 18)) n = 1; /* under a quarter million values a thread costs more */
    job->next = &next;
    job->stop = &stop;
    for (int t = 0; t < n; t++) jobs[t] = *job;
    int team = 0; /* (OpenMP's) */
#ifdef _OPENMP
    team = n > 1 && !forked;
    if (team) {
#pragma omp parallel num_threads(n)
        run(&jobs[omp_get_thread_num()]); /* (a team smaller than n: the others take its units) */
    }
#endif
    for (int t = 1; t < n && !team; t++)
        started[t] = pthread_create(&ids[t], NULL, run, &jobs[t]) == 0;
    if (!team) run(&jobs[0]); /* (a thread that could not start: the others take its units) */
    for (int t = 1; t < n; t++)
        if (started[t]) pthread_join(ids[t], NULL);
    for (int t = 0; t < n; t++)
        if (jobs[t].bad > job->bad) job->bad = jobs[t].bad;
}

/* -- arguments ------------------------------------------------------------------------------ */

/* Bytes from an element to the farthest one strides reach over these extents, plus one. */
static ssz reach(const int64_t *strides, const ssz *extents, int dims, ssz size) {
    ssz last = 0;
    for (int i = 0; i < dims; i++) {
        if (extents[i] == 0) return 0;
        last += (extents[i] - 1) * strides[i];
    }
    return (last + 1) * size;
}

/* A buffer of at least `need` bytes (writable if asked), or an exception; None is no buffer. */
/* A buffer: an object with the buffer protocol (numpy), or a tensor's memory as a tuple
 * (address, bytes, the tensor): torch's own, writable, kept alive by the tuple for the call
 * (its numpy view cost more than the pass at a few small frames). */
static int take(PyObject *obj, Py_buffer *view, ssz need, int writable, const char *name) {
    static char nothing[1];
    view->obj = NULL;
    view->buf = NULL;
    if (obj == Py_None) return 0;
    if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 3) {
        view->buf = PyLong_AsVoidPtr(PyTuple_GET_ITEM(obj, 0));
        view->len = PyLong_AsSsize_t(PyTuple_GET_ITEM(obj, 1));
        if (PyErr_Occurred()) return -1;
        if (view->buf == NULL) view->buf = nothing; /* (an empty tensor's) */
    } else if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)))
        return -1;
    if (view->len < need) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, needs %zd", name, view->len, need);
        if (view->obj != NULL) PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static int check_params(const int64_t *p) {
    for (int i = 0; i < P_COUNT; i++)
        if (p[i] < 0) return -1; /* (no negative strides: mirroring is done here) */
    if (p[P_K] < 1 || p[P_K] > 64 || p[P_C] < 3 || p[P_W] > 4096 || p[P_KEEP] > KEEP_FLOAT ||
        p[P_KEY] > KEY_DEPTH || p[P_KEY_TYPE] > T_F64 || p[P_INVERT] > 1)
        return -1;
    if (p[P_KEY] == KEY_DEPTH && p[P_KEY_TYPE] != T_F32 && p[P_KEY_TYPE] != T_F64) return -1;
    if (p[P_KEY] == KEY_IDS && p[P_KEY_TYPE] > T_I64) return -1;
    return 0;
}

/* What each buffer must hold, in bytes, for these parameters. */
static void needs(const int64_t *p, int has_index, ssz need[10]) {
    ssz n = p[P_N], k = p[P_K], pix = p[P_H] * p[P_W], size = p[P_U8] ? 1 : 4;
    ssz obs[4] = {n, k, p[P_C], pix}, bg[5] = {p[P_BG_COUNT] ? p[P_BG_COUNT] : 1, n, k, 3, pix};
    ssz keep[4] = {n, k, 3, pix}, src[3] = {n, k, pix};
    need[0] = reach(p + P_OUT, obs, 4, size);
    need[1] = reach(p + P_OBS, obs, 4, size);
    need[2] = reach(p + P_BG, bg, 5, 1);
    need[3] = has_index ? n * k * 8 : 0;
    need[4] = n;
    need[5] = p[P_KEEP] == KEEP_NONE ? 0 : reach(p + P_KEEP_S, keep, 4, p[P_KEEP] == KEEP_BOOL ? 1 : 4);
    need[6] = p[P_KEY] >= KEY_IDS ? reach(p + P_KEY_S, src, 3, TYPE_SIZE[p[P_KEY_TYPE]]) : 0;
    need[7] = (p[P_KEY] == KEY_GREEN || p[P_KEY] == KEY_RANGE ? 6 : p[P_KEY] == KEY_DEPTH) * 8;
    need[8] = p[P_KEY] == KEY_IDS ? p[P_IDS] * 8 : 0;
    need[9] = (p[P_ALPHA_STEP] ? n : 1) * 4;
}

static int gcd(int a, int b) {
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a ? a : 1;
}

/* The nearest float32 at or above (up) or at or below a float64 bound. */
static float inside(double x, int up) {
    float f = (float)x;
    if (up && (double)f < x) return nextafterf(f, INFINITY);
    if (!up && (double)f > x) return nextafterf(f, -INFINITY);
    return f;
}

static void prepare(Job *job) {
    const int64_t *p = job->p, *so = p + P_OBS, *sd = p + P_OUT;
    ssz pixels = p[P_H] * p[P_W], k = p[P_K], c = p[P_C];
    job->span = pixels < SPAN ? pixels : SPAN - SPAN % p[P_W]; /* whole lines */
    if (job->span < 1) job->span = 1;
    job->spans = (pixels + job->span - 1) / job->span;
    ssz bytes = p[P_N] * k * c * pixels * (p[P_U8] ? 1 : 4);
    job->stream = job->out != job->obs && bytes >= STREAM_MIN;
    job->interleaved = so[1] == c && so[2] == 1 && so[3] == c * k && sd[1] == c && sd[2] == 1 &&
                       sd[3] == c * k && (p[P_KEEP_S + 2] == 0 || !p[P_KEEP]) &&
                       (job->flipped == NULL || p[P_W] * k <= ISTEP); /* whole lines a step */
    const double *v = job->values;
    if (p[P_KEY] == KEY_GREEN) { /* the preset's integer bounds: h, s, v */
        int *k = job->bounds;
        for (int i = 0; i < 6; i++) k[i] = (int)v[i];
        k[6] = v[0] <= 0 && 0 <= v[1] && v[2] <= 0 && 0 <= v[3];
        for (int i = 0; i < 4; i++) { /* `green`'s bounds reduced: x * 60 vs lo * span, ... */
            int whole = i < 2 ? 60 : 255, d = gcd(whole, k[i]);
            k[8 + 2 * i] = whole / d;
            k[9 + 2 * i] = k[i] / d;
        }
        /* 16 bits hold x * a (x up to 6 * 255) and span or top (up to 255) times b */
        k[7] = 1;
        for (int i = 0; i < 4; i++)
            k[7] &= k[8 + 2 * i] * (i < 2 ? 1530 : 255) <= 32767 && k[9 + 2 * i] * 255 <= 32767 &&
                    k[i] >= 0;
    }
    int dmcgb = p[P_KEY] == KEY_GREEN && v[0] == 100 && v[1] == 185 && v[2] == 80 &&
                v[3] == 255 && v[4] == 70 && v[5] == 255;
    int colour_key = p[P_PLAIN] && c == 3 && (dmcgb || p[P_KEY] == KEY_RANGE);
    job->fused = avx2 && p[P_U8] && colour_key;
    job->fused_f32 = avx2 && has_fma() && !p[P_U8] && colour_key && p[P_KEY] == KEY_GREEN;
    int type = (int)p[P_KEY_TYPE];
    job->fused_map = wide && p[P_U8] && p[P_PLAIN] && c == 3 &&
                     ((p[P_KEY] == KEY_DEPTH && type == T_F32) ||
                      (p[P_KEY] == KEY_IDS && (type == T_I16 || type == T_I32) && p[P_IDS] <= 8));
    if (p[P_KEY] == KEY_RANGE) /* lo R, G, B, hi R, G, B */
        for (int i = 0; i < 3; i++) {
            double lo = ceil(v[i]), hi = floor(v[3 + i]);
            job->lo8[i] = lo < 0 ? 0 : lo > 256 ? 256 : (int)lo; /* inside: lo8 <= v <= hi8 */
            job->hi8[i] = hi < -1 ? -1 : hi > 255 ? 255 : (int)hi;
            job->lof[i] = inside(v[i], 1);
            job->hif[i] = inside(v[3 + i], 0);
            if (job->lo8[i] > job->hi8[i]) job->fused = 0; /* no value inside: range_u8's */
        }
}

static PyObject *composite(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *objs[11];
    Py_buffer bufs[11];
    static const char *names[11] = {"out",   "obs",        "bg",     "index", "flipped", "keep",
                                    "key source", "values", "ids",   "alpha",   "params"};
    Job job;
    memset(&job, 0, sizeof job);
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10]))
        return NULL;
    if (take(objs[10], &bufs[10], P_COUNT * 8, 0, names[10])) return NULL;
    if (bufs[10].obj == NULL) return PyErr_Format(PyExc_ValueError, "composite: no parameters");
    memcpy(job.p, bufs[10].buf, sizeof job.p);
    PyBuffer_Release(&bufs[10]);
    if (check_params(job.p)) return PyErr_Format(PyExc_ValueError, "composite: bad parameters");
    ssz need[10];
    int got = 0, failed = 0;
    needs(job.p, objs[3] != Py_None, need);
    for (; got < 10 && !failed; got++) failed = take(objs[got], &bufs[got], need[got], got == 0, names[got]);
    if (!failed) {
        job.out = bufs[0].buf;
        job.obs = bufs[1].buf;
        job.bg = bufs[2].buf;
        job.index = bufs[3].buf;
        job.flipped = bufs[4].buf;
        job.keep = bufs[5].buf;
        job.key_src = bufs[6].buf;
        job.values = bufs[7].buf;
        job.ids = bufs[8].buf;
        job.alpha = bufs[9].buf;
        /* every buffer the parameters read must be there */
        failed = !job.out || !job.obs || !job.bg || !job.alpha ||
                 (job.p[P_BG_COUNT] && !job.index) || (need[5] && !job.keep) ||
                 (need[6] && !job.key_src) || (need[7] && !job.values) || (need[8] && !job.ids);
        if (failed) PyErr_SetString(PyExc_ValueError, "composite: a required buffer is None");
    }
    if (!failed && job.p[P_N] * job.p[P_H] * job.p[P_W] > 0) {
        prepare(&job);
        Py_BEGIN_ALLOW_THREADS;
        run_threads(&job);
        Py_END_ALLOW_THREADS;
        if (job.bad == 2) {
            PyErr_NoMemory();
            failed = 1;
        } else if (job.bad) {
            PyErr_SetString(PyExc_IndexError, "composite: a frame index is out of range");
            failed = 1;
        }
    }
    for (int i = 0; i < got; i++)
        if (bufs[i].obj != NULL) PyBuffer_Release(&bufs[i]);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* -- images placed and mirrored ---------------------------------------------------------- */

/* d[x] = s[w - 1 - x]: a line reversed, 16 bytes at a time where the CPU has AVX2 (its byte
 * shuffle: the reversed 16 bytes of the source's end go to the line's start). */
#if X86
__attribute__((target("avx2"))) static ssz mirror16(uint8_t *d, const uint8_t *s, ssz w) {
    const __m128i rev = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    ssz x = 0;
    for (; x + 16 <= w; x += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + w - 16 - x));
        _mm_storeu_si128((__m128i *)(d + x), _mm_shuffle_epi8(v, rev));
    }
    return x;
}
#else
static ssz mirror16(uint8_t *d, const uint8_t *s, ssz w) { return 0; }
#endif

static void mirror_line(uint8_t *d, const uint8_t *s, ssz w) {
    ssz x = avx2 ? mirror16(d, s, w) : 0;
    for (; x < w; x++) d[x] = s[w - 1 - x];
}

/* Image rows[j] of src (or j) to image at[j] of out (or j), mirrored (each line of `width`
 * bytes reversed) where flipped[j]: a gather or a scatter of uint8 images and their flips in
 * one pass, where torch's flip of a batch took four (a product, a flip, a product, a sum). */
static PyObject *place(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *objs[5];
    Py_buffer bufs[5] = {{0}};
    static const char *names[5] = {"out", "src", "at", "rows", "flipped"};
    long long m, image, width;
    if (!PyArg_ParseTuple(args, "OOOOOLLL", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &m,
                          &image, &width))
        return NULL;
    if (m < 0 || image < 1 || width < 1 || image % width)
        return PyErr_Format(PyExc_ValueError, "place: bad sizes (%lld, %lld, %lld)", m, image, width);
    ssz need[5] = {0, 0, m * 8, m * 8, m};
    int got = 0, failed = 0;
    for (; got < 5 && !failed; got++) failed = take(objs[got], &bufs[got], need[got], got == 0, names[got]);
    if (!failed && (bufs[0].buf == NULL || bufs[1].buf == NULL)) {
        PyErr_SetString(PyExc_ValueError, "place: out or src is None");
        failed = 1;
    }
    const int64_t *at = bufs[2].buf, *rows = bufs[3].buf;
    const uint8_t *flipped = bufs[4].buf;
    for (ssz j = 0; j < m && !failed; j++) { /* every image inside its buffer, before any write */
        int64_t d = at ? at[j] : j, r = rows ? rows[j] : j;
        if (d < 0 || r < 0 || d >= bufs[0].len / image || r >= bufs[1].len / image) {
            PyErr_SetString(PyExc_IndexError, "place: an image index is out of range");
            failed = 1;
        }
    }
    if (!failed) {
        uint8_t *out = bufs[0].buf;
        const uint8_t *src = bufs[1].buf;
        Py_BEGIN_ALLOW_THREADS;
        for (ssz j = 0; j < m; j++) {
            uint8_t *d = out + (at ? at[j] : j) * image;
            const uint8_t *s = src + (rows ? rows[j] : j) * image;
            if (flipped == NULL || !flipped[j])
                memcpy(d, s, image);
            else
                for (ssz y = 0; y < image; y += width) mirror_line(d + y, s + y, width);
        }
        Py_END_ALLOW_THREADS;
    }
    for (int i = 0; i < got; i++)
        if (bufs[i].obj != NULL) PyBuffer_Release(&bufs[i]);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* -- keyed draws ---------------------------------------------------------------------------- */

/* The streams of `playback`'s draws (its _CLIP, _START, _FLIP, _FIRST, _OTHER). */
enum { D_CLIP = 0, D_START = 1, D_FLIP = 2, D_FIRST = 3, D_OTHER = 4 };

/* SplitMix64's finaliser on a word (`keyed.mix64_int`). */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* `keyed.keyed`'s 64 bits of (env, episode) in `stream`, and `keyed.below`'s integer in [0, n)
 * from their top 32 bits. */
static inline uint64_t word(uint64_t key, uint64_t env, uint64_t episode, uint64_t stream) {
    return mix64(mix64(mix64(env + key) + episode) + stream);
}

static inline int64_t below_n(uint64_t bits, int64_t n) {
    return (int64_t)(((bits >> 32) * (uint64_t)n) >> 32);
}

/* out[i] = keyed(key, env[i], episode[i], stream) (`keyed.keyed`'s bits, int64 words): a reset
 * of a few environments on a CPU was some forty tensor ops of a few values each. */
static PyObject *keyed(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *objs[3];
    Py_buffer bufs[3] = {{0}};
    long long key, stream;
    if (!PyArg_ParseTuple(args, "OOOLL", &objs[0], &objs[1], &objs[2], &key, &stream)) return NULL;
    if (take(objs[0], &bufs[0], 0, 1, "out") || bufs[0].buf == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "keyed: out is None");
        return NULL;
    }
    ssz n = bufs[0].len / 8;
    int failed = take(objs[1], &bufs[1], n * 8, 0, "env") ||
                 take(objs[2], &bufs[2], n * 8, 0, "episode") || !bufs[1].buf || !bufs[2].buf;
    if (!failed) {
        uint64_t *out = bufs[0].buf;
        const uint64_t *env = bufs[1].buf, *episode = bufs[2].buf;
        for (ssz i = 0; i < n; i++)
            out[i] = word((uint64_t)key, env[i], episode[i], (uint64_t)stream);
    } else if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "keyed: env or episode is None");
    for (int i = 0; i < 3; i++)
        if (bufs[i].obj != NULL) PyBuffer_Release(&bufs[i]);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* out[i] = the clip of (env[i], episode[i]) over several packs (`playback.mixed_clips`'s bits):
 * the keyed word's top bits pick the pack (the number of `words` at or below it, sign
 * flipped), its low 32 bits a clip among the pack's first `limit`, after its `base`. A reset
 * of a few environments was ten tensor ops of a few values each. */
static PyObject *mixed(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *objs[6];
    Py_buffer bufs[6] = {{0}};
    static const char *names[6] = {"out", "env", "episode", "words", "base", "limit"};
    long long key, stream;
    if (!PyArg_ParseTuple(args, "OOOOOOLL", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &key, &stream))
        return NULL;
    int got = 0, failed = take(objs[got++], &bufs[0], 0, 1, names[0]);
    ssz n = bufs[0].len / 8;
    ssz need[6] = {0, n * 8, n * 8, 0, 0, 0};
    for (; got < 6 && !failed; got++) failed = take(objs[got], &bufs[got], need[got], 0, names[got]);
    ssz words = bufs[3].len / 8;
    if (!failed && (!bufs[0].buf || !bufs[1].buf || !bufs[2].buf || !bufs[4].buf || !bufs[5].buf ||
                    bufs[4].len < (words + 1) * 8 || bufs[5].len < (words + 1) * 8)) {
        PyErr_SetString(PyExc_ValueError, "mixed: a buffer is None or holds fewer packs than words + 1");
        failed = 1;
    }
    if (!failed) {
        int64_t *out = bufs[0].buf;
        const uint64_t *env = bufs[1].buf, *episode = bufs[2].buf;
        const int64_t *edge = bufs[3].buf, *base = bufs[4].buf, *limit = bufs[5].buf;
        for (ssz i = 0; i < n; i++) {
            uint64_t b = word((uint64_t)key, env[i], episode[i], (uint64_t)stream);
            int64_t top = (int64_t)(b ^ 0x8000000000000000ULL);
            ssz pack = 0;
            for (ssz w = 0; w < words; w++) pack += edge[w] <= top;
            out[i] = base[pack] + (int64_t)(((b & 0xFFFFFFFFULL) * (uint64_t)limit[pack]) >> 32);
        }
    }
    for (int i = 0; i < got; i++)
        if (bufs[i].obj != NULL) PyBuffer_Release(&bufs[i]);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* The draws of `playback.draw` for each (env[i], episode[i]) (its bits; int64 buffers, `flipped`
 * bytes): clip[i] in `order` (0 random, 1 next, 2 no-repeat) among `clips`; where `start` is
 * given, the start frame (random within length[clip[i]] when `random_start`, else 0) and
 * flipped[i] (the flip word's low bit when `flip`, else 0). A reset's draws were twenty tensor
 * ops of a few values each. */
static int64_t clip_of(uint64_t key, uint64_t e, uint64_t p, int64_t clips, int order) {
    if (order == 0) return below_n(word(key, e, p, D_CLIP), clips);
    if (order == 1 || clips <= 2) {
        int64_t sum = (int64_t)((uint64_t)below_n(word(key, 0, 0, D_FIRST), clips) + e + p);
        int64_t r = sum % clips; /* (floor division's remainder, as torch's `%`) */
        return r < 0 ? r + clips : r;
    }
    int64_t own = below_n(word(key, e, p, D_CLIP), clips);
    if (((int64_t)p) % 2 == 0) return own;
    int64_t a = below_n(word(key, e, p - 1, D_CLIP), clips);
    int64_t b = below_n(word(key, e, p + 1, D_CLIP), clips);
    int64_t lo = a < b ? a : b, hi = a < b ? b : a, two = lo != hi;
    int64_t r = below_n(word(key, e, p, D_OTHER), clips - 1 - two);
    r += r >= lo;
    r += (r >= hi) & two;
    return r;
}

static PyObject *draws(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *objs[6];
    Py_buffer bufs[6] = {{0}};
    static const char *names[6] = {"clip", "env", "episode", "start", "flipped", "length"};
    long long key, clips;
    int order, random_start, flip;
    if (!PyArg_ParseTuple(args, "OOOOOOLLiii", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &key, &clips, &order, &random_start, &flip))
        return NULL;
    if (clips < 1 || order < 0 || order > 2)
        return PyErr_Format(PyExc_ValueError, "draws: bad clips or order (%lld, %d)", clips, order);
    int got = 0, failed = take(objs[got++], &bufs[0], 0, 1, names[0]);
    ssz n = bufs[0].len / 8;
    ssz need[6] = {0, n * 8, n * 8, n * 8, n, clips * 8};
    for (; got < 6 && !failed; got++) failed = take(objs[got], &bufs[got], need[got], got == 3 || got == 4, names[got]);
    if (!failed && (!bufs[0].buf || !bufs[1].buf || !bufs[2].buf ||
                    (bufs[3].buf && (!bufs[4].buf || !bufs[5].buf)))) {
        PyErr_SetString(PyExc_ValueError, "draws: clip, env or episode is None, or start without flipped and length");
        failed = 1;
    }
    if (!failed) {
        int64_t *clip = bufs[0].buf, *start = bufs[3].buf;
        const uint64_t *env = bufs[1].buf, *episode = bufs[2].buf;
        uint8_t *flipped = bufs[4].buf;
        const int64_t *length = bufs[5].buf;
        uint64_t k = (uint64_t)key;
        for (ssz i = 0; i < n; i++) {
            clip[i] = clip_of(k, env[i], episode[i], clips, order);
            if (start == NULL) continue;
            start[i] = random_start ? below_n(word(k, env[i], episode[i], D_START), length[clip[i]]) : 0;
            flipped[i] = flip ? (uint8_t)(word(k, env[i], episode[i], D_FLIP) & 1) : 0;
        }
    }
    for (int i = 0; i < got; i++)
        if (bufs[i].obj != NULL) PyBuffer_Release(&bufs[i]);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* wide([on]): whether the AVX-512 loops run; on=False keeps to AVX2 (the tests run both). */
static PyObject *wide_loops(PyObject *Py_UNUSED(self), PyObject *args) {
    int on = -1;
    if (!PyArg_ParseTuple(args, "|p", &on)) return NULL;
    if (on >= 0) wide = on && wide_cpu;
    return PyBool_FromLong(wide);
}

static PyMethodDef methods[] = {
    {"composite", composite, METH_VARARGS,
     "composite(out, obs, bg, index, flipped, keep, key_source, values, ids, alpha, params): out = obs blended with its backgrounds under the keep weights (see _lerp.c)."},
    {"place", place, METH_VARARGS,
     "place(out, src, at, rows, flipped, m, image, width): image rows[j] of src (or j) to image at[j] of out (or j), each line of width bytes reversed where flipped[j]."},
    {"keyed", keyed, METH_VARARGS,
     "keyed(out, env, episode, key, stream): out = keyed.keyed's 64 bits of each (env, episode) (int64 buffers of out's length)."},
    {"mixed", mixed, METH_VARARGS,
     "mixed(out, env, episode, words, base, limit, key, stream): out = playback.mixed_clips's clips (int64 buffers)."},
    {"draws", draws, METH_VARARGS,
     "draws(clip, env, episode, start, flipped, length, key, clips, order, random_start, flip): playback.draw's clip, start and flip of each (env, episode)."},
    {"wide", wide_loops, METH_VARARGS,
     "wide([on]): whether the AVX-512 byte-permute loops run (on: where the CPU has them)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lerp", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lerp(void) {
    int fma = has_fma();
#if X86
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2");
    shuffles();
#ifdef _OPENMP
    pthread_atfork(NULL, NULL, in_child);
#endif
    wide = wide_cpu = avx2 && fma && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
    shuffles512();
#endif
    row_f32 = fma ? row_f32_fma : row_f32_plain;
    row_u8 = fma ? row_u8_fma : row_u8_plain;
    irow_f32 = fma ? irow4_f32_fma : irow4_f32_plain;
    irow_u8 = fma ? irow4_u8_fma : irow4_u8_plain;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "PARAMS", P_COUNT)) { /* for fused.py's check */
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
