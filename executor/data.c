/*
 * Token data: llm.c token shards and raw uint16 arrays, the byte-level
 * `dplan data prepare`, and the default corpus (Debian's license texts).
 *
 * llm.c format (dev/data/data_common.py write_datafile, llmc/dataloader.h):
 * 256 int32 header {20240520, 1, ntok, 0...}, then ntok uint16 tokens; the
 * file is exactly 1024 + 2 ntok bytes. Version 7 (magic 20240801) holds
 * uint32 Llama-3 tokens and is refused. Files are little-endian, like the
 * x86 and Arm hosts this runs on. Token files are memory-mapped, so the
 * ranks of a node share one copy in the page cache.
 */
#include "executor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLAMA3_MAGIC 20240801

void dp_tokens_release(struct dp_tokens *t)
{
    if (!t)
        return;
    if (t->map_len)
        munmap(t->map_base, t->map_len);
    else
        free(t->tok);
    memset(t, 0, sizeof *t);
}

int64_t dp_tokens_windows(const struct dp_tokens *t, int64_t seq_len)
{
    return seq_len > 0 && t->n > 0 ? (t->n - 1) / seq_len : 0;
}

int dp_tokens_check(const struct dp_tokens *t, const struct dp_layout *l, struct dp_err *err)
{
    if (t->n < l->seq_len + 1)
        return dp_err_set(err, DP_EINVAL, "%s: %lld tokens, need at least seq_len + 1 = %lld",
                          t->source, (long long)t->n, (long long)(l->seq_len + 1));
    int64_t win = dp_tokens_windows(t, l->seq_len);
    if (l->gbs > win)
        return dp_err_set(err, DP_EINVAL,
                          "gbs=%lld: one step needs %lld sequences of %lld tokens, %s holds %lld "
                          "(%lld tokens): lower --gbs to at most %lld or give more --data",
                          (long long)l->gbs, (long long)l->gbs, (long long)l->seq_len, t->source,
                          (long long)win, (long long)t->n, (long long)win);
    return 0;
}

double dp_tokens_epochs(const struct dp_tokens *t, const struct dp_layout *l, int steps)
{
    int64_t win = dp_tokens_windows(t, l->seq_len);
    return win > 0 ? (double)steps * (double)l->gbs / (double)win : 0;
}

static int check_vocab(const struct dp_tokens *t, int64_t vocab, struct dp_err *err)
{
    if (vocab <= 0)
        return 0;
    for (int64_t i = 0; i < t->n; i++)
        if (t->tok[i] >= vocab)
            return dp_err_set(err, DP_EINVAL,
                              "%s: token %u at position %lld is >= the model's vocab %lld",
                              t->source, (unsigned)t->tok[i], (long long)i, (long long)vocab);
    return 0;
}

int dp_tokens_load(const char *file, enum dp_data_format fmt, int64_t vocab, struct dp_tokens *out,
                   struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->source, sizeof out->source, "%s", file);
    int fd = open(file, O_RDONLY);
    if (fd < 0)
        return dp_err_set(err, errno == ENOENT ? DP_ENOENT : DP_EIO, "%s: cannot open: %s", file,
                          strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return dp_err_set(err, DP_EINVAL, "%s: not a regular file", file);
    }
    long long size = (long long)st.st_size;
    int32_t hdr[3] = {0, 0, 0};
    if (size >= 12 && pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr) {
        close(fd);
        return dp_err_set(err, DP_EIO, "%s: read failed: %s", file, strerror(errno));
    }
    bool llmc = fmt == DP_DATA_LLMC ||
                (fmt == DP_DATA_AUTO && (hdr[0] == DP_LLMC_MAGIC || hdr[0] == LLAMA3_MAGIC));
    long long off = 0, n = 0;
    int rc = 0;
    if (llmc) {
        if (size < DP_LLMC_HEADER)
            rc = dp_err_set(err, DP_EINVAL,
                            "%s: size %lld bytes is shorter than the 1024-byte llm.c header "
                            "(truncated?)",
                            file, size);
        else if (hdr[0] == LLAMA3_MAGIC || hdr[1] == 7)
            rc = dp_err_set(err, DP_EINVAL,
                            "%s: llm.c version 7 (uint32 Llama-3 tokens) is not supported: "
                            "expected magic 20240520 version 1 (uint16 tokens)",
                            file);
        else if (hdr[0] != DP_LLMC_MAGIC)
            rc = dp_err_set(err, DP_EINVAL,
                            "%s: header: expected llm.c magic 20240520, got %d (use --data-format "
                            "raw for a headerless uint16 array)",
                            file, hdr[0]);
        else if (hdr[1] != DP_LLMC_VERSION)
            rc = dp_err_set(err, DP_EINVAL, "%s: header: expected version 1, got %d", file, hdr[1]);
        else if (hdr[2] <= 0)
            rc = dp_err_set(err, DP_EINVAL, "%s: header: expected a token count > 0, got %d", file,
                            hdr[2]);
        else if (size != DP_LLMC_HEADER + 2LL * hdr[2])
            rc = dp_err_set(err, DP_EINVAL,
                            "%s: size %lld bytes, expected 1024 + 2*%d = %lld for the header's "
                            "token count (truncated?)",
                            file, size, hdr[2], DP_LLMC_HEADER + 2LL * hdr[2]);
        off = DP_LLMC_HEADER;
        n = hdr[2];
    } else {
        if (size == 0)
            rc = dp_err_set(err, DP_EINVAL, "%s: empty file", file);
        else if (size % 2)
            rc = dp_err_set(err, DP_EINVAL,
                            "%s: size %lld bytes is odd: not a uint16 token array (nor an llm.c "
                            ".bin: no magic 20240520)",
                            file, size);
        n = size / 2;
    }
    if (rc) {
        close(fd);
        return rc;
    }
    void *base = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return dp_err_set(err, DP_EIO, "%s: mmap failed: %s", file, strerror(errno));
    out->map_base = base;
    out->map_len = (size_t)size;
    out->tok = (uint16_t *)(void *)((char *)base + off);
    out->n = n;
    rc = check_vocab(out, vocab, err);
    if (rc)
        dp_tokens_release(out);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int append_file(const char *path, uint16_t **tok, int64_t *n, int64_t *cap,
                       struct dp_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dp_err_set(err, errno == ENOENT ? DP_ENOENT : DP_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
    unsigned char buf[65536];
    size_t got;
    int rc = 0;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (*n + (int64_t)got > *cap) {
            int64_t nc = *cap ? *cap : 65536;
            while (nc < *n + (int64_t)got)
                nc *= 2;
            uint16_t *t = realloc(*tok, (size_t)nc * sizeof *t);
            if (!t) {
                rc = dp_err_set(err, DP_ENOMEM, "out of memory");
                break;
            }
            *tok = t;
            *cap = nc;
        }
        for (size_t i = 0; i < got; i++)
            (*tok)[(*n)++] = buf[i];
    }
    if (!rc && ferror(f))
        rc = dp_err_set(err, DP_EIO, "%s: read failed: %s", path, strerror(errno));
    fclose(f);
    return rc;
}

