/*
 * ckpt: the checkpoint format of `dplan run`, offline. It depends on core
 * only and never starts MPI: the executor's rank-side save and resume
 * (executor/ckpt_save.c, ckpt_load.c), `dplan ckpt` and the launcher are its
 * clients. It does not train, decide when to save, or print.
 *
 * A checkpoint is the directory DIR/step_%08d holding one safetensors file
 * per rank (its weight slices under global tensor names, its AdamW m and v)
 * and manifest.json (model, layout, step, optimizer and data position, how
 * each global tensor is sharded, a CRC32C per file). It is written as
 * step_%08d.tmp and published by one rename once every rank's file is on
 * disk (dp_ckpt_publish), so a directory named step_%08d is complete unless
 * damaged later; damage is caught by the checksums. The layout, the manifest
 * schema and the commit protocol are in README.md, "Checkpoints and restarts".
 *
 * Contents: CRC32C; safetensors files (dp_ckpt_st_*); the parameter tensors
 * of a model under a layout (the names every file uses); directory naming,
 * publishing and pruning; where outputs may go; the manifest reader (core's
 * JSON readers: errors name the file and the JSON path) and writer; reading
 * a slice of a global tensor from the pieces that hold it; verification,
 * listing and export.
 */
#ifndef DPLAN_CKPT_H
#define DPLAN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

struct cJSON;

#define DP_CKPT_FORMAT   1
#define DP_CKPT_MANIFEST "manifest.json"

/* ------------------------------------------------------------------ CRC32C */

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78, RFC 3720 B.4) of buf, continuing
 * from `crc` (0 to start); SSE4.2's crc32 instruction when the CPU has it. */
uint32_t dp_ckpt_crc32c(uint32_t crc, const void *buf, size_t n);
/* CRC32C and size of a whole file. */
int dp_ckpt_file_crc32c(const char *path, uint32_t *crc, int64_t *size, struct dp_err *err);

/* ------------------------------------------------------------------ safetensors */

/*
 * Format (huggingface/safetensors README "Format"): an 8-byte little-endian
 * header length N, N bytes of UTF-8 JSON {"NAME": {"dtype", "shape",
 * "data_offsets": [BEGIN, END)}, ..., "__metadata__": {str: str}} (offsets
 * relative to the byte buffer after the header, END one past), then the
 * little-endian row-major bytes. Headers are at most 100 MB; this writer pads
 * them with spaces to a multiple of 8 as the reference implementation does.
 */
#define DP_ST_MAX_HEADER (100LL * 1000 * 1000)

struct dp_st_tensor {
    char key[96];
    const char *dtype; /* "F32", "F64" */
    int ndim;          /* 1 or 2 */
    int64_t shape[2];
    int64_t bytes;
};

/*
 * The header for `n` tensors stored back to back in this order, with `meta`
 * (key, value, key, value, ..., NULL) as "__metadata__". Returns malloc'ed text
 * of *len bytes (a multiple of 8), or NULL when out of memory.
 */
char *dp_ckpt_st_header(const struct dp_st_tensor *t, int n, const char *const *meta, size_t *len);

/* A writer that checksums what it writes; TEST-ONLY faults (DPLAN_FAULT_INJECT, launch.h)
 * fire once `fault_at` bytes have been written. */
enum dp_st_fault { DP_ST_FAULT_NONE = 0, DP_ST_FAULT_ENOSPC, DP_ST_FAULT_CRASH };

