/*
 * TEST-ONLY fault injection (launch.h, "faults"): compiled only with
 * -DDPLAN_FAULT_INJECTION=ON, so that a release build has no way to make a
 * rank die on purpose. The checkpoint faults are carried out by ckpt's
 * writer (ckpt.h), the others here at the start of a step.
 */
#include "launch.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dp_launch_fault_get(int attempt, struct dp_fault *out, struct dp_err *err)
{
    out->mode = DP_FAULT_NONE;
    out->rank = out->step = -1;
    const char *f = getenv(DP_ENV_FAULT_INJECT);
    if (!f || !*f)
        return 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", f);
    int rank = -1, step = -1, when = 0, n = 0;
    char *save = NULL, *tok[4] = {0};
    for (char *t = strtok_r(buf, ":", &save); t && n < 4; t = strtok_r(NULL, ":", &save))
        tok[n++] = t;
    static const char *const modes[] = {"", "exit", "kill", "hang", "ckpt-crash", "enospc"};
    int mode = 0;
    if (n >= 3) {
        rank = atoi(tok[0]);
        step = atoi(tok[1]);
        for (int i = 1; i < (int)(sizeof modes / sizeof modes[0]); i++)
            if (!strcmp(tok[2], modes[i]))
                mode = i;
        if (n == 4)
            when = strcmp(tok[3], "*") ? atoi(tok[3]) : -1;
    }
    if (!mode || rank < 0 || step < 1)
        return dp_err_set(err, DP_EINVAL,
                          "%s=\"%s\" ignored: expected RANK:STEP:MODE[:ATTEMPT] with MODE exit, "
                          "kill, hang, ckpt-crash or enospc",
                          DP_ENV_FAULT_INJECT, f);
    if (when >= 0 && when != attempt)
        return 0;
    out->mode = (enum dp_fault_mode)mode;
    out->rank = rank;
    out->step = step;
    return 0;
}

void dp_launch_fault_before_step(const struct dp_fault *f, int step, int rank)
{
    if (f->rank != rank || f->step != step ||
        (f->mode != DP_FAULT_EXIT && f->mode != DP_FAULT_KILL && f->mode != DP_FAULT_HANG))
        return;
    static const char *const names[] = {"", "exit", "kill", "hang"};
    fprintf(stderr, "dplan: rank %d: fault injected at step %d (%s)\n", rank, step, names[f->mode]);
    fflush(stderr);
    if (f->mode == DP_FAULT_EXIT)
        _exit(DP_EXIT_FAULT);
    if (f->mode == DP_FAULT_KILL)
        raise(SIGKILL);
    for (;;)
        pause();
}
