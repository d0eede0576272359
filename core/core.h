/*
 * core: the plain data every dplan module shares (model, cluster, layout,
 * error) and the JSON readers that fill it from files.
 *
 * It does not compute costs, plan, probe hardware or print: library code
 * returns a negative enum dp_status and fills a struct dp_err; only cli/
 * prints and exits.
 */
#ifndef DPLAN_CORE_H
#define DPLAN_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DP_PLAN_MAX_STAGES_RECORDED 256
/* Model chunks (pp x vpp virtual pipeline stages) a layout may have. */
#define DP_MAX_CHUNKS 256

struct cJSON;

/* ------------------------------------------------------------------ errors */

enum dp_status {
    DP_OK = 0,
    DP_EINVAL = -1,      /* bad input: file contents, field values */
    DP_EUSAGE = -2,      /* bad command line (exit code 2) */
    DP_ENOENT = -3,      /* missing file or unknown profile name */
    DP_EIO = -4,         /* read/write failure */
    DP_ENOMEM = -5,      /* allocation failure */
    DP_EINFEASIBLE = -6, /* a layout that cannot run (does not divide, OOM) */
    DP_ERUNTIME = -7,    /* failure while executing (MPI, CUDA, NaN loss) */
};

struct dp_err {
    int code;       /* enum dp_status of the first error, 0 if none */
    char msg[1024]; /* one line, git style: "where: what" */
};

