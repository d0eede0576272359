/*
 * The checklist items about this node and the plan's resources: the
 * checkpoint directory (writable, room), the checkpoint interval (2 hours at
 * most, near the goodput optimum), the memory headroom per stage, and the
 * node's topology against the plan's links. The directory probe is the only
 * I/O; the rest judges what it is given.
 */
#include "preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static double gib(int64_t b)
{
    return (double)b / (double)(1LL << 30);
}

/* "899.4 GiB", "312.5 MiB": checkpoints of small models are well under a GiB. */
static const char *size_str(int64_t b, char *buf, size_t cap)
{
    if (b >= 1LL << 30)
        snprintf(buf, cap, "%.1f GiB", gib(b));
    else
        snprintf(buf, cap, "%.1f MiB", (double)b / (double)(1 << 20));
    return buf;
}

/* ------------------------------------------------------------------ checkpoint directory */

int dp_pf_probe_dir(const char *dir, int64_t *free_bytes, char *probed, size_t probed_cap,
                    char *why, size_t why_cap)
{
    *free_bytes = 0;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(why, why_cap, "path too long");
        return -1;
    }
    /* The nearest existing ancestor: dplan run creates the directory (and its parents)
     * before the first step, so that is where the file must be creatable. */
    struct stat st;
    while (stat(path, &st) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            snprintf(why, why_cap, "%s: %s", path, strerror(errno));
            return -1;
        }
        char *slash = strrchr(path, '/');
        if (!slash) {
            snprintf(path, sizeof path, ".");
            continue;
        }
        if (slash == path)
            slash[1] = 0;
        else
            *slash = 0;
    }
    snprintf(probed, probed_cap, "%s", path);
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, why_cap, "%s: not a directory", path);
        return -1;
    }
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/.dplan-check-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(why, why_cap, "%s: cannot create a file: %s", path, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(tmp);
    struct statvfs vfs;
    if (statvfs(path, &vfs) != 0) {
        snprintf(why, why_cap, "%s: statvfs: %s", path, strerror(errno));
        return -1;
    }
    double f = (double)vfs.f_bavail * (double)vfs.f_frsize;
    *free_bytes = f > 9e18 ? INT64_MAX : (int64_t)f;
    return 0;
}

enum dp_pf_status dp_pf_ckpt_room(int64_t free_bytes, const struct dp_ckpt_size *size)
{
    if (free_bytes < size->node_bytes)
        return DP_PF_FAIL;
    if (free_bytes < size->total_bytes)
        return DP_PF_WARN;
    return DP_PF_PASS;
}

void dp_pf_check_ckpt_dir(const char *dir, const struct dp_ckpt_size *size, struct dp_pf_report *r)
{
    char tot[32], node[32], fr[32];
    size_str(size->total_bytes, tot, sizeof tot);
    size_str(size->node_bytes, node, sizeof node);
    if (!dir) {
        dp_pf_add(r, "ckpt_dir", DP_PF_WARN,
                  "--ckpt-dir not given: not checked (a checkpoint is %s, %s from this node)", tot,
                  node);
        return;
    }
    int64_t free_b;
    char probed[PATH_MAX], why[PATH_MAX + 128];
    if (dp_pf_probe_dir(dir, &free_b, probed, sizeof probed, why, sizeof why)) {
        dp_pf_add(r, "ckpt_dir", DP_PF_FAIL, "%s: not writable (%s)", dir, why);
        return;
    }
    size_str(free_b, fr, sizeof fr);
    char below[PATH_MAX + 32] = "";
    if (strcmp(probed, dir))
        snprintf(below, sizeof below, " (to be created below %s)", probed);
    switch (dp_pf_ckpt_room(free_b, size)) {
    case DP_PF_FAIL:
        dp_pf_add(r, "ckpt_dir", DP_PF_FAIL,
                  "%s%s: %s free, less than the %s this node writes per checkpoint", dir, below, fr,
                  node);
        break;
    case DP_PF_WARN:
        dp_pf_add(r, "ckpt_dir", DP_PF_WARN,
                  "%s%s: writable, %s free: room for this node's %s but not the whole %s "
                  "checkpoint (fine only if the directory is node-local)",
                  dir, below, fr, node, tot);
        break;
    case DP_PF_PASS:
        dp_pf_add(r, "ckpt_dir", DP_PF_PASS, "%s%s: writable, %s free for a %s checkpoint", dir,
                  below, fr, tot);
        break;
    }
}

/* ------------------------------------------------------------------ checkpoint interval */

static const char *dur(double s, char *buf, size_t cap)
{
    if (!isfinite(s))
        snprintf(buf, cap, "never");
    else if (s >= 2 * 3600)
        snprintf(buf, cap, "%.2f h", s / 3600);
    else if (s >= 120)
        snprintf(buf, cap, "%.1f min", s / 60);
    else
        snprintf(buf, cap, "%.1f s", s);
    return buf;
}

