/*
 * dplan check [plan.json | MODEL <cluster> <knobs>] [--json]: the pre-launch
 * checklist, PASS/WARN/FAIL per item and the verdict first. The items are
 * judged in preflight/; this file parses, gathers what the items need (the
 * plan, this node's topology, the environment) and prints. Under mpirun or
 * srun every rank runs it and rank 0 prints.
 */
#include "cli.h"
#include "goodput_report.h"
#include "preflight/preflight.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const char help_text[] =
    "usage: dplan check plan.json [options] [--json]\n"
    "       dplan check MODEL <cluster> [knobs] [options] [--json]\n\n"
    "The pre-launch checklist: each item PASS, WARN or FAIL with one line of detail, the\n"
    "overall verdict (the worst item) first. Run it the way the job starts (`mpirun -np N\n"
    "dplan check plan.json`, `srun dplan check ...`): then every rank checks itself and rank 0\n"
    "prints the worst rank of each item; run alone it checks this process only.\n\n"
    "Items:\n"
    "  versions     the NVIDIA driver, the CUDA version it supports and the CUDA runtime are\n"
    "               the same on every rank (NVML and libcudart, loaded with dlopen, gathered\n"
    "               over MPI). WARN \"no GPU: skipped\" when no rank has a driver.\n"
    "  busbw.<g>    for each parallel group g (tp, cp, dp) of more than one rank, an MPI\n"
    "               all-reduce of 1, 8 and 64 MiB over all groups at once, nccl-tests style:\n"
    "               busbw = bytes / time x 2(n-1)/n (nccl-tests doc/PERFORMANCE.md), the\n"
    "               slowest group's, against what the plan expects of the group's link (the\n"
    "               --calibration profile's all_reduce busbw for that link, else the link's\n"
    "               bandwidth x efficiency). PASS at >= 70% of it, WARN at >= 40%, FAIL below:\n"
    "               below 70% the plan's communication times are off by over 40% (a\n"
    "               misconfiguration such as GPUDirect RDMA off); below 40% the traffic takes\n"
    "               another path (sockets instead of InfiniBand, PCIe instead of NVLink).\n"
    "               Host buffers: this is MPI's path, not NCCL's. WARN when not launched\n"
    "               with as many ranks as the plan has GPUs. Not measured: ep (all-to-all)\n"
    "               and pp (send/recv).\n"
    "  env          the launcher's variables are complete, consistent and match the plan:\n"
    "               torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), else OpenMPI\n"
    "               (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE), else Slurm\n"
    "               (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with srun's step id); OpenMPI\n"
    "               and Slurm must agree when both describe the same ranks; the world size\n"
    "               equals the plan's GPU count and the local world size its GPUs per node;\n"
    "               the local rank is below this node's GPU count (CUDA_VISIBLE_DEVICES\n"
    "               applied). WARN when no launcher variable is set.\n"
    "  loss_scale   fp16 plans scale the loss (--loss-scale): FAIL with none, WARN when not\n"
    "               said; bf16 and fp32 need none.\n"
    "  ckpt_dir     --ckpt-dir (or the directory above it that will hold it) accepts a new\n"
    "               file, and statvfs shows room for the checkpoint: FAIL below what this node\n"
    "               writes, WARN below the whole checkpoint (weights and optimizer states,\n"
    "               each tensor once). WARN when not given.\n"
    "  ckpt_every   --ckpt-every N steps at the predicted step time: FAIL over 2 hours; WARN\n"
    "               when outside 1/2..2x the goodput-optimal interval (Young 1974, Daly\n"
    "               2006; the failure options below) or when not given.\n"
    "  memory       the predicted peak of every pipeline stage against the GPU's usable\n"
    "               memory: FAIL when a stage does not fit, WARN under 5% headroom\n"
    "               (--memory-margin PCT, the planner's margin).\n"
    "  topology     this node (hwloc, NVML; or --topology FILE) has the plan's GPUs per node,\n"
    "               and where the plan puts TP on NVLink each TP group of the node is joined\n"
    "               by NVLink at >= 70% of the plan's rate. WARN when no GPU is found.\n\n"
    "Options:\n"
    "  --plan FILE          the plan (also as the first argument)\n"
    "  --ckpt-dir DIR       where the job writes checkpoints\n"
    "  --ckpt-every N       steps between checkpoints\n"
    "  --loss-scale S       dynamic, none, or a static factor (> 0)\n"
    "  --calibration FILE   a `dplan calibrate` profile: its all_reduce busbw per link is\n"
    "                       the bandwidth expected\n"
    "  --topology FILE      judge an hwloc XML export (`lstopo --of xml`) instead of this node\n"
    "  --busbw-iters N      timed all-reduces per size [5]\n"
    "  --json               machine-readable: {\"verdict\", \"exit_code\", ..., \"items\": "
    "[...]}\n\n"
    "Exit status: 0 when no item FAILs (PASS or WARN), 1 when one does (or on errors, with\n"
    "one line on stderr), 2 on usage errors.\n\n";

