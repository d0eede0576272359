/*
 * Checkpoints, rank side: every rank's state saved with ckpt/'s atomic
 * commit (ckpt.h has the layout and the protocol). Each rank writes and
 * fsyncs its rank_%05d.safetensors into step_N.tmp; rank 0 gathers the sizes
 * and CRC32Cs, writes the manifest and publishes the directory with one
 * rename, then prunes. It does not decide when a run restarts (the launcher
 * does) and never prints: events go to the caller's callback.
 *
 * What a rank writes: the ranks of DP replica 0 their weight slices, each
 * TP-split tensor by every TP rank and each replicated one by TP rank 0, so
 * every global element is stored once; without ZeRO the same ranks write
 * AdamW m and v per tensor, with ZeRO-1 every rank its flat shard.
 */
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void dp_ckpt_opts_default(struct dp_ckpt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->interval_s = 120 * 60.0;
    o->keep = 3;
}

double dp__mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void utc_now(char *buf, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Does this rank store weight slice `s`? (DP replica 0 of CP rank 0; replicated tensors on
 * TP rank 0; a routed expert's slices on expert-data-parallel rank 0, which holds each
 * (expert, expert tensor slice) once, backend/groups.h.) */
static bool rank_stores(const struct dp_exec *ex, const struct dp_ckpt_slice *s)
{
    const struct dp_coords *c = &ex->c;
    if (s->expert >= 0)
        return ex->dm.edp_rank == 0;
    return c->dp_rank == 0 && c->cp_rank == 0 && (dp_ckpt_slice_split(s) || c->tp_rank == 0);
}

void dp__ckpt_emit(const struct dp_exec *ex, enum dp_ckpt_event_kind kind, int step,
                   const char *path, const char *msg, int64_t bytes, double secs,
                   const char *saved_at)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    if (!ck->on_event)
        return;
    struct dp_ckpt_event ev = {.kind = kind,
                               .rank = ex->rank,
                               .step = step,
                               .path = path,
                               .msg = msg,
                               .bytes = bytes,
                               .seconds = secs,
                               .saved_at = saved_at};
    ck->on_event(&ev, ck->ctx);
}

/* This rank's own write failed (every rank that fails says which file and why). */
static void emit_local_failure(const struct dp_exec *ex, int step, const char *path,
                               const char *msg)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    struct dp_ckpt_event ev = {.kind = DP_CKPT_SAVE_FAILED,
                               .rank = ex->rank,
                               .step = step,
                               .path = path,
                               .msg = msg,
                               .local = true};
    if (ck->on_event)
        ck->on_event(&ev, ck->ctx);
}

uint32_t dp__ckpt_data_crc(struct dp_exec *ex)
{
    if (!ex->ck->data_crc_done) {
        const struct dp_tokens *d = ex->o.data;
        ex->ck->data_crc = dp_ckpt_crc32c(0, d->tok, (size_t)d->n * sizeof(uint16_t));
        ex->ck->data_crc_done = true;
    }
    return ex->ck->data_crc;
}

/* ------------------------------------------------------------------ one rank's file */

struct item {
    struct dp_st_tensor t;
    const real *src; /* device buffer */
};

static int add_item(struct item *it, int *n, const char *prefix, const char *name, int ndim,
                    int64_t rows, int64_t cols, const real *src)
{
    struct item *x = &it[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->t.key, sizeof x->t.key, "%s%s", prefix, name);
    x->t.dtype = DP__DTYPE;
    x->t.ndim = ndim;
    x->t.shape[0] = rows;
    x->t.shape[1] = cols;
    x->t.bytes = rows * (ndim == 2 ? cols : 1) * (int64_t)sizeof(real);
    x->src = src;
    return 0;
}

