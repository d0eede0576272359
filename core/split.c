/*
 * Pipeline splits: which decoder layers each pipeline stage and model chunk
 * holds. Counts are in model order: virtual stage s = c * pp + r is model chunk
 * c of pipeline stage r (Megatron-LM's --pipeline-model-parallel-layout lists
 * virtual stages in this order, torchtitan's looped schedules place stage s on
 * rank s % pp). Virtual stage 0 also runs the embedding and the last virtual
 * stage the final norm, the output layer and the loss, so either may hold no
 * decoder layer: a stage of its own.
 *
 * Here: expansion of a layout's split, the split rules of the frameworks
 * (Megatron's first/last stage counts and its embedding/loss accounting,
 * torchtitan's weighted split), dplan's balanced family for the planner, and
 * the two text forms (--stage-layers lists, Megatron layout strings). The
 * checks that need the rest of the layout are in layout.c.
 */
#include "core.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stage layers under Megatron's --decoder-first/last-pipeline-num-layers: the middle
 * stages share what the first and last leave (megatron/core/transformer/
 * transformer_block.py, get_num_layers_to_build). */
static int first_last_stage(const struct dp_layout *l, int L, int stage)
{
    int pp = l->pp, first = l->first_stage_layers, last = l->last_stage_layers;
    if (stage == 0 && first)
        return first;
    if (stage == pp - 1 && last)
        return last;
    int middle = pp - (first ? 1 : 0) - (last ? 1 : 0);
    return middle > 0 ? (L - first - last) / middle : 0;
}

int dp_layout_chunk_count(const struct dp_layout *l, const struct dp_model *m, int stage, int chunk)
{
    int pp = l->pp > 0 ? l->pp : 1, v = l->vpp > 0 ? l->vpp : 1;
    if (l->nchunks > 0) {
        int s = dp_layout_global_stage(l, stage, chunk);
        return s >= 0 && s < l->nchunks && s < DP_MAX_CHUNKS ? l->chunk_layers[s] : 0;
    }
    int L = (int)m->layers;
    if (pp == 1)
        return L / v;
    if (l->first_stage_layers || l->last_stage_layers)
        return first_last_stage(l, L, stage) / v;
    return L / (pp * v);
}

int dp_layout_stage_layers(const struct dp_layout *l, const struct dp_model *m, int stage)
{
    if (l->nchunks > 0) {
        int n = 0;
        for (int c = 0; c < l->vpp; c++)
            n += dp_layout_chunk_count(l, m, stage, c);
        return n;
    }
    int pp = l->pp > 0 ? l->pp : 1, L = (int)m->layers;
    if (pp == 1)
        return L;
    if (l->first_stage_layers || l->last_stage_layers)
        return first_last_stage(l, L, stage);
    return L / pp;
}

void dp_layout_chunk_layers(const struct dp_layout *l, const struct dp_model *m, int stage,
                            int chunk, int *first, int *count)
{
    /* The layers of the virtual stages before it in model order (Megatron's
     * get_transformer_layer_offset, transformer_layer.py, for any split). */
    int n = 0, pp = l->pp > 0 ? l->pp : 1;
    for (int s = 0; s < dp_layout_global_stage(l, stage, chunk); s++)
        n += dp_layout_chunk_count(l, m, dp_layout_stage_rank(l, s), s / pp);
    *first = n;
    *count = dp_layout_chunk_count(l, m, stage, chunk);
}

int dp_layout_expand(const struct dp_layout *l, const struct dp_model *m, int *out, int cap)
{
    int64_t S = (int64_t)l->pp * l->vpp;
    if (l->pp < 1 || l->vpp < 1 || S > cap)
        return -1;
    for (int s = 0; s < (int)S; s++)
        out[s] = dp_layout_chunk_count(l, m, dp_layout_stage_rank(l, s), s / l->pp);
    return (int)S;
}