enum {
    OPT_CK_DIR = 4000,
    OPT_CK_EVERY,
    OPT_LOSS_SCALE,
    OPT_TOPOLOGY,
    OPT_BUSBW_ITERS,
};

struct opts {
    const char *ckpt_dir, *calibration, *topology;
    long long ckpt_every;
    enum dp_pf_loss_scale ls;
    double ls_value;
    int iters;
};

static int parse_own(int ch, const char *arg, struct opts *o)
{
    char *end;
    errno = 0;
    switch (ch) {
    case OPT_CK_DIR: o->ckpt_dir = arg; return 0;
    case OPT_TOPOLOGY: o->topology = arg; return 0;
    case OPT_CK_EVERY:
        o->ckpt_every = strtoll(arg, &end, 10);
        if (end == arg || *end || errno || o->ckpt_every < 1 || o->ckpt_every > 100000000)
            return cli_usage_error("check", "--ckpt-every: expected steps in [1, 1e8], got \"%s\"",
                                   arg);
        return 0;
    case OPT_BUSBW_ITERS:
        o->iters = (int)strtol(arg, &end, 10);
        if (end == arg || *end || errno || o->iters < 1 || o->iters > 1000)
            return cli_usage_error("check", "--busbw-iters: expected 1..1000, got \"%s\"", arg);
        return 0;
    case OPT_LOSS_SCALE:
        if (strcmp(arg, "dynamic") == 0) {
            o->ls = DP_PF_LS_DYNAMIC;
            return 0;
        }
        if (strcmp(arg, "none") == 0) {
            o->ls = DP_PF_LS_NONE;
            return 0;
        }
        o->ls_value = strtod(arg, &end);
        if (end == arg || *end || errno || !(o->ls_value > 0) || o->ls_value > 1e30)
            return cli_usage_error(
                "check", "--loss-scale: expected dynamic, none or a factor > 0, got \"%s\"", arg);
        o->ls = DP_PF_LS_STATIC;
        return 0;
    }
    return 2;
}

/* The groups whose all-reduce is measured: those a step reduces over. */
static const enum dp_place_kind busbw_kinds[] = {DP_PLACE_TP, DP_PLACE_CP, DP_PLACE_DP};

static int measure_busbw(const struct dp_pf_mpi *mpi, const struct dp_cluster *cl,
                         const struct dp_layout *l, const struct dp_calibration *cal, int iters,
                         struct dp_pf_report *r, struct dp_err *err)
{
    int world = l->tp * l->pp * l->dp * l->cp, groups = 0;
    for (size_t i = 0; i < sizeof busbw_kinds / sizeof busbw_kinds[0]; i++) {
        int n;
        long stride;
        dp_place_shape(l, busbw_kinds[i], &n, &stride);
        groups += n > 1;
    }
    if (groups == 0) {
        dp_pf_add(r, "busbw", DP_PF_PASS, "no tp, cp or dp group of more than one rank");
        return 0;
    }
    if (!mpi->active || mpi->size != world) {
        if (mpi->rank == 0)
            dp_pf_add(r, "busbw", DP_PF_WARN,
                      "%s: not measured (run `mpirun -np %d dplan check ...` or srun with %d "
                      "tasks)",
                      mpi->active ? "ranks differ from the plan's GPUs" : "not launched", world,
                      world);
        return 0;
    }
    for (size_t i = 0; i < sizeof busbw_kinds / sizeof busbw_kinds[0]; i++) {
        int n;
        long stride;
        dp_place_shape(l, busbw_kinds[i], &n, &stride);
        if (n < 2)
            continue;
        struct dp_pf_busbw b;
        int rc = dp_pf_mpi_busbw(mpi, l, busbw_kinds[i], iters, &b, err);
        if (rc)
            return rc;
        char from[128];
        double want = dp_pf_busbw_expected(cl, l, busbw_kinds[i], cal, from, sizeof from);
        if (mpi->rank == 0)
            dp_pf_check_busbw(&b, want, from, r);
    }
    return 0;
}