struct dp_st_writer {
    int fd;
    char path[4200];
    uint32_t crc;
    int64_t bytes;
    enum dp_st_fault fault;
    int64_t fault_at;
    struct dp_err *err;
};
/* Create `path` (truncating). */
int dp_ckpt_st_create(struct dp_st_writer *w, const char *path, struct dp_err *err);
/* Write to the open descriptor `fd` of `path` (dp_tmp_open's); the writer owns it. */
void dp_ckpt_st_adopt(struct dp_st_writer *w, int fd, const char *path, struct dp_err *err);
/* Append n bytes (checksummed); errors name the file and errno ("No space left on device"). */
int dp_ckpt_st_write(struct dp_st_writer *w, const void *buf, size_t n);
/* Append the 8-byte length prefix and the `hlen` bytes of header `hdr`. */
int dp_ckpt_st_write_header(struct dp_st_writer *w, const char *hdr, size_t hlen);
/* fsync (when `sync`) and close; the writer is closed whatever happens. */
int dp_ckpt_st_finish(struct dp_st_writer *w, bool sync);
/* Close and delete a failed file. */
void dp_ckpt_st_abandon(struct dp_st_writer *w);
/*
 * A file of whole tensors t[0..n) in that order with `meta` as "__metadata__", written to
 * a temporary next to `out_file` (dp_tmp_open) and renamed over it once complete and
 * fsynced, so a failure leaves the old file as it was. Tensor i's t[i].bytes come from
 * fill(i, buf, ctx) into `buf` (as large as the largest); a fill that fails (returns
 * non-zero with err set) abandons the file. *bytes (may be NULL) gets the file size.
 * The end-of-run model.safetensors and `dplan ckpt export` are this writer's.
 */
int dp_ckpt_st_write_file(const char *out_file, const struct dp_st_tensor *t, int n,
                          const char *const *meta, int (*fill)(int i, void *buf, void *ctx),
                          void *ctx, int64_t *bytes, struct dp_err *err);

struct dp_st_entry {
    char key[96];
    char dtype[8];
    int ndim;
    int64_t shape[4];
    int64_t begin, end; /* bytes, relative to the data buffer */
};

struct dp_st_file {
    int fd;
    char path[4200];
    int64_t size;          /* file bytes */
    int64_t data_start;    /* 8 + header length */
    struct dp_st_entry *e; /* sorted by key */
    int n;
    struct cJSON *meta; /* "__metadata__" object or NULL (owned) */
};

/*
 * Open and validate: the length prefix, a header within the file and under
 * 100 MB, a JSON object whose entries have a known dtype, a shape whose
 * element count times the dtype size equals END - BEGIN, offsets inside the
 * data buffer, no overlaps, no duplicate names. Errors name the file and the
 * tensor ("truncated", "data_offsets ... beyond the end"). Nothing is left
 * open on failure.
 */
int dp_ckpt_st_open(const char *path, struct dp_st_file *f, struct dp_err *err);
void dp_ckpt_st_close(struct dp_st_file *f);
const struct dp_st_entry *dp_ckpt_st_find(const struct dp_st_file *f, const char *key);
/* Read n bytes at `off` of the data buffer. */
int dp_ckpt_st_pread(const struct dp_st_file *f, int64_t off, void *buf, size_t n,
                     struct dp_err *err);
/* A "__metadata__" string value, or NULL. */
const char *dp_ckpt_st_meta(const struct dp_st_file *f, const char *key);
/* Bytes per element of a safetensors dtype, 0 if unknown. */
int dp_ckpt_st_dtype_size(const char *dtype);

/* ------------------------------------------------------------------ the parameter tensors */

