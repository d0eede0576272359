/*
 * ckpt_tool: checks for the checkpoint tests (ckpt.sh), with its own
 * safetensors reader written from the format's description
 * (huggingface/safetensors README "Format"), sharing no code with dplan:
 *
 *   8 bytes      N, unsigned little-endian: the header's length
 *   N bytes      UTF-8 JSON object starting with '{' (trailing spaces allowed):
 *                {"NAME": {"dtype": D, "shape": [..], "data_offsets": [BEGIN, END]},
 *                 ..., "__metadata__": {"key": "string", ...}}
 *   rest         the byte buffer; offsets are relative to its start, END is one past;
 *                tensors are little-endian, row-major; the buffer is covered entirely,
 *                without holes or overlaps; names are unique; N <= 100 MB.
 *
 *   ckpt_tool parse FILE [NAME=D0xD1 ...]  validate; print a summary; check shapes
 *   ckpt_tool same A B                     same tensor names, dtypes, shapes and bytes
 *   ckpt_tool close A B RTOL               relative Frobenius error of every tensor <= RTOL
 *   ckpt_tool hf DPLAN_FILE HF_FILE        HF_FILE is DPLAN_FILE under Hugging Face names
 *   ckpt_tool losses REF_LOG RUN_LOG FROM RTOL
 *                                          losses of steps >= FROM in RUN_LOG within RTOL of
 *                                          REF_LOG's (the last record of each step counts)
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tensor {
    const char *name;
    char dtype[16];
    int ndim;
    long long shape[8];
    unsigned long long begin, end;
};

struct st {
    unsigned char *buf;
    size_t len;
    size_t data; /* 8 + N */
    cJSON *hdr;
    struct tensor *t;
    int n;
};

static int fail(const char *file, const char *msg, const char *what)
{
    fprintf(stderr, "ckpt_tool: %s: %s%s%s\n", file, msg, what ? ": " : "", what ? what : "");
    return 1;
}

