/*
 * Hardware profiles: GPUs, intra-node interconnects, networks and systems,
 * read from profiles/<kind>/<name>.json, and clusters built from them.
 *
 * Every profile may carry "sources": {field: citation} and "notes"; the
 * loaders accept them but do not interpret them. tests/unit checks that the
 * shipped profiles cite a source for every number.
 */
#include "core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DPLAN_PROFILES_DIR
#define DPLAN_PROFILES_DIR "profiles"
#endif

static char exe_dir[PATH_MAX];

void dp_profiles_set_exe(const char *argv0)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) {
        buf[n] = '\0';
    } else if (argv0 && realpath(argv0, buf)) {
        /* fall through with buf */
    } else {
        return;
    }
    char *slash = strrchr(buf, '/');
    if (slash) {
        *slash = '\0';
        snprintf(exe_dir, sizeof exe_dir, "%s", buf);
    }
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *dp_profiles_dir(void)
{
    static char found[PATH_MAX + 32];
    const char *env = getenv("DPLAN_PROFILES");
    if (env && env[0])
        return env;
    if (exe_dir[0]) {
        snprintf(found, sizeof found, "%s/../profiles", exe_dir);
        if (is_dir(found))
            return found;
        snprintf(found, sizeof found, "%s/../share/dplan/profiles", exe_dir);
        if (is_dir(found))
            return found;
    }
    return DPLAN_PROFILES_DIR;
}

/* Resolve NAME to profiles/<kind>/NAME.json, or use it as a path if it looks like one. */
static void profile_path(const char *kind, const char *name, char *out, size_t cap)
{
    struct stat st;
    if (strchr(name, '/') || strstr(name, ".json") || stat(name, &st) == 0)
        snprintf(out, cap, "%s", name);
    else
        snprintf(out, cap, "%s/%s/%s.json", dp_profiles_dir(), kind, name);
}

static int load_profile(const char *kind, const char *name, cJSON **root, char *file, size_t cap,
                        struct dp_err *err)
{
    profile_path(kind, name, file, cap);
    int rc = dp_json_load_file(file, root, err);
    if (rc == DP_ENOENT && strcmp(file, name) != 0) {
        dp_err_clear(err);
        char **names = NULL;
        int n = 0;
        char list[512] = "";
        if (dp_profile_names(kind, &names, &n, NULL) == 0) {
            size_t len = 0;
            for (int i = 0; i < n && len < sizeof list - 1; i++)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                        names[i]);
            dp_names_free(names, n);
        }
        return dp_err_set(err, DP_ENOENT, "unknown %s profile \"%s\" (known: %s)", kind, name,
                          list[0] ? list : "none found");
    }
    return rc;
}

static int check_sources(struct dp_jr *jr, const cJSON *obj)
{
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(obj, "sources");
    if (!src)
        return 0;
    size_t old = dp_jr_push(jr, "sources", 0);
    if (dp_jr_expect_object(jr, src, "an object of field: citation strings"))
        return jr->err->code;
    for (const cJSON *it = src->child; it; it = it->next)
        if (!cJSON_IsString(it) && !cJSON_IsArray(it)) {
            char got[128], w[256];
            dp_json_describe(it, got, sizeof got);
            snprintf(w, sizeof w, "%s.%s", jr->path, it->string ? it->string : "?");
            return dp_err_set(jr->err, DP_EINVAL, "%s: %s: expected citation string, got %s",
                              jr->file, w, got);
        }
    dp_jr_pop(jr, old);
    return 0;
}

