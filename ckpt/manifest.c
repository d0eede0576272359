/*
 * manifest.json (ckpt.h): the writer, and the reader on core's JSON field
 * readers, so that every error names the manifest and the JSON path
 * ("tensors[3].shards[0].offset: expected ..., got ..."). The reader checks
 * what a manifest says on its own (types, ranges, shards inside their
 * tensors, files named in "files"); dp_ckpt_verify_structure checks it
 * against the model it names.
 *
 * What a rank file holds (README "Checkpoints and restarts"): the ranks of
 * DP replica 0 write their weight slices, each TP-split tensor by every TP
 * rank and each replicated one by TP rank 0, so every global element is
 * stored once (Megatron dist-ckpt's replica_id 0); the last stage's copy of
 * a tied embedding is stored as "wte.tied_copy". Without ZeRO the same ranks
 * write AdamW m and v as "exp_avg.NAME" and "exp_avg_sq.NAME"; with ZeRO-1
 * every rank writes its flat shard as "exp_avg" / "exp_avg_sq", located by
 * the manifest's flat offsets (Megatron's dp_reshardable format, here
 * readable under any layout).
 */
#include "ckpt.h"
#include "internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const dp__ckpt_kind_prefix[3] = {"", "exp_avg.", "exp_avg_sq."};
const char *const dp__ckpt_zero_key[3] = {"", "exp_avg", "exp_avg_sq"};

void dp_ckpt_rank_file_name(char *buf, size_t cap, int rank)
{
    snprintf(buf, cap, "rank_%05d.safetensors", rank);
}

/* ------------------------------------------------------------------ writing */

static cJSON *num_arr2(int64_t a, int64_t b)
{
    cJSON *x = cJSON_CreateArray();
    cJSON_AddItemToArray(x, cJSON_CreateNumber((double)a));
    cJSON_AddItemToArray(x, cJSON_CreateNumber((double)b));
    return x;
}

static void add_crc(cJSON *o, const char *key, uint32_t crc)
{
    char buf[16];
    snprintf(buf, sizeof buf, "0x%08x", crc);
    cJSON_AddStringToObject(o, key, buf);
}

