/*
 * dplan profiles [KIND] [--json]: list the shipped profiles with their key numbers.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <string.h>

static const char help[] =
    "usage: dplan profiles [gpu|interconnect|network|system|models] [--json]\n\n"
    "List the shipped profiles (from $DPLAN_PROFILES or the profiles/ directory)\n"
    "with their key numbers. Without a KIND, list every kind.\n\n"
    "  --json    machine-readable: {KIND: [{\"name\", ...the numbers shown}, ...]}; a\n"
    "            profile that does not load has {\"name\", \"error\"}\n";

/* One profile as text (json NULL) or as an object appended to json. */
static void show(const char *kind, const char *name, cJSON *json)
{
    struct dp_err e = {0};
    cJSON *o = json ? cJSON_CreateObject() : NULL;
    if (o)
        cJSON_AddStringToObject(o, "name", name);
    if (strcmp(kind, "gpu") == 0) {
        struct dp_gpu g;
        if (dp_gpu_load(name, &g, &e) == 0) {
            if (o) {
                cJSON_AddNumberToObject(o, "bf16_tflops", g.peak_tflops[DP_BF16]);
                cJSON_AddNumberToObject(o, "mem_bytes", (double)g.mem_bytes);
                cJSON_AddNumberToObject(o, "mem_bw_gbps", g.mem_bw_gbps);
                cJSON_AddStringToObject(o, "intra_link", g.intra_link);
            } else {
                printf("  %-18s %7.1f TFLOP/s bf16 %6.1f GiB %6.0f GB/s  %s\n", name,
                       g.peak_tflops[DP_BF16], cli_gib(g.mem_bytes), g.mem_bw_gbps, g.intra_link);
            }
        }
    } else if (strcmp(kind, "interconnect") == 0 || strcmp(kind, "network") == 0) {
        struct dp_link l;
        int rc = strcmp(kind, "network") == 0 ? dp_network_load(name, &l, &e)
                                              : dp_link_load(name, &l, &e);
        if (rc == 0) {
            if (o) {
                cJSON_AddNumberToObject(o, "bw_gbps", l.bw_gbps);
                cJSON_AddNumberToObject(o, "latency_us", l.latency_us);
                cJSON_AddNumberToObject(o, "efficiency", l.efficiency);
            } else {
                printf("  %-18s %7.1f GB/s per direction, %.1f us, efficiency %.2f\n", name,
                       l.bw_gbps, l.latency_us, l.efficiency);
            }
        }
    } else if (strcmp(kind, "system") == 0) {
        struct dp_system s;
        if (dp_system_load(name, &s, &e) == 0) {
            if (o) {
                cJSON_AddNumberToObject(o, "gpus_per_node", s.gpus_per_node);
                cJSON_AddStringToObject(o, "gpu", s.gpu);
                cJSON_AddStringToObject(o, "intra", s.intra);
                cJSON_AddNumberToObject(o, "nics_per_node", s.nics_per_node);
                cJSON_AddStringToObject(o, "network", s.network);
            } else {
                printf("  %-18s %d x %s, %s, %d x %s\n", name, s.gpus_per_node, s.gpu, s.intra,
                       s.nics_per_node, s.network);
            }
        }
    } else {
        struct dp_model m;
        if (dp_model_load(name, &m, &e) == 0) {
            struct dp_param_count pc;
            dp_model_count(&m, &pc);
            if (o) {
                cJSON_AddNumberToObject(o, "params", (double)pc.total);
                if (m.experts)
                    cJSON_AddNumberToObject(o, "active_params", (double)pc.active);
                cJSON_AddNumberToObject(o, "layers", (double)m.layers);
                cJSON_AddNumberToObject(o, "hidden", (double)m.hidden);
            } else {
                char buf[32];
                printf("  %-18s %8s params, %lld layers\n", name,
                       cli_count_short(pc.total, buf, sizeof buf), (long long)m.layers);
            }
        }
    }
    if (e.code) {
        if (o)
            cJSON_AddStringToObject(o, "error", e.msg);
        else
            printf("  %-18s (unreadable: %s)\n", name, e.msg);
    }
    if (o)
        cJSON_AddItemToArray(json, o);
}

static int list_kind(const char *kind, cJSON *json)
{
    char **names;
    int n;
    struct dp_err err = {0};
    if (dp_profile_names(kind, &names, &n, &err))
        return cli_fail(&err);
    cJSON *a = json ? cJSON_AddArrayToObject(json, kind) : NULL;
    if (!json)
        printf("%s:\n", kind);
    for (int i = 0; i < n; i++)
        show(kind, names[i], a);
    dp_names_free(names, n);
    return 0;
}

int cmd_profiles(int argc, char **argv)
{
    static const char *const kinds[] = {"gpu", "interconnect", "network", "system", "models"};
    static const int nkinds = (int)(sizeof kinds / sizeof kinds[0]);
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    bool json = false;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("profiles", argc, argv, ":h", opts, NULL)) != -1) {
        switch (ch) {
        case 'j': json = true; break;
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
    }
    if (argc - optind > 1)
        return cli_usage_error("profiles", "expected at most one KIND");
    const char *want = optind < argc ? argv[optind] : NULL;
    int k0 = 0, k1 = nkinds;
    if (want) {
        for (k0 = 0; k0 < nkinds && strcmp(want, kinds[k0]) != 0; k0++)
            ;
        if (k0 == nkinds)
            return cli_usage_error("profiles",
                                   "unknown kind \"%s\" (expected gpu, interconnect, network, "
                                   "system or models)",
                                   want);
        k1 = k0 + 1;
    }
    cJSON *o = json ? cJSON_CreateObject() : NULL;
    int rc = 0;
    for (int k = k0; k < k1 && !rc; k++) {
        rc = list_kind(kinds[k], o);
        if (!json && !rc && k + 1 < k1)
            printf("\n");
    }
    if (o) {
        if (rc)
            cJSON_Delete(o);
        else
            cli_print_json(o);
    }
    return rc;
}
