/*
 * Checkpoints (ckpt.h): saving every rank's state with an atomic commit,
 * resuming from the newest complete checkpoint under the same or another
 * layout, listing and verifying checkpoints, and exporting one as a single
 * safetensors file. It does not decide when a run restarts (the CLI's
 * supervisor does) and never prints: events go to the caller's callback.
 *
 * What a rank writes (rank_%05d.safetensors, README "Checkpoints and
 * restarts"): the ranks of DP replica 0 write their weight slices, each
 * TP-split tensor by every TP rank and each replicated one by TP rank 0, so
 * every global element is stored once (Megatron dist-ckpt's replica_id 0);
 * the last stage's copy of a tied embedding is stored as "wte.tied_copy".
 * Without ZeRO the same ranks write AdamW m and v as "exp_avg.NAME" and
 * "exp_avg_sq.NAME" (the replicas hold the same values); with ZeRO-1 every
 * rank writes its flat shard as "exp_avg" / "exp_avg_sq", located by the
 * manifest's flat offsets (Megatron's dp_reshardable format, here readable
 * under any layout).
 *
 * Commit (executor-notes Sec. 4, llm.c's DONE marker made atomic): rank 0
 * creates step_N.tmp; every rank writes and fsyncs its file; rank 0 gathers
 * the sizes and CRC32Cs, writes manifest.json, fsyncs it and the directory,
 * renames step_N.tmp to step_N and fsyncs the parent. A crash at any point
 * leaves either no step_N or a complete one; older checkpoints are deleted
 * (rename to .trash, then unlink) only after the new one is published.
 *
 * Resume reads only what each rank needs: for every local parameter slice
 * (and optimizer element) it locates the global rows and columns in the
 * pieces the manifest lists and preads them, so any change of dp, tp, pp or
 * ZeRO works and the same layout restores every byte.
 */
#include "ckpt.h"
#include "internal.h"
#include "outfile.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST    "manifest.json"
#define DTYPE       (sizeof(real) == 8 ? "F64" : "F32")
#define TIED_SUFFIX ".tied_copy"
#define PATHMAX     4200
#define MAXDIM      2147483648.0 /* bound on a dimension or offset read from a manifest */

enum { K_PARAM = 0, K_M = 1, K_V = 2 };
static const char *const kind_prefix[3] = {"", "exp_avg.", "exp_avg_sq."};
static const char *const zero_key[3] = {"", "exp_avg", "exp_avg_sq"};

/* Per-run checkpoint state (dp_exec.ck). */
struct dp__ckpt {
    double last_save_s; /* monotonic time of the last save attempt (or of the start) */
    bool cleaned;       /* stale .tmp directories removed */
    bool data_crc_done;
    uint32_t data_crc;
    int saves_tried, saves_ok; /* the same on every rank */
};

void dp_ckpt_opts_default(struct dp_ckpt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->interval_s = 120 * 60.0;
    o->keep = 3;
}

/* ------------------------------------------------------------------ small helpers */

static double mono_s(void)
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

static int fsync_dir(const char *dir, struct dp_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return dp_err_set(err, DP_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd) ? dp_err_set(err, DP_EIO, "%s: fsync failed: %s", dir, strerror(errno)) : 0;
    close(fd);
    return rc;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Delete a checkpoint directory (it holds files only). */
static int rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char p[PATHMAX + 300];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    return rmdir(dir);
}

/* Rename to NAME.trash (atomic: a half-deleted directory never looks like a checkpoint),
 * then delete. */
static void discard(const char *dir)
{
    char trash[PATHMAX + 16];
    snprintf(trash, sizeof trash, "%s.trash", dir);
    rm_dir(trash);
    if (rename(dir, trash) == 0)
        rm_dir(trash);
}

/* "step_00000010" -> 10 with *suffix pointing after the digits; -1 if not that form. */
static int parse_step_name(const char *name, const char **suffix)
{
    if (strncmp(name, "step_", 5))
        return -1;
    const char *p = name + 5;
    int n = 0, v = 0;
    while (p[n] >= '0' && p[n] <= '9' && n < 9) {
        v = v * 10 + (p[n] - '0');
        n++;
    }
    if (n != 8)
        return -1;
    *suffix = p + n;
    return v;
}

enum entry_kind { E_PUBLISHED = 0, E_TMP, E_SUPERSEDED, E_OTHER };

struct dir_entry {
    int step;
    enum entry_kind kind;
};

static int cmp_entry_step(const void *a, const void *b)
{
    const struct dir_entry *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return (int)x->kind - (int)y->kind;
}

/* The step_* entries of `dir`, sorted by step (ascending). */
static int scan_dir(const char *dir, struct dir_entry **out, int *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *suf;
        int step = parse_step_name(e->d_name, &suf);
        if (step < 0)
            continue;
        enum entry_kind k = !*suf                         ? E_PUBLISHED
                            : !strcmp(suf, ".tmp")        ? E_TMP
                            : !strcmp(suf, ".superseded") ? E_SUPERSEDED
                                                          : E_OTHER;
        if (k == E_OTHER)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            struct dir_entry *g = realloc(*out, (size_t)cap * sizeof *g);
            if (!g)
                break;
            *out = g;
        }
        (*out)[(*n)++] = (struct dir_entry){step, k};
    }
    closedir(d);
    if (*n)
        qsort(*out, (size_t)*n, sizeof **out, cmp_entry_step);
    return 0;
}

static void ckpt_path(char *buf, size_t cap, const char *dir, int step, const char *suffix)
{
    snprintf(buf, cap, "%s/step_%08d%s", dir, step, suffix);
}

/* The checkpoint to open: `dir` itself when it is a single checkpoint, else its step_N. */
static void candidate_path(char *buf, size_t cap, const char *dir, bool single, int step)
{
    if (single)
        snprintf(buf, cap, "%s", dir);
    else
        ckpt_path(buf, cap, dir, step, "");
}

static void manifest_path(char *buf, size_t cap, const char *dir)
{
    snprintf(buf, cap, "%s/%s", dir, MANIFEST);
}

/* Whether `dir` is one checkpoint (holds a manifest) rather than a directory of step_N. */
static bool has_manifest(const char *dir)
{
    char mf[PATHMAX + 32];
    manifest_path(mf, sizeof mf, dir);
    return access(mf, F_OK) == 0;
}

static bool split_rows(const struct dp_seg *s)
{
    return s->rows < s->grows;
}
static bool split_cols(const struct dp_seg *s)
{
    return s->cols < s->gcols;
}

/* The checkpoint name of a segment: the last stage's tied copy has its own. */
static void seg_ckpt_name(const struct dp_seg *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s", s->name, s->norm_skip ? TIED_SUFFIX : "");
}

/* Does this rank store weight segment `s`? (DP replica 0; replicated tensors on TP rank 0.) */
static bool rank_stores(const struct dp_coords *c, const struct dp_seg *s)
{
    return c->dp_rank == 0 && (split_rows(s) || split_cols(s) || c->tp_rank == 0);
}

static void emit(const struct dp_exec *ex, enum dp_ckpt_event_kind kind, int step, const char *path,
                 const char *msg, int64_t bytes, double secs, const char *saved_at)
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

static uint32_t data_crc(struct dp_exec *ex)
{
    if (!ex->ck->data_crc_done) {
        const struct dp_tokens *d = ex->o.data;
        ex->ck->data_crc = dp__crc32c(0, d->tok, (size_t)d->n * sizeof(uint16_t));
        ex->ck->data_crc_done = true;
    }
    return ex->ck->data_crc;
}

static int64_t data_windows(const struct dp_exec *ex)
{
    return (ex->o.data->n - 1) / ex->l.seq_len;
}