int dp_layout_make_explicit(struct dp_layout *l, const struct dp_model *m)
{
    int c[DP_MAX_CHUNKS];
    int n = dp_layout_expand(l, m, c, DP_MAX_CHUNKS);
    if (n < 1)
        return -1;
    for (int i = 0; i < n; i++)
        if (c[i] < 0 || c[i] > UINT16_MAX)
            return -1;
    l->first_stage_layers = l->last_stage_layers = 0;
    l->nchunks = n;
    for (int i = 0; i < n; i++)
        l->chunk_layers[i] = (uint16_t)c[i];
    return 0;
}

void dp_layout_reset_split(struct dp_layout *l)
{
    l->first_stage_layers = l->last_stage_layers = 0;
    l->nchunks = 0;
    memset(l->chunk_layers, 0, sizeof l->chunk_layers);
}

int dp_layout_set_chunks(struct dp_layout *l, const int *counts, int n)
{
    if (n < 1 || n > DP_MAX_CHUNKS)
        return -1;
    for (int i = 0; i < n; i++)
        if (counts[i] < 0 || counts[i] > UINT16_MAX)
            return -1;
    dp_layout_reset_split(l);
    bool all_equal = true;
    for (int i = 1; i < n; i++)
        all_equal &= counts[i] == counts[0];
    if (all_equal)
        return 0; /* the even split: nothing to store */
    l->nchunks = n;
    for (int i = 0; i < n; i++)
        l->chunk_layers[i] = (uint16_t)counts[i];
    return 0;
}

bool dp_layout_equal(const struct dp_layout *a, const struct dp_layout *b)
{
    /* The GEMM type compared as resolved: a plan writes the default one out by name. */
    if (dp_layout_gemm(a) != dp_layout_gemm(b))
        return false;
    struct dp_layout x, y;
    memcpy(&x, a, offsetof(struct dp_layout, chunk_layers));
    memcpy(&y, b, offsetof(struct dp_layout, chunk_layers));
    x.gemm = y.gemm = DP_GEMM_DEFAULT;
    if (memcmp(&x, &y, offsetof(struct dp_layout, chunk_layers)) != 0)
        return false;
    return memcmp(a->chunk_layers, b->chunk_layers,
                  (size_t)a->nchunks * sizeof a->chunk_layers[0]) == 0;
}

int dp_split_check(const int *c, int n, int64_t L, int pp, int vpp, const char *what, int code,
                   struct dp_err *err)
{
    return dp_split_check_v(c, n, L, pp, vpp, false, what, code, err);
}

int dp_split_check_v(const int *c, int n, int64_t L, int pp, int vpp, bool v_style,
                     const char *what, int code, struct dp_err *err)
{
    int64_t S = (int64_t)pp * vpp;
    if (S > DP_MAX_CHUNKS)
        return dp_err_set(err, code,
                          "%s: pp x vpp = %d x %d = %lld model chunks exceeds the supported %d",
                          what, pp, vpp, (long long)S, DP_MAX_CHUNKS);
    if (n != S)
        return dp_err_set(err, code,
                          "%s: expected pp x vpp = %d x %d = %lld counts (one per model chunk), "
                          "got %d",
                          what, pp, vpp, (long long)S, n);
    int64_t sum = 0;
    for (int s = 0; s < n; s++) {
        if (c[s] < 0 || c[s] > UINT16_MAX)
            return dp_err_set(err, code, "%s: entry %d: expected a layer count in [0, %d], got %d",
                              what, s, UINT16_MAX, c[s]);
        sum += c[s];
    }
    if (sum != L)
        return dp_err_set(err, code,
                          "%s: expected counts summing to the model's %lld layers, got %lld", what,
                          (long long)L, (long long)sum);
    for (int s = 1; s + 1 < n; s++)
        if (c[s] == 0)
            return dp_err_set(err, code,
                              "%s: entry %d (stage %d, chunk %d): expected >= 1 layer (only the "
                              "first virtual stage, with the embedding, and the last, with the "
                              "loss, may hold none), got 0",
                              what, s, dp_pipe_stage_rank(pp, v_style, s), s / pp);
    return 0;
}

