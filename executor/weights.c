/*
 * The final weights as one safetensors file with full (unsharded) tensors
 * under their global names ("wte", "h.0.attn.wq", ...), whatever the layout:
 * rank 0 collects each tensor's slices from the ranks of DP replica 0 (one
 * tensor at a time, so it never holds more than the largest tensor) and
 * writes it. The padded vocabulary rows are left out, so files from
 * different tensor-parallel degrees compare element by element.
 *
 * Format (huggingface/safetensors README "Format"): an 8-byte little-endian
 * header length N, N bytes of JSON {"name": {"dtype", "shape",
 * "data_offsets": [begin, end)}, "__metadata__": {...}}, padded with spaces
 * to a multiple of 8, then the little-endian row-major data.
 */
#include "internal.h"
#include "outfile.h"
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_WEIGHTS 3

static int64_t out_elems(const struct dp_seg *s)
{
    return s->out_rows * s->gcols;
}

/* Ranks of the TP group holding distinct slices of `s` (1 for replicated tensors). */
static int slices(const struct dp_exec *ex, const struct dp_seg *s)
{
    return (s->rows < s->grows || s->cols < s->gcols) ? ex->l.tp : 1;
}

static char *header_json(const struct dp_exec *ex, struct dp_seg **lists, const int *counts,
                         size_t *len)
{
    int n = 0;
    for (int s = 0; s < ex->l.pp; s++)
        n += counts[s];
    struct dp_st_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
    if (!t)
        return NULL;
    int k = 0;
    for (int s = 0; s < ex->l.pp; s++)
        for (int i = 0; i < counts[s]; i++) {
            const struct dp_seg *sg = &lists[s][i];
            if (sg->norm_skip)
                continue;
            snprintf(t[k].key, sizeof t[k].key, "%s", sg->name);
            t[k].dtype = sizeof(real) == 8 ? "F64" : "F32";
            t[k].ndim = sg->gcols > 1 ? 2 : 1;
            t[k].shape[0] = sg->out_rows;
            t[k].shape[1] = sg->gcols;
            t[k].bytes = out_elems(sg) * (int64_t)sizeof(real);
            k++;
        }
    const char *meta[] = {"format", "pt", "producer", "dplan run", "model", ex->m->name, NULL};
    char *hdr = dp__st_header(t, k, meta, len);
    free(t);
    return hdr;
}

/* Rank 0: assemble and write every tensor. */
static int write_file(struct dp_exec *ex, const char *file, struct dp_seg **lists,
                      const int *counts)
{
    struct dp_backend *be = ex->be;
    size_t hlen = 0;
    char *hdr = header_json(ex, lists, counts, &hlen);
    if (!hdr)
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    /* A new temporary next to `file`, renamed over it once complete (outfile.h). */
    char tmp[4200];
    int fd = dp__tmp_open(file, tmp, sizeof tmp, ex->err);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        free(hdr);
        if (fd < 0)
            return fd;
        int rc = dp_err_set(ex->err, DP_EIO, "%s: cannot open: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return rc;
    }
    unsigned char lenb[8];
    dp__st_len_prefix(lenb, hlen);
    int rc = 0;
    if (fwrite(lenb, 1, 8, f) != 8 || fwrite(hdr, 1, hlen, f) != hlen)
        rc = dp_err_set(ex->err, DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    free(hdr);
    for (int s = 0; s < ex->l.pp && !rc; s++)
        for (int i = 0; i < counts[s] && !rc; i++) {
            const struct dp_seg *sg = &lists[s][i];
            if (sg->norm_skip)
                continue;
            int64_t n = out_elems(sg), local = sg->rows * sg->cols;
            real *full = malloc((size_t)n * sizeof(real));
            real *part = malloc((size_t)local * sizeof(real));
            if (!full || !part) {
                free(full);
                free(part);
                rc = dp_err_set(ex->err, DP_ENOMEM, "out of memory");
                break;
            }
            for (int t = 0; t < slices(ex, sg) && !rc; t++) {
                struct dp_coords c = {.tp_rank = t, .dp_rank = 0, .pp_rank = s};
                int owner = dp_rank_of(&c, ex->l.tp, ex->l.dp, ex->l.pp);
                if (owner == 0)
                    be->ops->download(be, part, ex->params + ex->segs[i].off,
                                      (size_t)local * sizeof(real));
                else
                    rc = be->ops->sendrecv(be, DP_GROUP_WORLD, -1, NULL, 0, 0, owner, part, local,
                                           TAG_WEIGHTS, ex->err);
                int64_t r0 = sg->rows < sg->grows ? t * sg->rows : 0;
                int64_t c0 = sg->cols < sg->gcols ? t * sg->cols : 0;
                for (int64_t r = 0; r < sg->rows && r0 + r < sg->out_rows; r++)
                    memcpy(full + (r0 + r) * sg->gcols + c0, part + r * sg->cols,
                           (size_t)sg->cols * sizeof(real));
            }
            if (!rc && fwrite(full, sizeof(real), (size_t)n, f) != (size_t)n)
                rc = dp_err_set(ex->err, DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
            free(full);
            free(part);
        }
    if (!rc && (fflush(f) || fsync(fileno(f))))
        rc = dp_err_set(ex->err, DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    if (fclose(f) && !rc)
        rc = dp_err_set(ex->err, DP_EIO, "%s: write failed: %s", tmp, strerror(errno));
    if (rc) {
        unlink(tmp);
        return rc;
    }
    return dp__tmp_publish(tmp, file, ex->err);
}

/* Other ranks of DP replica 0: send this rank's slices, in rank 0's order. */
static int send_slices(struct dp_exec *ex)
{
    for (int i = 0; i < ex->nsegs; i++) {
        const struct dp_seg *sg = &ex->segs[i];
        if (sg->norm_skip || ex->c.tp_rank >= slices(ex, sg))
            continue;
        int rc = ex->be->ops->sendrecv(ex->be, DP_GROUP_WORLD, 0, ex->params + sg->off,
                                       sg->rows * sg->cols, TAG_WEIGHTS, -1, NULL, 0, 0, ex->err);
        if (rc)
            return rc;
    }
    return 0;
}

int dp__weights_save(struct dp_exec *ex, const char *file)
{
    if (ex->rank != 0) {
        if (ex->c.dp_rank != 0)
            return 0;
        return send_slices(ex);
    }
    struct dp_seg **lists = calloc((size_t)ex->l.pp, sizeof *lists);
    int *counts = calloc((size_t)ex->l.pp, sizeof *counts);
    int rc = (!lists || !counts) ? dp_err_set(ex->err, DP_ENOMEM, "out of memory") : 0;
    for (int s = 0; s < ex->l.pp && !rc; s++)
        rc = dp__segments_for_stage(ex, s, &lists[s], &counts[s]);
    /* Failing here would leave the senders blocked; the caller aborts the job. */
    if (!rc)
        rc = write_file(ex, file, lists, counts);
    for (int s = 0; lists && s < ex->l.pp; s++)
        free(lists[s]);
    free(lists);
    free(counts);
    return rc;
}