static int dtype_size(const char *d)
{
    static const char *const one[] = {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3"};
    static const char *const two[] = {"I16", "U16", "F16", "BF16"};
    static const char *const four[] = {"I32", "U32", "F32"};
    static const char *const eight[] = {"I64", "U64", "F64"};
    for (size_t i = 0; i < 5; i++)
        if (!strcmp(d, one[i]))
            return 1;
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(d, two[i]))
            return 2;
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(d, four[i]))
            return 4;
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(d, eight[i]))
            return 8;
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const struct tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int st_read(const char *file, struct st *s)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(file, "rb");
    if (!f)
        return fail(file, "cannot open", NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    s->buf = malloc(n > 0 ? (size_t)n : 1);
    if (!s->buf || fread(s->buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        return fail(file, "cannot read", NULL);
    }
    fclose(f);
    s->len = (size_t)n;
    if (s->len < 8)
        return fail(file, "shorter than the 8-byte header length", NULL);
    unsigned long long hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | s->buf[i];
    if (hl > 100000000ULL)
        return fail(file, "header larger than 100 MB", NULL);
    if (8 + hl > s->len)
        return fail(file, "header runs past the end of the file", NULL);
    if (hl == 0 || s->buf[8] != '{')
        return fail(file, "header does not start with '{'", NULL);
    s->data = 8 + (size_t)hl;
    /* Trailing spaces are allowed padding; anything else after the object is not. */
    const char *end = NULL;
    s->hdr = cJSON_ParseWithLengthOpts((const char *)s->buf + 8, (size_t)hl, &end, 0);
    if (!cJSON_IsObject(s->hdr))
        return fail(file, "header is not a JSON object", NULL);
    for (const char *p = end; p < (const char *)s->buf + s->data; p++)
        if (*p != ' ')
            return fail(file, "non-space bytes after the header's JSON object", NULL);
    int cap = cJSON_GetArraySize(s->hdr);
    s->t = calloc((size_t)(cap ? cap : 1), sizeof *s->t);
    const cJSON *e;
    cJSON_ArrayForEach(e, s->hdr)
    {
        for (const cJSON *g = s->hdr->child; g != e; g = g->next)
            if (!strcmp(g->string, e->string))
                return fail(file, "duplicate name", e->string);
        if (!strcmp(e->string, "__metadata__")) {
            const cJSON *m;
            if (!cJSON_IsObject(e))
                return fail(file, "__metadata__ is not an object", NULL);
            cJSON_ArrayForEach(m, e) if (!cJSON_IsString(m)) return fail(
                file, "__metadata__ value is not a string", m->string);
            continue;
        }
        struct tensor *t = &s->t[s->n++];
        t->name = e->string;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || !dtype_size(dt->valuestring))
            return fail(file, "missing or unknown dtype", t->name);
        snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
        if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 8)
            return fail(file, "bad shape", t->name);
        unsigned long long numel = 1;
        const cJSON *d;
        cJSON_ArrayForEach(d, sh)
        {
            if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble != floor(d->valuedouble))
                return fail(file, "shape entries must be integers >= 0", t->name);
            t->shape[t->ndim++] = (long long)d->valuedouble;
            numel *= (unsigned long long)d->valuedouble;
        }
        if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 ||
            !cJSON_IsNumber(cJSON_GetArrayItem(of, 0)) ||
            !cJSON_IsNumber(cJSON_GetArrayItem(of, 1)))
            return fail(file, "data_offsets must be [BEGIN, END]", t->name);
        t->begin = (unsigned long long)cJSON_GetArrayItem(of, 0)->valuedouble;
        t->end = (unsigned long long)cJSON_GetArrayItem(of, 1)->valuedouble;
        if (t->end < t->begin || t->end - t->begin != numel * (unsigned)dtype_size(t->dtype))
            return fail(file, "data_offsets do not match shape and dtype", t->name);
    }
    /* The byte buffer is covered exactly, in some order. */
    struct tensor *sorted = malloc((size_t)(s->n ? s->n : 1) * sizeof *sorted);
    memcpy(sorted, s->t, (size_t)s->n * sizeof *sorted);
    qsort(sorted, (size_t)s->n, sizeof *sorted, cmp_begin);
    unsigned long long at = 0;
    int bad = 0;
    for (int i = 0; i < s->n && !bad; i++) {
        if (sorted[i].begin != at)
            bad = fail(file, sorted[i].begin < at ? "tensors overlap" : "hole in the byte buffer",
                       sorted[i].name);
        at = sorted[i].end;
    }
    free(sorted);
    if (!bad && at != s->len - s->data)
        bad = fail(file, "the byte buffer's length differs from the tensors' total", NULL);
    return bad;
}

static void st_free(struct st *s)
{
    cJSON_Delete(s->hdr);
    free(s->t);
    free(s->buf);
}

static const struct tensor *find(const struct st *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->t[i].name, name))
            return &s->t[i];
    return NULL;
}

static const unsigned char *bytes(const struct st *s, const struct tensor *t)
{
    return s->buf + s->data + t->begin;
}

