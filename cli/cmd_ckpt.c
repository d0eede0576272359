/*
 * dplan ckpt info|export: look into the checkpoints `dplan run --ckpt-dir`
 * writes (executor/ckpt.h): list them with their steps, plans and integrity
 * (checksums verified), and gather one into a single safetensors file.
 * It neither writes nor repairs checkpoints, and refuses an export that would
 * land inside one.
 */
#include "ckpt/ckpt.h"
#include "cli.h"
#include "executor/executor.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char help[] =
    "usage: dplan ckpt info DIR [--no-verify] [--json]\n"
    "       dplan ckpt export DIR -o FILE.safetensors [--step N] [--names dplan|hf] [--json]\n\n"
    "DIR is a --ckpt-dir of `dplan run` (holding step_N checkpoints) or one checkpoint.\n\n"
    "info    list the checkpoints: step, save time, model, layout, ranks, size and\n"
    "        integrity (every file's CRC32C checked against the manifest unless\n"
    "        --no-verify: then presence and size only). Exit 1 when one is damaged\n"
    "        or none is complete.\n"
    "export  gather the newest complete checkpoint (or that of --step N) into one\n"
    "        safetensors file of full tensors (F32, padded vocabulary rows dropped):\n"
    "          --names dplan  the names of dplan run's model.safetensors (\"wte\",\n"
    "                         \"h.0.attn.wq\", ...) [default]\n"
    "          --names hf     Hugging Face transformers names and layouts:\n"
    "                         GPT2LMHeadModel (fused c_attn, Conv1D [in, out]) or\n"
    "                         LlamaForCausalLM\n";

enum { OPT_JSON_ = 1, OPT_NO_VERIFY, OPT_STEP, OPT_NAMES };

static const char *state_name(enum dp_ckpt_state s)
{
    switch (s) {
    case DP_CKPT_OK: return "ok";
    case DP_CKPT_UNPUBLISHED: return "unpublished";
    case DP_CKPT_DAMAGED: return "damaged";
    case DP_CKPT_SUPERSEDED: return "superseded";
    }
    return "?";
}

static int info(const char *dir, bool verify, bool json)
{
    struct dp_ckpt_info *list;
    int n;
    struct dp_err err = {0};
    if (dp_ckpt_list(dir, verify, &list, &n, &err))
        return cli_fail(&err);
    int newest = -1, damaged = 0;
    for (int i = 0; i < n; i++) {
        if (list[i].state == DP_CKPT_OK)
            newest = i;
        damaged += list[i].state == DP_CKPT_DAMAGED;
    }
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "dir", dir);
        cJSON *arr = cJSON_AddArrayToObject(root, "checkpoints");
        for (int i = 0; i < n; i++) {
            const struct dp_ckpt_info *c = &list[i];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "path", c->path);
            cJSON_AddNumberToObject(o, "step", c->step);
            cJSON_AddStringToObject(o, "state", state_name(c->state));
            cJSON_AddBoolToObject(o, "checksums_verified",
                                  c->verified && c->state != DP_CKPT_UNPUBLISHED &&
                                      c->state != DP_CKPT_SUPERSEDED);
            if (c->problem[0])
                cJSON_AddStringToObject(o, "problem", c->problem);
            if (c->model[0]) {
                cJSON_AddNumberToObject(o, "steps", c->steps);
                cJSON_AddStringToObject(o, "model", c->model);
                cJSON_AddStringToObject(o, "layout", c->layout);
                cJSON_AddNumberToObject(o, "world_size", c->world);
                cJSON_AddNumberToObject(o, "files", c->nfiles);
                cJSON_AddNumberToObject(o, "bytes", (double)c->bytes);
                cJSON_AddStringToObject(o, "saved_at", c->saved_at);
            }
            cJSON_AddItemToArray(arr, o);
        }
        if (newest >= 0)
            cJSON_AddStringToObject(root, "newest_complete", list[newest].path);
        else
            cJSON_AddNullToObject(root, "newest_complete");
        cli_print_json(root);
    } else {
        printf("%s: %d checkpoint%s%s\n", dir, n, n == 1 ? "" : "s",
               verify ? " (checksums verified)" : " (sizes checked, checksums not verified)");
        if (n)
            printf("%8s  %-20s  %-12s  %5s  %10s  %-10s  %s\n", "step", "saved at (UTC)", "model",
                   "ranks", "size", "state", "layout / problem");
        for (int i = 0; i < n; i++) {
            const struct dp_ckpt_info *c = &list[i];
            char size[32] = "-";
            if (c->model[0])
                snprintf(size, sizeof size, "%.2f MiB", (double)c->bytes / 1048576.0);
            printf("%8d  %-20s  %-12s  %5d  %10s  %-10s  %s\n", c->step,
                   c->saved_at[0] ? c->saved_at : "-", c->model[0] ? c->model : "-", c->world, size,
                   state_name(c->state), c->state == DP_CKPT_OK ? c->layout : c->problem);
        }
        if (newest >= 0)
            printf("newest complete: %s (step %d of %d)\n", list[newest].path, list[newest].step,
                   list[newest].steps);
        else
            printf("no complete checkpoint\n");
    }
    int rc = 0;
    if (damaged)
        fprintf(stderr, "dplan: error: %s: %d damaged checkpoint%s (resume skips %s)\n", dir,
                damaged, damaged == 1 ? "" : "s", damaged == 1 ? "it" : "them");
    if (damaged || newest < 0)
        rc = 1;
    free(list);
    return rc;
}

