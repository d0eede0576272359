/*
 * CPU backend, causal attention. At head sizes up to ATT_DMAX the products
 * of one head are register-blocked loops here: at T = 128, d = 32 a BLAS call
 * per 32 x 32 tile costs more than its arithmetic. Wider heads go through
 * OpenBLAS per (sequence, head). Softmax rows run over whole vectors with
 * masked lanes; per head the sums run in a fixed order, so results do not
 * depend on the thread count.
 */
#include "cpu.h"
#include "cpu_simd.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ------------------------------------------------------------------ attention */

/* Lane indices 0 .. AV-1. */
static inline __attribute__((always_inline)) void viota(vint *v)
{
    for (int l = 0; l < AV; l++)
        (*v)[l] = l;
}

/* Row t of the causal softmax over whole vectors [0, je), je = t + 1 rounded up to a
 * vector, the lanes past t masked; `full`: T is a whole number of vectors, so every
 * vector of the row can be loaded and stored as a whole. */
static inline __attribute__((always_inline)) void softmax_row(real *row, int64_t T, int64_t t,
                                                              const vint *iota, bool full)
{
    const int64_t je = (t + AV) / AV * AV;
    vreal vm = (vreal){0} - R_INF;
    for (int64_t j = 0; j < je; j += AV) {
        vreal x;
        if (full)
            memcpy(&x, row + j, sizeof x);
        else
            vload_part(&x, row + j, (int)(T - j), -R_INF);
        x = VSEL(*iota + (lane_int)(j - t) <= 0, x, (vreal){0} - R_INF);
        vm = VSEL(x > vm, x, vm);
    }
    const real mx = vhmax(&vm);
    vreal vs = {0};
    for (int64_t j = 0; j < je; j += AV) {
        vreal x;
        if (full)
            memcpy(&x, row + j, sizeof x);
        else
            vload_part(&x, row + j, (int)(T - j), 0);
        x -= mx;
        vexp(&x);
        x = VSEL(*iota + (lane_int)(j - t) <= 0, x, (vreal){0});
        vs += x;
        if (full)
            memcpy(row + j, &x, sizeof x);
        else
            vstore_part(row + j, &x, (int)(T - j));
    }
    const real inv = (real)1 / vhsum(&vs);
    for (int64_t j = 0; j < je; j += AV) {
        vreal x;
        if (full) {
            memcpy(&x, row + j, sizeof x);
            x *= inv;
            memcpy(row + j, &x, sizeof x);
        } else {
            vload_part(&x, row + j, (int)(T - j), 0);
            x *= inv;
            vstore_part(row + j, &x, (int)(T - j));
        }
    }
    if (je < T)
        memset(row + je, 0, (size_t)(T - je) * sizeof(real));
}

/* Row-wise causal softmax of a T x T block in place (entries above the diagonal -> 0;
 * they are never read, so they may hold anything on entry). Rows are 1 to T long and
 * run over whole vectors with masked lanes: scalar remainders would cost as much as
 * the vector loops. */
DP_CLONES static void softmax_causal(real *P, int64_t T)
{
    vint iota;
    viota(&iota);
    if (T % AV == 0)
        for (int64_t t = 0; t < T; t++)
            softmax_row(P + t * T, T, t, &iota, true);
    else
        for (int64_t t = 0; t < T; t++)
            softmax_row(P + t * T, T, t, &iota, false);
}

/* Softmax backward on a causal T x T block: dS = P * (dP - sum_j dP P), in place in dP
 * (entries above the diagonal of dP are not read and become 0). */
DP_CLONES static void softmax_causal_bwd(real *dP, const real *P, int64_t T)
{
    vint iota;
    viota(&iota);
    for (int64_t t = 0; t < T; t++) {
        const real *pr = P + t * T;
        real *dr = dP + t * T;
        const int64_t je = t + 1;
        vreal vs = {0};
        for (int64_t u = 0; u < je; u += AV) {
            vreal p, d;
            vload_part(&p, pr + u, (int)(je - u), 0);
            vload_part(&d, dr + u, (int)(je - u), 0);
            vs += p * d;
        }
        const real s = vhsum(&vs);
        int64_t u = 0;
        for (; u < je; u += AV) {
            vreal p, d;
            vload_part(&p, pr + u, (int)(T - u), 0);
            vload_part(&d, dr + u, (int)(T - u), 0);
            d = p * (d - s);
            d = VSEL(iota + (lane_int)(u - t) <= 0, d, (vreal){0});
            vstore_part(dr + u, &d, (int)(T - u));
        }
        if (u < T)
            memset(dr + u, 0, (size_t)(T - u) * sizeof(real));
    }
}