/* Element i of an F32 or F64 tensor, from little-endian bytes. */
static double elem(const struct st *s, const struct tensor *t, size_t i)
{
    const unsigned char *p = bytes(s, t);
    if (!strcmp(t->dtype, "F64")) {
        uint64_t u = 0;
        for (int k = 7; k >= 0; k--)
            u = u << 8 | p[8 * i + (size_t)k];
        double v;
        memcpy(&v, &u, 8);
        return v;
    }
    uint32_t u = 0;
    for (int k = 3; k >= 0; k--)
        u = u << 8 | p[4 * i + (size_t)k];
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static size_t numel(const struct tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

static int cmd_parse(int argc, char **argv)
{
    struct st s;
    if (st_read(argv[0], &s))
        return 1;
    unsigned long long total = 0;
    for (int i = 0; i < s.n; i++)
        total += s.t[i].end - s.t[i].begin;
    printf("%s: valid safetensors, %d tensors, %llu data bytes\n", argv[0], s.n, total);
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s", argv[i]);
        char *eq = strchr(name, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const struct tensor *t = find(&s, name);
        char got[128] = "absent";
        if (t) {
            got[0] = '\0';
            for (int d = 0; d < t->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "x" : "",
                         t->shape[d]);
        }
        if (strcmp(got, eq + 1)) {
            fprintf(stderr, "ckpt_tool: %s: tensor %s: shape %s, expected %s\n", argv[0], name, got,
                    eq + 1);
            bad = 1;
        }
    }
    st_free(&s);
    return bad;
}

static int cmd_same(const char *a, const char *b)
{
    struct st x, y;
    if (st_read(a, &x) || st_read(b, &y))
        return 1;
    int bad = x.n != y.n;
    if (bad)
        fprintf(stderr, "ckpt_tool: %d tensors in %s, %d in %s\n", x.n, a, y.n, b);
    for (int i = 0; i < x.n; i++) {
        const struct tensor *t = &x.t[i], *u = find(&y, t->name);
        if (!u || strcmp(t->dtype, u->dtype) || t->ndim != u->ndim ||
            memcmp(t->shape, u->shape, sizeof t->shape) || t->end - t->begin != u->end - u->begin ||
            memcmp(bytes(&x, t), bytes(&y, u), t->end - t->begin)) {
            fprintf(stderr, "ckpt_tool: tensor %s differs between %s and %s\n", t->name, a, b);
            bad = 1;
        }
    }
    if (!bad)
        printf("%s and %s: %d tensors, bit-identical\n", a, b, x.n);
    st_free(&x);
    st_free(&y);
    return bad || x.n == 0; /* two empty files compare nothing */
}

static int cmd_close(const char *a, const char *b, double rtol)
{
    struct st x, y;
    if (st_read(a, &x) || st_read(b, &y))
        return 1;
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < x.n; i++) {
        const struct tensor *t = &x.t[i], *u = find(&y, t->name);
        if (!u || numel(t) != numel(u)) {
            fprintf(stderr, "ckpt_tool: tensor %s missing or reshaped in %s\n", t->name, b);
            bad = 1;
            continue;
        }
        double dd = 0, rr = 0, md = 0;
        for (size_t k = 0; k < numel(t); k++) {
            double p = elem(&x, t, k), q = elem(&y, u, k);
            dd += (p - q) * (p - q);
            rr += p * p;
            md = fmax(md, fabs(p - q));
        }
        /* The attention key bias has an exactly zero gradient: Adam turns rounding noise
         * into steps of lr, so compare it in absolute terms (as compare_runs does). */
        size_t nl = strlen(t->name);
        double e = nl > 8 && !strcmp(t->name + nl - 8, ".attn.bk") ? md
                   : rr > 0                                        ? sqrt(dd / rr)
                                                                   : sqrt(dd);
        if (!(e <= rtol)) {
            fprintf(stderr, "ckpt_tool: tensor %s: relative error %.3g > %g\n", t->name, e, rtol);
            bad = 1;
        }
        worst = fmax(worst, e);
    }
    printf("weights: %d tensors, worst relative difference %.3g, tolerance %g\n", x.n, worst, rtol);
    st_free(&x);
    st_free(&y);
    return bad || x.n == 0;
}

/* Hugging Face names: GPT-2 (Conv1D [in, out], fused c_attn) or Llama (nn.Linear). */
static int cmd_hf(const char *a, const char *b)
{
    struct st x, y;
    if (st_read(a, &x) || st_read(b, &y))
        return 1;
    bool gpt2 = find(&y, "transformer.wte.weight") != NULL;
    int bad = 0, checked = 0;
    for (int i = 0; i < y.n && !bad; i++) {
        const struct tensor *u = &y.t[i];
        char src[3][128] = {"", "", ""};
        int L = -1, k = 0, mode = 0; /* 0 copy, 1 transpose, 2 cat rows + transpose, 3 cat */
        const char *n = u->name;
        char rest[128] = "";
        if (gpt2) {
            if (sscanf(n, "transformer.h.%d.%n", &L, &k) == 1 && k)
                snprintf(rest, sizeof rest, "%s", n + k);
            static const char *const m[][2] = {{"transformer.wte.weight", "wte"},
                                               {"transformer.wpe.weight", "wpe"},
                                               {"transformer.ln_f.weight", "lnf.w"},
                                               {"transformer.ln_f.bias", "lnf.b"}};
            static const char *const l[][3] = {
                {"ln_1.weight", "ln1.w", "0"},          {"ln_1.bias", "ln1.b", "0"},
                {"ln_2.weight", "ln2.w", "0"},          {"ln_2.bias", "ln2.b", "0"},
                {"attn.c_proj.weight", "attn.wo", "1"}, {"attn.c_proj.bias", "attn.bo", "0"},
                {"mlp.c_fc.weight", "mlp.w1", "1"},     {"mlp.c_fc.bias", "mlp.b1", "0"},
                {"mlp.c_proj.weight", "mlp.w2", "1"},   {"mlp.c_proj.bias", "mlp.b2", "0"}};
            for (size_t j = 0; j < 4; j++)
                if (!strcmp(n, m[j][0]))
                    snprintf(src[0], sizeof src[0], "%s", m[j][1]);
            for (size_t j = 0; L >= 0 && j < 10; j++)
                if (!strcmp(rest, l[j][0])) {
                    snprintf(src[0], sizeof src[0], "h.%d.%s", L, l[j][1]);
                    mode = l[j][2][0] - '0';
                }
            if (L >= 0 &&
                (!strcmp(rest, "attn.c_attn.weight") || !strcmp(rest, "attn.c_attn.bias"))) {
                char w = rest[12] == 'w' ? 'w' : 'b';
                snprintf(src[0], sizeof src[0], "h.%d.attn.%cq", L, w);
                snprintf(src[1], sizeof src[1], "h.%d.attn.%ck", L, w);
                snprintf(src[2], sizeof src[2], "h.%d.attn.%cv", L, w);
                mode = w == 'w' ? 2 : 3;
            }
        } else {
            if (sscanf(n, "model.layers.%d.%n", &L, &k) == 1 && k)
                snprintf(rest, sizeof rest, "%s", n + k);
            static const char *const m[][2] = {{"model.embed_tokens.weight", "wte"},
                                               {"model.norm.weight", "lnf.w"},
                                               {"lm_head.weight", "lm_head"}};
            static const char *const l[][2] = {{"input_layernorm.weight", "ln1.w"},
                                               {"post_attention_layernorm.weight", "ln2.w"},
                                               {"self_attn.q_proj.weight", "attn.wq"},
                                               {"self_attn.k_proj.weight", "attn.wk"},
                                               {"self_attn.v_proj.weight", "attn.wv"},
                                               {"self_attn.o_proj.weight", "attn.wo"},
                                               {"mlp.gate_proj.weight", "mlp.w_gate"},
                                               {"mlp.up_proj.weight", "mlp.w_up"},
                                               {"mlp.down_proj.weight", "mlp.w2"}};
            for (size_t j = 0; j < 3; j++)
                if (!strcmp(n, m[j][0]))
                    snprintf(src[0], sizeof src[0], "%s", m[j][1]);
            for (size_t j = 0; L >= 0 && j < 9; j++)
                if (!strcmp(rest, l[j][0]))
                    snprintf(src[0], sizeof src[0], "h.%d.%s", L, l[j][1]);
        }
        const struct tensor *s0 = find(&x, src[0]);
        if (!src[0][0] || !s0) {
            fprintf(stderr, "ckpt_tool: %s: unexpected tensor %s\n", b, n);
            bad = 1;
            break;
        }
        /* Element (r, c) of the HF tensor from the dplan tensors. */
        long long rows = u->ndim == 2 ? u->shape[0] : u->shape[0],
                  cols = u->ndim == 2 ? u->shape[1] : 1;
        for (long long r = 0; r < rows && !bad; r++)
            for (long long c = 0; c < cols && !bad; c++) {
                double want;
                if (mode == 0) {
                    want = elem(&x, s0, (size_t)(r * cols + c));
                } else if (mode == 1) {
                    want = elem(&x, s0, (size_t)(c * rows + r)); /* dplan [cols, rows] */
                } else {
                    long long idx = mode == 2 ? c : r, in = mode == 2 ? r : 0;
                    int j = 0;
                    const struct tensor *p = s0;
                    while (idx >= p->shape[0] && j < 2) {
                        idx -= p->shape[0];
                        p = find(&x, src[++j]);
                        if (!p) {
                            fprintf(stderr, "ckpt_tool: %s lacks %s\n", a, src[j]);
                            st_free(&x);
                            st_free(&y);
                            return 1;
                        }
                    }
                    long long pc = p->ndim == 2 ? p->shape[1] : 1;
                    want = elem(&x, p, (size_t)(idx * pc + in));
                }
                if (elem(&y, u, (size_t)(r * cols + c)) != want) {
                    fprintf(stderr, "ckpt_tool: %s: %s[%lld, %lld] is not %s's\n", b, n, r, c,
                            src[0]);
                    bad = 1;
                }
            }
        checked++;
    }
    if (!bad)
        printf("%s: %d Hugging Face %s tensors match %s\n", b, checked, gpt2 ? "GPT-2" : "Llama",
               a);
    st_free(&x);
    st_free(&y);
    return bad || checked == 0;
}

/* Loss of each step in a JSON log (the last record of a step wins). */
static int read_losses(const char *file, double *loss, int cap)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return -1;
    char line[8192];
    int max = 0;
    for (int i = 0; i < cap; i++)
        loss[i] = NAN;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "loss");
        if (cJSON_IsNumber(s) && cJSON_IsNumber(l) && s->valueint > 0 && s->valueint < cap) {
            loss[s->valueint] = l->valuedouble;
            max = s->valueint > max ? s->valueint : max;
        }
        cJSON_Delete(o);
    }
    fclose(f);
    return max;
}

