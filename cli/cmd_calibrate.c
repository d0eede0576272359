/*
 * dplan calibrate --gpu NAME [RUNS...]: fit a GPU profile's GEMM efficiency
 * curves (bf16 and FP8) to measured runs and print (or write) the updated
 * profile.
 */
#include "cli.h"
#include "validate/validate.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: dplan calibrate --gpu NAME [RUNS.json|DIR ...] [--curve all|bf16|fp8] [--fit-half]\n"
    "                       [--attention KERNEL[,KERNEL...]] [-o PROFILE.json]\n"
    "       dplan calibrate --backend cpu [--np N] [MODEL|plan.json] [-o PROFILE.json]\n"
    "                       (measure this machine; `dplan calibrate --backend cpu --help`)\n\n"
    "Fit the GEMM efficiency curves of GPU profile NAME, eff(x) = eff_max * x /\n"
    "(x + half_flops) with x a GEMM's FLOPs, so that the step-time model matches\n"
    "the measured runs on that GPU that are scored and not held out: the bf16\n"
    "curve (\"gemm\") on the runs whose linear layers compute in bf16/fp16, the FP8\n"
    "curve (\"gemm_fp8\") on those computing in FP8, both at once (least squares on\n"
    "log(predicted/measured), GSL trust region). Where the FP8 runs mix MXFP8 with\n"
    "per-tensor recipes, what an MXFP8 GEMM costs per call beyond a per-tensor one is\n"
    "fitted with them (\"mxfp8_gemm_us\"). Prints the fit and the mean error of\n"
    "the GPU's held-out runs before and after it (the check the fit never reads); -o\n"
    "writes the GPU profile with the fitted curves and their provenance. Default\n"
    "RUNS: the shipped tests/validation/.\n\n"
    "  --gpu NAME       the GPU profile to fit (as runs name it)\n"
    "  --curve WHICH    all (default: each curve that has runs), bf16 or fp8 only\n"
    "  --fit-half       also fit half_flops (needs runs with small GEMMs)\n"
    "  --attention K    also fit fused attention kernel K's speed relative to a GEMM\n"
    "                   (the profile's \"attention\" figure; flash2, flash3, cudnn,\n"
    "                   triton, flash1 or flex, comma-separated for several) on the\n"
    "                   runs using it, jointly with the curves: what sets how a run's\n"
    "                   time grows with its sequence length\n"
    "  -o FILE          write the updated profile JSON\n";

static void set_curve(cJSON *root, const char *key, const struct dp_gemm_curve *c)
{
    cJSON *gm = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!gm)
        gm = cJSON_AddObjectToObject(root, key);
    cJSON_DeleteItemFromObjectCaseSensitive(gm, "eff_max");
    cJSON_DeleteItemFromObjectCaseSensitive(gm, "half_flops");
    cJSON_AddNumberToObject(gm, "eff_max", c->eff_max);
    cJSON_AddNumberToObject(gm, "half_flops", c->half_flops);
}

/*
 * -o must not be one of the runs files read (each run records its file, a directory's
 * *.json as dp_runs_append read them): the fit would replace the measurements it was made
 * from; nor another profile. The GPU's own profile, `gpu_profile`, may be the output (it is
 * read whole before the atomic write).
 */
static int check_output(const char *out, const char *gpu_profile, const struct dp_run *runs, int n,
                        struct dp_err *err)
{
    char **files = malloc((size_t)(n > 0 ? n : 1) * sizeof *files);
    if (!files)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int nf = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || strcmp(runs[i].file, runs[i - 1].file) != 0)
            files[nf++] = (char *)runs[i].file;
    int rc = cli_output_check_allowing(NULL, out, "-o", files, nf, gpu_profile, err);
    free(files);
    return rc;
}