/* The files of the checkpoints under `dir` (or of `dir`, one checkpoint), appended to
 * *in (paths malloc'ed). */
static void add_files(const char *dir, bool recurse, struct dp_io **in, int *n, int *cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4352];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            if (recurse && !strncmp(e->d_name, "step_", 5))
                add_files(path, false, in, n, cap);
            continue;
        }
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 16;
            struct dp_io *g = realloc(*in, (size_t)*cap * sizeof *g);
            if (!g)
                break;
            *in = g;
        }
        if (((*in)[*n].path = strdup(path)))
            (*in)[(*n)++].what = "a checkpoint file";
    }
    closedir(d);
}

/* The export must not land on a checkpoint's file (also through a link) or inside a
 * checkpoint directory: it would be seen as damaged. */
static int export_target_ok(const char *dir, const char *out, struct dp_err *err)
{
    struct dp_io *in = NULL;
    int n = 0, cap = 0;
    char mf[4200];
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    add_files(dir, access(mf, F_OK) != 0, &in, &n, &cap);
    int rc = dp_output_check(out, "-o", in, n, err);
    for (int i = 0; i < n; i++)
        free((char *)in[i].path);
    free(in);
    return rc;
}

int cmd_ckpt(int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"json", no_argument, 0, OPT_JSON_},
                                         {"no-verify", no_argument, 0, OPT_NO_VERIFY},
                                         {"step", required_argument, 0, OPT_STEP},
                                         {"names", required_argument, 0, OPT_NAMES},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(help, stdout);
        return 0;
    }
    if (argc < 2 || (strcmp(argv[1], "info") && strcmp(argv[1], "export")))
        return cli_usage_error("ckpt", "expected the subcommand \"info\" or \"export\"");
    bool is_export = !strcmp(argv[1], "export");
    const char *out = NULL;
    bool json = false, verify = true;
    int step = -1;
    enum dp_ckpt_names names = DP_CKPT_NAMES_DPLAN;
    int ch;
    optind = 1;
    opterr = 0;
    argc--;
    argv++;
    while ((ch = cli_next_opt("ckpt", argc, argv, ":o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case OPT_JSON_: json = true; break;
        case OPT_NO_VERIFY: verify = false; break;
        case OPT_STEP: {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            if (end == optarg || *end || errno || v < 0 || v > 1e9 || v != floor(v))
                return cli_usage_error("ckpt", "--step: expected an integer >= 0, got \"%s\"",
                                       optarg);
            step = (int)v;
            break;
        }
        case OPT_NAMES:
            if (!strcmp(optarg, "dplan"))
                names = DP_CKPT_NAMES_DPLAN;
            else if (!strcmp(optarg, "hf"))
                names = DP_CKPT_NAMES_HF;
            else
                return cli_usage_error("ckpt", "--names: expected dplan or hf, got \"%s\"", optarg);
            break;
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
    }
    if (optind != argc - 1)
        return cli_usage_error("ckpt", "%s expects one checkpoint DIR", argv[0]);
    const char *dir = argv[optind];
    if (!is_export) {
        if (out || step >= 0 || names != DP_CKPT_NAMES_DPLAN)
            return cli_usage_error("ckpt", "-o, --step and --names go with export");
        return info(dir, verify, json);
    }
    if (!out)
        return cli_usage_error("ckpt", "export needs -o FILE.safetensors");
    if (!verify)
        return cli_usage_error("ckpt", "export always verifies the checksums");
    struct dp_err err = {0};
    if (export_target_ok(dir, out, &err))
        return cli_fail(&err);
    struct dp_ckpt_export_result res;
    if (dp_ckpt_export(dir, step, out, names, &res, &err))
        return cli_fail(&err);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "checkpoint", res.checkpoint);
        cJSON_AddNumberToObject(o, "step", res.step);
        cJSON_AddStringToObject(o, "output", out);
        cJSON_AddStringToObject(o, "names", names == DP_CKPT_NAMES_HF ? "hf" : "dplan");
        cJSON_AddNumberToObject(o, "tensors", res.tensors);
        cJSON_AddNumberToObject(o, "bytes", (double)res.bytes);
        cli_print_json(o);
    } else {
        printf("%s: %d tensors, %.2f MiB (%s names) from %s (step %d, checksums verified)\n", out,
               res.tensors, (double)res.bytes / 1048576.0,
               names == DP_CKPT_NAMES_HF ? "Hugging Face" : "dplan", res.checkpoint, res.step);
    }
    return 0;
}