static int gpu_from_json(struct dp_jr *jr, const cJSON *obj, struct dp_gpu *g)
{
    static const char *const keys[] = {"name",
                                       "vendor",
                                       "peak_tflops",
                                       "mem_bytes",
                                       "usable_fraction",
                                       "mem_bw_gbps",
                                       "runtime_overhead_bytes",
                                       "tdp_w",
                                       "intra_link",
                                       "host_link",
                                       "gemm",
                                       "gemm_fp8",
                                       "fp8_block_scaling",
                                       "mxfp8_gemm_us",
                                       "attention",
                                       "sources",
                                       "notes",
                                       NULL};
    static const char *const peak_keys[] = {"bf16", "fp16", "fp32", "tf32", "fp8", "fp64", NULL};
    static const char *const gemm_keys[] = {"eff_max", "half_flops", NULL};
    memset(g, 0, sizeof *g);
    if (dp_jr_expect_object(jr, obj, "a GPU profile object") || dp_jr_check_keys(jr, obj, keys) ||
        check_sources(jr, obj))
        return jr->err->code;
    double tdp = 0;
    if (dp_jr_string(jr, obj, "name", true, g->name, sizeof g->name) ||
        dp_jr_string(jr, obj, "vendor", false, g->vendor, sizeof g->vendor) ||
        dp_jr_int(jr, obj, "mem_bytes", true, 1 << 20, INT64_C(1) << 50, &g->mem_bytes) ||
        dp_jr_number(jr, obj, "usable_fraction", true, 0.01, 1.0, &g->usable_fraction) ||
        dp_jr_number(jr, obj, "mem_bw_gbps", true, 1e-3, 1e6, &g->mem_bw_gbps) ||
        dp_jr_int(jr, obj, "runtime_overhead_bytes", true, 0, INT64_C(1) << 40,
                  &g->runtime_overhead_bytes) ||
        dp_jr_number(jr, obj, "tdp_w", false, 0, 1e5, &tdp) ||
        dp_jr_bool(jr, obj, "fp8_block_scaling", false, &g->fp8_block_scaling) ||
        dp_jr_string(jr, obj, "intra_link", true, g->intra_link, sizeof g->intra_link) ||
        dp_jr_string(jr, obj, "host_link", true, g->host_link, sizeof g->host_link))
        return jr->err->code;
    g->tdp_w = tdp;
    const cJSON *peak = cJSON_GetObjectItemCaseSensitive(obj, "peak_tflops");
    size_t old = dp_jr_push(jr, "peak_tflops", 0);
    if (!peak) {
        dp_jr_pop(jr, old);
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: peak_tflops: missing required field (expected object "
                          "{bf16, fp16, fp32, ...} of dense TFLOP/s)",
                          jr->file);
    }
    double fp64 = 0;
    if (dp_jr_expect_object(jr, peak, "an object of dense TFLOP/s per precision") ||
        dp_jr_check_keys(jr, peak, peak_keys) ||
        dp_jr_number(jr, peak, "bf16", true, 1e-3, 1e6, &g->peak_tflops[DP_BF16]) ||
        dp_jr_number(jr, peak, "fp16", true, 1e-3, 1e6, &g->peak_tflops[DP_FP16]) ||
        dp_jr_number(jr, peak, "fp32", true, 1e-3, 1e6, &g->peak_tflops[DP_FP32]) ||
        dp_jr_number(jr, peak, "tf32", false, 0, 1e6, &g->tf32_tflops) ||
        dp_jr_number(jr, peak, "fp8", false, 0, 1e6, &g->fp8_tflops) ||
        dp_jr_number(jr, peak, "fp64", false, 0, 1e6, &fp64))
        return jr->err->code;
    dp_jr_pop(jr, old);
    const cJSON *gemm = cJSON_GetObjectItemCaseSensitive(obj, "gemm");
    old = dp_jr_push(jr, "gemm", 0);
    if (!gemm) {
        dp_jr_pop(jr, old);
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: gemm: missing required field (expected object {eff_max, "
                          "half_flops})",
                          jr->file);
    }
    if (dp_jr_expect_object(jr, gemm, "an object {eff_max, half_flops}") ||
        dp_jr_check_keys(jr, gemm, gemm_keys) ||
        dp_jr_number(jr, gemm, "eff_max", true, 0.01, 1.0, &g->gemm.eff_max) ||
        dp_jr_number(jr, gemm, "half_flops", true, 0, 1e18, &g->gemm.half_flops))
        return jr->err->code;
    dp_jr_pop(jr, old);
    /* The FP8 curve: required with an fp8 peak, refused without one. */
    const cJSON *g8 = cJSON_GetObjectItemCaseSensitive(obj, "gemm_fp8");
    if (g8 && g->fp8_tflops <= 0)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: gemm_fp8: expected no FP8 curve without a peak_tflops.fp8 (this "
                          "GPU has no FP8 tensor cores), got one",
                          jr->file);
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(obj, "mxfp8_gemm_us");
    if (mx && !g->fp8_block_scaling)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: mxfp8_gemm_us: expected none without \"fp8_block_scaling\": "
                          "true (no MXFP8 tensor cores), got one",
                          jr->file);
    double mx_us = 0;
    if (dp_jr_number(jr, obj, "mxfp8_gemm_us", false, 0, 1000, &mx_us))
        return jr->err->code;
    g->mxfp8_fixed_s = mx_us * 1e-6;
    if (!g8 && g->fp8_tflops > 0) {
        /* A profile (or a cluster file written before FP8 curves existed) without one: the
         * bf16 curve's efficiency and fixed time per GEMM, half_flops / (eff_max x peak),
         * carried over to the FP8 peak (profiles/README.md, gemm_fp8). */
        g->gemm_fp8.eff_max = g->gemm.eff_max;
        g->gemm_fp8.half_flops = g->gemm.half_flops * g->fp8_tflops / g->peak_tflops[DP_BF16];
    }
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(obj, "attention");
    if (at) {
        static const char *const akeys[] = {"default", "flash2", "flash3", "cudnn",
                                            "triton",  "flash1", "flex",   NULL};
        static const char *const anames[] = {"flash2", "flash3", "cudnn",
                                             "triton", "flash1", "flex"};
        int def = 0;
        old = dp_jr_push(jr, "attention", 0);
        if (dp_jr_expect_object(jr, at, "an object {default, flash2, flash3, cudnn, ...}") ||
            dp_jr_check_keys(jr, at, akeys) || dp_jr_enum(jr, at, "default", true, anames, 6, &def))
            return jr->err->code;
        for (int k = 0; k < 6; k++)
            if (dp_jr_number(jr, at, anames[k], false, 0.01, 2.0, &g->attn_rel[k + 1]))
                return jr->err->code;
        g->attn_default = (enum dp_attn)(def + 1);
        if (g->attn_rel[g->attn_default] <= 0)
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s.%s: expected the default kernel's relative speed, got none",
                              jr->file, jr->path, anames[def]);
        dp_jr_pop(jr, old);
    }
    if (g8) {
        old = dp_jr_push(jr, "gemm_fp8", 0);
        if (dp_jr_expect_object(jr, g8, "an object {eff_max, half_flops}") ||
            dp_jr_check_keys(jr, g8, gemm_keys) ||
            dp_jr_number(jr, g8, "eff_max", true, 0.01, 1.0, &g->gemm_fp8.eff_max) ||
            dp_jr_number(jr, g8, "half_flops", true, 0, 1e18, &g->gemm_fp8.half_flops))
            return jr->err->code;
        dp_jr_pop(jr, old);
    }
    return 0;
}

