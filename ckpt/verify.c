/*
 * Whether a checkpoint is whole and what it can resume (ckpt.h): its files
 * against the manifest (sizes, CRC32C), the manifest against the model it
 * names (every tensor listed, shards covering each exactly once, every entry
 * in its file), its fit with a run, and the listing `dplan ckpt info` and
 * the launcher use.
 */
#include "ckpt.h"
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int dp_ckpt_verify_file(const struct dp_ckpt *ck, int i, bool crc, struct dp_err *err)
{
    const struct dp_ckpt_file *f = &ck->files[i];
    char path[DP__PATHMAX + 80];
    snprintf(path, sizeof path, "%s/%s", ck->dir, f->name);
    struct stat st;
    if (stat(path, &st))
        return dp_err_set(err, DP_ENOENT, "%s: missing (%s)", path, strerror(errno));
    if (st.st_size != f->bytes)
        return dp_err_set(err, DP_EINVAL, "%s: %s: %lld bytes, the manifest says %lld", path,
                          st.st_size < f->bytes ? "truncated" : "wrong size", (long long)st.st_size,
                          (long long)f->bytes);
    if (!crc)
        return 0;
    uint32_t c;
    int64_t size;
    int rc = dp_ckpt_file_crc32c(path, &c, &size, err);
    if (rc)
        return rc;
    if (c != f->crc || size != f->bytes)
        return dp_err_set(err, DP_EINVAL,
                          "%s: checksum mismatch: crc32c 0x%08x, the manifest says 0x%08x", path, c,
                          f->crc);
    return 0;
}

/* The shards of tensor x cover its rows [0, rows) x [0, cols) exactly once (padded
 * vocabulary rows may be absent). */
static int shards_cover(const char *mf, const struct dp_ckpt_tensor *x, struct dp_err *err)
{
    int64_t area = 0;
    for (int j = 0; j < x->np; j++) {
        const struct dp_ckpt_piece *p = &x->p[j];
        int64_t r1 = p->r0 + p->rows < x->rows ? p->r0 + p->rows : x->rows;
        if (r1 > p->r0)
            area += (r1 - p->r0) * p->cols;
        for (int k = 0; k < j; k++) {
            const struct dp_ckpt_piece *q = &x->p[k];
            if (p->r0 < q->r0 + q->rows && q->r0 < p->r0 + p->rows && p->c0 < q->c0 + q->cols &&
                q->c0 < p->c0 + p->cols)
                return dp_err_set(err, DP_EINVAL, "%s: tensor %s: shards %d and %d overlap", mf,
                                  x->name, k, j);
        }
    }
    if (area != x->rows * x->cols)
        return dp_err_set(err, DP_EINVAL,
                          "%s: tensor %s: its shards hold %lld of its %lld elements", mf, x->name,
                          (long long)area, (long long)(x->rows * x->cols));
    return 0;
}

