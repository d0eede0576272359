/*
 * Outputs that cannot destroy inputs: the check of where an output may go
 * (dp_output_check: not onto an input, not into a checkpoint) and the
 * temporary-file-then-rename writing that leaves the old file intact when a
 * write fails (outfile.h). rename(2) within one directory replaces the name
 * atomically (POSIX), so a reader sees the old file or the complete new one.
 */
#include "outfile.h"
#include "executor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dp__tmp_open(const char *final, char *tmp, size_t cap, struct dp_err *err)
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

int dp__tmp_publish(const char *tmp, const char *final, struct dp_err *err)
{
    if (rename(tmp, final) == 0)
        return 0;
    int e = errno;
    unlink(tmp);
    return dp_err_set(err, DP_EIO, "%s: cannot rename %s over it: %s", final, tmp, strerror(e));
}

/* ------------------------------------------------------------------ where outputs may go */

/* A checkpoint directory: it holds a manifest, or has the name a checkpoint is saved
 * under (step_%08d, also .tmp while being written, .superseded, .trash; ckpt.c). */
static bool is_checkpoint_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return false;
    char mf[PATH_MAX + 32];
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    if (access(mf, F_OK) == 0)
        return true;
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    if (strncmp(base, "step_", 5))
        return false;
    int digits = 0;
    while (base[5 + digits] >= '0' && base[5 + digits] <= '9')
        digits++;
    const char *suf = base + 5 + digits;
    return digits == 8 &&
           (!*suf || !strcmp(suf, ".tmp") || !strcmp(suf, ".superseded") || !strcmp(suf, ".trash"));
}

/* The first checkpoint among `path` and its ancestors (by name, as given), or NULL. */
static const char *checkpoint_above(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    for (;;) {
        if (is_checkpoint_dir(buf))
            return buf;
        char *slash = strrchr(buf, '/');
        if (!slash)
            return NULL;
        if (slash == buf) {
            buf[1] = '\0';
            return is_checkpoint_dir(buf) ? buf : NULL;
        }
        *slash = '\0';
    }
}

/* `path` with symbolic links resolved as far as it exists (the rest appended). */
static bool real_prefix(const char *path, char *out, size_t cap)
{
    char tmp[PATH_MAX], rest[PATH_MAX] = "";
    snprintf(tmp, sizeof tmp, "%s", path);
    for (;;) {
        char r[PATH_MAX];
        if (realpath(tmp, r)) {
            return snprintf(out, cap, "%s%s", r, rest) < (int)cap;
        }
        char *slash = strrchr(tmp, '/');
        char keep[PATH_MAX];
        snprintf(keep, sizeof keep, "%s", rest);
        if (!slash) {
            if (!getcwd(r, sizeof r))
                return false;
            return snprintf(out, cap, "%s/%s%s", r, tmp, keep) < (int)cap;
        }
        snprintf(rest, sizeof rest, "%s%s", slash, keep);
        if (slash == tmp) {
            return snprintf(out, cap, "%s", rest) < (int)cap;
        }
        *slash = '\0';
    }
}

int dp_output_check(const char *out, const char *what, const struct dp_io *in, int nin,
                    struct dp_err *err)
{
    char buf[PATH_MAX + 64], real[PATH_MAX];
    const char *ck = checkpoint_above(out, buf, sizeof buf);
    if (!ck && real_prefix(out, real, sizeof real))
        ck = checkpoint_above(real, buf, sizeof buf); /* through symbolic links */
    if (ck)
        return dp_err_set(err, DP_EINVAL,
                          "%s: output (%s) lies inside the checkpoint %s: writing there would "
                          "damage it; choose a path outside the checkpoint",
                          out, what, ck);
    struct stat so, si;
    if (stat(out, &so) == 0 && S_ISREG(so.st_mode))
        for (int i = 0; i < nin; i++)
            if (in[i].path && stat(in[i].path, &si) == 0 && si.st_dev == so.st_dev &&
                si.st_ino == so.st_ino)
                return dp_err_set(err, DP_EINVAL,
                                  "%s: output (%s) and input %s%s%s%s are the same file: writing "
                                  "it would destroy the input",
                                  out, what, in[i].path, in[i].what ? " (" : "",
                                  in[i].what ? in[i].what : "", in[i].what ? ")" : "");
    return 0;
}
