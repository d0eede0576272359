/*
 * preflight: the pre-launch checklist of `dplan check` (issue 16 item 3).
 * Each item is PASS, WARN or FAIL with one line of detail: the same driver
 * and CUDA on every rank, the collective bandwidth of each parallel group
 * against what the plan expects of its link, the launcher's rank variables,
 * loss scaling for fp16, the checkpoint directory and interval, the memory
 * headroom per stage and this node's topology against the plan's links.
 *
 * (The module is not called check/ because tests/unit/check.h is the test
 * assertions header.) The item functions are pure where they can be: they
 * take what was measured or found (environment strings, free bytes, a
 * topology, gathered versions) so that each verdict is tested with faked
 * inputs; the gatherers (NVML and cudart through dlopen, statvfs, MPI) are
 * separate. Nothing here prints or exits: cli/cmd_check.c does. Depends on
 * core, costmodel, topology and fit (for the calibration profile).
 */
#ifndef DPLAN_PREFLIGHT_H
#define DPLAN_PREFLIGHT_H

#include "core/core.h"
#include "costmodel/costmodel.h"
#include "fit/fit.h"
#include "topology/topology.h"

#include <stdbool.h>
#include <stdint.h>

enum dp_pf_status { DP_PF_PASS = 0, DP_PF_WARN = 1, DP_PF_FAIL = 2 };
/* "PASS", "WARN", "FAIL". */
const char *dp_pf_status_name(enum dp_pf_status s);

struct dp_pf_item {
    char id[24]; /* "versions", "busbw.tp", "env", "loss_scale", "ckpt_dir", ... */
    enum dp_pf_status status;
    char detail[640]; /* one line */
};

