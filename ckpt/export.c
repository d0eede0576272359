/*
 * `dplan ckpt export` (ckpt.h): one checkpoint gathered into a single
 * safetensors file of whole tensors, under dplan's names or as Hugging Face
 * transformers stores GPT-2 (GPT2LMHeadModel: fused c_attn, Conv1D weights
 * [in, out]) and Llama (LlamaForCausalLM) models. The file is written by the
 * same writer as the end-of-run model.safetensors (dp_ckpt_st_write_file).
 */
#include "ckpt.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum xop { X_COPY = 0, X_T, X_CAT3, X_CAT3_T };

struct xt {
    char key[96];
    int ndim;
    int64_t shape[2];
    enum xop op;
    struct dp_ckpt_tensor *in[3];
};

/* dplan name -> Hugging Face name, per model family. */
struct hf_pair {
    const char *from, *to;
};

struct hf_family {
    const struct hf_pair *top; /* whole names ("wte") */
    int ntop;
    const char *layer_prefix;    /* then the layer number and "." */
    const struct hf_pair *layer; /* per layer, after "h.L." */
    int nlayer;
    const struct hf_pair *trans; /* per layer, stored transposed */
    int ntrans;
    bool fused_qkv; /* q, k, v as one c_attn weight and bias */
};

#define HF_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const struct hf_pair gpt2_top[] = {{"wte", "transformer.wte.weight"},
                                          {"wpe", "transformer.wpe.weight"},
                                          {"lnf.w", "transformer.ln_f.weight"},
                                          {"lnf.b", "transformer.ln_f.bias"}};
static const struct hf_pair gpt2_layer[] = {
    {"ln1.w", "ln_1.weight"},     {"ln1.b", "ln_1.bias"},          {"ln2.w", "ln_2.weight"},
    {"ln2.b", "ln_2.bias"},       {"attn.bo", "attn.c_proj.bias"}, {"mlp.b1", "mlp.c_fc.bias"},
    {"mlp.b2", "mlp.c_proj.bias"}};
/* Conv1D stores [in, out]: the transposes of nn.Linear's [out, in]. */
static const struct hf_pair gpt2_trans[] = {{"attn.wo", "attn.c_proj.weight"},
                                            {"mlp.w1", "mlp.c_fc.weight"},
                                            {"mlp.w2", "mlp.c_proj.weight"}};
static const struct hf_family hf_gpt2 = {.top = gpt2_top,
                                         .ntop = HF_N(gpt2_top),
                                         .layer_prefix = "transformer.h.",
                                         .layer = gpt2_layer,
                                         .nlayer = HF_N(gpt2_layer),
                                         .trans = gpt2_trans,
                                         .ntrans = HF_N(gpt2_trans),
                                         .fused_qkv = true};

static const struct hf_pair llama_top[] = {{"wte", "model.embed_tokens.weight"},
                                           {"lnf.w", "model.norm.weight"},
                                           {"lm_head", "lm_head.weight"}};
static const struct hf_pair llama_layer[] = {
    {"ln1.w", "input_layernorm.weight"},    {"ln2.w", "post_attention_layernorm.weight"},
    {"attn.wq", "self_attn.q_proj.weight"}, {"attn.wk", "self_attn.k_proj.weight"},
    {"attn.wv", "self_attn.v_proj.weight"}, {"attn.bq", "self_attn.q_proj.bias"},
    {"attn.bk", "self_attn.k_proj.bias"},   {"attn.bv", "self_attn.v_proj.bias"},
    {"attn.wo", "self_attn.o_proj.weight"}, {"mlp.w_gate", "mlp.gate_proj.weight"},
    {"mlp.w_up", "mlp.up_proj.weight"},     {"mlp.w2", "mlp.down_proj.weight"}};
static const struct hf_family hf_llama = {.top = llama_top,
                                          .ntop = HF_N(llama_top),
                                          .layer_prefix = "model.layers.",
                                          .layer = llama_layer,
                                          .nlayer = HF_N(llama_layer)};

static const char *hf_lookup(const struct hf_pair *p, int n, const char *from)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(from, p[i].from))
            return p[i].to;
    return NULL;
}

