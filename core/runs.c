/*
 * Measured-runs files: published (or the user's own) training runs with the
 * layout each used and what was measured. Only reading and checking here;
 * comparison with the cost model is validate/.
 *
 * A run names its source and what the source measured; fields that only
 * document (source_url, framework, inferred, missing, ...) are type-checked and
 * not used. Measured throughput (tokens/s) is turned into a step time here,
 * gbs x seq_len / tokens per second, which needs no FLOP convention.
 */
#include "core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A documentation field: a string, an array of strings, or an object (free form). */
static int doc_field(struct dp_jr *jr, const cJSON *r, const char *key, bool object_ok)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    if (!v || cJSON_IsString(v) || cJSON_IsNull(v) || (object_ok && cJSON_IsObject(v)))
        return 0;
    if (cJSON_IsArray(v)) {
        bool ok = true;
        for (const cJSON *e = v->child; e; e = e->next)
            ok = ok && cJSON_IsString(e);
        if (ok)
            return 0;
    }
    char got[128];
    dp_json_describe(v, got, sizeof got);
    size_t old = dp_jr_push(jr, key, 0);
    dp_err_set(jr->err, DP_EINVAL, "%s: %s: expected %s, got %s", jr->file, jr->path,
               object_ok ? "a string, array of strings or object" : "a string or array of strings",
               got);
    dp_jr_pop(jr, old);
    return jr->err->code;
}

static const char *const memq_names[] = {"allocated", "reserved", "device"};

const char *dp_mem_quantity_name(enum dp_mem_quantity q)
{
    return q >= DP_MEMQ_ALLOCATED && q <= DP_MEMQ_DEVICE ? memq_names[q - 1] : "none";
}

/* "peak_memory": {"gib": 82.4, "quantity": "reserved", "aggregation": "max" | "last-stage"} */
static int peak_memory_from_json(struct dp_jr *jr, const cJSON *pm, struct dp_run *out)
{
    static const char *const keys[] = {"gib", "quantity", "aggregation", NULL};
    static const char *const aggs[] = {"max", "last-stage"};
    if (!pm)
        return 0;
    size_t old = dp_jr_push(jr, "peak_memory", 0);
    int q = 0, a = 0;
    if (dp_jr_expect_object(jr, pm, "an object {gib, quantity, aggregation}") ||
        dp_jr_check_keys(jr, pm, keys) ||
        dp_jr_number(jr, pm, "gib", true, 1e-3, 1e5, &out->peak_gib) ||
        dp_jr_enum(jr, pm, "quantity", true, memq_names, 3, &q) ||
        dp_jr_enum(jr, pm, "aggregation", false, aggs, 2, &a))
        return jr->err->code;
    out->mem_quantity = (enum dp_mem_quantity)(q + 1);
    out->mem_aggregation = (enum dp_mem_aggregation)a;
    dp_jr_pop(jr, old);
    return 0;
}

static int measured_from_json(struct dp_jr *jr, const cJSON *me, struct dp_run *out)
{
    static const char *const mkeys[] = {
        "iteration_time_s",     "tflops_per_gpu", "flops",       "tokens_per_s",
        "tokens_per_s_per_gpu", "reported",       "peak_memory", NULL};
    static const char *const conv[] = {"narayanan21", "model"};
    size_t old = dp_jr_push(jr, "measured", 0);
    int c = 0;
    double tps = 0, tps_gpu = 0;
    if (dp_jr_expect_object(jr, me,
                            "an object {iteration_time_s}, {tokens_per_s}, "
                            "{tokens_per_s_per_gpu} or {tflops_per_gpu, flops}") ||
        dp_jr_check_keys(jr, me, mkeys) ||
        dp_jr_number(jr, me, "iteration_time_s", false, 1e-6, 1e7, &out->iteration_time_s) ||
        dp_jr_number(jr, me, "tflops_per_gpu", false, 1e-3, 1e6, &out->tflops_per_gpu) ||
        dp_jr_number(jr, me, "tokens_per_s", false, 1e-3, 1e15, &tps) ||
        dp_jr_number(jr, me, "tokens_per_s_per_gpu", false, 1e-3, 1e12, &tps_gpu) ||
        (out->tflops_per_gpu > 0 && dp_jr_enum(jr, me, "flops", true, conv, 2, &c)))
        return jr->err->code;
    const cJSON *rep = cJSON_GetObjectItemCaseSensitive(me, "reported");
    if (rep && !cJSON_IsObject(rep)) {
        dp_jr_push(jr, "reported", 0);
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: expected an object of other reported figures", jr->file,
                          jr->path);
    }
    if (peak_memory_from_json(jr, cJSON_GetObjectItemCaseSensitive(me, "peak_memory"), out))
        return jr->err->code;
    int given = (out->iteration_time_s > 0) + (out->tflops_per_gpu > 0) + (tps > 0) + (tps_gpu > 0);
    if (given > 1 || (given == 0 && out->peak_gib <= 0))
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: expected exactly one of iteration_time_s, tokens_per_s, "
                          "tokens_per_s_per_gpu and tflops_per_gpu%s",
                          jr->file, jr->path, given ? "" : " (or a peak_memory alone)");
    out->has_time = given == 1;
    double tokens = (double)out->layout.gbs * (double)out->layout.seq_len;
    if (tps > 0)
        out->iteration_time_s = tokens / tps;
    if (tps_gpu > 0)
        out->iteration_time_s = tokens / (tps_gpu * dp_cluster_gpus(&out->cluster));
    out->tokens_per_s_per_gpu = tps_gpu;
    out->flops = out->tflops_per_gpu > 0 ? (enum dp_flops_convention)(c + 1) : DP_FLOPS_NONE;
    dp_jr_pop(jr, old);
    return 0;
}

