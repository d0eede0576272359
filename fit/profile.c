/*
 * The measured profile, `dplan_calibration` version 1: reader (every error
 * names the file and the JSON path) and writer. The schema is in README
 * ("The measured profile"). It holds fit results, not samples.
 */
#include "fit.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define BIG 1e300

static int read_quality(struct dp_jr *jr, const cJSON *obj, struct dp_fit_quality *q)
{
    static const char *const keys[] = {"samples", "params", "r2", "rms_rel", "max_rel", NULL};
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "quality");
    if (!v)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s%squality: missing required field (expected a fit quality "
                          "object)",
                          jr->file, jr->path, jr->path[0] ? "." : "");
    size_t at = dp_jr_push(jr, "quality", 0);
    int64_t n = 0, p = 0;
    if (dp_jr_expect_object(jr, v, "a fit quality object") || dp_jr_check_keys(jr, v, keys) ||
        dp_jr_int(jr, v, "samples", true, 1, 100000000, &n) ||
        dp_jr_int(jr, v, "params", true, 0, 100, &p) ||
        dp_jr_number(jr, v, "r2", true, -BIG, 1, &q->r2) ||
        dp_jr_number(jr, v, "rms_rel", true, 0, BIG, &q->rms_rel) ||
        dp_jr_number(jr, v, "max_rel", true, 0, BIG, &q->max_rel))
        return jr->err->code;
    q->n = (int)n;
    q->params = (int)p;
    dp_jr_pop(jr, at);
    return 0;
}

/* The "stderr" object: each named key a number >= 0 or null (undetermined), all
 * required. */
static int read_stderr(struct dp_jr *jr, const cJSON *obj, const char *const *names, double **outs)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "stderr");
    if (!v)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s%sstderr: missing required field (expected an object of "
                          "standard errors)",
                          jr->file, jr->path, jr->path[0] ? "." : "");
    size_t at = dp_jr_push(jr, "stderr", 0);
    if (dp_jr_expect_object(jr, v, "an object of standard errors") ||
        dp_jr_check_keys(jr, v, names))
        return jr->err->code;
    for (int i = 0; names[i]; i++) {
        /* null: not determined (the fit could not bound it; the writer prints NaN so). */
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(v, names[i]);
        if (e && cJSON_IsNull(e))
            *outs[i] = NAN;
        else if (dp_jr_number(jr, v, names[i], true, 0, BIG, outs[i]))
            return jr->err->code;
    }
    dp_jr_pop(jr, at);
    return 0;
}

/* "2026-03-01T12:00:00Z": what `date -u +%Y-%m-%dT%H:%M:%SZ` prints. */
static bool iso_utc(const char *s)
{
    int y, mo, d, h, mi, se;
    char z, extra;
    if (strlen(s) != 20 ||
        sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%c%c", &y, &mo, &d, &h, &mi, &se, &z, &extra) != 7)
        return false;
    return z == 'Z' && y >= 1970 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 &&
           mi <= 59 && se <= 60 && h >= 0 && mi >= 0 && se >= 0;
}

static int read_machine(struct dp_jr *jr, const cJSON *v, struct dp_cal_machine *m)
{
    static const char *const keys[] = {"hostname", "backend", "cpu",     "gpu", "nodes",
                                       "ranks",    "cores",   "cluster", NULL};
    static const char *const backends[] = {"cpu", "cuda"};
    int64_t nodes = 1, ranks = 1, cores = 0;
    int be = 0;
    if (dp_jr_expect_object(jr, v, "a machine object") || dp_jr_check_keys(jr, v, keys) ||
        dp_jr_string(jr, v, "hostname", true, m->hostname, sizeof m->hostname) ||
        dp_jr_enum(jr, v, "backend", true, backends, 2, &be) ||
        dp_jr_string(jr, v, "cpu", false, m->cpu, sizeof m->cpu) ||
        dp_jr_string(jr, v, "gpu", false, m->gpu, sizeof m->gpu) ||
        dp_jr_int(jr, v, "nodes", false, 1, 1000000, &nodes) ||
        dp_jr_int(jr, v, "ranks", false, 1, 100000000, &ranks) ||
        dp_jr_int(jr, v, "cores", false, 0, 1000000, &cores))
        return jr->err->code;
    snprintf(m->backend, sizeof m->backend, "%s", backends[be]);
    m->nodes = (int)nodes;
    m->ranks = (int)ranks;
    m->cores = (int)cores;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "cluster");
    if (c && !cJSON_IsNull(c)) {
        size_t at = dp_jr_push(jr, "cluster", 0);
        if (dp_cluster_from_json(jr, c, &m->cluster))
            return jr->err->code;
        dp_jr_pop(jr, at);
        m->has_cluster = true;
    }
    return 0;
}

