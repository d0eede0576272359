/*
 * libFuzzer target for the checkpoint readers that take a directory from the user:
 * the manifest (dp_ckpt_list: its fields, the model and layout, files, tensors and their
 * shards, the ZeRO-1 flat layout; then every file's size and checksum and the manifest
 * against the files' safetensors headers), the pre-launch check of --resume
 * (dp_ckpt_check_resume) and the export (dp_ckpt_export, both name sets), which reads
 * the tensors where the manifest says they are.
 *
 * Input: chunks of [4-byte little-endian length][bytes]: the first is manifest.json,
 * the next (at most 4) rank_00000.safetensors, rank_00001.safetensors, ...; bytes after
 * the last whole chunk are ignored. tests/fuzz/make_ckpt_seeds.sh packs real
 * checkpoints so. Every input must end in success or a one-line error (for a checkpoint
 * that does not verify, in its `problem`), never a crash or a leak.
 */
#include "ckpt/ckpt.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

enum { MAX_FILES = 4 };

static void one_line(int rc, const char *msg)
{
    if (rc != 0 && (msg[0] == '\0' || strchr(msg, '\n')))
        abort();
}

static void put(const char *path, const unsigned char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        abort(); /* the fuzz directory is ours */
    fwrite(p, 1, n, f);
    fclose(f);
}

/* The model and layout of the manifest in the first chunk, the layout on one rank;
 * false (rm->name empty, rl a default single-rank layout) when they do not parse. */
static bool run_of(const unsigned char *p, size_t n, struct dp_model *rm, struct dp_layout *rl)
{
    memset(rm, 0, sizeof *rm);
    dp_layout_default(rl);
    rl->precision = DP_FP32;
    rl->gbs = 2;
    rl->seq_len = 8;
    if (n < 4)
        return false;
    uint32_t len =
        (uint32_t)p[-4] | (uint32_t)p[-3] << 8 | (uint32_t)p[-2] << 16 | (uint32_t)p[-1] << 24;
    if (len > n)
        return false;
    cJSON *root = cJSON_ParseWithLength((const char *)p, len);
    struct dp_err e = {0};
    struct dp_jr jr = {.file = "manifest.json", .err = &e};
    bool ok =
        root && dp_model_from_json(&jr, cJSON_GetObjectItemCaseSensitive(root, "model"), rm) == 0;
    struct dp_layout l = *rl;
    if (ok && dp_layout_from_json(&jr, cJSON_GetObjectItemCaseSensitive(root, "layout"), &l) == 0) {
        l.tp = l.pp = l.dp = 1;
        l.zero = 0;
        l.sp = false;
        l.first_stage_layers = l.last_stage_layers = 0;
        *rl = l;
    }
    if (!ok)
        memset(rm, 0, sizeof *rm);
    cJSON_Delete(root);
    return ok;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static char dir[64], out[96];
    static struct dp_model m;
    static bool have_model;
    char path[160];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/dplan-fuzz-ckpt-%ld", (long)getpid());
        snprintf(out, sizeof out, "%s.out.safetensors", dir);
        mkdir(dir, 0755);
        struct dp_err e = {0};
        have_model = dp_model_load("tiny-gpt", &m, &e) == 0;
    }
    /* The checkpoint directory: the manifest and the rank files of this input only. */
    for (int i = 0; i < MAX_FILES; i++) {
        snprintf(path, sizeof path, "%s/rank_%05d.safetensors", dir, i);
        unlink(path);
    }
    size_t off = 0;
    int chunk = 0;
    while (chunk <= MAX_FILES && size - off >= 4) {
        uint32_t n = (uint32_t)data[off] | (uint32_t)data[off + 1] << 8 |
                     (uint32_t)data[off + 2] << 16 | (uint32_t)data[off + 3] << 24;
        off += 4;
        if (n > size - off)
            break;
        if (chunk == 0)
            snprintf(path, sizeof path, "%s/manifest.json", dir);
        else
            snprintf(path, sizeof path, "%s/rank_%05d.safetensors", dir, chunk - 1);
        put(path, data + off, n);
        off += n;
        chunk++;
    }
    if (chunk == 0)
        return 0;

    for (int verify = 0; verify <= 1; verify++) {
        struct dp_err err = {0};
        struct dp_ckpt_info *info = NULL;
        int n = 0;
        int rc = dp_ckpt_list(dir, verify, &info, &n, &err);
        one_line(rc, err.msg);
        for (int i = 0; i < n; i++)
            one_line(info[i].state == DP_CKPT_DAMAGED, info[i].problem);
        free(info);
    }
    /* --resume checks the checkpoint against the run's model and layout: the manifest's
     * own (so that the checks go past "another model"), on one rank; else tiny-gpt. */
    struct dp_model rm;
    struct dp_layout rl;
    if (run_of(data + 4, size - 4, &rm, &rl) || have_model) {
        if (!rm.name[0])
            rm = m;
        struct dp_err err = {0};
        /* "F32": what the seeds hold (dplan run's dtype, dp_exec_dtype) */
        one_line(dp_ckpt_check_resume(dir, &rm, &rl, "F32", &err), err.msg);
    }
    for (int names = DP_CKPT_NAMES_DPLAN; names <= DP_CKPT_NAMES_HF; names++) {
        struct dp_err err = {0};
        struct dp_ckpt_export_result res;
        one_line(dp_ckpt_export(dir, -1, out, (enum dp_ckpt_names)names, &res, &err), err.msg);
        unlink(out);
    }
    return 0;
}