/* "needs": ["fp8", "hsdp"]: short lowercase names of what the run used that dplan does
 * not model yet, joined into out->needs. */
static int needs_from_json(struct dp_jr *jr, const cJSON *r, struct dp_run *out)
{
    const cJSON *nd = cJSON_GetObjectItemCaseSensitive(r, "needs");
    if (!nd)
        return 0;
    size_t old = dp_jr_push(jr, "needs", 0);
    if (!cJSON_IsArray(nd) || cJSON_GetArraySize(nd) == 0)
        return dp_err_set(jr->err, DP_EINVAL, "%s: %s: expected a non-empty array of names",
                          jr->file, jr->path);
    size_t len = 0;
    int i = 0;
    for (const cJSON *e = nd->child; e; e = e->next, i++) {
        bool ok = cJSON_IsString(e) && e->valuestring[0] && strlen(e->valuestring) <= 24;
        for (const char *c = ok ? e->valuestring : ""; *c; c++)
            ok &= (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-';
        if (!ok) {
            char got[128];
            dp_json_describe(e, got, sizeof got);
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s[%d]: expected a name of [a-z0-9-], at most 24 characters, "
                              "got %s",
                              jr->file, jr->path, i, got);
        }
        if (len + strlen(e->valuestring) + 3 > sizeof out->needs)
            return dp_err_set(jr->err, DP_EINVAL, "%s: %s: too many names", jr->file, jr->path);
        len += (size_t)snprintf(out->needs + len, sizeof out->needs - len, "%s%s", len ? ", " : "",
                                e->valuestring);
    }
    dp_jr_pop(jr, old);
    return 0;
}

