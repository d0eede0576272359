/*
 * safetensors files (ckpt.h has the format): a streaming writer that
 * checksums what it writes and fsyncs, and a reader that validates a file's
 * header against the format before any tensor is read. No knowledge of
 * models or layouts here: the checkpoint code decides what goes into which
 * file.
 */
#include "ckpt.h"
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints store little-endian tensors; this host is big-endian"
#endif

/* ------------------------------------------------------------------ writing */

char *dp_ckpt_st_header(const struct dp_st_tensor *t, int n, const char *const *meta, size_t *len)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    if (meta && meta[0]) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; m && meta[i] && meta[i + 1]; i += 2)
            cJSON_AddStringToObject(m, meta[i], meta[i + 1]);
    }
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[i].key);
        if (!e)
            break;
        cJSON_AddStringToObject(e, "dtype", t[i].dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t[i].bytes)));
        off += t[i].bytes;
    }
    char *js = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!js)
        return NULL;
    size_t k = strlen(js), padded = (k + 7) / 8 * 8;
    char *out = realloc(js, padded + 1);
    if (!out) {
        free(js);
        return NULL;
    }
    memset(out + k, ' ', padded - k);
    out[padded] = '\0';
    *len = padded;
    return out;
}

static void len_prefix(unsigned char out[8], size_t hlen)
{
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
}

int dp_ckpt_st_create(struct dp_st_writer *w, const char *path, struct dp_err *err)
{
    memset(w, 0, sizeof *w);
    w->err = err;
    snprintf(w->path, sizeof w->path, "%s", path);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0)
        return dp_err_set(err, DP_EIO, "%s: cannot create: %s", path, strerror(errno));
    return 0;
}

void dp_ckpt_st_adopt(struct dp_st_writer *w, int fd, const char *path, struct dp_err *err)
{
    memset(w, 0, sizeof *w);
    w->err = err;
    w->fd = fd;
    snprintf(w->path, sizeof w->path, "%s", path);
}

int dp_ckpt_st_write(struct dp_st_writer *w, const void *buf, size_t n)
{
    const char *p = buf;
    w->crc = dp_ckpt_crc32c(w->crc, buf, n);
    while (n > 0) {
        size_t k = n;
        int rc = dp__st_fault(w, &k);
        if (rc)
            return rc;
        ssize_t got = write(w->fd, p, k);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return dp_err_set(w->err, DP_EIO, "%s: write failed: %s", w->path,
                              got < 0 ? strerror(errno) : "no progress");
        p += got;
        n -= (size_t)got;
        w->bytes += got;
    }
    return 0;
}

int dp_ckpt_st_write_header(struct dp_st_writer *w, const char *hdr, size_t hlen)
{
    unsigned char lenb[8];
    len_prefix(lenb, hlen);
    int rc = dp_ckpt_st_write(w, lenb, 8);
    return rc ? rc : dp_ckpt_st_write(w, hdr, hlen);
}

int dp_ckpt_st_finish(struct dp_st_writer *w, bool sync)
{
    int rc = 0;
    if (sync && fsync(w->fd))
        rc = dp_err_set(w->err, DP_EIO, "%s: fsync failed: %s", w->path, strerror(errno));
    if (close(w->fd) && !rc)
        rc = dp_err_set(w->err, DP_EIO, "%s: close failed: %s", w->path, strerror(errno));
    w->fd = -1;
    return rc;
}

void dp_ckpt_st_abandon(struct dp_st_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    unlink(w->path);
}