/* What a parameter tensor is, for the executor's initialisation and layer offsets. */
enum dp_ckpt_role {
    DP_ROLE_WTE = 0, /* token embedding [vocab, h] (also the last stage's tied copy) */
    DP_ROLE_WPE,     /* learned positions [max_position, h] */
    DP_ROLE_LN1_W,
    DP_ROLE_LN1_B,
    DP_ROLE_WQ, /* [heads d, h]; wk and wv follow, so the local rows fuse as [q; k; v] */
    DP_ROLE_WK,
    DP_ROLE_WV,
    DP_ROLE_BQ,
    DP_ROLE_BK,
    DP_ROLE_BV,
    DP_ROLE_WO, /* [h, heads d] */
    DP_ROLE_BO,
    DP_ROLE_LN2_W,
    DP_ROLE_LN2_B,
    DP_ROLE_W1,    /* GELU: mlp.w1 [ffn, h]; SwiGLU: mlp.w_gate, with w_up following */
    DP_ROLE_W1_UP, /* SwiGLU mlp.w_up */
    DP_ROLE_B1,
    DP_ROLE_B1_UP,
    DP_ROLE_W2, /* [h, ffn] */
    DP_ROLE_B2,
    DP_ROLE_LNF_W,
    DP_ROLE_LNF_B,
    DP_ROLE_HEAD, /* untied LM head [vocab, h] */
    /* Mixture-of-experts layers (in place of W1..B2): the router [E, h] (replicated), each
     * routed expert's MLP (h.L.mlp.experts.J.*; TP splits it like the dense MLP) and the
     * shared experts as one dense MLP (h.L.mlp.shared.*). */
    DP_ROLE_ROUTER,
    DP_ROLE_EXP_W1, /* GELU w1 / SwiGLU w_gate [moe_ffn, h]; SwiGLU w_up follows */
    DP_ROLE_EXP_W1_UP,
    DP_ROLE_EXP_W2, /* [h, moe_ffn] */
    DP_ROLE_SH_W1,  /* [shared * shared_ffn, h] */
    DP_ROLE_SH_W1_UP,
    DP_ROLE_SH_W2,
    /* DeepSeek-V3's score-correction bias [E] of the router (replicated, no gradient:
     * moved by a sign rule after each step, executor/moe.c), Qwen2-MoE's shared-expert
     * gate [1, h] (replicated), the routed experts' MLP biases (mlp_bias). */
    DP_ROLE_ROUTER_BIAS,
    DP_ROLE_SH_GATE,
    DP_ROLE_EXP_B1, /* GELU b1 / SwiGLU b_gate [moe_ffn]; SwiGLU b_up follows */
    DP_ROLE_EXP_B1_UP,
    DP_ROLE_EXP_B2, /* [h], replicated over TP */
    /* Qwen3's q/k RMSNorm weights [head_dim] (replicated; every head of the kind shares
     * one), after the q/k/v biases. */
    DP_ROLE_QNORM,
    DP_ROLE_KNORM,
};

/*
 * One rank's slice [r0, r0 + rows) x [c0, c0 + cols) of the global tensor `name`
 * (grows x gcols; vectors have cols = gcols = 1). Tensor parallelism as Megatron-LM
 * (megatron/core/tensor_parallel/layers.py): q, k, v, MLP-in and their biases are split
 * by rows (column-parallel), attention-out and MLP-out by columns (row-parallel), the
 * embedding and LM head by rows of the vocabulary padded to a multiple of 128 tp
 * (dp_padded_vocab); norms and row-parallel biases are replicated.
 */
struct dp_ckpt_slice {
    char name[48]; /* "wte", "h.0.attn.wq", ... */
    enum dp_ckpt_role role;
    int layer;          /* global layer index, -1 outside the layers */
    int64_t rows, cols; /* local */
    int64_t grows, gcols;
    int64_t r0, c0;
    int64_t out_rows; /* global rows stored in files (the unpadded vocabulary) */
    bool replicated;  /* every TP rank holds the whole tensor */
    bool tied_copy;   /* the last stage's copy of a tied embedding (pp > 1) */
    int expert;       /* routed expert index (DP_ROLE_EXP_*), else -1 */
};

/*
 * The parameter slices of pipeline stage `stage` on TP rank `tp_rank`, in the order of
 * the stage's flat parameter buffer: the embedding (first stage), per layer ln1, q, k,
 * v (and their biases), wo (bo), ln2, MLP-in (biases), MLP-out (bias), then the final
 * norm and the LM head or the tied copy (last stage). *out is malloc'ed (caller frees).
 */