static const char *const link_kinds[] = {"nvlink", "xgmi", "pcie", "net", "local"};

static int link_from_json(struct dp_jr *jr, const cJSON *obj, struct dp_link *l)
{
    static const char *const keys[] = {"name",       "kind",        "bw_gbps",        "latency_us",
                                       "efficiency", "p2p_bw_gbps", "line_rate_gbit", "sources",
                                       "notes",      NULL};
    memset(l, 0, sizeof *l);
    int kind = 0;
    double line = 0;
    if (dp_jr_expect_object(jr, obj, "a link profile object") || dp_jr_check_keys(jr, obj, keys) ||
        check_sources(jr, obj) || dp_jr_string(jr, obj, "name", true, l->name, sizeof l->name) ||
        dp_jr_enum(jr, obj, "kind", true, link_kinds, 5, &kind) ||
        dp_jr_number(jr, obj, "bw_gbps", true, 1e-3, 1e6, &l->bw_gbps) ||
        dp_jr_number(jr, obj, "latency_us", true, 0, 1e6, &l->latency_us) ||
        dp_jr_number(jr, obj, "efficiency", true, 0.01, 1.0, &l->efficiency) ||
        dp_jr_number(jr, obj, "p2p_bw_gbps", false, 0, 1e6, &l->p2p_bw_gbps) ||
        dp_jr_number(jr, obj, "line_rate_gbit", false, 0, 1e7, &line))
        return jr->err->code;
    l->kind = (enum dp_link_kind)kind;
    return 0;
}