static int cmd_losses(const char *ref, const char *run, int from, double rtol)
{
    static double a[100000], b[100000];
    int na = read_losses(ref, a, 100000), nb = read_losses(run, b, 100000);
    if (na < from || nb < from) {
        fprintf(stderr, "ckpt_tool: %s has steps up to %d, %s up to %d; expected %d or more\n", ref,
                na, run, nb, from);
        return 1;
    }
    int bad = 0, n = 0;
    double worst = 0;
    for (int s = from; s <= na; s++) {
        double e = fabs(b[s] - a[s]) / fabs(a[s]);
        if (!(e <= rtol)) {
            fprintf(stderr, "ckpt_tool: step %d: loss %.10g, uninterrupted %.10g (rel %.3g > %g)\n",
                    s, b[s], a[s], e, rtol);
            bad = 1;
        }
        worst = isnan(e) ? e : fmax(worst, e);
        n++;
    }
    printf("losses: steps %d..%d, worst relative difference %.3g, tolerance %g\n", from, na, worst,
           rtol);
    return bad || n == 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "parse"))
        return cmd_parse(argc - 2, argv + 2);
    if (argc == 4 && !strcmp(argv[1], "same"))
        return cmd_same(argv[2], argv[3]);
    if (argc == 5 && !strcmp(argv[1], "close"))
        return cmd_close(argv[2], argv[3], atof(argv[4]));
    if (argc == 4 && !strcmp(argv[1], "hf"))
        return cmd_hf(argv[2], argv[3]);
    if (argc == 6 && !strcmp(argv[1], "losses"))
        return cmd_losses(argv[2], argv[3], atoi(argv[4]), atof(argv[5]));
    fprintf(stderr, "usage: ckpt_tool parse|same|close|hf|losses ... (see the source)\n");
    return 2;
}