int dp_ckpt_verify_structure(struct dp_ckpt *ck, int rank, int nranks, int *bad_file,
                             struct dp_err *err)
{
    *bad_file = -1;
    char mf[DP__PATHMAX + 32];
    dp__ckpt_manifest_path(mf, sizeof mf, ck->dir);
    const struct dp_ckpt_meta *mt = &ck->meta;
    struct dp_err e = {0};
    if (dp_layout_validate(&mt->layout, &mt->model, 0, &e))
        return dp_err_set(err, DP_EINVAL, "%s: layout: %s", mf, e.msg);
    int rc = 0;
    char nm[96];
    for (int st = 0; st < mt->layout.pp && !rc; st++) {
        struct dp_ckpt_slice *sl = NULL;
        int ns = 0;
        if ((rc = dp_ckpt_stage_slices(&mt->model, &mt->layout, st, 0, &sl, &ns, err)))
            return rc;
        for (int i = 0; i < ns && !rc; i++) {
            const struct dp_ckpt_slice *sg = &sl[i];
            dp_ckpt_slice_key(sg, nm, sizeof nm);
            const struct dp_ckpt_tensor *x = dp_ckpt_find(ck, nm);
            if (!x)
                rc = dp_err_set(err, DP_EINVAL,
                                "%s: the manifest lacks tensor %s [%lld, %lld] of model %s", mf, nm,
                                (long long)sg->out_rows, (long long)sg->gcols, mt->model.name);
            else if (x->rows != sg->out_rows || x->cols != sg->gcols)
                rc = dp_err_set(err, DP_EINVAL,
                                "%s: tensor %s: shape [%lld, %lld] in the manifest, model %s has "
                                "[%lld, %lld]",
                                mf, nm, (long long)x->rows, (long long)x->cols, mt->model.name,
                                (long long)sg->out_rows, (long long)sg->gcols);
            else
                rc = shards_cover(mf, x, err);
        }
        free(sl);
    }
    char key[128];
    for (int i = 0; i < ck->nt && !rc; i++)
        for (int j = 0; j < ck->t[i].np && !rc; j++) {
            struct dp_ckpt_piece *p = &ck->t[i].p[j];
            if (p->file % nranks != rank)
                continue;
            for (int k = 0; k < (mt->zero ? 1 : 3) && !rc; k++) {
                snprintf(key, sizeof key, "%s%s", dp__ckpt_kind_prefix[k], p->key);
                if ((rc = dp__ckpt_resolve(ck, p->file, key, p->rows * p->cols, &p->e[k], err)))
                    *bad_file = p->file;
            }
        }
    for (int g = 0; g < ck->ng && !rc; g++)
        for (int j = 0; j < ck->g[g].n && !rc; j++) {
            struct dp_ckpt_zshard *z = &ck->g[g].s[j];
            if (z->file % nranks != rank)
                continue;
            for (int k = DP_CKPT_EXP_AVG; k <= DP_CKPT_EXP_AVG_SQ && !rc; k++)
                if ((rc = dp__ckpt_resolve(ck, z->file, dp__ckpt_zero_key[k], ck->g[g].shard_elems,
                                           &z->e[k], err)))
                    *bad_file = z->file;
        }
    /* A file whose header does not parse or lacks an entry may simply be corrupted: its
     * checksum says so more plainly. */
    struct dp_err ce = {0};
    if (rc && *bad_file >= 0 && dp_ckpt_verify_file(ck, *bad_file, true, &ce)) {
        dp_err_clear(err);
        rc = dp_err_set(err, ce.code, "%s", ce.msg);
    }
    return rc;
}

void dp_ckpt_incompatibility(const struct dp_ckpt *ck, const struct dp_model *b,
                             const struct dp_layout *l, const char *dtype, char *why, size_t cap)
{
    const struct dp_model *a = &ck->meta.model;
    char d[768] = "";
#define DIFF_I(f)                                                                                  \
    if (a->f != b->f)                                                                              \
        snprintf(d + strlen(d), sizeof d - strlen(d), "%s%s %lld vs %lld", *d ? ", " : "", #f,     \
                 (long long)a->f, (long long)b->f);
#define DIFF_S(f, name, fn)                                                                        \
    if (a->f != b->f)                                                                              \
        snprintf(d + strlen(d), sizeof d - strlen(d), "%s%s %s vs %s", *d ? ", " : "", name,       \
                 fn(a->f), fn(b->f));
    DIFF_I(layers);
    DIFF_I(hidden);
    DIFF_I(heads);
    DIFF_I(kv_heads);
    DIFF_I(head_dim);
    DIFF_I(ffn_hidden);
    DIFF_I(vocab);
    DIFF_S(ffn, "ffn", dp_ffn_name);
    DIFF_S(norm, "norm", dp_norm_name);
    DIFF_S(pos, "position", dp_pos_name);
    if (a->pos == DP_POS_LEARNED && b->pos == DP_POS_LEARNED)
        DIFF_I(max_pos);
    DIFF_I(tied_embeddings);
    DIFF_I(qkv_bias);
    DIFF_I(out_bias);
    DIFF_I(mlp_bias);
    /* Mixture of experts: a checkpoint with experts resumed without them, or the reverse,
     * or with other experts, holds other tensors. */
    DIFF_I(experts);
    if (a->experts > 0 && b->experts > 0) {
        DIFF_I(top_k);
        DIFF_I(moe_ffn_hidden);
        DIFF_I(moe_shared_experts);
        DIFF_I(moe_shared_ffn_hidden);
        DIFF_I(moe_dense_layers);
    }
#undef DIFF_I
#undef DIFF_S
    why[0] = '\0';
    if (*d) {
        snprintf(why, cap,
                 "%s: written for model %s, which differs from this run's %s: %s (checkpoint vs "
                 "this run)",
                 ck->dir, a->name, b->name, d);
    } else if (strcmp(ck->meta.dtype, dtype)) {
        snprintf(why, cap, "%s: tensors are %s, this executor computes in %s", ck->dir,
                 ck->meta.dtype, dtype);
    } else if (ck->meta.gbs != l->gbs || ck->meta.seq_len != l->seq_len) {
        snprintf(why, cap,
                 "%s: written with gbs=%lld seq_len=%lld, this run has gbs=%lld seq_len=%lld: "
                 "the data position does not carry over (keep gbs and seq_len when changing "
                 "the layout)",
                 ck->dir, (long long)ck->meta.gbs, (long long)ck->meta.seq_len, (long long)l->gbs,
                 (long long)l->seq_len);
    }
}

