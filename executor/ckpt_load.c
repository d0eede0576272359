/*
 * Checkpoints, rank side: resuming from the newest complete checkpoint under
 * --resume, under the same or another layout. Rank 0's list decides which
 * checkpoint every rank tries; the ranks split the verification (the
 * manifest against the model, every file's entries and CRC32C) and agree on
 * the verdict, falling back to an older checkpoint when one is damaged; then
 * each rank reads exactly its slices (ckpt/read.c).
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void progress(void)
{
    dp__beat(NULL);
}

static int load_state(struct dp_exec *ex, struct dp_ckpt *s)
{
    struct dp_err *err = ex->err;
    bool zero = ex->l.zero >= 1;
    size_t maxn = 0;
    for (int i = 0; i < ex->nsegs; i++) {
        size_t k = (size_t)(ex->segs[i].t.rows * ex->segs[i].t.cols);
        maxn = k > maxn ? k : maxn;
    }
    if (zero && ex->shard > maxn)
        maxn = ex->shard;
    real *buf = malloc((maxn ? maxn : 1) * sizeof(real));
    if (!buf)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int rc = 0;
    dp__beat("loading checkpoint");
    /* Weights: every rank its whole slice; without ZeRO also m and v of the slice. */
    for (int i = 0; i < ex->nsegs && !rc; i++) {
        const struct dp_seg *sg = &ex->segs[i];
        struct dp_ckpt_tensor *t = dp_ckpt_source(s, &sg->t, err);
        if (!t) {
            rc = err->code;
            break;
        }
        int64_t n = sg->t.rows * sg->t.cols;
        for (int k = 0; k < (zero ? 1 : 3) && !rc; k++) {
            rc = dp_ckpt_read(s, t, (enum dp_ckpt_kind)k, &sg->t, 0, n, buf, err);
            real *base = k == DP_CKPT_PARAM     ? ex->params
                         : k == DP_CKPT_EXP_AVG ? ex->adam_m
                                                : ex->adam_v;
            size_t lo, hi;
            /* ZeRO-3: only the part in this rank's shard is kept. */
            if (!rc && ex->l.zero >= 3 && dp__seg_in_shard(ex, sg, &lo, &hi))
                OPS->upload(ex->be, ex->pshard + dp__shard_idx(ex, sg, lo), buf + (lo - sg->off),
                            (hi - lo) * sizeof(real));
            else if (!rc && ex->l.zero < 3)
                OPS->upload(ex->be, base + sg->off, buf, (size_t)n * sizeof(real));
        }
    }
    /* ZeRO-1: m and v of this rank's shard [shard_off, shard_off + shard) of the flat buffer. */
    for (int k = DP_CKPT_EXP_AVG; zero && k <= DP_CKPT_EXP_AVG_SQ && !rc; k++) {
        memset(buf, 0, ex->shard * sizeof(real));
        for (int i = 0; i < ex->nsegs && !rc; i++) {
            const struct dp_seg *sg = &ex->segs[i];
            size_t lo, hi;
            if (!dp__seg_in_shard(ex, sg, &lo, &hi))
                continue;
            struct dp_ckpt_tensor *t = dp_ckpt_source(s, &sg->t, err);
            rc = t ? dp_ckpt_read(s, t, (enum dp_ckpt_kind)k, &sg->t, (int64_t)(lo - sg->off),
                                  (int64_t)(hi - sg->off), buf + dp__shard_idx(ex, sg, lo), err)
                   : err->code;
        }
        if (!rc)
            OPS->upload(ex->be, k == DP_CKPT_EXP_AVG ? ex->adam_m : ex->adam_v, buf,
                        ex->shard * sizeof(real));
    }
    free(buf);
    dp__beat(NULL);
    return rc;
}

