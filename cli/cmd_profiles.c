/*
 * dplan profiles [KIND]: list the shipped profiles with their key numbers.
 */
#include "cli.h"

#include <string.h>

static const char help[] =
    "usage: dplan profiles [gpu|interconnect|network|system|models]\n\n"
    "List the shipped profiles (from $DPLAN_PROFILES or the profiles/ directory)\n"
    "with their key numbers. Without an argument, list every kind.\n";

static void list_kind(const char *kind)
{
    char **names;
    int n;
    struct dp_err err = {0};
    if (dp_profile_names(kind, &names, &n, &err)) {
        fprintf(stderr, "dplan: error: %s\n", err.msg);
        return;
    }
    printf("%s:\n", kind);
    for (int i = 0; i < n; i++) {
        struct dp_err e = {0};
        if (strcmp(kind, "gpu") == 0) {
            struct dp_gpu g;
            if (dp_gpu_load(names[i], &g, &e) == 0)
                printf("  %-18s %7.1f TFLOP/s bf16 %6.1f GiB %6.0f GB/s  %s\n", names[i],
                       g.peak_tflops[DP_BF16], cli_gib(g.mem_bytes), g.mem_bw_gbps, g.intra_link);
        } else if (strcmp(kind, "interconnect") == 0 || strcmp(kind, "network") == 0) {
            struct dp_link l;
            int rc = strcmp(kind, "network") == 0 ? dp_network_load(names[i], &l, &e)
                                                  : dp_link_load(names[i], &l, &e);
            if (rc == 0)
                printf("  %-18s %7.1f GB/s per direction, %.1f us, efficiency %.2f\n", names[i],
                       l.bw_gbps, l.latency_us, l.efficiency);
        } else if (strcmp(kind, "system") == 0) {
            struct dp_system s;
            if (dp_system_load(names[i], &s, &e) == 0)
                printf("  %-18s %d x %s, %s, %d x %s\n", names[i], s.gpus_per_node, s.gpu, s.intra,
                       s.nics_per_node, s.network);
        } else {
            struct dp_model m;
            if (dp_model_load(names[i], &m, &e) == 0) {
                struct dp_param_count pc;
                dp_model_count(&m, &pc);
                char buf[32];
                printf("  %-18s %8s params, %lld layers\n", names[i],
                       cli_count_short(pc.total, buf, sizeof buf), (long long)m.layers);
            }
        }
        if (e.code)
            printf("  %-18s (unreadable: %s)\n", names[i], e.msg);
    }
    dp_names_free(names, n);
}

int cmd_profiles(int argc, char **argv)
{
    static const char *const kinds[] = {"gpu", "interconnect", "network", "system", "models"};
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(help, stdout);
        return 0;
    }
    if (argc > 2)
        return cli_usage_error("profiles", "expected at most one KIND");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (argc == 2 && strcmp(argv[1], kinds[i]) != 0)
            continue;
        list_kind(kinds[i]);
        if (argc == 1 && i + 1 < sizeof kinds / sizeof kinds[0])
            printf("\n");
        if (argc == 2)
            return 0;
    }
    if (argc == 2)
        return cli_usage_error("profiles", "unknown kind \"%s\"", argv[1]);
    return 0;
}