int dp_ckpt_check_resume(const char *dir, const struct dp_model *m, const struct dp_layout *l,
                         const char *dtype, struct dp_err *err)
{
    if (!dp__ckpt_is_dir(dir))
        return dp_err_set(err, DP_ENOENT, "--resume %s: no such directory", dir);
    int *steps = NULL, n = 0;
    bool single = false;
    if (dp_ckpt_candidates(dir, &steps, &n, &single))
        return dp_err_set(err, DP_EIO, "%s: cannot list: %s", dir, strerror(errno));
    int rc = DP_ENOENT;
    char why[1200] = "", damaged[900] = "";
    int ndamaged = 0;
    for (int i = 0; i < n && rc == DP_ENOENT; i++) {
        char path[DP__PATHMAX];
        dp_ckpt_candidate_path(path, sizeof path, dir, single, steps[i]);
        struct dp_ckpt ck;
        struct dp_err e = {0};
        bool ok = dp_ckpt_open(path, &ck, &e) == 0;
        if (ok) {
            for (int f = 0; f < ck.nfiles && ok; f++)
                ok = dp_ckpt_verify_file(&ck, f, false, &e) == 0;
            if (ok)
                dp_ckpt_incompatibility(&ck, m, l, dtype, why, sizeof why);
            /* An incompatible checkpoint stops the search: its reason is the answer. */
            int bf;
            if (ok && !*why)
                ok = dp_ckpt_verify_structure(&ck, 0, 1, &bf, &e) == 0;
            dp_ckpt_close(&ck);
        }
        if (ok) {
            rc = *why ? dp_err_set(err, DP_EINVAL, "%s", why) : 0;
        } else if (single) {
            rc = dp_err_set(err, DP_EINVAL, "--resume %s: the checkpoint is damaged: %s", dir,
                            e.msg);
        } else if (ndamaged++ < 3) {
            /* What is wrong with each (the newest three), for the message below. */
            size_t k = strlen(damaged);
            snprintf(damaged + k, sizeof damaged - k, "%sstep_%08d: %s", k ? "; " : "", steps[i],
                     e.msg);
        }
    }
    free(steps);
    if (rc == DP_ENOENT && ndamaged)
        rc = dp_err_set(err, DP_ENOENT, "--resume %s: no complete checkpoint: %s%s", dir, damaged,
                        ndamaged > 3 ? "; and older ones" : "");
    else if (rc == DP_ENOENT)
        rc = dp_err_set(err, DP_ENOENT,
                        "--resume %s: no complete checkpoint (no step_N directory with a "
                        "manifest)",
                        dir);
    return rc;
}

/* ------------------------------------------------------------------ listing */

static void info_fill(struct dp_ckpt_info *in, const struct dp_ckpt *ck)
{
    const struct dp_ckpt_meta *mt = &ck->meta;
    in->step = mt->step;
    in->steps = mt->steps;
    snprintf(in->model, sizeof in->model, "%s", mt->model.name);
    dp_layout_format(&mt->layout, in->layout, sizeof in->layout);
    in->world = mt->world;
    in->nfiles = ck->nfiles;
    in->bytes = 0;
    for (int i = 0; i < ck->nfiles; i++)
        in->bytes += ck->files[i].bytes;
    snprintf(in->saved_at, sizeof in->saved_at, "%s", mt->saved_at);
}