int dp_split_first_last(int64_t L, int pp, int vpp, int first, int last, int *out, const char *what,
                        int code, struct dp_err *err)
{
    /* Megatron-LM TransformerConfig.__post_init__ ("Uneven PP"): each given count is
     * positive and divisible by vpp; the middle stages share the rest evenly, each
     * middle stage's count divisible by vpp. */
    if (pp < 2)
        return dp_err_set(err, code, "%s: first/last stage layer counts need pp > 1, got pp=%d",
                          what, pp);
    if (first < 0 || last < 0)
        return dp_err_set(err, code, "%s: stage layer counts must be >= 0", what);
    if ((first && first % vpp) || (last && last % vpp))
        return dp_err_set(err, code,
                          "%s: expected first/last stage layers divisible by vpp=%d (each model "
                          "chunk of a stage holds the same count), got %d/%d",
                          what, vpp, first, last);
    int middle = pp - (first ? 1 : 0) - (last ? 1 : 0);
    int64_t rest = L - first - last;
    if (rest < 0 || (middle == 0 && rest != 0) ||
        (middle > 0 && (rest < middle || rest % middle || (rest / middle) % vpp)))
        return dp_err_set(err, code,
                          "%s: layers=%lld cannot be split into pp=%d stages with %d/%d on the "
                          "first/last (the remaining %lld layers must divide evenly among %d "
                          "middle stages%s)",
                          what, (long long)L, pp, first, last, (long long)rest, middle,
                          vpp > 1 ? " and their model chunks" : "");
    int each = middle > 0 ? (int)(rest / middle) : 0;
    for (int r = 0; r < pp; r++) {
        int n = r == 0 && first ? first : r == pp - 1 && last ? last : each;
        for (int c = 0; c < vpp; c++)
            out[c * pp + r] = n / vpp;
    }
    return 0;
}

int dp_split_account(int64_t L, int pp, int vpp, bool embedding, bool loss, int *out,
                     const char *what, int code, struct dp_err *err)
{
    /* Megatron-LM --account-for-embedding-in-pipeline-split / --account-for-loss-in-
     * pipeline-split: the embedding (loss) counts as one layer; (L + e + l) must divide
     * into pp stages of vpp equal chunks, and the first (last) virtual stage builds one
     * decoder layer fewer (transformer_block.py get_num_layers_to_build). */
    int64_t n = L + (embedding ? 1 : 0) + (loss ? 1 : 0);
    if (n % pp)
        return dp_err_set(err, code,
                          "%s: %lld layers%s%s = %lld do not divide into pp=%d stages (Megatron "
                          "requires it; --first-stage-less-layers/--last-stage-less-layers "
                          "spread the rest as torchtitan does)",
                          what, (long long)L, embedding ? " + embedding" : "",
                          loss ? " + loss" : "", (long long)n, pp);
    if ((n / pp) % vpp)
        return dp_err_set(err, code,
                          "%s: %lld layers per stage (embedding/loss counted) do not divide into "
                          "vpp=%d model chunks",
                          what, (long long)(n / pp), vpp);
    int S = pp * vpp, each = (int)(n / S);
    for (int s = 0; s < S; s++)
        out[s] = each;
    if (embedding)
        out[0]--;
    if (loss)
        out[S - 1]--;
    if (out[0] < 0 || out[S - 1] < 0)
        return dp_err_set(err, code, "%s: not enough layers for the first/last virtual stage",
                          what);
    return 0;
}

