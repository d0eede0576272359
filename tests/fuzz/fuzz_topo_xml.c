/*
 * libFuzzer target for the hwloc XML topology loader (`dplan topo --topology`):
 * the input is the file's content. dp_topo_load_xml runs hwloc's import in a
 * child process (topology/xml.c), so a file that crashes hwloc must end in a
 * one-line error here; what hwloc accepts then goes through our own reading
 * of the tree (hwloc.c), the pair matrix, the cluster derivation (links.c)
 * and the JSON export (topo.c), in this process where the fuzzer sees it.
 * Every input must end in success or a one-line error, never a crash or a leak.
 */
#include "topology/topology.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* Some mangled files keep hwloc busy for many seconds: give up on them after 1 s. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    setenv("DPLAN_XML_LOAD_TIMEOUT_S", "1", 0);
    return 0;
}

static void one_line(int rc, const struct dp_err *err)
{
    if (rc != 0 && (err->msg[0] == '\0' || strchr(err->msg, '\n')))
        abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/dplan-fuzz-%ld.xml", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    struct dp_err err = {0};
    struct dp_topo t;
    int rc = dp_topo_load_xml(path, &t, &err);
    one_line(rc, &err);
    if (rc)
        return 0;
    /* Every pair has a code, and the matrix is square over GPUs and NICs. */
    int nd = t.ngpus + t.nnics;
    for (int a = 0; a < nd; a++)
        for (int b = 0; b < nd; b++) {
            char code[16];
            dp_topo_pair_code(&t, a, b, code, sizeof code);
            if (!code[0])
                abort();
        }
    /* One node, then two with a network named (the NIC count may be refused). */
    for (int nodes = 1; nodes <= 2; nodes++) {
        struct dp_topo_cluster_opts o = {.nodes = nodes, .network = nodes > 1 ? "eth-100" : NULL};
        struct dp_cluster cl;
        struct dp_err cerr = {0};
        int crc = dp_topo_cluster(&t, &o, &cl, NULL, &cerr);
        one_line(crc, &cerr);
    }
    cJSON_Delete(dp_topo_to_json(&t));
    dp_topo_release(&t);
    return 0;
}