/* ------------------------------------------------------------------ saving: one rank */

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
    x->t.dtype = DTYPE;
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
    bool zero = ex->l.zero >= 1;
    struct item *it = calloc((size_t)(3 * ex->nsegs + 2), sizeof *it);
    if (!it)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int n = 0;
    char nm[96];
    for (int k = 0; k < 3; k++) {
        if (k > 0 && zero)
            break;
        for (int i = 0; i < ex->nsegs; i++) {
            const struct dp_seg *s = &ex->segs[i];
            if (!rank_stores(&ex->c, s))
                continue;
            seg_ckpt_name(s, nm, sizeof nm);
            const real *base = k == K_PARAM ? ex->params : k == K_M ? ex->adam_m : ex->adam_v;
            add_item(it, &n, kind_prefix[k], nm, s->gcols > 1 ? 2 : 1, s->rows, s->cols,
                     base + s->off);
        }
    }
    if (zero) {
        add_item(it, &n, "", zero_key[K_M], 1, (int64_t)ex->shard, 1, ex->adam_m);
        add_item(it, &n, "", zero_key[K_V], 1, (int64_t)ex->shard, 1, ex->adam_v);
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
        hdr = dp__st_header(hdr_t, n, meta, &hlen);
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
    char path[PATHMAX + 64];
    snprintf(path, sizeof path, "%s/rank_%05d.safetensors", tmpdir, ex->rank);
    struct dp_st_writer w;
    if (!stage) {
        free(hdr);
        free(it);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    rc = dp__st_create(&w, path, err);
    if (!rc && ck->fault != DP_CKPT_FAULT_NONE && ck->fault_rank == ex->rank &&
        ck->fault_step == step) {
        w.fault = ck->fault == DP_CKPT_FAULT_CRASH ? DP_ST_FAULT_CRASH : DP_ST_FAULT_ENOSPC;
        w.fault_at = total / 2;
    }
    if (!rc) {
        rc = dp__st_write_header(&w, hdr, hlen);
        for (int i = 0; i < n && !rc; i++) {
            size_t done = 0, bytes = (size_t)it[i].t.bytes;
            while (done < bytes && !rc) {
                size_t k = bytes - done < chunk ? bytes - done : chunk;
                OPS->download(ex->be, stage, (const char *)it[i].src + done, k);
                rc = dp__st_write(&w, stage, k);
                done += k;
            }
            dp__beat(NULL);
        }
        if (!rc)
            rc = dp__st_finish(&w, true);
        else
            dp__st_abandon(&w);
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

/* ------------------------------------------------------------------ saving: the manifest */

static cJSON *num_arr2(int64_t a, int64_t b)
{
    cJSON *x = cJSON_CreateArray();
    cJSON_AddItemToArray(x, cJSON_CreateNumber((double)a));
    cJSON_AddItemToArray(x, cJSON_CreateNumber((double)b));
    return x;
}

static void rank_file_name(char *buf, size_t cap, int rank)
{
    snprintf(buf, cap, "rank_%05d.safetensors", rank);
}

/* all[3 r + {0,1,2}] = failed, crc, size of rank r's file. */
static cJSON *manifest_json(struct dp_exec *ex, int step, const double *all, const char *saved_at,
                            struct dp_err *err)
{
    const struct dp_exec_opts *o = &ex->o;
    const struct dp_layout *l = &ex->l;
    bool zero = l->zero >= 1;
    cJSON *root = cJSON_CreateObject();
    char buf[64];
    cJSON_AddNumberToObject(root, "dplan_checkpoint", DP_CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "step", step);
    cJSON_AddNumberToObject(root, "steps", o->steps);
    cJSON_AddStringToObject(root, "saved_at", saved_at);
    cJSON_AddStringToObject(root, "created_by", "dplan run");
    cJSON_AddNumberToObject(root, "world_size", ex->world);
    cJSON_AddStringToObject(root, "dtype", DTYPE);
    cJSON_AddItemToObject(root, "model", dp_model_to_json(ex->m));
    cJSON_AddItemToObject(root, "layout", dp_layout_to_json(l));

    cJSON *opt = cJSON_AddObjectToObject(root, "optimizer");
    cJSON_AddStringToObject(opt, "type", "adamw");
    cJSON_AddNumberToObject(opt, "step", (double)ex->adam_t);
    cJSON_AddStringToObject(opt, "state", zero ? "zero1_flat" : "per_tensor");
    cJSON_AddNumberToObject(opt, "lr", o->lr);
    cJSON_AddNumberToObject(opt, "warmup_steps", o->warmup_steps);
    cJSON_AddNumberToObject(opt, "min_lr_frac", o->min_lr_frac);
    cJSON_AddNumberToObject(opt, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(opt, "beta1", o->beta1);
    cJSON_AddNumberToObject(opt, "beta2", o->beta2);
    cJSON_AddNumberToObject(opt, "eps", o->eps);
    cJSON_AddNumberToObject(opt, "grad_clip", o->grad_clip);

    const struct dp_tokens *d = o->data;
    cJSON *data = cJSON_AddObjectToObject(root, "data");
    cJSON_AddStringToObject(data, "source", d->source);
    cJSON_AddNumberToObject(data, "tokens", (double)d->n);
    snprintf(buf, sizeof buf, "0x%08x", data_crc(ex));
    cJSON_AddStringToObject(data, "crc32c", buf);
    cJSON_AddNumberToObject(data, "seq_len", (double)l->seq_len);
    cJSON_AddNumberToObject(data, "global_batch", (double)l->gbs);
    cJSON_AddNumberToObject(data, "windows", (double)data_windows(ex));
    cJSON_AddNumberToObject(data, "next_step", step + 1);
    cJSON_AddNumberToObject(data, "samples_seen", (double)((int64_t)step * l->gbs));
    cJSON_AddNumberToObject(data, "next_window",
                            (double)(((int64_t)step * l->gbs) % data_windows(ex)));

    cJSON *rng = cJSON_AddObjectToObject(root, "rng");
    cJSON_AddNumberToObject(rng, "seed", (double)o->seed);
    cJSON_AddStringToObject(rng, "generator",
                            "counter-based splitmix64 keyed by (seed, tensor name, element)");
    cJSON_AddNumberToObject(rng, "draws_after_init", 0);

    cJSON *files = cJSON_AddArrayToObject(root, "files");
    for (int r = 0; r < ex->world; r++) {
        struct dp_coords c;
        dp_rank_coords(r, l->tp, l->dp, l->pp, &c);
        cJSON *f = cJSON_CreateObject();
        rank_file_name(buf, sizeof buf, r);
        cJSON_AddStringToObject(f, "name", buf);
        cJSON_AddNumberToObject(f, "rank", r);
        cJSON_AddNumberToObject(f, "tp_rank", c.tp_rank);
        cJSON_AddNumberToObject(f, "dp_rank", c.dp_rank);
        cJSON_AddNumberToObject(f, "pp_rank", c.pp_rank);
        cJSON_AddNumberToObject(f, "bytes", all[3 * r + 2]);
        snprintf(buf, sizeof buf, "0x%08x", (uint32_t)all[3 * r + 1]);
        cJSON_AddStringToObject(f, "crc32c", buf);
        cJSON_AddItemToArray(files, f);
    }

    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    cJSON *zgroups = NULL;
    if (zero)
        zgroups = cJSON_AddArrayToObject(cJSON_AddObjectToObject(root, "zero1"), "groups");
    int rc = 0;
    char nm[96];
    for (int s = 0; s < l->pp && !rc; s++) {
        struct dp_seg *segs = NULL;
        int ns = 0;
        rc = dp__segments_for_stage(ex, s, &segs, &ns);
        if (rc)
            break;
        int64_t nparams = 0;
        for (int i = 0; i < ns; i++) {
            const struct dp_seg *sg = &segs[i];
            nparams += sg->rows * sg->cols;
            bool sr = split_rows(sg), sc = split_cols(sg);
            cJSON *t = cJSON_CreateObject();
            seg_ckpt_name(sg, nm, sizeof nm);
            cJSON_AddStringToObject(t, "name", nm);
            cJSON *shape = cJSON_AddArrayToObject(t, "shape");
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)sg->out_rows));
            if (sg->gcols > 1)
                cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)sg->gcols));
            cJSON_AddNumberToObject(t, "padded_rows", (double)sg->grows);
            cJSON_AddNumberToObject(t, "stage", s);
            cJSON_AddStringToObject(t, "sharding", sr ? "tp_rows" : sc ? "tp_cols" : "replicated");
            if (sg->norm_skip)
                cJSON_AddStringToObject(t, "tied_to", sg->name);
            cJSON *sh = cJSON_AddArrayToObject(t, "shards");
            for (int tr = 0; tr < (sr || sc ? l->tp : 1); tr++) {
                struct dp_coords c = {.tp_rank = tr, .dp_rank = 0, .pp_rank = s};
                cJSON *p = cJSON_CreateObject();
                rank_file_name(buf, sizeof buf, dp_rank_of(&c, l->tp, l->dp, l->pp));
                cJSON_AddStringToObject(p, "file", buf);
                cJSON_AddStringToObject(p, "key", nm);
                cJSON_AddItemToObject(p, "offset",
                                      num_arr2(sr ? tr * sg->rows : 0, sc ? tr * sg->cols : 0));
                cJSON_AddItemToObject(p, "shape", num_arr2(sg->rows, sg->cols));
                cJSON_AddNumberToObject(p, "tp_rank", tr);
                cJSON_AddNumberToObject(p, "flat_offset", (double)sg->off);
                cJSON_AddItemToArray(sh, p);
            }
            cJSON_AddItemToArray(tensors, t);
        }
        if (zero) {
            int64_t nflat = (nparams + l->dp - 1) / l->dp * l->dp, shard = nflat / l->dp;
            for (int tr = 0; tr < l->tp; tr++) {
                cJSON *g = cJSON_CreateObject();
                cJSON_AddNumberToObject(g, "tp_rank", tr);
                cJSON_AddNumberToObject(g, "pp_rank", s);
                cJSON_AddNumberToObject(g, "flat_elems", (double)nflat);
                cJSON_AddNumberToObject(g, "shard_elems", (double)shard);
                cJSON *gs = cJSON_AddArrayToObject(g, "shards");
                for (int k = 0; k < l->dp; k++) {
                    struct dp_coords c = {.tp_rank = tr, .dp_rank = k, .pp_rank = s};
                    cJSON *p = cJSON_CreateObject();
                    cJSON_AddNumberToObject(p, "dp_rank", k);
                    rank_file_name(buf, sizeof buf, dp_rank_of(&c, l->tp, l->dp, l->pp));
                    cJSON_AddStringToObject(p, "file", buf);
                    cJSON_AddNumberToObject(p, "flat_offset", (double)(k * shard));
                    cJSON_AddItemToArray(gs, p);
                }
                cJSON_AddItemToArray(zgroups, g);
            }
        }
        free(segs);
    }
    if (rc) {
        cJSON_Delete(root);
        return NULL;
    }
    (void)err;
    return root;
}

static int write_text_synced(const char *path, const char *text, struct dp_err *err)
{
    struct dp_st_writer w;
    int rc = dp__st_create(&w, path, err);
    if (rc)
        return rc;
    rc = dp__st_write(&w, text, strlen(text));
    if (!rc)
        rc = dp__st_write(&w, "\n", 1);
    if (rc) {
        dp__st_abandon(&w);
        return rc;
    }
    return dp__st_finish(&w, true);
}

/* Rank 0: keep the newest `keep` published checkpoints up to `step`; set aside newer ones
 * (a timeline this run abandoned by resuming from an older checkpoint). */
static void prune(const char *dir, int step, int keep)
{
    struct dir_entry *e;
    int n;
    if (scan_dir(dir, &e, &n))
        return;
    char p[PATHMAX], q[PATHMAX + 16];
    int kept = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (e[i].kind != E_PUBLISHED)
            continue;
        ckpt_path(p, sizeof p, dir, e[i].step, "");
        if (e[i].step > step) {
            ckpt_path(q, sizeof q, dir, e[i].step, ".superseded");
            rm_dir(q);
            rename(p, q);
        } else if (keep > 0 && ++kept > keep) {
            discard(p);
        }
    }
    free(e);
}