/*
 * Heads wider than ATT_DMAX: OpenBLAS per (sequence, head), the products cut into row
 * blocks of ATT_BS:
 * block i (rows r0 .. r0 + rows) only needs keys 0 .. r0 + rows, so the masked upper
 * triangle is never computed (5/8 of the full work at T = 128). Softmax rows read only
 * their causal entries and write zeros above the diagonal.
 */
#define ATT_BS 32

/* S = scale q k^T for the causal blocks, then row softmax, into P [T][T]. */
static void probs_one(real *P, const real *q, const real *k, int64_t ld, int64_t T, int d,
                      real scale)
{
    for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
        int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
        dp__cpu_gemm1(false, true, (int)rows, (int)cols, d, scale, q + r0 * ld, (int)ld, k, (int)ld,
                      0, P + r0 * T, (int)T);
    }
    softmax_causal(P, T);
}

static void attn_fwd_blas(real *ctx, real *probs, const real *qkv, int64_t B, int64_t T, int a,
                          int g, int d)
{
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
    /* The per-head products write strided column blocks; OpenBLAS would clear each one
     * row by row for beta = 0, so clear the whole buffer once and accumulate. */
    if (ctx)
        memset(ctx, 0, (size_t)(B * T * qd) * sizeof(real));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++) {
            const real *q = qkv + b * T * ld + (int64_t)h * d;
            const real *k = qkv + b * T * ld + qd + (int64_t)(h / per) * d;
            const real *v = k + kvd;
            real *P = probs + (b * a + h) * T * T;
            probs_one(P, q, k, ld, T, d, scale);
            if (!ctx)
                continue; /* probabilities only */
            real *c = ctx + b * T * qd + (int64_t)h * d;
            for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
                int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
                dp__cpu_gemm1(false, false, (int)rows, d, (int)cols, 1, P + r0 * T, (int)T, v,
                              (int)ld, 1, c + r0 * qd, (int)qd);
            }
        }
}

static void attn_bwd_blas(real *dqkv, real *dprobs, const real *dctx, const real *qkv,
                          const real *probs, int64_t B, int64_t T, int a, int g, int d)
{
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
    memset(dqkv, 0, (size_t)(B * T * ld) * sizeof(real)); /* see attn_fwd: beta = 1 below */
    /* One task per (sequence, kv head): the q heads of a group add into the same dK, dV. */
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int kh = 0; kh < g; kh++) {
            const real *k = qkv + b * T * ld + qd + (int64_t)kh * d;
            const real *v = k + kvd;
            real *dk = dqkv + b * T * ld + qd + (int64_t)kh * d;
            real *dv = dk + kvd;
            for (int j = 0; j < per; j++) {
                int h = kh * per + j;
                const real *q = qkv + b * T * ld + (int64_t)h * d;
                real *dq = dqkv + b * T * ld + (int64_t)h * d;
                const real *P = probs + (b * a + h) * T * T;
                real *dP = dprobs + (b * a + h) * T * T;
                const real *dc = dctx + b * T * qd + (int64_t)h * d;
                /* dP = dctx V^T and dV += P^T dctx, causal blocks only. */
                for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
                    int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
                    dp__cpu_gemm1(false, true, (int)rows, (int)cols, d, 1, dc + r0 * qd, (int)qd, v,
                                  (int)ld, 0, dP + r0 * T, (int)T);
                    dp__cpu_gemm1(true, false, (int)cols, d, (int)rows, 1, P + r0 * T, (int)T,
                                  dc + r0 * qd, (int)qd, 1, dv, (int)ld);
                }
                softmax_causal_bwd(dP, P, T);
                /* dQ = scale dS K; dK += scale dS^T Q */
                for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
                    int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
                    dp__cpu_gemm1(false, false, (int)rows, d, (int)cols, scale, dP + r0 * T, (int)T,
                                  k, (int)ld, 1, dq + r0 * ld, (int)ld);
                    dp__cpu_gemm1(true, false, (int)cols, d, (int)rows, scale, dP + r0 * T, (int)T,
                                  q + r0 * ld, (int)ld, 1, dk, (int)ld);
                }
            }
        }
}