static void print_text(const struct dp_pf_report *r, const struct dp_model *m,
                       const struct dp_cluster *cl, const struct dp_layout *l, double step_s,
                       int ranks)
{
    int count[3] = {0};
    for (int i = 0; i < r->n; i++)
        count[r->item[i].status]++;
    enum dp_pf_status v = dp_pf_verdict(r);
    printf("verdict: %s (%d FAIL, %d WARN, %d PASS)\n", dp_pf_status_name(v), count[DP_PF_FAIL],
           count[DP_PF_WARN], count[DP_PF_PASS]);
    printf("plan:    %s on %s (%d GPUs): tp %d, cp %d, pp %d, dp %d, %s; %.3g s per step "
           "predicted\n",
           m->name, cl->name, dp_cluster_gpus(cl), l->tp, l->cp, l->pp, l->dp,
           dp_precision_name(l->precision), step_s);
    printf("checked: %d rank%s\n\n", ranks, ranks > 1 ? "s" : "");
    for (int i = 0; i < r->n; i++)
        printf("%s  %-11s %s\n", dp_pf_status_name(r->item[i].status), r->item[i].id,
               r->item[i].detail);
}

static void print_json(const struct dp_pf_report *r, const struct dp_model *m,
                       const struct dp_cluster *cl, const struct dp_layout *l, double step_s,
                       int ranks)
{
    enum dp_pf_status v = dp_pf_verdict(r);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "verdict", dp_pf_status_name(v));
    cJSON_AddNumberToObject(o, "exit_code", v == DP_PF_FAIL ? 1 : 0);
    cJSON_AddStringToObject(o, "model", m->name);
    cJSON_AddStringToObject(o, "cluster", cl->name);
    cJSON_AddNumberToObject(o, "gpus", dp_cluster_gpus(cl));
    cJSON_AddItemToObject(o, "layout", dp_layout_to_json(l));
    cJSON_AddNumberToObject(o, "step_time_s", step_s);
    cJSON_AddNumberToObject(o, "ranks", ranks);
    cJSON *items = cJSON_AddArrayToObject(o, "items");
    for (int i = 0; i < r->n; i++) {
        cJSON *it = cJSON_CreateObject();
        cJSON_AddStringToObject(it, "id", r->item[i].id);
        cJSON_AddStringToObject(it, "status", dp_pf_status_name(r->item[i].status));
        cJSON_AddStringToObject(it, "detail", r->item[i].detail);
        cJSON_AddItemToArray(items, it);
    }
    cli_print_json(o);
}

/* The per-rank item just added, replaced on rank 0 by the worst rank's. */
static int worst_of_ranks(const struct dp_pf_mpi *mpi, const char *host, struct dp_pf_report *r,
                          struct dp_err *err)
{
    return r->n ? dp_pf_mpi_worst(mpi, host, &r->item[r->n - 1], err) : 0;
}

