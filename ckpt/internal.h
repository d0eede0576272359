/*
 * ckpt internals shared by its files; not for other modules.
 */
#ifndef DPLAN_CKPT_INTERNAL_H
#define DPLAN_CKPT_INTERNAL_H

#include "ckpt.h"

#define DP__PATHMAX 4200
/* Bound on a dimension or offset read from a manifest. */
#define DP__MAXDIM 2147483648.0

/* Key prefixes of the three states in a rank file: weights under their names, AdamW's m
 * and v under "exp_avg." and "exp_avg_sq." (per tensor) or as the ZeRO-1 flat shards
 * "exp_avg" and "exp_avg_sq". */
extern const char *const dp__ckpt_kind_prefix[3];
extern const char *const dp__ckpt_zero_key[3];

bool dp__ckpt_is_dir(const char *path);
void dp__ckpt_manifest_path(char *buf, size_t cap, const char *dir);
/* The entry `key` of file i, checked to hold `elems` elements of the checkpoint's dtype
 * (the file is opened on first use). */
int dp__ckpt_resolve(struct dp_ckpt *ck, int i, const char *key, int64_t elems,
                     const struct dp_st_entry **out, struct dp_err *err);
/* One published checkpoint's state (dp_ckpt_list's entry); step -1: `path` itself. */
void dp__ckpt_check_one(const char *path, int step, bool verify, struct dp_ckpt_info *in);
/* A whole global tensor (rows x cols, padding dropped) into buf. */
int dp__ckpt_gather(struct dp_ckpt *ck, struct dp_ckpt_tensor *t, void *buf, struct dp_err *err);

/* TEST-ONLY (DPLAN_FAULT_INJECTION, fault.c): before writing *k bytes, the fault of a
 * writer that has one: *k shrinks to the bytes left before it, and at its point the
 * process dies (CRASH) or the write fails with ENOSPC (a non-zero status, err set). */
#ifdef DPLAN_FAULT_INJECTION
int dp__st_fault(struct dp_st_writer *w, size_t *k);
#else
static inline int dp__st_fault(struct dp_st_writer *w, size_t *k)
{
    (void)w, (void)k;
    return 0;
}
#endif

#endif
