/*
 * safetensors files and CRC32C for the checkpoints (ckpt.c): a streaming
 * writer that checksums what it writes and fsyncs, and a reader that
 * validates a file's header against the format before any tensor is read.
 * Internal to the executor; weights.c uses the header and length prefix with its
 * own stdio file.
 *
 * Format (huggingface/safetensors README "Format"): an 8-byte little-endian
 * header length N, N bytes of UTF-8 JSON {"NAME": {"dtype", "shape",
 * "data_offsets": [BEGIN, END)}, ..., "__metadata__": {str: str}} (offsets
 * relative to the byte buffer after the header, END one past), then the
 * little-endian row-major bytes. Headers are at most 100 MB; this writer pads
 * them with spaces to a multiple of 8 as the reference implementation does.
 */
#ifndef DPLAN_EXECUTOR_SAFETENSORS_H
#define DPLAN_EXECUTOR_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#define DP_ST_MAX_HEADER (100LL * 1000 * 1000)

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78, RFC 3720 B.4) of buf, continuing
 * from `crc` (0 to start); SSE4.2's crc32 instruction when the CPU has it. */
uint32_t dp__crc32c(uint32_t crc, const void *buf, size_t n);
/* CRC32C and size of a whole file. */
int dp__file_crc32c(const char *path, uint32_t *crc, int64_t *size, struct dp_err *err);

/* ------------------------------------------------------------------ writing */

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
char *dp__st_header(const struct dp_st_tensor *t, int n, const char *const *meta, size_t *len);
/* The 8-byte little-endian header length that starts the file. */
void dp__st_len_prefix(unsigned char out[8], size_t hlen);

/* TEST-ONLY faults of a writer (DPLAN_FAULT_INJECT, README "Checkpoints and restarts"). */
enum dp_st_fault { DP_ST_FAULT_NONE = 0, DP_ST_FAULT_ENOSPC, DP_ST_FAULT_CRASH };

struct dp_st_writer {
    int fd;
    char path[4200];
    uint32_t crc;
    int64_t bytes;
    enum dp_st_fault fault; /* fires once `fault_at` bytes have been written */
    int64_t fault_at;
    struct dp_err *err;
};
/* Create `path` (truncating). */
int dp__st_create(struct dp_st_writer *w, const char *path, struct dp_err *err);
/* Write to the open descriptor `fd` of `path` (dp__tmp_open's); the writer owns it. */
void dp__st_adopt(struct dp_st_writer *w, int fd, const char *path, struct dp_err *err);
/* Append n bytes (checksummed); errors name the file and errno ("No space left on device"). */
int dp__st_write(struct dp_st_writer *w, const void *buf, size_t n);
/* Append the length prefix and the `hlen` bytes of header `hdr` (from dp__st_header). */
int dp__st_write_header(struct dp_st_writer *w, const char *hdr, size_t hlen);
/* fsync (when `sync`) and close; the writer is closed whatever happens. */
int dp__st_finish(struct dp_st_writer *w, bool sync);
/* Close and delete a failed file. */
void dp__st_abandon(struct dp_st_writer *w);

/* ------------------------------------------------------------------ reading */

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
 * tensor ("truncated", "data_offsets ... beyond the end").
 */
int dp__st_open(const char *path, struct dp_st_file *f, struct dp_err *err);
void dp__st_close(struct dp_st_file *f);
const struct dp_st_entry *dp__st_find(const struct dp_st_file *f, const char *key);
/* Read n bytes at `off` of the data buffer. */
int dp__st_pread(const struct dp_st_file *f, int64_t off, void *buf, size_t n, struct dp_err *err);
/* A "__metadata__" string value, or NULL. */
const char *dp__st_meta(const struct dp_st_file *f, const char *key);
/* Bytes per element of a safetensors dtype, 0 if unknown. */
int dp__st_dtype_size(const char *dtype);

#endif
