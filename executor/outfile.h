/*
 * Writing an output file so that a failure never costs the previous one
 * (outfile.c): the bytes go to a new temporary file in the same directory,
 * which is fsynced and renamed over the final name only when complete.
 * Internal to the executor (data.c, weights.c, ckpt.c); the check of what
 * an output may overwrite is public (executor.h, dp_output_check).
 */
#ifndef DPLAN_EXECUTOR_OUTFILE_H
#define DPLAN_EXECUTOR_OUTFILE_H

#include <stddef.h>

#include "core/core.h"

/*
 * Create a new empty file next to `final`, named ".BASENAME.tmp-PID-N" (O_EXCL: never
 * an existing file, so neither an input nor another run's temporary is clobbered), with
 * mode 0666 less the umask. Returns its descriptor and writes its name to tmp[cap], or
 * a negative status with err set.
 */
int dp__tmp_open(const char *final, char *tmp, size_t cap, struct dp_err *err);
/* rename(tmp, final) (the data must already be fsynced and closed); on failure tmp is
 * deleted and err names both. */
int dp__tmp_publish(const char *tmp, const char *final, struct dp_err *err);

#endif