int cmd_calibrate(int argc, char **argv)
{
    /* Two modes: measuring this machine (--backend), or fitting a GPU to published runs
     * (--gpu). */
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--backend", 9) == 0 || strncmp(argv[i], "--coll-worker", 13) == 0)
            return cli_calibrate_cpu(argc, argv);
    static const struct option opts[] = {
        {"gpu", required_argument, 0, 'g'}, {"curve", required_argument, 0, 'c'},
        {"fit-half", no_argument, 0, 'f'},  {"attention", required_argument, 0, 'a'},
        {"help", no_argument, 0, 'h'},      {0, 0, 0, 0}};
    const char *gpu = NULL, *outfile = NULL;
    bool fit_half = false;
    unsigned attn_mask = 0;
    enum dp_fit_curves which = DP_FIT_ALL;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("calibrate", argc, argv, ":ho:", opts, NULL)) != -1) {
        switch (ch) {
        case 'g': gpu = optarg; break;
        case 'f': fit_half = true; break;
        case 'a': {
            char list[256];
            snprintf(list, sizeof list, "%s", optarg);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                int a = dp_attn_parse(t);
                if (a < 0)
                    return cli_usage_error("calibrate",
                                           "--attention: expected flash2, flash3, cudnn, triton, "
                                           "flash1 or flex (comma-separated), got \"%s\"",
                                           t);
                attn_mask |= 1u << a;
            }
            if (!attn_mask)
                return cli_usage_error("calibrate",
                                       "--attention: expected a kernel name, got \"%s\"", optarg);
            break;
        }
        case 'o': outfile = optarg; break;
        case 'c':
            if (strcmp(optarg, "all") == 0)
                which = DP_FIT_ALL;
            else if (strcmp(optarg, "bf16") == 0)
                which = DP_FIT_BF16;
            else if (strcmp(optarg, "fp8") == 0)
                which = DP_FIT_FP8;
            else
                return cli_usage_error("calibrate",
                                       "--curve: expected all, bf16 or fp8, got \"%s\"", optarg);
            break;
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
    }
    if (!gpu)
        return cli_usage_error("calibrate", "--gpu NAME is required");
    struct dp_err err = {0};
    struct dp_gpu g;
    if (dp_gpu_load(gpu, &g, &err))
        return cli_fail(&err);
    struct dp_run *runs = NULL;
    int n = 0;
    if (optind == argc && dp_runs_load(cli_default_runs(), &runs, &n, &err))
        return cli_fail(&err);
    for (int i = optind; i < argc; i++)
        if (dp_runs_append(argv[i], &runs, &n, &err)) {
            free(runs);
            return cli_fail(&err);
        }
    /* The GPU profile -o rewrites: the one named by path, else the shipped one. */
    char path[4096];
    snprintf(path, sizeof path, "%s/gpu/%s.json", dp_profiles_dir(), g.name);
    const char *gpu_file = strchr(gpu, '/') ? gpu : path;
    if (outfile && check_output(outfile, gpu_file, runs, n, &err)) {
        free(runs);
        return cli_fail(&err);
    }
    /* Fit from the profile's own curves (the runs' clusters may carry older copies). */
    for (int i = 0; i < n; i++)
        if (strcmp(runs[i].cluster.gpu.name, g.name) == 0) {
            runs[i].cluster.gpu.gemm = g.gemm;
            runs[i].cluster.gpu.gemm_fp8 = g.gemm_fp8;
            runs[i].cluster.gpu.mxfp8_fixed_s = g.mxfp8_fixed_s;
            memcpy(runs[i].cluster.gpu.attn_rel, g.attn_rel, sizeof g.attn_rel);
        }
    struct dp_fit fit;
    int rc = dp_calibrate_gemm(runs, n, g.name, which, fit_half, attn_mask, &fit, &err);
    free(runs);
    if (rc)
        return cli_fail(&err);
    printf("gpu %s: fitted on %d runs (%d with FP8 GEMMs) in %d iterations%s\n", g.name, fit.nruns,
           fit.nruns_fp8, fit.iterations,
           fit.stalled ? " (stopped without meeting the tolerance: at or near the optimum)" : "");
    if (fit.fit_bf16)
        printf("  gemm      eff_max %.4f (profile %.4f), half_flops %.4g (profile %.4g)%s\n",
               fit.bf16.eff_max, g.gemm.eff_max, fit.bf16.half_flops, g.gemm.half_flops,
               fit_half ? "" : ", kept");
    if (fit.fit_fp8)
        printf("  gemm_fp8  eff_max %.4f (profile %.4f), half_flops %.4g (profile %.4g)%s\n",
               fit.fp8.eff_max, g.gemm_fp8.eff_max, fit.fp8.half_flops, g.gemm_fp8.half_flops,
               fit_half ? "" : ", kept");
    if (fit.fit_mx)
        printf("  mxfp8     %.1f us a GEMM beyond per-tensor FP8's (profile %.1f), on the %d "
               "MXFP8 runs\n",
               fit.mxfp8_us, fit.mxfp8_prior, fit.nruns_mx);
    for (int a = 1; a < DP_ATTNS; a++)
        if (fit.attn_mask & (1u << a))
            printf("  attention %-7s %.4f (profile %.4f), on the %d of them using it\n",
                   dp_attn_name((enum dp_attn)a), fit.attn_rel[a], fit.attn_prior[a],
                   fit.attn_runs[a]);
    printf("  mean |error| on those runs: %.2f%% -> %.2f%%\n", 100 * fit.mean_abs_before,
           100 * fit.mean_abs_after);
    if (fit.nheld)
        printf("  held out (%d runs on this GPU, not fitted): %.2f%% -> %.2f%%\n", fit.nheld,
               100 * fit.held_before, 100 * fit.held_after);
    else
        printf("  held out: none on this GPU (nothing checks the fit)\n");
    if (outfile) {
        cJSON *root;
        if (dp_json_load_file(gpu_file, &root, &err))
            return cli_fail(&err);
        if (fit.fit_bf16)
            set_curve(root, "gemm", &fit.bf16);
        if (fit.fit_fp8)
            set_curve(root, "gemm_fp8", &fit.fp8);
        if (fit.fit_mx) {
            cJSON_DeleteItemFromObjectCaseSensitive(root, "mxfp8_gemm_us");
            cJSON_AddNumberToObject(root, "mxfp8_gemm_us", fit.mxfp8_us);
        }
        cJSON *at = cJSON_GetObjectItemCaseSensitive(root, "attention");
        if (fit.attn_mask && !at) {
            at = cJSON_AddObjectToObject(root, "attention");
            cJSON_AddStringToObject(at, "default", dp_attn_name(g.attn_default));
        }
        for (int a = 1; a < DP_ATTNS; a++)
            if (fit.attn_mask & (1u << a)) {
                cJSON_DeleteItemFromObjectCaseSensitive(at, dp_attn_name((enum dp_attn)a));
                cJSON_AddNumberToObject(at, dp_attn_name((enum dp_attn)a), fit.attn_rel[a]);
            }
        cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "sources");
        if (src && fit.attn_mask) {
            /* The kernels' priors keep their derivation; the fit is said after it. */
            const cJSON *old = cJSON_GetObjectItemCaseSensitive(src, "attention");
            char *note = malloc(8192);
            if (!note) {
                cJSON_Delete(root);
                dp_err_set(&err, DP_ENOMEM, "out of memory");
                return cli_fail(&err);
            }
            int len = snprintf(note, 8192, "%s", cJSON_IsString(old) ? old->valuestring : "");
            for (int a = 1; a < DP_ATTNS && len < 8192; a++)
                if (fit.attn_mask & (1u << a))
                    len += snprintf(note + len, 8192 - (size_t)len,
                                    "%s%s fitted by `dplan calibrate --gpu %s --attention %s` on "
                                    "the %d scored, not held-out runs of tests/validation on this "
                                    "GPU using it (of %d): %.4f -> %.4f",
                                    len ? "; " : "", dp_attn_name((enum dp_attn)a), g.name,
                                    dp_attn_name((enum dp_attn)a), fit.attn_runs[a], fit.nruns,
                                    fit.attn_prior[a], fit.attn_rel[a]);
            cJSON_DeleteItemFromObjectCaseSensitive(src, "attention");
            cJSON_AddStringToObject(src, "attention", note);
            free(note);
        }
        if (src) {
            char note[512];
            const char *keys[3] = {fit.fit_bf16 ? "gemm" : NULL, fit.fit_fp8 ? "gemm_fp8" : NULL,
                                   fit.fit_mx ? "mxfp8_gemm_us" : NULL};
            for (int k = 0; k < 3; k++) {
                if (!keys[k])
                    continue;
                snprintf(note, sizeof note,
                         "fitted by `dplan calibrate --gpu %s%s` on the %d scored, not held-out "
                         "runs of tests/validation on this GPU (%d with FP8 GEMMs): mean |error| "
                         "%.2f%% -> %.2f%%",
                         g.name, fit_half ? " --fit-half" : "", fit.nruns, fit.nruns_fp8,
                         100 * fit.mean_abs_before, 100 * fit.mean_abs_after);
                cJSON_DeleteItemFromObjectCaseSensitive(src, keys[k]);
                cJSON_AddStringToObject(src, keys[k], note);
            }
        }
        rc = dp_json_save_file(outfile, root, &err);
        cJSON_Delete(root);
        if (rc)
            return cli_fail(&err);
        printf("wrote %s\n", outfile);
    }
    return 0;
}