int dp_ckpt_stage_slices(const struct dp_model *m, const struct dp_layout *l, int stage,
                         int tp_rank, struct dp_ckpt_slice **out, int *n, struct dp_err *err);
/* The same for a rank whose expert-parallel place is ep_rank (of l->ep): a MoE layer holds
 * routed experts [ep_rank E / ep, (ep_rank + 1) E / ep) only; ep_rank < 0: every expert
 * (the whole model's table, as dp_ckpt_stage_slices gives). Each routed expert is split
 * over dp_layout_etp(l) ranks (Megatron-Core's expert tensor parallelism), this rank's
 * slice etp_rank of them. */
int dp_ckpt_stage_slices_ep(const struct dp_model *m, const struct dp_layout *l, int stage,
                            int tp_rank, int ep_rank, int etp_rank, struct dp_ckpt_slice **out,
                            int *n, struct dp_err *err);
/* The name checkpoints store a slice under: the tied copy is NAME.tied_copy. */
void dp_ckpt_slice_key(const struct dp_ckpt_slice *s, char *buf, size_t cap);
/* Whether TP splits the slice (its rows or its columns). */
bool dp_ckpt_slice_split(const struct dp_ckpt_slice *s);

/* ------------------------------------------------------------------ directories */

/* "DIR/step_%08d" + suffix ("", ".tmp", ".superseded"). */
void dp_ckpt_step_path(char *buf, size_t cap, const char *dir, int step, const char *suffix);
/* Whether `dir` is one checkpoint (holds a manifest) rather than a directory of step_N. */
bool dp_ckpt_is_one(const char *dir);

enum dp_ckpt_entry_kind { DP_CKPT_E_PUBLISHED = 0, DP_CKPT_E_TMP, DP_CKPT_E_SUPERSEDED };
struct dp_ckpt_entry {
    int step;
    enum dp_ckpt_entry_kind kind;
};
/* The step_* entries of `dir`, sorted by step (ascending; *out malloc'ed). -1 when `dir`
 * cannot be read (errno set). */
int dp_ckpt_scan(const char *dir, struct dp_ckpt_entry **out, int *n);
/* Published checkpoints to try, newest first: `dir` itself when it is one (*single, with
 * step 0). -1 when `dir` cannot be read. */
int dp_ckpt_candidates(const char *dir, int **steps, int *n, bool *single);
/* The checkpoint to open: `dir` itself when single, else its step_N. */
void dp_ckpt_candidate_path(char *buf, size_t cap, const char *dir, bool single, int step);

/* Before a save: create `dir`, delete the half-written saves a crash left (once per
 * process: *cleaned), and create an empty `tmp` directory in it. */
int dp_ckpt_prepare(const char *dir, const char *tmp, bool *cleaned, struct dp_err *err);
/* Write `manifest` (text) into `tmp`, fsync it and `tmp`, rename `tmp` to `final` (a
 * damaged checkpoint of the same step is discarded first) and fsync `dir`. */
int dp_ckpt_publish(const char *dir, const char *tmp, const char *final, const char *manifest,
                    struct dp_err *err);
/* Keep the newest `keep` (0: all) published checkpoints up to `step`; newer ones (a
 * timeline abandoned by resuming from an older checkpoint) become step_N.superseded. */
void dp_ckpt_prune(const char *dir, int step, int keep);
/* Delete a directory of files (a failed save). */
int dp_ckpt_remove(const char *dir);
/* fsync a directory. */
int dp_ckpt_fsync_dir(const char *dir, struct dp_err *err);

