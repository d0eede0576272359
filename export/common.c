/*
 * What every export shares: the format names, the dispatcher, refusals,
 * the header that says what the plan is, shell quoting and the rank-to-host
 * map of the launch scripts.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *help;
} formats[DP_EXPORT_FORMATS] = {
    [DP_EXPORT_MEGATRON] =
        {"megatron", "Megatron-LM / Megatron-Core arguments as bash arrays (pretrain_gpt.py)"},
    [DP_EXPORT_DEEPSPEED] = {"deepspeed",
                             "a script writing ds_config.json and a hostfile, then the deepspeed "
                             "launcher line"},
    [DP_EXPORT_DEEPSPEED_JSON] = {"deepspeed-json", "the DeepSpeed config JSON alone"},
    [DP_EXPORT_TORCHTITAN] = {"torchtitan",
                              "a torchtitan recipe function (Python) and the same as --section."
                              "option overrides"},
    [DP_EXPORT_TORCHRUN] = {"torchrun", "torchrun per node (static rendezvous) and the rank map"},
    [DP_EXPORT_MPIRUN] = {"mpirun", "one Open MPI mpirun line, a hostfile and the rank map"},
    [DP_EXPORT_SLURM] = {"slurm", "an sbatch script running srun, one task per GPU, and the "
                                  "rank map"},
};

const char *dp_export_format_name(enum dp_export_format f)
{
    return (unsigned)f < DP_EXPORT_FORMATS ? formats[f].name : NULL;
}

const char *dp_export_format_help(enum dp_export_format f)
{
    return (unsigned)f < DP_EXPORT_FORMATS ? formats[f].help : NULL;
}

int dp_export_format_parse(const char *name, enum dp_export_format *out, struct dp_err *err)
{
    char list[256] = "";
    size_t n = 0;
    for (int i = 0; i < DP_EXPORT_FORMATS; i++) {
        if (strcmp(name, formats[i].name) == 0) {
            *out = (enum dp_export_format)i;
            return 0;
        }
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", formats[i].name);
    }
    return dp_err_set(err, DP_EUSAGE, "--format: expected one of %s, got \"%s\"", list, name);
}

void dp_export_opts_default(struct dp_export_opts *o)
{
    memset(o, 0, sizeof *o);
}

int dp__int(struct dp__val *v, long long i)
{
    v->kind = DP__INT;
    v->i = i;
    return 1;
}

int dp__bool(struct dp__val *v, bool b)
{
    v->kind = DP__BOOL;
    v->b = b;
    return 1;
}

int dp__str(struct dp__val *v, const char *s)
{
    v->kind = DP__STR;
    snprintf(v->s, sizeof v->s, "%s", s);
    return 1;
}

int dp__flag(struct dp__val *v)
{
    v->kind = DP__FLAG;
    return 1;
}

int dp__code(struct dp__val *v, const char *s)
{
    v->kind = DP__CODE;
    snprintf(v->s, sizeof v->s, "%s", s);
    return 1;
}

int dp__refuse(const struct dp__ctx *c, const char *knob, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dp_err_set(c->err, DP_EUSAGE, "%s: %s: %s", c->o->plan_file ? c->o->plan_file : "plan",
                      knob, what);
}

int dp__refuse_mtp(const struct dp__ctx *c, const char *fw, const char *why)
{
    if (c->l->mtp_layers <= 0)
        return 0;
    return dp__refuse(c, "layout.mtp_layers",
                      "%d multi-token-prediction layers have no %s equivalent: %s (Megatron-Core's "
                      "--mtp-num-layers: --format megatron)",
                      c->l->mtp_layers, fw, why);
}

int dp__refuse_dualpipev(const struct dp__ctx *c, const char *fw)
{
    if (c->l->schedule != DP_SCHED_DUALPIPEV)
        return 0;
    return dp__refuse(c, "layout.pipeline_schedule",
                      "dualpipev has no %s equivalent: it is PyTorch's ScheduleDualPipeV "
                      "(--format torchtitan)",
                      fw);
}

int dp__refuse_fp8_attention(const struct dp__ctx *c, const char *fw)
{
    if (!c->l->fp8_attention)
        return 0;
    return dp__refuse(c, "layout.fp8_attention",
                      "FP8 attention has no %s equivalent: it is Transformer Engine's fp8_dpa "
                      "under Megatron-Core (--fp8-dot-product-attention: --format megatron)",
                      fw);
}

/* Architecture dplan models but no export writes: the launched run would train another
 * model (full attention, no sinks) than the plan estimated. */
