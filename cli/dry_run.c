/*
 * `dplan run --dry-run`, after cmd_run.c's rank map (Megatron order, executor.h):
 * each rank's groups, the 1F1B order of every stage (dp_exec_schedule: the executor's own
 * pipeline code on its pricing backend) and the executor's memory plan per rank
 * (dp_exec_memory, the table the ranks allocate from), without starting a rank.
 */
#include "dry_run.h"

#include "executor/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LISTED = 64 }; /* ranks listed one by one; beyond, the first ones and a count */

/* "{a,b,c}": the world ranks of the group of `c` whose members vary `which`. */
static void members(const struct dp_layout *l, const struct dp_coords *c, char which, char *out,
                    size_t cap)
{
    const int cp = l->cp > 1 ? l->cp : 1;
    /* ZeRO shards span the dp x cp ranks, q = cp_rank + cp dp_rank (executor/shard.c) */
    const int sg = l->zero >= 1 ? dp_layout_shard(l) : l->dp * cp, q = c->cp_rank + cp * c->dp_rank;
    size_t n = (size_t)snprintf(out, cap, "{");
    int count = 0, nmax = which == 't'   ? l->tp
                          : which == 'p' ? l->pp
                          : which == 'c' ? cp
                          : which == 'd' ? l->dp
                                         : cp * l->dp;
    for (int i = 0; i < nmax && n + 16 < cap; i++) {
        struct dp_coords d = *c;
        if (which == 't')
            d.tp_rank = i;
        else if (which == 'p')
            d.pp_rank = i;
        else if (which == 'c') /* the context-parallel ring */
            d.cp_rank = i;
        else if (which == 'd')
            d.dp_rank = i;
        else if (which == 's' && i / sg != q / sg) /* same shard group: q / sg */
            continue;
        else if (which == 'r' && i % sg != q % sg) /* replicas of the same shard: q % sg */
            continue;
        if (which == 'g' || which == 's' || which == 'r') { /* i runs over q */
            d.cp_rank = i % cp;
            d.dp_rank = i / cp;
        }
        n += (size_t)snprintf(out + n, cap - n, "%s%d", count++ ? "," : "",
                              dp_rank_of_cp(&d, l->tp, cp, l->dp, l->pp));
    }
    snprintf(out + n, cap - n, "}");
}

/* "{a,b,c}": the world ranks of c's expert group (core dp_rank_ecoords, Megatron-Core's
 * folding of the stage's tp x cp x dp ranks): 'e' the all-to-all (same etp and edp rank),
 * 'x' expert data parallel (same etp and ep rank), 'z' expert tensor parallel (same ep and
 * edp rank); under HSDP 'S' the expert shard group (EDP ranks with the same edp_rank / esh,
 * esh = edp / replicas) and 'R' its replicas (the same edp_rank % esh). */
static void expert_members(const struct dp_layout *l, const struct dp_coords *c, char which,
                           char *out, size_t cap)
{
    const int cp = l->cp > 1 ? l->cp : 1, etp = dp_layout_etp(l);
    struct dp_ecoords me, o;
    dp_rank_ecoords(c, l->tp, cp, l->dp, l->ep, etp, &me);
    const int nrep = l->zero >= 1 ? dp_layout_replicas(l) : 1;
    const int esh = me.edp % nrep == 0 ? me.edp / nrep : me.edp;
    size_t n = (size_t)snprintf(out, cap, "{");
    int count = 0;
    for (int i = 0; i < l->tp * cp * l->dp && n + 16 < cap; i++) {
        struct dp_coords d = {.tp_rank = i % l->tp,
                              .cp_rank = (i / l->tp) % cp,
                              .dp_rank = i / (l->tp * cp),
                              .pp_rank = c->pp_rank};
        dp_rank_ecoords(&d, l->tp, cp, l->dp, l->ep, etp, &o);
        const bool slice = o.etp_rank == me.etp_rank && o.ep_rank == me.ep_rank;
        bool same = which == 'e'   ? o.etp_rank == me.etp_rank && o.edp_rank == me.edp_rank
                    : which == 'x' ? slice
                    : which == 'S' ? slice && o.edp_rank / esh == me.edp_rank / esh
                    : which == 'R' ? slice && o.edp_rank % esh == me.edp_rank % esh
                                   : o.ep_rank == me.ep_rank && o.edp_rank == me.edp_rank;
        if (same)
            n += (size_t)snprintf(out + n, cap - n, "%s%d", count++ ? "," : "",
                                  dp_rank_of_cp(&d, l->tp, cp, l->dp, l->pp));
    }
    snprintf(out + n, cap - n, "}");
}

