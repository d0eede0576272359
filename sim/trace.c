/*
 * The simulated step as a trace for Perfetto (ui.perfetto.dev) and
 * chrome://tracing, in the Trace Event Format (Google's "Trace Event Format"
 * document, the JSON Object Format): {"traceEvents": [...], "displayTimeUnit",
 * "otherData"}. Each GPU shown is a process (pid = its global rank), each stream
 * a thread (tid = enum dp_sim_stream); operations are complete events (ph "X",
 * ts and dur in microseconds), a pass encloses its operations on the compute
 * thread; metadata events (ph "M") name the processes and threads and fix their
 * order; counter events (ph "C") give the GPU's memory. Times are printed with
 * three decimals (ns), start and end rounded alike so that nested slices stay
 * nested; the same result gives the same bytes.
 */
#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Microseconds with three decimals, never "-0.000". */
static double us(double s)
{
    double v = round(s * 1e9) / 1e3;
    return v == 0 ? 0 : v;
}

static const char *phase_name(int ph)
{
    switch (ph) {
    case DP_SIM_FWD: return "forward";
    case DP_SIM_BWD: return "backward";
    case DP_SIM_RECOMPUTE: return "recompute";
    default: return "step";
    }
}

static const char *phase_tag(int ph)
{
    switch (ph) {
    case DP_SIM_FWD: return "F";
    case DP_SIM_BWD: return "B";
    case DP_SIM_RECOMPUTE: return "R";
    default: return "";
    }
}

static void sep(struct dp_buf *b, bool *first)
{
    dp_buf_puts(b, *first ? "\n" : ",\n");
    *first = false;
}

static void event_x(struct dp_buf *b, bool *first, long pid, int tid, const char *name,
                    const char *cat, double t0, double t1, const char *args)
{
    sep(b, first);
    double a = us(t0), e = us(t1);
    dp_buf_printf(b,
                  "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                  "\"pid\":%ld,\"tid\":%d,\"args\":{%s}}",
                  name, cat, a, e - a > 0 ? e - a : 0, pid, tid, args);
}

/* The slice's name ("F mb3 c1 L12 attention", "send activations mb3 c1") and its args. */
static void slice_text(const struct dp_sim_slice *s, char *name, size_t cap, char *args,
                       size_t acap)
{
    char where[64] = "";
    size_t n = 0;
    if (s->mb >= 0)
        n += (size_t)snprintf(where + n, sizeof where - n, " mb%d", (int)s->mb);
    if (s->chunk >= 0 && n < sizeof where)
        n += (size_t)snprintf(where + n, sizeof where - n, " c%d", (int)s->chunk);
    if (s->layer >= 0 && n < sizeof where)
        snprintf(where + n, sizeof where - n, " L%d", (int)s->layer);
    const char *op = dp_sim_op_name((enum dp_sim_op)s->op);
    switch (s->op) {
    case DP_SIM_OP_WAIT:
        snprintf(name, cap, "%s%s wait %s", phase_tag(s->phase), where,
                 dp_sim_op_name((enum dp_sim_op)s->of));
        break;
    case DP_SIM_OP_SEND:
        snprintf(name, cap, "send %s%s", s->of ? "gradients" : "activations", where);
        break;
    case DP_SIM_OP_TP:
    case DP_SIM_OP_CP:
    case DP_SIM_OP_EP:
        snprintf(name, cap, "%s%s %s %s", phase_tag(s->phase), where,
                 dp_sim_op_name((enum dp_sim_op)s->of), op);
        break;
    case DP_SIM_OP_GATHER:
    case DP_SIM_OP_REDUCE:
    case DP_SIM_OP_OPTIMIZER:
    case DP_SIM_OP_EMB_SYNC: snprintf(name, cap, "%s%s", op, where); break;
    default: snprintf(name, cap, "%s%s %s", phase_tag(s->phase), where, op); break;
    }
    snprintf(args, acap, "\"phase\":\"%s\",\"microbatch\":%d,\"chunk\":%d,\"layer\":%d",
             phase_name(s->phase), (int)s->mb, (int)s->chunk, (int)s->layer);
}

