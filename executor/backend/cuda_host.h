/*
 * The CUDA backend's host-only logic, plain C without CUDA, NCCL or MPI so that
 * its unit tests (tests/executor/test_cuda_host.c) run on a machine without a
 * GPU: the device arena's bookkeeping (offsets in one cudaMalloc), the
 * communicator split plan (which group colour and key a rank has: the same
 * Megatron order as the CPU backend's MPI_Comm_split calls), the choice of a
 * build's kernel image for a GPU, the bookkeeping of non-blocking requests, and the
 * error text of a failed CUDA/NCCL call.
 */
#ifndef DPLAN_EXECUTOR_CUDA_HOST_H
#define DPLAN_EXECUTOR_CUDA_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "groups.h"

/* ---- the arena: first fit over offsets, freed blocks coalesce with their neighbours */

/* Every block starts at a multiple of this: cuBLAS(Lt) wants 16-byte operands, 256
 * matches cudaMalloc's own alignment, so a kernel sees the same addresses either way. */
#define DP_ARENA_ALIGN ((size_t)256)

struct dp__arena_blk {
    size_t off, len;
};

struct dp__arena {
    size_t cap;                  /* bytes of the one device allocation */
    size_t used, hwm;            /* bytes in live blocks now, and at most so far */
    struct dp__arena_blk *freel; /* free extents, sorted by offset, never adjacent */
    int nfree, free_cap;
    struct dp__arena_blk *live; /* live blocks, sorted by offset */
    int nlive, live_cap;
};

/* An arena of `cap` bytes (rounded down to DP_ARENA_ALIGN); 0 or DP_ENOMEM. */
int dp__arena_init(struct dp__arena *a, size_t cap);
void dp__arena_release(struct dp__arena *a);
/* The bytes a block of `bytes` takes (rounded up to DP_ARENA_ALIGN, at least one unit). */
size_t dp__arena_footprint(size_t bytes);
/* A block of `bytes`: 0 and *off, or DP_ENOMEM when no free extent is large enough (or
 * the host bookkeeping runs out of memory). */
int dp__arena_alloc(struct dp__arena *a, size_t bytes, size_t *off);
/* Free the block at `off`; DP_EINVAL if no live block starts there (nothing changes). */
int dp__arena_free(struct dp__arena *a, size_t off);
/* The largest free extent (what the next alloc can get at most). */
size_t dp__arena_largest(const struct dp__arena *a);

/* ---- the communicator split plan */

/* groups.h's dp__split_plan, shared with the CPU backend. */

/* ---- non-blocking requests (cuda_async.c): which ids are in flight, over which group */

/* Each id's group, -1 when free (DP_MAX_REQS of backend.h at most in flight). */
struct dp__reqs {
    int group[DP_MAX_REQS];
};
void dp__reqs_init(struct dp__reqs *r);
/* The lowest free id, now in flight over group g; -1 when all are in flight. */
int dp__reqs_take(struct dp__reqs *r, int g);
/* Request id completes: 0, or DP_EINVAL when it is not in flight (nothing changes). */
int dp__reqs_done(struct dp__reqs *r, int id);
/* The ids in flight over group g, in id order, into ids (room for DP_MAX_REQS); the count.
 * A blocking collective over g is ordered after them (the same communicator on two
 * streams: NCCL runs a communicator's operations in the order they are enqueued only
 * within one stream). */
int dp__reqs_of_group(const struct dp__reqs *r, int g, int *ids);

/* ---- kernel images */

/*
 * Which image of the build runs on a GPU of compute capability major.minor (sm = 10 *
 * major + minor): the highest SASS architecture with the same major and minor <= the
 * GPU's (binary compatibility within a major, CUDA C Programming Guide, "Binary
 * Compatibility"), else the PTX if its architecture is <= the GPU's (JIT-compiled by the
 * driver). Returns the sm of the image and sets *jit, or -1 when none can run.
 */
int dp__cuda_pick_image(int major, int minor, const int *sass, int nsass, int ptx, bool *jit);
/* Parse "80,90,100" into out (at most max); returns the count. */
int dp__cuda_parse_archs(const char *s, int *out, int max);

/* ---- errors */

/* The dp_status of a failed call: DP_ENOMEM for out-of-memory (cudaErrorMemoryAllocation
 * = 2; ncclSystemError can be too, but its text says), else DP_ERUNTIME. */
int dp__cuda_status(bool is_nccl, int code);
/* Fill err: "rank R (HOST): CALL over the G group failed: TEXT" (group NULL: no "over"). */
int dp__cuda_fail(struct dp_err *err, bool is_nccl, int code, int rank, const char *host,
                  const char *call, const char *group, const char *text);

#endif
