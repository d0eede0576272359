/*
 * libFuzzer target for the safetensors reader of the checkpoint library (dp_ckpt_st_open: the
 * header length, the JSON header, dtypes, shapes, offsets, overlaps and duplicates):
 * the input is the file. A file that opens must hold what its header promises: every
 * entry found by its name, its bytes inside the file and readable, the metadata
 * readable. Every other input must end in a one-line error, never a crash or a leak.
 */
#include "ckpt/ckpt.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/dplan-fuzz-st-%ld.safetensors", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    struct dp_err err = {0};
    struct dp_st_file st;
    int rc = dp_ckpt_st_open(path, &st, &err);
    if (rc != 0) {
        if (err.msg[0] == '\0' || strchr(err.msg, '\n'))
            abort();
        return 0;
    }
    unsigned char buf[4096];
    for (int i = 0; i < st.n; i++) {
        const struct dp_st_entry *e = &st.e[i];
        if (dp_ckpt_st_find(&st, e->key) != e || e->begin < 0 || e->end < e->begin ||
            st.data_start + e->end > st.size || dp_ckpt_st_dtype_size(e->dtype) <= 0)
            abort();
        int64_t n = e->end - e->begin;
        size_t take = n < (int64_t)sizeof buf ? (size_t)n : sizeof buf;
        if (dp_ckpt_st_pread(&st, e->begin, buf, take, &err) != 0)
            abort(); /* inside the file, so readable */
    }
    (void)dp_ckpt_st_meta(&st, "format");
    dp_ckpt_st_close(&st);
    return 0;
}
