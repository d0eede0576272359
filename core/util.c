/*
 * Small helpers shared by every module: list parsing, byte formatting, directories.
 */
#include "core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
