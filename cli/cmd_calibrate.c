/*
 * dplan calibrate --gpu NAME [RUNS.json]: fit a GPU profile's GEMM efficiency
 * curve to measured runs and print (or write) the updated profile.
 */
#include "cli.h"
#include "planner/planner.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: dplan calibrate --gpu NAME [RUNS.json] [--fit-half] [-o PROFILE.json]\n\n"
    "Fit the GEMM efficiency curve of GPU profile NAME, eff(x) = eff_max * x /\n"
    "(x + half_flops) with x a GEMM's FLOPs, so that the step-time model matches\n"
    "the measured runs on that GPU (those not marked held_out or underspecified;\n"
    "least squares on log(predicted/measured), GSL trust region). Prints the fit;\n"
    "-o writes the GPU profile with the fitted curve and its provenance.\n\n"
    "  --gpu NAME       the GPU profile to fit (as runs name it)\n"
    "  --fit-half       also fit half_flops (needs runs with small GEMMs)\n"
    "  -o FILE          write the updated profile JSON\n";

int cmd_calibrate(int argc, char **argv)
{
    static const struct option opts[] = {{"gpu", required_argument, 0, 'g'},
                                         {"fit-half", no_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *gpu = NULL, *outfile = NULL;
    bool fit_half = false;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("calibrate", argc, argv, ":ho:", opts, NULL)) != -1) {
        switch (ch) {
        case 'g': gpu = optarg; break;
        case 'f': fit_half = true; break;
        case 'o': outfile = optarg; break;
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
    }
    if (!gpu)
        return cli_usage_error("calibrate", "--gpu NAME is required");
    if (argc - optind > 1)
        return cli_usage_error("calibrate", "expected at most one RUNS.json");
    const char *file = optind < argc ? argv[optind] : cli_default_runs();
    struct dp_err err = {0};
    struct dp_gpu g;
    if (dp_gpu_load(gpu, &g, &err))
        return cli_fail(&err);
    struct dp_run *runs;
    int n;
    if (dp_runs_load(file, &runs, &n, &err))
        return cli_fail(&err);
    struct dp_fit fit;
    int rc = dp_calibrate_gemm(runs, n, g.name, fit_half, &fit, &err);
    free(runs);
    if (rc)
        return cli_fail(&err);
    printf("gpu %s: fitted on %d runs in %d iterations\n", g.name, fit.nruns, fit.iterations);
    printf("  eff_max     %.4f (profile %.4f)\n", fit.eff_max, g.gemm.eff_max);
    printf("  half_flops  %.4g (profile %.4g)%s\n", fit.half_flops, g.gemm.half_flops,
           fit_half ? "" : ", kept");
    printf("  mean |error| on those runs: %.2f%% -> %.2f%%\n", 100 * fit.mean_abs_before,
           100 * fit.mean_abs_after);
    if (outfile) {
        char path[4096];
        snprintf(path, sizeof path, "%s/gpu/%s.json", dp_profiles_dir(), g.name);
        cJSON *root;
        if (dp_json_load_file(strchr(gpu, '/') ? gpu : path, &root, &err))
            return cli_fail(&err);
        cJSON *gm = cJSON_GetObjectItemCaseSensitive(root, "gemm");
        cJSON_ReplaceItemInObjectCaseSensitive(gm, "eff_max", cJSON_CreateNumber(fit.eff_max));
        cJSON_ReplaceItemInObjectCaseSensitive(gm, "half_flops",
                                               cJSON_CreateNumber(fit.half_flops));
        cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "sources");
        if (src) {
            char note[512];
            snprintf(note, sizeof note,
                     "fitted by `dplan calibrate --gpu %s%s %s` on %d measured runs: mean |error| "
                     "%.2f%% -> %.2f%%",
                     g.name, fit_half ? " --fit-half" : "", file, fit.nruns,
                     100 * fit.mean_abs_before, 100 * fit.mean_abs_after);
            cJSON_DeleteItemFromObjectCaseSensitive(src, "gemm");
            cJSON_AddStringToObject(src, "gemm", note);
        }
        rc = dp_json_save_file(outfile, root, &err);
        cJSON_Delete(root);
        if (rc)
            return cli_fail(&err);
        printf("wrote %s\n", outfile);
    }
    return 0;
}