static int read_gemm(struct dp_jr *jr, const cJSON *v, struct dp_cal_gemm *g)
{
    static const char *const keys[] = {"dtype",  "peak_tflops", "eff_max", "half_flops",
                                       "stderr", "quality",     NULL};
    static const char *const se_keys[] = {"eff_max", "half_flops", NULL};
    const char *names[DP_PRECISIONS];
    for (int i = 0; i < DP_PRECISIONS; i++)
        names[i] = dp_precision_name((enum dp_precision)i);
    int dt = 0;
    if (dp_jr_expect_object(jr, v, "a GEMM curve object") || dp_jr_check_keys(jr, v, keys) ||
        dp_jr_enum(jr, v, "dtype", true, names, DP_PRECISIONS, &dt) ||
        dp_jr_number(jr, v, "peak_tflops", true, 1e-9, 1e9, &g->peak_tflops) ||
        dp_jr_number(jr, v, "eff_max", true, 1e-9, 1, &g->curve.eff_max) ||
        dp_jr_number(jr, v, "half_flops", true, 0, BIG, &g->curve.half_flops))
        return jr->err->code;
    g->dtype = (enum dp_precision)dt;
    double *se[] = {&g->eff_max_se, &g->half_flops_se};
    if (read_stderr(jr, v, se_keys, se) || read_quality(jr, v, &g->q))
        return jr->err->code;
    return 0;
}

/* "measured": [[bytes, us], ...], bytes ascending (optional). */
static int read_points(struct dp_jr *jr, const cJSON *v, struct dp_cal_coll *c)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "measured");
    c->npoints = 0;
    if (!a || cJSON_IsNull(a))
        return 0;
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n > DP_CAL_MAX_POINTS)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s.measured: expected an array of at most %d [bytes, us] pairs, "
                          "got %s",
                          jr->file, jr->path, DP_CAL_MAX_POINTS,
                          cJSON_IsArray(a) ? "more" : "something else");
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        const cJSON *b = cJSON_GetArrayItem(e, 0), *t = cJSON_GetArrayItem(e, 1);
        double prev = i ? c->point_bytes[i - 1] : 0;
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsNumber(b) ||
            !cJSON_IsNumber(t) || !(b->valuedouble > prev) || !isfinite(b->valuedouble) ||
            !(t->valuedouble > 0) || !isfinite(t->valuedouble))
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s.measured[%d]: expected [bytes > %g, us > 0], got something "
                              "else",
                              jr->file, jr->path, i, prev);
        c->point_bytes[i] = b->valuedouble;
        c->point_us[i] = t->valuedouble;
    }
    c->npoints = n;
    return 0;
}

static int read_coll(struct dp_jr *jr, const cJSON *v, struct dp_cal_coll *c)
{
    static const char *const keys[] = {"collective", "link",   "ranks_min", "ranks_max", "alpha_us",
                                       "busbw_gbps", "stderr", "quality",   "measured",  NULL};
    static const char *const se_keys[] = {"alpha_us", "busbw_gbps", NULL};
    const char *names[DP_NCCL_COLLS];
    for (int i = 0; i < DP_NCCL_COLLS; i++)
        names[i] = dp_nccl_coll_name((enum dp_nccl_coll)i);
    int k = 0;
    int64_t lo = 0, hi = 0;
    if (dp_jr_expect_object(jr, v, "a collective object") || dp_jr_check_keys(jr, v, keys) ||
        dp_jr_enum(jr, v, "collective", true, names, DP_NCCL_COLLS, &k) ||
        dp_jr_string(jr, v, "link", true, c->link, sizeof c->link) ||
        dp_jr_int(jr, v, "ranks_min", true, 2, 100000000, &lo) ||
        dp_jr_int(jr, v, "ranks_max", true, 2, 100000000, &hi) ||
        dp_jr_number(jr, v, "alpha_us", true, 0, 1e9, &c->alpha_us) ||
        dp_jr_number(jr, v, "busbw_gbps", true, 1e-12, 1e9, &c->busbw_gbps))
        return jr->err->code;
    if (hi < lo)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s.ranks_max: expected integer >= ranks_min %lld, got %lld",
                          jr->file, jr->path, (long long)lo, (long long)hi);
    c->coll = (enum dp_nccl_coll)k;
    c->ranks_min = (int)lo;
    c->ranks_max = (int)hi;
    double *se[] = {&c->alpha_se_us, &c->busbw_se_gbps};
    if (read_stderr(jr, v, se_keys, se) || read_quality(jr, v, &c->q))
        return jr->err->code;
    return read_points(jr, v, c);
}