int dp_ckpt_st_write_file(const char *out_file, const struct dp_st_tensor *t, int n,
                          const char *const *meta, int (*fill)(int i, void *buf, void *ctx),
                          void *ctx, int64_t *bytes, struct dp_err *err)
{
    size_t hlen = 0, maxb = 1;
    for (int i = 0; i < n; i++)
        maxb = (size_t)t[i].bytes > maxb ? (size_t)t[i].bytes : maxb;
    char *hdr = dp_ckpt_st_header(t, n, meta, &hlen);
    void *buf = malloc(maxb);
    if (!hdr || !buf) {
        free(hdr);
        free(buf);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    char tmp[4200];
    struct dp_st_writer w;
    int fd = dp_tmp_open(out_file, tmp, sizeof tmp, err);
    int rc = fd < 0 ? fd : 0;
    if (!rc) {
        dp_ckpt_st_adopt(&w, fd, tmp, err);
        rc = dp_ckpt_st_write_header(&w, hdr, hlen);
        for (int i = 0; i < n && !rc; i++) {
            rc = fill(i, buf, ctx);
            if (!rc)
                rc = dp_ckpt_st_write(&w, buf, (size_t)t[i].bytes);
        }
        if (!rc)
            rc = dp_ckpt_st_finish(&w, true);
        else
            dp_ckpt_st_abandon(&w);
        if (!rc) {
            if (bytes)
                *bytes = w.bytes;
            rc = dp_tmp_publish(tmp, out_file, err);
        }
    }
    free(hdr);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ reading */

int dp_ckpt_st_dtype_size(const char *dt)
{
    static const struct {
        const char *name;
        int size;
    } types[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                 {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                 {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(dt, types[i].name))
            return types[i].size;
    return 0;
}

static int cmp_entry_key(const void *a, const void *b)
{
    return strcmp(((const struct dp_st_entry *)a)->key, ((const struct dp_st_entry *)b)->key);
}

static int cmp_entry_begin(const void *a, const void *b)
{
    const struct dp_st_entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int read_exact(int fd, int64_t off, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -1 : 1;
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/* A non-negative integer held exactly by a JSON number. */
static bool json_count(const cJSON *v, int64_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return false;
    *out = (int64_t)v->valuedouble;
    return true;
}

static int parse_entry(struct dp_st_file *f, const cJSON *t, struct dp_st_entry *e,
                       int64_t data_len, struct dp_err *err)
{
    const char *p = f->path;
    if (strlen(t->string) >= sizeof e->key)
        return dp_err_set(err, DP_EINVAL, "%s: tensor name \"%.40s...\" is too long", p, t->string);
    snprintf(e->key, sizeof e->key, "%s", t->string);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsObject(t) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2)
        return dp_err_set(err, DP_EINVAL,
                          "%s: tensor %s: expected {\"dtype\", \"shape\", \"data_offsets\"}", p,
                          e->key);
    int es = dp_ckpt_st_dtype_size(dt->valuestring);
    if (!es)
        return dp_err_set(err, DP_EINVAL, "%s: tensor %s: unknown dtype \"%s\"", p, e->key,
                          dt->valuestring);
    snprintf(e->dtype, sizeof e->dtype, "%s", dt->valuestring);
    e->ndim = cJSON_GetArraySize(sh);
    if (e->ndim > 4)
        return dp_err_set(err, DP_EINVAL, "%s: tensor %s: %d dimensions (at most 4 here)", p,
                          e->key, e->ndim);
    int64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        if (!json_count(cJSON_GetArrayItem(sh, d), &e->shape[d]) ||
            (e->shape[d] > 0 && numel > INT64_MAX / 8 / e->shape[d]))
            return dp_err_set(err, DP_EINVAL, "%s: tensor %s: bad shape", p, e->key);
        numel *= e->shape[d];
    }
    if (!json_count(cJSON_GetArrayItem(of, 0), &e->begin) ||
        !json_count(cJSON_GetArrayItem(of, 1), &e->end) || e->end < e->begin)
        return dp_err_set(err, DP_EINVAL, "%s: tensor %s: bad data_offsets", p, e->key);
    if (e->end - e->begin != numel * es)
        return dp_err_set(err, DP_EINVAL,
                          "%s: tensor %s: data_offsets span %lld bytes, shape and dtype need %lld",
                          p, e->key, (long long)(e->end - e->begin), (long long)(numel * es));
    if (e->end > data_len)
        return dp_err_set(err, DP_EINVAL,
                          "%s: tensor %s: data_offsets end at byte %lld, beyond the %lld bytes "
                          "of data (truncated file?)",
                          p, e->key, (long long)e->end, (long long)data_len);
    return 0;
}

int dp_ckpt_st_open(const char *path, struct dp_st_file *f, struct dp_err *err)
{
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return dp_err_set(err, errno == ENOENT ? DP_ENOENT : DP_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
    struct stat st;
    unsigned char lenb[8];
    int rc = 0;
    char *hdr = NULL;
    cJSON *root = NULL;
    if (fstat(f->fd, &st)) {
        rc = dp_err_set(err, DP_EIO, "%s: %s", path, strerror(errno));
        goto out;
    }
    f->size = st.st_size;
    if (f->size < 8 || read_exact(f->fd, 0, lenb, 8)) {
        rc = dp_err_set(err, DP_EINVAL, "%s: truncated: %lld bytes, no header length", path,
                        (long long)f->size);
        goto out;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)lenb[i] << (8 * i);
    if (hlen > (uint64_t)DP_ST_MAX_HEADER || hlen < 2) {
        rc = dp_err_set(err, DP_EINVAL, "%s: header length %llu is not in [2, 100 MB]", path,
                        (unsigned long long)hlen);
        goto out;
    }
    if ((int64_t)hlen > f->size - 8) {
        rc = dp_err_set(err, DP_EINVAL, "%s: truncated: header of %llu bytes, file of %lld", path,
                        (unsigned long long)hlen, (long long)f->size);
        goto out;
    }
    hdr = malloc(hlen);
    if (!hdr) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto out;
    }
    if (read_exact(f->fd, 8, hdr, hlen)) {
        rc = dp_err_set(err, DP_EIO, "%s: cannot read the header", path);
        goto out;
    }
    f->data_start = 8 + (int64_t)hlen;
    if (hdr[0] != '{') {
        rc = dp_err_set(err, DP_EINVAL, "%s: the header does not start with '{'", path);
        goto out;
    }
    root = cJSON_ParseWithLength(hdr, hlen);
    if (!cJSON_IsObject(root)) {
        rc = dp_err_set(err, DP_EINVAL, "%s: the header is not a JSON object", path);
        goto out;
    }
    int n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, root) n++;
    f->e = calloc((size_t)(n ? n : 1), sizeof *f->e);
    if (!f->e) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto out;
    }
    int64_t data_len = f->size - f->data_start;
    cJSON_ArrayForEach(t, root)
    {
        if (!strcmp(t->string, "__metadata__")) {
            const cJSON *m;
            bool ok = cJSON_IsObject(t);
            cJSON_ArrayForEach(m, t) ok = ok && cJSON_IsString(m);
            if (!ok) {
                rc = dp_err_set(err, DP_EINVAL, "%s: __metadata__ must map strings to strings",
                                path);
                goto out;
            }
            continue;
        }
        if ((rc = parse_entry(f, t, &f->e[f->n], data_len, err)))
            goto out;
        f->n++;
    }
    /* No two tensors may share bytes. */
    qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_entry_begin);
    for (int i = 1; i < f->n; i++)
        if (f->e[i].begin < f->e[i - 1].end) {
            rc = dp_err_set(err, DP_EINVAL, "%s: tensors %s and %s overlap", path, f->e[i - 1].key,
                            f->e[i].key);
            goto out;
        }
    qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_entry_key);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->e[i].key, f->e[i - 1].key)) {
            rc = dp_err_set(err, DP_EINVAL, "%s: tensor %s appears twice", path, f->e[i].key);
            goto out;
        }
    f->meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