/* Rank 0 before a save: the directories. */
static int prepare(struct dp_exec *ex, const char *tmp, struct dp_err *err)
{
    const char *dir = ex->o.ckpt->dir;
    int rc = dp_mkdirs(dir, err);
    if (rc)
        return rc;
    if (!ex->ck->cleaned) {
        /* Leftovers of saves that crashed. */
        struct dir_entry *e;
        int n;
        char p[PATHMAX];
        if (!scan_dir(dir, &e, &n)) {
            for (int i = 0; i < n; i++)
                if (e[i].kind == E_TMP) {
                    ckpt_path(p, sizeof p, dir, e[i].step, ".tmp");
                    rm_dir(p);
                }
            free(e);
        }
        ex->ck->cleaned = true;
    }
    rm_dir(tmp);
    if (mkdir(tmp, 0777))
        return dp_err_set(err, DP_EIO, "%s: cannot create directory: %s", tmp, strerror(errno));
    return fsync_dir(dir, err);
}

static int publish(struct dp_exec *ex, int step, const char *tmp, const char *final,
                   const double *all, const char *saved_at, struct dp_err *err)
{
    const char *dir = ex->o.ckpt->dir;
    cJSON *man = manifest_json(ex, step, all, saved_at, err);
    if (!man)
        return err->code ? err->code : dp_err_set(err, DP_ENOMEM, "out of memory");
    char *text = cJSON_Print(man);
    cJSON_Delete(man);
    if (!text)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    char path[PATHMAX + 32];
    manifest_path(path, sizeof path, tmp);
    int rc = write_text_synced(path, text, err);
    free(text);
    if (!rc)
        rc = fsync_dir(tmp, err);
    if (rc)
        return rc;
    if (is_dir(final))
        discard(final); /* a damaged checkpoint of the same step, skipped at resume */
    if (rename(tmp, final))
        return dp_err_set(err, DP_EIO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    return fsync_dir(dir, err);
}

static int save(struct dp_exec *ex, int step)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    char final[PATHMAX], tmp[PATHMAX + 8], saved_at[32];
    ckpt_path(final, sizeof final, ck->dir, step, "");
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    double t0 = mono_s();
    struct dp_err lerr = {0};
    int rc;
    dp__beat("checkpoint");
    double flag = 0;
    if (ex->rank == 0) {
        data_crc(ex);
        flag = prepare(ex, tmp, &lerr) ? 1 : 0;
    }
    if ((rc = OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &flag, 1, DP_OP_MAX, ex->err)))
        return rc;
    ex->ck->saves_tried++;
    if (flag) {
        if (ex->rank == 0)
            emit(ex, DP_CKPT_SAVE_FAILED, step, final, lerr.msg, 0, 0, NULL);
        ex->ck->last_save_s = mono_s();
        return 0;
    }
    uint32_t crc = 0;
    int64_t size = 0;
    double published = 0;
    int wrc = write_rank_file(ex, tmp, step, &crc, &size, &lerr);
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
            prune(ck->dir, step, ck->keep);
            emit(ex, DP_CKPT_SAVED, step, final, NULL, bytes, mono_s() - t0, saved_at);
            published = 1;
        } else {
            char msg[1200];
            if (nfail)
                snprintf(msg, sizeof msg, "the save failed on rank%s %s (see %s)",
                         nfail > 1 ? "s" : "", failed,
                         nfail > 1 ? "their messages" : "its message");
            else
                snprintf(msg, sizeof msg, "%s", perr.msg);
            rm_dir(tmp);
            emit(ex, DP_CKPT_SAVE_FAILED, step, final, msg, 0, 0, NULL);
        }
    }
    free(all);
    /* Rank 0's verdict to every rank, so that all count the saves alike. */
    if (!rc)
        rc = OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &published, 1, DP_OP_MAX, ex->err);
    if (!rc && published > 0)
        ex->ck->saves_ok++;
    ex->ck->last_save_s = mono_s();
    dp__beat(NULL);
    return rc;
}

static int ensure_state(struct dp_exec *ex)
{
    if (!ex->ck) {
        ex->ck = calloc(1, sizeof *ex->ck);
        if (!ex->ck)
            return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
        ex->ck->last_save_s = mono_s();
    }
    return 0;
}

int dp__ckpt_after_step(struct dp_exec *ex, int step)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    if (!ck || !ck->dir)
        return 0;
    int rc = ensure_state(ex);
    if (rc)
        return rc;
    bool due = (ck->every > 0 && step % ck->every == 0) || step == ex->o.steps;
    if (!due && ck->interval_s > 0) {
        /* Rank 0's clock decides, so that every rank saves at the same step. */
        double flag = ex->rank == 0 && mono_s() - ex->ck->last_save_s >= ck->interval_s;
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
    char probe[PATHMAX + 32];
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

/* ------------------------------------------------------------------ reading a checkpoint */

struct piece {
    int file;
    char key[96];
    int64_t r0, c0, rows, cols, flat_off;
    int tp_rank, group;
    const struct dp_st_entry *e[3]; /* resolved on first use */
};

struct stensor {
    char name[96];
    int64_t rows, cols, padded_rows; /* global shape [rows, cols] (cols 1 for vectors) */
    int ndim, stage;
    bool tied;
    int np;
    struct piece *p;
};

struct zshard {
    int file;
    int64_t flat_off;
    const struct dp_st_entry *e[3];
};

struct zgroup {
    int tp_rank, pp_rank;
    int64_t flat_elems, shard_elems;
    int n;
    struct zshard *s;
};

struct sfile {
    char name[64];
    int64_t bytes;
    uint32_t crc;
    bool open;
    struct dp_st_file st;
};

struct src {
    char dir[PATHMAX];
    int step, steps, world;
    char saved_at[32], dtype[8];
    struct dp_model model;
    struct dp_layout layout;
    int64_t adam_step;
    bool zero;
    double lr, warmup, min_lr_frac, wd, beta1, beta2, eps, clip;
    int64_t data_tokens, gbs, seq_len;
    uint32_t data_crc;
    char data_source[256];
    uint64_t seed;
    struct sfile *files;
    int nfiles;
    struct stensor *t; /* manifest order */
    int nt;
    struct zgroup *g;
    int ng;
};

static void src_close(struct src *s)
{
    for (int i = 0; i < s->nfiles; i++)
        if (s->files[i].open)
            dp__st_close(&s->files[i].st);
    free(s->files);
    for (int i = 0; i < s->nt; i++)
        free(s->t[i].p);
    free(s->t);
    for (int i = 0; i < s->ng; i++)
        free(s->g[i].s);
    free(s->g);
    memset(s, 0, sizeof *s);
}

static int file_index(const struct src *s, const char *name)
{
    for (int i = 0; i < s->nfiles; i++)
        if (!strcmp(s->files[i].name, name))
            return i;
    return -1;
}

static const struct stensor *find_tensor(const struct src *s, const char *name)
{
    for (int i = 0; i < s->nt; i++)
        if (!strcmp(s->t[i].name, name))
            return &s->t[i];
    return NULL;
}

/* Manifest field readers: every failure names the manifest and the field. */
#define BAD(...) dp_err_set(err, DP_EINVAL, __VA_ARGS__)

static int get_i64(const char *file, const cJSON *o, const char *key, int64_t lo, int64_t hi,
                   int64_t *out, struct dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi))
        return BAD("%s: %s: expected an integer in [%lld, %lld]", file, key, (long long)lo,
                   (long long)hi);
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int get_num(const char *file, const cJSON *o, const char *key, double *out,
                   struct dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return BAD("%s: %s: expected a number", file, key);
    *out = v->valuedouble;
    return 0;
}

static int get_str(const char *file, const cJSON *o, const char *key, char *out, size_t cap,
                   struct dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
        return BAD("%s: %s: expected a string", file, key);
    snprintf(out, cap, "%s", v->valuestring);
    return 0;
}

static int get_crc(const char *file, const cJSON *o, const char *key, uint32_t *out,
                   struct dp_err *err)
{
    char b[32], *end;
    if (get_str(file, o, key, b, sizeof b, err))
        return err->code;
    unsigned long v = strtoul(b, &end, 16);
    if (strncmp(b, "0x", 2) || *end || v > 0xffffffffUL)
        return BAD("%s: %s: expected \"0x\" and 8 hex digits, got \"%s\"", file, key, b);
    *out = (uint32_t)v;
    return 0;
}

static int get_pair(const char *file, const cJSON *o, const char *key, int64_t *a, int64_t *b,
                    struct dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    const cJSON *x = cJSON_GetArrayItem(v, 0), *y = cJSON_GetArrayItem(v, 1);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(x) ||
        !cJSON_IsNumber(y) || !(x->valuedouble >= 0 && x->valuedouble <= MAXDIM) ||
        !(y->valuedouble >= 0 && y->valuedouble <= MAXDIM))
        return BAD("%s: %s: expected [a, b] with 0 <= a, b <= 2^31", file, key);
    *a = (int64_t)x->valuedouble;
    *b = (int64_t)y->valuedouble;
    return 0;
}