/* Rank 0: what differs but does not stop the resume. */
static void notes(struct dp_exec *ex, const struct dp_ckpt *ck)
{
    const struct dp_exec_opts *o = &ex->o;
    char d[900] = "", msg[1200];
#define NOTE_D(f, name)                                                                            \
    if (ck->meta.f != (double)(o->name))                                                           \
        snprintf(d + strlen(d), sizeof d - strlen(d), "%s%s %g -> %g", *d ? ", " : "", #name,      \
                 (double)ck->meta.f, (double)(o->name));
    NOTE_D(lr, lr);
    NOTE_D(warmup, warmup_steps);
    NOTE_D(min_lr_frac, min_lr_frac);
    NOTE_D(wd, weight_decay);
    NOTE_D(beta1, beta1);
    NOTE_D(beta2, beta2);
    NOTE_D(eps, eps);
    NOTE_D(clip, grad_clip);
    if (ck->meta.step >= o->steps) {
        snprintf(msg, sizeof msg,
                 "the checkpoint is at step %d and this run has %d steps: nothing is left to "
                 "train (its weights are written as they are)",
                 ck->meta.step, o->steps);
        dp__ckpt_emit(ex, DP_CKPT_NOTE, ck->meta.step, ck->dir, msg, 0, 0, NULL);
    }
    if (ck->meta.steps != o->steps)
        snprintf(d + strlen(d), sizeof d - strlen(d), "%ssteps %d -> %d", *d ? ", " : "",
                 ck->meta.steps, o->steps);
#undef NOTE_D
    if (*d) {
        snprintf(msg, sizeof msg,
                 "training options differ from the checkpoint's (%s): the learning-rate "
                 "schedule continues with this run's",
                 d);
        dp__ckpt_emit(ex, DP_CKPT_NOTE, ck->meta.step, ck->dir, msg, 0, 0, NULL);
    }
    if (ck->meta.data_tokens != o->data->n || ck->meta.data_crc != dp__ckpt_data_crc(ex)) {
        snprintf(msg, sizeof msg,
                 "the data differs from the checkpoint's (%lld tokens of %s, crc32c 0x%08x; now "
                 "%lld tokens of %s): the batches of the remaining steps change",
                 (long long)ck->meta.data_tokens, ck->meta.data_source, ck->meta.data_crc,
                 (long long)o->data->n, o->data->source);
        dp__ckpt_emit(ex, DP_CKPT_NOTE, ck->meta.step, ck->dir, msg, 0, 0, NULL);
    }
}

