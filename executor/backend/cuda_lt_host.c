/*
 * Host-only logic of the cuBLASLt GEMMs (cuda_lt_host.h says what and why).
 */
#include "cuda_lt_host.h"

#include <string.h>

int dp__lt_elem_bytes(enum dp__lt_mode mode)
{
    return mode == DP_LT_FP8 ? 1 : mode == DP_LT_FP32 ? 4 : 2;
}

/* n elements of `eb` bytes rounded up to a multiple of 16 bytes. */
static int pad16(int n, int eb)
{
    int per = 16 / eb;
    return (n + per - 1) / per * per;
}

static size_t align256(size_t x)
{
    return (x + 255) / 256 * 256;
}

void dp__lt_plan_make(struct dp__lt_plan *p, enum dp__lt_mode mode, bool ta, bool tb, int m, int n,
                      int k, int lda, int ldb, int ldc, int fa, int fb, bool exact)
{
    memset(p, 0, sizeof *p);
    struct dp__lt_key *key = &p->key;
    key->m = m;
    key->n = n;
    key->k = k;
    key->ldc = ldc;
    key->mode = (uint8_t)mode;
    key->compute = exact;
    if (mode == DP_LT_FP32) {
        key->lda = lda;
        key->ldb = ldb;
        key->ta = ta;
        key->tb = tb;
        return;
    }
    const int eb = dp__lt_elem_bytes(mode);
    p->copy = true;
    if (mode == DP_LT_FP8) {
        /* TN: A as [m x k] (ta false), B as [n x k] (tb true); K padded with zeros. */
        key->fa = (uint8_t)fa;
        key->fb = (uint8_t)fb;
        p->tr_a = ta;
        p->tr_b = !tb;
        key->ta = false;
        key->tb = true;
        const int kp = pad16(k, eb);
        key->k = kp;
        p->rows_a = m;
        p->cols_a = k;
        p->rows_b = n;
        p->cols_b = k;
        key->lda = kp;
        key->ldb = kp;
    } else {
        /* The call's orientation: A stored [m x k] or, transposed, [k x m]. */
        key->ta = ta;
        key->tb = tb;
        p->rows_a = ta ? k : m;
        p->cols_a = ta ? m : k;
        p->rows_b = tb ? n : k;
        p->cols_b = tb ? k : n;
        key->lda = pad16(p->cols_a, eb);
        key->ldb = pad16(p->cols_b, eb);
    }
    p->off_b = align256((size_t)p->rows_a * key->lda * eb);
    p->bytes = p->off_b + align256((size_t)p->rows_b * key->ldb * eb);
}

static bool same(const struct dp__lt_key *a, const struct dp__lt_key *b)
{
    return a->m == b->m && a->n == b->n && a->k == b->k && a->lda == b->lda && a->ldb == b->ldb &&
           a->ldc == b->ldc && a->ta == b->ta && a->tb == b->tb && a->mode == b->mode &&
           a->fa == b->fa && a->fb == b->fb && a->compute == b->compute && a->epi == b->epi;
}

int dp__lt_cache_find(const struct dp__lt_cache *c, const struct dp__lt_key *k)
{
    for (int i = 0; i < DP_LT_SLOTS; i++)
        if (c->used[i] && same(&c->keys[i], k))
            return i;
    return -1;
}

int dp__lt_cache_take(struct dp__lt_cache *c, const struct dp__lt_key *k, bool *evict)
{
    int s = -1;
    for (int i = 0; i < DP_LT_SLOTS && s < 0; i++)
        if (!c->used[i])
            s = i;
    *evict = s < 0;
    if (s < 0) {
        s = c->next;
        c->next = (c->next + 1) % DP_LT_SLOTS;
    }
    c->keys[s] = *k;
    c->used[s] = true;
    return s;
}

bool dp__lt_fp8_capable(int major, int minor)
{
    return major > 8 || (major == 8 && minor >= 9);
}
