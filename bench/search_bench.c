/*
 * Search benchmark: exhaustive layout search for the two cases of issue 3,
 * timed on one core. Prints layouts evaluated, layouts per second and wall
 * time (median of the repetitions).
 *
 *   build/bench_search [REPS]
 */
#include "planner/planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run(const char *model, const char *system, int nodes, int64_t gbs, int reps)
{
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_err err = {0};
    if (dp_model_load(model, &m, &err) || dp_cluster_from_system(system, nodes, NULL, &cl, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.gbs = gbs;
    o.seq_len = m.seq_len;
    struct dp_search_result *r = malloc(sizeof *r);
    double t[16];
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        if (dp_plan_search(&m, &cl, &o, r, &err)) {
            fprintf(stderr, "bench: %s\n", err.msg);
            free(r);
            return 1;
        }
        t[i] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp);
    double med = t[reps / 2];
    char lay[160] = "none fits";
    if (r->n)
        dp_layout_format_model(&r->top[0].layout, &m, lay, sizeof lay);
    printf("%-12s on %5d x %-14s gbs %5lld: %10lld layouts evaluated (%lld fit) in %7.3f s "
           "median of %d = %6.2f M layouts/s; best %s (%.3f s/step)\n",
           m.name, dp_cluster_gpus(&cl), cl.gpu.name, (long long)gbs, r->evaluated, r->fitting, med,
           reps, (double)r->evaluated / med / 1e6, lay, r->n ? r->top[0].cost.step_time_s : 0);
    free(r);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    if (reps < 1 || reps > 16)
        reps = 3;
    /* GPT-3 175B on 1,536 A100s (Narayanan et al.'s setting, batch 1536 sequences). */
    int rc = run("gpt3-175b", "dgx-a100-80gb", 192, 1536, reps);
    /* Llama 3 405B on 16,384 H100s (2,048 DGX H100 nodes), 16M-token batches. */
    rc |= run("llama3-405b", "dgx-h100", 2048, 2048, reps);
    return rc;
}
