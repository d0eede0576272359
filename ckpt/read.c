/*
 * Reading global tensors from a checkpoint's pieces (ckpt.h). Resume reads
 * only what each rank needs: for every local slice (and optimizer element)
 * it locates the global rows and columns in the pieces the manifest lists
 * and preads them, so any change of dp, tp, pp or ZeRO works and the same
 * layout restores every byte. Elements are bytes of the checkpoint's dtype;
 * nothing here does arithmetic on them.
 */
#include "ckpt.h"
#include "internal.h"

#include <stdio.h>
#include <string.h>

static int open_file(struct dp_ckpt *ck, int i, struct dp_err *err)
{
    struct dp_ckpt_file *f = &ck->files[i];
    if (f->open)
        return 0;
    char path[DP__PATHMAX + 80];
    snprintf(path, sizeof path, "%s/%s", ck->dir, f->name);
    int rc = dp_ckpt_st_open(path, &f->st, err);
    if (rc)
        return rc;
    f->open = true;
    if (f->st.size != f->bytes)
        return dp_err_set(err, DP_EINVAL, "%s: %lld bytes, the manifest says %lld", path,
                          (long long)f->st.size, (long long)f->bytes);
    return 0;
}

int dp__ckpt_resolve(struct dp_ckpt *ck, int i, const char *key, int64_t elems,
                     const struct dp_st_entry **out, struct dp_err *err)
{
    int rc = open_file(ck, i, err);
    if (rc)
        return rc;
    const struct dp_st_file *f = &ck->files[i].st;
    const struct dp_st_entry *e = dp_ckpt_st_find(f, key);
    if (!e)
        return dp_err_set(err, DP_EINVAL, "%s: tensor %s is missing", f->path, key);
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= e->shape[d];
    if (strcmp(e->dtype, ck->meta.dtype) || n != elems)
        return dp_err_set(err, DP_EINVAL,
                          "%s: tensor %s: %s with %lld elements, the manifest says %s with %lld",
                          f->path, key, e->dtype, (long long)n, ck->meta.dtype, (long long)elems);
    *out = e;
    return 0;
}

/*
 * Global row r, columns [c, c + n) of tensor t's state `kind` into dst, from every piece
 * that holds part of it; *got counts the elements found.
 */
static int fetch_row(struct dp_ckpt *ck, struct dp_ckpt_tensor *t, enum dp_ckpt_kind kind,
                     int64_t r, int64_t c, int64_t n, char *dst, int64_t *got, struct dp_err *err)
{
    const int64_t es = dp_ckpt_st_dtype_size(ck->meta.dtype);
    *got = 0;
    for (int j = 0; j < t->np; j++) {
        struct dp_ckpt_piece *p = &t->p[j];
        if (r < p->r0 || r >= p->r0 + p->rows)
            continue;
        int64_t lo = c > p->c0 ? c : p->c0;
        int64_t hi = c + n < p->c0 + p->cols ? c + n : p->c0 + p->cols;
        if (lo >= hi)
            continue;
        int64_t li = (r - p->r0) * p->cols + (lo - p->c0); /* element in the piece */
        char *out = dst + (lo - c) * es;
        int rc;
        if (kind == DP_CKPT_PARAM || !ck->meta.zero) {
            if (!p->e[kind]) {
                char key[128];
                snprintf(key, sizeof key, "%s%s", dp__ckpt_kind_prefix[kind], p->key);
                if ((rc = dp__ckpt_resolve(ck, p->file, key, p->rows * p->cols, &p->e[kind], err)))
                    return rc;
            }
            rc = dp_ckpt_st_pread(&ck->files[p->file].st, p->e[kind]->begin + li * es, out,
                                  (size_t)((hi - lo) * es), err);
            if (rc)
                return rc;
        } else {
            struct dp_ckpt_zgroup *g = &ck->g[p->group];
            int64_t flat = p->flat_off + li, left = hi - lo;
            while (left > 0) {
                int64_t k = flat / g->shard_elems, o = flat % g->shard_elems;
                int64_t take = g->shard_elems - o < left ? g->shard_elems - o : left;
                struct dp_ckpt_zshard *z = &g->s[k];
                if (!z->e[kind] && (rc = dp__ckpt_resolve(ck, z->file, dp__ckpt_zero_key[kind],
                                                          g->shard_elems, &z->e[kind], err)))
                    return rc;
                rc = dp_ckpt_st_pread(&ck->files[z->file].st, z->e[kind]->begin + o * es, out,
                                      (size_t)(take * es), err);
                if (rc)
                    return rc;
                out += take * es;
                flat += take;
                left -= take;
            }
        }
        *got += hi - lo;
    }
    return 0;
}