int dp_split_torchtitan(int64_t L, int pp, int vpp, int in_w, int out_w, int *out, const char *what,
                        int code, struct dp_err *err)
{
    /* torchtitan/distributed/pipeline_parallel.py, generate_llm_fqn_per_model_part: the
     * embedding weighs in_w layers and norm + output out_w; the L + in_w + out_w
     * "effective" layers split into S virtual stages, the first (eff mod S) stages one
     * more; the first stage then runs in_w layers fewer, the last out_w fewer. */
    int S = pp * vpp;
    if (in_w < 0 || out_w < 0)
        return dp_err_set(err, code, "%s: expected layer weights >= 0, got %d/%d", what, in_w,
                          out_w);
    if (S == 1) {
        out[0] = (int)L;
        return 0;
    }
    int64_t eff = L + in_w + out_w;
    int64_t base = eff / S, extra = eff % S;
    if (base == 0)
        return dp_err_set(err, code,
                          "%s: %lld effective layers (%lld + %d + %d) leave some of the %d "
                          "virtual stages empty",
                          what, (long long)eff, (long long)L, in_w, out_w, S);
    if (in_w > base || out_w > base)
        return dp_err_set(err, code,
                          "%s: expected first/last stage less-layers <= %lld (the layers per "
                          "virtual stage), got %d/%d",
                          what, (long long)base, in_w, out_w);
    for (int s = 0; s < S; s++)
        out[s] = (int)(base + (s < extra ? 1 : 0));
    out[0] -= in_w;
    out[S - 1] -= out_w;
    return 0;
}

int dp_split_balanced(int64_t L, int pp, int vpp, int a, int b, bool early, int *out)
{
    /* dplan's planner family: the embedding weighs a layers and the loss b, and the
     * remainder of a count that does not divide goes one layer per virtual stage either
     * to the first ones (early: torchtitan's rule above, which puts the heavier work
     * where the fewest stages wait before it) or to those just before the last one,
     * walking down (chunk v-1 of stages pp-2, pp-3, ..., then chunk v-2, ...: different
     * GPUs, and those with the fewest micro-batches in flight), the first and last
     * virtual stages last. */
    int S = pp * vpp;
    int64_t eff = L + a + b;
    int64_t base = eff / S, extra = eff % S;
    if (S < 2 || base < 1 || a > base || b > base)
        return -1;
    for (int s = 0; s < S; s++)
        out[s] = (int)base;
    for (int k = 0; k < extra; k++) {
        int s = early ? k : S - 2 - k;
        if (!early && s < 1)
            s = s == 0 ? S - 1 : 0; /* k = S-2: the last; k = S-1: the first */
        out[s]++;
    }
    out[0] -= a;
    out[S - 1] -= b;
    return out[0] < 0 || out[S - 1] < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ text forms */

int dp_split_parse_list(const char *str, int *out, int cap, int *n, const char *what,
                        struct dp_err *err)
{
    /* "7,8*14,7": counts separated by commas; N*K repeats N K times (the repetition of
     * Megatron's layout strings). */
    int k = 0;
    const char *p = str;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > UINT16_MAX)
            goto bad;
        long rep = 1;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '*') {
            p++;
            errno = 0;
            rep = strtol(p, &end, 10);
            if (end == p || errno || rep < 1 || rep > DP_MAX_CHUNKS)
                goto bad;
            p = end;
        }
        for (long i = 0; i < rep; i++) {
            if (k >= cap)
                return dp_err_set(err, DP_EUSAGE, "%s: expected at most %d counts, got more", what,
                                  cap);
            out[k++] = (int)v;
        }
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            break;
        if (*p != ',')
            goto bad;
        p++;
    }
    *n = k;
    return 0;
bad:
    return dp_err_set(err, DP_EUSAGE,
                      "%s: expected comma-separated layer counts such as 7,8*14,7, got \"%s\"",
                      what, str);
}

#define LAYOUT_MAX 65536 /* characters after expansion */

/* Append n copies of src[0..len) to buf; returns false on overflow. */
static bool put(char *buf, size_t *at, const char *src, size_t len, long n)
{
    for (long i = 0; i < n; i++) {
        if (*at + len >= LAYOUT_MAX)
            return false;
        memcpy(buf + *at, src, len);
        *at += len;
    }
    return true;
}

/* A decimal repeat count at s (at least one digit); *len gets the digits read. */
static bool repeat_count(const char *s, long *n, size_t *len)
{
    size_t i = 0;
    long v = 0;
    while (isdigit((unsigned char)s[i])) {
        v = v * 10 + (s[i] - '0');
        if (v > LAYOUT_MAX)
            v = LAYOUT_MAX; /* the expansion will overflow and say so */
        i++;
    }
    *n = v;
    *len = i;
    return i > 0;
}

