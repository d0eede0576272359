/*
 * Per-operation timing of a training step (opt-in: DPLAN_OPTIME=DIR): a table
 * of the backend's operations that forwards each call and adds what it took
 * to its operation's account, so that a step's time splits into what each
 * kind of kernel, collective and message cost, and what no operation covers
 * (the step code itself). The same wrapper runs over the step-time pricer
 * (predict.c) with the pricer's bill as its clock, so the predicted and the
 * measured step split the same way, operation by operation: the comparison
 * that finds what the prediction misses, and one that another job's load
 * disturbs less than the step's total. Internal to the executor.
 */
#ifndef DPLAN_EXECUTOR_OPTIME_H
#define DPLAN_EXECUTOR_OPTIME_H

#include "executor/backend/backend.h"

/* The directory DPLAN_OPTIME names, or NULL when the timing is off. */
const char *dp__optime_dir(void);
/* Wrap be's operations; `clock` gives seconds so far (wall time for a backend that
 * computes, the bill for the pricer). 0, or -1 when no slot is free or out of memory
 * (then be is left as it was). */
int dp__optime_wrap(struct dp_backend *be, double (*clock)(struct dp_backend *be));
/* A step starts: what the operations took since the last step is dropped. */
void dp__optime_begin(struct dp_backend *be);
/* A step of `step_s` seconds ended: its accounts are kept. */
void dp__optime_end(struct dp_backend *be, double step_s);
/* Write DIR/NAME.tsv: per operation its calls per step and the median over the steps
 * kept (the first left out when there are two or more: it faults the buffers in)
 * of its seconds per step, then the step, what no operation covered, and the GEMMs by
 * shape (their mean). Then restore be's own operations. */
int dp__optime_finish(struct dp_backend *be, const char *name);

#endif
