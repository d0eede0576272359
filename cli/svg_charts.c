/*
 * `--svg` for memory, suggest, whatif and validate: each report's numbers arranged for
 * viz/'s charts (labels, units, titles), then written out. The drawing itself
 * is viz/'s; this file decides what is shown.
 */
#include "svg_charts.h"
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_write_text(const char *file, const struct dp_buf *b, struct dp_err *err)
{
    if (b->failed)
        return dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
    if (strcmp(file, "-") == 0) {
        if (b->len && fwrite(b->data, 1, b->len, stdout) != b->len)
            return dp_err_set(err, DP_EIO, "stdout: write failed");
        return fflush(stdout) == 0 ? 0 : dp_err_set(err, DP_EIO, "stdout: write failed");
    }
    return dp_write_file_atomic(file, b->len ? b->data : "", b->len, err);
}

static void cluster_words(const struct dp_cluster *cl, char *buf, size_t cap)
{
    if (cl->nodes > 1 || strcmp(cl->system, "custom") != 0)
        snprintf(buf, cap, "%s x%d (%d x %s)", cl->system, cl->nodes, dp_cluster_gpus(cl),
                 cl->gpu.name);
    else
        snprintf(buf, cap, "%d x %s", dp_cluster_gpus(cl), cl->gpu.name);
}

int cli_svg_memory(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                   const struct dp_mem_report *rep, struct dp_buf *out, struct dp_err *err)
{
    static const char *const series[] = {"params", "grads", "optimizer", "activations", "other"};
    const int ns = 5, nc = rep->nstages;
    double *v = malloc(sizeof *v * (size_t)(nc * ns));
    char(*labels)[32] = malloc(sizeof *labels * (size_t)nc);
    const char **cat = malloc(sizeof *cat * (size_t)nc);
    int rc = 0;
    if (!v || !labels || !cat) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory for the memory chart");
        goto out;
    }
    for (int i = 0; i < nc; i++) {
        const struct dp_mem_stage *st = &rep->stage[i];
        snprintf(labels[i], sizeof labels[i], "%d (%dL)", st->stage, st->layers);
        cat[i] = labels[i];
        v[i * ns + 0] = cli_gib(st->params_bytes);
        v[i * ns + 1] = cli_gib(st->grads_bytes);
        v[i * ns + 2] = cli_gib(st->optimizer_bytes);
        v[i * ns + 3] = cli_gib(st->activations_bytes);
        v[i * ns + 4] = cli_gib(st->other_bytes);
    }
    char title[160], sub[320], lay[160], clu[160], lim[96];
    dp_layout_format(l, lay, sizeof lay);
    cluster_words(cl, clu, sizeof clu);
    snprintf(title, sizeof title, "Memory per GPU by pipeline stage: %s", m->name);
    snprintf(sub, sizeof sub,
             "%s, gbs=%lld seq=%lld %s on %s\n%s: peak %.2f GiB on stage %d, %.2f GiB %s", lay,
             (long long)l->gbs, (long long)l->seq_len, dp_precision_name(l->precision), clu,
             rep->fits ? "fits" : "out of memory", cli_gib(rep->peak_bytes), rep->peak_stage,
             cli_gib(llabs(rep->capacity_bytes - rep->peak_bytes)),
             rep->fits ? "headroom" : "over");
    snprintf(lim, sizeof lim, "usable memory, %.1f GiB", cli_gib(rep->capacity_bytes));
    struct dp_viz_stack c = {
        .title = title,
        .subtitle = sub,
        .y_label = "memory per GPU (GiB)",
        .x_label = "pipeline stage (transformer layers)",
        .ncat = nc,
        .nseries = ns,
        .cat = cat,
        .series = series,
        .v = v,
        .limit = cli_gib(rep->capacity_bytes),
        .limit_label = lim,
        .over_label = "OOM",
    };
    rc = dp_viz_stacked_bars(&c, out, err);
out:
    free(v);
    free(labels);
    free(cat);
    return rc;
}

void cli_scatter_collect(const struct dp_candidate *c, void *ctx)
{
    struct cli_scatter *s = ctx;
    if (s->failed)
        return;
    if (s->stride == 0)
        s->stride = 1;
    if (s->seen++ % s->stride)
        return;
    if (s->n == s->cap) {
        if (s->cap >= CLI_SCATTER_MAX) {
            /* Full: keep every other point and, from now on, every 2^k-th new one. */
            for (size_t i = 0; i < s->n / 2; i++)
                s->pt[i] = s->pt[2 * i];
            s->n /= 2;
            s->stride *= 2;
            return;
        }
        size_t cap = s->cap ? 2 * s->cap : 4096;
        struct dp_viz_point *p = realloc(s->pt, cap * sizeof *p);
        if (!p) {
            s->failed = true;
            return;
        }
        s->pt = p;
        s->cap = cap;
    }
    s->pt[s->n++] = (struct dp_viz_point){(float)cli_gib(c->peak_bytes), (float)c->cost.step_time_s,
                                          (int)c->layout.recompute};
}