static int read_membw(struct dp_jr *jr, const cJSON *v, struct dp_cal_membw *m)
{
    static const char *const keys[] = {"bw_gbps", "overhead_us", "stderr", "quality", NULL};
    static const char *const se_keys[] = {"bw_gbps", "overhead_us", NULL};
    if (dp_jr_expect_object(jr, v, "a memory bandwidth object") || dp_jr_check_keys(jr, v, keys) ||
        dp_jr_number(jr, v, "bw_gbps", true, 1e-12, 1e9, &m->bw_gbps) ||
        dp_jr_number(jr, v, "overhead_us", true, 0, 1e9, &m->overhead_us))
        return jr->err->code;
    double *se[] = {&m->bw_se_gbps, &m->overhead_se_us};
    if (read_stderr(jr, v, se_keys, se) || read_quality(jr, v, &m->q))
        return jr->err->code;
    return 0;
}

/* The numeric fields of a CPU entry, by name (all required). */
#define CPU_F(f)                                                                                   \
    {                                                                                              \
#f, offsetof(struct dp_cal_cpu, f)                                                         \
    }
static const struct {
    const char *key;
    size_t off;
} cpu_fields[] = {CPU_F(gemm_call_us),  CPU_F(gemm_gflops), CPU_F(conc_eff),    CPU_F(fork_us),
                  CPU_F(l2_bytes),      CPU_F(l3_bytes),    CPU_F(attn_fwd_us), CPU_F(attn_bwd_us),
                  CPU_F(attn_probs_us), CPU_F(act_fwd_ns),  CPU_F(act_bwd_ns),  CPU_F(norm_fwd_ns),
                  CPU_F(norm_bwd_ns),   CPU_F(ce_ns),       CPU_F(adamw_ns)};
#define NCPU_F (sizeof cpu_fields / sizeof cpu_fields[0])

static int read_cpu(struct dp_jr *jr, const cJSON *v, struct dp_cal_cpu *c)
{
    const char *keys[NCPU_F + 12];
    size_t nk = 0;
    static const char *const fixed[] = {"threads",     "concurrent", "seq_len", "head_dim",
                                        "ffn",         "norm",       "bw_gbps", "hidden",
                                        "sweep_bytes", "swept_gbps"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        keys[nk++] = fixed[i];
    for (size_t i = 0; i < NCPU_F; i++)
        keys[nk++] = cpu_fields[i].key;
    keys[nk] = NULL;
    static const char *const ffns[] = {"gelu", "swiglu"}, *const norms[] = {"layernorm", "rmsnorm"};
    int64_t th = 0, co = 0, seq = 0, hd = 0, hid = 0;
    int ffn = 0, norm = 0;
    if (dp_jr_expect_object(jr, v, "a CPU cost object") || dp_jr_check_keys(jr, v, keys) ||
        dp_jr_int(jr, v, "threads", true, 1, 4096, &th) ||
        dp_jr_int(jr, v, "concurrent", true, 1, 1 << 20, &co) ||
        dp_jr_int(jr, v, "seq_len", true, 1, 1 << 24, &seq) ||
        dp_jr_int(jr, v, "head_dim", true, 1, 1 << 16, &hd) ||
        dp_jr_enum(jr, v, "ffn", true, ffns, 2, &ffn) ||
        dp_jr_enum(jr, v, "norm", true, norms, 2, &norm) ||
        dp_jr_int(jr, v, "hidden", false, 1, 1 << 20, &hid) ||
        dp_jr_number(jr, v, "sweep_bytes", false, 0, BIG, &c->sweep_bytes) ||
        dp_jr_number(jr, v, "swept_gbps", false, 0, BIG, &c->swept_gbps))
        return jr->err->code;
    c->hidden = (int)hid;
    c->threads = (int)th;
    c->concurrent = (int)co;
    c->seq_len = seq;
    c->head_dim = (int)hd;
    c->ffn = (enum dp_ffn_kind)ffn;
    c->norm = (enum dp_norm_kind)norm;
    for (size_t i = 0; i < NCPU_F; i++)
        if (dp_jr_number(jr, v, cpu_fields[i].key, true, 0, BIG,
                         (double *)((char *)c + cpu_fields[i].off)))
            return jr->err->code;
    const cJSON *bw = cJSON_GetObjectItemCaseSensitive(v, "bw_gbps");
    if (!cJSON_IsArray(bw) || cJSON_GetArraySize(bw) != 3)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s.bw_gbps: expected an array of 3 bandwidths (L2, L3 share, "
                          "DRAM), got %s",
                          jr->file, jr->path, bw ? "something else" : "nothing");
    for (int i = 0; i < 3; i++) {
        const cJSON *e = cJSON_GetArrayItem(bw, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) || !isfinite(e->valuedouble))
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s.bw_gbps[%d]: expected a number > 0, got something else",
                              jr->file, jr->path, i);
        c->bw_gbps[i] = e->valuedouble;
    }
    if (!(c->gemm_gflops > 0) || !(c->conc_eff > 0))
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: expected gemm_gflops and conc_eff > 0, got %g and %g", jr->file,
                          jr->path, c->gemm_gflops, c->conc_eff);
    return 0;
}