int dp_split_parse_megatron(const char *str, int pp, int *out, int cap, int *n, int *mtp,
                            const char *what, int code, struct dp_err *err)
{
    /*
     * Megatron-LM PipelineParallelLayerLayout.parse_str_to_list
     * (megatron/core/transformer/pipeline_parallel_layer_layout.py): commas are
     * cosmetic and removed; "(X)*n" repeats X n times (one level: X holds no ')');
     * then "c*n" repeats the character c; '|' separates virtual stages, listed in
     * model order (vpp = stages / pp); 'E' is the embedding, 't' a decoder layer, 'L'
     * the loss, 'm' a multi-token-prediction layer. validate_layer_layout requires
     * E first and L last, once each, and the model's count of t. dplan prices the MTP
     * layers on the loss's virtual stage (*mtp: their count), as Megatron-Bridge's
     * DeepSeek-V3 layouts place them ([..., "mtp", "loss"]); Megatron's standalone MTP
     * stage ("...|m|L") is refused.
     */
    char *a = malloc(LAYOUT_MAX), *b = malloc(LAYOUT_MAX);
    int rc = 0;
    if (!a || !b) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto out;
    }
    size_t la = 0;
    for (const char *p = str; *p; p++)
        if (*p != ',' && !put(a, &la, p, 1, 1))
            goto too_long;
    a[la] = '\0';
    /* Pass 1: (X)*n. */
    size_t lb = 0;
    for (size_t i = 0; i < la;) {
        if (a[i] == '(') {
            const char *close = strchr(a + i + 1, ')');
            long cnt;
            size_t nd;
            if (close && close > a + i + 1 && close[1] == '*' &&
                repeat_count(close + 2, &cnt, &nd)) {
                if (memchr(a + i + 1, '(', (size_t)(close - a - i - 1))) {
                    rc = dp_err_set(err, code,
                                    "%s: nested parentheses are not supported (Megatron expands "
                                    "one level of (...)*n), got \"%s\"",
                                    what, str);
                    goto out;
                }
                if (!put(b, &lb, a + i + 1, (size_t)(close - a - i - 1), cnt))
                    goto too_long;
                i = (size_t)(close - a) + 2 + nd;
                continue;
            }
        }
        if (!put(b, &lb, a + i, 1, 1))
            goto too_long;
        i++;
    }
    b[lb] = '\0';
    /* Pass 2: c*n. */
    la = 0;
    for (size_t i = 0; i < lb;) {
        long cnt;
        size_t nd;
        if (i + 1 < lb && b[i + 1] == '*' && repeat_count(b + i + 2, &cnt, &nd)) {
            if (!put(a, &la, b + i, 1, cnt))
                goto too_long;
            i += 2 + nd;
            continue;
        }
        if (!put(a, &la, b + i, 1, 1))
            goto too_long;
        i++;
    }
    a[la] = '\0';
    /* Stages. */
    int S = 0, nE = 0, nL = 0, nm = 0, sE = -1, sL = -1, sm = -1;
    bool t_before_E = false, t_after_L = false, m_after_L = false;
    out[0] = 0;
    for (size_t i = 0; i <= la; i++) {
        char ch = a[i];
        if (ch == '|' || ch == '\0') {
            S++;
            if (ch == '\0')
                break;
            if (S >= cap) {
                rc = dp_err_set(err, code, "%s: expected at most %d virtual stages, got more", what,
                                cap);
                goto out;
            }
            out[S] = 0;
            continue;
        }
        switch (ch) {
        case 't':
            out[S]++;
            if (nE == 0)
                t_before_E = true;
            if (nL > 0)
                t_after_L = true;
            break;
        case 'E':
            nE++;
            sE = S;
            break;
        case 'L':
            nL++;
            sL = S;
            break;
        case 'm':
            nm++;
            if (sm >= 0 && sm != S) {
                rc = dp_err_set(err, code,
                                "%s: expected the multi-token-prediction layers m together in "
                                "one virtual stage, got them in stages %d and %d",
                                what, sm, S);
                goto out;
            }
            sm = S;
            if (nL > 0)
                m_after_L = true;
            break;
        default:
            rc = dp_err_set(err, code,
                            "%s: unknown layer character '%c' (expected E embedding, t decoder "
                            "layer, L loss, | between virtual stages, (...)*n and c*n repeats)",
                            what, ch);
            goto out;
        }
    }
    if (nE != 1 || nL != 1)
        rc = dp_err_set(err, code,
                        "%s: expected the embedding E and the loss L once each, got %d and %d",
                        what, nE, nL);
    else if (sE != 0 || t_before_E)
        rc = dp_err_set(err, code, "%s: expected the embedding E first, in the first virtual stage",
                        what);
    else if (sL != S - 1 || t_after_L)
        rc = dp_err_set(err, code, "%s: expected the loss L last, in the last virtual stage", what);
    else if (nm > 0 && (!mtp || sm != S - 1 || m_after_L))
        rc = dp_err_set(err, code,
                        mtp ? "%s: expected the multi-token-prediction layers m in the last "
                              "virtual stage, before the loss L (dplan prices them on the loss's "
                              "stage; a stage of their own is not modelled)"
                            : "%s: multi-token-prediction layers m are not expected here",
                        what);
    else if (pp < 1 || S % pp)
        rc = dp_err_set(err, code,
                        "%s: expected a multiple of pp=%d virtual stages (pp x vpp), got %d", what,
                        pp, S);
    else {
        *n = S;
        if (mtp)
            *mtp = nm;
    }
    goto out;
