/* Block floating point rounding of float32 values, one pass: the same numbers as the torch path in
 * pybuda/golden/formats.py (_bfp_fast_chunk and, for the blocks it redoes, _bfp_encode_blocks /
 * _bfp_decode_blocks), which stays the reference and the fallback. A block is 16 consecutive datums.
 *
 * Built and loaded by pybuda/golden/native/__init__.py with the system C compiler; plain C99, IEEE
 * single precision throughout (compiled without fast-math and without FMA contraction). */
#include <stdint.h>
#include <string.h>
#include <math.h>

#define BLOCK 16

static inline float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* The host model's integer encoding and the decode of one block (formats._bfp_encode_blocks, then
 * _bfp_decode_blocks): used where the value arithmetic below is not exact. */
static void exact_block(const uint32_t *b, float *o, int n, int family_a, int truncate, int bias) {
    int32_t e[BLOCK];
    uint32_t mant[BLOCK];
    int32_t shared = -1000;
    for (int k = 0; k < BLOCK; k++) {
        int32_t ek = (int32_t)((b[k] >> 23) & 0xFF);
        uint32_t mk = b[k] & 0x7FFFFF;
        if (family_a) {
            ek -= 112;
            if (ek < 0) { mk = 0; ek = 0; }
            if (ek > 31) { mk = 0x7FFFFF; ek = 31; }
        }
        e[k] = ek;
        mant[k] = mk;
        if (ek > shared) shared = ek;
    }
    int drop = 24 - n;
    uint32_t top = (1u << n) - 1;
    for (int k = 0; k < BLOCK; k++) {
        int32_t shift = shared - e[k];
        if (shift > 31) shift = 31;
        uint32_t m = (mant[k] | (1u << 23)) >> shift;
        if (truncate) {
            m >>= drop;
        } else {
            m = (m + (1u << (drop - 1))) >> drop;
            if (m > top) m = top;
        }
        if ((b[k] & 0x7FFFFFFFu) == 0) m = 0;
        /* m times the float32 scale 2^(shared - bias - (n - 1)), as _bfp_decode_blocks computes it: the
         * scale overflows to inf at the top of B formats (shared exponent 255), so m = 0 gives NaN. */
        float scale = (float)ldexp(1.0, shared - bias - (n - 1));
        float v = (float)m * scale;
        o[k] = ((b[k] >> 31) && m != 0) ? -v : v;
    }
}

/* ------------------------------------------------------------------------------------------------
 * One block's largest magnitude and its rounding to nearest: two AVX2 registers per block where the
 * build machine has AVX2 (the library is built there, with -march=native), else plain C. The
 * magnitudes' bit patterns are non-negative int32 and order as the values.
 * ---------------------------------------------------------------------------------------------- */
#if defined(__AVX2__)
#include <immintrin.h>

static inline uint32_t block_max(const float *xb) {
    const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i m = _mm256_max_epi32(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)xb), magnitude),
                                 _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(xb + 8)), magnitude));
    __m128i q = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    q = _mm_max_epi32(q, _mm_shuffle_epi32(q, 0x4E));
    q = _mm_max_epi32(q, _mm_shuffle_epi32(q, 0xB1));
    return (uint32_t)_mm_cvtsi128_si32(q);
}

static inline void round_nearest(const float *xb, float *ob, float top, float magic) {
    const __m256 hi = _mm256_set1_ps(top), lo = _mm256_set1_ps(-top), m = _mm256_set1_ps(magic);
    const __m256i sticky = _mm256_set1_epi32(1);
    for (int h = 0; h < BLOCK; h += 8) {
        __m256 v = _mm256_max_ps(_mm256_min_ps(_mm256_loadu_ps(xb + h), hi), lo);
        v = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sticky));
        _mm256_storeu_ps(ob + h, _mm256_sub_ps(_mm256_add_ps(v, m), m));
    }
}
#else
static inline uint32_t block_max(const float *xb) {
    uint32_t bmax = 0;
    for (int k = 0; k < BLOCK; k++) {
        uint32_t mag = u_of(xb[k]) & 0x7FFFFFFFu;
        bmax = mag > bmax ? mag : bmax;
    }
    return bmax;
}

static inline void round_nearest(const float *xb, float *ob, float top, float magic) {
    for (int k = 0; k < BLOCK; k++) {
        float v = xb[k];
        v = v < top ? v : top;  /* as minps / maxps: the second operand unless the comparison holds */
        v = v > -top ? v : -top;
        v = f_of(u_of(v) | 1u);
        ob[k] = (v + magic) - magic;
    }
}
#endif

/* Truncation (TT_BACKEND_DISABLE_BFP_RTE): |x| / lsb (exact, a power of two), floor, clamp, times lsb,
 * the sign back, and a zero magnitude as +0. */
static inline void truncate_block(const float *xb, float *ob, float lsb, float inv, float qmax) {
    for (int k = 0; k < BLOCK; k++) {
        float v = floorf(fabsf(xb[k]) * inv);
        v = v > qmax ? qmax : v;
        ob[k] = copysignf(v * lsb, xb[k]) + 0.0f;
    }
}

/* Round ``nblocks`` blocks of ``x`` into ``out`` (which may be ``x``): ``man_bits`` 7, 3 or 1;
 * ``family_a`` 1 for the 5-bit shared exponent formats (Bfp8/4/2), 0 for the _b ones; ``truncate``
 * 1 to truncate instead of rounding half away from zero.
 *
 * A block whose largest magnitude lies in [ok_lo, ok_hi] (or is zero) takes the value arithmetic of
 * formats._bfp_fast_chunk (clamp to the top level, set a sticky bit, add and subtract 1.5 * 2^23 *
 * lsb); any other block takes the host model's integer encoding (exact_block). */
void bfp_round(const float *x, float *out, int64_t nblocks, int man_bits, int family_a, int truncate) {
    const int n = man_bits;
    const int bias = family_a ? 15 : 127;
    const uint32_t lo = family_a ? (112u << 23) : (8u << 23);
    const uint32_t hi = family_a ? (143u << 23) : (231u << 23);
    const uint32_t ok_lo = family_a ? (120u << 23) : (8u << 23);
    const uint32_t ok_hi = family_a ? 0x7F800000u : ((232u << 23) - 1);
    const uint32_t shift = (uint32_t)(n - 1) << 23;
    const float qmax = (float)((1 << n) - 1);
    for (int64_t blk = 0; blk < nblocks; blk++) {
        const float *xb = x + blk * BLOCK;
        float *ob = out + blk * BLOCK;
        const uint32_t bmax = block_max(xb);
        if (bmax != 0 && (bmax < ok_lo || bmax > ok_hi)) {
            uint32_t bits[BLOCK];
            memcpy(bits, xb, sizeof bits);
            exact_block(bits, ob, n, family_a, truncate, bias);
            continue;
        }
        uint32_t exp = bmax & 0x7F800000u;
        exp = exp < lo ? lo : (exp > hi ? hi : exp);
        const uint32_t lsb_bits = exp - shift;
        const float lsb = f_of(lsb_bits);
        if (truncate)
            truncate_block(xb, ob, lsb, f_of((254u << 23) - lsb_bits), qmax);
        else
            round_nearest(xb, ob, lsb * qmax, f_of(lsb_bits + (23u << 23) + (1u << 22)));
    }
}