const struct dp_cal_coll *dp_calibration_coll(const struct dp_calibration *c, enum dp_nccl_coll k,
                                              const char *link)
{
    for (int i = 0; i < c->ncoll; i++)
        if (c->coll[i].coll == k && (!link || strcmp(c->coll[i].link, link) == 0))
            return &c->coll[i];
    return NULL;
}

const struct dp_cal_cpu *dp_calibration_cpu(const struct dp_calibration *c, int threads,
                                            int concurrent)
{
    const struct dp_cal_cpu *best = NULL;
    double bd = 0;
    for (int i = 0; i < c->ncpu; i++) {
        const struct dp_cal_cpu *e = &c->cpu[i];
        /* Concurrency dominates (it sets the per-thread rates); threads break ties. */
        double d = 1e3 * fabs(log((double)e->concurrent / concurrent)) +
                   fabs(log((double)e->threads / threads));
        if (!best || d < bd) {
            best = e;
            bd = d;
        }
    }
    return best;
}

/* An optional array member: NULL when absent; an error unless an array. */
static int array_of(struct dp_jr *jr, const cJSON *obj, const char *key, const char *what,
                    const cJSON **out)
{
    *out = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!*out || cJSON_IsNull(*out)) {
        *out = NULL;
        return 0;
    }
    if (cJSON_IsArray(*out))
        return 0;
    char got[128];
    dp_json_describe(*out, got, sizeof got);
    return dp_err_set(jr->err, DP_EINVAL, "%s: %s: expected an array of %s, got %s", jr->file, key,
                      what, got);
}

/* The cold factors of a reuse object's kernels, by name (all required). */
#define REUSE_F(f)                                                                                 \
    {                                                                                              \
#f, offsetof(struct dp_cal_reuse, f)                                                       \
    }
static const struct {
    const char *key;
    size_t off;
} reuse_fields[] = {
    REUSE_F(attn_fwd), REUSE_F(attn_bwd), REUSE_F(attn_probs), REUSE_F(act_fwd),
    REUSE_F(act_bwd),  REUSE_F(norm_fwd), REUSE_F(norm_bwd),   REUSE_F(ce),
    REUSE_F(adamw),    REUSE_F(sumsq),    REUSE_F(sumsq_ns),
};
#define NREUSE_F (sizeof reuse_fields / sizeof reuse_fields[0])

/*
 * "reuse": {"measured": [[bytes, read GB/s, write GB/s], ...],
 *           "sgemm_hot": {"call_us", "gflops", "ab_ns", "c_ns", "quality"},
 *           "sgemm_cold": {"factor", "quality"?}, kernel factors...}.
 */
