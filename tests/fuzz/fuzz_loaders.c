/*
 * libFuzzer target for the JSON loaders: model (dplan and Hugging Face),
 * GPU, interconnect, network and system profiles, cluster and layout files,
 * and the measured calibration profile (fit/).
 * The first byte picks the loader; the rest is the file's content. Every
 * input must end in success or a one-line error, never a crash or a leak.
 */
#include "core/core.h"
#include "fit/fit.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/dplan-fuzz-%ld.json", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    struct dp_err err = {0};
    int rc = 0;
    switch (data[0] % 8) {
    case 0: {
        struct dp_model m;
        rc = dp_model_load(path, &m, &err);
        if (rc == 0) {
            struct dp_param_count pc;
            dp_model_count(&m, &pc);
        }
        break;
    }
    case 1: {
        struct dp_gpu g;
        rc = dp_gpu_load(path, &g, &err);
        break;
    }
    case 2: {
        struct dp_link l;
        rc = dp_link_load(path, &l, &err);
        break;
    }
    case 3: {
        struct dp_link l;
        rc = dp_network_load(path, &l, &err);
        break;
    }
    case 4: {
        struct dp_system s;
        rc = dp_system_load(path, &s, &err);
        break;
    }
    case 5: {
        struct dp_cluster c;
        rc = dp_cluster_load(path, &c, &err);
        break;
    }
    case 7: {
        struct dp_calibration c;
        rc = dp_calibration_load(path, &c, &err);
        break;
    }
    default: {
        cJSON *root;
        rc = dp_json_load_file(path, &root, &err);
        if (rc == 0) {
            struct dp_layout l;
            struct dp_jr jr = {.file = path, .err = &err};
            rc = dp_layout_from_json(&jr, root, &l);
            cJSON_Delete(root);
        }
        break;
    }
    }
    /* An error must come with a message on one line. */
    if (rc != 0 && (err.msg[0] == '\0' || strchr(err.msg, '\n')))
        abort();
    return 0;
}
