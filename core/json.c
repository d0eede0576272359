/*
 * JSON reading with precise errors: every message names the file, the JSON
 * path of the field and what was expected. Parsing is cJSON's; this file only
 * adds locations, type/range checks and unknown-key rejection.
 */
#include "core.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dp_read_file(const char *file, char **buf, size_t *len, size_t max, struct dp_err *err)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(file, "rb");
    if (!f)
        return dp_err_set(err, errno == ENOENT ? DP_ENOENT : DP_EIO, "%s: cannot open: %s", file,
                          strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return dp_err_set(err, DP_EINVAL, "%s: is a directory, expected a file", file);
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    if (!b) {
        fclose(f);
        return dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max) {
                free(b);
                fclose(f);
                return dp_err_set(err, DP_EINVAL, "%s: file larger than %zu bytes", file, max);
            }
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                fclose(f);
                return dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
            }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                free(b);
                fclose(f);
                return dp_err_set(err, DP_EIO, "%s: read error", file);
            }
            break;
        }
    }
    fclose(f);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
}

int dp_json_parse(const char *file, const char *buf, size_t len, cJSON **out, struct dp_err *err)
{
    *out = NULL;
    if (memchr(buf, '\0', len))
        return dp_err_set(err, DP_EINVAL, "%s: not a text file (NUL byte)", file);
    /* A copy so that the length passed to cJSON includes a terminating NUL, which makes
     * require_null_terminated reject trailing garbage. */
    char *copy = malloc(len + 1);
    if (!copy)
        return dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
    memcpy(copy, buf, len);
    copy[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len + 1, &end, 1);
    if (!root) {
        size_t off = end ? (size_t)(end - copy) : 0;
        if (off > len)
            off = len;
        int line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (copy[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        free(copy);
        bool blank = true;
        for (size_t i = 0; i < len; i++)
            if (buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\t' && buf[i] != '\r')
                blank = false;
        if (blank)
            return dp_err_set(err, DP_EINVAL, "%s: empty file, expected a JSON object", file);
        return dp_err_set(err, DP_EINVAL, "%s:%d:%d: JSON syntax error", file, line, col);
    }
    free(copy);
    *out = root;
    return 0;
}

int dp_json_load_file(const char *file, cJSON **out, struct dp_err *err)
{
    char *buf;
    size_t len;
    int rc = dp_read_file(file, &buf, &len, 64u << 20, err);
    if (rc)
        return rc;
    rc = dp_json_parse(file, buf, len, out, err);
    free(buf);
    return rc;
}

int dp_json_save_file(const char *file, const cJSON *root, struct dp_err *err)
{
    char *text = cJSON_Print(root);
    if (!text)
        return dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
    size_t n = strlen(text);
    int rc = DP_OK;
    char *withnl = realloc(text, n + 2);
    if (!withnl) {
        free(text);
        return dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
    }
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    rc = dp_write_file_atomic(file, withnl, n + 1, err);
    free(withnl);
    return rc;
}

size_t dp_jr_push(struct dp_jr *jr, const char *key, int index)
{
    size_t old = strlen(jr->path);
    size_t cap = sizeof jr->path;
    if (key)
        snprintf(jr->path + old, cap - old, "%s%s", old ? "." : "", key);
    else
        snprintf(jr->path + old, cap - old, "[%d]", index);
    return old;
}

void dp_jr_pop(struct dp_jr *jr, size_t old_len)
{
    jr->path[old_len] = '\0';
}

/* "file: path.key" into buf, or "file: key" at top level. */
static const char *where(const struct dp_jr *jr, const char *key, char *buf, size_t cap)
{
    if (jr->path[0] && key)
        snprintf(buf, cap, "%s: %s.%s", jr->file, jr->path, key);
    else if (jr->path[0])
        snprintf(buf, cap, "%s: %s", jr->file, jr->path);
    else if (key)
        snprintf(buf, cap, "%s: %s", jr->file, key);
    else
        snprintf(buf, cap, "%s", jr->file);
    return buf;
}

void dp_json_describe(const cJSON *v, char *out, size_t cap)
{
    if (!v || cJSON_IsNull(v))
        snprintf(out, cap, "null");
    else if (cJSON_IsBool(v))
        snprintf(out, cap, "boolean %s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v))
        snprintf(out, cap, "number %.17g", v->valuedouble);
    else if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (strlen(s) > 40)
            snprintf(out, cap, "string \"%.40s...\"", s);
        else
            snprintf(out, cap, "string \"%s\"", s);
    } else if (cJSON_IsArray(v))
        snprintf(out, cap, "array");
    else if (cJSON_IsObject(v))
        snprintf(out, cap, "object");
    else
        snprintf(out, cap, "invalid value");
}

int dp_jr_expect_object(struct dp_jr *jr, const cJSON *obj, const char *what)
{
    if (cJSON_IsObject(obj))
        return 0;
    char w[512], got[128];
    dp_json_describe(obj, got, sizeof got);
    return dp_err_set(jr->err, DP_EINVAL, "%s: expected %s, got %s", where(jr, NULL, w, sizeof w),
                      what, got);
}

int dp_jr_check_keys(struct dp_jr *jr, const cJSON *obj, const char *const *allowed)
{
    char w[512];
    for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next) {
        if (!it->string)
            continue;
        for (const cJSON *prev = obj->child; prev != it; prev = prev->next)
            if (prev->string && strcmp(prev->string, it->string) == 0)
                return dp_err_set(jr->err, DP_EINVAL, "%s: duplicate field",
                                  where(jr, it->string, w, sizeof w));
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, it->string) == 0)
                ok = true;
        if (!ok) {
            char list[512] = "";
            size_t n = 0;
            for (const char *const *a = allowed; *a && n < sizeof list - 1; a++)
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", a == allowed ? "" : ", ",
                                      *a);
            return dp_err_set(jr->err, DP_EINVAL, "%s: unknown field (expected one of: %s)",
                              where(jr, it->string, w, sizeof w), list);
        }
    }
    return 0;
}

