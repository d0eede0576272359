/*
 * dplan: the command dispatcher. Each subcommand parses its own options
 * (getopt_long) in cli/cmd_<name>.c.
 */
#include "cli.h"

#include <string.h>

static const struct dp_cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
    bool json; /* takes --json: then errors are also printed as JSON on stdout */
} cmds[] = {
    /* sorted */
    {"calibrate", cmd_calibrate, "fit a GPU's GEMM efficiency curve to measured runs", false},
    {"check", cmd_check, "pre-launch checklist: PASS/WARN/FAIL for versions, bandwidth, ranks, ...",
     true},
    {"ckpt", cmd_ckpt, "list, verify and export the checkpoints of `dplan run`", true},
    {"data", cmd_data, "prepare token files for `dplan run` (byte-level tokeniser)", false},
    {"estimate", cmd_estimate, "predict step time, throughput and memory of one layout", true},
    {"export", cmd_export,
     "write a plan as Megatron-LM, DeepSpeed or torchtitan settings or launchers", false},
    {"memory", cmd_memory, "per-GPU memory per pipeline stage; will it fit, and what fixes it",
     true},
    {"model", cmd_model, "show a model's architecture and exact parameter count", true},
    {"profiles", cmd_profiles, "list the shipped GPU, link, network, system and model profiles",
     true},
    {"run", cmd_run, "train for real under a plan (CPU backend over MPI)", false},
    {"simulate", cmd_simulate,
     "simulate one training step event by event; Perfetto trace, pipeline Gantt chart", true},
    {"suggest", cmd_suggest, "search every layout, rank those that fit, write plan.json", true},
    {"topo", cmd_topo, "describe this node or an hwloc XML export; write a cluster file", true},
    {"validate", cmd_validate, "compare predicted and measured step times of real training runs",
     true},
    {"whatif", cmd_whatif, "which systems and sizes train a model, how fast and at what cost",
     true},
};

/* --json among the options (before any "--"), wherever getopt will find it. */
static bool wants_json(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "--json") == 0)
            return true;
    }
    return false;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dplan <command> [options]\n\n"
               "Plan, simulate and run distributed training of transformer models.\n\n"
               "Commands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].help);
    fprintf(f, "\nRun `dplan <command> --help` for a command's options.\n"
               "Profiles are read from $DPLAN_PROFILES or the shipped profiles/ directory.\n");
}

int main(int argc, char **argv)
{
    dp_profiles_set_exe(argv[0]);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("dplan %s\n", DPLAN_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(argv[1], cmds[i].name) == 0) {
            cli_set_json_errors(cmds[i].json && wants_json(argc - 1, argv + 1));
            return cmds[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "dplan: unknown command \"%s\" (see `dplan --help`)\n", argv[1]);
    return 2;
}