static int read_reuse(struct dp_jr *jr, const cJSON *v, struct dp_cal_reuse *r)
{
    const char *keys[NREUSE_F + 4];
    size_t nk = 0;
    keys[nk++] = "measured";
    keys[nk++] = "sgemm_hot";
    keys[nk++] = "sgemm_cold";
    for (size_t i = 0; i < NREUSE_F; i++)
        keys[nk++] = reuse_fields[i].key;
    keys[nk] = NULL;
    if (dp_jr_expect_object(jr, v, "a reuse object") || dp_jr_check_keys(jr, v, keys))
        return jr->err->code;
    for (size_t i = 0; i < NREUSE_F; i++)
        if (dp_jr_number(jr, v, reuse_fields[i].key, true, 0, BIG,
                         (double *)((char *)r + reuse_fields[i].off)))
            return jr->err->code;
    static const char *const hot_keys[] = {"call_us", "gflops", "ab_ns", "c_ns", "quality", NULL};
    static const char *const cold_keys[] = {"factor", "quality", NULL};
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(v, "sgemm_hot"),
                *c = cJSON_GetObjectItemCaseSensitive(v, "sgemm_cold");
    if (!h || !c)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s.%s: missing required field (expected an SGEMM model object)",
                          jr->file, jr->path, h ? "sgemm_cold" : "sgemm_hot");
    size_t at = dp_jr_push(jr, "sgemm_hot", 0);
    if (dp_jr_expect_object(jr, h, "an SGEMM model object") || dp_jr_check_keys(jr, h, hot_keys) ||
        dp_jr_number(jr, h, "call_us", true, 0, BIG, &r->gemm_call_us) ||
        dp_jr_number(jr, h, "gflops", true, 1e-9, BIG, &r->gemm_gflops) ||
        dp_jr_number(jr, h, "ab_ns", true, 0, BIG, &r->gemm_ab_ns) ||
        dp_jr_number(jr, h, "c_ns", true, 0, BIG, &r->gemm_c_ns) ||
        read_quality(jr, h, &r->gemm_hot_q))
        return jr->err->code;
    dp_jr_pop(jr, at);
    at = dp_jr_push(jr, "sgemm_cold", 0);
    if (dp_jr_expect_object(jr, c, "an SGEMM cold-factor object") ||
        dp_jr_check_keys(jr, c, cold_keys) ||
        dp_jr_number(jr, c, "factor", true, 0, BIG, &r->gemm_cold) ||
        (cJSON_GetObjectItemCaseSensitive(c, "quality") && read_quality(jr, c, &r->gemm_cold_q)))
        return jr->err->code;
    dp_jr_pop(jr, at);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "measured");
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n < 2 || n > DP_CAL_REUSE_POINTS)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s.measured: expected an array of 2 to %d [bytes, read GB/s, "
                          "write GB/s] triples",
                          jr->file, jr->path, DP_CAL_REUSE_POINTS);
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        const cJSON *b = cJSON_IsArray(e) && cJSON_GetArraySize(e) == 3 ? e->child : NULL;
        const cJSON *rd = b ? b->next : NULL, *wr = rd ? rd->next : NULL;
        bool ok = b && cJSON_IsNumber(b) && cJSON_IsNumber(rd) && cJSON_IsNumber(wr);
        for (const cJSON *x = b; ok && x; x = x->next)
            ok = x->valuedouble > 0 && x->valuedouble < BIG;
        if (!ok || (i > 0 && !(b->valuedouble > r->bytes[i - 1])))
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s.measured[%d]: expected [bytes > 0, read GB/s > 0, write "
                              "GB/s > 0], bytes ascending",
                              jr->file, jr->path, i);
        r->bytes[i] = b->valuedouble;
        r->read_gbps[i] = rd->valuedouble;
        r->write_gbps[i] = wr->valuedouble;
    }
    r->n = n;
    return 0;
}

/* "lockstep": {"ranks", "jitter", "measured": [[segment s, wait s], ...]}. */
static int read_lockstep(struct dp_jr *jr, const cJSON *v, struct dp_cal_lockstep *l)
{
    static const char *const keys[] = {"ranks", "jitter", "measured", NULL};
    int64_t ranks = 0;
    if (dp_jr_expect_object(jr, v, "a lock-step object") || dp_jr_check_keys(jr, v, keys) ||
        dp_jr_int(jr, v, "ranks", true, 2, 1 << 20, &ranks) ||
        dp_jr_number(jr, v, "jitter", true, 0, 1, &l->jitter))
        return jr->err->code;
    l->ranks = (int)ranks;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "measured");
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n < 1 || n > DP_CAL_LOCKSTEP_POINTS)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s.measured: expected an array of 1 to %d [segment s, wait s] pairs",
                          jr->file, jr->path, DP_CAL_LOCKSTEP_POINTS);
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        const cJSON *s = cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 ? e->child : NULL;
        const cJSON *w = s ? s->next : NULL;
        if (!s || !cJSON_IsNumber(s) || !cJSON_IsNumber(w) || !(s->valuedouble > 0) ||
            !(w->valuedouble >= 0) || !(s->valuedouble < 1e9) || !(w->valuedouble < 1e9))
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s.measured[%d]: expected [segment s > 0, wait s >= 0]",
                              jr->file, jr->path, i);
        l->seg_s[i] = s->valuedouble;
        l->wait_s[i] = w->valuedouble;
    }
    l->n = n;
    return 0;
}