/*
 * Causal attention at small head sizes (T = 128, d = 32 in the benchmark) is dominated by
 * the cost of BLAS calls on 32 x 32 tiles and by packing, so heads up to ATT_DMAX wide
 * run these kernels instead: every product of a head is a sum of rank-1 updates of an
 * ATT_RB x (1 or 2) AV register block (AV = one 64-byte vector: 16 floats, 8 doubles).
 * Scores x y^T take y in chunks of ATT_KB keys, transposed into a scratch array on the
 * stack; the products with P or P^T read their right-hand operand in place when d is a
 * whole number of vectors, else chunk by chunk padded to whole vectors in the scratch.
 * Only blocks that touch the causal triangle are computed; what they compute above the
 * diagonal is never read (the softmax and its backward write zeros there). Per head the
 * sums run in a fixed order, so results do not depend on the thread count. Wider heads
 * use OpenBLAS (attn_*_blas below).
 */
#define ATT_KB   32  /* keys (or queries) per scratch chunk; a multiple of ATT_RB and AV */
#define ATT_RB   8   /* rows of a register block */
#define ATT_DMAX 256 /* widest head for these kernels: scratch ATT_KB x ATT_DMAX reals */

/*
 * The register blocks: for r < ATT_RB and one or two vectors (nc <= AV or 2 AV columns),
 *   acc[r] = sum_{k < nk} a[r ars + k aks] y[k ldy + (0 .. AV or 2 AV)]
 *   c[r ldc + (0 .. nc)] = (add ? c : 0) + scale acc[r]
 * All ATT_RB rows of a and the whole vectors of each y row must be readable. (Plain
 * arrays of vectors indexed by constants, which the compilers keep in registers.)
 */
/* c[0 .. n) = (add ? c : 0) + scale acc (n <= AV lanes; n >= AV: the whole vector). */
static inline __attribute__((always_inline)) void att_put(real *c, const vreal *acc, int n,
                                                          real scale, bool add)
{
    vreal out = *acc * scale;
    if (n >= AV) {
        if (add) {
            vreal old;
            memcpy(&old, c, sizeof old);
            out += old;
        }
        memcpy(c, &out, sizeof out);
    } else {
        for (int l = 0; l < n; l++)
            c[l] = (add ? c[l] : 0) + out[l];
    }
}

static inline __attribute__((always_inline)) void
att_block1(const real *a, int64_t ars, int64_t aks, const real *y, int64_t ldy, int nk, real *c,
           int64_t ldc, int nc, real scale, bool add)
{
    vreal acc[ATT_RB];
    for (int r = 0; r < ATT_RB; r++)
        acc[r] = (vreal){0};
    for (int k = 0; k < nk; k++) {
        vreal yv;
        memcpy(&yv, y + k * ldy, sizeof yv);
        for (int r = 0; r < ATT_RB; r++)
            acc[r] += a[r * ars + k * aks] * yv;
    }
    for (int r = 0; r < ATT_RB; r++)
        att_put(c + r * ldc, &acc[r], nc, scale, add);
}

static inline __attribute__((always_inline)) void
att_block2(const real *a, int64_t ars, int64_t aks, const real *y, int64_t ldy, int nk, real *c,
           int64_t ldc, int nc, real scale, bool add)
{
    vreal lo[ATT_RB], hi[ATT_RB];
    for (int r = 0; r < ATT_RB; r++)
        lo[r] = hi[r] = (vreal){0};
    for (int k = 0; k < nk; k++) {
        vreal y0, y1;
        memcpy(&y0, y + k * ldy, sizeof y0);
        memcpy(&y1, y + k * ldy + AV, sizeof y1);
        for (int r = 0; r < ATT_RB; r++) {
            const real ar = a[r * ars + k * aks];
            lo[r] += ar * y0;
            hi[r] += ar * y1;
        }
    }
    for (int r = 0; r < ATT_RB; r++) {
        att_put(c + r * ldc, &lo[r], AV, scale, add);
        att_put(c + r * ldc + AV, &hi[r], nc - AV, scale, add);
    }
}

/* One row, nc <= 2 AV columns, vector by vector. */
static inline __attribute__((always_inline)) void att_row(const real *a, int64_t aks, const real *y,
                                                          int64_t ldy, int nk, real *c, int nc,
                                                          real scale, bool add)
{
    for (int v = 0; v * AV < nc; v++) {
        vreal acc = {0};
        for (int k = 0; k < nk; k++) {
            vreal yv;
            memcpy(&yv, y + k * ldy + v * AV, sizeof yv);
            acc += a[k * aks] * yv;
        }
        att_put(c + v * AV, &acc, nc - v * AV, scale, add);
    }
}