int dp_jr_require_all(struct dp_jr *jr, const cJSON *obj, const char *const *keys)
{
    char list[512] = "";
    size_t n = 0;
    int missing = 0;
    for (const char *const *k = keys; *k; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, *k);
        if (v && !cJSON_IsNull(v))
            continue;
        missing++;
        if (n < sizeof list)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", missing > 1 ? ", " : "", *k);
    }
    if (missing < 2)
        return 0; /* none, or one: the field's reader says what it expects */
    char w[512];
    return dp_err_set(jr->err, DP_EINVAL, "%s: missing required fields: %s",
                      where(jr, NULL, w, sizeof w), list);
}

/* Look up key; 1 = found, 0 = missing/null (error set if required), <0 error. */
static int lookup(struct dp_jr *jr, const cJSON *obj, const char *key, bool required,
                  const char *what, const cJSON **v)
{
    *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (*v && !cJSON_IsNull(*v))
        return 1;
    if (required) {
        char w[512];
        return dp_err_set(jr->err, DP_EINVAL, "%s: missing required field (expected %s)",
                          where(jr, key, w, sizeof w), what);
    }
    return 0;
}

static int type_error(struct dp_jr *jr, const char *key, const char *what, const cJSON *v)
{
    char w[512], got[128];
    dp_json_describe(v, got, sizeof got);
    return dp_err_set(jr->err, DP_EINVAL, "%s: expected %s, got %s", where(jr, key, w, sizeof w),
                      what, got);
}

static void range_text(double lo, double hi, bool integer, char *out, size_t cap)
{
    const char *kind = integer ? "integer" : "number";
    if (hi >= 1e300 || (integer && hi >= 9e18))
        snprintf(out, cap, "%s >= %.15g", kind, lo);
    else
        snprintf(out, cap, "%s in [%.15g, %.15g]", kind, lo, hi);
}

int dp_jr_number(struct dp_jr *jr, const cJSON *obj, const char *key, bool required, double lo,
                 double hi, double *out)
{
    char what[96];
    range_text(lo, hi, false, what, sizeof what);
    const cJSON *v;
    int rc = lookup(jr, obj, key, required, what, &v);
    if (rc <= 0)
        return rc;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return type_error(jr, key, what, v);
    *out = v->valuedouble;
    return 0;
}

int dp_jr_int(struct dp_jr *jr, const cJSON *obj, const char *key, bool required, int64_t lo,
              int64_t hi, int64_t *out)
{
    char what[96];
    range_text((double)lo, (double)hi, true, what, sizeof what);
    const cJSON *v;
    int rc = lookup(jr, obj, key, required, what, &v);
    if (rc <= 0)
        return rc;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    /* 2^53: doubles hold every integer below it exactly. */
    if (!cJSON_IsNumber(v) || !isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0 ||
        d < (double)lo || d > (double)hi)
        return type_error(jr, key, what, v);
    *out = (int64_t)d;
    return 0;
}

int dp_jr_bool(struct dp_jr *jr, const cJSON *obj, const char *key, bool required, bool *out)
{
    const cJSON *v;
    int rc = lookup(jr, obj, key, required, "boolean", &v);
    if (rc <= 0)
        return rc;
    if (!cJSON_IsBool(v))
        return type_error(jr, key, "boolean", v);
    *out = cJSON_IsTrue(v);
    return 0;
}

int dp_jr_string(struct dp_jr *jr, const cJSON *obj, const char *key, bool required, char *out,
                 size_t cap)
{
    char what[64];
    snprintf(what, sizeof what, "string of 1 to %zu characters", cap - 1);
    const cJSON *v;
    int rc = lookup(jr, obj, key, required, what, &v);
    if (rc <= 0)
        return rc;
    if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= cap)
        return type_error(jr, key, what, v);
    snprintf(out, cap, "%s", v->valuestring);
    return 0;
}

int dp_jr_enum(struct dp_jr *jr, const cJSON *obj, const char *key, bool required,
               const char *const *names, int n, int *out)
{
    char what[256] = "one of ";
    size_t len = strlen(what);
    for (int i = 0; i < n && len < sizeof what - 1; i++)
        len += (size_t)snprintf(what + len, sizeof what - len, "%s\"%s\"", i ? ", " : "", names[i]);
    const cJSON *v;
    int rc = lookup(jr, obj, key, required, what, &v);
    if (rc <= 0)
        return rc;
    if (cJSON_IsString(v))
        for (int i = 0; i < n; i++)
            if (strcmp(v->valuestring, names[i]) == 0) {
                *out = i;
                return 0;
            }
    return type_error(jr, key, what, v);
}
