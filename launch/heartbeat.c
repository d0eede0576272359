/*
 * The heartbeat record (launch.h): its file, its text, and the reading the
 * runner does after a stall to name the rank that hung.
 */
#include "launch.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void dp_launch_hb_path(char *buf, size_t cap, const char *dir, int rank)
{
    snprintf(buf, cap, "%s/rank_%05d", dir, rank);
}

void dp_launch_hb_format(const struct dp_heartbeat *h, char out[DP_HB_RECORD])
{
    char line[DP_HB_RECORD + 1];
    int n = snprintf(line, sizeof line, "%d %llu %d %llu %lld %.60s", h->pid, h->count, h->step,
                     h->step_beats, h->last_ns, h->what);
    if (n < 0 || n >= DP_HB_RECORD)
        n = DP_HB_RECORD - 1;
    memcpy(out, line, (size_t)n);
    memset(out + n, ' ', (size_t)(DP_HB_RECORD - 1 - n));
    out[DP_HB_RECORD - 1] = '\n';
}

bool dp_launch_hb_parse(const char *rec, size_t n, struct dp_heartbeat *out)
{
    char line[DP_HB_RECORD + 1];
    if (n < 20)
        return false;
    n = n > DP_HB_RECORD ? DP_HB_RECORD : n;
    memcpy(line, rec, n);
    line[n] = '\0';
    struct dp_heartbeat h = {.seen = true};
    int k = 0;
    if (sscanf(line, "%d %llu %d %llu %lld %n", &h.pid, &h.count, &h.step, &h.step_beats,
               &h.last_ns, &k) < 5)
        return false;
    snprintf(h.what, sizeof h.what, "%s", line + k);
    for (char *q = h.what + strlen(h.what); q > h.what && (q[-1] == ' ' || q[-1] == '\n');)
        *--q = '\0';
    *out = h;
    return true;
}

void dp_launch_hb_read(const char *dir, struct dp_heartbeat *h, int world)
{
    for (int r = 0; r < world; r++) {
        char p[4400], rec[DP_HB_RECORD];
        h[r].seen = false;
        dp_launch_hb_path(p, sizeof p, dir, r);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, rec, sizeof rec);
        close(fd);
        if (n > 0)
            dp_launch_hb_parse(rec, (size_t)n, &h[r]);
    }
}

int dp_launch_hb_suspect(const struct dp_heartbeat *h, int world)
{
    int best = -1;
    for (int r = 0; r < world; r++) {
        if (!h[r].seen)
            continue;
        const struct dp_heartbeat *a = &h[r], *b = best >= 0 ? &h[best] : NULL;
        if (!b || a->step < b->step ||
            (a->step == b->step && (a->step_beats < b->step_beats ||
                                    (a->step_beats == b->step_beats && a->last_ns < b->last_ns))))
            best = r;
    }
    return best;
}