void dp_pf_check_ckpt_every(int64_t every_steps, double step_time_s,
                            const struct dp_failure_model *f, struct dp_pf_report *r)
{
    struct dp_goodput_plan best;
    struct dp_err err = {0};
    char a[32], b[32];
    if (dp_goodput_plan(f, step_time_s, &best, &err)) {
        dp_pf_add(r, "ckpt_every", DP_PF_FAIL, "%s", err.msg);
        return;
    }
    /* The goodput optimum, capped at the 2-hour limit. */
    int64_t cap_steps = (int64_t)floor(DP_PF_CKPT_MAX_S / step_time_s);
    if (cap_steps < 1)
        cap_steps = 1;
    int64_t rec =
        best.every_steps > 0 && best.every_steps < cap_steps ? best.every_steps : cap_steps;
    if (every_steps <= 0) {
        dp_pf_add(r, "ckpt_every", DP_PF_WARN,
                  "--ckpt-every not given: at %.3g s per step, checkpoint every %lld steps (%s; "
                  "the Young/Daly optimum is %s)",
                  step_time_s, (long long)rec, dur((double)rec * step_time_s, a, sizeof a),
                  dur(best.daly_s, b, sizeof b));
        return;
    }
    struct dp_ckpt_every_check c;
    if (dp_ckpt_every_check(f, step_time_s, every_steps, &c, &err)) {
        dp_pf_add(r, "ckpt_every", DP_PF_FAIL, "%s", err.msg);
        return;
    }
    if (c.interval_s > DP_PF_CKPT_MAX_S) {
        dp_pf_add(r, "ckpt_every", DP_PF_FAIL,
                  "every %lld steps = %s at %.3g s per step, over the 2-hour limit: at most %lld "
                  "steps (%lld recommended)",
                  (long long)every_steps, dur(c.interval_s, a, sizeof a), step_time_s,
                  (long long)cap_steps, (long long)rec);
        return;
    }
    if (best.every_steps > cap_steps) {
        /* The optimum lies past the limit: the best allowed interval is the limit, and
         * wasted time only grows the further below it (Young's waste delta/tau + tau/2M
         * falls with tau up to the optimum). */
        double k = (double)every_steps / (double)cap_steps;
        dp_pf_add(r, "ckpt_every", k < 0.5 ? DP_PF_WARN : DP_PF_PASS,
                  "every %lld steps = %s: %s the 2-hour limit of %lld steps, which is below the "
                  "Young/Daly optimum of %s (goodput %.4f, %.4f at the limit)",
                  (long long)every_steps, dur(c.interval_s, a, sizeof a),
                  k < 0.5 ? "under half of" : "within", (long long)cap_steps,
                  dur(best.daly_s, b, sizeof b), c.goodput,
                  dp_goodput(f, (double)cap_steps * step_time_s));
        return;
    }
    if (c.far) {
        dp_pf_add(r, "ckpt_every", DP_PF_WARN,
                  "every %lld steps = %s, %.2fx the goodput optimum of %lld steps (%s, Young/Daly "
                  "at a job MTBF of %.1f h and %.1f s per write): goodput %.4f instead of %.4f",
                  (long long)every_steps, dur(c.interval_s, a, sizeof a), c.ratio,
                  (long long)best.every_steps, dur(best.interval_s, b, sizeof b),
                  1.0 / f->rate_per_s / 3600.0, f->ckpt_write_s, c.goodput, c.best_goodput);
        return;
    }
    if (f->rate_per_s > 0)
        dp_pf_add(r, "ckpt_every", DP_PF_PASS,
                  "every %lld steps = %s, within 2 hours and %.2fx the goodput optimum of %lld "
                  "steps (goodput %.4f, best %.4f)",
                  (long long)every_steps, dur(c.interval_s, a, sizeof a), c.ratio,
                  (long long)best.every_steps, c.goodput, c.best_goodput);
    else
        dp_pf_add(r, "ckpt_every", DP_PF_PASS,
                  "every %lld steps = %s, within 2 hours (no failure rate: no optimum)",
                  (long long)every_steps, dur(c.interval_s, a, sizeof a));
}

/* ------------------------------------------------------------------ memory */

/*
 * The margin: what the model does not size exactly (costmodel.h DP_MEM_TIGHT_FRACTION,
 * the planner's default, says why 5%). A layout that fits with less is a gamble.
 */