static int parse_tensors(struct src *s, const char *mf, const cJSON *arr, struct dp_err *err)
{
    int n = cJSON_GetArraySize(arr);
    if (!cJSON_IsArray(arr) || n <= 0)
        return BAD("%s: tensors: expected a non-empty array", mf);
    s->t = calloc((size_t)n, sizeof *s->t);
    if (!s->t)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    const cJSON *jt;
    cJSON_ArrayForEach(jt, arr)
    {
        struct stensor *t = &s->t[s->nt++];
        int64_t v = 0;
        if (get_str(mf, jt, "name", t->name, sizeof t->name, err))
            return err->code;
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(jt, "shape");
        t->ndim = cJSON_GetArraySize(shape);
        if (!cJSON_IsArray(shape) || t->ndim < 1 || t->ndim > 2)
            return BAD("%s: tensors.%s.shape: expected 1 or 2 dimensions", mf, t->name);
        const cJSON *d0 = cJSON_GetArrayItem(shape, 0), *d1 = cJSON_GetArrayItem(shape, 1);
        if (!cJSON_IsNumber(d0) || !(d0->valuedouble >= 1 && d0->valuedouble <= MAXDIM) ||
            (t->ndim == 2 &&
             (!cJSON_IsNumber(d1) || !(d1->valuedouble >= 1 && d1->valuedouble <= MAXDIM))))
            return BAD("%s: tensors.%s.shape: expected sizes in [1, 2^31]", mf, t->name);
        t->rows = (int64_t)d0->valuedouble;
        t->cols = t->ndim == 2 ? (int64_t)d1->valuedouble : 1;
        if (get_i64(mf, jt, "padded_rows", 1, (int64_t)MAXDIM, &t->padded_rows, err) ||
            get_i64(mf, jt, "stage", 0, 1 << 20, &v, err))
            return err->code;
        t->stage = (int)v;
        if (t->rows <= 0 || t->cols <= 0 || t->padded_rows < t->rows)
            return BAD("%s: tensors.%s: bad shape", mf, t->name);
        t->tied = cJSON_GetObjectItemCaseSensitive(jt, "tied_to") != NULL;
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(jt, "shards");
        int np = cJSON_GetArraySize(sh);
        if (!cJSON_IsArray(sh) || np <= 0)
            return BAD("%s: tensors.%s.shards: expected a non-empty array", mf, t->name);
        t->p = calloc((size_t)np, sizeof *t->p);
        if (!t->p)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        const cJSON *jp;
        cJSON_ArrayForEach(jp, sh)
        {
            struct piece *p = &t->p[t->np++];
            char fname[64];
            if (get_str(mf, jp, "file", fname, sizeof fname, err) ||
                get_str(mf, jp, "key", p->key, sizeof p->key, err) ||
                get_pair(mf, jp, "offset", &p->r0, &p->c0, err) ||
                get_pair(mf, jp, "shape", &p->rows, &p->cols, err) ||
                get_i64(mf, jp, "flat_offset", 0, (int64_t)1 << 53, &p->flat_off, err) ||
                get_i64(mf, jp, "tp_rank", 0, 1 << 20, &v, err))
                return err->code;
            p->tp_rank = (int)v;
            p->group = -1;
            if ((p->file = file_index(s, fname)) < 0)
                return BAD("%s: tensors.%s: shard file %s is not in \"files\"", mf, t->name, fname);
            if (p->rows <= 0 || p->cols <= 0 || p->r0 + p->rows > t->padded_rows ||
                p->c0 + p->cols > t->cols)
                return BAD("%s: tensors.%s: a shard lies outside the tensor", mf, t->name);
        }
    }
    return 0;
}

static int parse_zero(struct src *s, const char *mf, const cJSON *z, struct dp_err *err)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(z, "groups");
    int n = cJSON_GetArraySize(arr);
    if (!cJSON_IsArray(arr) || n <= 0)
        return BAD("%s: zero1.groups: expected a non-empty array", mf);
    s->g = calloc((size_t)n, sizeof *s->g);
    if (!s->g)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    const cJSON *jg;
    cJSON_ArrayForEach(jg, arr)
    {
        struct zgroup *g = &s->g[s->ng++];
        int64_t a = 0, b = 0;
        if (get_i64(mf, jg, "tp_rank", 0, 1 << 20, &a, err) ||
            get_i64(mf, jg, "pp_rank", 0, 1 << 20, &b, err) ||
            get_i64(mf, jg, "flat_elems", 1, (int64_t)1 << 53, &g->flat_elems, err) ||
            get_i64(mf, jg, "shard_elems", 1, (int64_t)1 << 53, &g->shard_elems, err))
            return err->code;
        g->tp_rank = (int)a;
        g->pp_rank = (int)b;
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(jg, "shards");
        int k = cJSON_GetArraySize(sh);
        if (!cJSON_IsArray(sh) || k <= 0 || g->flat_elems % k ||
            g->flat_elems / k != g->shard_elems)
            return BAD("%s: zero1.groups: shards do not tile flat_elems", mf);
        g->s = calloc((size_t)k, sizeof *g->s);
        if (!g->s)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        const cJSON *js;
        cJSON_ArrayForEach(js, sh)
        {
            struct zshard *z1 = &g->s[g->n];
            char fname[64];
            if (get_str(mf, js, "file", fname, sizeof fname, err) ||
                get_i64(mf, js, "flat_offset", 0, INT64_MAX / 2, &z1->flat_off, err))
                return err->code;
            if ((z1->file = file_index(s, fname)) < 0)
                return BAD("%s: zero1: shard file %s is not in \"files\"", mf, fname);
            if (z1->flat_off != g->n * g->shard_elems)
                return BAD("%s: zero1: shards out of order", mf);
            g->n++;
        }
    }
    /* Each weight piece's flat buffer is the group of its TP rank and stage. */
    for (int i = 0; i < s->nt; i++)
        for (int j = 0; j < s->t[i].np; j++) {
            struct piece *p = &s->t[i].p[j];
            for (int k = 0; k < s->ng; k++)
                if (s->g[k].tp_rank == p->tp_rank && s->g[k].pp_rank == s->t[i].stage)
                    p->group = k;
            if (p->group < 0 || p->flat_off + p->rows * p->cols > s->g[p->group].flat_elems)
                return BAD("%s: tensors.%s: no ZeRO-1 group holds its optimizer state", mf,
                           s->t[i].name);
        }
    return 0;
}

/* Parse dir/manifest.json (no file is opened or checked yet). */
static int src_open(const char *dir, struct src *s, struct dp_err *err)
{
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    char mf[PATHMAX + 32];
    manifest_path(mf, sizeof mf, dir);
    if (access(mf, F_OK))
        return dp_err_set(err, DP_ENOENT, "%s: no %s (an unfinished save?)", dir, MANIFEST);
    cJSON *root = NULL;
    int rc = dp_json_load_file(mf, &root, err);
    if (rc)
        return rc;
    int64_t v = 0;
    const cJSON *o;
    if ((rc = get_i64(mf, root, "dplan_checkpoint", 1, 1 << 20, &v, err)))
        goto out;
    if (v > DP_CKPT_FORMAT) {
        rc = BAD("%s: checkpoint format %lld is newer than this dplan reads (%d)", mf, (long long)v,
                 DP_CKPT_FORMAT);
        goto out;
    }
    if ((rc = get_i64(mf, root, "step", 0, 1 << 30, &v, err)))
        goto out;
    s->step = (int)v;
    if ((rc = get_i64(mf, root, "steps", 0, 1 << 30, &v, err)))
        goto out;
    s->steps = (int)v;
    if ((rc = get_i64(mf, root, "world_size", 1, 1 << 24, &v, err)))
        goto out;
    s->world = (int)v;
    if ((rc = get_str(mf, root, "saved_at", s->saved_at, sizeof s->saved_at, err)) ||
        (rc = get_str(mf, root, "dtype", s->dtype, sizeof s->dtype, err)))
        goto out;
    struct dp_jr jr = {.file = mf, .err = err};
    snprintf(jr.path, sizeof jr.path, "model");
    if ((rc = dp_model_from_json(&jr, cJSON_GetObjectItemCaseSensitive(root, "model"), &s->model)))
        goto out;
    snprintf(jr.path, sizeof jr.path, "layout");
    dp_layout_default(&s->layout);
    if ((rc = dp_layout_from_json(&jr, cJSON_GetObjectItemCaseSensitive(root, "layout"),
                                  &s->layout)))
        goto out;
    o = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    char state[32];
    if ((rc = get_i64(mf, o, "step", 0, INT64_MAX / 2, &s->adam_step, err)) ||
        (rc = get_str(mf, o, "state", state, sizeof state, err)) ||
        (rc = get_num(mf, o, "lr", &s->lr, err)) ||
        (rc = get_num(mf, o, "warmup_steps", &s->warmup, err)) ||
        (rc = get_num(mf, o, "min_lr_frac", &s->min_lr_frac, err)) ||
        (rc = get_num(mf, o, "weight_decay", &s->wd, err)) ||
        (rc = get_num(mf, o, "beta1", &s->beta1, err)) ||
        (rc = get_num(mf, o, "beta2", &s->beta2, err)) ||
        (rc = get_num(mf, o, "eps", &s->eps, err)) ||
        (rc = get_num(mf, o, "grad_clip", &s->clip, err)))
        goto out;
    s->zero = !strcmp(state, "zero1_flat");
    o = cJSON_GetObjectItemCaseSensitive(root, "data");
    if ((rc = get_str(mf, o, "source", s->data_source, sizeof s->data_source, err)) ||
        (rc = get_i64(mf, o, "tokens", 0, INT64_MAX / 2, &s->data_tokens, err)) ||
        (rc = get_crc(mf, o, "crc32c", &s->data_crc, err)) ||
        (rc = get_i64(mf, o, "seq_len", 1, INT64_MAX / 2, &s->seq_len, err)) ||
        (rc = get_i64(mf, o, "global_batch", 1, INT64_MAX / 2, &s->gbs, err)))
        goto out;
    double seed = 0;
    if ((rc = get_num(mf, cJSON_GetObjectItemCaseSensitive(root, "rng"), "seed", &seed, err)))
        goto out;
    s->seed = (uint64_t)seed;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    int nf = cJSON_GetArraySize(files);
    if (!cJSON_IsArray(files) || nf <= 0) {
        rc = BAD("%s: files: expected a non-empty array", mf);
        goto out;
    }
    s->files = calloc((size_t)nf, sizeof *s->files);
    if (!s->files) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto out;
    }
    const cJSON *jf;
    cJSON_ArrayForEach(jf, files)
    {
        struct sfile *f = &s->files[s->nfiles++];
        if ((rc = get_str(mf, jf, "name", f->name, sizeof f->name, err)) ||
            (rc = get_i64(mf, jf, "bytes", 0, INT64_MAX / 2, &f->bytes, err)) ||
            (rc = get_crc(mf, jf, "crc32c", &f->crc, err)))
            goto out;
        if (strchr(f->name, '/') || f->name[0] == '.') {
            rc = BAD("%s: files: \"%s\" is not a plain file name", mf, f->name);
            goto out;
        }
    }
    if ((rc = parse_tensors(s, mf, cJSON_GetObjectItemCaseSensitive(root, "tensors"), err)))
        goto out;
    if (s->zero && (rc = parse_zero(s, mf, cJSON_GetObjectItemCaseSensitive(root, "zero1"), err)))
        goto out;