static int hf_plan(struct dp_ckpt *s, struct xt *x, int *nx, struct dp_err *err)
{
    const struct dp_model *m = &s->meta.model;
    bool gpt2 = m->norm == DP_NORM_LAYERNORM && m->ffn == DP_FFN_GELU && m->pos == DP_POS_LEARNED &&
                m->tied_embeddings && m->qkv_bias && m->out_bias && m->mlp_bias;
    bool llama = m->norm == DP_NORM_RMSNORM && m->ffn == DP_FFN_SWIGLU && m->pos == DP_POS_ROPE &&
                 !m->out_bias && !m->mlp_bias;
    if (!gpt2 && !llama)
        return dp_err_set(err, DP_EINVAL,
                          "--names hf: model %s is neither GPT-2 style (layernorm, gelu, learned "
                          "positions, biases, tied embeddings) nor Llama style (rmsnorm, swiglu, "
                          "rope, no output/MLP biases); export with dplan names",
                          m->name);
    const struct hf_family *fam = gpt2 ? &hf_gpt2 : &hf_llama;
    *nx = 0;
    for (int i = 0; i < s->nt; i++) {
        struct dp_ckpt_tensor *t = &s->t[i];
        if (t->tied)
            continue;
        struct xt *o = &x[*nx];
        memset(o, 0, sizeof *o);
        o->op = X_COPY;
        o->in[0] = t;
        o->ndim = t->ndim;
        o->shape[0] = t->rows;
        o->shape[1] = t->cols;
        int L = -1, k = 0;
        char rest[64] = "";
        if (sscanf(t->name, "h.%d.%n", &L, &k) == 1 && k > 0)
            snprintf(rest, sizeof rest, "%s", t->name + k);
        const char *name = hf_lookup(fam->top, fam->ntop, t->name);
        char buf[96];
        const char *ln = NULL;
        if (!name && L >= 0 && (ln = hf_lookup(fam->layer, fam->nlayer, rest))) {
            snprintf(buf, sizeof buf, "%s%d.%s", fam->layer_prefix, L, ln);
            name = buf;
        }
        if (!name && L >= 0 && (ln = hf_lookup(fam->trans, fam->ntrans, rest))) {
            snprintf(buf, sizeof buf, "%s%d.%s", fam->layer_prefix, L, ln);
            name = buf;
            o->op = X_T;
            o->shape[0] = t->cols;
            o->shape[1] = t->rows;
        }
        if (fam->fused_qkv) {
            /* q, k, v fused as c_attn ([h, 3h] weight, [3h] bias), k and v skipped. */
            bool wq = !strcmp(rest, "attn.wq"), bq = !strcmp(rest, "attn.bq");
            if (!name && L >= 0 && (wq || bq)) {
                char kn[64], vn[64];
                snprintf(kn, sizeof kn, "h.%d.attn.%ck", L, wq ? 'w' : 'b');
                snprintf(vn, sizeof vn, "h.%d.attn.%cv", L, wq ? 'w' : 'b');
                o->in[1] = (struct dp_ckpt_tensor *)dp_ckpt_find(s, kn);
                o->in[2] = (struct dp_ckpt_tensor *)dp_ckpt_find(s, vn);
                if (!o->in[1] || !o->in[2])
                    return dp_err_set(err, DP_EINVAL, "%s: layer %d lacks k or v", s->dir, L);
                int64_t out = t->rows + o->in[1]->rows + o->in[2]->rows;
                snprintf(buf, sizeof buf, "%s%d.attn.c_attn.%s", fam->layer_prefix, L,
                         wq ? "weight" : "bias");
                name = buf;
                o->op = wq ? X_CAT3_T : X_CAT3;
                o->shape[0] = wq ? t->cols : out;
                o->shape[1] = wq ? out : 1;
            }
            if (!name && L >= 0 &&
                (!strcmp(rest, "attn.wk") || !strcmp(rest, "attn.wv") || !strcmp(rest, "attn.bk") ||
                 !strcmp(rest, "attn.bv")))
                continue;
        }
        if (!name)
            return dp_err_set(err, DP_EINVAL, "--names hf: no Hugging Face name for tensor %s",
                              t->name);
        snprintf(o->key, sizeof o->key, "%s", name);
        if (o->ndim == 2 || o->op == X_T || o->op == X_CAT3_T)
            o->ndim = 2;
        if (o->op == X_CAT3)
            o->ndim = 1;
        (*nx)++;
    }
    return 0;
}

/* What export_fill needs: the plan, the checkpoint, a scratch tensor. */
struct xfill {
    struct dp_ckpt *s;
    const struct xt *x;
    char *part;
    struct dp_err *err;
};

/* Tensor i of the plan into buf: gathered, and transposed or concatenated as it says. */
static int export_fill(int i, void *buf, void *ctx)
{
    struct xfill *f = ctx;
    const struct xt *o = &f->x[i];
    struct dp_ckpt_tensor *t = o->in[0];
    const size_t es = (size_t)dp_ckpt_st_dtype_size(f->s->meta.dtype);
    char *full = buf, *part = f->part;
    int rc = 0;
    if (o->op == X_COPY)
        return dp__ckpt_gather(f->s, t, full, f->err);
    if (o->op == X_T) {
        rc = dp__ckpt_gather(f->s, t, part, f->err);
        for (int64_t r = 0; !rc && r < t->rows; r++)
            for (int64_t c = 0; c < t->cols; c++)
                memcpy(full + (c * t->rows + r) * es, part + (r * t->cols + c) * es, es);
        return rc;
    }
    /* Rows of q, then k, then v: [out, in]; CAT3_T stores the transpose. */
    int64_t row = 0, out = o->op == X_CAT3_T ? o->shape[1] : o->shape[0];
    for (int j = 0; j < 3 && !rc; j++) {
        struct dp_ckpt_tensor *u = o->in[j];
        rc = dp__ckpt_gather(f->s, u, part, f->err);
        for (int64_t r = 0; !rc && r < u->rows; r++)
            for (int64_t c = 0; c < u->cols; c++) {
                if (o->op == X_CAT3)
                    memcpy(full + (row + r) * es, part + r * es, es);
                else
                    memcpy(full + (c * out + row + r) * es, part + (r * u->cols + c) * es, es);
            }
        row += u->rows;
    }
    return rc;
}