/* nr <= ATT_RB rows and nc <= 2 AV columns: a register block, or row by row at the edges. */
static inline __attribute__((always_inline)) void att_rows(int nr, const real *a, int64_t ars,
                                                           int64_t aks, const real *y, int64_t ldy,
                                                           int nk, real *c, int64_t ldc, int nc,
                                                           real scale, bool add)
{
    if (nr == ATT_RB && nc > AV)
        att_block2(a, ars, aks, y, ldy, nk, c, ldc, nc, scale, add);
    else if (nr == ATT_RB)
        att_block1(a, ars, aks, y, ldy, nk, c, ldc, nc, scale, add);
    else
        for (int r = 0; r < nr; r++)
            att_row(a + r * ars, aks, y, ldy, nk, c + r * ldc, nc, scale, add);
}

static inline int imin(int64_t a, int64_t b)
{
    return (int)(a < b ? a : b);
}

/* sc [d][ATT_KB] = y^T for a whole chunk (kc = ATT_KB keys) of y [kc][d] (row stride ldy)
 * in 16 x 16 tiles of shuffles (floats, d a multiple of 16); returns false where it does
 * not apply, and the caller copies element by element. */
#if !defined(DP_REAL_DOUBLE) && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define ATT_TILES 1
#endif
#endif
#ifdef ATT_TILES
#define SHUF __builtin_shufflevector
/* In place: m[r] lane l <- m[l] lane r, by swapping off-diagonal blocks of 8, 4, 2, 1. */
static inline __attribute__((always_inline)) void transpose16(vreal *m)
{
    for (int r = 0; r < 8; r++) {
        vreal a = m[r], b = m[r + 8];
        m[r] = SHUF(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        m[r + 8] = SHUF(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    }
    for (int q = 0; q < 16; q += 8)
        for (int r = q; r < q + 4; r++) {
            vreal a = m[r], b = m[r + 4];
            m[r] = SHUF(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
            m[r + 4] = SHUF(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
        }
    for (int q = 0; q < 16; q += 4)
        for (int r = q; r < q + 2; r++) {
            vreal a = m[r], b = m[r + 2];
            m[r] = SHUF(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
            m[r + 2] = SHUF(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
        }
    for (int r = 0; r < 16; r += 2) {
        vreal a = m[r], b = m[r + 1];
        m[r] = SHUF(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
        m[r + 1] = SHUF(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    }
}
#undef SHUF
#endif

static inline __attribute__((always_inline)) bool att_transpose_tiles(real *sc, const real *y,
                                                                      int64_t ldy, int kc, int d)
{
#ifdef ATT_TILES
    if (kc != ATT_KB || d % 16 != 0)
        return false;
    for (int j0 = 0; j0 < ATT_KB; j0 += 16)
        for (int i0 = 0; i0 < d; i0 += 16) {
            vreal m[16];
            for (int r = 0; r < 16; r++)
                memcpy(&m[r], y + (j0 + r) * ldy + i0, sizeof m[r]);
            transpose16(m);
            for (int r = 0; r < 16; r++)
                memcpy(sc + (i0 + r) * ATT_KB + j0, &m[r], sizeof m[r]);
        }
    return true;
#else
    (void)sc, (void)y, (void)ldy, (void)kc, (void)d;
    return false;
#endif
}

/* Causal blocks of S = scale x y^T into S [T][T] (row stride T): x, y [T][d] with row
 * strides ldx, ldy. Chunk by chunk of keys, y^T goes to the scratch ([d][ATT_KB]). */
static inline __attribute__((always_inline)) void att_scores(real *S, const real *x, int64_t ldx,
                                                             const real *y, int64_t ldy, int64_t T,
                                                             int d, real scale, real *sc)
{
    for (int64_t c0 = 0; c0 < T; c0 += ATT_KB) {
        const int kc = imin(ATT_KB, T - c0);
        if (!att_transpose_tiles(sc, y + c0 * ldy, ldy, kc, d))
            for (int i = 0; i < d; i++)
                for (int j = 0; j < ATT_KB; j++)
                    sc[i * ATT_KB + j] = j < kc ? y[(c0 + j) * ldy + i] : 0;
        for (int64_t t0 = c0; t0 < T; t0 += ATT_RB) {
            const int nr = imin(ATT_RB, T - t0);
            /* two vectors of keys at a time, one where the second would lie wholly above
             * the diagonal */
            for (int jv = 0; jv < kc && c0 + jv < t0 + nr; jv += 2 * AV) {
                const int nc = imin(c0 + jv + AV < t0 + nr ? 2 * AV : AV, kc - jv);
                att_rows(nr, x + t0 * ldx, ldx, 1, sc + jv, ATT_KB, d, S + t0 * T + c0 + jv, T, nc,
                         scale, false);
            }
        }
    }
}

/* kc rows of x (row stride ldx) as whole vectors of 2 AV: x itself when d is a multiple of
 * AV (direct), else a copy in the scratch padded with zeros to dp columns; *ld its stride. */
static inline __attribute__((always_inline)) const real *
att_chunk(const real *x, int64_t ldx, int kc, int d, int dp, bool direct, real *sc, int64_t *ld)
{
    *ld = direct ? ldx : dp;
    if (direct)
        return x;
    for (int j = 0; j < kc; j++)
        for (int i = 0; i < dp; i++)
            sc[j * dp + i] = i < d ? x[j * ldx + i] : 0;
    return sc;
}

/* o [T][d] (row stride ldo) = (add ? o : 0) + scale P y for a causal P [T][T] (zeros above
 * the diagonal), y [T][d] (row stride ldy). Chunk by chunk of keys, y padded to dp columns
 * in the scratch ([ATT_KB][dp]); the first chunk writes o, the others add. */
static inline __attribute__((always_inline)) void att_apply(real *o, int64_t ldo, const real *P,
                                                            const real *y, int64_t ldy, int64_t T,
                                                            int d, real scale, bool add, real *sc)
{
    /* Whole vectors of d: read y in place, all keys at once; else chunk by chunk through
     * the padded copy. */
    const bool direct = d % AV == 0;
    const int dp = (d + 2 * AV - 1) / (2 * AV) * (2 * AV);
    const int64_t kb = direct ? T : ATT_KB;
    for (int64_t c0 = 0; c0 < T; c0 += kb) {
        const int kc = imin(kb, T - c0);
        int64_t ldyc;
        const real *yc = att_chunk(y + c0 * ldy, ldy, kc, d, dp, direct, sc, &ldyc);
        for (int64_t t0 = c0; t0 < T; t0 += ATT_RB) {
            const int nr = imin(ATT_RB, T - t0), nk = imin(kc, t0 + nr - c0);
            for (int dv = 0; dv < d; dv += 2 * AV)
                att_rows(nr, P + t0 * T + c0, T, 1, yc + dv, ldyc, nk, o + t0 * ldo + dv, ldo,
                         imin(2 * AV, d - dv), scale, add || c0 > 0);
        }
    }
}

/* z [T][d] (row stride ldz) = (add ? z : 0) + scale P^T x for a causal P [T][T], x [T][d]
 * (row stride ldx): z[j] += scale sum_{t >= j} P[t][j] x[t]. All queries at once when x
 * is read in place, else chunk by chunk of queries through the padded scratch. */
static inline __attribute__((always_inline)) void att_apply_t(real *z, int64_t ldz, const real *P,
                                                              const real *x, int64_t ldx, int64_t T,
                                                              int d, real scale, bool add, real *sc)
{
    const bool direct = d % AV == 0;
    const int dp = (d + 2 * AV - 1) / (2 * AV) * (2 * AV);
    const int64_t kb = direct ? T : ATT_KB;
    for (int64_t c0 = 0; c0 < T; c0 += kb) {
        const int kc = imin(kb, T - c0);
        int64_t ldxc;
        const real *xc = att_chunk(x + c0 * ldx, ldx, kc, d, dp, direct, sc, &ldxc);
        /* keys j0.. of a block see the queries t >= j0 of this chunk; the chunk holding
         * j0 is their first (written unless add), the later ones add */
        for (int64_t j0 = 0; j0 < c0 + kc; j0 += ATT_RB) {
            const int nr = imin(ATT_RB, T - j0);
            const int tt0 = j0 > c0 ? (int)(j0 - c0) : 0;
            for (int dv = 0; dv < d; dv += 2 * AV)
                att_rows(nr, P + (c0 + tt0) * T + j0, 1, T, xc + tt0 * ldxc + dv, ldxc, kc - tt0,
                         z + j0 * ldz + dv, ldz, imin(2 * AV, d - dv), scale, add || j0 < c0);
        }
    }
}

/* One (sequence, head): P = softmax(scale q k^T) (causal), ctx = P v unless ctx is NULL. */
DP_CLONES static void attn_fwd_head(real *ctx, int64_t ldc, real *P, const real *q, const real *k,
                                    const real *v, int64_t ld, int64_t T, int d, real scale)
{
    real sc[ATT_KB * ATT_DMAX];
    att_scores(P, q, ld, k, ld, T, d, scale, sc);
    softmax_causal(P, T);
    if (ctx)
        att_apply(ctx, ldc, P, v, ld, T, d, 1, false, sc);
}

/* One (sequence, kv head) and its `per` q heads (GQA): dq written, dk and dv written by
 * the first q head and summed over the others. q, k, v, dq, dk, dv have row stride ld; dctx and its
 * head offsets stride qd; P per q head [T][T]; dP one [T][T] scratch, reused by each q head. */
DP_CLONES static void attn_bwd_group(real *dq, real *dk, real *dv, real *dP, const real *dctx,
                                     int64_t qd, const real *q, const real *k, const real *v,
                                     const real *P, int64_t ld, int64_t T, int d, int per,
                                     real scale)
{
    real sc[ATT_KB * ATT_DMAX];
    for (int j = 0; j < per; j++) {
        const int64_t off = (int64_t)j * d, po = (int64_t)j * T * T;
        const real *dc = dctx + off, *qh = q + off, *Ph = P + po;
        real *dPh = dP;
        att_scores(dPh, dc, qd, v, ld, T, d, 1, sc);                 /* dP = dctx v^T */
        att_apply_t(dv, ld, Ph, dc, qd, T, d, 1, j > 0, sc);         /* dv += P^T dctx */
        softmax_causal_bwd(dPh, Ph, T);                              /* dS, in place */
        att_apply(dq + off, ld, dPh, k, ld, T, d, scale, false, sc); /* dq = scale dS k */
        att_apply_t(dk, ld, dPh, qh, ld, T, d, scale, j > 0, sc);    /* dk += scale dS^T q */
    }
}

void dp__cpu_attn_probs(struct dp_backend *be, real *probs, const real *qkv, int64_t B, int64_t T,
                        int a, int g, int d)
{
    dp__cpu_attn_fwd(be, NULL, probs, qkv, B, T, a, g, d);
}

void dp__cpu_attn_fwd(struct dp_backend *be, real *ctx, real *probs, const real *qkv, int64_t B,
                      int64_t T, int a, int g, int d)
{
    if (d > ATT_DMAX) {
        attn_fwd_blas(ctx, probs, qkv, B, T, a, g, d);
        return;
    }
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++) {
            const real *q = qkv + b * T * ld + (int64_t)h * d;
            const real *k = qkv + b * T * ld + qd + (int64_t)(h / per) * d;
            real *c = ctx ? ctx + b * T * qd + (int64_t)h * d : NULL;
            attn_fwd_head(c, qd, probs + (b * a + h) * T * T, q, k, k + kvd, ld, T, d, scale);
        }
}

void dp__cpu_attn_bwd(struct dp_backend *be, real *dqkv, real *dprobs, const real *dctx,
                      const real *qkv, const real *probs, int64_t B, int64_t T, int a, int g, int d)
{
    if (d > ATT_DMAX) {
        attn_bwd_blas(dqkv, dprobs, dctx, qkv, probs, B, T, a, g, d);
        return;
    }
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
    /* One task per (sequence, kv head): the q heads of a group add into the same dk, dv.
     * dP is needed only within a head, so each thread reuses one [T][T] slice of dprobs,
     * which stays in cache (with more threads than heads, each task its own slice). */
#pragma omp parallel
    {
        const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int kh = 0; kh < g; kh++) {
                const int64_t row = b * T * ld, h0 = (int64_t)kh * per;
                const int64_t koff = qd + (int64_t)kh * d;
                const int64_t slice = nth <= B * a ? tid : b * a + h0;
                attn_bwd_group(dqkv + row + h0 * d, dqkv + row + koff, dqkv + row + koff + kvd,
                               dprobs + slice * T * T, dctx + b * T * qd + h0 * d, qd,
                               qkv + row + h0 * d, qkv + row + koff, qkv + row + koff + kvd,
                               probs + (b * a + h0) * T * T, ld, T, d, per, scale);
            }
    }
}