/* The tensors of stage s and their shards; the ZeRO-1 groups of the stage. */
static int add_stage(cJSON *tensors, cJSON *zgroups, const struct dp_ckpt_meta *mt, int s,
                     struct dp_err *err)
{
    const struct dp_layout *l = &mt->layout;
    struct dp_ckpt_slice *sl = NULL;
    int ns = 0;
    int rc = dp_ckpt_stage_slices(&mt->model, l, s, 0, &sl, &ns, err);
    if (rc)
        return rc;
    char nm[96], fname[64];
    int64_t flat = 0;
    for (int i = 0; i < ns; i++) {
        const struct dp_ckpt_slice *sg = &sl[i];
        bool sr = sg->rows < sg->grows, sc = sg->cols < sg->gcols;
        cJSON *t = cJSON_CreateObject();
        dp_ckpt_slice_key(sg, nm, sizeof nm);
        cJSON_AddStringToObject(t, "name", nm);
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)sg->out_rows));
        if (sg->gcols > 1)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)sg->gcols));
        cJSON_AddNumberToObject(t, "padded_rows", (double)sg->grows);
        cJSON_AddNumberToObject(t, "stage", s);
        cJSON_AddStringToObject(t, "sharding", sr ? "tp_rows" : sc ? "tp_cols" : "replicated");
        if (sg->tied_copy)
            cJSON_AddStringToObject(t, "tied_to", sg->name);
        cJSON *sh = cJSON_AddArrayToObject(t, "shards");
        /* A routed expert splits over its expert tensor group (etp ranks) and lies on
         * ep_rank j / (E / ep), expert-data-parallel rank 0 (core dp_rank_ecoords, the
         * executor's writers, executor/ckpt_save.c). */
        const bool ex = sg->expert >= 0 && mt->model.experts > 0;
        const int ep = l->ep > 0 ? l->ep : 1;
        for (int tr = 0; tr < (sr || sc ? (ex ? dp_layout_etp(l) : l->tp) : 1); tr++) {
            struct dp_coords c = {.tp_rank = tr, .pp_rank = s};
            if (ex)
                dp_rank_of_ecoords(l->tp, l->cp, dp_layout_etp(l), ep, tr,
                                   (int)(sg->expert / (mt->model.experts / ep)), 0, &c);
            cJSON *p = cJSON_CreateObject();
            dp_ckpt_rank_file_name(fname, sizeof fname,
                                   dp_rank_of_cp(&c, l->tp, l->cp, l->dp, l->pp));
            cJSON_AddStringToObject(p, "file", fname);
            cJSON_AddStringToObject(p, "key", nm);
            cJSON_AddItemToObject(p, "offset",
                                  num_arr2(sr ? tr * sg->rows : 0, sc ? tr * sg->cols : 0));
            cJSON_AddItemToObject(p, "shape", num_arr2(sg->rows, sg->cols));
            cJSON_AddNumberToObject(p, "tp_rank", tr);
            cJSON_AddNumberToObject(p, "flat_offset", (double)flat);
            cJSON_AddItemToArray(sh, p);
        }
        cJSON_AddItemToArray(tensors, t);
        flat += sg->rows * sg->cols;
    }
    free(sl);
    if (!zgroups)
        return 0;
    /* The stage's flat buffer, padded to a multiple of the shard group (dp; shard_group
     * under HSDP) and split in that many shards; under HSDP replica 0's files hold them. */
    const int cp = l->cp > 1 ? l->cp : 1; /* shards span dp x cp: shard k on q = k */
    const int nsh =
        l->zero >= 1 && (l->dp * cp) % dp_layout_shard(l) == 0 ? dp_layout_shard(l) : l->dp * cp;
    int64_t nflat = (flat + nsh - 1) / nsh * nsh, shard = nflat / nsh;
    for (int tr = 0; tr < l->tp; tr++) {
        cJSON *g = cJSON_CreateObject();
        cJSON_AddNumberToObject(g, "tp_rank", tr);
        cJSON_AddNumberToObject(g, "pp_rank", s);
        cJSON_AddNumberToObject(g, "flat_elems", (double)nflat);
        cJSON_AddNumberToObject(g, "shard_elems", (double)shard);
        cJSON *gs = cJSON_AddArrayToObject(g, "shards");
        for (int k = 0; k < nsh; k++) {
            /* q = cp_rank + cp dp_rank; the key keeps its name (q = dp_rank when cp = 1) */
            struct dp_coords c = {
                .tp_rank = tr, .dp_rank = k / cp, .pp_rank = s, .cp_rank = k % cp};
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "dp_rank", k);
            dp_ckpt_rank_file_name(fname, sizeof fname,
                                   dp_rank_of_cp(&c, l->tp, l->cp, l->dp, l->pp));
            cJSON_AddStringToObject(p, "file", fname);
            cJSON_AddNumberToObject(p, "flat_offset", (double)(k * shard));
            cJSON_AddItemToArray(gs, p);
        }
        cJSON_AddItemToArray(zgroups, g);
    }
    return 0;
}

cJSON *dp_ckpt_manifest_json(const struct dp_ckpt_meta *mt, const struct dp_ckpt_rank_file *files,
                             struct dp_err *err)
{
    const struct dp_layout *l = &mt->layout;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddNumberToObject(root, "dplan_checkpoint", DP_CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "step", mt->step);
    cJSON_AddNumberToObject(root, "steps", mt->steps);
    cJSON_AddStringToObject(root, "saved_at", mt->saved_at);
    cJSON_AddStringToObject(root, "created_by", "dplan run");
    cJSON_AddNumberToObject(root, "world_size", mt->world);
    cJSON_AddStringToObject(root, "dtype", mt->dtype);
    cJSON_AddItemToObject(root, "model", dp_model_to_json(&mt->model));
    cJSON_AddItemToObject(root, "layout", dp_layout_to_json(l));