out:
    cJSON_Delete(root);
    if (rc)
        src_close(s);
    return rc;
}

/* Size and (with `crc`) checksum of file i against the manifest. */
static int verify_file(const struct src *s, int i, bool crc, struct dp_err *err)
{
    const struct sfile *f = &s->files[i];
    char path[PATHMAX + 80];
    snprintf(path, sizeof path, "%s/%s", s->dir, f->name);
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
    int rc = dp__file_crc32c(path, &c, &size, err);
    if (rc)
        return rc;
    if (c != f->crc || size != f->bytes)
        return dp_err_set(err, DP_EINVAL,
                          "%s: checksum mismatch: crc32c 0x%08x, the manifest says 0x%08x", path, c,
                          f->crc);
    return 0;
}

static int open_file(struct src *s, int i, struct dp_err *err)
{
    struct sfile *f = &s->files[i];
    if (f->open)
        return 0;
    char path[PATHMAX + 80];
    snprintf(path, sizeof path, "%s/%s", s->dir, f->name);
    int rc = dp__st_open(path, &f->st, err);
    if (rc)
        return rc;
    f->open = true;
    if (f->st.size != f->bytes) {
        return dp_err_set(err, DP_EINVAL, "%s: %lld bytes, the manifest says %lld", path,
                          (long long)f->st.size, (long long)f->bytes);
    }
    return 0;
}

/* The entry `key` of file i, checked to hold `elems` elements of the checkpoint's dtype. */
static int resolve(struct src *s, int i, const char *key, int64_t elems,
                   const struct dp_st_entry **out, struct dp_err *err)
{
    int rc = open_file(s, i, err);
    if (rc)
        return rc;
    const struct dp_st_file *f = &s->files[i].st;
    const struct dp_st_entry *e = dp__st_find(f, key);
    if (!e)
        return dp_err_set(err, DP_EINVAL, "%s: tensor %s is missing", f->path, key);
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= e->shape[d];
    if (strcmp(e->dtype, s->dtype) || n != elems)
        return dp_err_set(err, DP_EINVAL,
                          "%s: tensor %s: %s with %lld elements, the manifest says %s with %lld",
                          f->path, key, e->dtype, (long long)n, s->dtype, (long long)elems);
    *out = e;
    return 0;
}

/*
 * Global row r, columns [c, c + n) of tensor t's state `kind` (weights, m, v) into dst,
 * from every piece that holds part of it; *got counts the elements found.
 */
static int fetch_row(struct src *s, struct stensor *t, int kind, int64_t r, int64_t c, int64_t n,
                     real *dst, int64_t *got, struct dp_err *err)
{
    const int64_t es = (int64_t)sizeof(real);
    *got = 0;
    for (int j = 0; j < t->np; j++) {
        struct piece *p = &t->p[j];
        if (r < p->r0 || r >= p->r0 + p->rows)
            continue;
        int64_t lo = c > p->c0 ? c : p->c0;
        int64_t hi = c + n < p->c0 + p->cols ? c + n : p->c0 + p->cols;
        if (lo >= hi)
            continue;
        int64_t li = (r - p->r0) * p->cols + (lo - p->c0); /* element in the piece */
        real *out = dst + (lo - c);
        int rc;
        if (kind == K_PARAM || !s->zero) {
            if (!p->e[kind]) {
                char key[128];
                snprintf(key, sizeof key, "%s%s", kind_prefix[kind], p->key);
                if ((rc = resolve(s, p->file, key, p->rows * p->cols, &p->e[kind], err)))
                    return rc;
            }
            rc = dp__st_pread(&s->files[p->file].st, p->e[kind]->begin + li * es, out,
                              (size_t)((hi - lo) * es), err);
            if (rc)
                return rc;
        } else {
            struct zgroup *g = &s->g[p->group];
            int64_t flat = p->flat_off + li, left = hi - lo;
            while (left > 0) {
                int64_t k = flat / g->shard_elems, o = flat % g->shard_elems;
                int64_t take = g->shard_elems - o < left ? g->shard_elems - o : left;
                struct zshard *z1 = &g->s[k];
                if (!z1->e[kind] &&
                    (rc = resolve(s, z1->file, zero_key[kind], g->shard_elems, &z1->e[kind], err)))
                    return rc;
                rc = dp__st_pread(&s->files[z1->file].st, z1->e[kind]->begin + o * es, out,
                                  (size_t)(take * es), err);
                if (rc)
                    return rc;
                out += take;
                flat += take;
                left -= take;
            }
        }
        *got += hi - lo;
    }
    return 0;
}

/*
 * Elements [a, b) (row-major) of the local slice `sg` of tensor t into dst[0, b - a).
 * Rows past the model's vocabulary (padding) that the checkpoint lacks become zero.
 */
static int fill_range(struct src *s, struct stensor *t, int kind, const struct dp_seg *sg,
                      int64_t a, int64_t b, real *dst, struct dp_err *err)
{
    while (a < b) {
        int64_t i = a / sg->cols, j = a % sg->cols;
        int64_t n = sg->cols - j < b - a ? sg->cols - j : b - a;
        int64_t r = sg->r0 + i, got = 0;
        memset(dst, 0, (size_t)n * sizeof(real));
        int rc = fetch_row(s, t, kind, r, sg->c0 + j, n, dst, &got, err);
        if (rc)
            return rc;
        if (got != n && r < t->rows)
            return dp_err_set(err, DP_EINVAL,
                              "%s: tensor %s: row %lld, columns %lld..%lld are not in the "
                              "checkpoint's shards",
                              s->dir, t->name, (long long)r, (long long)(sg->c0 + j),
                              (long long)(sg->c0 + j + n - 1));
        dst += n;
        a += n;
        if (!(a & 0xffff))
            dp__beat(NULL);
    }
    return 0;
}

/* The checkpoint tensor a local segment is read from. */
static struct stensor *source_of(struct src *s, const struct dp_seg *sg, struct dp_err *err)
{
    char nm[96];
    seg_ckpt_name(sg, nm, sizeof nm);
    const struct stensor *t = find_tensor(s, nm);
    if (!t && sg->norm_skip)
        t = find_tensor(s, sg->name); /* the copy is equal to the original */
    if (!t) {
        dp_err_set(err, DP_EINVAL, "%s: tensor %s is not in the checkpoint", s->dir, sg->name);
        return NULL;
    }
    if (t->cols != sg->gcols || t->rows != sg->out_rows) {
        dp_err_set(err, DP_EINVAL,
                   "%s: tensor %s: shape [%lld, %lld] in the checkpoint, [%lld, %lld] here", s->dir,
                   sg->name, (long long)t->rows, (long long)t->cols, (long long)sg->out_rows,
                   (long long)sg->gcols);
        return NULL;
    }
    return (struct stensor *)t;
}

static int load_state(struct dp_exec *ex, struct src *s)
{
    struct dp_err *err = ex->err;
    bool zero = ex->l.zero >= 1;
    size_t maxn = 0;
    for (int i = 0; i < ex->nsegs; i++) {
        size_t k = (size_t)(ex->segs[i].rows * ex->segs[i].cols);
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
        struct stensor *t = source_of(s, sg, err);
        if (!t) {
            rc = err->code;
            break;
        }
        int64_t n = sg->rows * sg->cols;
        for (int k = 0; k < (zero ? 1 : 3) && !rc; k++) {
            rc = fill_range(s, t, k, sg, 0, n, buf, err);
            real *base = k == K_PARAM ? ex->params : k == K_M ? ex->adam_m : ex->adam_v;
            if (!rc)
                OPS->upload(ex->be, base + sg->off, buf, (size_t)n * sizeof(real));
        }
    }
    /* ZeRO-1: m and v of this rank's shard [shard_off, shard_off + shard) of the flat buffer. */
    for (int k = K_M; zero && k <= K_V && !rc; k++) {
        memset(buf, 0, ex->shard * sizeof(real));
        for (int i = 0; i < ex->nsegs && !rc; i++) {
            const struct dp_seg *sg = &ex->segs[i];
            size_t lo, hi;
            if (!dp__seg_in_shard(ex, sg, &lo, &hi))
                continue;
            struct stensor *t = source_of(s, sg, err);
            rc = t ? fill_range(s, t, k, sg, (int64_t)(lo - sg->off), (int64_t)(hi - sg->off),
                                buf + (lo - ex->shard_off), err)
                   : err->code;
        }
        if (!rc)
            OPS->upload(ex->be, k == K_M ? ex->adam_m : ex->adam_v, buf, ex->shard * sizeof(real));
    }
    free(buf);
    dp__beat(NULL);
    return rc;
}

/* The shards of tensor x cover its rows [0, rows) x [0, cols) exactly once (padded
 * vocabulary rows may be absent). */
static int shards_cover(const char *mf, const struct stensor *x, struct dp_err *err)
{
    int64_t area = 0;
    for (int j = 0; j < x->np; j++) {
        const struct piece *p = &x->p[j];
        int64_t r1 = p->r0 + p->rows < x->rows ? p->r0 + p->rows : x->rows;
        if (r1 > p->r0)
            area += (r1 - p->r0) * p->cols;
        for (int k = 0; k < j; k++) {
            const struct piece *q = &x->p[k];
            if (p->r0 < q->r0 + q->rows && q->r0 < p->r0 + p->rows && p->c0 < q->c0 + q->cols &&
                q->c0 < p->c0 + p->cols)
                return BAD("%s: tensor %s: shards %d and %d overlap", mf, x->name, k, j);
        }
    }
    if (area != x->rows * x->cols)
        return BAD("%s: tensor %s: its shards hold %lld of its %lld elements", mf, x->name,
                   (long long)area, (long long)(x->rows * x->cols));
    return 0;
}

/*
 * The manifest against the model it names: every global tensor of that model (laid out
 * for the manifest's layout as the saving run did, dp__segments_for_stage) is listed
 * with its shape and shards that cover it; and for the files i with i % nranks == rank,
 * every shard's entries (weights, m and v, or the ZeRO-1 shards) are in the file with
 * the right dtype and size. So a manifest with tensors removed is damaged before any
 * rank starts loading, not in the middle of it.
 */