static int write_rank_file(struct dp_exec *ex, const char *tmpdir, int step, uint32_t *crc,
                           int64_t *size, struct dp_err *err)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    bool zero = ex->l.zero >= 1 && !ex->zsplit; /* two groups: m and v per tensor (save) */
    struct item *it = calloc((size_t)(3 * ex->nsegs + 2), sizeof *it);
    if (!it)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    static const char *const prefix[3] = {"", "exp_avg.", "exp_avg_sq."};
    int n = 0;
    char nm[96];
    for (int k = 0; k < 3; k++) {
        if (k > 0 && zero)
            break;
        for (int i = 0; i < ex->nsegs; i++) {
            const struct dp_seg *s = &ex->segs[i];
            if (!rank_stores(ex, &s->t))
                continue;
            dp_ckpt_slice_key(&s->t, nm, sizeof nm);
            const real *base = k == 0 ? ex->params : k == 1 ? ex->adam_m : ex->adam_v;
            add_item(it, &n, prefix[k], nm, s->t.gcols > 1 ? 2 : 1, s->t.rows, s->t.cols,
                     base + s->off);
        }
    }
    if (zero) {
        add_item(it, &n, "", "exp_avg", 1, (int64_t)ex->shard, 1, ex->adam_m);
        add_item(it, &n, "", "exp_avg_sq", 1, (int64_t)ex->shard, 1, ex->adam_v);
    }
    struct dp_st_tensor *hdr_t = calloc((size_t)(n ? n : 1), sizeof *hdr_t);
    char sstep[32], srank[16], stp[16], sdp[16], spp[16], sworld[16], sseed[32], slay[192];
    snprintf(sstep, sizeof sstep, "%d", step);
    snprintf(srank, sizeof srank, "%d", ex->rank);
    snprintf(stp, sizeof stp, "%d", ex->c.tp_rank);
    snprintf(sdp, sizeof sdp, "%d", ex->c.dp_rank);
    snprintf(spp, sizeof spp, "%d", ex->c.pp_rank);
    snprintf(sworld, sizeof sworld, "%d", ex->world);
    snprintf(sseed, sizeof sseed, "%llu", (unsigned long long)ex->o.seed);
    dp_layout_format(&ex->l, slay, sizeof slay);
    const char *meta[] = {"format",
                          "pt",
                          "producer",
                          "dplan run (checkpoint)",
                          "dplan_checkpoint",
                          "1",
                          "step",
                          sstep,
                          "rank",
                          srank,
                          "tp_rank",
                          stp,
                          "dp_rank",
                          sdp,
                          "pp_rank",
                          spp,
                          "world_size",
                          sworld,
                          "seed",
                          sseed,
                          "layout",
                          slay,
                          "optimizer_state",
                          zero ? "zero1_flat" : "per_tensor",
                          NULL};
    size_t hlen = 0;
    char *hdr = NULL;
    int rc = 0;
    if (hdr_t) {
        for (int i = 0; i < n; i++)
            hdr_t[i] = it[i].t;
        hdr = dp_ckpt_st_header(hdr_t, n, meta, &hlen);
    }
    free(hdr_t);
    if (!hdr) {
        free(it);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    int64_t total = 8 + (int64_t)hlen;
    size_t maxb = 0;
    for (int i = 0; i < n; i++) {
        total += it[i].t.bytes;
        maxb = (size_t)it[i].t.bytes > maxb ? (size_t)it[i].t.bytes : maxb;
    }
    /* Stage through host memory one piece at a time (at most 64 MiB). */
    size_t chunk = maxb < (64u << 20) ? maxb : (64u << 20);
    char *stage = malloc(chunk ? chunk : 1);
    char path[DP__EXEC_PATHMAX + 64];
    snprintf(path, sizeof path, "%s/rank_%05d.safetensors", tmpdir, ex->rank);
    struct dp_st_writer w;
    if (!stage) {
        free(hdr);
        free(it);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    rc = dp_ckpt_st_create(&w, path, err);
    if (!rc && ck->fault != DP_CKPT_FAULT_NONE && ck->fault_rank == ex->rank &&
        ck->fault_step == step) {
        w.fault = ck->fault == DP_CKPT_FAULT_CRASH ? DP_ST_FAULT_CRASH : DP_ST_FAULT_ENOSPC;
        w.fault_at = total / 2;
    }
    if (!rc) {
        rc = dp_ckpt_st_write_header(&w, hdr, hlen);
        for (int i = 0; i < n && !rc; i++) {
            size_t done = 0, bytes = (size_t)it[i].t.bytes;
            while (done < bytes && !rc) {
                size_t k = bytes - done < chunk ? bytes - done : chunk;
                OPS->download(ex->be, stage, (const char *)it[i].src + done, k);
                rc = dp_ckpt_st_write(&w, stage, k);
                done += k;
            }
            dp__beat(NULL);
        }
        if (!rc)
            rc = dp_ckpt_st_finish(&w, true);
        else
            dp_ckpt_st_abandon(&w);
    }
    if (!rc) {
        *crc = w.crc;
        *size = w.bytes;
    }
    free(stage);
    free(hdr);
    free(it);
    return rc;
}

/* ------------------------------------------------------------------ the commit */

/* Rank 0: the manifest of this save, then the rename that publishes it.
 * all[3 r + {0,1,2}] = failed, crc, size of rank r's file. */
static int publish(struct dp_exec *ex, int step, const char *tmp, const char *final,
                   const double *all, const char *saved_at, struct dp_err *err)
{
    const struct dp_exec_opts *o = &ex->o;
    struct dp_ckpt_meta *mt = calloc(1, sizeof *mt);
    struct dp_ckpt_rank_file *files = calloc((size_t)ex->world, sizeof *files);
    if (!mt || !files) {
        free(mt);
        free(files);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    mt->step = step;
    mt->steps = o->steps;
    mt->world = ex->world;
    snprintf(mt->saved_at, sizeof mt->saved_at, "%s", saved_at);
    snprintf(mt->dtype, sizeof mt->dtype, "%s", DP__DTYPE);
    mt->model = *ex->m;
    mt->layout = ex->l;
    mt->adam_step = (int64_t)ex->adam_t;
    if (ex->dtype == DP_DT_FP16) { /* the scale the next step uses, after this one's update */
        mt->loss_scale = ex->ls_scale;
        mt->loss_scale_growth = ex->ls_growth;
        mt->loss_scale_hysteresis = ex->ls_hyst;
    }
    /* Every stage keeps ZeRO-1's flat shards (shard.c); with two parameter groups
     * (experts under ep > 1) the state is written per tensor ("per_tensor"), which any
     * layout reads, rather than as a second flat geometry in the manifest. */
    mt->zero = ex->l.zero >= 1 && !ex->zsplit;
    mt->lr = o->lr;
    mt->warmup = o->warmup_steps;
    mt->min_lr_frac = o->min_lr_frac;
    mt->wd = o->weight_decay;
    mt->beta1 = o->beta1;
    mt->beta2 = o->beta2;
    mt->eps = o->eps;
    mt->clip = o->grad_clip;
    snprintf(mt->data_source, sizeof mt->data_source, "%s", o->data->source);
    mt->data_tokens = o->data->n;
    mt->data_crc = dp__ckpt_data_crc(ex);
    mt->gbs = ex->l.gbs;
    mt->seq_len = ex->l.seq_len;
    mt->seed = o->seed;
    for (int r = 0; r < ex->world; r++) {
        files[r].crc = (uint32_t)all[3 * r + 1];
        files[r].bytes = (int64_t)all[3 * r + 2];
    }
    cJSON *man = dp_ckpt_manifest_json(mt, files, err);
    free(mt);
    free(files);
    if (!man)
        return err->code ? err->code : dp_err_set(err, DP_ENOMEM, "out of memory");
    char *text = cJSON_Print(man);
    cJSON_Delete(man);
    if (!text)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int rc = dp_ckpt_publish(ex->o.ckpt->dir, tmp, final, text, err);
    free(text);
    return rc;
}

static int save(struct dp_exec *ex, int step)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    char final[DP__EXEC_PATHMAX], tmp[DP__EXEC_PATHMAX + 8], saved_at[32];
    dp_ckpt_step_path(final, sizeof final, ck->dir, step, "");
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    double t0 = dp__mono_s();
    struct dp_err lerr = {0};
    int rc;
    dp__beat("checkpoint");
    double flag = 0;
    if (ex->rank == 0) {
        dp__ckpt_data_crc(ex);
        flag = dp_ckpt_prepare(ck->dir, tmp, &ex->ck->cleaned, &lerr) ? 1 : 0;
    }
    if ((rc = OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &flag, 1, DP_OP_MAX, ex->err)))
        return rc;
    ex->ck->saves_tried++;
    if (flag) {
        if (ex->rank == 0)
            dp__ckpt_emit(ex, DP_CKPT_SAVE_FAILED, step, final, lerr.msg, 0, 0, NULL);
        ex->ck->last_save_s = dp__mono_s();
        return 0;
    }
    uint32_t crc = 0;
    int64_t size = 0;
    double published = 0;
    /* ZeRO-3: the parameters gathered for the writers (every rank: a collective). */
    if ((rc = dp__shard_full(ex)))
        return rc;
    /* Two ZeRO groups: m and v gathered whole for the per-tensor writers (a collective). */
    real *sm = ex->adam_m, *sv = ex->adam_v;
    if (ex->zsplit && (rc = dp__shard_state_full(ex, &ex->adam_m, &ex->adam_v)))
        return rc;
    int wrc = write_rank_file(ex, tmp, step, &crc, &size, &lerr);
    if (ex->zsplit) {
        OPS->free(ex->be, ex->adam_m);
        OPS->free(ex->be, ex->adam_v);
        ex->adam_m = sm;
        ex->adam_v = sv;
    }
    dp__shard_drop(ex);
    if (wrc)
        emit_local_failure(ex, step, final, lerr.msg);
    double mine[3] = {wrc ? 1.0 : 0.0, (double)crc, (double)size}, *all = NULL;
    if (ex->rank == 0 && !(all = malloc((size_t)ex->world * 3 * sizeof *all)))
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    dp__beat("checkpoint commit");
    rc = OPS->gather_host(ex->be, DP_GROUP_WORLD, mine, all, 3, ex->err);
    if (!rc && ex->rank == 0) {
        char failed[256] = "";
        int nfail = 0;
        int64_t bytes = 0;
        for (int r = 0; r < ex->world; r++) {
            bytes += (int64_t)all[3 * r + 2];
            if (all[3 * r] != 0 && nfail++ < 8) {
                size_t k = strlen(failed);
                snprintf(failed + k, sizeof failed - k, "%s%d", k ? ", " : "", r);
            }
        }
        struct dp_err perr = {0};
        utc_now(saved_at, sizeof saved_at);
        if (!nfail && !publish(ex, step, tmp, final, all, saved_at, &perr)) {
            dp_ckpt_prune(ck->dir, step, ck->keep);
            dp__ckpt_emit(ex, DP_CKPT_SAVED, step, final, NULL, bytes, dp__mono_s() - t0, saved_at);
            published = 1;
        } else {
            char msg[1200];
            if (nfail)
                snprintf(msg, sizeof msg, "the save failed on rank%s %s (see %s)",
                         nfail > 1 ? "s" : "", failed,
                         nfail > 1 ? "their messages" : "its message");
            else
                snprintf(msg, sizeof msg, "%s", perr.msg);
            dp_ckpt_remove(tmp);
            dp__ckpt_emit(ex, DP_CKPT_SAVE_FAILED, step, final, msg, 0, 0, NULL);
        }
    }
    free(all);
    /* Rank 0's verdict to every rank, so that all count the saves alike. */
    if (!rc)
        rc = OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &published, 1, DP_OP_MAX, ex->err);
    if (!rc && published > 0)
        ex->ck->saves_ok++;
    ex->ck->last_save_s = dp__mono_s();
    dp__beat(NULL);
    return rc;
}