    cJSON *opt = cJSON_AddObjectToObject(root, "optimizer");
    cJSON_AddStringToObject(opt, "type", "adamw");
    cJSON_AddNumberToObject(opt, "step", (double)mt->adam_step);
    cJSON_AddStringToObject(opt, "state", mt->zero ? "zero1_flat" : "per_tensor");
    cJSON_AddNumberToObject(opt, "lr", mt->lr);
    cJSON_AddNumberToObject(opt, "warmup_steps", mt->warmup);
    cJSON_AddNumberToObject(opt, "min_lr_frac", mt->min_lr_frac);
    cJSON_AddNumberToObject(opt, "weight_decay", mt->wd);
    cJSON_AddNumberToObject(opt, "beta1", mt->beta1);
    cJSON_AddNumberToObject(opt, "beta2", mt->beta2);
    cJSON_AddNumberToObject(opt, "eps", mt->eps);
    cJSON_AddNumberToObject(opt, "grad_clip", mt->clip);
    if (mt->loss_scale > 0) { /* fp16 only: older readers never see the keys otherwise */
        cJSON_AddNumberToObject(opt, "loss_scale", mt->loss_scale);
        cJSON_AddNumberToObject(opt, "loss_scale_growth", (double)mt->loss_scale_growth);
        cJSON_AddNumberToObject(opt, "loss_scale_hysteresis", (double)mt->loss_scale_hysteresis);
    }

    /* The data position: batches are windows of seq_len tokens (executor/schedule.c). */
    int64_t windows = (mt->data_tokens - 1) / mt->seq_len;
    cJSON *data = cJSON_AddObjectToObject(root, "data");
    cJSON_AddStringToObject(data, "source", mt->data_source);
    cJSON_AddNumberToObject(data, "tokens", (double)mt->data_tokens);
    add_crc(data, "crc32c", mt->data_crc);
    cJSON_AddNumberToObject(data, "seq_len", (double)mt->seq_len);
    cJSON_AddNumberToObject(data, "global_batch", (double)mt->gbs);
    cJSON_AddNumberToObject(data, "windows", (double)windows);
    cJSON_AddNumberToObject(data, "next_step", mt->step + 1);
    cJSON_AddNumberToObject(data, "samples_seen", (double)((int64_t)mt->step * mt->gbs));
    cJSON_AddNumberToObject(data, "next_window",
                            windows > 0 ? (double)(((int64_t)mt->step * mt->gbs) % windows) : 0);

    cJSON *rng = cJSON_AddObjectToObject(root, "rng");
    cJSON_AddNumberToObject(rng, "seed", (double)mt->seed);
    cJSON_AddStringToObject(rng, "generator",
                            "counter-based splitmix64 keyed by (seed, tensor name, element)");
    cJSON_AddNumberToObject(rng, "draws_after_init", 0);

    cJSON *jf = cJSON_AddArrayToObject(root, "files");
    char buf[64];
    for (int r = 0; r < mt->world; r++) {
        struct dp_coords c;
        dp_rank_coords_cp(r, l->tp, l->cp, l->dp, l->pp, &c);
        cJSON *f = cJSON_CreateObject();
        dp_ckpt_rank_file_name(buf, sizeof buf, r);
        cJSON_AddStringToObject(f, "name", buf);
        cJSON_AddNumberToObject(f, "rank", r);
        cJSON_AddNumberToObject(f, "tp_rank", c.tp_rank);
        cJSON_AddNumberToObject(f, "dp_rank", c.dp_rank);
        cJSON_AddNumberToObject(f, "pp_rank", c.pp_rank);
        cJSON_AddNumberToObject(f, "bytes", (double)files[r].bytes);
        add_crc(f, "crc32c", files[r].crc);
        cJSON_AddItemToArray(jf, f);
    }

    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    cJSON *zgroups = NULL;
    if (mt->zero)
        zgroups = cJSON_AddArrayToObject(cJSON_AddObjectToObject(root, "zero1"), "groups");
    for (int s = 0; s < l->pp; s++)
        if (add_stage(tensors, zgroups, mt, s, err)) {
            cJSON_Delete(root);
            return NULL;
        }
    return root;
}

/* ------------------------------------------------------------------ reading */

void dp_ckpt_close(struct dp_ckpt *ck)
{
    for (int i = 0; i < ck->nfiles; i++)
        if (ck->files[i].open)
            dp_ckpt_st_close(&ck->files[i].st);
    free(ck->files);
    for (int i = 0; i < ck->nt; i++)
        free(ck->t[i].p);
    free(ck->t);
    for (int i = 0; i < ck->ng; i++)
        free(ck->g[i].s);
    free(ck->g);
    memset(ck, 0, sizeof *ck);
}

static int file_index(const struct dp_ckpt *ck, const char *name)
{
    for (int i = 0; i < ck->nfiles; i++)
        if (!strcmp(ck->files[i].name, name))
            return i;
    return -1;
}