void cli_scatter_release(struct cli_scatter *s)
{
    free(s->pt);
    memset(s, 0, sizeof *s);
}

int cli_svg_suggest(const struct dp_model *m, const struct dp_cluster *cl,
                    const struct dp_search_opts *so, const struct dp_search_result *r,
                    const struct cli_scatter *pts, struct dp_buf *out, struct dp_err *err)
{
    static const char *const groups[] = {"recompute none", "selective", "full"};
    if (pts->failed)
        return dp_err_set(err, DP_ENOMEM, "out of memory for the search picture");
    struct dp_viz_mark marks[5];
    int nm = r->n < 5 ? r->n : 5;
    for (int k = 0; k < nm; k++) {
        const struct dp_candidate *cd = &r->top[k];
        char lay[160];
        dp_layout_format(&cd->layout, lay, sizeof lay);
        marks[k] = (struct dp_viz_mark){
            .x = cli_gib(cd->peak_bytes), .y = cd->cost.step_time_s, .primary = k == 0};
        snprintf(marks[k].tag, sizeof marks[k].tag, "#%d", k + 1);
        snprintf(marks[k].text, sizeof marks[k].text, "#%d  %s: %.3f s/step, %.2f GiB peak%s",
                 k + 1, lay, cd->cost.step_time_s, cli_gib(cd->peak_bytes),
                 k == 0 ? " (chosen)" : "");
    }
    char title[192], sub[256], clu[160], lim[64], note[256];
    cluster_words(cl, clu, sizeof clu);
    snprintf(title, sizeof title, "Layouts searched: %s on %s", m->name, clu);
    snprintf(sub, sizeof sub,
             "step time against peak memory of the %lld layouts that fit; batch %lld x %lld "
             "tokens",
             r->fitting, (long long)so->gbs, (long long)so->seq_len);
    snprintf(lim, sizeof lim, "usable %.1f GiB", cli_gib(dp_gpu_usable_bytes(&cl->gpu)));
    if ((unsigned long long)pts->n < pts->seen)
        snprintf(note, sizeof note,
                 "%zu of %llu fitting layouts drawn (every %llu-th); %lld out of memory not "
                 "shown: their step time is not computed",
                 pts->n, pts->seen, pts->stride, r->oom);
    else
        snprintf(note, sizeof note,
                 "%lld layouts out of memory not shown: the search does not time them", r->oom);
    struct dp_viz_scatter c = {
        .title = title,
        .subtitle = sub,
        .x_label = "peak memory per GPU (GiB)",
        .y_label = "step time (s, log scale)",
        .y_log = true,
        .ngroups = 3,
        .group = groups,
        .pt = pts->pt,
        .npt = pts->n,
        .mark = marks,
        .nmark = nm,
        .x_limit = cli_gib(dp_gpu_usable_bytes(&cl->gpu)),
        .x_limit_label = lim,
        .frontier = true,
        .frontier_label = "fastest within this memory",
        .note = note,
    };
    return dp_viz_scatter(&c, out, err);
}

int cli_svg_whatif(const struct dp_model *m, double tokens, const struct dp_search_opts *so,
                   char *const *systems, int nsys, const int *nodes, int nnodes,
                   const struct cli_whatif_row *rows, bool priced, struct dp_buf *out,
                   struct dp_err *err)
{
    if (nsys > DP_VIZ_MAX_SERIES)
        return dp_err_set(err, DP_EUSAGE, "--svg: at most %d systems in one picture, got %d",
                          DP_VIZ_MAX_SERIES, nsys);
    size_t n = (size_t)nsys * (size_t)nnodes;
    double *tps = malloc(n * sizeof *tps), *second = malloc(n * sizeof *second);
    const char **why = malloc(n * sizeof *why);
    char(*labels)[32] = malloc((size_t)nnodes * sizeof *labels);
    const char **cat = malloc((size_t)nnodes * sizeof *cat);
    int rc = 0;
    if (!tps || !second || !why || !labels || !cat) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory for the whatif chart");
        goto out;
    }
    /* rows are system-major; the chart wants [node count][system] */
    for (int si = 0; si < nsys; si++)
        for (int ni = 0; ni < nnodes; ni++) {
            const struct cli_whatif_row *w = &rows[si * nnodes + ni];
            size_t k = (size_t)ni * (size_t)nsys + (size_t)si;
            tps[k] = w->fits ? w->tokens_per_s : NAN;
            second[k] = !w->fits ? NAN : priced ? (w->cost_usd >= 0 ? w->cost_usd : NAN) : w->days;
            why[k] = w->fits ? "no price" : "no fit";
        }
    for (int ni = 0; ni < nnodes; ni++) {
        snprintf(labels[ni], sizeof labels[ni], "%d node%s", nodes[ni], nodes[ni] == 1 ? "" : "s");
        cat[ni] = labels[ni];
    }
    char title[192], sub[256], ylab[96], tok[32];
    dp_viz_fmt_si(tokens, tok, sizeof tok);
    snprintf(title, sizeof title, "What it takes to train %s on %s tokens", m->name, tok);
    snprintf(sub, sizeof sub,
             "the fastest layout that fits for each system and size; batch %lld x %lld tokens",
             (long long)so->gbs, (long long)so->seq_len);
    snprintf(ylab, sizeof ylab, "%s", priced ? "cost to train (USD)" : "days to train");
    struct dp_viz_grouped c = {
        .title = title,
        .subtitle = sub,
        .x_label = "cluster size",
        .ncat = nnodes,
        .nseries = nsys,
        .npanel = 2,
        .cat = cat,
        .series = (const char *const *)systems,
    };
    c.panel[0].y_label = "tokens/s (whole cluster)";
    c.panel[0].v = tps;
    c.panel[0].missing = "no fit";
    c.panel[0].log = true; /* sizes grow geometrically; so does throughput */
    c.panel[1].y_label = ylab;
    c.panel[1].v = second;
    c.panel[1].missing_at = why;
    rc = dp_viz_grouped_bars(&c, out, err);