int dp_calibration_from_json(struct dp_jr *jr, const cJSON *obj, struct dp_calibration *out)
{
    static const char *const keys[] = {"dplan_calibration",
                                       "created_by",
                                       "measured_at",
                                       "machine",
                                       "gemm",
                                       "collectives",
                                       "memory",
                                       "cpu",
                                       "reuse",
                                       "lockstep",
                                       NULL};
    memset(out, 0, sizeof *out);
    int64_t ver = 0;
    if (dp_jr_expect_object(jr, obj, "a calibration profile object") ||
        dp_jr_check_keys(jr, obj, keys) ||
        dp_jr_int(jr, obj, "dplan_calibration", true, 1, 1000, &ver) ||
        dp_jr_string(jr, obj, "created_by", false, out->created_by, sizeof out->created_by) ||
        dp_jr_string(jr, obj, "measured_at", true, out->measured_at, sizeof out->measured_at))
        return jr->err->code;
    if (ver != DP_CALIBRATION_VERSION)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: dplan_calibration: expected version %d, got %lld (written by a "
                          "newer dplan?)",
                          jr->file, DP_CALIBRATION_VERSION, (long long)ver);
    out->version = (int)ver;
    if (!iso_utc(out->measured_at))
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: measured_at: expected UTC time like \"2026-03-01T12:00:00Z\", got "
                          "\"%s\"",
                          jr->file, out->measured_at);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "machine");
    if (!m)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: machine: missing required field (expected a machine object)",
                          jr->file);
    size_t at = dp_jr_push(jr, "machine", 0);
    if (read_machine(jr, m, &out->machine))
        return jr->err->code;
    dp_jr_pop(jr, at);

    const cJSON *arr;
    if (array_of(jr, obj, "gemm", "GEMM curve objects", &arr))
        return jr->err->code;
    int i = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next, i++) {
        at = dp_jr_push(jr, "gemm", 0);
        dp_jr_push(jr, NULL, i);
        if (i >= DP_PRECISIONS)
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s: more than %d GEMM curves (one per dtype)", jr->file,
                              jr->path, DP_PRECISIONS);
        struct dp_cal_gemm *g = &out->gemm[i];
        if (read_gemm(jr, e, g))
            return jr->err->code;
        for (int j = 0; j < i; j++)
            if (out->gemm[j].dtype == g->dtype)
                return dp_err_set(jr->err, DP_EINVAL,
                                  "%s: %s.dtype: %s has a curve already (gemm[%d])", jr->file,
                                  jr->path, dp_precision_name(g->dtype), j);
        out->ngemm = i + 1;
        dp_jr_pop(jr, at);
    }
    if (array_of(jr, obj, "collectives", "collective objects", &arr))
        return jr->err->code;
    i = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next, i++) {
        at = dp_jr_push(jr, "collectives", 0);
        dp_jr_push(jr, NULL, i);
        if (i >= DP_CAL_MAX_COLL)
            return dp_err_set(jr->err, DP_EINVAL, "%s: %s: more than %d collective fits", jr->file,
                              jr->path, DP_CAL_MAX_COLL);
        struct dp_cal_coll *c = &out->coll[i];
        if (read_coll(jr, e, c))
            return jr->err->code;
        for (int j = 0; j < i; j++)
            if (out->coll[j].coll == c->coll && strcmp(out->coll[j].link, c->link) == 0)
                return dp_err_set(jr->err, DP_EINVAL,
                                  "%s: %s: %s over %s has a fit already (collectives[%d])",
                                  jr->file, jr->path, dp_nccl_coll_name(c->coll), c->link, j);
        out->ncoll = i + 1;
        dp_jr_pop(jr, at);
    }
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(obj, "memory");
    if (mem && !cJSON_IsNull(mem)) {
        at = dp_jr_push(jr, "memory", 0);
        if (read_membw(jr, mem, &out->membw))
            return jr->err->code;
        dp_jr_pop(jr, at);
        out->has_membw = true;
    }
    if (array_of(jr, obj, "cpu", "CPU cost objects", &arr))
        return jr->err->code;
    i = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next, i++) {
        at = dp_jr_push(jr, "cpu", 0);
        dp_jr_push(jr, NULL, i);
        if (i >= DP_CAL_MAX_CPU)
            return dp_err_set(jr->err, DP_EINVAL, "%s: %s: more than %d CPU entries", jr->file,
                              jr->path, DP_CAL_MAX_CPU);
        struct dp_cal_cpu *c = &out->cpu[i];
        if (read_cpu(jr, e, c))
            return jr->err->code;
        for (int j = 0; j < i; j++)
            if (out->cpu[j].threads == c->threads && out->cpu[j].concurrent == c->concurrent)
                return dp_err_set(jr->err, DP_EINVAL,
                                  "%s: %s: %d threads with %d concurrent has an entry already "
                                  "(cpu[%d])",
                                  jr->file, jr->path, c->threads, c->concurrent, j);
        out->ncpu = i + 1;
        dp_jr_pop(jr, at);
    }
    const cJSON *lk = cJSON_GetObjectItemCaseSensitive(obj, "lockstep");
    if (lk && !cJSON_IsNull(lk)) {
        at = dp_jr_push(jr, "lockstep", 0);
        if (read_lockstep(jr, lk, &out->lockstep))
            return jr->err->code;
        dp_jr_pop(jr, at);
        out->has_lockstep = true;
    }
    const cJSON *ru = cJSON_GetObjectItemCaseSensitive(obj, "reuse");
    if (ru && !cJSON_IsNull(ru)) {
        at = dp_jr_push(jr, "reuse", 0);
        if (read_reuse(jr, ru, &out->reuse))
            return jr->err->code;
        dp_jr_pop(jr, at);
        out->has_reuse = true;
    }
    return 0;
}