int dp__ckpt_resume(struct dp_exec *ex, int *start, bool *collective)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    *start = 0;
    *collective = true;
    if (!ck || (!ck->resume && !ck->dir))
        return 0;
    int rc = dp__ckpt_state(ex); /* --ckpt-interval counts from here */
    if (rc || !ck->resume)
        return rc;
    int *steps = NULL, n = 0, skipped = 0;
    bool single = false;
    struct stat st;
    if (stat(ck->resume, &st) || !S_ISDIR(st.st_mode))
        return dp_err_set(ex->err, DP_ENOENT, "--resume %s: no such directory", ck->resume);
    if (dp_ckpt_candidates(ck->resume, &steps, &n, &single))
        return dp_err_set(ex->err, DP_EIO, "%s: cannot list: %s", ck->resume, strerror(errno));
    struct dp_ckpt s;
    memset(&s, 0, sizeof s);
    for (int ci = 0;; ci++) {
        /* Rank 0's list decides which checkpoint every rank tries. */
        double prop = ex->rank == 0 ? (ci < n ? steps[ci] + 1.0 : 0.0) : 0.0;
        if ((rc = OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &prop, 1, DP_OP_SUM, ex->err)))
            break;
        if (prop == 0) {
            rc = dp_err_set(ex->err, DP_ENOENT, "%s: no complete checkpoint to resume from%s",
                            ck->resume,
                            skipped ? " (every one found is damaged, see above)"
                                    : " (no step_N directory with a manifest)");
            break;
        }
        int step = (int)prop - 1;
        char path[DP__EXEC_PATHMAX];
        dp_ckpt_candidate_path(path, sizeof path, ck->resume, single, step);
        /* 0 good, 1 damaged (try an older one), 2 incompatible (stop). */
        struct dp_err lerr = {0};
        char why[1200] = "";
        double bad = dp_ckpt_open(path, &s, &lerr) ? 1 : 0;
        if (!bad && !single && s.meta.step != step) {
            dp_err_set(&lerr, DP_EINVAL, "%s: the manifest says step %d", path, s.meta.step);
            bad = 1;
        }
        if (!bad) {
            dp_ckpt_incompatibility(&s, ex->m, &ex->l, DP__DTYPE, why, sizeof why);
            bad = *why ? 2 : 0;
        }
        /* The manifest against the model, and the files' entries and checksums, split over
         * the ranks: badf is a damaged file this rank found. */
        int badf = -1;
        if (!bad)
            bad = dp_ckpt_verify_structure(&s, ex->rank, ex->world, &badf, &lerr) ? 1 : 0;
        for (int i = ex->rank; !bad && i < s.nfiles; i += ex->world) {
            dp__beat("verifying checkpoint");
            if (dp_ckpt_verify_file(&s, i, true, &lerr)) {
                bad = 1;
                badf = i;
            }
        }
        double all[2] = {bad, badf >= 0 ? s.nfiles - badf : 0};
        if ((rc = OPS->allreduce_host(ex->be, DP_GROUP_WORLD, all, 2, DP_OP_MAX, ex->err)))
            break;
        if (all[0] == 0)
            break;
        if (all[0] >= 2) {
            rc = dp_err_set(ex->err, DP_EINVAL, "%s", *why ? why : "incompatible checkpoint");
            break;
        }
        /* Rank 0 says what is wrong: its own finding, or that of the lowest damaged file
         * another rank found (checked again here, that file only). */
        if (ex->rank == 0 && !bad && all[1] > 0) {
            int f = s.nfiles - (int)all[1], bf;
            if (!dp_ckpt_verify_file(&s, f, true, &lerr))
                dp_ckpt_verify_structure(&s, f, s.nfiles, &bf, &lerr);
        }
        if (ex->rank == 0 && !single)
            dp__ckpt_emit(ex, DP_CKPT_SKIPPED, step, path, lerr.msg[0] ? lerr.msg : "damaged", 0, 0,
                          NULL);
        skipped++;
        dp_ckpt_close(&s);
        if (single) {
            rc = dp_err_set(ex->err, DP_EINVAL, "%s: the checkpoint is damaged: %s", path,
                            lerr.msg[0] ? lerr.msg : "see the messages above");
            break;
        }
    }
    free(steps);
    if (rc) {
        dp_ckpt_close(&s);
        return rc;
    }
    /* Reading can fail on one rank only (I/O): that rank reports it. */
    *collective = false;
    s.on_progress = progress;
    rc = load_state(ex, &s);
    if (!rc) {
        *start = s.meta.step;
        ex->adam_t = (uint64_t)s.meta.adam_step;
        /* fp16: the loss scaler where it was (a checkpoint of another precision has none:
         * the scaler starts afresh). */
        if (ex->dtype == DP_DT_FP16 && s.meta.loss_scale > 0) {
            ex->ls_scale = s.meta.loss_scale;
            ex->ls_growth = (int)s.meta.loss_scale_growth;
            ex->ls_hyst = (int)s.meta.loss_scale_hysteresis;
        }
        if (ex->rank == 0) {
            notes(ex, &s);
            dp__ckpt_emit(ex, DP_CKPT_RESUMED, s.meta.step, s.dir, NULL, 0, 0, s.meta.saved_at);
        }
    }
    dp_ckpt_close(&s);
    ex->ck->last_save_s = dp__mono_s();
    return rc;
}
