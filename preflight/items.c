/*
 * The checklist items that judge the job itself: the report, versions
 * gathered from all ranks, collective bandwidth against the plan's links,
 * the launcher's rank variables and fp16 loss scaling. Pure: the inputs are
 * what versions.c, mpi.c and the CLI found. The node's own items
 * (checkpoints, memory, topology) are in node.c.
 */
#include "preflight.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dp_pf_status_name(enum dp_pf_status s)
{
    return s == DP_PF_PASS ? "PASS" : s == DP_PF_WARN ? "WARN" : "FAIL";
}

struct dp_pf_item *dp_pf_add(struct dp_pf_report *r, const char *id, enum dp_pf_status s,
                             const char *fmt, ...)
{
    static struct dp_pf_item spill; /* past the end: written, never reported */
    struct dp_pf_item *it = r->n < DP_PF_MAX_ITEMS ? &r->item[r->n++] : &spill;
    snprintf(it->id, sizeof it->id, "%s", id);
    it->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->detail, sizeof it->detail, fmt, ap);
    va_end(ap);
    return it;
}

enum dp_pf_status dp_pf_verdict(const struct dp_pf_report *r)
{
    enum dp_pf_status v = DP_PF_PASS;
    for (int i = 0; i < r->n; i++)
        if (r->item[i].status > v)
            v = r->item[i].status;
    return v;
}

/* ------------------------------------------------------------------ versions */

/* 12040 -> "12.4" (CUDA encodes 1000 x major + 10 x minor). */
static const char *cuda_str(int v, char *buf, size_t cap)
{
    if (v <= 0)
        snprintf(buf, cap, "none");
    else
        snprintf(buf, cap, "%d.%d", v / 1000, (v % 1000) / 10);
    return buf;
}

static void versions_str(const struct dp_pf_versions *v, char *buf, size_t cap)
{
    char a[16], b[16];
    snprintf(buf, cap, "driver %s, CUDA %s, runtime %s", v->driver[0] ? v->driver : "none",
             cuda_str(v->cuda_driver, a, sizeof a), cuda_str(v->cudart, b, sizeof b));
}

void dp_pf_check_versions(const struct dp_pf_versions *ranks, int n, struct dp_pf_report *r)
{
    int with = 0;
    for (int i = 0; i < n; i++)
        with += ranks[i].driver[0] != 0;
    if (with == 0) {
        dp_pf_add(r, "versions", DP_PF_WARN, "no GPU: skipped (%s%s)",
                  ranks[0].note[0] ? ranks[0].note : "no NVIDIA driver",
                  n > 1 ? ", on every rank" : "");
        return;
    }
    char v0[160], vi[160];
    versions_str(&ranks[0], v0, sizeof v0);
    for (int i = 1; i < n; i++) {
        const struct dp_pf_versions *x = &ranks[i];
        if (strcmp(x->driver, ranks[0].driver) || x->cuda_driver != ranks[0].cuda_driver ||
            x->cudart != ranks[0].cudart) {
            versions_str(x, vi, sizeof vi);
            dp_pf_add(r, "versions", DP_PF_FAIL, "rank %d (%s): %s; rank 0 (%s): %s", i,
                      x->host[0] ? x->host : "?", vi, ranks[0].host[0] ? ranks[0].host : "?", v0);
            return;
        }
    }
    dp_pf_add(r, "versions", DP_PF_PASS, "%s on %s", v0,
              n > 1 ? "every rank"
                    : "this rank (one process: run it under the launcher to "
                      "compare ranks)");
}

/* ------------------------------------------------------------------ collective bandwidth */

/* nccl-tests' -b 1M -e 64M -f 8 would give 1, 8, 64 MiB; the smallest size is latency-bound,
 * the largest where a healthy link reaches its bus bandwidth (NCCL reaches its plateau from
 * a few tens of MiB on NVLink and InfiniBand). */
const int64_t dp_pf_busbw_sizes[DP_PF_BUSBW_SIZES] = {1 << 20, 8 << 20, 64 << 20};

/*
 * The expectation already carries the link's efficiency (the busbw nccl-tests
 * reaches on a healthy link: dp_link.efficiency), so the ratio asks "is this
 * link as good as the plan assumes". 70%: below it the communication terms
 * of the step are mispredicted by more than 40% (1 / 0.7), the size of a
 * misconfiguration such as GPUDirect RDMA off (traffic staged through host
 * memory) or PCIe ACS forcing peer traffic through the root complex; still a
 * working path, hence WARN. 40%: below it the traffic is on another path
 * altogether (NCCL's socket transport instead of InfiniBand, PCIe where
 * NVLink was planned, a rail's NIC down), a factor of 2.5 or more, hence
 * FAIL. The two numbers are judgment, not a published rule.
 */