#define DP_PF_MAX_ITEMS 16
struct dp_pf_report {
    int n;
    struct dp_pf_item item[DP_PF_MAX_ITEMS];
};
/* Append an item (ignored past DP_PF_MAX_ITEMS); returns it. */
struct dp_pf_item *dp_pf_add(struct dp_pf_report *r, const char *id, enum dp_pf_status s,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The worst status of the items: the overall verdict (PASS for an empty report). */
enum dp_pf_status dp_pf_verdict(const struct dp_pf_report *r);

/* ------------------------------------------------------------------ versions */

/* What one rank runs. Strings are "" and numbers 0 when not found. */
struct dp_pf_versions {
    char host[64];
    char driver[80]; /* NVML's nvmlSystemGetDriverVersion, "550.54.15" */
    int cuda_driver; /* nvmlSystemGetCudaDriverVersion: the CUDA the driver supports, 12040 */
    int cudart;      /* cudaRuntimeGetVersion of the libcudart found, 12040; 0 = none */
    char note[128];  /* why something is missing ("libnvidia-ml.so.1 not found") */
};
/*
 * This process's versions: NVML from $DPLAN_NVML_LIB or libnvidia-ml.so.1,
 * the CUDA runtime from $DPLAN_CUDART_LIB or libcudart.so (then .so.12,
 * .so.11.0), both with dlopen, so that the build needs no GPU. Never fails:
 * what is absent stays empty and out->note says why.
 */
void dp_pf_versions_local(struct dp_pf_versions *out);
/* The item: PASS when every rank has the same driver, CUDA driver version and
 * runtime; FAIL naming the first rank that differs from rank 0; WARN when no
 * rank has a driver (no GPU: skipped). */
void dp_pf_check_versions(const struct dp_pf_versions *ranks, int n, struct dp_pf_report *r);

/* ------------------------------------------------------------------ collective bandwidth */

/*
 * Thresholds on measured / expected bus bandwidth (see dp_pf_busbw_status in
 * items.c for why): at least DP_PF_BUSBW_WARN passes, at least
 * DP_PF_BUSBW_FAIL warns, less fails.
 */
#define DP_PF_BUSBW_WARN 0.70
#define DP_PF_BUSBW_FAIL 0.40
enum dp_pf_status dp_pf_busbw_status(double measured_gbps, double expected_gbps);

/* The all-reduce sizes measured, bytes (nccl-tests' -b/-e range, a few points). */
#define DP_PF_BUSBW_SIZES 3
extern const int64_t dp_pf_busbw_sizes[DP_PF_BUSBW_SIZES];

/* One group kind's measurement: the slowest group of that kind, per size. */
struct dp_pf_busbw {
    enum dp_place_kind kind;
    int ranks;                            /* group size */
    double seconds[DP_PF_BUSBW_SIZES];    /* slowest group, slowest rank, per call */
    double busbw_gbps[DP_PF_BUSBW_SIZES]; /* nccl-tests busbw of those times */
};
/*
 * What the plan expects of the group's link: the calibration profile's
 * all_reduce busbw for the link name of the group's path (or "intra"/"inter"
 * by where the group lies) when `cal` is not NULL and has one, else the cost
 * model's path (dp_place_path: link bandwidth x efficiency). `from` says which.
 */
double dp_pf_busbw_expected(const struct dp_cluster *cl, const struct dp_layout *l,
                            enum dp_place_kind k, const struct dp_calibration *cal, char *from,
                            size_t cap);
/* The item "busbw.<group>": the largest size's busbw against the expectation. */
void dp_pf_check_busbw(const struct dp_pf_busbw *b, double expected_gbps, const char *from,
                       struct dp_pf_report *r);

/* ------------------------------------------------------------------ rank environment */

/*
 * The launcher variables of `envp` (NULL-terminated "KEY=VALUE" strings, like
 * environ): OpenMPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE), Slurm
 * (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) and torchrun (RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE). node_gpus: GPUs this process may
 * use (CUDA_VISIBLE_DEVICES applied), < 0 when unknown, 0 when there are
 * none; plan_gpus: the plan's GPU count; plan_per_node: its GPUs per node (the
 * local world size must equal it). Slurm's variables count only with a step id
 * (SLURM_STEP_ID or SLURM_STEPID: a task of srun, not the batch script). Adds
 * item "env".
 */
void dp_pf_check_env(const char *const *envp, int node_gpus, int plan_gpus, int plan_per_node,
                     struct dp_pf_report *r);
/* GPUs visible to this process: found_gpus, limited by CUDA_VISIBLE_DEVICES in envp. */
int dp_pf_visible_gpus(const char *const *envp, int found_gpus);

/* ------------------------------------------------------------------ loss scaling */

enum dp_pf_loss_scale {
    DP_PF_LS_UNSET = 0, /* not said */
    DP_PF_LS_NONE,      /* off */
    DP_PF_LS_DYNAMIC,   /* dynamic (Megatron's default for --fp16, torch GradScaler) */
    DP_PF_LS_STATIC,    /* a fixed factor */
};
/* Item "loss_scale" for the plan's precision. */
void dp_pf_check_loss_scale(enum dp_precision p, enum dp_pf_loss_scale ls, double static_scale,
                            struct dp_pf_report *r);

/* ------------------------------------------------------------------ checkpoints */

/*
 * Can `dir` take checkpoints: it, or (when it does not exist yet) the nearest
 * existing directory above it, must be a directory in which a file can be
 * created (a temporary file is made and removed). Fills *free_bytes from
 * statvfs (f_bavail x f_frsize) and *probed with the directory tried.
 * Returns 0, or -1 with why[] saying what failed.
 */
int dp_pf_probe_dir(const char *dir, int64_t *free_bytes, char *probed, size_t probed_cap,
                    char *why, size_t why_cap);
/* Item "ckpt_dir": dir NULL = not given (WARN). Room: FAIL below what this node
 * writes (node_bytes), WARN below the whole checkpoint (total_bytes), else PASS. */
void dp_pf_check_ckpt_dir(const char *dir, const struct dp_ckpt_size *size, struct dp_pf_report *r);
/* The pure part of the room test, for the tests. */
enum dp_pf_status dp_pf_ckpt_room(int64_t free_bytes, const struct dp_ckpt_size *size);

/* At most this many seconds between checkpoints (the seed's checklist: "at least every 2 hours").
 */
#define DP_PF_CKPT_MAX_S 7200.0
/*
 * Item "ckpt_every": every_steps (0 = not given: WARN) at step_time_s against
 * the 2-hour limit (FAIL above) and the goodput-optimal interval of f
 * (dp_ckpt_every_check: WARN when outside [1/2, 2] x the best).
 */
void dp_pf_check_ckpt_every(int64_t every_steps, double step_time_s,
                            const struct dp_failure_model *f, struct dp_pf_report *r);

/* ------------------------------------------------------------------ memory, topology */

/* Item "memory": FAIL when a stage does not fit, WARN when it leaves less than `margin` of
 * the usable capacity free (the planner's memory margin, costmodel.h
 * DP_MEM_TIGHT_FRACTION by default). */
void dp_pf_check_memory(const struct dp_mem_report *rep, double margin, struct dp_pf_report *r);
/*
 * Item "topology": this node (t) against the plan: at least gpus_per_node
 * GPUs, and where the plan puts a TP group inside a node on NVLink (its
 * path's link is NVLink), every aligned group of tp GPUs of the node joined
 * by NVLink (dp_topo_group_link) at no less than 70% of the plan's rate.
 * WARN with "no GPUs found" when t has none.
 */
void dp_pf_check_topology(const struct dp_topo *t, const struct dp_cluster *cl,
                          const struct dp_layout *l, struct dp_pf_report *r);

/* ------------------------------------------------------------------ MPI */

/*
 * Under a launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set), check
 * runs on every rank: dp_pf_mpi_init starts MPI and returns this rank and
 * the world size; otherwise (or in a build without MPI) it returns 1 rank
 * without starting anything (also when $DPLAN_CHECK_NO_MPI is 1: test-only, for
 * faked launcher variables). The other calls are no-ops with one rank.
 */
struct dp_pf_mpi {
    bool active;
    int rank, size;
};
int dp_pf_mpi_init(struct dp_pf_mpi *m, struct dp_err *err);
void dp_pf_mpi_finalize(struct dp_pf_mpi *m);
/* Every rank's versions, in rank order, into all[0..size) (rank 0's use them). */
int dp_pf_mpi_gather_versions(const struct dp_pf_mpi *m, const struct dp_pf_versions *mine,
                              struct dp_pf_versions *all, struct dp_err *err);
/*
 * The worst of every rank's item (the first rank with it), into *it on rank 0,
 * its detail prefixed with "rank R (host): " when ranks disagree.
 */
int dp_pf_mpi_worst(const struct dp_pf_mpi *m, const char *host, struct dp_pf_item *it,
                    struct dp_err *err);
/*
 * Time MPI_Allreduce (float sum) over every group of kind k of layout l at
 * once, as training runs them, the world being l's ranks (m->size must equal
 * them): per size a warm-up call, then `iters` timed ones; the time of a size
 * is the slowest rank's mean, busbw = bytes / time x 2 (n - 1) / n
 * (nccl-tests doc/PERFORMANCE.md). Collective over the world.
 */
int dp_pf_mpi_busbw(const struct dp_pf_mpi *m, const struct dp_layout *l, enum dp_place_kind k,
                    int iters, struct dp_pf_busbw *out, struct dp_err *err);
/* Broadcast rank 0's int (the exit status) to all ranks. */
int dp_pf_mpi_bcast_int(const struct dp_pf_mpi *m, int *v);
/*
 * For `dplan calibrate`: collective k over all ranks on a buffer of `bytes` as
 * nccl-tests sizes it (the whole buffer; all-gather's and all-to-all's per-rank share
 * is bytes / ranks; send/recv passes bytes to the next rank of a ring), 3 warm-ups,
 * then the 20th percentile of `iters` each timed from a barrier (noise only adds time),
 * the slowest rank's. Collective: every rank
 * calls it.
 */
/*
 * For `dplan calibrate`: ranks in lock step. Every rank runs `iters` rounds of a segment of
 * work (`passes` streaming passes y = a x + b y over 2 x 256 KiB, its cache) followed by an
 * all-reduce of one double: *seg_s gets the segment's mean time, *wait_s the all-reduce's
 * mean time beyond what it takes when the ranks arrive together (its median from a
 * barrier), both averaged over the ranks: what each rank waits, on average, for the
 * slowest of its group when all do the same work on a shared machine. Up to `iters`
 * rounds, fewer once a rank has spent budget_s seconds in them (0: no limit; at least one).
 * Collective.
 */
int dp_pf_mpi_bench_lockstep(const struct dp_pf_mpi *m, int passes, int iters, double budget_s,
                             double *seg_s, double *wait_s, struct dp_err *err);
int dp_pf_mpi_bench_coll(const struct dp_pf_mpi *m, enum dp_nccl_coll k, int64_t bytes, int iters,
                         double *seconds, struct dp_err *err);

#endif