int dp_ckpt_read(struct dp_ckpt *ck, struct dp_ckpt_tensor *t, enum dp_ckpt_kind kind,
                 const struct dp_ckpt_slice *s, int64_t a, int64_t b, void *dst, struct dp_err *err)
{
    const int64_t es = dp_ckpt_st_dtype_size(ck->meta.dtype);
    char *out = dst;
    while (a < b) {
        int64_t i = a / s->cols, j = a % s->cols;
        int64_t n = s->cols - j < b - a ? s->cols - j : b - a;
        int64_t r = s->r0 + i, got = 0;
        memset(out, 0, (size_t)(n * es));
        int rc = fetch_row(ck, t, kind, r, s->c0 + j, n, out, &got, err);
        if (rc)
            return rc;
        if (got != n && r < t->rows)
            return dp_err_set(err, DP_EINVAL,
                              "%s: tensor %s: row %lld, columns %lld..%lld are not in the "
                              "checkpoint's shards",
                              ck->dir, t->name, (long long)r, (long long)(s->c0 + j),
                              (long long)(s->c0 + j + n - 1));
        out += n * es;
        a += n;
        if (!(a & 0xffff) && ck->on_progress)
            ck->on_progress();
    }
    return 0;
}

struct dp_ckpt_tensor *dp_ckpt_source(struct dp_ckpt *ck, const struct dp_ckpt_slice *s,
                                      struct dp_err *err)
{
    char nm[96];
    dp_ckpt_slice_key(s, nm, sizeof nm);
    const struct dp_ckpt_tensor *t = dp_ckpt_find(ck, nm);
    if (!t && s->tied_copy)
        t = dp_ckpt_find(ck, s->name); /* the copy is equal to the original */
    if (!t) {
        dp_err_set(err, DP_EINVAL, "%s: tensor %s is not in the checkpoint", ck->dir, s->name);
        return NULL;
    }
    if (t->cols != s->gcols || t->rows != s->out_rows) {
        dp_err_set(err, DP_EINVAL,
                   "%s: tensor %s: shape [%lld, %lld] in the checkpoint, [%lld, %lld] here",
                   ck->dir, s->name, (long long)t->rows, (long long)t->cols, (long long)s->out_rows,
                   (long long)s->gcols);
        return NULL;
    }
    return (struct dp_ckpt_tensor *)t;
}

int dp__ckpt_gather(struct dp_ckpt *ck, struct dp_ckpt_tensor *t, void *buf, struct dp_err *err)
{
    const int64_t es = dp_ckpt_st_dtype_size(ck->meta.dtype);
    for (int64_t r = 0; r < t->rows; r++) {
        int64_t got = 0;
        int rc = fetch_row(ck, t, DP_CKPT_PARAM, r, 0, t->cols, (char *)buf + r * t->cols * es,
                           &got, err);
        if (rc)
            return rc;
        if (got != t->cols)
            return dp_err_set(err, DP_EINVAL,
                              "%s: tensor %s: row %lld is not fully in the checkpoint's shards",
                              ck->dir, t->name, (long long)r);
    }
    return 0;
}