/* Record an error (the first one wins) and return `code`. */
int dp_err_set(struct dp_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix the stored message with "prefix: " (adds a location). */
void dp_err_prefix(struct dp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dp_err_clear(struct dp_err *err);
/* Process exit code for a status: 0, 2 for usage errors, 1 otherwise. */
int dp_status_exit_code(int status);

/* ------------------------------------------------------------------ JSON */

/*
 * A reader context: the file being read and the JSON path of the object
 * currently being read, so that every error names both, e.g.
 * "profiles/gpu/h100.json: peak_tflops.bf16: expected number > 0, got string".
 */
struct dp_jr {
    const char *file;
    char path[192];
    struct dp_err *err;
};

/* Parse `len` bytes; syntax errors report "file:line:col: JSON syntax error". */
int dp_json_parse(const char *file, const char *buf, size_t len, struct cJSON **out,
                  struct dp_err *err);
/* Read and parse a whole file (at most 64 MiB). */
int dp_json_load_file(const char *file, struct cJSON **out, struct dp_err *err);
/* Write `root` pretty-printed to `file` atomically (tmp + rename). */
int dp_json_save_file(const char *file, const struct cJSON *root, struct dp_err *err);

/* Append ".key" (or "[i]" when key is NULL) to jr->path; returns the old length. */
size_t dp_jr_push(struct dp_jr *jr, const char *key, int index);
void dp_jr_pop(struct dp_jr *jr, size_t old_len);

/* Fail with "file: path: unknown field "k" (expected one of: a, b)" for any key not in
 * `allowed` (NULL-terminated). */
int dp_jr_check_keys(struct dp_jr *jr, const struct cJSON *obj, const char *const *allowed);
/* All of keys (NULL-terminated) present: else, when two or more are missing, one error
 * naming them all ("FILE: missing required fields: heads, vocab"); one missing field is
 * left to its reader, whose message says what it expects. */
int dp_jr_require_all(struct dp_jr *jr, const struct cJSON *obj, const char *const *keys);
/* Require `obj` to be a JSON object ("what" names the expected content). */
int dp_jr_expect_object(struct dp_jr *jr, const struct cJSON *obj, const char *what);

/*
 * Field readers. Each looks up `key` in `obj` (case-sensitive). If the key is
 * missing: required -> error "missing", else *out is left unchanged and 0 is
 * returned. A JSON null counts as missing. Ranges are inclusive.
 */
int dp_jr_number(struct dp_jr *jr, const struct cJSON *obj, const char *key, bool required,
                 double lo, double hi, double *out);
int dp_jr_int(struct dp_jr *jr, const struct cJSON *obj, const char *key, bool required, int64_t lo,
              int64_t hi, int64_t *out);
int dp_jr_bool(struct dp_jr *jr, const struct cJSON *obj, const char *key, bool required,
               bool *out);
int dp_jr_string(struct dp_jr *jr, const struct cJSON *obj, const char *key, bool required,
                 char *out, size_t cap);
/* A string that must be one of names[0..n); *out gets its index. */
int dp_jr_enum(struct dp_jr *jr, const struct cJSON *obj, const char *key, bool required,
               const char *const *names, int n, int *out);
/* Describe a JSON value's type for messages: "string \"fast\"", "number 3", "null". */
void dp_json_describe(const struct cJSON *v, char *out, size_t cap);

/* ------------------------------------------------------------------ model */

enum dp_ffn_kind { DP_FFN_GELU = 0, DP_FFN_SWIGLU = 1 };
enum dp_norm_kind { DP_NORM_LAYERNORM = 0, DP_NORM_RMSNORM = 1 };
enum dp_pos_kind { DP_POS_ROPE = 0, DP_POS_LEARNED = 1, DP_POS_ALIBI = 2 };

/*
 * A decoder-only transformer. Shapes follow Megatron's notation: h hidden,
 * a heads, g kv heads (query groups), d head_dim, f ffn hidden, V vocab.
 */
struct dp_model {
    char name[64];
    char format[64];        /* "dplan", "hf:<model_type>", or "hf:<family> (model_type <t>)"
                               for a model with its own code read by its architectures */
    int64_t layers;         /* L */
    int64_t hidden;         /* h */
    int64_t heads;          /* a */
    int64_t kv_heads;       /* g; == heads for MHA, 1 for MQA */
    int64_t head_dim;       /* d; usually h / a */
    int64_t ffn_hidden;     /* f: dense MLP width (per expert: moe_ffn_hidden) */
    int64_t vocab;          /* V, unpadded as published */
    int64_t seq_len;        /* default training sequence length */
    char seq_len_from[128]; /* where seq_len came from, for "--seq-len not given: ..." */
    int64_t max_pos;        /* learned position embeddings (0 unless pos == LEARNED) */
    enum dp_ffn_kind ffn;
    enum dp_norm_kind norm;
    enum dp_pos_kind pos;
    bool tied_embeddings;   /* LM head shares the token embedding */
    bool qkv_bias;          /* biases on the Q, K, V projections */
    bool out_bias;          /* bias on the attention output projection */
    bool mlp_bias;          /* biases on the MLP linears */
    int norms_per_layer;    /* 2; 1 for Falcon-7B's parallel attention; 4 for Gemma 2/3's
                               pre- and post-norms around both blocks */
    bool dropout;           /* dropout layers present in training (GPT-2/3 style) */
    int64_t experts;        /* 0 for dense models */
    int64_t top_k;          /* experts per token */
    int64_t moe_ffn_hidden; /* expert MLP width; == ffn_hidden unless given */
    /* MoE layers beyond routed experts (0/false when absent). */
    int64_t moe_shared_experts;    /* always-active experts per MoE layer (DeepSeek, Qwen2-MoE) */
    int64_t moe_shared_ffn_hidden; /* width of each shared expert */
    bool moe_shared_gate;          /* Qwen2-MoE: sigmoid gate Linear(h, 1) on the shared output */
    bool moe_router_bias;          /* DeepSeek-V3: e_score_correction_bias, E values per layer */
    int64_t moe_dense_layers;      /* the first k layers are dense MLPs of ffn_hidden
                                      (DeepSeek first_k_dense_replace) */
    bool qk_norm;                  /* Qwen3: RMSNorm(head_dim) on queries and keys */
    bool qk_norm_full;             /* OLMo 2: the q/k norms over all heads at once,
                                      RMSNorm(heads head_dim) and RMSNorm(kv_heads head_dim) */
    /* Sliding-window attention (Mistral 7B, Phi-3, Gemma 2/3): window_layers of the
     * layers attend to the last `window` tokens only (0: every layer attends fully). */
    int64_t window;
    int64_t window_layers;
    bool attn_sinks; /* gpt-oss: one learned logit per head and layer joins the softmax */
    /* Multi-token-prediction modules the published model has (DeepSeek-V3: 1, config.json
     * num_nextn_predict_layers); whether a run trains them is the layout's mtp_layers. */
    int64_t mtp_layers;
    /* Multi-head latent attention (DeepSeek-V2/V3): Q and K heads are head_dim =
     * mla_nope_dim + mla_rope_dim wide, V heads mla_v_dim; kv_heads == heads. */
    bool mla;
    int64_t mla_q_rank;  /* q_lora_rank; 0: a plain h x a*head_dim query projection */
    int64_t mla_kv_rank; /* kv_lora_rank */
    int64_t mla_nope_dim, mla_rope_dim, mla_v_dim;
};

/*
 * Layer kinds. A MoE model whose first moe_dense_layers layers are dense has
 * two kinds; costs are charged per kind, by the layers each stage holds.
 */
enum dp_layer_kind { DP_LAYER_DENSE = 0, DP_LAYER_MOE = 1, DP_LAYER_KINDS = 2 };
struct dp_layer_kinds {
    int n[DP_LAYER_KINDS]; /* layers of each kind */
};
/* The kind of layer i (0-based). */
enum dp_layer_kind dp_model_layer_kind(const struct dp_model *m, int64_t i);
/* The kind of a multi-token-prediction layer (layout mtp_layers): the last layer's, as
 * Megatron-Core builds it from the decoder's last layer spec. */
enum dp_layer_kind dp_model_mtp_kind(const struct dp_model *m);
/* Counts per kind of the layers [first, first + count). */
void dp_model_layer_kinds(const struct dp_model *m, int64_t first, int64_t count,
                          struct dp_layer_kinds *out);
/* Does the model have layers of more than one kind? */
static inline bool dp_model_mixed_layers(const struct dp_model *m)
{
    return m->experts > 0 && m->moe_dense_layers > 0;
}

/*
 * The training sequence length assumed for a Hugging Face config whose context limit
 * (max_position_embeddings) is longer: Llama 3's pre-training length. Shorter limits are
 * taken as the training length; rope_scaling.original_max_position_embeddings wins.
 */
#define DP_HF_TRAIN_SEQ 8192

/* Attention-score work of an average layer at sequence length s against full causal
 * attention's s(s+1)/2 query-key pairs: 1 without a sliding window, less with one
 * (a window of w < s keeps w s - w(w-1)/2 pairs). */
double dp_model_attn_pair_ratio(const struct dp_model *m, int64_t s);
/* DP_EINFEASIBLE when the model cannot take sequences of seq_len tokens: learned
 * position embeddings stop at max_position. */
int dp_model_check_seq_len(const struct dp_model *m, int64_t seq_len, struct dp_err *err);

/* Parameter counts of the model as published (unpadded vocabulary). */
struct dp_param_count {
    int64_t total;     /* every weight */
    int64_t active;    /* per token: MoE counts top_k experts; == total if dense */
    int64_t embedding; /* token (+ learned position) embeddings */
    int64_t lm_head;   /* 0 when tied */
    int64_t per_layer; /* one transformer layer, all experts (MoE models: a MoE layer) */
    int64_t per_layer_active;
    int64_t per_dense_layer; /* one dense layer (== per_layer for dense models; 0 if none) */
    int64_t attention;       /* the attention block of one layer (with its norm) */
    int64_t final_norm;
};

/*
 * Load a model from `path`, which is a file (dplan model.json or a Hugging
 * Face config.json, detected by content) or the name of a shipped model in
 * profiles/models/ (e.g. "llama2-7b"). Fills *m on success.
 */
int dp_model_load(const char *path, struct dp_model *m, struct dp_err *err);
/* The same from an already parsed JSON object (used by plan.json). */
int dp_model_from_json(struct dp_jr *jr, const struct cJSON *obj, struct dp_model *m);
/* Check the invariants of a filled model (positive sizes, heads divide hidden...). */
int dp_model_validate(const struct dp_model *m, const char *file, struct dp_err *err);
void dp_model_count(const struct dp_model *m, struct dp_param_count *out);
/* Serialize as a dplan model.json object (caller owns the result). */
struct cJSON *dp_model_to_json(const struct dp_model *m);
const char *dp_ffn_name(enum dp_ffn_kind k);
const char *dp_norm_name(enum dp_norm_kind k);
const char *dp_pos_name(enum dp_pos_kind k);

/* ------------------------------------------------------------------ hardware */

/* Storage precision of weights and activations (and the default GEMM compute type). */
enum dp_precision { DP_BF16 = 0, DP_FP16 = 1, DP_FP32 = 2, DP_PRECISIONS = 3 };
const char *dp_precision_name(enum dp_precision p);
int dp_precision_bytes(enum dp_precision p);

/*
 * What the tensor cores compute the linear layers' GEMMs in, separate from
 * storage: FP8 runs keep bf16 weights, activations and master weights and cast
 * each GEMM's inputs to FP8 (Transformer Engine fp8_autocast, torchao float8).
 * DP_GEMM_DEFAULT follows the storage precision (bf16 -> bf16, fp32 -> fp32).
 */
enum dp_gemm {
    DP_GEMM_DEFAULT = 0,
    DP_GEMM_BF16 = 1,
    DP_GEMM_FP16 = 2,
    DP_GEMM_TF32 = 3,
    DP_GEMM_FP32 = 4,
    DP_GEMM_FP8 = 5,
    DP_GEMMS = 6,
};
/*
 * FP8 scaling recipes: delayed (per-tensor scale from an amax history, TE's
 * DelayedScaling, Megatron --fp8-recipe delayed), current (per-tensor amax of
 * the tensor itself: TE Float8CurrentScaling, torchao "tensorwise"), rowwise
 * (torchao per-row scales), blockwise (1x128 / 128x128 blocks: TE
 * Float8BlockScaling, DeepSeek-V3), mxfp8 (32-element blocks with E8M0 scales,
 * needs Blackwell's block-scaled tensor cores).
 */
enum dp_fp8_recipe {
    DP_FP8_DELAYED = 0,
    DP_FP8_CURRENT = 1,
    DP_FP8_ROWWISE = 2,
    DP_FP8_BLOCKWISE = 3,
    DP_FP8_MXFP8 = 4,
    DP_FP8_RECIPES = 5,
};
/*
 * The fused attention kernel (with flash_attn): FlashAttention-2 (written for
 * Ampere; PyTorch SDPA's flash backend), FlashAttention-3 (Hopper: wgmma, TMA),
 * cuDNN fused attention (Transformer Engine's FusedAttention on Hopper and
 * Blackwell), the Triton kernels of 2023 (flash_attn_triton.py), FlashAttention (1),
 * FlexAttention (torch.nn.attention.flex_attention: a Triton kernel Inductor generates
 * from the mask; torchtitan's default attention backend for its Qwen3 and DeepSeek-V3
 * models). DP_ATTN_DEFAULT is the GPU profile's default kernel.
 */
enum dp_attn {
    DP_ATTN_DEFAULT = 0,
    DP_ATTN_FLASH2 = 1,
    DP_ATTN_FLASH3 = 2,
    DP_ATTN_CUDNN = 3,
    DP_ATTN_TRITON = 4,
    DP_ATTN_FLASH1 = 5,
    DP_ATTN_FLEX = 6,
    DP_ATTNS = 7,
};
const char *dp_attn_name(enum dp_attn a);
/* A kernel by name ("flash2" ... "flash1", not "default"); -1 if unknown. */
int dp_attn_parse(const char *s);

/* hybrid: E4M3 forward, E5M2 gradients (TE Format.HYBRID); e4m3 everywhere. */
enum dp_fp8_format { DP_FP8_HYBRID = 0, DP_FP8_E4M3 = 1 };
const char *dp_gemm_name(enum dp_gemm g);
const char *dp_fp8_recipe_name(enum dp_fp8_recipe r);
const char *dp_fp8_format_name(enum dp_fp8_format f);
/* Parse a name ("fp8", "tensorwise" is an alias of "current"); -1 if unknown. */
int dp_gemm_parse(const char *s);
int dp_fp8_recipe_parse(const char *s);

/*
 * Achievable matrix-multiply efficiency as a function of problem size:
 * eff(flops) = eff_max * x / (x + half_flops), with x the GEMM's FLOPs.
 * A saturating curve fitted to published GEMM sweeps; see profiles/README.md.
 */
struct dp_gemm_curve {
    double eff_max;    /* (0, 1]: best fraction of dense peak reached */
    double half_flops; /* FLOPs at which half of eff_max is reached */
};

struct dp_gpu {
    char name[64];
    char vendor[16];
    double peak_tflops[DP_PRECISIONS]; /* dense (never 2:4 sparse) TFLOP/s */
    double fp8_tflops;                 /* 0 if none */
    double tf32_tflops;                /* 0 if none */
    bool fp8_block_scaling;            /* MXFP8 block-scaled tensor cores (Blackwell) */
    double mxfp8_fixed_s;              /* an MXFP8 GEMM call's extra cost, s (mxfp8_gemm_us) */
    int64_t mem_bytes;                 /* physical memory */
    double usable_fraction;            /* of mem_bytes that training can use */
    double mem_bw_gbps;                /* GB/s (1e9) */
    int64_t runtime_overhead_bytes;    /* CUDA context + framework, see profiles/README.md */
    double tdp_w;
    char intra_link[64];           /* default GPU-GPU link in a node (interconnect name) */
    char host_link[64];            /* the GPU's PCIe link to the host (interconnect name) */
    struct dp_gemm_curve gemm;     /* bf16/fp16 (and tf32, fp32) GEMMs */
    struct dp_gemm_curve gemm_fp8; /* FP8 GEMMs; eff_max 0 when the GPU has no FP8 */
    /* Speed of each fused attention kernel's forward relative to a GEMM of the same FLOPs
     * on this GPU (0: unknown, the cost model's default applies); the default kernel. */
    double attn_rel[DP_ATTNS];
    enum dp_attn attn_default;
};

/* Dense peak TFLOP/s of GEMMs of compute type `g` under storage precision `p`
 * (DP_GEMM_DEFAULT: the storage precision's own rate); 0 if the GPU has none. */
double dp_gpu_peak_tflops(const struct dp_gpu *gpu, enum dp_gemm g, enum dp_precision p);
/* The compute type a layout's GEMMs run in (DP_GEMM_DEFAULT resolved). */
struct dp_layout;
enum dp_gemm dp_layout_gemm(const struct dp_layout *l);
/* Whether the layout's linears compute in MXFP8 (FP8 GEMMs under the mxfp8 recipe). */
bool dp_layout_mxfp8(const struct dp_layout *l);
/* Whether the data-parallel all-gather moves the linear layers' weights in FP8: FP8 weights
 * (fp8_params) of a per-tensor or blockwise recipe. MXFP8 weights are gathered in bf16. */
bool dp_layout_fp8_gather(const struct dp_layout *l);
/* 0 if `gpu` can run the layout's GEMM compute type and FP8 recipe; else DP_EUSAGE with
 * err naming what is missing ("a100-sxm4-80gb has no FP8 tensor cores ..."), prefixed by
 * `field` (the option or JSON path that asked for it). */
int dp_layout_check_gpu(const struct dp_layout *l, const struct dp_gpu *gpu, const char *field,
                        struct dp_err *err);

enum dp_link_kind {
    DP_LINK_NVLINK = 0, /* through NVSwitch: all-to-all at full per-GPU rate */
    DP_LINK_XGMI = 1,   /* AMD Infinity Fabric mesh */
    DP_LINK_PCIE = 2,   /* through PCIe switches / host */
    DP_LINK_NET = 3,    /* a NIC-based network between nodes */
    DP_LINK_LOCAL = 4,  /* same device */
};

/* An intra-node link class or an inter-node network. */
struct dp_link {
    char name[64];
    enum dp_link_kind kind;
    double bw_gbps;     /* per GPU (or per NIC port) per direction, GB/s */
    double latency_us;  /* alpha in the alpha-beta model */
    double efficiency;  /* achievable fraction of bw_gbps (busbw / peak) */
    double p2p_bw_gbps; /* one GPU to one peer per direction; 0 = bw_gbps (xGMI: 64) */
};

/* A node type: GPUs, their intra-node link, its NICs and default network. */
struct dp_system {
    char name[64];
    char description[128];
    char gpu[64];
    int gpus_per_node;
    char intra[64]; /* interconnect profile name */
    int nics_per_node;
    char network[64]; /* default network profile name */
};

/*
 * What the planner plans for: `nodes` nodes of `gpus_per_node` GPUs each.
 * `intra` is the link between GPUs of one node (for NVSwitch systems the
 * full-rate all-to-all; for PCIe boxes the PCIe path); `inter` is one NIC's
 * network, of which each node has `nics_per_node`.
 * Topology-derived clusters (topology/) may set `tp_link` overrides later.
 */
struct dp_cluster {
    char name[64];
    char system[64]; /* system profile name, or "custom"/"topology" */
    struct dp_gpu gpu;
    int nodes;
    int gpus_per_node;
    struct dp_link intra;
    struct dp_link inter;
    int nics_per_node;
    /*
     * Link classes for aligned blocks of consecutive GPUs inside a node, from
     * a measured topology (topology/): group_link[k] is the slowest link a
     * block of 2^(k+1) GPUs (k = 0..) must cross. Empty (ngroup_links == 0)
     * for profiles, where every intra-node group uses `intra`.
     */
    int ngroup_links;
    struct dp_link group_link[8];
};

static inline int dp_cluster_gpus(const struct dp_cluster *c)
{
    return c->nodes * c->gpus_per_node;
}
static inline int64_t dp_gpu_usable_bytes(const struct dp_gpu *g)
{
    return (int64_t)((double)g->mem_bytes * g->usable_fraction);
}

/* The profiles directory: $DPLAN_PROFILES, ../profiles or ../share/dplan/profiles next to
 * the executable, then the source tree. Never NULL. */
const char *dp_profiles_dir(void);
/* Set by main() from argv[0] so that dp_profiles_dir can look next to the binary. */
void dp_profiles_set_exe(const char *argv0);

/* Load profiles by name ("h100-sxm5-80gb") or by path to a JSON file. */
int dp_gpu_load(const char *name, struct dp_gpu *out, struct dp_err *err);
int dp_link_load(const char *name, struct dp_link *out, struct dp_err *err); /* interconnect/ */
int dp_network_load(const char *name, struct dp_link *out, struct dp_err *err);
int dp_system_load(const char *name, struct dp_system *out, struct dp_err *err);
/* List the names (file stems) in profiles/<kind>/, sorted; caller frees with dp_names_free. */
int dp_profile_names(const char *kind, char ***names, int *n, struct dp_err *err);
void dp_names_free(char **names, int n);

/* Build a cluster from a system profile and a node count (network NULL = system's). */
int dp_cluster_from_system(const char *system, int nodes, const char *network,
                           struct dp_cluster *out, struct dp_err *err);
/* Build from a GPU profile: `gpus` GPUs, `per_node` per node (0 = min(gpus, 8)). The
 * intra-node link is the GPU's host PCIe link unless `intra` names one. */
int dp_cluster_from_gpu(const char *gpu, int gpus, int per_node, const char *intra,
                        const char *network, struct dp_cluster *out, struct dp_err *err);
/*
 * NICs a node may have: at most DP_MAX_NICS_PER_GPU per GPU. The densest
 * published node is AWS P5 (p5.48xlarge, p5e): 32 EFA network devices for 8
 * H100 (docs.aws.amazon.com, AWSEC2 UserGuide efa-acc-inst-types: "32 EFA
 * devices"), 4 per GPU; DGX/HGX nodes have 1 compute NIC per GPU.
 */
#define DP_MAX_NICS_PER_GPU 4
/*
 * A cluster's nics_per_node against its node: 0..DP_MAX_NICS_PER_GPU x
 * gpus_per_node, and >= 1 when nodes > 1 (the nodes talk through them).
 * DP_EINVAL with "FILE: FIELD: expected ..., got N" when not (`field` is
 * the JSON path, "nics_per_node" in a cluster file).
 */
int dp_cluster_check_nics(const char *file, const char *field, const struct dp_cluster *c,
                          struct dp_err *err);
/* cluster.json as written by `dplan topo -o` (schema in README); dp_cluster_check_nics holds. */
int dp_cluster_load(const char *file, struct dp_cluster *out, struct dp_err *err);
int dp_cluster_from_json(struct dp_jr *jr, const struct cJSON *obj, struct dp_cluster *out);
struct cJSON *dp_cluster_to_json(const struct dp_cluster *c);

/* ------------------------------------------------------------------ layout */

#include "layout.h" /* IWYU pragma: export */

/* ------------------------------------------------------------------ plan */

/*
 * plan.json: the versioned document `dplan suggest -o` writes and `dplan run`
 * reads (schema in README.md). The model and layout are required; the
 * cluster and the prediction are optional (a hand-written plan for the CPU
 * executor needs neither).
 */
#define DP_PLAN_VERSION 1

struct dp_prediction {
    double step_time_s;
    double tokens_per_s;
    double mfu;
    int64_t peak_bytes; /* per GPU, the peak stage */
    int64_t stage_peak_bytes[DP_PLAN_MAX_STAGES_RECORDED];
    int nstages; /* entries in stage_peak_bytes */
};

struct dp_plan {
    int version;
    struct dp_model model;
    bool has_cluster;
    struct dp_cluster cluster;
    struct dp_layout layout;
    bool has_prediction;
    struct dp_prediction prediction;
    char created_by[64]; /* "dplan 0.1.0 suggest" */
};

/* Load and validate plan.json (the layout is checked against the model, and
 * against the cluster's GPU count when a cluster is present). */
int dp_plan_load(const char *file, struct dp_plan *out, struct dp_err *err);
int dp_plan_from_json(struct dp_jr *jr, const struct cJSON *obj, struct dp_plan *out);
/* The plan as JSON; `prediction_extra` (may be NULL, ownership taken) is merged into
 * "prediction" so writers can add detail that readers ignore. */
struct cJSON *dp_plan_to_json(const struct dp_plan *p, struct cJSON *prediction_extra);
int dp_plan_save(const char *file, const struct dp_plan *p, struct cJSON *prediction_extra,
                 struct dp_err *err);

/* ------------------------------------------------------------------ measured runs */

/*
 * A measured training run (tests/validation/runs.json; schema in README):
 * what ran, where, and what was measured. `dplan validate` compares the
 * step-time model with it; `dplan calibrate` fits GPU efficiency curves to it.
 */
enum dp_flops_convention {
    DP_FLOPS_NONE = 0,        /* the run reports an iteration time */
    DP_FLOPS_NARAYANAN21 = 1, /* Narayanan et al. 2021 Eq. 3: hardware FLOPs, full recompute */
    DP_FLOPS_MODEL = 2,       /* model FLOPs, no recompute (MFU numerator) */
};

/* What a measured memory peak counts: torch.cuda max_memory_allocated (Megatron's
 * mem-max-allocated-bytes, PithTrain), max_memory_reserved (torchtitan's "memory" log), or
 * the device total nvidia-smi shows. */
enum dp_mem_quantity {
    DP_MEMQ_NONE = 0,
    DP_MEMQ_ALLOCATED = 1,
    DP_MEMQ_RESERVED = 2,
    DP_MEMQ_DEVICE = 3
};
/* Which GPU it was read on: the most over all GPUs, or the last pipeline stage's (Megatron
 * logs rank world_size - 1). */
enum dp_mem_aggregation { DP_MEMAGG_MAX = 0, DP_MEMAGG_LAST_STAGE = 1 };

struct dp_run {
    char id[96];
    char source_key[48]; /* the source it is reported under: the file's stem unless given */
    char file[256];      /* the runs file it came from */
    struct dp_model model;
    struct dp_cluster cluster;
    struct dp_layout layout;
    double iteration_time_s; /* measured (or from measured tokens/s), or 0 when tflops_per_gpu */
    double tflops_per_gpu;   /* with its FLOP convention `flops` */
    double tokens_per_s_per_gpu; /* as measured, when given (iteration_time_s holds the step) */
    enum dp_flops_convention flops;
    bool held_out;       /* not used to set any constant */
    bool underspecified; /* the source omits layout details: printed, not scored */
    bool excluded;       /* recorded, not scored, for `excluded_why` */
    char excluded_why[160];
    char waiting_for[48]; /* not expressible yet: what it waits for; the layout is not checked
                             and the run is not predicted */
    char needs[128];      /* knobs dplan does not model yet ("hsdp, dualpipe"): the layout holds
                             the nearest expressible one; printed, not scored */
    bool has_time;        /* a step time (or throughput) was measured */
    /* A measured per-GPU memory peak (measured.peak_memory), GiB = 2^30 bytes. */
    double peak_gib; /* 0: none */
    enum dp_mem_quantity mem_quantity;
    enum dp_mem_aggregation mem_aggregation;
    bool mem_held_out; /* held out of the memory fits (the file's rule over its peaks) */
};
/* Scored runs count in the error statistics (and, unless held out, in calibration). */
static inline bool dp_run_scored(const struct dp_run *r)
{
    return r->has_time && !r->underspecified && !r->excluded && !r->needs[0];
}
/* Runs whose measured memory peak is scored (`dplan validate --memory`). */
static inline bool dp_run_mem_scored(const struct dp_run *r)
{
    return r->peak_gib > 0 && !r->underspecified && !r->excluded && !r->needs[0];
}
const char *dp_mem_quantity_name(enum dp_mem_quantity q);

/*
 * Load a runs file, or every *.json of a directory in name order; *runs is
 * malloc'ed (free it), *n its length. A file's "held_out_rule": "every-third"
 * holds out its 3rd, 6th, ... scored run (in file order); a run's own
 * "held_out" must then agree with the rule. "fitted": false holds out every run of
 * the file (no constant is fitted to it).
 */
int dp_runs_load(const char *path, struct dp_run **runs, int *n, struct dp_err *err);
/* Append the runs of `path` (file or directory) to *runs / *n (realloc'ed). */
int dp_runs_append(const char *path, struct dp_run **runs, int *n, struct dp_err *err);

/* ------------------------------------------------------------------ util */

/* Parse "1,2,4" into ints; returns count or a negative status. */
int dp_parse_int_list(const char *s, int *out, int cap);
/* The expected largest of n independent standard normals (0 for n < 2): how far the
 * slowest of n ranks doing the same noisy work lags their mean, in standard deviations. */
double dp_max_normal(int n);
/* Human units: "12.34 GiB", fixed precision. */
void dp_fmt_bytes(int64_t bytes, char *out, size_t cap);
/* Read a whole file (NUL-terminated); caller frees. */
int dp_read_file(const char *file, char **buf, size_t *len, size_t max, struct dp_err *err);
/* mkdir -p: create dir and its missing parents; an existing directory is fine. */
int dp_mkdirs(const char *dir, struct dp_err *err);
/*
 * Write `len` bytes to `file` atomically: a temporary file next to it, fsync,
 * rename. On failure the old file (if any) is untouched and no temporary is left.
 */
int dp_write_file_atomic(const char *file, const void *data, size_t len, struct dp_err *err);
/*
 * Create a new empty file next to `final`, named ".BASENAME.tmp-PID-N" (O_EXCL: never
 * an existing file, so neither an input nor another run's temporary is clobbered), with
 * mode 0666 less the umask. Returns its descriptor and writes its name to tmp[cap], or
 * a negative status with err set.
 */
int dp_tmp_open(const char *final, char *tmp, size_t cap, struct dp_err *err);
/* rename(tmp, final) (the data must already be fsynced and closed); on failure tmp is
 * deleted and err names both. */
int dp_tmp_publish(const char *tmp, const char *final, struct dp_err *err);

/*
 * A growing text buffer for generated documents (SVG, exported configs).
 * Zero-initialise it; appends never fail visibly: an allocation failure sets
 * `failed` and later appends are ignored, so callers check once at the end.
 * `data` is NUL-terminated whenever len > 0. Free with dp_buf_release.
 */
struct dp_buf {
    char *data;
    size_t len, cap;
    bool failed;
};
void dp_buf_printf(struct dp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dp_buf_puts(struct dp_buf *b, const char *s);
void dp_buf_release(struct dp_buf *b);

#endif