void dp_pf_check_memory(const struct dp_mem_report *rep, double margin, struct dp_pf_report *r)
{
    int worst = 0;
    for (int s = 1; s < rep->nstages; s++)
        if (rep->stage[s].total_bytes > rep->stage[worst].total_bytes)
            worst = s;
    const struct dp_mem_stage *w = &rep->stage[worst];
    int64_t cap = rep->capacity_bytes, room = cap - w->total_bytes;
    int over = 0;
    for (int s = 0; s < rep->nstages; s++)
        over += rep->stage[s].total_bytes > cap;
    if (over)
        dp_pf_add(r, "memory", DP_PF_FAIL,
                  "%d of %d stages do not fit: stage %d needs %.1f GiB of %.1f GiB usable (%.1f "
                  "GiB over; `dplan memory` lists fixes)",
                  over, rep->nstages, w->stage, gib(w->total_bytes), gib(cap), gib(-room));
    else if (dp_mem_tight(w->total_bytes, cap, margin))
        dp_pf_add(r, "memory", DP_PF_WARN,
                  "stage %d: %.1f GiB of %.1f GiB usable, %.1f GiB (%.1f%%) headroom, under %.0f%%",
                  w->stage, gib(w->total_bytes), gib(cap), gib(room),
                  100.0 * (double)room / (double)cap, 100 * margin);
    else
        dp_pf_add(r, "memory", DP_PF_PASS,
                  "%d stage%s fit; the fullest, stage %d, needs %.1f GiB of %.1f GiB usable "
                  "(%.1f GiB, %.0f%% headroom)",
                  rep->nstages, rep->nstages > 1 ? "s" : "", w->stage, gib(w->total_bytes),
                  gib(cap), gib(room), 100.0 * (double)room / (double)cap);
}

/* ------------------------------------------------------------------ topology */

/* The plan's link with this name: intra, a measured group link, or the network. */
static const struct dp_link *plan_link(const struct dp_cluster *cl, const char *name)
{
    for (int k = 0; k < cl->ngroup_links; k++)
        if (strcmp(cl->group_link[k].name, name) == 0)
            return &cl->group_link[k];
    if (strcmp(cl->inter.name, name) == 0)
        return &cl->inter;
    return &cl->intra;
}

/* A measured link below this fraction of the plan's rate is not the link it planned with
 * (the same bar as the collective bandwidth's WARN). */
#define TOPO_BW_MIN DP_PF_BUSBW_WARN

void dp_pf_check_topology(const struct dp_topo *t, const struct dp_cluster *cl,
                          const struct dp_layout *l, struct dp_pf_report *r)
{
    if (t->ngpus == 0) {
        dp_pf_add(r, "topology", DP_PF_WARN, "no GPUs found on this node (%s): not checked",
                  t->source);
        return;
    }
    if (t->ngpus < cl->gpus_per_node) {
        dp_pf_add(r, "topology", DP_PF_FAIL, "%d GPUs found, the plan assumes %d per node",
                  t->ngpus, cl->gpus_per_node);
        return;
    }
    if (l->tp < 2) {
        dp_pf_add(r, "topology", DP_PF_PASS, "%d GPUs as the plan assumes; no TP group to check",
                  t->ngpus);
        return;
    }
    struct dp_path p;
    dp_place_path(cl, l, DP_PLACE_TP, &p);
    if (p.inter_node || l->tp > cl->gpus_per_node) {
        dp_pf_add(r, "topology", DP_PF_PASS,
                  "%d GPUs as the plan assumes; its TP groups span nodes (%s): no node-local "
                  "link to check",
                  t->ngpus, p.desc);
        return;
    }
    const struct dp_link *want = plan_link(cl, p.link);
    /* Every aligned TP group the plan places on this node: ranks fill a node in order
     * (Megatron's numbering), so TP group g holds GPUs [g tp, (g + 1) tp). */
    for (int first = 0; first + l->tp <= cl->gpus_per_node; first += l->tp) {
        struct dp_link got;
        struct dp_err err = {0};
        if (dp_topo_group_link(t, &cl->gpu, first, l->tp, &got, &err)) {
            dp_pf_add(r, "topology", DP_PF_FAIL, "TP group of GPUs %d-%d: %s", first,
                      first + l->tp - 1, err.msg);
            return;
        }
        bool nvlink_missing = want->kind == DP_LINK_NVLINK && got.kind != DP_LINK_NVLINK;
        bool slow = got.bw_gbps < TOPO_BW_MIN * want->bw_gbps;
        if (nvlink_missing || slow) {
            dp_pf_add(r, "topology", DP_PF_FAIL,
                      "TP group of GPUs %d-%d is joined by %s (%.0f GB/s) where the plan assumes "
                      "%s (%.0f GB/s)",
                      first, first + l->tp - 1, got.name, got.bw_gbps, want->name, want->bw_gbps);
            return;
        }
    }
    dp_pf_add(r, "topology", DP_PF_PASS,
              "%d GPUs; each TP group of %d GPUs is joined by %s as the plan assumes (%s)",
              t->ngpus, l->tp, want->kind == DP_LINK_NVLINK ? "NVLink" : want->name, want->name);
}