/* An input file and how the user named it (NULL: not said), for messages. */
struct dp_io {
    const char *path;
    const char *what; /* "--data", "the plan", ... */
};
/*
 * Whether the output `out` (a file or a directory; it need not exist yet) may be
 * written: refused (DP_EINVAL, err naming both) when it is the same file as one of the
 * `nin` inputs (same st_dev and st_ino, so also through symbolic and hard links), or
 * when it is or lies inside a checkpoint directory (one holding manifest.json or named
 * step_%08d[.tmp|.superseded|.trash], by the path as given or with links resolved), or
 * when it is an existing file of the profiles directory (dp_profiles_dir(), links
 * resolved): every command reads profiles, some through others (a system names its GPU,
 * links and network). `what` names the option for the message ("-o", "--out"). Inputs
 * that do not exist are skipped. Every writer of dplan also writes to a temporary name and
 * renames.
 */
int dp_output_check(const char *out, const char *what, const struct dp_io *in, int nin,
                    struct dp_err *err);
/* Whether two paths name the same existing file (same st_dev and st_ino), as dp_output_check
 * compares an output with its inputs. */
bool dp_output_same_file(const char *a, const char *b);

/* ------------------------------------------------------------------ the manifest */

/* What a run records beside the tensors. */
struct dp_ckpt_meta {
    int step, steps, world;
    char saved_at[32]; /* UTC ISO-8601 "2024-06-15T10:30:00Z" */
    char dtype[8];     /* "F32" */
    struct dp_model model;
    struct dp_layout layout;
    int64_t adam_step; /* AdamW's t */
    /* fp16 runs: the dynamic loss scaler's scale (0: none, not written), its clean steps
     * since the last overflow or growth, its overflows left before a backoff */
    double loss_scale;
    int64_t loss_scale_growth, loss_scale_hysteresis;
    bool zero; /* optimizer state as ZeRO-1 flat shards, else per tensor */
    double lr, warmup, min_lr_frac, wd, beta1, beta2, eps, clip;
    char data_source[256];
    int64_t data_tokens, gbs, seq_len;
    uint32_t data_crc;
    uint64_t seed;
};

/* The three states a piece holds: weights, AdamW m, AdamW v. */
enum dp_ckpt_kind { DP_CKPT_PARAM = 0, DP_CKPT_EXP_AVG = 1, DP_CKPT_EXP_AVG_SQ = 2 };

struct dp_ckpt_piece {
    int file; /* index into files */
    char key[96];
    int64_t r0, c0, rows, cols, flat_off;
    int tp_rank, group;             /* group: the ZeRO-1 group of its optimizer state */
    const struct dp_st_entry *e[3]; /* resolved on first use */
};

struct dp_ckpt_tensor {
    char name[96];
    int64_t rows, cols, padded_rows; /* global shape [rows, cols] (cols 1 for vectors) */
    int ndim, stage;
    bool tied; /* the tied embedding's copy */
    int np;
    struct dp_ckpt_piece *p;
};

struct dp_ckpt_zshard {
    int file;
    int64_t flat_off;
    const struct dp_st_entry *e[3];
};

struct dp_ckpt_zgroup {
    int tp_rank, pp_rank;
    int64_t flat_elems, shard_elems;
    int n;
    struct dp_ckpt_zshard *s;
};

struct dp_ckpt_file {
    char name[64];
    int64_t bytes;
    uint32_t crc;
    bool open;
    struct dp_st_file st;
};

/* An opened checkpoint: its manifest, and its files as they get opened. */
struct dp_ckpt {
    char dir[4200];
    struct dp_ckpt_meta meta;
    struct dp_ckpt_file *files;
    int nfiles;
    struct dp_ckpt_tensor *t; /* manifest order */
    int nt;
    struct dp_ckpt_zgroup *g;
    int ng;
    /* Called every 64 Ki elements read (the executor's heartbeat); may be NULL. */
    void (*on_progress)(void);
};

/*
 * Read dir/manifest.json (no tensor file is opened or checked yet). Errors name the file
 * and the JSON path ("manifest.json: tensors[3].shards[0].offset: expected [a, b] with
 * 0 <= a, b <= 2^31, got ..."); DP_ENOENT without a manifest. Nothing is left allocated
 * on failure.
 */
