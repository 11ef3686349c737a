/* The memory floor of a whole step on this machine: a loop that moves the bytes a uint8
 * step moves, with no key to compute, against a copy of the obs (torch's `obs.clone()`
 * stores; it streams nothing). It reads the obs (n bytes), the backgrounds (n) and a map
 * (`map` bytes per pixel-frame: 4 for a float32 depth, 2 for int16 ids, 0 for a colour key)
 * and writes the output (n), once storing it and once streaming it past the caches as the
 * compiled pass does. Prints the median of 15 ratios to the copy.
 *
 *     cc -O2 -o /tmp/floor scripts/floor.c && /tmp/floor 65028096 4
 *
 * (65,028,096 bytes: the 1,024 x 9 x 84 x 84 uint8 obs of bench_backgrounds' whole step.) */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx2"))) static void copy(uint8_t *d, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i += 32)
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
}

/* per 96 bytes of obs (32 pixel-frames): 96 of backgrounds and 32 * map of the map */
__attribute__((target("avx2"))) static void step(uint8_t *d, const uint8_t *o, const uint8_t *b,
                                                 const uint8_t *m, size_t n, int map, int stream) {
    size_t j = 0;
    for (size_t i = 0; i < n; i += 96) {
        __m256i keep = _mm256_setzero_si256();
        for (int q = 0; q < map; q++)
            keep = _mm256_xor_si256(keep, _mm256_loadu_si256((const __m256i *)(m + j + 32 * q)));
        j += 32 * (size_t)map;
        for (int k = 0; k < 3; k++) {
            __m256i v = _mm256_blendv_epi8(_mm256_loadu_si256((const __m256i *)(b + i + 32 * k)),
                                           _mm256_loadu_si256((const __m256i *)(o + i + 32 * k)), keep);
            if (stream)
                _mm256_stream_si256((__m256i *)(d + i + 32 * k), v);
            else
                _mm256_storeu_si256((__m256i *)(d + i + 32 * k), v);
        }
    }
    _mm_sfence();
}

static int order(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: floor BYTES MAP_BYTES_PER_PIXEL_FRAME\n");
        return 2;
    }
    size_t n = strtoull(argv[1], NULL, 10);
    int map = atoi(argv[2]);
    n -= n % 96;
    uint8_t *o = aligned_alloc(64, n), *b = aligned_alloc(64, n), *d = aligned_alloc(64, n);
    uint8_t *c = aligned_alloc(64, n), *m = aligned_alloc(64, n / 3 * map + 64);
    memset(o, 1, n), memset(b, 2, n), memset(d, 3, n), memset(c, 3, n);
    memset(m, 0, n / 3 * map + 64);
    double ratio[2][15];
    for (int r = 0; r < 15; r++)
        for (int stream = 0; stream < 2; stream++) {
            double t0 = now();
            copy(c, o, n);
            double t1 = now();
            step(d, o, b, m, n, map, stream);
            ratio[stream][r] = (now() - t1) / (t1 - t0);
        }
    qsort(ratio[0], 15, sizeof(double), order);
    qsort(ratio[1], 15, sizeof(double), order);
    printf("%zu bytes, a map of %d bytes a pixel-frame: %.2fx the copy stored, %.2fx streamed\n",
           n, map, ratio[0][7], ratio[1][7]);
    return 0;
}