static int system_from_json(struct dp_jr *jr, const cJSON *obj, struct dp_system *s)
{
    static const char *const keys[] = {
        "name",          "description", "gpu",     "gpus_per_node", "intra",
        "nics_per_node", "network",     "sources", "notes",         NULL};
    memset(s, 0, sizeof *s);
    int64_t gpn = 0, nics = 0;
    if (dp_jr_expect_object(jr, obj, "a system profile object") ||
        dp_jr_check_keys(jr, obj, keys) || check_sources(jr, obj) ||
        dp_jr_string(jr, obj, "name", true, s->name, sizeof s->name) ||
        dp_jr_string(jr, obj, "description", false, s->description, sizeof s->description) ||
        dp_jr_string(jr, obj, "gpu", true, s->gpu, sizeof s->gpu) ||
        dp_jr_int(jr, obj, "gpus_per_node", true, 1, 1024, &gpn) ||
        dp_jr_string(jr, obj, "intra", true, s->intra, sizeof s->intra) ||
        dp_jr_int(jr, obj, "nics_per_node", true, 0, 1024, &nics) ||
        dp_jr_string(jr, obj, "network", true, s->network, sizeof s->network))
        return jr->err->code;
    s->gpus_per_node = (int)gpn;
    s->nics_per_node = (int)nics;
    return 0;
}

#define DEFINE_LOADER(fn, type, kind, parse, check)                                                \
    int fn(const char *name, type *out, struct dp_err *err)                                        \
    {                                                                                              \
        char file[4096];                                                                           \
        cJSON *root;                                                                               \
        int rc = load_profile(kind, name, &root, file, sizeof file, err);                          \
        if (rc)                                                                                    \
            return rc;                                                                             \
        struct dp_jr jr = {.file = file, .err = err};                                              \
        rc = parse(&jr, root, out);                                                                \
        if (!rc)                                                                                   \
            rc = check(&jr, out);                                                                  \
        cJSON_Delete(root);                                                                        \
        return rc;                                                                                 \
    }

static int check_none_gpu(struct dp_jr *jr, struct dp_gpu *g)
{
    return 0;
}
static int check_none_system(struct dp_jr *jr, struct dp_system *s)
{
    return 0;
}
static int check_intra(struct dp_jr *jr, struct dp_link *l)
{
    if (l->kind == DP_LINK_NET)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: kind: expected an intra-node link (nvlink, xgmi, pcie), got \"net\" "
                          "(networks live in profiles/network/)",
                          jr->file);
    return 0;
}
static int check_net(struct dp_jr *jr, struct dp_link *l)
{
    if (l->kind != DP_LINK_NET)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: kind: expected \"net\" for a network, got \"%s\"", jr->file,
                          link_kinds[l->kind]);
    return 0;
}

DEFINE_LOADER(dp_gpu_load, struct dp_gpu, "gpu", gpu_from_json, check_none_gpu)
DEFINE_LOADER(dp_link_load, struct dp_link, "interconnect", link_from_json, check_intra)
DEFINE_LOADER(dp_network_load, struct dp_link, "network", link_from_json, check_net)
DEFINE_LOADER(dp_system_load, struct dp_system, "system", system_from_json, check_none_system)

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dp_profile_names(const char *kind, char ***names, int *n, struct dp_err *err)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", dp_profiles_dir(), kind);
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return dp_err_set(err, DP_ENOENT, "%s: cannot open profiles directory", dir);
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(*names, (size_t)cap * sizeof *nn);
            if (!nn)
                break;
            *names = nn;
        }
        (*names)[*n] = strndup(e->d_name, len - 5);
        if ((*names)[*n])
            (*n)++;
    }
    closedir(d);
    if (*n)
        qsort(*names, (size_t)*n, sizeof **names, cmp_str);
    return 0;
}