int dp_calibration_load(const char *file, struct dp_calibration *out, struct dp_err *err)
{
    cJSON *root;
    int rc = dp_json_load_file(file, &root, err);
    if (rc)
        return rc;
    struct dp_jr jr = {.file = file, .err = err};
    rc = dp_calibration_from_json(&jr, root, out);
    cJSON_Delete(root);
    return rc;
}

static void add_quality(cJSON *o, const struct dp_fit_quality *q)
{
    cJSON *e = cJSON_AddObjectToObject(o, "quality");
    cJSON_AddNumberToObject(e, "samples", q->n);
    cJSON_AddNumberToObject(e, "params", q->params);
    cJSON_AddNumberToObject(e, "r2", q->r2);
    cJSON_AddNumberToObject(e, "rms_rel", q->rms_rel);
    cJSON_AddNumberToObject(e, "max_rel", q->max_rel);
}

static void add_stderr(cJSON *o, const char *k0, double v0, const char *k1, double v1)
{
    cJSON *e = cJSON_AddObjectToObject(o, "stderr");
    cJSON_AddNumberToObject(e, k0, v0);
    cJSON_AddNumberToObject(e, k1, v1);
}

cJSON *dp_calibration_to_json(const struct dp_calibration *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "dplan_calibration", DP_CALIBRATION_VERSION);
    if (c->created_by[0])
        cJSON_AddStringToObject(o, "created_by", c->created_by);
    cJSON_AddStringToObject(o, "measured_at", c->measured_at);
    const struct dp_cal_machine *m = &c->machine;
    cJSON *mo = cJSON_AddObjectToObject(o, "machine");
    cJSON_AddStringToObject(mo, "hostname", m->hostname);
    cJSON_AddStringToObject(mo, "backend", m->backend[0] ? m->backend : "cpu");
    if (m->cpu[0])
        cJSON_AddStringToObject(mo, "cpu", m->cpu);
    if (m->gpu[0])
        cJSON_AddStringToObject(mo, "gpu", m->gpu);
    cJSON_AddNumberToObject(mo, "nodes", m->nodes > 0 ? m->nodes : 1);
    cJSON_AddNumberToObject(mo, "ranks", m->ranks > 0 ? m->ranks : 1);
    cJSON_AddNumberToObject(mo, "cores", m->cores);
    if (m->has_cluster)
        cJSON_AddItemToObject(mo, "cluster", dp_cluster_to_json(&m->cluster));
    cJSON *ga = cJSON_AddArrayToObject(o, "gemm");
    for (int i = 0; i < c->ngemm; i++) {
        const struct dp_cal_gemm *g = &c->gemm[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "dtype", dp_precision_name(g->dtype));
        cJSON_AddNumberToObject(e, "peak_tflops", g->peak_tflops);
        cJSON_AddNumberToObject(e, "eff_max", g->curve.eff_max);
        cJSON_AddNumberToObject(e, "half_flops", g->curve.half_flops);
        add_stderr(e, "eff_max", g->eff_max_se, "half_flops", g->half_flops_se);
        add_quality(e, &g->q);
        cJSON_AddItemToArray(ga, e);
    }
    cJSON *ca = cJSON_AddArrayToObject(o, "collectives");
    for (int i = 0; i < c->ncoll; i++) {
        const struct dp_cal_coll *k = &c->coll[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "collective", dp_nccl_coll_name(k->coll));
        cJSON_AddStringToObject(e, "link", k->link);
        cJSON_AddNumberToObject(e, "ranks_min", k->ranks_min);
        cJSON_AddNumberToObject(e, "ranks_max", k->ranks_max);
        cJSON_AddNumberToObject(e, "alpha_us", k->alpha_us);
        cJSON_AddNumberToObject(e, "busbw_gbps", k->busbw_gbps);
        add_stderr(e, "alpha_us", k->alpha_se_us, "busbw_gbps", k->busbw_se_gbps);
        add_quality(e, &k->q);
        if (k->npoints > 0) {
            cJSON *pa = cJSON_AddArrayToObject(e, "measured");
            for (int j = 0; j < k->npoints; j++) {
                double pt[2] = {k->point_bytes[j], k->point_us[j]};
                cJSON_AddItemToArray(pa, cJSON_CreateDoubleArray(pt, 2));
            }
        }
        cJSON_AddItemToArray(ca, e);
    }
    if (c->has_membw) {
        cJSON *e = cJSON_AddObjectToObject(o, "memory");
        cJSON_AddNumberToObject(e, "bw_gbps", c->membw.bw_gbps);
        cJSON_AddNumberToObject(e, "overhead_us", c->membw.overhead_us);
        add_stderr(e, "bw_gbps", c->membw.bw_se_gbps, "overhead_us", c->membw.overhead_se_us);
        add_quality(e, &c->membw.q);
    }
    if (c->ncpu > 0) {
        cJSON *a = cJSON_AddArrayToObject(o, "cpu");
        for (int i = 0; i < c->ncpu; i++) {
            const struct dp_cal_cpu *k = &c->cpu[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "threads", k->threads);
            cJSON_AddNumberToObject(e, "concurrent", k->concurrent);
            cJSON_AddNumberToObject(e, "seq_len", (double)k->seq_len);
            cJSON_AddNumberToObject(e, "head_dim", k->head_dim);
            cJSON_AddStringToObject(e, "ffn", dp_ffn_name(k->ffn));
            cJSON_AddStringToObject(e, "norm", dp_norm_name(k->norm));
            cJSON_AddItemToObject(e, "bw_gbps", cJSON_CreateDoubleArray(k->bw_gbps, 3));
            for (size_t f = 0; f < NCPU_F; f++)
                cJSON_AddNumberToObject(e, cpu_fields[f].key,
                                        *(const double *)((const char *)k + cpu_fields[f].off));
            if (k->hidden > 0)
                cJSON_AddNumberToObject(e, "hidden", k->hidden);
            if (k->sweep_bytes > 0) {
                cJSON_AddNumberToObject(e, "sweep_bytes", k->sweep_bytes);
                cJSON_AddNumberToObject(e, "swept_gbps", k->swept_gbps);
            }
            cJSON_AddItemToArray(a, e);
        }
    }
    if (c->has_lockstep) {
        cJSON *e = cJSON_AddObjectToObject(o, "lockstep");
        cJSON_AddNumberToObject(e, "ranks", c->lockstep.ranks);
        cJSON_AddNumberToObject(e, "jitter", c->lockstep.jitter);
        cJSON *pa = cJSON_AddArrayToObject(e, "measured");
        for (int j = 0; j < c->lockstep.n; j++) {
            double pt[2] = {c->lockstep.seg_s[j], c->lockstep.wait_s[j]};
            cJSON_AddItemToArray(pa, cJSON_CreateDoubleArray(pt, 2));
        }
    }
    if (c->has_reuse) {
        const struct dp_cal_reuse *r = &c->reuse;
        cJSON *e = cJSON_AddObjectToObject(o, "reuse");
        cJSON *pa = cJSON_AddArrayToObject(e, "measured");
        for (int j = 0; j < r->n; j++) {
            double pt[3] = {r->bytes[j], r->read_gbps[j], r->write_gbps[j]};
            cJSON_AddItemToArray(pa, cJSON_CreateDoubleArray(pt, 3));
        }
        cJSON *h = cJSON_AddObjectToObject(e, "sgemm_hot");
        cJSON_AddNumberToObject(h, "call_us", r->gemm_call_us);
        cJSON_AddNumberToObject(h, "gflops", r->gemm_gflops);
        cJSON_AddNumberToObject(h, "ab_ns", r->gemm_ab_ns);
        cJSON_AddNumberToObject(h, "c_ns", r->gemm_c_ns);
        add_quality(h, &r->gemm_hot_q);
        cJSON *k = cJSON_AddObjectToObject(e, "sgemm_cold");
        cJSON_AddNumberToObject(k, "factor", r->gemm_cold);
        if (r->gemm_cold_q.n > 0)
            add_quality(k, &r->gemm_cold_q);
        for (size_t f = 0; f < NREUSE_F; f++)
            cJSON_AddNumberToObject(e, reuse_fields[f].key,
                                    *(const double *)((const char *)r + reuse_fields[f].off));
    }
    return o;
}

int dp_calibration_save(const char *file, const struct dp_calibration *c, struct dp_err *err)
{
    cJSON *root = dp_calibration_to_json(c);
    if (!root)
        return dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
    int rc = dp_json_save_file(file, root, err);
    cJSON_Delete(root);
    return rc;
}