int dp_ckpt_open(const char *dir, struct dp_ckpt *ck, struct dp_err *err);
/* Parse a manifest already in memory (`file` names it in messages). */
int dp_ckpt_parse(const char *file, const struct cJSON *root, struct dp_ckpt *ck,
                  struct dp_err *err);
void dp_ckpt_close(struct dp_ckpt *ck);
/* A tensor of the manifest by name, or NULL. */
const struct dp_ckpt_tensor *dp_ckpt_find(const struct dp_ckpt *ck, const char *name);

/* One rank's file as the manifest records it. */
struct dp_ckpt_rank_file {
    int64_t bytes;
    uint32_t crc;
};
/*
 * The manifest of a checkpoint of `meta` whose ranks wrote files[world] (rank_%05d.
 * safetensors); the tensors and their shards, and the ZeRO-1 groups, follow from the
 * model and layout (dp_ckpt_stage_slices). NULL when out of memory.
 */
struct cJSON *dp_ckpt_manifest_json(const struct dp_ckpt_meta *meta,
                                    const struct dp_ckpt_rank_file *files, struct dp_err *err);
/* "rank_%05d.safetensors". */
void dp_ckpt_rank_file_name(char *buf, size_t cap, int rank);

/* ------------------------------------------------------------------ reading tensors */

/*
 * Elements [a, b) (row-major) of the slice `s` of tensor `t` (state `kind`) into dst,
 * in the checkpoint's dtype (meta.dtype: the caller's element type). Rows past the
 * model's vocabulary (padding) that the checkpoint lacks become zero; any other
 * element missing from the shards is an error.
 */
int dp_ckpt_read(struct dp_ckpt *ck, struct dp_ckpt_tensor *t, enum dp_ckpt_kind kind,
                 const struct dp_ckpt_slice *s, int64_t a, int64_t b, void *dst,
                 struct dp_err *err);
/* The tensor slice `s` is read from (its tied copy, or the original it equals), checked
 * against its shape; NULL with err set. */
struct dp_ckpt_tensor *dp_ckpt_source(struct dp_ckpt *ck, const struct dp_ckpt_slice *s,
                                      struct dp_err *err);

/* ------------------------------------------------------------------ verification */

/* Size and (with `crc`) checksum of file i against the manifest. */
int dp_ckpt_verify_file(const struct dp_ckpt *ck, int i, bool crc, struct dp_err *err);
/*
 * The manifest against the model it names: every global tensor of that model (under the
 * manifest's layout) is listed with its shape and shards that cover it; and for the
 * files i with i % nranks == rank, every shard's entries (weights, m and v, or the
 * ZeRO-1 shards) are in the file with the right dtype and size. *bad_file gets a file
 * found damaged (-1: none), whose checksum failure is reported instead when it has one.
 */
int dp_ckpt_verify_structure(struct dp_ckpt *ck, int rank, int nranks, int *bad_file,
                             struct dp_err *err);
/* Why checkpoint `ck` cannot continue training `m` under `l` in `dtype` ("" when it can):
 * architecture, dtype, gbs and seq_len must match; dp, tp, pp and ZeRO may differ. */
void dp_ckpt_incompatibility(const struct dp_ckpt *ck, const struct dp_model *m,
                             const struct dp_layout *l, const char *dtype, char *why, size_t cap);

/*
 * Before launching ranks: the newest checkpoint under `dir` (or `dir` itself) whose
 * files are all present with their sizes must exist and suit model `m` under layout
 * `l` in `dtype`. The ranks verify the checksums when they resume. Errors give the
 * reason.
 */
int dp_ckpt_check_resume(const char *dir, const struct dp_model *m, const struct dp_layout *l,
                         const char *dtype, struct dp_err *err);

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
/* The newest published checkpoint under `dir` whose files are present with their sizes
 * (the ranks verify the checksums); false when there is none or `dir` is NULL. */
bool dp_ckpt_newest(const char *dir, struct dp_ckpt_info *out);

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
