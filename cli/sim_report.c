/*
 * The simulated step for people (text), programs (--json) and eyes (the Gantt
 * chart of --svg); see sim_report.h.
 */
#include "sim_report.h"
#include "cli.h"
#include "viz/viz.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static double pct(double a, double b)
{
    return b > 0 ? 100 * a / b : 0;
}

/* The report's time unit: s for steps of a second or more, else ms or us, so that small
 * examples read as well as large ones. */
struct unit {
    const char *name;
    double k;
    int prec;
};
static struct unit unit_for(double step_s)
{
    if (step_s >= 1)
        return (struct unit){"s", 1, 4};
    if (step_s >= 1e-3)
        return (struct unit){"ms", 1e3, 3};
    return (struct unit){"us", 1e6, 1};
}

void cli_sim_text(FILE *f, const struct dp_sim_result *r, const struct dp_layout *l,
                  const struct dp_step_cost *est, int64_t capacity)
{
    const double T = r->step_s;
    const struct unit u = unit_for(T);
    char mbs[64];
    if (r->schedules > 1) /* local_batch: gradient-accumulation steps, one schedule each */
        snprintf(mbs, sizeof mbs, "%lld schedules of %lld micro-batches", (long long)r->schedules,
                 (long long)r->microbatches);
    else
        snprintf(mbs, sizeof mbs, "%lld micro-batches", (long long)r->microbatches);
    fprintf(f, "simulated step %.*f %s: %s schedule, pp=%d, vpp=%d, %s, %zu operations\n", u.prec,
            T * u.k, u.name, dp_sim_schedule_name(r->schedule), r->pp, r->vpp, mbs, r->ops);
    if (est)
        fprintf(f, "  analytic estimate %.*f %s (`dplan estimate`): simulation %+.2f%%\n", u.prec,
                est->step_time_s * u.k, u.name, pct(T - est->step_time_s, est->step_time_s));
    fprintf(f, "  %.0f tokens/s\n", T > 0 ? (double)l->gbs * (double)l->seq_len / T : 0);
    fprintf(f,
            "  pipeline span %.*f %s (first pass's start to last pass's end), bubble %.1f%% of "
            "it\n",
            u.prec, r->pipe_s * u.k, u.name, 100 * r->bubble);
    if (r->pp > 1 && r->vpp == 1 && r->schedule != DP_SIM_SCHED_GPIPE)
        fprintf(f, "  (a uniform 1F1B pipeline of these p and m idles (p-1)/(m+p-1) = %.1f%%)\n",
                100.0 * (r->pp - 1) / (double)(r->microbatches + r->pp - 1));

    const struct dp_sim_breakdown *b = &r->stage[r->busiest].b;
    fprintf(f, "\nwhere the busiest stage's compute stream spent the step (stage %d):\n",
            r->busiest);
    const char *names[] = {"compute", "recompute", "tp comm", "cp comm",   "ep comm",
                           "pp comm", "dp comm",   "bubble",  "optimizer", "embedding sync"};
    const double v[] = {b->compute, b->recompute, b->tp,     b->cp,        b->ep,
                        b->pp,      b->dp,        b->bubble, b->optimizer, b->other};
    for (int i = 0; i < 10; i++)
        if (v[i] > 0 || i == 0)
            fprintf(f, "  %-16s %10.*f %-2s  %5.1f%%\n", names[i], u.prec, v[i] * u.k, u.name,
                    pct(v[i], T));

    fprintf(f, "\nper stage (%s; exposed communication: what its compute stream waited for):\n",
            u.name);
    fprintf(f, "  %5s %10s %7s %10s %10s %10s %10s %10s %9s %9s\n", "stage", "busy", "bubble", "tp",
            "cp", "ep", "pp", "dp", "peak GiB", "model GiB");
    for (int i = 0; i < r->nstages; i++) {
        const struct dp_sim_stage *s = &r->stage[i];
        fprintf(f, "  %5d %10.*f %6.1f%% %10.*f %10.*f %10.*f %10.*f %10.*f %9.2f %9.2f\n",
                s->stage, u.prec, s->busy_s * u.k, 100 * s->bubble, u.prec, s->b.tp * u.k, u.prec,
                s->b.cp * u.k, u.prec, s->b.ep * u.k, u.prec, s->b.pp * u.k, u.prec, s->b.dp * u.k,
                cli_gib(s->peak_bytes), cli_gib(s->model_peak_bytes));
    }
    fprintf(f,
            "peak memory %.2f GiB on stage %d (simulated: live activations per micro-batch, "
            "gathered parameters; model GiB: `dplan memory`'s bound)\n",
            cli_gib(r->peak_bytes), r->peak_stage);
    if (capacity > 0 && r->peak_bytes > capacity)
        fprintf(f,
                "OOM: the peak exceeds the %.2f GiB usable per GPU; the times are what it would "
                "take if it fit (`dplan memory` lists fixes)\n",
                cli_gib(capacity));
    if (r->caveat)
        fprintf(f, "note: %s\n", r->caveat);
}