void dp_names_free(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int dp_cluster_from_system(const char *system, int nodes, const char *network,
                           struct dp_cluster *out, struct dp_err *err)
{
    struct dp_system s;
    memset(out, 0, sizeof *out);
    int rc = dp_system_load(system, &s, err);
    if (rc)
        return rc;
    if (nodes < 1)
        return dp_err_set(err, DP_EUSAGE, "--nodes: expected integer >= 1, got %d", nodes);
    if ((rc = dp_gpu_load(s.gpu, &out->gpu, err)) ||
        (rc = dp_link_load(s.intra, &out->intra, err)) ||
        (rc = dp_network_load(network ? network : s.network, &out->inter, err))) {
        dp_err_prefix(err, "system %s", s.name);
        return rc;
    }
    snprintf(out->name, sizeof out->name, "%s x%d", s.name, nodes);
    snprintf(out->system, sizeof out->system, "%s", s.name);
    out->nodes = nodes;
    out->gpus_per_node = s.gpus_per_node;
    out->nics_per_node = s.nics_per_node;
    return 0;
}

int dp_cluster_from_gpu(const char *gpu, int gpus, int per_node, const char *intra,
                        const char *network, struct dp_cluster *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    if (gpus < 1)
        return dp_err_set(err, DP_EUSAGE, "--gpus: expected integer >= 1, got %d", gpus);
    if (per_node == 0)
        per_node = gpus < 8 ? gpus : 8;
    if (per_node < 1 || gpus % per_node != 0)
        return dp_err_set(err, DP_EUSAGE,
                          "--gpus-per-node: expected a divisor of --gpus=%d, got %d", gpus,
                          per_node);
    int rc = dp_gpu_load(gpu, &out->gpu, err);
    if (rc)
        return rc;
    if ((rc = dp_link_load(intra ? intra : out->gpu.intra_link, &out->intra, err)) ||
        (rc = dp_network_load(network ? network : "ib-ndr-400", &out->inter, err)))
        return rc;
    out->nodes = gpus / per_node;
    out->gpus_per_node = per_node;
    out->nics_per_node = per_node; /* one NIC per GPU, the rail-optimised default */
    snprintf(out->system, sizeof out->system, "custom");
    snprintf(out->name, sizeof out->name, "%dx %s", gpus, out->gpu.name);
    return 0;
}

/* A field that is either a profile name (string) or an inline profile object. */
static int named_or_inline(struct dp_jr *jr, const cJSON *obj, const char *key, const char *kind,
                           void *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    size_t old = dp_jr_push(jr, key, 0);
    int rc;
    if (cJSON_IsString(v)) {
        struct dp_err sub = {0};
        if (strcmp(kind, "gpu") == 0)
            rc = dp_gpu_load(v->valuestring, out, &sub);
        else if (strcmp(kind, "interconnect") == 0)
            rc = dp_link_load(v->valuestring, out, &sub);
        else
            rc = dp_network_load(v->valuestring, out, &sub);
        if (rc)
            rc = dp_err_set(jr->err, rc, "%s: %s: %s", jr->file, jr->path, sub.msg);
    } else if (cJSON_IsObject(v)) {
        if (strcmp(kind, "gpu") == 0)
            rc = gpu_from_json(jr, v, out);
        else
            rc = link_from_json(jr, v, out);
    } else {
        char got[128];
        dp_json_describe(v, got, sizeof got);
        rc = dp_err_set(jr->err, DP_EINVAL, "%s: %s: expected %s profile name or object, got %s",
                        jr->file, jr->path, kind, got);
    }
    dp_jr_pop(jr, old);
    return rc;
}

int dp_cluster_from_json(struct dp_jr *jr, const cJSON *obj, struct dp_cluster *out)
{
    static const char *const keys[] = {"dplan_cluster", "name",          "system",   "nodes",
                                       "gpus_per_node", "nics_per_node", "gpu",      "intra",
                                       "network",       "group_links",   "topology", NULL};
    memset(out, 0, sizeof *out);
    int64_t ver = 0, nodes = 0, gpn = 0, nics = 0;
    if (dp_jr_expect_object(jr, obj, "a cluster object") || dp_jr_check_keys(jr, obj, keys) ||
        dp_jr_int(jr, obj, "dplan_cluster", true, 1, 1, &ver) ||
        dp_jr_string(jr, obj, "name", false, out->name, sizeof out->name) ||
        dp_jr_string(jr, obj, "system", false, out->system, sizeof out->system) ||
        dp_jr_int(jr, obj, "nodes", true, 1, 1000000, &nodes) ||
        dp_jr_int(jr, obj, "gpus_per_node", true, 1, 1024, &gpn) ||
        dp_jr_int(jr, obj, "nics_per_node", true, 0, 1024, &nics) ||
        named_or_inline(jr, obj, "gpu", "gpu", &out->gpu) ||
        named_or_inline(jr, obj, "intra", "interconnect", &out->intra) ||
        named_or_inline(jr, obj, "network", "network", &out->inter))
        return jr->err->code;
    out->nodes = (int)nodes;
    out->gpus_per_node = (int)gpn;
    out->nics_per_node = (int)nics;
    size_t at = dp_jr_push(jr, "nics_per_node", 0);
    int rc = dp_cluster_check_nics(jr->file, jr->path, out, jr->err);
    dp_jr_pop(jr, at);
    if (rc)
        return rc;
    if (!out->name[0])
        snprintf(out->name, sizeof out->name, "%d x %d %s", out->nodes, out->gpus_per_node,
                 out->gpu.name);
    if (!out->system[0])
        snprintf(out->system, sizeof out->system, "custom");
    const cJSON *gl = cJSON_GetObjectItemCaseSensitive(obj, "group_links");
    if (gl && !cJSON_IsNull(gl)) {
        size_t old = dp_jr_push(jr, "group_links", 0);
        if (!cJSON_IsArray(gl) || cJSON_GetArraySize(gl) > 8) {
            dp_jr_pop(jr, old);
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: group_links: expected array of at most 8 link objects",
                              jr->file);
        }
        int i = 0;
        for (const cJSON *it = gl->child; it; it = it->next, i++) {
            size_t o2 = dp_jr_push(jr, NULL, i);
            if (link_from_json(jr, it, &out->group_link[i]))
                return jr->err->code;
            dp_jr_pop(jr, o2);
        }
        out->ngroup_links = i;
        dp_jr_pop(jr, old);
    }
    return 0;
}