enum dp_pf_status dp_pf_busbw_status(double measured_gbps, double expected_gbps)
{
    if (!(expected_gbps > 0))
        return DP_PF_WARN;
    double ratio = measured_gbps / expected_gbps;
    return ratio >= DP_PF_BUSBW_WARN   ? DP_PF_PASS
           : ratio >= DP_PF_BUSBW_FAIL ? DP_PF_WARN
                                       : DP_PF_FAIL;
}

static const char *kind_name(enum dp_place_kind k)
{
    switch (k) {
    case DP_PLACE_TP: return "tp";
    case DP_PLACE_CP: return "cp";
    case DP_PLACE_DP: return "dp";
    case DP_PLACE_DPCP: return "dpcp";
    case DP_PLACE_ETP: return "etp";
    case DP_PLACE_EP: return "ep";
    case DP_PLACE_EDP: return "edp";
    case DP_PLACE_PP: return "pp";
    default: return "group";
    }
}

double dp_pf_busbw_expected(const struct dp_cluster *cl, const struct dp_layout *l,
                            enum dp_place_kind k, const struct dp_calibration *cal, char *from,
                            size_t cap)
{
    int n;
    long stride;
    dp_place_shape(l, k, &n, &stride);
    /* The group's all-reduce path: dp_group_path, as the cost model times TP and DP
     * (a CP group is timed as a ring there; its all-reduce is what is measured here). */
    struct dp_path p;
    dp_group_path(cl, n, stride, &p);
    if (cal) {
        const char *where = p.inter_node ? "inter" : "intra";
        for (int i = 0; i < cal->ncoll; i++) {
            const struct dp_cal_coll *c = &cal->coll[i];
            if (c->coll != DP_NCCL_ALL_REDUCE)
                continue;
            if (strcmp(c->link, p.link) == 0 || strcmp(c->link, where) == 0) {
                snprintf(from, cap, "the calibration's all_reduce on %s", c->link);
                return c->busbw_gbps;
            }
        }
    }
    snprintf(from, cap, "the plan's %s", p.link[0] ? p.link : p.inter_node ? "network" : "link");
    return p.busbw_gbps;
}

void dp_pf_check_busbw(const struct dp_pf_busbw *b, double expected_gbps, const char *from,
                       struct dp_pf_report *r)
{
    char id[24];
    snprintf(id, sizeof id, "busbw.%s", kind_name(b->kind));
    const int last = DP_PF_BUSBW_SIZES - 1;
    double got = b->busbw_gbps[last];
    enum dp_pf_status s = dp_pf_busbw_status(got, expected_gbps);
    char sizes[128] = "";
    size_t o = 0;
    for (int i = 0; i < DP_PF_BUSBW_SIZES && o < sizeof sizes; i++)
        o += (size_t)snprintf(sizes + o, sizeof sizes - o, "%s%lld MiB %.3g", i ? ", " : "",
                              (long long)(dp_pf_busbw_sizes[i] >> 20), b->busbw_gbps[i]);
    dp_pf_add(r, id, s,
              "all-reduce over %d ranks: busbw %.3g GB/s at %lld MiB, %.3g%% of %.4g GB/s "
              "expected from %s (busbw GB/s by size: %s)",
              b->ranks, got, (long long)(dp_pf_busbw_sizes[last] >> 20),
              expected_gbps > 0 ? 100.0 * got / expected_gbps : 0.0, expected_gbps, from, sizes);
}

/* ------------------------------------------------------------------ rank environment */

static const char *env_get(const char *const *envp, const char *key)
{
    size_t n = strlen(key);
    for (; envp && *envp; envp++)
        if (strncmp(*envp, key, n) == 0 && (*envp)[n] == '=')
            return *envp + n + 1;
    return NULL;
}

int dp_pf_visible_gpus(const char *const *envp, int found_gpus)
{
    const char *v = env_get(envp, "CUDA_VISIBLE_DEVICES");
    if (!v)
        return found_gpus;
    /* CUDA stops at the first invalid entry; "" and "-1" hide every GPU. */
    int n = 0;
    for (const char *s = v; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 0 || s[0] == '-')
            break;
        n++;
        s += len + (e ? 1 : 0);
    }
    return found_gpus >= 0 && found_gpus < n ? found_gpus : n;
}