static int run_from_json(struct dp_jr *jr, const cJSON *r, struct dp_run *out)
{
    static const char *const keys[] = {
        "id",        "source",         "source_key", "source_url",  "source_date",
        "framework", "model",          "system",     "nodes",       "gpus",
        "network",   "cluster",        "layout",     "measured",    "flop_convention",
        "inferred",  "unknown_minor",  "missing",    "notes",       "framework_config",
        "held_out",  "underspecified", "excluded",   "waiting_for", "needs",
        NULL};
    static const char *const docs[] = {"source",        "source_url",      "source_date",
                                       "framework",     "flop_convention", "notes",
                                       "unknown_minor", "missing",         NULL};
    memset(out, 0, sizeof *out);
    if (dp_jr_expect_object(jr, r, "a run object") || dp_jr_check_keys(jr, r, keys) ||
        dp_jr_string(jr, r, "id", true, out->id, sizeof out->id) ||
        dp_jr_string(jr, r, "source_key", false, out->source_key, sizeof out->source_key) ||
        dp_jr_bool(jr, r, "held_out", false, &out->held_out) ||
        dp_jr_bool(jr, r, "underspecified", false, &out->underspecified) ||
        dp_jr_string(jr, r, "excluded", false, out->excluded_why, sizeof out->excluded_why) ||
        dp_jr_string(jr, r, "waiting_for", false, out->waiting_for, sizeof out->waiting_for) ||
        doc_field(jr, r, "inferred", true) || doc_field(jr, r, "framework_config", true))
        return jr->err->code;
    for (const char *const *d = docs; *d; d++)
        if (doc_field(jr, r, *d, false))
            return jr->err->code;
    out->excluded = out->excluded_why[0] != '\0';
    if (out->waiting_for[0] && !out->excluded)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s.excluded: expected the reason a run waiting for %s is not "
                          "scored, got none",
                          jr->file, jr->path, out->waiting_for);
    if (needs_from_json(jr, r, out))
        return jr->err->code;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(r, "model");
    size_t old = dp_jr_push(jr, "model", 0);
    if (cJSON_IsString(mo)) {
        struct dp_err sub = {0};
        if (dp_model_load(mo->valuestring, &out->model, &sub))
            return dp_err_set(jr->err, sub.code, "%s: %s: %s", jr->file, jr->path, sub.msg);
    } else if (!mo) {
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: missing required field (expected model name or object)",
                          jr->file, jr->path);
    } else if (dp_model_from_json(jr, mo, &out->model)) {
        return jr->err->code;
    }
    dp_jr_pop(jr, old);
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(r, "cluster");
    if (co) {
        old = dp_jr_push(jr, "cluster", 0);
        if (dp_cluster_from_json(jr, co, &out->cluster))
            return jr->err->code;
        dp_jr_pop(jr, old);
    } else {
        char sys[64], net[64] = "";
        int64_t nodes = 1, gpus = 0;
        if (dp_jr_string(jr, r, "system", true, sys, sizeof sys) ||
            dp_jr_int(jr, r, "nodes", true, 1, 1000000, &nodes) ||
            dp_jr_int(jr, r, "gpus", false, 1, 100000000, &gpus) ||
            dp_jr_string(jr, r, "network", false, net, sizeof net))
            return jr->err->code;
        struct dp_err sub = {0};
        if (dp_cluster_from_system(sys, (int)nodes, net[0] ? net : NULL, &out->cluster, &sub))
            return dp_err_set(jr->err, sub.code, "%s: %s: %s", jr->file, jr->path, sub.msg);
        /* "gpus": a run on part of one node (nodes must then be 1). */
        if (gpus > 0 && gpus != dp_cluster_gpus(&out->cluster)) {
            if (nodes != 1 || gpus > out->cluster.gpus_per_node)
                return dp_err_set(jr->err, DP_EINVAL,
                                  "%s: %s.gpus: expected %d (nodes x %d GPUs per node) or fewer "
                                  "GPUs of one node, got %lld",
                                  jr->file, jr->path, dp_cluster_gpus(&out->cluster),
                                  out->cluster.gpus_per_node, (long long)gpus);
            out->cluster.gpus_per_node = (int)gpus;
        }
    }
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(r, "layout");
    if (!lo)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: layout: missing required field (expected a layout object)",
                          jr->file, jr->path);
    old = dp_jr_push(jr, "layout", 0);
    if (dp_layout_from_json(jr, lo, &out->layout))
        return jr->err->code;
    struct dp_err gerr = {0};
    char field[256];
    snprintf(field, sizeof field, "%s: %s.gemm_precision", jr->file, jr->path);
    if (dp_layout_check_gpu(&out->layout, &out->cluster.gpu, field, &gerr))
        return dp_err_set(jr->err, gerr.code, "%s", gerr.msg);
    dp_jr_pop(jr, old);
    if (measured_from_json(jr, cJSON_GetObjectItemCaseSensitive(r, "measured"), out))
        return jr->err->code;
    struct dp_err lerr = {0};
    if (!out->waiting_for[0] &&
        dp_layout_validate(&out->layout, &out->model, dp_cluster_gpus(&out->cluster), &lerr))
        return dp_err_set(jr->err, DP_EINVAL, "%s: %s.layout: %s", jr->file, jr->path, lerr.msg);
    return 0;
}

/* The file's stem: "tests/validation/torchtitan.json" -> "torchtitan". */
static void stem(const char *file, char *out, size_t cap)
{
    const char *b = strrchr(file, '/');
    b = b ? b + 1 : file;
    size_t n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".json") == 0)
        n -= 5;
    snprintf(out, cap, "%.*s", (int)n, b);
}