const struct dp_ckpt_tensor *dp_ckpt_find(const struct dp_ckpt *ck, const char *name)
{
    for (int i = 0; i < ck->nt; i++)
        if (!strcmp(ck->t[i].name, name))
            return &ck->t[i];
    return NULL;
}

/* "FILE: path: what" for errors the field readers do not cover. */
static int bad(struct dp_jr *jr, const char *key, const char *what)
{
    return dp_err_set(jr->err, DP_EINVAL, "%s: %s%s%s: %s", jr->file, jr->path,
                      jr->path[0] && key ? "." : "", key ? key : "", what);
}

/* A member that must be an object or an array, pushed onto the path; NULL with err set. */
static const cJSON *member(struct dp_jr *jr, const cJSON *obj, const char *key, bool array,
                           bool nonempty)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (array ? !cJSON_IsArray(v) || (nonempty && cJSON_GetArraySize(v) <= 0)
              : !cJSON_IsObject(v)) {
        char got[128], what[64];
        dp_json_describe(v, got, sizeof got);
        snprintf(what, sizeof what, "expected %s, got %s",
                 array ? (nonempty ? "a non-empty array" : "an array") : "an object", got);
        bad(jr, key, what);
        return NULL;
    }
    return v;
}

/* "0x" and 8 hex digits. */
static int get_crc(struct dp_jr *jr, const cJSON *o, const char *key, uint32_t *out)
{
    char b[32], *end;
    int rc = dp_jr_string(jr, o, key, true, b, sizeof b);
    if (rc)
        return rc;
    unsigned long v = strtoul(b, &end, 16);
    if (strncmp(b, "0x", 2) || *end || strlen(b) != 10 || v > 0xffffffffUL) {
        char what[96];
        snprintf(what, sizeof what, "expected \"0x\" and 8 hex digits, got \"%s\"", b);
        return bad(jr, key, what);
    }
    *out = (uint32_t)v;
    return 0;
}

/* A dimension or offset: an integer in [0, 2^31]. */
static bool dim_ok(const cJSON *x)
{
    return cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble <= DP__MAXDIM &&
           x->valuedouble == (double)(int64_t)x->valuedouble;
}

/* [a, b] with 0 <= a, b <= 2^31. */
static int get_pair(struct dp_jr *jr, const cJSON *o, const char *key, int64_t *a, int64_t *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    const cJSON *x = cJSON_GetArrayItem(v, 0), *y = cJSON_GetArrayItem(v, 1);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !dim_ok(x) || !dim_ok(y)) {
        const cJSON *culprit = !cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 ? v
                               : !dim_ok(x)                                    ? x
                                                                               : y;
        char got[128], what[192];
        dp_json_describe(culprit, got, sizeof got);
        snprintf(what, sizeof what, "expected [a, b] with 0 <= a, b <= 2^31, got %s", got);
        return bad(jr, key, what);
    }
    *a = (int64_t)x->valuedouble;
    *b = (int64_t)y->valuedouble;
    return 0;
}