static int model_exportable(const struct dp__ctx *c)
{
    if (c->m->window > 0 && c->m->window_layers > 0)
        return dp__refuse(c, "model.sliding_window",
                          "sliding-window attention (%lld tokens on %lld layers) is not written "
                          "by the exports: the launched model would attend fully",
                          (long long)c->m->window, (long long)c->m->window_layers);
    if (c->m->attn_sinks)
        return dp__refuse(c, "model.attention_sinks",
                          "attention sinks (gpt-oss) are not written by the exports");
    if (c->m->qk_norm_full)
        return dp__refuse(c, "model.qk_norm_full",
                          "q/k norms over all heads (OLMo 2) are not written by the exports: "
                          "Megatron's --qk-layernorm and the frameworks' q/k norms are per head");
    return 0;
}

int dp__run_checks(const struct dp__ctx *c, const dp__check_fn *checks, int n)
{
    int rc0 = model_exportable(c);
    if (rc0)
        return rc0;
    for (int i = 0; i < n; i++) {
        int rc = checks[i](c);
        if (rc)
            return rc;
    }
    return 0;
}

int dp__need_cluster(const struct dp__ctx *c, const char *format)
{
    if (c->p->has_cluster)
        return 0;
    return dp_err_set(c->err, DP_EINVAL,
                      "%s: cluster: missing: --format %s needs the nodes and GPUs per node "
                      "(write the plan with `dplan suggest -o`, or add a \"cluster\" object)",
                      c->o->plan_file ? c->o->plan_file : "plan", format);
}

void dp__header(const struct dp__ctx *c, struct dp_buf *b, const char *cm)
{
    const struct dp_plan *p = c->p;
    const struct dp_layout *l = c->l;
    char lay[160];
    dp_layout_format(l, lay, sizeof lay);
    dp_buf_printf(b, "%s plan %s: %s, %s, gbs=%lld seq=%lld %s\n", cm,
                  c->o->plan_file ? c->o->plan_file : "(unnamed)", c->m->name, lay,
                  (long long)l->gbs, (long long)l->seq_len, dp_precision_name(l->precision));
    if (p->has_cluster)
        dp_buf_printf(b, "%s cluster %s: %d nodes x %d %s = %d GPUs\n", cm, p->cluster.name,
                      p->cluster.nodes, p->cluster.gpus_per_node, p->cluster.gpu.name,
                      dp_cluster_gpus(&p->cluster));
    if (p->has_prediction)
        dp_buf_printf(b,
                      "%s predicted by dplan: %.3f s/step, %.0f tokens/s, peak %.2f GiB per GPU\n",
                      cm, p->prediction.step_time_s, p->prediction.tokens_per_s,
                      (double)p->prediction.peak_bytes / (1024.0 * 1024.0 * 1024.0));
}

void dp__shell_word(struct dp_buf *b, const char *s)
{
    bool plain = s[0] != '\0';
    for (const char *q = s; *q && plain; q++)
        plain = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
                strchr("_./:=,+-", *q);
    if (plain) {
        dp_buf_puts(b, s);
        return;
    }
    dp_buf_puts(b, "'");
    for (const char *q = s; *q; q++) {
        if (*q == '\'')
            dp_buf_puts(b, "'\\''");
        else
            dp_buf_printf(b, "%c", *q);
    }
    dp_buf_puts(b, "'");
}

void dp__program_cmd(const struct dp__ctx *c, char *out, size_t cap)
{
    const char *prog = c->o->program ? c->o->program : "train.py";
    size_t first = strcspn(prog, " \t");
    bool py = first >= 3 && strncmp(prog + first - 3, ".py", 3) == 0;
    snprintf(out, cap, "%s%s", py ? "python " : "", prog);
}