static int verify_structure(struct src *s, int rank, int nranks, int *bad_file, struct dp_err *err)
{
    *bad_file = -1;
    char mf[PATHMAX + 32];
    manifest_path(mf, sizeof mf, s->dir);
    struct dp_err e = {0};
    if (dp_layout_validate(&s->layout, &s->model, 0, &e))
        return BAD("%s: layout: %s", mf, e.msg);
    struct dp_exec t;
    memset(&t, 0, sizeof t);
    t.m = &s->model;
    t.l = s->layout;
    t.err = &e;
    dp__dims_init(&t);
    int rc = 0;
    char nm[96];
    for (int st = 0; st < s->layout.pp && !rc; st++) {
        struct dp_seg *segs = NULL;
        int ns = 0;
        if (dp__segments_for_stage(&t, st, &segs, &ns))
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        for (int i = 0; i < ns && !rc; i++) {
            const struct dp_seg *sg = &segs[i];
            seg_ckpt_name(sg, nm, sizeof nm);
            const struct stensor *x = find_tensor(s, nm);
            if (!x)
                rc = BAD("%s: the manifest lacks tensor %s [%lld, %lld] of model %s", mf, nm,
                         (long long)sg->out_rows, (long long)sg->gcols, s->model.name);
            else if (x->rows != sg->out_rows || x->cols != sg->gcols)
                rc = BAD("%s: tensor %s: shape [%lld, %lld] in the manifest, model %s has "
                         "[%lld, %lld]",
                         mf, nm, (long long)x->rows, (long long)x->cols, s->model.name,
                         (long long)sg->out_rows, (long long)sg->gcols);
            else
                rc = shards_cover(mf, x, err);
        }
        free(segs);
    }
    char key[128];
    for (int i = 0; i < s->nt && !rc; i++)
        for (int j = 0; j < s->t[i].np && !rc; j++) {
            struct piece *p = &s->t[i].p[j];
            if (p->file % nranks != rank)
                continue;
            for (int k = 0; k < (s->zero ? 1 : 3) && !rc; k++) {
                snprintf(key, sizeof key, "%s%s", kind_prefix[k], p->key);
                if ((rc = resolve(s, p->file, key, p->rows * p->cols, &p->e[k], err)))
                    *bad_file = p->file;
            }
        }
    for (int g = 0; g < s->ng && !rc; g++)
        for (int j = 0; j < s->g[g].n && !rc; j++) {
            struct zshard *z = &s->g[g].s[j];
            if (z->file % nranks != rank)
                continue;
            for (int k = K_M; k <= K_V && !rc; k++)
                if ((rc = resolve(s, z->file, zero_key[k], s->g[g].shard_elems, &z->e[k], err)))
                    *bad_file = z->file;
        }
    /* A file whose header does not parse or lacks an entry may simply be corrupted: its
     * checksum says so more plainly. */
    struct dp_err ce = {0};
    if (rc && *bad_file >= 0 && verify_file(s, *bad_file, true, &ce)) {
        dp_err_clear(err);
        rc = dp_err_set(err, ce.code, "%s", ce.msg);
    }
    return rc;
}

/* Why checkpoint `s` cannot continue training model `b` under layout `l` (empty when it
 * can). */
static void incompatibility(const struct src *s, const struct dp_model *b,
                            const struct dp_layout *l, char *why, size_t cap)
{
    const struct dp_model *a = &s->model;
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
#undef DIFF_I
#undef DIFF_S
    why[0] = '\0';
    if (*d) {
        snprintf(why, cap,
                 "%s: written for model %s, which differs from this run's %s: %s (checkpoint vs "
                 "this run)",
                 s->dir, a->name, b->name, d);
    } else if (strcmp(s->dtype, DTYPE)) {
        snprintf(why, cap, "%s: tensors are %s, this executor computes in %s", s->dir, s->dtype,
                 DTYPE);
    } else if (s->gbs != l->gbs || s->seq_len != l->seq_len) {
        snprintf(why, cap,
                 "%s: written with gbs=%lld seq_len=%lld, this run has gbs=%lld seq_len=%lld: "
                 "the data position does not carry over (keep gbs and seq_len when changing "
                 "the layout)",
                 s->dir, (long long)s->gbs, (long long)s->seq_len, (long long)l->gbs,
                 (long long)l->seq_len);
    }
}

/* Rank 0: what differs but does not stop the resume. */
static void notes(struct dp_exec *ex, const struct src *s)
{
    const struct dp_exec_opts *o = &ex->o;
    char d[900] = "", msg[1200];
#define NOTE_D(f, name)                                                                            \
    if (s->f != (double)(o->name))                                                                 \
        snprintf(d + strlen(d), sizeof d - strlen(d), "%s%s %g -> %g", *d ? ", " : "", #name,      \
                 (double)s->f, (double)(o->name));
    NOTE_D(lr, lr);
    NOTE_D(warmup, warmup_steps);
    NOTE_D(min_lr_frac, min_lr_frac);
    NOTE_D(wd, weight_decay);
    NOTE_D(beta1, beta1);
    NOTE_D(beta2, beta2);
    NOTE_D(eps, eps);
    NOTE_D(clip, grad_clip);
    if (s->step >= o->steps) {
        snprintf(msg, sizeof msg,
                 "the checkpoint is at step %d and this run has %d steps: nothing is left to "
                 "train (its weights are written as they are)",
                 s->step, o->steps);
        emit(ex, DP_CKPT_NOTE, s->step, s->dir, msg, 0, 0, NULL);
    }
    if (s->steps != o->steps)
        snprintf(d + strlen(d), sizeof d - strlen(d), "%ssteps %d -> %d", *d ? ", " : "", s->steps,
                 o->steps);
#undef NOTE_D
    if (*d) {
        snprintf(msg, sizeof msg,
                 "training options differ from the checkpoint's (%s): the learning-rate "
                 "schedule continues with this run's",
                 d);
        emit(ex, DP_CKPT_NOTE, s->step, s->dir, msg, 0, 0, NULL);
    }
    if (s->data_tokens != o->data->n || s->data_crc != data_crc(ex)) {
        snprintf(msg, sizeof msg,
                 "the data differs from the checkpoint's (%lld tokens of %s, crc32c 0x%08x; now "
                 "%lld tokens of %s): the batches of the remaining steps change",
                 (long long)s->data_tokens, s->data_source, s->data_crc, (long long)o->data->n,
                 o->data->source);
        emit(ex, DP_CKPT_NOTE, s->step, s->dir, msg, 0, 0, NULL);
    }
}

/* Published checkpoints to try, newest first: `dir` itself when it is one. */
static int candidates(const char *dir, int **steps, int *n, bool *single)
{
    *steps = NULL;
    *n = 0;
    *single = has_manifest(dir);
    if (*single) {
        *steps = malloc(sizeof **steps);
        if (!*steps)
            return -1;
        (*steps)[0] = 0;
        *n = 1;
        return 0;
    }
    struct dir_entry *e;
    int ne;
    if (scan_dir(dir, &e, &ne))
        return -1;
    *steps = malloc((size_t)(ne ? ne : 1) * sizeof **steps);
    if (!*steps) {
        free(e);
        return -1;
    }
    for (int i = ne - 1; i >= 0; i--)
        if (e[i].kind == E_PUBLISHED)
            (*steps)[(*n)++] = e[i].step;
    free(e);
    return 0;
}

int dp__ckpt_resume(struct dp_exec *ex, int *start, bool *collective)
{
    const struct dp_ckpt_opts *ck = ex->o.ckpt;
    *start = 0;
    *collective = true;
    if (!ck || (!ck->resume && !ck->dir))
        return 0;
    int rc = ensure_state(ex); /* --ckpt-interval counts from here */
    if (rc || !ck->resume)
        return rc;
    int *steps = NULL, n = 0, skipped = 0;
    bool single = false;
    if (!is_dir(ck->resume))
        return dp_err_set(ex->err, DP_ENOENT, "--resume %s: no such directory", ck->resume);
    if (candidates(ck->resume, &steps, &n, &single))
        return dp_err_set(ex->err, DP_EIO, "%s: cannot list: %s", ck->resume, strerror(errno));
    struct src s;
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
        char path[PATHMAX];
        candidate_path(path, sizeof path, ck->resume, single, step);
        /* 0 good, 1 damaged (try an older one), 2 incompatible (stop). */
        struct dp_err lerr = {0};
        char why[1200] = "";
        double bad = src_open(path, &s, &lerr) ? 1 : 0;
        if (!bad && !single && s.step != step) {
            dp_err_set(&lerr, DP_EINVAL, "%s: the manifest says step %d", path, s.step);
            bad = 1;
        }
        if (!bad) {
            incompatibility(&s, ex->m, &ex->l, why, sizeof why);
            bad = *why ? 2 : 0;
        }
        /* The manifest against the model, and the files' entries and checksums, split over
         * the ranks: badf is a damaged file this rank found. */
        int badf = -1;
        if (!bad)
            bad = verify_structure(&s, ex->rank, ex->world, &badf, &lerr) ? 1 : 0;
        for (int i = ex->rank; !bad && i < s.nfiles; i += ex->world) {
            dp__beat("verifying checkpoint");
            if (verify_file(&s, i, true, &lerr)) {
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
            if (!verify_file(&s, f, true, &lerr))
                verify_structure(&s, f, s.nfiles, &bf, &lerr);
        }
        if (ex->rank == 0 && !single)
            emit(ex, DP_CKPT_SKIPPED, step, path, lerr.msg[0] ? lerr.msg : "damaged", 0, 0, NULL);
        skipped++;
        src_close(&s);
        if (single) {
            rc = dp_err_set(ex->err, DP_EINVAL, "%s: the checkpoint is damaged: %s", path,
                            lerr.msg[0] ? lerr.msg : "see the messages above");
            break;
        }
    }
    free(steps);
    if (rc) {
        src_close(&s);
        return rc;
    }
    /* Reading can fail on one rank only (I/O): that rank reports it. */
    *collective = false;
    rc = load_state(ex, &s);
    if (!rc) {
        *start = s.step;
        ex->adam_t = (uint64_t)s.adam_step;
        if (ex->rank == 0) {
            notes(ex, &s);
            emit(ex, DP_CKPT_RESUMED, s.step, s.dir, NULL, 0, 0, s.saved_at);
        }
    }
    src_close(&s);
    ex->ck->last_save_s = mono_s();
    return rc;
}