static cJSON *breakdown_json(const struct dp_sim_breakdown *b)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "compute_s", b->compute);
    cJSON_AddNumberToObject(o, "recompute_s", b->recompute);
    cJSON_AddNumberToObject(o, "tp_comm_s", b->tp);
    cJSON_AddNumberToObject(o, "cp_comm_s", b->cp);
    cJSON_AddNumberToObject(o, "ep_comm_s", b->ep);
    cJSON_AddNumberToObject(o, "pp_comm_s", b->pp);
    cJSON_AddNumberToObject(o, "dp_comm_s", b->dp);
    cJSON_AddNumberToObject(o, "bubble_s", b->bubble);
    cJSON_AddNumberToObject(o, "optimizer_s", b->optimizer);
    cJSON_AddNumberToObject(o, "other_s", b->other);
    return o;
}

cJSON *cli_sim_json(const struct dp_sim_result *r, const struct dp_step_cost *est)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schedule", dp_sim_schedule_name(r->schedule));
    cJSON_AddNumberToObject(o, "pp", r->pp);
    cJSON_AddNumberToObject(o, "vpp", r->vpp);
    cJSON_AddNumberToObject(o, "microbatches", (double)r->microbatches);
    cJSON_AddNumberToObject(o, "schedules", (double)r->schedules);
    if (r->caveat)
        cJSON_AddStringToObject(o, "caveat", r->caveat);
    cJSON_AddNumberToObject(o, "step_s", r->step_s);
    if (est)
        cJSON_AddNumberToObject(o, "estimate_step_s", est->step_time_s);
    cJSON_AddNumberToObject(o, "pipeline_span_s", r->pipe_s);
    cJSON_AddNumberToObject(o, "bubble", r->bubble);
    cJSON_AddNumberToObject(o, "operations", (double)r->ops);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)r->peak_bytes);
    cJSON_AddNumberToObject(o, "peak_stage", r->peak_stage);
    cJSON_AddNumberToObject(o, "busiest_stage", r->busiest);
    cJSON *st = cJSON_AddArrayToObject(o, "stages");
    for (int i = 0; i < r->nstages; i++) {
        const struct dp_sim_stage *s = &r->stage[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "stage", s->stage);
        cJSON_AddNumberToObject(e, "rank", (double)s->rank);
        cJSON_AddNumberToObject(e, "ranks", (double)s->ranks);
        cJSON_AddNumberToObject(e, "busy_s", s->busy_s);
        cJSON_AddNumberToObject(e, "idle_s", s->idle_s);
        cJSON_AddNumberToObject(e, "bubble", s->bubble);
        cJSON_AddNumberToObject(e, "first_pass_s", s->first_s);
        cJSON_AddNumberToObject(e, "last_pass_s", s->last_s);
        cJSON_AddItemToObject(e, "breakdown", breakdown_json(&s->b));
        cJSON *sb = cJSON_AddObjectToObject(e, "stream_busy_s");
        for (int k = 0; k < DP_SIM_STREAMS; k++)
            cJSON_AddNumberToObject(sb, dp_sim_stream_name((enum dp_sim_stream)k),
                                    s->stream_busy_s[k]);
        cJSON_AddNumberToObject(e, "peak_bytes", (double)s->peak_bytes);
        cJSON_AddNumberToObject(e, "peak_at_s", s->peak_at_s);
        cJSON_AddNumberToObject(e, "model_peak_bytes", (double)s->model_peak_bytes);
        cJSON_AddItemToArray(st, e);
    }
    return o;
}

/* ------------------------------------------------------------------ the Gantt */

enum { G_FWD, G_BWD, G_OPT, G_SEND, G_DP, G_FWD_ODD, G_BWD_ODD, G_W, G_COLORS };