int dp_cluster_check_nics(const char *file, const char *field, const struct dp_cluster *c,
                          struct dp_err *err)
{
    int most = DP_MAX_NICS_PER_GPU * c->gpus_per_node;
    if (c->nics_per_node < 0 || c->nics_per_node > most)
        return dp_err_set(err, DP_EINVAL,
                          "%s: %s: expected integer 0..%d (at most %d NICs per GPU, %d GPUs per "
                          "node), got %d",
                          file, field, most, DP_MAX_NICS_PER_GPU, c->gpus_per_node,
                          c->nics_per_node);
    if (c->nodes > 1 && c->nics_per_node < 1)
        return dp_err_set(err, DP_EINVAL,
                          "%s: %s: expected integer >= 1 for %d nodes (they talk through their "
                          "NICs), got 0; give the node's compute NICs with `dplan topo "
                          "--nics-per-node N -o FILE`",
                          file, field, c->nodes);
    return 0;
}

int dp_cluster_load(const char *file, struct dp_cluster *out, struct dp_err *err)
{
    cJSON *root;
    int rc = dp_json_load_file(file, &root, err);
    if (rc)
        return rc;
    struct dp_jr jr = {.file = file, .err = err};
    rc = dp_cluster_from_json(&jr, root, out);
    cJSON_Delete(root);
    return rc;
}