static void stage_events(struct dp_buf *b, bool *first, const struct dp_sim_stage *st, long pid,
                         bool passes_only)
{
    char name[128], args[160];
    const double gib = 1024.0 * 1024.0 * 1024.0;
    for (size_t i = 0; i < st->npass; i++) {
        const struct dp_sim_pass *ps = &st->pass[i];
        /* DualPipeV's zero-bubble split: Bi the input gradients, W the weight gradients */
        static const char *const tag[] = {"F", "B", "Bi", "W"},
                                 *phase[] = {"forward", "backward", "input gradients",
                                             "weight gradients"};
        const int k = ps->fwd                      ? 0
                      : ps->kind == DP_SIM_PASS_BI ? 2
                      : ps->kind == DP_SIM_PASS_W  ? 3
                                                   : 1;
        snprintf(name, sizeof name, "%s mb%d c%d", tag[k], (int)ps->mb, (int)ps->chunk);
        snprintf(args, sizeof args, "\"phase\":\"%s\",\"microbatch\":%d,\"chunk\":%d", phase[k],
                 (int)ps->mb, (int)ps->chunk);
        event_x(b, first, pid, DP_SIM_COMPUTE, name, "pass", ps->t0, ps->t1, args);
    }
    /* every operation, or with passes_only the communication lane's and the optimizer */
    const struct dp_sim_slice *sl = passes_only ? st->comm : st->slice;
    size_t n = passes_only ? st->ncomm : st->nslice;
    for (size_t i = 0; i < n; i++) {
        slice_text(&sl[i], name, sizeof name, args, sizeof args);
        event_x(b, first, pid, sl[i].stream, name, dp_sim_stream_name(sl[i].stream), sl[i].t0,
                sl[i].t1, args);
    }
    for (size_t i = 0; i < st->nmem; i++) {
        sep(b, first);
        double all = (double)st->mem[i].bytes / gib, act = (double)st->mem[i].act_bytes / gib;
        dp_buf_printf(b,
                      "{\"name\":\"memory (GiB)\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%ld,"
                      "\"args\":{\"activations\":%.4f,\"other\":%.4f}}",
                      us(st->mem[i].t), pid, act, all - act);
    }
}

static void metadata(struct dp_buf *b, bool *first, long pid, const char *pname, long sort)
{
    sep(b, first);
    dp_buf_printf(b, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%ld,\"args\":{\"name\":\"",
                  pid);
    dp_buf_puts(b, pname);
    dp_buf_puts(b, "\"}}");
    sep(b, first);
    dp_buf_printf(b,
                  "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%ld,\"args\":"
                  "{\"sort_index\":%ld}}",
                  pid, sort);
    for (int t = 0; t < DP_SIM_STREAMS; t++) {
        sep(b, first);
        dp_buf_printf(b,
                      "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":%d,\"args\":"
                      "{\"name\":\"%s\"}}",
                      pid, t, dp_sim_stream_name((enum dp_sim_stream)t));
        sep(b, first);
        dp_buf_printf(b,
                      "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%ld,\"tid\":%d,"
                      "\"args\":{\"sort_index\":%d}}",
                      pid, t, t);
    }
}

/* JSON string contents: the title is the caller's text. */
static void json_text(struct dp_buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            dp_buf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            dp_buf_printf(b, "\\u%04x", *p);
        else
            dp_buf_printf(b, "%c", *p);
    }
}

int dp_sim_trace(const struct dp_sim_result *r, const struct dp_sim_input *in,
                 const struct dp_sim_trace_opts *o, struct dp_buf *out, struct dp_err *err)
{
    const long per = in->ranks_per_stage > 0 ? in->ranks_per_stage : 1;
    const long world = per * r->nstages;
    const size_t n = o->ranks ? o->nranks : (size_t)r->nstages;
    for (size_t i = 0; i < n; i++) {
        long rank = o->ranks ? o->ranks[i] : r->stage[i].rank;
        if (rank < 0 || rank >= world)
            return dp_err_set(err, DP_EINVAL, "--ranks: rank %ld is outside the job's %ld GPUs",
                              rank, world);
        const struct dp_sim_stage *st = &r->stage[rank / per];
        if (!o->passes_only && st->nslice == 0 && st->npass > 0)
            return dp_err_set(err, DP_EINVAL,
                              "trace: stage %d was simulated without recording its operations",
                              st->stage);
    }
    dp_buf_puts(out, "{\"traceEvents\":[");
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        long rank = o->ranks ? o->ranks[i] : r->stage[i].rank;
        int stage = (int)(rank / per);
        const struct dp_sim_stage *st = &r->stage[stage];
        /* Megatron's numbering: rank = tp_i + tp (cp_i + cp (dp_i + dp pp_i)) */
        long k = rank % per;
        int tpi = (int)(k % in->tp), cpi = (int)(k / in->tp % in->cp),
            dpi = (int)(k / ((long)in->tp * in->cp));
        char pname[160];
        if (o->ranks)
            snprintf(pname, sizeof pname, "rank %ld: stage %d (tp %d, cp %d, dp %d)", rank, stage,
                     tpi, cpi, dpi);
        else
            snprintf(pname, sizeof pname, "stage %d (rank %ld; the stage's %ld GPUs run alike)",
                     stage, rank, per);
        metadata(out, &first, rank, pname, rank);
        stage_events(out, &first, st, rank, o->passes_only);
    }
    dp_buf_puts(out, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"title\":\"");
    json_text(out, o->title ? o->title : "dplan simulate");
    dp_buf_printf(out,
                  "\",\"schedule\":\"%s\",\"pipeline_stages\":%d,\"model_chunks\":%d,"
                  "\"microbatches\":%lld,\"step_s\":%.9f,\"bubble\":%.6f}\n}\n",
                  dp_sim_schedule_name(r->schedule), r->pp, r->vpp, (long long)r->microbatches,
                  r->step_s, r->bubble);
    if (out->failed)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    return 0;
}