out:
    free(hdr);
    cJSON_Delete(root);
    if (rc)
        dp_ckpt_st_close(f);
    return rc;
}

void dp_ckpt_st_close(struct dp_st_file *f)
{
    if (f->fd > 0)
        close(f->fd);
    f->fd = -1;
    free(f->e);
    f->e = NULL;
    f->n = 0;
    cJSON_Delete(f->meta);
    f->meta = NULL;
}

const struct dp_st_entry *dp_ckpt_st_find(const struct dp_st_file *f, const char *key)
{
    struct dp_st_entry k;
    snprintf(k.key, sizeof k.key, "%s", key);
    return f->n ? bsearch(&k, f->e, (size_t)f->n, sizeof *f->e, cmp_entry_key) : NULL;
}

int dp_ckpt_st_pread(const struct dp_st_file *f, int64_t off, void *buf, size_t n,
                     struct dp_err *err)
{
    int r = read_exact(f->fd, f->data_start + off, buf, n);
    if (r)
        return dp_err_set(err, DP_EIO, "%s: %s at byte %lld", f->path,
                          r < 0 ? strerror(errno) : "unexpected end of file",
                          (long long)(f->data_start + off));
    return 0;
}

const char *dp_ckpt_st_meta(const struct dp_st_file *f, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