void dp__ckpt_check_one(const char *path, int step, bool verify, struct dp_ckpt_info *in)
{
    memset(in, 0, sizeof *in);
    snprintf(in->path, sizeof in->path, "%s", path);
    in->step = step;
    in->verified = verify;
    struct dp_ckpt ck;
    struct dp_err e = {0};
    if (dp_ckpt_open(path, &ck, &e)) {
        in->state = DP_CKPT_DAMAGED;
        snprintf(in->problem, sizeof in->problem, "%s", e.msg);
        return;
    }
    info_fill(in, &ck);
    if (step >= 0 && ck.meta.step != step) {
        in->state = DP_CKPT_DAMAGED;
        snprintf(in->problem, sizeof in->problem, "the manifest says step %d, the directory %d",
                 ck.meta.step, step);
    }
    for (int i = 0; i < ck.nfiles && in->state == DP_CKPT_OK; i++)
        if (dp_ckpt_verify_file(&ck, i, verify, &e)) {
            in->state = DP_CKPT_DAMAGED;
            snprintf(in->problem, sizeof in->problem, "%s", e.msg);
        }
    int bf;
    if (in->state == DP_CKPT_OK && dp_ckpt_verify_structure(&ck, 0, 1, &bf, &e)) {
        in->state = DP_CKPT_DAMAGED;
        snprintf(in->problem, sizeof in->problem, "%s", e.msg);
    }
    dp_ckpt_close(&ck);
}

int dp_ckpt_list(const char *dir, bool verify, struct dp_ckpt_info **out, int *n,
                 struct dp_err *err)
{
    *out = NULL;
    *n = 0;
    if (!dp__ckpt_is_dir(dir))
        return dp_err_set(err, DP_ENOENT, "%s: no such directory", dir);
    if (dp_ckpt_is_one(dir)) {
        *out = calloc(1, sizeof **out);
        if (!*out)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        dp__ckpt_check_one(dir, -1, verify, *out);
        *n = 1;
        return 0;
    }
    struct dp_ckpt_entry *e;
    int ne;
    if (dp_ckpt_scan(dir, &e, &ne))
        return dp_err_set(err, DP_EIO, "%s: cannot list: %s", dir, strerror(errno));
    *out = calloc((size_t)(ne ? ne : 1), sizeof **out);
    if (!*out) {
        free(e);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    for (int i = 0; i < ne; i++) {
        struct dp_ckpt_info *in = &(*out)[(*n)++];
        char p[DP__PATHMAX + 16];
        if (e[i].kind == DP_CKPT_E_PUBLISHED) {
            dp_ckpt_step_path(p, sizeof p, dir, e[i].step, "");
            dp__ckpt_check_one(p, e[i].step, verify, in);
            continue;
        }
        bool tmp = e[i].kind == DP_CKPT_E_TMP;
        memset(in, 0, sizeof *in);
        dp_ckpt_step_path(in->path, sizeof in->path, dir, e[i].step, tmp ? ".tmp" : ".superseded");
        in->step = e[i].step;
        in->state = tmp ? DP_CKPT_UNPUBLISHED : DP_CKPT_SUPERSEDED;
        snprintf(in->problem, sizeof in->problem, "%s",
                 tmp ? "a save that did not finish (ignored)"
                     : "newer than a checkpoint a later run resumed from (ignored; kept for "
                       "inspection)");
    }
    free(e);
    return 0;
}

bool dp_ckpt_newest(const char *dir, struct dp_ckpt_info *out)
{
    struct dp_ckpt_info *list;
    int n;
    struct dp_err e = {0};
    if (!dir || dp_ckpt_list(dir, false, &list, &n, &e))
        return false;
    bool found = false;
    for (int i = n - 1; i >= 0 && !found; i--)
        if (list[i].state == DP_CKPT_OK) {
            *out = list[i];
            found = true;
        }
    free(list);
    return found;
}