int cli_run_dry(const struct dp_model *m, const struct dp_layout *l, bool flash)
{
    const int cp = l->cp > 1 ? l->cp : 1;
    const int world = l->tp * cp * l->dp * l->pp;
    const bool hsdp = l->zero >= 1 && dp_layout_shard(l) < l->dp * cp;
    const bool etp = m->experts > 0 && dp_layout_etp(l) != l->tp;
    const bool ep = m->experts > 0 && (l->ep > 1 || etp);
    printf("\ngroups of each rank (world ranks; shard / replicas: ZeRO under HSDP%s%s):\n",
           ep ? "; ep / edp: the experts' all-to-all and gradient groups, expert-shard / "
                "expert-replicas their ZeRO groups under HSDP"
              : "",
           etp ? "; etp: an expert's tensor-parallel ranks" : "");
    for (int r = 0; r < world; r++) {
        if (r == MAX_LISTED) {
            printf("  ... %d more ranks\n", world - MAX_LISTED);
            break;
        }
        struct dp_coords c;
        dp_rank_coords_cp(r, l->tp, cp, l->dp, l->pp, &c);
        char tp[128], dp[128], pp[128], sh[128], rp[128], cq[128], dc[128];
        members(l, &c, 't', tp, sizeof tp);
        members(l, &c, 'd', dp, sizeof dp);
        members(l, &c, 'p', pp, sizeof pp);
        printf("  rank %d: tp %s dp %s pp %s", r, tp, dp, pp);
        if (cp > 1) { /* the ring; gradients are summed over dp x cp */
            members(l, &c, 'c', cq, sizeof cq);
            members(l, &c, 'g', dc, sizeof dc);
            printf(" cp %s dp-cp %s", cq, dc);
        }
        if (hsdp) {
            members(l, &c, 's', sh, sizeof sh);
            members(l, &c, 'r', rp, sizeof rp);
            printf(" shard %s replicas %s", sh, rp);
        }
        if (ep) {
            expert_members(l, &c, 'e', sh, sizeof sh);
            expert_members(l, &c, 'x', rp, sizeof rp);
            printf(" ep %s edp %s", sh, rp);
            if (hsdp) { /* the expert state's shard group and replicas (executor/shard.c) */
                expert_members(l, &c, 'S', sh, sizeof sh);
                expert_members(l, &c, 'R', rp, sizeof rp);
                printf(" expert-shard %s expert-replicas %s", sh, rp);
            }
        }
        if (etp) {
            expert_members(l, &c, 'z', dc, sizeof dc);
            printf(" etp %s", dc);
        }
        printf("\n");
    }
    printf("CPU backend: fp32 compute, blocking collectives, %s%s\n",
           cp > 1 ? "ring attention over the cp group (log-sum-exp kept)"
                  : "attention probabilities kept",
           l->precision != DP_FP32 ? " (not the plan's precision)" : "");

    if (l->schedule == DP_SCHED_DUALPIPEV)
        printf("\nschedule per stage (DualPipeV: stage s holds model chunks s and 2 pp - 1 - s; "
               "Fm.c / Bm.c: forward / backward of micro-batch m through the stage's chunk c; "
               "an overlapped pair runs as its forward then its backward; "
               "core/schedule_dualpipev.c's order):\n");
    else if (l->vpp > 1)
        printf("\nschedule per stage (interleaved 1F1B, %d model chunks per stage; Fm.c / Bm.c: "
               "forward / backward of micro-batch m through the stage's chunk c, model chunk "
               "c pp + stage; sim/'s order):\n",
               l->vpp);
    else
        printf("\nschedule per stage (1F1B; Fm / Bm: forward / backward of micro-batch m):\n");
    char *sched = malloc(4096);
    if (!sched) {
        fprintf(stderr, "dplan: error: out of memory\n");
        return 1;
    }
    for (int s = 0; s < l->pp; s++) {
        struct dp_err err = {0};
        if (dp_exec_schedule(m, l, s, sched, 4096, &err)) {
            fprintf(stderr, "dplan: error: %s: %s\n", m->name, err.msg);
            free(sched);
            return 1;
        }
        printf("  stage %d: %s\n", s, sched);
    }
    free(sched);

    const char *what = l->zero >= 3   ? "parameters, gradients and AdamW state sharded"
                       : l->zero == 2 ? "gradients and AdamW state sharded"
                       : l->zero == 1 ? "AdamW state sharded"
                                      : "nothing sharded";
    printf("\npredicted memory per rank (MiB, the executor's memory plan; ZeRO-%d: %s%s):\n",
           l->zero, what, hsdp ? " within shard groups" : "");
    printf("  %-7s", "stage");
    for (int p = 0; p < DP_NPOOLS; p++)
        printf(" %10s", dp_pool_name((enum dp_pool)p));
    printf(" %10s\n", "total");
    for (int s = 0; s < l->pp; s++) {
        int64_t b[DP_NPOOLS];
        struct dp_err err = {0};
        if (dp_exec_memory_attn(m, l, s, flash ? DP_EXEC_ATTN_FLASH : DP_EXEC_ATTN_MATH, b, &err)) {
            fprintf(stderr, "dplan: error: %s: %s\n", m->name, err.msg);
            return 1;
        }
        double total = 0;
        printf("  %-7d", s);
        for (int p = 0; p < DP_NPOOLS; p++) {
            printf(" %10.3f", (double)b[p] / 1048576.0);
            total += (double)b[p];
        }
        printf(" %10.3f\n", total / 1048576.0);
    }
    return 0;
}