int cli_svg_gantt(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_sim_result *r, struct dp_buf *out, struct dp_err *err)
{
    static const char *const names[G_COLORS] = {"forward",
                                                "backward",
                                                "optimizer",
                                                "pp send (lane)",
                                                "dp comm (lane)",
                                                "forward, odd chunks",
                                                "backward, odd chunks",
                                                "weight gradients (W)"};
    /* Okabe and Ito's blue, vermillion, bluish green, orange, reddish purple and sky blue,
     * a light vermillion and a grey: with interleaving (and DualPipeV's second stage) the
     * odd model chunks' passes lighter (the micro-batch is printed in the bar); DualPipeV's
     * deferred weight-gradient passes grey. */
    static const char *const colors[G_COLORS] = {"#0072b2", "#d55e00", "#009e73", "#e69f00",
                                                 "#cc79a7", "#56b4e9", "#f4a582", "#8c8c8c"};
    size_t nb = 0;
    for (int i = 0; i < r->nstages; i++)
        nb += r->stage[i].npass + r->stage[i].ncomm;
    struct dp_viz_bar *bar = malloc((nb ? nb : 1) * sizeof *bar);
    char(*rows)[24] = malloc((size_t)r->nstages * sizeof *rows);
    const char **rowp = malloc((size_t)r->nstages * sizeof *rowp);
    if (!bar || !rows || !rowp) {
        free(bar);
        free(rows);
        free(rowp);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    /* Milliseconds below 10 s: steps of a few seconds read better in ms. */
    const bool ms = r->step_s < 10;
    const double k = ms ? 1e3 : 1;
    size_t n = 0;
    for (int i = 0; i < r->nstages; i++) {
        const struct dp_sim_stage *s = &r->stage[i];
        snprintf(rows[i], sizeof rows[i], "stage %d", i);
        rowp[i] = rows[i];
        for (size_t j = 0; j < s->npass; j++) {
            const struct dp_sim_pass *ps = &s->pass[j];
            int color = ps->kind == DP_SIM_PASS_W
                            ? G_W
                            : (ps->fwd ? G_FWD : G_BWD) + (ps->chunk % 2 ? G_FWD_ODD : 0);
            bar[n++] = (struct dp_viz_bar){ps->t0 * k, ps->t1 * k, i, color, (int)ps->mb, false};
        }
        for (size_t j = 0; j < s->ncomm; j++) {
            const struct dp_sim_slice *c = &s->comm[j];
            bool opt = c->op == DP_SIM_OP_OPTIMIZER;
            bar[n++] = (struct dp_viz_bar){
                c->t0 * k, c->t1 * k, i, opt ? G_OPT : c->op == DP_SIM_OP_SEND ? G_SEND : G_DP,
                -1,        !opt};
        }
    }
    char sub[512], title[256], note[256];
    snprintf(title, sizeof title, "Simulated training step: %s on %d x %s", m->name,
             dp_cluster_gpus(cl), cl->gpu.name);
    char sched[64] = "";
    if (r->schedules > 1)
        snprintf(sched, sizeof sched, "%lld schedules of ", (long long)r->schedules);
    snprintf(sub, sizeof sub,
             "tp=%d pp=%d vpp=%d dp=%d cp=%d, %s%lld micro-batches of %lld, %s schedule; step "
             "%.4g s, bubble %.1f%% of the pipeline span",
             l->tp, l->pp, l->vpp, l->dp, l->cp, sched, (long long)r->microbatches,
             (long long)l->mbs, dp_sim_schedule_name(r->schedule), r->step_s, 100 * r->bubble);
    snprintf(note, sizeof note,
             "numbers in the bars: micro-batch; dashed lines: the pipeline span (its idle area "
             "is the bubble)");
    double span0 = 1e300;
    for (int i = 0; i < r->nstages; i++)
        if (r->stage[i].npass && r->stage[i].first_s < span0)
            span0 = r->stage[i].first_s;
    if (span0 > 1e299)
        span0 = 0;
    struct dp_viz_gantt g = {.title = title,
                             .subtitle = sub,
                             .x_label = ms ? "time from the step's start (ms)"
                                           : "time from the step's start (s)",
                             .y_label = "pipeline stage (one GPU of each)",
                             .nrows = r->nstages,
                             .row = rowp,
                             .bar = bar,
                             .nbar = n,
                             .ncolors = G_COLORS, /* the legend shows those used */
                             .color_name = names,
                             .colors = colors,
                             .x_max = r->step_s * k,
                             .span0 = span0 * k,
                             .span1 = (span0 + r->pipe_s) * k,
                             .note = note};
    int rc = dp_viz_gantt(&g, out, err);
    free(bar);
    free(rows);
    free(rowp);
    return rc;
}

int cli_parse_ranks(const char *s, long **out, size_t *n, struct dp_err *err)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    const char *p = s;
    while (*p) {
        char *e;
        errno = 0;
        long a = strtol(p, &e, 10), b;
        if (e == p || a < 0 || errno)
            goto bad;
        b = a;
        if (*e == '-') {
            p = e + 1;
            b = strtol(p, &e, 10);
            if (e == p || b < a || errno)
                goto bad;
        }
        if (b - a > 65536 || *n + (size_t)(b - a + 1) > 65536)
            goto bad;
        for (long v = a; v <= b; v++) {
            if (*n == cap) {
                cap = cap ? 2 * cap : 16;
                long *q = realloc(*out, cap * sizeof *q);
                if (!q) {
                    free(*out);
                    *out = NULL;
                    return dp_err_set(err, DP_ENOMEM, "out of memory");
                }
                *out = q;
            }
            (*out)[(*n)++] = v;
        }
        if (*e == ',')
            e++;
        else if (*e)
            goto bad;
        p = e;
    }
    if (*n)
        return 0;
bad:
    free(*out);
    *out = NULL;
    *n = 0;
    return dp_err_set(err, DP_EUSAGE,
                      "--ranks: expected global ranks like 0,8-15 (at most 65536), got \"%s\"", s);
}