static cJSON *gpu_to_json(const struct dp_gpu *g)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", g->name);
    if (g->vendor[0])
        cJSON_AddStringToObject(o, "vendor", g->vendor);
    cJSON *p = cJSON_AddObjectToObject(o, "peak_tflops");
    cJSON_AddNumberToObject(p, "bf16", g->peak_tflops[DP_BF16]);
    cJSON_AddNumberToObject(p, "fp16", g->peak_tflops[DP_FP16]);
    cJSON_AddNumberToObject(p, "fp32", g->peak_tflops[DP_FP32]);
    if (g->tf32_tflops > 0)
        cJSON_AddNumberToObject(p, "tf32", g->tf32_tflops);
    if (g->fp8_tflops > 0)
        cJSON_AddNumberToObject(p, "fp8", g->fp8_tflops);
    cJSON_AddNumberToObject(o, "mem_bytes", (double)g->mem_bytes);
    cJSON_AddNumberToObject(o, "usable_fraction", g->usable_fraction);
    cJSON_AddNumberToObject(o, "mem_bw_gbps", g->mem_bw_gbps);
    cJSON_AddNumberToObject(o, "runtime_overhead_bytes", (double)g->runtime_overhead_bytes);
    if (g->tdp_w > 0)
        cJSON_AddNumberToObject(o, "tdp_w", g->tdp_w);
    cJSON_AddStringToObject(o, "intra_link", g->intra_link);
    cJSON_AddStringToObject(o, "host_link", g->host_link);
    cJSON *gm = cJSON_AddObjectToObject(o, "gemm");
    cJSON_AddNumberToObject(gm, "eff_max", g->gemm.eff_max);
    cJSON_AddNumberToObject(gm, "half_flops", g->gemm.half_flops);
    if (g->fp8_tflops > 0) {
        cJSON *g8 = cJSON_AddObjectToObject(o, "gemm_fp8");
        cJSON_AddNumberToObject(g8, "eff_max", g->gemm_fp8.eff_max);
        cJSON_AddNumberToObject(g8, "half_flops", g->gemm_fp8.half_flops);
    }
    if (g->fp8_block_scaling)
        cJSON_AddBoolToObject(o, "fp8_block_scaling", true);
    if (g->fp8_block_scaling && g->mxfp8_fixed_s > 0)
        cJSON_AddNumberToObject(o, "mxfp8_gemm_us", g->mxfp8_fixed_s * 1e6);
    if (g->attn_default != DP_ATTN_DEFAULT) {
        cJSON *at = cJSON_AddObjectToObject(o, "attention");
        cJSON_AddStringToObject(at, "default", dp_attn_name(g->attn_default));
        for (int k = 1; k < DP_ATTNS; k++)
            if (g->attn_rel[k] > 0)
                cJSON_AddNumberToObject(at, dp_attn_name((enum dp_attn)k), g->attn_rel[k]);
    }
    return o;
}

static cJSON *link_to_json(const struct dp_link *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", l->name);
    cJSON_AddStringToObject(o, "kind", link_kinds[l->kind]);
    cJSON_AddNumberToObject(o, "bw_gbps", l->bw_gbps);
    cJSON_AddNumberToObject(o, "latency_us", l->latency_us);
    cJSON_AddNumberToObject(o, "efficiency", l->efficiency);
    if (l->p2p_bw_gbps > 0)
        cJSON_AddNumberToObject(o, "p2p_bw_gbps", l->p2p_bw_gbps);
    return o;
}

cJSON *dp_cluster_to_json(const struct dp_cluster *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "dplan_cluster", 1);
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "system", c->system);
    cJSON_AddNumberToObject(o, "nodes", c->nodes);
    cJSON_AddNumberToObject(o, "gpus_per_node", c->gpus_per_node);
    cJSON_AddNumberToObject(o, "nics_per_node", c->nics_per_node);
    cJSON_AddItemToObject(o, "gpu", gpu_to_json(&c->gpu));
    cJSON_AddItemToObject(o, "intra", link_to_json(&c->intra));
    cJSON_AddItemToObject(o, "network", link_to_json(&c->inter));
    if (c->ngroup_links > 0) {
        cJSON *a = cJSON_AddArrayToObject(o, "group_links");
        for (int i = 0; i < c->ngroup_links; i++)
            cJSON_AddItemToArray(a, link_to_json(&c->group_link[i]));
    }
    return o;
}
