/*
 * The CUDA backend's host-only logic (cuda_host.h): no CUDA here, so its unit
 * tests run without a GPU.
 */
#include "cuda_host.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the arena */

static int grow(struct dp__arena_blk **v, int *cap, int need)
{
    if (need <= *cap)
        return 0;
    int nc = *cap ? 2 * *cap : 64;
    while (nc < need)
        nc *= 2;
    struct dp__arena_blk *p = realloc(*v, (size_t)nc * sizeof *p);
    if (!p)
        return DP_ENOMEM;
    *v = p;
    *cap = nc;
    return 0;
}

int dp__arena_init(struct dp__arena *a, size_t cap)
{
    memset(a, 0, sizeof *a);
    a->cap = cap / DP_ARENA_ALIGN * DP_ARENA_ALIGN;
    if (a->cap == 0)
        return 0;
    if (grow(&a->freel, &a->free_cap, 1))
        return DP_ENOMEM;
    a->freel[0] = (struct dp__arena_blk){0, a->cap};
    a->nfree = 1;
    return 0;
}

void dp__arena_release(struct dp__arena *a)
{
    free(a->freel);
    free(a->live);
    memset(a, 0, sizeof *a);
}

size_t dp__arena_footprint(size_t bytes)
{
    if (bytes == 0)
        return DP_ARENA_ALIGN;
    if (bytes > SIZE_MAX - DP_ARENA_ALIGN)
        return SIZE_MAX / DP_ARENA_ALIGN * DP_ARENA_ALIGN;
    return (bytes + DP_ARENA_ALIGN - 1) / DP_ARENA_ALIGN * DP_ARENA_ALIGN;
}

/* The index of the first block with off >= `off` (binary search). */
static int lower(const struct dp__arena_blk *v, int n, size_t off)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int dp__arena_alloc(struct dp__arena *a, size_t bytes, size_t *off)
{
    size_t len = dp__arena_footprint(bytes);
    int f = 0;
    while (f < a->nfree && a->freel[f].len < len)
        f++;
    if (f == a->nfree)
        return DP_ENOMEM;
    if (grow(&a->live, &a->live_cap, a->nlive + 1))
        return DP_ENOMEM;
    size_t at = a->freel[f].off;
    if (a->freel[f].len == len) {
        memmove(a->freel + f, a->freel + f + 1, (size_t)(a->nfree - f - 1) * sizeof *a->freel);
        a->nfree--;
    } else {
        a->freel[f].off += len;
        a->freel[f].len -= len;
    }
    int i = lower(a->live, a->nlive, at);
    memmove(a->live + i + 1, a->live + i, (size_t)(a->nlive - i) * sizeof *a->live);
    a->live[i] = (struct dp__arena_blk){at, len};
    a->nlive++;
    a->used += len;
    if (a->used > a->hwm)
        a->hwm = a->used;
    *off = at;
    return 0;
}

int dp__arena_free(struct dp__arena *a, size_t off)
{
    int i = lower(a->live, a->nlive, off);
    if (i == a->nlive || a->live[i].off != off)
        return DP_EINVAL;
    /* Room for one more free extent first, so that a failure changes nothing. */
    if (grow(&a->freel, &a->free_cap, a->nfree + 1))
        return DP_ENOMEM;
    size_t len = a->live[i].len;
    memmove(a->live + i, a->live + i + 1, (size_t)(a->nlive - i - 1) * sizeof *a->live);
    a->nlive--;
    a->used -= len;
    int f = lower(a->freel, a->nfree, off);
    bool left = f > 0 && a->freel[f - 1].off + a->freel[f - 1].len == off;
    bool right = f < a->nfree && off + len == a->freel[f].off;
    if (left && right) {
        a->freel[f - 1].len += len + a->freel[f].len;
        memmove(a->freel + f, a->freel + f + 1, (size_t)(a->nfree - f - 1) * sizeof *a->freel);
        a->nfree--;
    } else if (left) {
        a->freel[f - 1].len += len;
    } else if (right) {
        a->freel[f].off = off;
        a->freel[f].len += len;
    } else {
        memmove(a->freel + f + 1, a->freel + f, (size_t)(a->nfree - f) * sizeof *a->freel);
        a->freel[f] = (struct dp__arena_blk){off, len};
        a->nfree++;
    }
    return 0;
}

size_t dp__arena_largest(const struct dp__arena *a)
{
    size_t m = 0;
    for (int f = 0; f < a->nfree; f++)
        if (a->freel[f].len > m)
            m = a->freel[f].len;
    return m;
}

/* ------------------------------------------------------------------ the split plan */

/* ------------------------------------------------------------------ images */

int dp__cuda_pick_image(int major, int minor, const int *sass, int nsass, int ptx, bool *jit)
{
    int sm = 10 * major + minor, best = -1;
    for (int i = 0; i < nsass; i++)
        if (sass[i] / 10 == major && sass[i] <= sm && sass[i] > best)
            best = sass[i];
    *jit = false;
    if (best >= 0)
        return best;
    if (ptx > 0 && ptx <= sm) {
        *jit = true;
        return ptx;
    }
    return -1;
}

int dp__cuda_parse_archs(const char *s, int *out, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s)
            break;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* ------------------------------------------------------------------ errors */

int dp__cuda_status(bool is_nccl, int code)
{
    return !is_nccl && code == 2 ? DP_ENOMEM : DP_ERUNTIME;
}

int dp__cuda_fail(struct dp_err *err, bool is_nccl, int code, int rank, const char *host,
                  const char *call, const char *group, const char *text)
{
    return dp_err_set(err, dp__cuda_status(is_nccl, code), "rank %d (%s): %s%s%s%s failed: %s",
                      rank, host, call, group ? " over the " : "", group ? group : "",
                      group ? " group" : "", text && *text ? text : "unknown error");
}

/* ------------------------------------------------------------------ requests */

void dp__reqs_init(struct dp__reqs *r)
{
    for (int i = 0; i < DP_MAX_REQS; i++)
        r->group[i] = -1;
}

int dp__reqs_take(struct dp__reqs *r, int g)
{
    for (int i = 0; i < DP_MAX_REQS; i++)
        if (r->group[i] < 0) {
            r->group[i] = g;
            return i;
        }
    return -1;
}

int dp__reqs_done(struct dp__reqs *r, int id)
{
    if (id < 0 || id >= DP_MAX_REQS || r->group[id] < 0)
        return DP_EINVAL;
    r->group[id] = -1;
    return 0;
}

int dp__reqs_of_group(const struct dp__reqs *r, int g, int *ids)
{
    int n = 0;
    for (int i = 0; i < DP_MAX_REQS; i++)
        if (r->group[i] == g)
            ids[n++] = i;
    return n;
}