out:
    free(tps);
    free(second);
    free(why);
    free(labels);
    free(cat);
    return rc;
}

int cli_svg_validate(const struct dp_run *runs, const struct dp_run_result *res, int n,
                     struct dp_val_stats held, struct dp_val_stats fit, int sources,
                     double band_pct, struct dp_buf *out, struct dp_err *err)
{
    static const char *const groups[] = {"held out (fitted nothing)", "used to fit the GPU curves"};
    struct dp_viz_point *pt = malloc((size_t)(n > 0 ? n : 1) * sizeof *pt);
    if (!pt)
        return dp_err_set(err, DP_ENOMEM, "out of memory for the validation picture");
    size_t np = 0;
    for (int i = 0; i < n; i++)
        if (dp_run_scored(&runs[i]) && res[i].measured_s > 0)
            pt[np++] = (struct dp_viz_point){(float)res[i].measured_s, (float)(100 * res[i].error),
                                             runs[i].held_out ? 0 : 1};
    if (np == 0) {
        free(pt);
        return dp_err_set(err, DP_EUSAGE, "--svg: no scored run to draw");
    }
    /* The worst held-out runs, marked and listed (the worst filled). */
    enum { MARKS = 5 };
    int worst[MARKS], nm = 0;
    for (int i = 0; i < n; i++) {
        if (!dp_run_scored(&runs[i]) || !runs[i].held_out)
            continue;
        int at = nm < MARKS ? nm++ : MARKS;
        while (at > 0 && fabs(res[i].error) > fabs(res[worst[at - 1]].error)) {
            if (at < MARKS)
                worst[at] = worst[at - 1];
            at--;
        }
        if (at < MARKS)
            worst[at] = i;
    }
    struct dp_viz_mark marks[MARKS];
    for (int k = 0; k < nm; k++) {
        const struct dp_run *r = &runs[worst[k]];
        const struct dp_run_result *e = &res[worst[k]];
        marks[k] = (struct dp_viz_mark){.x = e->measured_s, .y = 100 * e->error, .primary = k == 0};
        snprintf(marks[k].tag, sizeof marks[k].tag, "#%d", k + 1);
        snprintf(marks[k].text, sizeof marks[k].text,
                 "#%d  %s (%s): measured %.3f s, predicted %.3f s, %+.1f%%", k + 1, r->id,
                 r->source_key, e->measured_s, e->predicted_s, 100 * e->error);
    }
    char title[160], sub[256], hs[64] = "", fs[64] = "", up[32], dn[32];
    snprintf(title, sizeof title, "Step-time model against %zu measured run%s from %d source%s", np,
             np == 1 ? "" : "s", sources, sources == 1 ? "" : "s");
    if (held.n)
        snprintf(hs, sizeof hs, "held out: %d runs, mean |error| %.2f%%", held.n, 100 * held.mean);
    if (fit.n)
        snprintf(fs, sizeof fs, "%sused to fit: %d runs, %.2f%%", held.n ? "; " : "", fit.n,
                 100 * fit.mean);
    snprintf(sub, sizeof sub, "error = predicted / measured - 1 per run; %s%s", hs, fs);
    snprintf(up, sizeof up, "+%g%%", band_pct);
    snprintf(dn, sizeof dn, "-%g%%", band_pct);
    const double refs[3] = {band_pct, 0, -band_pct};
    const char *const ref_labels[3] = {up, NULL, dn};
    char note[96];
    snprintf(note, sizeof note, "the %d held-out runs farthest from their measurement are marked",
             nm);
    struct dp_viz_scatter c = {
        .title = title,
        .subtitle = sub,
        .x_label = "measured step time (s, log scale)",
        .y_label = "error (%)",
        .x_log = true,
        .ngroups = 2,
        .group = groups,
        .pt = pt,
        .npt = np,
        .mark = marks,
        .nmark = nm,
        .note = nm ? note : NULL,
        .y_ref = refs,
        .y_ref_label = ref_labels,
        .ny_ref = 3,
        .mark_label = {"worst held out", "next worst"},
    };
    int rc = dp_viz_scatter(&c, out, err);
    free(pt);
    return rc;
}
