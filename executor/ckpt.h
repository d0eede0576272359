/*
 * executor checkpoints: what `dplan run --ckpt-dir/--resume` and `dplan ckpt`
 * use (the rest of the executor's API is executor.h). The on-disk layout,
 * the manifest schema and the commit protocol are in README.md, section
 * "Checkpoints and restarts"; ckpt.c implements them.
 *
 * A checkpoint is the directory DIR/step_%08d holding one safetensors file
 * per rank (its weight slices under global tensor names, its AdamW m and v)
 * and manifest.json (model, layout, step, optimizer and data position, how
 * each global tensor is sharded, a CRC32C per file). It is written as
 * step_%08d.tmp and published by rank 0's rename once every rank's file is
 * on disk, so a directory named step_%08d is complete unless damaged later;
 * damage is caught by the checksums.
 */
#ifndef DPLAN_EXECUTOR_CKPT_H
#define DPLAN_EXECUTOR_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"

#define DP_CKPT_FORMAT 1

enum dp_ckpt_event_kind {
    DP_CKPT_SAVED = 0,   /* rank 0: a checkpoint was published */
    DP_CKPT_SAVE_FAILED, /* the save failed (on the failing rank, and on rank 0); training goes on
                          */
    DP_CKPT_SKIPPED,     /* resume: a checkpoint was damaged or incomplete; an older one is tried */
    DP_CKPT_RESUMED,     /* rank 0: training continues from this checkpoint */
    DP_CKPT_NOTE,        /* rank 0: something differs from the checkpoint but resume goes on */
};

struct dp_ckpt_event {
    enum dp_ckpt_event_kind kind;
    int rank;
    int step;             /* the checkpoint's step */
    const char *path;     /* its directory */
    const char *msg;      /* one line, for SAVE_FAILED, SKIPPED, NOTE */
    int64_t bytes;        /* SAVED: all files */
    double seconds;       /* SAVED: wall time of the save */
    const char *saved_at; /* SAVED, RESUMED: UTC ISO-8601 "2024-06-15T10:30:00Z" */
    bool local;           /* SAVE_FAILED: this rank's own write failed (else rank 0's verdict) */
};

/* TEST-ONLY faults (README "Checkpoints and restarts", DPLAN_FAULT_INJECT). */
enum dp_ckpt_fault {
    DP_CKPT_FAULT_NONE = 0,
    DP_CKPT_FAULT_CRASH,  /* the rank kills itself (SIGKILL) halfway through its file */
    DP_CKPT_FAULT_ENOSPC, /* the rank's write fails with ENOSPC halfway through its file */
};

struct dp_ckpt_opts {
    const char *dir;   /* checkpoints are written here (created); NULL = none */
    int every;         /* save after every N-th step; 0 = not by step count */
    double interval_s; /* and when this much wall time passed since the last save; 0 = off */
    int keep;          /* complete checkpoints kept (older ones are deleted); 0 = all */
    /* Resume from the newest complete checkpoint under this directory (or from this
     * checkpoint directory itself); NULL = start from initialisation. */
    const char *resume;
    void (*on_event)(const struct dp_ckpt_event *ev, void *ctx); /* may be NULL */
    void *ctx;
    /* TEST-ONLY: fault `fault` on rank `fault_rank` while saving step `fault_step`. */
    enum dp_ckpt_fault fault;
    int fault_rank, fault_step;
};
void dp_ckpt_opts_default(struct dp_ckpt_opts *o);

/*
 * Before launching ranks: the newest checkpoint under `dir` (or `dir` itself) whose
 * files are all present with their sizes must exist and suit model `m` under layout
 * `l` (same architecture, dtype, gbs and seq_len; dp, tp, pp, ZeRO may differ). The
 * ranks verify the checksums when they resume. Errors give the reason.
 */
int dp_ckpt_check_resume(const char *dir, const struct dp_model *m, const struct dp_layout *l,
                         struct dp_err *err);

/* ------------------------------------------------------------------ inspection */

enum dp_ckpt_state {
    DP_CKPT_OK = 0,      /* published; files present with their sizes (and checksums if verified) */
    DP_CKPT_UNPUBLISHED, /* step_N.tmp: a save that never finished (ignored by resume) */
    DP_CKPT_DAMAGED,     /* published but unreadable, truncated or failing its checksums */
    DP_CKPT_SUPERSEDED,  /* step_N.superseded: newer than the step a later run resumed from */
};

struct dp_ckpt_info {
    char path[4096]; /* the checkpoint directory */
    int step, steps; /* its step; the run's planned steps */
    enum dp_ckpt_state state;
    bool verified;     /* checksums were computed */
    char problem[768]; /* why it is not OK */
    char model[64];
    char layout[192]; /* dp_layout_format */
    int world, nfiles;
    int64_t bytes;
    char saved_at[32];
};

/*
 * The checkpoints under `dir` (a directory of step_N checkpoints, or one
 * checkpoint directory), sorted by step, ascending. With `verify` every
 * file's CRC32C is checked against the manifest, else only presence and size.
 * *out is malloc'ed (caller frees); DP_ENOENT when `dir` does not exist.
 */
int dp_ckpt_list(const char *dir, bool verify, struct dp_ckpt_info **out, int *n,
                 struct dp_err *err);

/* Tensor names of an exported file. */
enum dp_ckpt_names {
    DP_CKPT_NAMES_DPLAN = 0, /* as dplan run's model.safetensors: "wte", "h.0.attn.wq", ... */
    DP_CKPT_NAMES_HF = 1,    /* Hugging Face transformers: GPT2LMHeadModel or LlamaForCausalLM */
};

struct dp_ckpt_export_result {
    char checkpoint[4096];
    int step;
    int tensors;
    int64_t bytes;
};

/*
 * Gather the newest complete checkpoint under `dir` (or the one of step `step`
 * when step >= 0; or `dir` itself if it is one) into one safetensors file
 * `out_file` with full tensors (padded vocabulary rows dropped). Checksums are
 * verified first. With DP_CKPT_NAMES_HF the model must be GPT-2-like (LayerNorm,
 * GELU, learned positions, biases, tied embeddings) or Llama-like (RMSNorm,
 * SwiGLU, RoPE) and tensors are renamed, fused and transposed as transformers
 * stores them. Written to a temporary name and renamed.
 */
int dp_ckpt_export(const char *dir, int step, const char *out_file, enum dp_ckpt_names names,
                   struct dp_ckpt_export_result *res, struct dp_err *err);

#endif
