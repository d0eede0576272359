/*
 * Checkpoint directories (ckpt.h): their names, listing, the commit and the
 * pruning, and where an output may go.
 *
 * Commit (executor-notes Sec. 4, llm.c's DONE marker made atomic): the
 * saving run creates step_N.tmp; every rank writes and fsyncs its file; then
 * one process writes manifest.json, fsyncs it and the directory, renames
 * step_N.tmp to step_N and fsyncs the parent. A crash at any point leaves
 * either no step_N or a complete one; older checkpoints are deleted (rename
 * to .trash, then unlink) only after the new one is published.
 */
#include "ckpt.h"
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool dp__ckpt_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int dp_ckpt_fsync_dir(const char *dir, struct dp_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return dp_err_set(err, DP_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd) ? dp_err_set(err, DP_EIO, "%s: fsync failed: %s", dir, strerror(errno)) : 0;
    close(fd);
    return rc;
}

int dp_ckpt_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char p[DP__PATHMAX + 300];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    return rmdir(dir);
}

/* Rename to NAME.trash (atomic: a half-deleted directory never looks like a checkpoint),
 * then delete. */
static void discard(const char *dir)
{
    char trash[DP__PATHMAX + 16];
    snprintf(trash, sizeof trash, "%s.trash", dir);
    dp_ckpt_remove(trash);
    if (rename(dir, trash) == 0)
        dp_ckpt_remove(trash);
}

/* "step_00000010" -> 10 with *suffix pointing after the digits; -1 if not that form. */
static int parse_step_name(const char *name, const char **suffix)
{
    if (strncmp(name, "step_", 5))
        return -1;
    const char *p = name + 5;
    int n = 0, v = 0;
    while (p[n] >= '0' && p[n] <= '9' && n < 9) {
        v = v * 10 + (p[n] - '0');
        n++;
    }
    if (n != 8)
        return -1;
    *suffix = p + n;
    return v;
}

static int cmp_entry_step(const void *a, const void *b)
{
    const struct dp_ckpt_entry *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return (int)x->kind - (int)y->kind;
}

int dp_ckpt_scan(const char *dir, struct dp_ckpt_entry **out, int *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *suf;
        int step = parse_step_name(e->d_name, &suf);
        if (step < 0)
            continue;
        int k = !*suf                         ? DP_CKPT_E_PUBLISHED
                : !strcmp(suf, ".tmp")        ? DP_CKPT_E_TMP
                : !strcmp(suf, ".superseded") ? DP_CKPT_E_SUPERSEDED
                                              : -1;
        if (k < 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            struct dp_ckpt_entry *g = realloc(*out, (size_t)cap * sizeof *g);
            if (!g)
                break;
            *out = g;
        }
        (*out)[(*n)++] = (struct dp_ckpt_entry){step, (enum dp_ckpt_entry_kind)k};
    }
    closedir(d);
    if (*n)
        qsort(*out, (size_t)*n, sizeof **out, cmp_entry_step);
    return 0;
}

void dp_ckpt_step_path(char *buf, size_t cap, const char *dir, int step, const char *suffix)
{
    snprintf(buf, cap, "%s/step_%08d%s", dir, step, suffix);
}

void dp_ckpt_candidate_path(char *buf, size_t cap, const char *dir, bool single, int step)
{
    if (single)
        snprintf(buf, cap, "%s", dir);
    else
        dp_ckpt_step_path(buf, cap, dir, step, "");
}

void dp__ckpt_manifest_path(char *buf, size_t cap, const char *dir)
{
    snprintf(buf, cap, "%s/%s", dir, DP_CKPT_MANIFEST);
}

bool dp_ckpt_is_one(const char *dir)
{
    char mf[DP__PATHMAX + 32];
    dp__ckpt_manifest_path(mf, sizeof mf, dir);
    return access(mf, F_OK) == 0;
}

int dp_ckpt_candidates(const char *dir, int **steps, int *n, bool *single)
{
    *steps = NULL;
    *n = 0;
    *single = dp_ckpt_is_one(dir);
    if (*single) {
        *steps = malloc(sizeof **steps);
        if (!*steps)
            return -1;
        (*steps)[0] = 0;
        *n = 1;
        return 0;
    }
    struct dp_ckpt_entry *e;
    int ne;
    if (dp_ckpt_scan(dir, &e, &ne))
        return -1;
    *steps = malloc((size_t)(ne ? ne : 1) * sizeof **steps);
    if (!*steps) {
        free(e);
        return -1;
    }
    for (int i = ne - 1; i >= 0; i--)
        if (e[i].kind == DP_CKPT_E_PUBLISHED)
            (*steps)[(*n)++] = e[i].step;
    free(e);
    return 0;
}

