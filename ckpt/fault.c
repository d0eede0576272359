/*
 * TEST-ONLY faults of the safetensors writer (ckpt.h, DPLAN_FAULT_INJECT of
 * launch.h): compiled only with -DDPLAN_FAULT_INJECTION=ON.
 */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

int dp__st_fault(struct dp_st_writer *w, size_t *k)
{
    if (w->fault == DP_ST_FAULT_NONE || w->bytes + (int64_t)*k <= w->fault_at)
        return 0;
    *k = (size_t)(w->fault_at - w->bytes);
    if (*k > 0)
        return 0;
    if (w->fault == DP_ST_FAULT_CRASH) {
        /* The process dies with a half-written file on disk. */
        fsync(w->fd);
        raise(SIGKILL);
    }
    errno = ENOSPC;
    return dp_err_set(w->err, DP_EIO, "%s: write failed: %s (injected fault)", w->path,
                      strerror(errno));
}