static int get_int(struct dp_jr *jr, const cJSON *o, const char *key, int64_t lo, int64_t hi,
                   int *out)
{
    int64_t v = 0;
    int rc = dp_jr_int(jr, o, key, true, lo, hi, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

static int parse_piece(struct dp_jr *jr, struct dp_ckpt *ck, struct dp_ckpt_tensor *t,
                       const cJSON *jp, struct dp_ckpt_piece *p)
{
    static const char *const keys[] = {"file",    "key",         "offset", "shape",
                                       "tp_rank", "flat_offset", NULL};
    char fname[64];
    int rc = dp_jr_check_keys(jr, jp, keys);
    if (!rc)
        rc = dp_jr_string(jr, jp, "file", true, fname, sizeof fname);
    if (!rc)
        rc = dp_jr_string(jr, jp, "key", true, p->key, sizeof p->key);
    if (!rc)
        rc = get_pair(jr, jp, "offset", &p->r0, &p->c0);
    if (!rc)
        rc = get_pair(jr, jp, "shape", &p->rows, &p->cols);
    if (!rc)
        rc = dp_jr_int(jr, jp, "flat_offset", true, 0, (int64_t)1 << 53, &p->flat_off);
    if (!rc)
        rc = get_int(jr, jp, "tp_rank", 0, 1 << 20, &p->tp_rank);
    if (rc)
        return rc;
    p->group = -1;
    if ((p->file = file_index(ck, fname)) < 0) {
        char what[128];
        snprintf(what, sizeof what, "shard file %s is not in \"files\"", fname);
        return bad(jr, "file", what);
    }
    if (p->rows <= 0 || p->cols <= 0 || p->r0 + p->rows > t->padded_rows ||
        p->c0 + p->cols > t->cols)
        return bad(jr, NULL, "the shard lies outside the tensor");
    return 0;
}

static int parse_tensor(struct dp_jr *jr, struct dp_ckpt *ck, const cJSON *jt,
                        struct dp_ckpt_tensor *t)
{
    static const char *const keys[] = {"name",     "shape",   "padded_rows", "stage",
                                       "sharding", "tied_to", "shards",      NULL};
    int rc = dp_jr_check_keys(jr, jt, keys);
    if (!rc)
        rc = dp_jr_string(jr, jt, "name", true, t->name, sizeof t->name);
    if (rc)
        return rc;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(jt, "shape");
    t->ndim = cJSON_GetArraySize(shape);
    const cJSON *d0 = cJSON_GetArrayItem(shape, 0), *d1 = cJSON_GetArrayItem(shape, 1);
    if (!cJSON_IsArray(shape) || t->ndim < 1 || t->ndim > 2 || !cJSON_IsNumber(d0) ||
        !(d0->valuedouble >= 1 && d0->valuedouble <= DP__MAXDIM) ||
        (t->ndim == 2 &&
         (!cJSON_IsNumber(d1) || !(d1->valuedouble >= 1 && d1->valuedouble <= DP__MAXDIM))))
        return bad(jr, "shape", "expected 1 or 2 sizes in [1, 2^31]");
    t->rows = (int64_t)d0->valuedouble;
    t->cols = t->ndim == 2 ? (int64_t)d1->valuedouble : 1;
    if ((rc = dp_jr_int(jr, jt, "padded_rows", true, t->rows, (int64_t)DP__MAXDIM,
                        &t->padded_rows)) ||
        (rc = get_int(jr, jt, "stage", 0, 1 << 20, &t->stage)))
        return rc;
    t->tied = cJSON_GetObjectItemCaseSensitive(jt, "tied_to") != NULL;
    const cJSON *sh = member(jr, jt, "shards", true, true);
    if (!sh)
        return jr->err->code;
    int np = cJSON_GetArraySize(sh);
    t->p = calloc((size_t)np, sizeof *t->p);
    if (!t->p)
        return dp_err_set(jr->err, DP_ENOMEM, "out of memory");
    size_t k0 = dp_jr_push(jr, "shards", 0);
    const cJSON *jp;
    cJSON_ArrayForEach(jp, sh)
    {
        size_t k1 = dp_jr_push(jr, NULL, t->np);
        rc = parse_piece(jr, ck, t, jp, &t->p[t->np]);
        dp_jr_pop(jr, k1);
        if (rc)
            break;
        t->np++;
    }
    dp_jr_pop(jr, k0);
    return rc;
}

static int parse_group(struct dp_jr *jr, struct dp_ckpt *ck, const cJSON *jg,
                       struct dp_ckpt_zgroup *g)
{
    static const char *const keys[] = {"tp_rank",     "pp_rank", "flat_elems",
                                       "shard_elems", "shards",  NULL};
    static const char *const skeys[] = {"dp_rank", "file", "flat_offset", NULL};
    int rc = dp_jr_check_keys(jr, jg, keys);
    if (!rc)
        rc = get_int(jr, jg, "tp_rank", 0, 1 << 20, &g->tp_rank);
    if (!rc)
        rc = get_int(jr, jg, "pp_rank", 0, 1 << 20, &g->pp_rank);
    if (!rc)
        rc = dp_jr_int(jr, jg, "flat_elems", true, 1, (int64_t)1 << 53, &g->flat_elems);
    if (!rc)
        rc = dp_jr_int(jr, jg, "shard_elems", true, 1, (int64_t)1 << 53, &g->shard_elems);
    if (rc)
        return rc;
    const cJSON *sh = member(jr, jg, "shards", true, true);
    if (!sh)
        return jr->err->code;
    int k = cJSON_GetArraySize(sh);
    if (g->flat_elems % k || g->flat_elems / k != g->shard_elems)
        return bad(jr, "shards", "the shards do not tile flat_elems");
    g->s = calloc((size_t)k, sizeof *g->s);
    if (!g->s)
        return dp_err_set(jr->err, DP_ENOMEM, "out of memory");
    size_t k0 = dp_jr_push(jr, "shards", 0);
    const cJSON *js;
    cJSON_ArrayForEach(js, sh)
    {
        struct dp_ckpt_zshard *z = &g->s[g->n];
        size_t k1 = dp_jr_push(jr, NULL, g->n);
        char fname[64];
        int64_t dpr = 0;
        rc = dp_jr_check_keys(jr, js, skeys);
        if (!rc)
            rc = dp_jr_string(jr, js, "file", true, fname, sizeof fname);
        if (!rc)
            rc = dp_jr_int(jr, js, "dp_rank", false, 0, 1 << 20, &dpr);
        if (!rc)
            rc = dp_jr_int(jr, js, "flat_offset", true, 0, INT64_MAX / 2, &z->flat_off);
        if (!rc && (z->file = file_index(ck, fname)) < 0)
            rc = bad(jr, "file", "the shard file is not in \"files\"");
        if (!rc && z->flat_off != g->n * g->shard_elems)
            rc = bad(jr, "flat_offset", "the shards are out of order");
        dp_jr_pop(jr, k1);
        if (rc)
            break;
        g->n++;
    }
    dp_jr_pop(jr, k0);
    return rc;
}

static int parse_meta(struct dp_jr *jr, const cJSON *root, struct dp_ckpt_meta *mt)
{
    static const char *const okeys[] = {"type",
                                        "step",
                                        "state",
                                        "lr",
                                        "warmup_steps",
                                        "min_lr_frac",
                                        "weight_decay",
                                        "beta1",
                                        "beta2",
                                        "eps",
                                        "grad_clip",
                                        "loss_scale",
                                        "loss_scale_growth",
                                        "loss_scale_hysteresis",
                                        NULL};
    static const char *const dkeys[] = {"source",       "tokens",  "crc32c",    "seq_len",
                                        "global_batch", "windows", "next_step", "samples_seen",
                                        "next_window",  NULL};
    static const char *const rkeys[] = {"seed", "generator", "draws_after_init", NULL};
    int64_t v = 0;
    int rc = dp_jr_int(jr, root, "dplan_checkpoint", true, 1, 1 << 20, &v);
    if (rc)
        return rc;
    if (v > DP_CKPT_FORMAT)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: checkpoint format %lld is newer than this dplan reads (%d)",
                          jr->file, (long long)v, DP_CKPT_FORMAT);
    if ((rc = get_int(jr, root, "step", 0, 1 << 30, &mt->step)) ||
        (rc = get_int(jr, root, "steps", 0, 1 << 30, &mt->steps)) ||
        (rc = get_int(jr, root, "world_size", 1, 1 << 24, &mt->world)) ||
        (rc = dp_jr_string(jr, root, "saved_at", true, mt->saved_at, sizeof mt->saved_at)) ||
        (rc = dp_jr_string(jr, root, "dtype", true, mt->dtype, sizeof mt->dtype)))
        return rc;
    if (!dp_ckpt_st_dtype_size(mt->dtype))
        return bad(jr, "dtype", "expected a safetensors dtype (\"F32\", \"F64\", ...)");
    snprintf(jr->path, sizeof jr->path, "model");
    rc = dp_model_from_json(jr, cJSON_GetObjectItemCaseSensitive(root, "model"), &mt->model);
    snprintf(jr->path, sizeof jr->path, "layout");
    dp_layout_default(&mt->layout);
    if (!rc)
        rc = dp_layout_from_json(jr, cJSON_GetObjectItemCaseSensitive(root, "layout"), &mt->layout);
    jr->path[0] = '\0';
    if (rc)
        return rc;

    const cJSON *o = member(jr, root, "optimizer", false, false);
    if (!o)
        return jr->err->code;
    static const char *const states[] = {"per_tensor", "zero1_flat"};
    int state = 0;
    size_t k = dp_jr_push(jr, "optimizer", 0);
    if (!(rc = dp_jr_check_keys(jr, o, okeys)) &&
        !(rc = dp_jr_int(jr, o, "step", true, 0, INT64_MAX / 2, &mt->adam_step)) &&
        !(rc = dp_jr_enum(jr, o, "state", true, states, 2, &state)) &&
        !(rc = dp_jr_number(jr, o, "lr", true, 0, 1e300, &mt->lr)) &&
        !(rc = dp_jr_number(jr, o, "warmup_steps", true, 0, 1e300, &mt->warmup)) &&
        !(rc = dp_jr_number(jr, o, "min_lr_frac", true, 0, 1, &mt->min_lr_frac)) &&
        !(rc = dp_jr_number(jr, o, "weight_decay", true, 0, 1e300, &mt->wd)) &&
        !(rc = dp_jr_number(jr, o, "beta1", true, 0, 1, &mt->beta1)) &&
        !(rc = dp_jr_number(jr, o, "beta2", true, 0, 1, &mt->beta2)) &&
        !(rc = dp_jr_number(jr, o, "eps", true, 0, 1e300, &mt->eps)))
        rc = dp_jr_number(jr, o, "grad_clip", true, 0, 1e300, &mt->clip);
    if (!rc && !(rc = dp_jr_number(jr, o, "loss_scale", false, 0, 1e300, &mt->loss_scale)) &&
        !(rc = dp_jr_int(jr, o, "loss_scale_growth", false, 0, INT64_MAX / 2,
                         &mt->loss_scale_growth)))
        rc = dp_jr_int(jr, o, "loss_scale_hysteresis", false, INT64_MIN / 2, INT64_MAX / 2,
                       &mt->loss_scale_hysteresis);
    dp_jr_pop(jr, k);
    if (rc)
        return rc;
    mt->zero = state == 1;

    if (!(o = member(jr, root, "data", false, false)))
        return jr->err->code;
    k = dp_jr_push(jr, "data", 0);
    if (!(rc = dp_jr_check_keys(jr, o, dkeys)) &&
        !(rc = dp_jr_string(jr, o, "source", true, mt->data_source, sizeof mt->data_source)) &&
        !(rc = dp_jr_int(jr, o, "tokens", true, 0, INT64_MAX / 2, &mt->data_tokens)) &&
        !(rc = get_crc(jr, o, "crc32c", &mt->data_crc)) &&
        !(rc = dp_jr_int(jr, o, "seq_len", true, 1, INT64_MAX / 2, &mt->seq_len)))
        rc = dp_jr_int(jr, o, "global_batch", true, 1, INT64_MAX / 2, &mt->gbs);
    dp_jr_pop(jr, k);
    if (rc)
        return rc;

    if (!(o = member(jr, root, "rng", false, false)))
        return jr->err->code;
    double seed = 0;
    k = dp_jr_push(jr, "rng", 0);
    if (!(rc = dp_jr_check_keys(jr, o, rkeys)))
        rc = dp_jr_number(jr, o, "seed", true, 0, 18446744073709551615.0, &seed);
    dp_jr_pop(jr, k);
    mt->seed = (uint64_t)seed;
    return rc;
}

int dp_ckpt_parse(const char *file, const cJSON *root, struct dp_ckpt *ck, struct dp_err *err)
{
    static const char *const keys[] = {"dplan_checkpoint",
                                       "step",
                                       "steps",
                                       "saved_at",
                                       "created_by",
                                       "world_size",
                                       "dtype",
                                       "model",
                                       "layout",
                                       "optimizer",
                                       "data",
                                       "rng",
                                       "files",
                                       "tensors",
                                       "zero1",
                                       NULL};
    static const char *const fkeys[] = {"name",    "rank",  "tp_rank", "dp_rank",
                                        "pp_rank", "bytes", "crc32c",  NULL};
    struct dp_jr jr = {.file = file, .err = err};
    int rc = dp_jr_expect_object(&jr, root, "a checkpoint manifest (a JSON object)");
    if (!rc)
        rc = dp_jr_check_keys(&jr, root, keys);
    if (!rc)
        rc = parse_meta(&jr, root, &ck->meta);
    if (rc)
        return rc;
    const cJSON *files = member(&jr, root, "files", true, true);
    if (!files)
        return err->code;
    ck->files = calloc((size_t)cJSON_GetArraySize(files), sizeof *ck->files);
    if (!ck->files)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    const cJSON *it;
    size_t k0 = dp_jr_push(&jr, "files", 0);
    cJSON_ArrayForEach(it, files)
    {
        struct dp_ckpt_file *f = &ck->files[ck->nfiles];
        size_t k1 = dp_jr_push(&jr, NULL, ck->nfiles);
        if (!(rc = dp_jr_check_keys(&jr, it, fkeys)) &&
            !(rc = dp_jr_string(&jr, it, "name", true, f->name, sizeof f->name)) &&
            !(rc = dp_jr_int(&jr, it, "bytes", true, 0, INT64_MAX / 2, &f->bytes)))
            rc = get_crc(&jr, it, "crc32c", &f->crc);
        if (!rc && (strchr(f->name, '/') || f->name[0] == '.'))
            rc = bad(&jr, "name", "not a plain file name");
        dp_jr_pop(&jr, k1);
        if (rc)
            return rc;
        ck->nfiles++;
    }
    dp_jr_pop(&jr, k0);

    const cJSON *tensors = member(&jr, root, "tensors", true, true);
    if (!tensors)
        return err->code;
    ck->t = calloc((size_t)cJSON_GetArraySize(tensors), sizeof *ck->t);
    if (!ck->t)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    k0 = dp_jr_push(&jr, "tensors", 0);
    cJSON_ArrayForEach(it, tensors)
    {
        size_t k1 = dp_jr_push(&jr, NULL, ck->nt);
        rc = parse_tensor(&jr, ck, it, &ck->t[ck->nt]);
        ck->nt++; /* freed by dp_ckpt_close whether or not it parsed */
        dp_jr_pop(&jr, k1);
        if (rc)
            return rc;
    }
    dp_jr_pop(&jr, k0);
    if (!ck->meta.zero)
        return 0;

    const cJSON *z = member(&jr, root, "zero1", false, false);
    if (!z)
        return err->code;
    k0 = dp_jr_push(&jr, "zero1", 0);
    const cJSON *groups = member(&jr, z, "groups", true, true);
    if (!groups)
        return err->code;
    ck->g = calloc((size_t)cJSON_GetArraySize(groups), sizeof *ck->g);
    if (!ck->g)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    dp_jr_push(&jr, "groups", 0);
    cJSON_ArrayForEach(it, groups)
    {
        size_t k1 = dp_jr_push(&jr, NULL, ck->ng);
        rc = parse_group(&jr, ck, it, &ck->g[ck->ng]);
        ck->ng++;
        dp_jr_pop(&jr, k1);
        if (rc)
            return rc;
    }
    dp_jr_pop(&jr, k0);
    /* Each weight piece's optimizer state is the flat buffer of its TP rank and stage. */
    for (int i = 0; i < ck->nt; i++)
        for (int j = 0; j < ck->t[i].np; j++) {
            struct dp_ckpt_piece *p = &ck->t[i].p[j];
            for (int g = 0; g < ck->ng; g++)
                if (ck->g[g].tp_rank == p->tp_rank && ck->g[g].pp_rank == ck->t[i].stage)
                    p->group = g;
            if (p->group < 0 || p->flat_off + p->rows * p->cols > ck->g[p->group].flat_elems)
                return dp_err_set(err, DP_EINVAL,
                                  "%s: tensors[%d] (%s): no ZeRO-1 group holds its optimizer "
                                  "state",
                                  file, i, ck->t[i].name);
        }
    return 0;
}

int dp_ckpt_open(const char *dir, struct dp_ckpt *ck, struct dp_err *err)
{
    memset(ck, 0, sizeof *ck);
    snprintf(ck->dir, sizeof ck->dir, "%s", dir);
    char mf[DP__PATHMAX + 32];
    dp__ckpt_manifest_path(mf, sizeof mf, dir);
    if (access(mf, F_OK))
        return dp_err_set(err, DP_ENOENT, "%s: no %s (an unfinished save?)", dir, DP_CKPT_MANIFEST);
    cJSON *root = NULL;
    int rc = dp_json_load_file(mf, &root, err);
    if (!rc)
        rc = dp_ckpt_parse(mf, root, ck, err);
    cJSON_Delete(root);
    if (rc) {
        char keep[sizeof ck->dir];
        snprintf(keep, sizeof keep, "%s", ck->dir);
        dp_ckpt_close(ck);
        snprintf(ck->dir, sizeof ck->dir, "%s", keep);
    }
    return rc;
}