int dp__ckpt_state(struct dp_exec *ex)
{
    if (!ex->ck) {
        ex->ck = calloc(1, sizeof *ex->ck);
        if (!ex->ck)
            return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
        ex->ck->last_save_s = dp__mono_s();
    }
    return 0;
}

int dp__ckpt_after_step(struct dp_exec *ex, int step)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    if (!ck || !ck->dir)
        return 0;
    int rc = dp__ckpt_state(ex);
    if (rc)
        return rc;
    bool due = (ck->every > 0 && step % ck->every == 0) || step == ex->o.steps;
    if (!due && ck->interval_s > 0) {
        /* Rank 0's clock decides, so that every rank saves at the same step. */
        double flag = ex->rank == 0 && dp__mono_s() - ex->ck->last_save_s >= ck->interval_s;
        if ((rc = OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &flag, 1, DP_OP_MAX, ex->err)))
            return rc;
        due = flag > 0;
    }
    return due ? save(ex, step) : 0;
}

void dp__ckpt_counts(const struct dp_exec *ex, int *tried, int *saved)
{
    *tried = ex->ck ? ex->ck->saves_tried : 0;
    *saved = ex->ck ? ex->ck->saves_ok : 0;
}

int dp__ckpt_check_dir(struct dp_exec *ex)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    if (!ck || !ck->dir)
        return 0;
    /* Rank 0 creates it (mkdir's errno, err NULL: dp_mkdirs leaves errno as mkdir set it). */
    double code = 0;
    if (ex->rank == 0 && dp_mkdirs(ck->dir, NULL))
        code = errno ? errno : EIO;
    TRY(OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &code, 1, DP_OP_MAX, ex->err));
    if (code > 0)
        return dp_err_set(ex->err, DP_EIO,
                          "--ckpt-dir %s: cannot create directory: %s (checked before the first "
                          "step)",
                          ck->dir, strerror((int)code));
    /* Every rank writes its file there (into step_N.tmp/): each creates and deletes a probe.
     * The failing rank with the largest errno is reported: errno * 2^24 + rank. */
    char probe[DP__EXEC_PATHMAX + 32];
    snprintf(probe, sizeof probe, "%s/.dplan-probe-rank_%05d", ck->dir, ex->rank);
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int e = fd < 0 ? errno : 0;
    if (fd >= 0) {
        if (write(fd, "", 1) != 1)
            e = errno ? errno : EIO;
        if (close(fd) && !e)
            e = errno ? errno : EIO;
        unlink(probe);
    }
    double bad = e ? (double)e * 16777216.0 + ex->rank : 0;
    TRY(OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &bad, 1, DP_OP_MAX, ex->err));
    if (bad > 0)
        return dp_err_set(ex->err, DP_EIO,
                          "--ckpt-dir %s: rank %d cannot write a file into it: %s (checked "
                          "before the first step)",
                          ck->dir, (int)fmod(bad, 16777216.0), strerror((int)(bad / 16777216.0)));
    return 0;
}

void dp__ckpt_free(struct dp_exec *ex)
{
    free(ex->ck);
    ex->ck = NULL;
}