static int run_checks(const struct cli_common *c, const struct opts *o,
                      const struct cli_goodput_opts *go, const char *model_arg)
{
    struct dp_err err = {0};
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_layout l;
    struct cli_defaults d;
    if (cli_resolve(c, model_arg, &m, &cl, &l, &d, &err))
        return cli_fail(&err);
    struct dp_calibration *cal = NULL;
    struct dp_mem_report *rep = malloc(sizeof *rep);
    struct dp_pf_report *r = calloc(1, sizeof *r);
    struct dp_pf_versions *all = NULL;
    struct dp_topo topo;
    memset(&topo, 0, sizeof topo);
    struct dp_pf_mpi mpi = {0};
    int rc = 0, status = 0;
    if (!rep || !r) {
        rc = dp_err_set(&err, DP_ENOMEM, "out of memory");
        goto out;
    }
    if (o->calibration) {
        if (!(cal = malloc(sizeof *cal))) {
            rc = dp_err_set(&err, DP_ENOMEM, "out of memory");
            goto out;
        }
        if ((rc = dp_calibration_load(o->calibration, cal, &err)))
            goto out;
    }
    struct dp_mem_opts mo;
    cli_mem_opts(c, &mo);
    struct dp_step_cost sc;
    if ((rc = dp_time_step(&m, &cl, &l, &sc, &err)) ||
        (rc = dp_mem_estimate(&m, &cl, &l, &mo, rep, &err)))
        goto out;
    struct cli_goodput g;
    if ((rc = cli_goodput_eval(go, &m, &cl, &l, sc.step_time_s, &g, &err)))
        goto out;
    if (o->topology ? (rc = dp_topo_load_xml(o->topology, &topo, &err))
                    : (rc = dp_topo_discover(&topo, &err)))
        goto out;
    if ((rc = dp_pf_mpi_init(&mpi, &err)))
        goto out;

    /* Every rank runs every step below in the same order: the gathers are collective. */
    struct dp_pf_versions mine;
    dp_pf_versions_local(&mine);
    if (!(all = calloc((size_t)mpi.size, sizeof *all))) {
        rc = dp_err_set(&err, DP_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = dp_pf_mpi_gather_versions(&mpi, &mine, all, &err)))
        goto out;
    if (mpi.rank == 0)
        dp_pf_check_versions(all, mpi.size, r);
    if ((rc = measure_busbw(&mpi, &cl, &l, cal, o->iters, r, &err)))
        goto out;
    const char *const *envp = (const char *const *)environ;
    int gpus = dp_pf_visible_gpus(envp, topo.ngpus);
    dp_pf_check_env(
        envp, gpus, dp_cluster_gpus(&cl),
        cl.gpus_per_node < dp_cluster_gpus(&cl) ? cl.gpus_per_node : dp_cluster_gpus(&cl), r);
    if ((rc = worst_of_ranks(&mpi, mine.host, r, &err)))
        goto out;
    dp_pf_check_loss_scale(l.precision, o->ls, o->ls_value, r);
    dp_pf_check_ckpt_dir(o->ckpt_dir, &g.size, r);
    if ((rc = worst_of_ranks(&mpi, mine.host, r, &err)))
        goto out;
    dp_pf_check_ckpt_every(o->ckpt_every, sc.step_time_s, &g.f, r);
    dp_pf_check_memory(rep, cli_memory_margin(c), r);
    dp_pf_check_topology(&topo, &cl, &l, r);
    if ((rc = worst_of_ranks(&mpi, mine.host, r, &err)))
        goto out;

    status = dp_pf_verdict(r) == DP_PF_FAIL ? 1 : 0;
    if (mpi.rank == 0) {
        if (c->json)
            print_json(r, &m, &cl, &l, sc.step_time_s, mpi.size);
        else
            print_text(r, &m, &cl, &l, sc.step_time_s, mpi.size);
        fflush(stdout);
        if (status) {
            /* One line on stderr, as for every non-zero exit: which items failed. */
            fprintf(stderr, "dplan check: FAIL:");
            for (int i = 0; i < r->n; i++)
                if (r->item[i].status == DP_PF_FAIL)
                    fprintf(stderr, " %s", r->item[i].id);
            fprintf(stderr, "\n");
        }
    }
    dp_pf_mpi_bcast_int(&mpi, &status);
out:
    dp_pf_mpi_finalize(&mpi);
    dp_topo_release(&topo);
    free(all);
    free(cal);
    free(r);
    free(rep);
    return rc ? cli_fail(&err) : status;
}

int cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {CLI_CLUSTER_OPTIONS,
                                         CLI_PLAN_OPTION,
                                         CLI_KNOB_OPTIONS,
                                         CLI_GOODPUT_OPTIONS,
                                         {"ckpt-dir", required_argument, 0, OPT_CK_DIR},
                                         {"ckpt-every", required_argument, 0, OPT_CK_EVERY},
                                         {"loss-scale", required_argument, 0, OPT_LOSS_SCALE},
                                         {"topology", required_argument, 0, OPT_TOPOLOGY},
                                         {"busbw-iters", required_argument, 0, OPT_BUSBW_ITERS},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    struct cli_goodput_opts go;
    cli_goodput_opts_init(&go);
    struct opts o = {.iters = 5};
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("check", argc, argv, ":h", opts, &c)) != -1) {
        if (ch == 'h') {
            printf("%s%s\n%s\n%s", help_text, cli_cluster_help, cli_plan_knob_help,
                   cli_goodput_help);
            return 0;
        }
        int g = cli_goodput_opt("check", ch, optarg, &go);
        if (g == 1)
            continue;
        if (g < 0 || ch < 0)
            return 2;
        if (parse_own(ch, optarg, &o))
            return 2;
    }
    /* check compares the plan's links with the profile's measurements: the profile is not
     * its cluster (the shared option's meaning elsewhere). */
    o.calibration = c.calibration;
    c.calibration = NULL;
    if (argc - optind > 1 || (optind == argc && !c.plan))
        return cli_usage_error("check", "expected plan.json or one MODEL argument (or --plan "
                                        "FILE)");
    const char *model_arg = optind < argc ? argv[optind] : NULL;
    if (model_arg && !c.plan && cli_is_plan_file(model_arg)) {
        c.plan = model_arg;
        model_arg = NULL;
    }
    return run_checks(&c, &o, &go, model_arg);
}