struct launcher {
    const char *name;
    const char *key[4]; /* rank, size, local rank, local size (may be NULL) */
};
/* The order says whose variables the training process reads: torchrun's RANK & co. are
 * what torch.distributed's env:// init reads (torch/distributed/rendezvous.py); under
 * mpirun, OpenMPI's; under srun alone, Slurm's. */
static const struct launcher launchers[] = {
    {"torchrun", {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}},
    {"OpenMPI",
     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE"}},
    {"Slurm", {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL}},
};
enum { NL = sizeof launchers / sizeof launchers[0] };

struct found {
    bool present;
    long v[4]; /* -1 = unset */
};

/* Accumulates the worst status and its reasons, "; "-separated. */
struct acc {
    enum dp_pf_status s;
    char text[600];
    size_t o;
};
static void say(struct acc *a, enum dp_pf_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(struct acc *a, enum dp_pf_status s, const char *fmt, ...)
{
    if (s > a->s)
        a->s = s;
    if (a->o >= sizeof a->text - 1)
        return;
    if (a->o)
        a->o += (size_t)snprintf(a->text + a->o, sizeof a->text - a->o, "; ");
    va_list ap;
    va_start(ap, fmt);
    if (a->o < sizeof a->text)
        a->o += (size_t)vsnprintf(a->text + a->o, sizeof a->text - a->o, fmt, ap);
    va_end(ap);
    if (a->o > sizeof a->text - 1)
        a->o = sizeof a->text - 1;
}

static bool parse_count(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < 0 || v > INT_MAX)
        return false;
    *out = v;
    return true;
}

void dp_pf_check_env(const char *const *envp, int node_gpus, int plan_gpus, int plan_per_node,
                     struct dp_pf_report *r)
{
    struct acc a = {0};
    struct found f[NL];
    int eff = -1;
    bool batch_script = false;
    for (int i = 0; i < NL; i++) {
        f[i].present = false;
        /* A batch script has SLURM_PROCID 0 and the allocation's SLURM_NTASKS but is no
         * task: only srun sets a step id (as executor/env.c decides). */
        if (i == 2 && !env_get(envp, "SLURM_STEP_ID") && !env_get(envp, "SLURM_STEPID")) {
            batch_script = env_get(envp, "SLURM_PROCID") || env_get(envp, "SLURM_NTASKS");
            for (int k = 0; k < 4; k++)
                f[i].v[k] = -1;
            continue;
        }
        for (int k = 0; k < 4; k++) {
            f[i].v[k] = -1;
            const char *key = launchers[i].key[k];
            const char *val = key ? env_get(envp, key) : NULL;
            if (!val)
                continue;
            f[i].present = true;
            if (!parse_count(val, &f[i].v[k]))
                say(&a, DP_PF_FAIL, "%s=\"%s\": expected an integer >= 0", key, val);
        }
        if (!f[i].present)
            continue;
        for (int k = 0; k < 3; k++)
            if (!env_get(envp, launchers[i].key[k]))
                say(&a, DP_PF_FAIL, "%s not set (other %s variables are)", launchers[i].key[k],
                    launchers[i].name);
        const long *v = f[i].v;
        if (v[0] >= 0 && v[1] >= 0 && v[0] >= v[1])
            say(&a, DP_PF_FAIL, "%s %ld is not below %s %ld", launchers[i].key[0], v[0],
                launchers[i].key[1], v[1]);
        if (v[2] >= 0 && v[3] >= 0 && v[2] >= v[3])
            say(&a, DP_PF_FAIL, "%s %ld is not below %s %ld", launchers[i].key[2], v[2],
                launchers[i].key[3], v[3]);
        if (eff < 0)
            eff = i;
    }
    if (eff < 0 && batch_script) {
        dp_pf_add(r, "env", DP_PF_WARN,
                  "Slurm variables without a step id: this is the batch script, not a task; run "
                  "`srun dplan check ...` as the job's ranks start");
        return;
    }
    if (eff < 0) {
        dp_pf_add(r, "env", DP_PF_WARN,
                  "no launcher variables (OMPI_COMM_WORLD_*, SLURM_PROCID/SLURM_NTASKS/"
                  "SLURM_LOCALID, RANK/LOCAL_RANK/WORLD_SIZE): run `dplan check` the way the "
                  "job starts (mpirun, srun or torchrun) to check them");
        return;
    }
    const struct launcher *L = &launchers[eff];
    const long *v = f[eff].v;
    /* OpenMPI started by srun (--mpi=pmix) has both sets for the same processes: they must
     * agree. mpirun inside an allocation differs from the allocation's SLURM_NTASKS: then
     * Slurm's variables describe the batch step, not these ranks. torchrun's agents are
     * what Slurm or MPI started, so under torchrun the others are not compared. */
    if (eff == 1 && f[2].present && f[2].v[1] == v[1]) {
        if (f[2].v[0] != v[0])
            say(&a, DP_PF_FAIL, "SLURM_PROCID %ld differs from OMPI_COMM_WORLD_RANK %ld", f[2].v[0],
                v[0]);
        if (f[2].v[2] >= 0 && v[2] >= 0 && f[2].v[2] != v[2])
            say(&a, DP_PF_FAIL, "SLURM_LOCALID %ld differs from OMPI_COMM_WORLD_LOCAL_RANK %ld",
                f[2].v[2], v[2]);
    }
    if (v[1] >= 0 && v[1] != plan_gpus)
        say(&a, DP_PF_FAIL, "%s %ld but the plan has %d GPUs", L->key[1], v[1], plan_gpus);
    /* The plan places its groups on nodes of plan_per_node consecutive ranks: another
     * number of ranks per node moves TP groups off NVLink, or wastes GPUs. */
    if (v[3] >= 0 && plan_per_node > 0 && v[3] != plan_per_node)
        say(&a, DP_PF_FAIL, "%s %ld but the plan has %d GPUs per node", L->key[3], v[3],
            plan_per_node);
    if (node_gpus > 0) {
        if (v[2] >= node_gpus)
            say(&a, DP_PF_FAIL, "%s %ld but this node has %d GPUs (0..%d)", L->key[2], v[2],
                node_gpus, node_gpus - 1);
        if (v[3] > node_gpus)
            say(&a, DP_PF_FAIL, "%s %ld processes share this node's %d GPUs", L->key[3], v[3],
                node_gpus);
    }
    if (a.s == DP_PF_PASS) {
        char gpus[64];
        if (node_gpus > 0)
            snprintf(gpus, sizeof gpus, "within this node's %d GPUs", node_gpus);
        else
            snprintf(gpus, sizeof gpus, "(no GPU visible here: not checked against a count)");
        say(&a, DP_PF_PASS, "%s: %s %ld of %s %ld = the plan's GPUs, %s %ld %s", L->name, L->key[0],
            v[0], L->key[1], v[1], L->key[2], v[2], gpus);
    } else {
        /* Name the launcher whose variables were judged. */
        char tmp[sizeof a.text];
        snprintf(tmp, sizeof tmp, "%s: %s", L->name, a.text);
        snprintf(a.text, sizeof a.text, "%s", tmp);
    }
    dp_pf_add(r, "env", a.s, "%s", a.text);
}

/* ------------------------------------------------------------------ loss scaling */

/*
 * fp16 has 5 exponent bits: gradients below 2^-24 flush to zero, and
 * Micikevicius et al. 2018 ("Mixed Precision Training", ICLR, Sec. 3.2)
 * found a large share of activation gradients there, so fp16 training
 * scales the loss. bf16 keeps fp32's 8 exponent bits and needs no scaling.
 */
void dp_pf_check_loss_scale(enum dp_precision p, enum dp_pf_loss_scale ls, double static_scale,
                            struct dp_pf_report *r)
{
    if (p != DP_FP16) {
        dp_pf_add(r, "loss_scale", DP_PF_PASS, "%s: no loss scaling needed (%s)",
                  dp_precision_name(p),
                  p == DP_BF16 ? "8 exponent bits, the range of fp32" : "full range");
        return;
    }
    switch (ls) {
    case DP_PF_LS_DYNAMIC:
        dp_pf_add(r, "loss_scale", DP_PF_PASS, "fp16 with dynamic loss scaling");
        break;
    case DP_PF_LS_STATIC:
        dp_pf_add(r, "loss_scale", DP_PF_PASS, "fp16 with a static loss scale of %g", static_scale);
        break;
    case DP_PF_LS_NONE:
        dp_pf_add(r, "loss_scale", DP_PF_FAIL,
                  "fp16 without loss scaling: gradients below 2^-24 vanish (Micikevicius et al. "
                  "2018); use dynamic scaling (Megatron's default with --fp16, torch GradScaler, "
                  "DeepSpeed fp16.loss_scale 0)");
        break;
    case DP_PF_LS_UNSET:
        dp_pf_add(r, "loss_scale", DP_PF_WARN,
                  "fp16 and --loss-scale not given: make sure the launch scales the loss "
                  "(dynamic: Megatron --fp16 without --loss-scale, torch GradScaler), then "
                  "say --loss-scale dynamic");
        break;
    }
}