static int export_write(struct dp_ckpt *s, const char *out_file, enum dp_ckpt_names names,
                        struct dp_ckpt_export_result *res, struct dp_err *err)
{
    struct xt *x = calloc((size_t)s->nt, sizeof *x);
    if (!x)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int nx = 0, rc = 0;
    if (names == DP_CKPT_NAMES_HF) {
        rc = hf_plan(s, x, &nx, err);
    } else {
        for (int i = 0; i < s->nt; i++) {
            if (s->t[i].tied)
                continue;
            struct xt *o = &x[nx++];
            snprintf(o->key, sizeof o->key, "%s", s->t[i].name);
            o->ndim = s->t[i].ndim;
            o->shape[0] = s->t[i].rows;
            o->shape[1] = s->t[i].cols;
            o->in[0] = &s->t[i];
        }
    }
    const int64_t es = dp_ckpt_st_dtype_size(s->meta.dtype);
    struct dp_st_tensor *ht = calloc((size_t)(nx ? nx : 1), sizeof *ht);
    int64_t maxb = es;
    for (int i = 0; !rc && ht && i < nx; i++) {
        snprintf(ht[i].key, sizeof ht[i].key, "%s", x[i].key);
        ht[i].dtype = s->meta.dtype;
        ht[i].ndim = x[i].ndim;
        ht[i].shape[0] = x[i].shape[0];
        ht[i].shape[1] = x[i].shape[1];
        ht[i].bytes = x[i].shape[0] * (x[i].ndim == 2 ? x[i].shape[1] : 1) * es;
        maxb = ht[i].bytes > maxb ? ht[i].bytes : maxb;
    }
    char sstep[32];
    snprintf(sstep, sizeof sstep, "%d", s->meta.step);
    const char *meta[] = {"format",   "pt",
                          "producer", "dplan ckpt export",
                          "model",    s->meta.model.name,
                          "step",     sstep,
                          "names",    names == DP_CKPT_NAMES_HF ? "huggingface" : "dplan",
                          NULL};
    struct xfill f = {.s = s, .x = x, .part = malloc((size_t)maxb), .err = err};
    if (!rc && (!ht || !f.part))
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
    int64_t bytes = 0;
    if (!rc)
        rc = dp_ckpt_st_write_file(out_file, ht, nx, meta, export_fill, &f, &bytes, err);
    if (!rc) {
        res->tensors = nx;
        res->bytes = bytes;
    }
    free(f.part);
    free(ht);
    free(x);
    return rc;
}

int dp_ckpt_export(const char *dir, int step, const char *out_file, enum dp_ckpt_names names,
                   struct dp_ckpt_export_result *res, struct dp_err *err)
{
    memset(res, 0, sizeof *res);
    struct dp_ckpt_info *list;
    int n;
    int rc = dp_ckpt_list(dir, false, &list, &n, err);
    if (rc)
        return rc;
    /* Newest first: the requested step, or the newest that verifies. */
    char chosen[DP__PATHMAX] = "";
    char why[1200] = "";
    for (int i = n - 1; i >= 0 && !*chosen; i--) {
        struct dp_ckpt_info *in = &list[i];
        if (in->state == DP_CKPT_UNPUBLISHED || in->state == DP_CKPT_SUPERSEDED ||
            (step >= 0 && in->step != step))
            continue;
        struct dp_ckpt_info v;
        dp__ckpt_check_one(in->path, n == 1 ? -1 : in->step, true, &v);
        if (v.state == DP_CKPT_OK)
            snprintf(chosen, sizeof chosen, "%s", in->path);
        else if (!*why)
            snprintf(why, sizeof why, "%s", v.problem);
    }
    free(list);
    if (!*chosen) {
        if (*why)
            return dp_err_set(err, DP_EINVAL, "%s", why);
        if (step >= 0)
            return dp_err_set(err, DP_ENOENT, "%s: no checkpoint of step %d", dir, step);
        return dp_err_set(err, DP_ENOENT, "%s: no complete checkpoint", dir);
    }
    struct dp_ckpt s;
    if ((rc = dp_ckpt_open(chosen, &s, err)))
        return rc;
    snprintf(res->checkpoint, sizeof res->checkpoint, "%s", chosen);
    res->step = s.meta.step;
    rc = export_write(&s, out_file, names, res, err);
    dp_ckpt_close(&s);
    return rc;
}