static int load_file(const char *file, struct dp_run **runs, int *n, struct dp_err *err)
{
    cJSON *root;
    int rc = dp_json_load_file(file, &root, err);
    if (rc)
        return rc;
    struct dp_jr jr = {.file = file, .err = err};
    static const char *const keys[] = {
        "dplan_runs", "description", "held_out_rule", "source_key", "fitted", "runs", NULL};
    static const char *const rules[] = {"none", "every-third"};
    int64_t ver;
    int rule = 0;
    bool fitted = true; /* false: no constant is fitted to the file's runs */
    char key[48];
    stem(file, key, sizeof key);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "runs");
    if (dp_jr_expect_object(&jr, root, "a runs object") || dp_jr_check_keys(&jr, root, keys) ||
        dp_jr_int(&jr, root, "dplan_runs", true, 1, 1, &ver) ||
        dp_jr_enum(&jr, root, "held_out_rule", false, rules, 2, &rule) ||
        dp_jr_bool(&jr, root, "fitted", false, &fitted) ||
        dp_jr_string(&jr, root, "source_key", false, key, sizeof key)) {
        rc = err->code;
        goto out;
    }
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) {
        rc = dp_err_set(err, DP_EINVAL, "%s: runs: expected a non-empty array of runs", file);
        goto out;
    }
    int count = cJSON_GetArraySize(arr);
    struct dp_run *rs = realloc(*runs, (size_t)(*n + count) * sizeof *rs);
    if (!rs) {
        rc = dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
        goto out;
    }
    *runs = rs;
    int i = 0, scored = 0, mem_scored = 0;
    for (const cJSON *r = arr->child; r; r = r->next, i++) {
        struct dp_run *run = &rs[*n + i];
        size_t old = dp_jr_push(&jr, "runs", 0);
        dp_jr_push(&jr, NULL, i);
        if (run_from_json(&jr, r, run)) {
            rc = err->code;
            goto out;
        }
        snprintf(run->file, sizeof run->file, "%s", file);
        if (!run->source_key[0])
            snprintf(run->source_key, sizeof run->source_key, "%s", key);
        if (rule == 1) {
            bool want = false;
            if (dp_run_scored(run))
                want = ++scored % 3 == 0;
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(r, "held_out");
            if (h && run->held_out != want) {
                dp_jr_push(&jr, "held_out", 0);
                rc = dp_err_set(err, DP_EINVAL,
                                "%s: %s: expected %s (held_out_rule every-third holds out the "
                                "3rd, 6th, ... scored run of the file), got %s",
                                file, jr.path, want ? "true" : "false", want ? "false" : "true");
                goto out;
            }
            run->held_out = want;
        }
        /* The memory peaks: the same rule over the file's scored peaks, in file order. */
        if (rule == 1 && dp_run_mem_scored(run))
            run->mem_held_out = ++mem_scored % 3 == 0;
        if (!fitted) { /* held out from every fit: not used to set any constant */
            run->held_out = true;
            run->mem_held_out = true;
        }
        dp_jr_pop(&jr, old);
    }
    *n += count;
out:
    cJSON_Delete(root);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dp_runs_append(const char *path, struct dp_run **runs, int *n, struct dp_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return load_file(path, runs, n, err);
    DIR *d = opendir(path);
    if (!d)
        return dp_err_set(err, DP_EIO, "%s: cannot open directory", path);
    char **names = NULL;
    int nn = 0, rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") || e->d_name[0] == '.')
            continue;
        char **nm = realloc(names, (size_t)(nn + 1) * sizeof *nm);
        if (!nm) {
            rc = dp_err_set(err, DP_ENOMEM, "out of memory");
            break;
        }
        names = nm;
        names[nn] = malloc(strlen(path) + len + 2);
        if (!names[nn]) {
            rc = dp_err_set(err, DP_ENOMEM, "out of memory");
            break;
        }
        sprintf(names[nn++], "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (!rc && nn == 0)
        rc = dp_err_set(err, DP_ENOENT, "%s: no *.json runs files in the directory", path);
    if (!rc)
        qsort(names, (size_t)nn, sizeof *names, cmp_str);
    for (int i = 0; i < nn && !rc; i++)
        rc = load_file(names[i], runs, n, err);
    for (int i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    return rc;
}

int dp_runs_load(const char *path, struct dp_run **runs, int *n, struct dp_err *err)
{
    *runs = NULL;
    *n = 0;
    int rc = dp_runs_append(path, runs, n, err);
    if (rc) {
        free(*runs);
        *runs = NULL;
        *n = 0;
    }
    return rc;
}