void dp_ckpt_prune(const char *dir, int step, int keep)
{
    struct dp_ckpt_entry *e;
    int n;
    if (dp_ckpt_scan(dir, &e, &n))
        return;
    char p[DP__PATHMAX], q[DP__PATHMAX + 16];
    int kept = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (e[i].kind != DP_CKPT_E_PUBLISHED)
            continue;
        dp_ckpt_step_path(p, sizeof p, dir, e[i].step, "");
        if (e[i].step > step) {
            dp_ckpt_step_path(q, sizeof q, dir, e[i].step, ".superseded");
            dp_ckpt_remove(q);
            rename(p, q);
        } else if (keep > 0 && ++kept > keep) {
            discard(p);
        }
    }
    free(e);
}

int dp_ckpt_prepare(const char *dir, const char *tmp, bool *cleaned, struct dp_err *err)
{
    int rc = dp_mkdirs(dir, err);
    if (rc)
        return rc;
    if (!*cleaned) {
        /* Leftovers of saves that crashed. */
        struct dp_ckpt_entry *e;
        int n;
        char p[DP__PATHMAX];
        if (!dp_ckpt_scan(dir, &e, &n)) {
            for (int i = 0; i < n; i++)
                if (e[i].kind == DP_CKPT_E_TMP) {
                    dp_ckpt_step_path(p, sizeof p, dir, e[i].step, ".tmp");
                    dp_ckpt_remove(p);
                }
            free(e);
        }
        *cleaned = true;
    }
    dp_ckpt_remove(tmp);
    if (mkdir(tmp, 0777))
        return dp_err_set(err, DP_EIO, "%s: cannot create directory: %s", tmp, strerror(errno));
    return dp_ckpt_fsync_dir(dir, err);
}

static int write_text_synced(const char *path, const char *text, struct dp_err *err)
{
    struct dp_st_writer w;
    int rc = dp_ckpt_st_create(&w, path, err);
    if (rc)
        return rc;
    rc = dp_ckpt_st_write(&w, text, strlen(text));
    if (!rc)
        rc = dp_ckpt_st_write(&w, "\n", 1);
    if (rc) {
        dp_ckpt_st_abandon(&w);
        return rc;
    }
    return dp_ckpt_st_finish(&w, true);
}

int dp_ckpt_publish(const char *dir, const char *tmp, const char *final, const char *manifest,
                    struct dp_err *err)
{
    char path[DP__PATHMAX + 32];
    dp__ckpt_manifest_path(path, sizeof path, tmp);
    int rc = write_text_synced(path, manifest, err);
    if (!rc)
        rc = dp_ckpt_fsync_dir(tmp, err);
    if (rc)
        return rc;
    if (dp__ckpt_is_dir(final))
        discard(final); /* a damaged checkpoint of the same step, skipped at resume */
    if (rename(tmp, final))
        return dp_err_set(err, DP_EIO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    return dp_ckpt_fsync_dir(dir, err);
}

/* ------------------------------------------------------------------ where outputs may go */

/* A checkpoint directory: it holds a manifest, or has the name a checkpoint is saved
 * under (step_%08d, also .tmp while being written, .superseded, .trash). */
static bool is_checkpoint_dir(const char *dir)
{
    if (!dp__ckpt_is_dir(dir))
        return false;
    if (dp_ckpt_is_one(dir))
        return true;
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    const char *suf;
    return parse_step_name(base, &suf) >= 0 &&
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

bool dp_output_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
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
    char dir[PATH_MAX];
    size_t nd = realpath(dp_profiles_dir(), dir) ? strlen(dir) : 0;
    if (nd && real_prefix(out, real, sizeof real) && strncmp(real, dir, nd) == 0 &&
        real[nd] == '/' && access(out, F_OK) == 0)
        return dp_err_set(err, DP_EINVAL,
                          "%s: output (%s) is a profile dplan reads ($DPLAN_PROFILES or the "
                          "shipped profiles/): writing it would replace the profile; choose a "
                          "path outside the profiles directory",
                          out, what);
    struct stat so;
    if (stat(out, &so) == 0 && S_ISREG(so.st_mode))
        for (int i = 0; i < nin; i++)
            if (in[i].path && dp_output_same_file(out, in[i].path))
                return dp_err_set(err, DP_EINVAL,
                                  "%s: output (%s) and input %s%s%s%s are the same file: writing "
                                  "it would destroy the input",
                                  out, what, in[i].path, in[i].what ? " (" : "",
                                  in[i].what ? in[i].what : "", in[i].what ? ")" : "");
    return 0;
}