int dp_tokens_default(const char *dir, int64_t vocab, struct dp_tokens *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    if (!dir)
        dir = "/usr/share/common-licenses";
    if (vocab < 256)
        return dp_err_set(err, DP_EINVAL,
                          "the default corpus is byte-tokenised (256 tokens) but the model's "
                          "vocab is %lld: give --data FILE",
                          (long long)vocab);
    DIR *d = opendir(dir);
    if (!d)
        return dp_err_set(err, DP_ENOENT,
                          "no --data given and the default corpus %s is missing (%s; not a "
                          "Debian system?): give --data FILE (see `dplan data prepare`)",
                          dir, strerror(errno));
    char **names = NULL;
    int nn = 0, cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) && !rc) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        /* Regular files only: symlinks (GPL -> GPL-3) would repeat texts. */
        if (e->d_name[0] == '.' || lstat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 32;
            char **nn2 = realloc(names, (size_t)cap * sizeof *names);
            if (!nn2) {
                rc = dp_err_set(err, DP_ENOMEM, "out of memory");
                break;
            }
            names = nn2;
        }
        if (!(names[nn] = strdup(path)))
            rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        else
            nn++;
    }
    closedir(d);
    if (!rc && nn == 0)
        rc = dp_err_set(err, DP_ENOENT,
                        "no --data given and the default corpus %s has no files: give --data "
                        "FILE (see `dplan data prepare`)",
                        dir);
    if (!rc)
        qsort(names, (size_t)nn, sizeof *names, cmp_str);
    int64_t tcap = 0;
    for (int i = 0; i < nn && !rc; i++)
        rc = append_file(names[i], &out->tok, &out->n, &tcap, err);
    for (int i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    snprintf(out->source, sizeof out->source, "default corpus (%s, %d files)", dir, nn);
    if (rc)
        dp_tokens_release(out);
    return rc;
}

int dp_data_prepare(const char *const *files, int nfiles, const char *out, enum dp_data_format fmt,
                    int64_t *ntok, struct dp_err *err)
{
    uint16_t *tok = NULL;
    int64_t n = 0, cap = 0;
    int rc = 0;
    for (int i = 0; i < nfiles && !rc; i++)
        rc = append_file(files[i], &tok, &n, &cap, err);
    if (!rc && n == 0)
        rc = dp_err_set(err, DP_EINVAL, "%s: no bytes to tokenise", nfiles ? files[0] : "input");
    if (!rc && fmt != DP_DATA_RAW && n > INT32_MAX)
        rc = dp_err_set(err, DP_EINVAL,
                        "%lld tokens exceed the llm.c header's int32 count: split the input or "
                        "use --format raw",
                        (long long)n);
    char tmp[4200];
    FILE *f = NULL;
    if (!rc) {
        /* A new temporary next to `out`, renamed over it once complete: a failed write
         * leaves the previous file as it was. */
        int fd = dp_tmp_open(out, tmp, sizeof tmp, err);
        if (fd < 0) {
            rc = fd;
        } else if (!(f = fdopen(fd, "wb"))) {
            rc = dp_err_set(err, DP_EIO, "%s: cannot open: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
        }
    }
    if (!rc && fmt != DP_DATA_RAW) {
        int32_t hdr[256] = {DP_LLMC_MAGIC, DP_LLMC_VERSION, (int32_t)n};
        if (fwrite(hdr, sizeof hdr, 1, f) != 1)
            rc = dp_err_set(err, DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    }
    if (!rc && fwrite(tok, sizeof *tok, (size_t)n, f) != (size_t)n)
        rc = dp_err_set(err, DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    if (!rc && (fflush(f) || fsync(fileno(f))))
        rc = dp_err_set(err, DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    if (f && fclose(f) && !rc)
        rc = dp_err_set(err, DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    if (f && rc)
        unlink(tmp);
    else if (f)
        rc = dp_tmp_publish(tmp, out, err);
    free(tok);
    if (!rc && ntok)
        *ntok = n;
    return rc;
}