too_long:
    rc = dp_err_set(err, code, "%s: expands to more than %d characters", what, LAYOUT_MAX - 1);
out:
    free(a);
    free(b);
    return rc;
}

/* snprintf that never runs past cap and keeps *at meaningful. */
static void app(char *buf, size_t cap, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void app(char *buf, size_t cap, size_t *at, const char *fmt, ...)
{
    if (*at >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (w > 0)
        *at += (size_t)w;
    if (*at >= cap)
        *at = cap;
}

void dp_split_format_list(const int *c, int n, char *buf, size_t cap)
{
    size_t at = 0;
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < n;) {
        int k = 1;
        while (i + k < n && c[i + k] == c[i])
            k++;
        const char *sep = i ? "," : "";
        if (k >= 3) {
            app(buf, cap, &at, "%s%d*%d", sep, c[i], k);
            i += k;
        } else {
            app(buf, cap, &at, "%s%d", sep, c[i]);
            i++;
        }
    }
}

/* One virtual stage in Megatron's notation: [E] t... [L]. */
static void stage_token(int s, int S, int layers, int mtp, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    if (s == 0)
        app(out, cap, &at, "E");
    if (layers == 1)
        app(out, cap, &at, "t");
    else if (layers == 2)
        app(out, cap, &at, "tt");
    else if (layers > 2)
        app(out, cap, &at, "t*%d", layers);
    if (s == S - 1) {
        for (int i = 0; i < mtp && i < DP_MAX_MTP; i++)
            app(out, cap, &at, "m");
        app(out, cap, &at, "L");
    }
}

void dp_split_format_megatron(const int *c, int n, int mtp, char *buf, size_t cap)
{
    size_t at = 0;
    if (cap)
        buf[0] = '\0';
    for (int s = 0; s < n;) {
        char tok[32], next[32];
        stage_token(s, n, c[s], mtp, tok, sizeof tok);
        int k = 1;
        for (; s + k < n; k++) {
            stage_token(s + k, n, c[s + k], mtp, next, sizeof next);
            if (strcmp(next, tok) != 0)
                break;
        }
        bool last = s + k == n;
        if (k >= 2)
            /* (X|)*k already ends with the separator; a comma keeps a following digit-free
             * token readable, as in Megatron's own "Et*3|(tt|)*29,m|L". */
            app(buf, cap, &at, "(%s|)*%d%s", tok, k, last ? "" : ",");
        else
            app(buf, cap, &at, "%s%s", tok, last ? "" : "|");
        s += k;
    }
}