/* Sorted distinct values as "0-3" or "0,2,5-6". */
static void value_set(struct dp_buf *b, int *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            int t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    bool first = true;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && (v[j + 1] == v[j] || v[j + 1] == v[j] + 1))
            j++;
        dp_buf_printf(b, "%s%d", first ? "" : ",", v[i]);
        if (v[j] != v[i])
            dp_buf_printf(b, "-%d", v[j]);
        first = false;
        i = j + 1;
    }
}

void dp__rank_map(const struct dp__ctx *c, struct dp_buf *b)
{
    const struct dp_layout *l = c->l;
    const struct dp_cluster *cl = &c->p->cluster;
    const int G = cl->gpus_per_node, N = cl->nodes;
    const char *host = c->o->host_prefix ? c->o->host_prefix : "node";
    const int tp = l->tp, cp = l->cp, dp = l->dp, ep = l->ep;
    dp_buf_printf(b,
                  "# rank map (Megatron's order tp-cp-ep-dp-pp, TP fastest; torchtitan's mesh "
                  "[pp, dp_replicate,\n"
                  "#   dp_shard, cp, tp] and DeepSpeed's [pipe, data, model] order ranks the "
                  "same way):\n"
                  "#   rank = tp_rank + %d x (cp_rank + %d x (dp_rank + %d x pp_rank)), "
                  "node = rank / %d, local rank = rank %% %d\n",
                  tp, cp, dp, G, G);
    if (ep > 1)
        dp_buf_printf(b,
                      "#   expert layers: ep_rank = (rank / %d) %% %d within each stage's %d "
                      "ranks (expert TP = tp)\n",
                      tp, ep, tp * cp * dp);
    int *vals = malloc(sizeof *vals * (size_t)G);
    if (!vals) {
        b->failed = true;
        return;
    }
    for (int n = 0; n < N; n++) {
        if (N > 32 && n == 8)
            dp_buf_printf(b, "#   ... %d nodes more in the same pattern ...\n", N - 16);
        if (N > 32 && n >= 8 && n < N - 8)
            continue;
        char name[80];
        snprintf(name, sizeof name, "%s%d", host, n);
        dp_buf_printf(b, "#   %-10s ranks %d-%d:", name, n * G, n * G + G - 1);
        static const char *const dims[] = {"pp", "dp", "cp", "ep", "tp"};
        for (int d = 0; d < 5; d++) {
            if ((d == 2 && cp == 1) || (d == 3 && ep == 1))
                continue;
            for (int k = 0; k < G; k++) {
                int r = n * G + k, in_stage = r % (tp * cp * dp);
                switch (d) {
                case 0: vals[k] = r / (tp * cp * dp); break;
                case 1: vals[k] = (r / (tp * cp)) % dp; break;
                case 2: vals[k] = (r / tp) % cp; break;
                case 3: vals[k] = (in_stage / tp) % ep; break;
                default: vals[k] = r % tp; break;
                }
            }
            dp_buf_printf(b, " %s ", dims[d]);
            value_set(b, vals, G);
        }
        dp_buf_puts(b, "\n");
    }
    free(vals);
}

int dp_export(const struct dp_plan *p, enum dp_export_format f, const struct dp_export_opts *o,
              struct dp_buf *out, struct dp_err *err)
{
    struct dp_export_opts def;
    if (!o) {
        dp_export_opts_default(&def);
        o = &def;
    }
    struct dp__ctx c = {.p = p, .m = &p->model, .l = &p->layout, .o = o, .err = err};
    int rc;
    switch (f) {
    case DP_EXPORT_MEGATRON: rc = dp__export_megatron(&c, out); break;
    case DP_EXPORT_DEEPSPEED: rc = dp__export_deepspeed(&c, out, false); break;
    case DP_EXPORT_DEEPSPEED_JSON: rc = dp__export_deepspeed(&c, out, true); break;
    case DP_EXPORT_TORCHTITAN: rc = dp__export_torchtitan(&c, out); break;
    case DP_EXPORT_TORCHRUN:
    case DP_EXPORT_MPIRUN:
    case DP_EXPORT_SLURM: rc = dp__export_launch(&c, f, out); break;
    default: return dp_err_set(err, DP_EUSAGE, "unknown export format %d", (int)f);
    }
    if (!rc && out->failed)
        rc = dp_err_set(err, DP_ENOMEM, "out of memory while writing the export");
    return rc;
}