int dp_ckpt_check_resume(const char *dir, const struct dp_model *m, const struct dp_layout *l,
                         struct dp_err *err)
{
    if (!is_dir(dir))
        return dp_err_set(err, DP_ENOENT, "--resume %s: no such directory", dir);
    int *steps = NULL, n = 0;
    bool single = false;
    if (candidates(dir, &steps, &n, &single))
        return dp_err_set(err, DP_EIO, "%s: cannot list: %s", dir, strerror(errno));
    int rc = DP_ENOENT;
    char why[1200] = "", damaged[900] = "";
    int ndamaged = 0;
    for (int i = 0; i < n && rc == DP_ENOENT; i++) {
        char path[PATHMAX];
        candidate_path(path, sizeof path, dir, single, steps[i]);
        struct src s;
        struct dp_err e = {0};
        bool ok = src_open(path, &s, &e) == 0;
        if (ok) {
            for (int f = 0; f < s.nfiles && ok; f++)
                ok = verify_file(&s, f, false, &e) == 0;
            if (ok)
                incompatibility(&s, m, l, why, sizeof why);
            /* An incompatible checkpoint stops the search: its reason is the answer. */
            int bf;
            if (ok && !*why)
                ok = verify_structure(&s, 0, 1, &bf, &e) == 0;
            src_close(&s);
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

static void info_fill(struct dp_ckpt_info *in, const struct src *s)
{
    in->step = s->step;
    in->steps = s->steps;
    snprintf(in->model, sizeof in->model, "%s", s->model.name);
    dp_layout_format(&s->layout, in->layout, sizeof in->layout);
    in->world = s->world;
    in->nfiles = s->nfiles;
    in->bytes = 0;
    for (int i = 0; i < s->nfiles; i++)
        in->bytes += s->files[i].bytes;
    snprintf(in->saved_at, sizeof in->saved_at, "%s", s->saved_at);
}

static void check_one(const char *path, int step, bool verify, struct dp_ckpt_info *in)
{
    memset(in, 0, sizeof *in);
    snprintf(in->path, sizeof in->path, "%s", path);
    in->step = step;
    in->verified = verify;
    struct src s;
    struct dp_err e = {0};
    if (src_open(path, &s, &e)) {
        in->state = DP_CKPT_DAMAGED;
        snprintf(in->problem, sizeof in->problem, "%s", e.msg);
        return;
    }
    info_fill(in, &s);
    if (step >= 0 && s.step != step) {
        in->state = DP_CKPT_DAMAGED;
        snprintf(in->problem, sizeof in->problem, "the manifest says step %d, the directory %d",
                 s.step, step);
    }
    for (int i = 0; i < s.nfiles && in->state == DP_CKPT_OK; i++)
        if (verify_file(&s, i, verify, &e)) {
            in->state = DP_CKPT_DAMAGED;
            snprintf(in->problem, sizeof in->problem, "%s", e.msg);
        }
    int bf;
    if (in->state == DP_CKPT_OK && verify_structure(&s, 0, 1, &bf, &e)) {
        in->state = DP_CKPT_DAMAGED;
        snprintf(in->problem, sizeof in->problem, "%s", e.msg);
    }
    src_close(&s);
}

int dp_ckpt_list(const char *dir, bool verify, struct dp_ckpt_info **out, int *n,
                 struct dp_err *err)
{
    *out = NULL;
    *n = 0;
    if (!is_dir(dir))
        return dp_err_set(err, DP_ENOENT, "%s: no such directory", dir);
    if (has_manifest(dir)) {
        *out = calloc(1, sizeof **out);
        if (!*out)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        check_one(dir, -1, verify, *out);
        *n = 1;
        return 0;
    }
    struct dir_entry *e;
    int ne;
    if (scan_dir(dir, &e, &ne))
        return dp_err_set(err, DP_EIO, "%s: cannot list: %s", dir, strerror(errno));
    *out = calloc((size_t)(ne ? ne : 1), sizeof **out);
    if (!*out) {
        free(e);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    for (int i = 0; i < ne; i++) {
        struct dp_ckpt_info *in = &(*out)[(*n)++];
        char p[PATHMAX + 16];
        if (e[i].kind == E_PUBLISHED) {
            ckpt_path(p, sizeof p, dir, e[i].step, "");
            check_one(p, e[i].step, verify, in);
            continue;
        }
        memset(in, 0, sizeof *in);
        ckpt_path(in->path, sizeof in->path, dir, e[i].step,
                  e[i].kind == E_TMP ? ".tmp" : ".superseded");
        in->step = e[i].step;
        in->state = e[i].kind == E_TMP ? DP_CKPT_UNPUBLISHED : DP_CKPT_SUPERSEDED;
        snprintf(in->problem, sizeof in->problem, "%s",
                 e[i].kind == E_TMP ? "a save that did not finish (ignored)"
                                    : "newer than a checkpoint a later run resumed from "
                                      "(ignored; kept for inspection)");
    }
    free(e);
    return 0;
}

/* ------------------------------------------------------------------ export */

enum xop { X_COPY = 0, X_T, X_CAT3, X_CAT3_T };

struct xt {
    char key[96];
    int ndim;
    int64_t shape[2];
    enum xop op;
    struct stensor *in[3];
};

/* Full tensor t (rows x cols, padding dropped) into buf. */
static int gather_full(struct src *s, struct stensor *t, real *buf, struct dp_err *err)
{
    for (int64_t r = 0; r < t->rows; r++) {
        int64_t got = 0;
        int rc = fetch_row(s, t, K_PARAM, r, 0, t->cols, buf + r * t->cols, &got, err);
        if (rc)
            return rc;
        if (got != t->cols)
            return dp_err_set(err, DP_EINVAL,
                              "%s: tensor %s: row %lld is not fully in the checkpoint's shards",
                              s->dir, t->name, (long long)r);
    }
    return 0;
}

/* dplan name -> Hugging Face name, per model family. */
struct hf_pair {
    const char *from, *to;
};

struct hf_family {
    const struct hf_pair *top; /* whole names ("wte") */
    int ntop;
    const char *layer_prefix;    /* then the layer number and "." */
    const struct hf_pair *layer; /* per layer, after "h.L." */
    int nlayer;
    const struct hf_pair *trans; /* per layer, stored transposed */
    int ntrans;
    bool fused_qkv; /* q, k, v as one c_attn weight and bias */
};

#define HF_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct hf_pair gpt2_top[] = {{"wte", "transformer.wte.weight"},
                                          {"wpe", "transformer.wpe.weight"},
                                          {"lnf.w", "transformer.ln_f.weight"},
                                          {"lnf.b", "transformer.ln_f.bias"}};
static const struct hf_pair gpt2_layer[] = {
    {"ln1.w", "ln_1.weight"},     {"ln1.b", "ln_1.bias"},          {"ln2.w", "ln_2.weight"},
    {"ln2.b", "ln_2.bias"},       {"attn.bo", "attn.c_proj.bias"}, {"mlp.b1", "mlp.c_fc.bias"},
    {"mlp.b2", "mlp.c_proj.bias"}};
/* Conv1D stores [in, out]: the transposes of nn.Linear's [out, in]. */
static const struct hf_pair gpt2_trans[] = {{"attn.wo", "attn.c_proj.weight"},
                                            {"mlp.w1", "mlp.c_fc.weight"},
                                            {"mlp.w2", "mlp.c_proj.weight"}};
static const struct hf_family hf_gpt2 = {.top = gpt2_top,
                                         .ntop = HF_N(gpt2_top),
                                         .layer_prefix = "transformer.h.",
                                         .layer = gpt2_layer,
                                         .nlayer = HF_N(gpt2_layer),
                                         .trans = gpt2_trans,
                                         .ntrans = HF_N(gpt2_trans),
                                         .fused_qkv = true};

static const struct hf_pair llama_top[] = {{"wte", "model.embed_tokens.weight"},
                                           {"lnf.w", "model.norm.weight"},
                                           {"lm_head", "lm_head.weight"}};
static const struct hf_pair llama_layer[] = {
    {"ln1.w", "input_layernorm.weight"},    {"ln2.w", "post_attention_layernorm.weight"},
    {"attn.wq", "self_attn.q_proj.weight"}, {"attn.wk", "self_attn.k_proj.weight"},
    {"attn.wv", "self_attn.v_proj.weight"}, {"attn.bq", "self_attn.q_proj.bias"},
    {"attn.bk", "self_attn.k_proj.bias"},   {"attn.bv", "self_attn.v_proj.bias"},
    {"attn.wo", "self_attn.o_proj.weight"}, {"mlp.w_gate", "mlp.gate_proj.weight"},
    {"mlp.w_up", "mlp.up_proj.weight"},     {"mlp.w2", "mlp.down_proj.weight"}};
static const struct hf_family hf_llama = {.top = llama_top,
                                          .ntop = HF_N(llama_top),
                                          .layer_prefix = "model.layers.",
                                          .layer = llama_layer,
                                          .nlayer = HF_N(llama_layer)};

static const char *hf_lookup(const struct hf_pair *p, int n, const char *from)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(from, p[i].from))
            return p[i].to;
    return NULL;
}

static int hf_plan(struct src *s, struct xt *x, int *nx, struct dp_err *err)
{
    const struct dp_model *m = &s->model;
    bool gpt2 = m->norm == DP_NORM_LAYERNORM && m->ffn == DP_FFN_GELU && m->pos == DP_POS_LEARNED &&
                m->tied_embeddings && m->qkv_bias && m->out_bias && m->mlp_bias;
    bool llama = m->norm == DP_NORM_RMSNORM && m->ffn == DP_FFN_SWIGLU && m->pos == DP_POS_ROPE &&
                 !m->out_bias && !m->mlp_bias;
    if (!gpt2 && !llama)
        return dp_err_set(err, DP_EINVAL,
                          "--names hf: model %s is neither GPT-2 style (layernorm, gelu, learned "
                          "positions, biases, tied embeddings) nor Llama style (rmsnorm, swiglu, "
                          "rope, no output/MLP biases); export with dplan names",
                          m->name);
    const struct hf_family *fam = gpt2 ? &hf_gpt2 : &hf_llama;
    *nx = 0;
    for (int i = 0; i < s->nt; i++) {
        struct stensor *t = &s->t[i];
        if (t->tied)
            continue;
        struct xt *o = &x[*nx];
        memset(o, 0, sizeof *o);
        o->op = X_COPY;
        o->in[0] = t;
        o->ndim = t->ndim;
        o->shape[0] = t->rows;
        o->shape[1] = t->cols;
        int L = -1, k = 0;
        char rest[64] = "";
        if (sscanf(t->name, "h.%d.%n", &L, &k) == 1 && k > 0)
            snprintf(rest, sizeof rest, "%s", t->name + k);
        const char *name = hf_lookup(fam->top, fam->ntop, t->name);
        char buf[96];
        const char *ln = NULL;
        if (!name && L >= 0 && (ln = hf_lookup(fam->layer, fam->nlayer, rest))) {
            snprintf(buf, sizeof buf, "%s%d.%s", fam->layer_prefix, L, ln);
            name = buf;
        }
        if (!name && L >= 0 && (ln = hf_lookup(fam->trans, fam->ntrans, rest))) {
            snprintf(buf, sizeof buf, "%s%d.%s", fam->layer_prefix, L, ln);
            name = buf;
            o->op = X_T;
            o->shape[0] = t->cols;
            o->shape[1] = t->rows;
        }
        if (fam->fused_qkv) {
            /* q, k, v fused as c_attn ([h, 3h] weight, [3h] bias), k and v skipped. */
            bool wq = !strcmp(rest, "attn.wq"), bq = !strcmp(rest, "attn.bq");
            if (!name && L >= 0 && (wq || bq)) {
                char kn[64], vn[64];
                snprintf(kn, sizeof kn, "h.%d.attn.%ck", L, wq ? 'w' : 'b');
                snprintf(vn, sizeof vn, "h.%d.attn.%cv", L, wq ? 'w' : 'b');
                o->in[1] = (struct stensor *)find_tensor(s, kn);
                o->in[2] = (struct stensor *)find_tensor(s, vn);
                if (!o->in[1] || !o->in[2])
                    return dp_err_set(err, DP_EINVAL, "%s: layer %d lacks k or v", s->dir, L);
                int64_t out = t->rows + o->in[1]->rows + o->in[2]->rows;
                snprintf(buf, sizeof buf, "%s%d.attn.c_attn.%s", fam->layer_prefix, L,
                         wq ? "weight" : "bias");
                name = buf;
                o->op = wq ? X_CAT3_T : X_CAT3;
                o->shape[0] = wq ? t->cols : out;
                o->shape[1] = wq ? out : 1;
            }
            if (!name && L >= 0 &&
                (!strcmp(rest, "attn.wk") || !strcmp(rest, "attn.wv") || !strcmp(rest, "attn.bk") ||
                 !strcmp(rest, "attn.bv")))
                continue;
        }
        if (!name)
            return dp_err_set(err, DP_EINVAL, "--names hf: no Hugging Face name for tensor %s",
                              t->name);
        snprintf(o->key, sizeof o->key, "%s", name);
        if (o->ndim == 2 || o->op == X_T || o->op == X_CAT3_T)
            o->ndim = 2;
        if (o->op == X_CAT3)
            o->ndim = 1;
        (*nx)++;
    }
    return 0;
}

static int export_write(struct src *s, const char *out_file, enum dp_ckpt_names names,
                        struct dp_ckpt_export_result *res, struct dp_err *err)
{
    struct xt *x = calloc((size_t)s->nt, sizeof *x);
    if (!x)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int nx = 0, rc = 0;
    if (names == DP_CKPT_NAMES_HF) {
        rc = hf_plan(s, x, &nx, err);
    } else {
        for (int i = 0; i < s->nt; i++) {
            if (s->t[i].tied)
                continue;
            struct xt *o = &x[nx++];
            snprintf(o->key, sizeof o->key, "%s", s->t[i].name);
            o->ndim = s->t[i].ndim;
            o->shape[0] = s->t[i].rows;
            o->shape[1] = s->t[i].cols;
            o->in[0] = &s->t[i];
        }
    }
    struct dp_st_tensor *ht = calloc((size_t)(nx ? nx : 1), sizeof *ht);
    int64_t maxe = 0;
    for (int i = 0; !rc && ht && i < nx; i++) {
        snprintf(ht[i].key, sizeof ht[i].key, "%s", x[i].key);
        ht[i].dtype = s->dtype;
        ht[i].ndim = x[i].ndim;
        ht[i].shape[0] = x[i].shape[0];
        ht[i].shape[1] = x[i].shape[1];
        int64_t e = x[i].shape[0] * (x[i].ndim == 2 ? x[i].shape[1] : 1);
        ht[i].bytes = e * (int64_t)sizeof(real);
        maxe = e > maxe ? e : maxe;
    }
    char sstep[32];
    snprintf(sstep, sizeof sstep, "%d", s->step);
    const char *meta[] = {"format",   "pt",
                          "producer", "dplan ckpt export",
                          "model",    s->model.name,
                          "step",     sstep,
                          "names",    names == DP_CKPT_NAMES_HF ? "huggingface" : "dplan",
                          NULL};
    size_t hlen = 0;
    char *hdr = !rc && ht ? dp__st_header(ht, nx, meta, &hlen) : NULL;
    real *full = malloc((size_t)(maxe ? maxe : 1) * sizeof(real));
    real *part = malloc((size_t)(maxe ? maxe : 1) * sizeof(real));
    if (!rc && (!ht || !hdr || !full || !part))
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
    /* A new temporary next to out_file, renamed over it once complete (outfile.h). */
    char tmp[PATHMAX + 64];
    struct dp_st_writer w;
    bool opened = false;
    if (!rc) {
        int fd = dp__tmp_open(out_file, tmp, sizeof tmp, err);
        if (fd < 0) {
            rc = fd;
        } else {
            dp__st_adopt(&w, fd, tmp, err);
            opened = true;
            rc = dp__st_write_header(&w, hdr, hlen);
        }
    }
    int64_t bytes = 8 + (int64_t)hlen;
    for (int i = 0; i < nx && !rc; i++) {
        struct xt *o = &x[i];
        struct stensor *t = o->in[0];
        int64_t e = ht[i].bytes / (int64_t)sizeof(real);
        if (o->op == X_COPY) {
            rc = gather_full(s, t, full, err);
        } else if (o->op == X_T) {
            rc = gather_full(s, t, part, err);
            for (int64_t r = 0; !rc && r < t->rows; r++)
                for (int64_t c = 0; c < t->cols; c++)
                    full[c * t->rows + r] = part[r * t->cols + c];
        } else {
            /* Rows of q, then k, then v: [out, in]; CAT3_T stores the transpose. */
            int64_t row = 0, out = o->op == X_CAT3_T ? o->shape[1] : o->shape[0];
            for (int j = 0; j < 3 && !rc; j++) {
                struct stensor *u = o->in[j];
                rc = gather_full(s, u, part, err);
                for (int64_t r = 0; !rc && r < u->rows; r++)
                    for (int64_t c = 0; c < u->cols; c++) {
                        if (o->op == X_CAT3)
                            full[row + r] = part[r];
                        else
                            full[c * out + row + r] = part[r * u->cols + c];
                    }
                row += u->rows;
            }
        }
        if (!rc)
            rc = dp__st_write(&w, full, (size_t)e * sizeof(real));
        bytes += e * (int64_t)sizeof(real);
    }
    if (opened) {
        if (!rc)
            rc = dp__st_finish(&w, true);
        else
            dp__st_abandon(&w);
        if (!rc)
            rc = dp__tmp_publish(tmp, out_file, err);
        else
            unlink(tmp);
    }
    if (!rc) {
        res->tensors = nx;
        res->bytes = bytes;
    }
    free(full);
    free(part);
    free(hdr);
    free(ht);
    free(x);
    return rc;
}

int dp_ckpt_export(const char *dir, int step, const char *out_file, enum dp_ckpt_names names,
                   struct dp_ckpt_export_result *res, struct dp_err *err)
{
    memset(res, 0, sizeof *res);
    struct dp_ckpt_info *list;
    int n;
    int rc = dp_ckpt_list(dir, false, &list, &n, err);
    if (rc)
        return rc;
    /* Newest first: the requested step, or the newest that verifies. */
    char chosen[PATHMAX] = "";
    char why[1200] = "";
    for (int i = n - 1; i >= 0 && !*chosen; i--) {
        struct dp_ckpt_info *in = &list[i];
        if (in->state == DP_CKPT_UNPUBLISHED || in->state == DP_CKPT_SUPERSEDED ||
            (step >= 0 && in->step != step))
            continue;
        struct dp_ckpt_info v;
        check_one(in->path, n == 1 ? -1 : in->step, true, &v);
        if (v.state == DP_CKPT_OK)
            snprintf(chosen, sizeof chosen, "%s", in->path);
        else if (!*why)
            snprintf(why, sizeof why, "%s", v.problem);
    }
    free(list);
    if (!*chosen) {
        if (*why)
            return dp_err_set(err, DP_EINVAL, "%s", why);
        if (step >= 0)
            return dp_err_set(err, DP_ENOENT, "%s: no checkpoint of step %d", dir, step);
        return dp_err_set(err, DP_ENOENT, "%s: no complete checkpoint", dir);
    }
    struct src s;
    if ((rc = src_open(chosen, &s, err)))
        return rc;
    snprintf(res->checkpoint, sizeof res->checkpoint, "%s", chosen);
    res->step = s.step;
    rc = export_write(&s, out_file, names, res, err);
    src_close(&s);
    return rc;
}
