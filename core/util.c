/*
 * Small helpers shared by every module: list parsing, byte formatting, directories,
 * atomic file writes (a new temporary next to the file, renamed over it once complete:
 * rename(2) within a directory replaces the name atomically, POSIX) and a growing text
 * buffer.
 */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dp_parse_int_list(const char *s, int *out, int cap)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 1 << 30 || (*end && *end != ','))
            return DP_EUSAGE;
        if (n == cap)
            return DP_EUSAGE;
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p)
            return DP_EUSAGE;
    }
    return n ? n : DP_EUSAGE;
}

void dp_fmt_bytes(int64_t bytes, char *out, size_t cap)
{
    snprintf(out, cap, "%.2f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

int dp_mkdirs(const char *dir, struct dp_err *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return dp_err_set(err, DP_EUSAGE, "%.64s...: directory name too long", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0777); /* parents: an error shows up at the last mkdir */
            *p = '/';
        }
    if (mkdir(buf, 0777) && errno != EEXIST)
        return dp_err_set(err, DP_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
    return 0;
}

int dp_tmp_open(const char *final, char *tmp, size_t cap, struct dp_err *err)
{
    const char *slash = strrchr(final, '/');
    int dirlen = slash ? (int)(slash - final + 1) : 0;
    const char *base = slash ? slash + 1 : final;
    static unsigned counter;
    for (int tries = 0; tries < 100; tries++) {
        int n = snprintf(tmp, cap, "%.*s.%s.tmp-%ld-%u", dirlen, final, base, (long)getpid(),
                         counter++);
        if (n < 0 || (size_t)n >= cap)
            return dp_err_set(err, DP_EUSAGE, "%.64s...: file name too long", final);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST)
            return dp_err_set(err, DP_EIO, "%s: cannot create a temporary file next to it: %s",
                              final, strerror(errno));
    }
    return dp_err_set(err, DP_EIO, "%s: cannot find a free temporary name next to it", final);
}

int dp_tmp_publish(const char *tmp, const char *final, struct dp_err *err)
{
    if (rename(tmp, final) == 0)
        return 0;
    int e = errno;
    unlink(tmp);
    return dp_err_set(err, DP_EIO, "%s: cannot rename %s over it: %s", final, tmp, strerror(e));
}

int dp_write_file_atomic(const char *file, const void *data, size_t len, struct dp_err *err)
{
    char tmp[4200];
    int fd = dp_tmp_open(file, tmp, sizeof tmp, err);
    if (fd < 0)
        return fd;
    FILE *f = fdopen(fd, "wb");
    bool ok = f && fwrite(data, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (f ? fclose(f) != 0 : close(fd) != 0) {
        if (ok)
            saved = errno;
        ok = false;
    }
    if (!ok) {
        unlink(tmp);
        return dp_err_set(err, DP_EIO, "%s: cannot write: %s", file, strerror(saved));
    }
    return dp_tmp_publish(tmp, file, err);
}

static bool buf_reserve(struct dp_buf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void dp_buf_printf(struct dp_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if (!buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void dp_buf_puts(struct dp_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (!buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

void dp_buf_release(struct dp_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* Tippett (1925)'s expected largest of n standard normals for n <= 16; beyond, the
 * asymptote sqrt(2 ln n) less its first correction (Cramer 1946). */
double dp_max_normal(int n)
{
    static const double e[17] = {0,      0,      0.5642, 0.8463, 1.0294, 1.1630,
                                 1.2672, 1.3522, 1.4236, 1.4850, 1.5388, 1.5864,
                                 1.6292, 1.6680, 1.7034, 1.7359, 1.7660};
    if (n < 2)
        return 0;
    if (n <= 16)
        return e[n];
    double l = sqrt(2 * log((double)n));
    return l - (log(log((double)n)) + log(4 * 3.14159265358979323846)) / (2 * l);
}
