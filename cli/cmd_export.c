/*
 * dplan export plan.json --format FORMAT [-o FILE]: the plan as the
 * configuration of a training framework or as launch scripts. The text comes
 * from export/; this file parses options, loads the plan and writes.
 */
#include "cli.h"
#include "export/export.h"
#include "svg_charts.h"

#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: dplan export plan.json --format FORMAT [-o FILE] [--program CMD]\n"
    "                   [--host-prefix NAME] [--port N]\n\n"
    "Write the plan (from `dplan suggest -o`) as what a training framework or a\n"
    "launcher takes. Each output names the framework version whose option names it\n"
    "uses; a plan knob the framework cannot express is an error naming the knob and\n"
    "the framework (exit 2), never a silent omission.\n\n"
    "Formats:\n"
    "  megatron        Megatron-LM / Megatron-Core arguments for pretrain_gpt.py as bash\n"
    "                  arrays: model shape, tensor/pipeline/virtual-pipeline/context/expert\n"
    "                  parallel sizes, sequence parallel, uneven first/last stages, micro\n"
    "                  and global batch, recompute, distributed optimizer or Megatron-FSDP,\n"
    "                  overlap, precision\n"
    "  deepspeed       a script writing ds_config.json (batch = micro x accumulation x data\n"
    "                  parallel, ZeRO stage and buckets, bf16/fp16, AutoTP, AutoEP,\n"
    "                  activation checkpointing) and a hostfile, then the deepspeed launcher\n"
    "  deepspeed-json  the ds_config.json alone\n"
    "  torchtitan      a Python recipe function returning torchtitan's Trainer.Config\n"
    "                  (parallelism, training, activation_checkpoint), and the same as the\n"
    "                  --section.option command-line overrides\n"
    "  torchrun        torchrun for every node (static rendezvous), with the rank-to-host map\n"
    "  mpirun          one Open MPI mpirun line and its hostfile, with the rank-to-host map\n"
    "  slurm           an sbatch script running srun with one task per GPU, with the map\n"
    "The launch formats and deepspeed need the plan's cluster (nodes x GPUs per node);\n"
    "ranks follow Megatron's order (tp fastest, then cp, dp, pp), node = rank / GPUs per node.\n\n"
    "Options:\n"
    "  --format F        one of the formats above (required)\n"
    "  -o FILE           write to FILE (atomically) instead of stdout\n"
    "  --program CMD     what each rank runs in the launch formats and deepspeed\n"
    "                    [train.py]; a .py script is run with python under mpirun and srun\n"
    "  --host-prefix P   host names in the hostfiles and the map: P0, P1, ... [node]\n"
    "  --port N          rendezvous (master) port [29500]\n";

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {{"format", required_argument, 0, 'f'},
                                         {"program", required_argument, 0, 'p'},
                                         {"host-prefix", required_argument, 0, 'H'},
                                         {"port", required_argument, 0, 'P'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *format = NULL, *outfile = NULL;
    struct dp_export_opts eo;
    dp_export_opts_default(&eo);
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("export", argc, argv, ":ho:", opts, NULL)) != -1) {
        switch (ch) {
        case 'f': format = optarg; break;
        case 'o': outfile = optarg; break;
        case 'p': eo.program = optarg; break;
        case 'H':
            if (!optarg[0] || strpbrk(optarg, " \t'\"$`\\;&|<>"))
                return cli_usage_error("export", "--host-prefix: expected a host name, got \"%s\"",
                                       optarg);
            eo.host_prefix = optarg;
            break;
        case 'P': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end || v < 1 || v > 65535)
                return cli_usage_error("export",
                                       "--port: expected integer in [1, 65535], got "
                                       "\"%s\"",
                                       optarg);
            eo.port = (int)v;
            break;
        }
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
    }
    if (optind != argc - 1)
        return cli_usage_error("export", "expected one plan.json argument");
    if (!format)
        return cli_usage_error("export", "--format is required");
    struct dp_err err = {0};
    enum dp_export_format f;
    if (dp_export_format_parse(format, &f, &err))
        return cli_usage_error("export", "%s", err.msg);
    if (cli_output_check(NULL, outfile, "-o", argv + optind, 1, &err))
        return cli_fail(&err);
    eo.plan_file = argv[optind];
    struct dp_plan *plan = malloc(sizeof *plan);
    if (!plan)
        return 1;
    struct dp_buf out = {0};
    int rc = dp_plan_load(argv[optind], plan, &err);
    if (!rc)
        rc = dp_export(plan, f, &eo, &out, &err);
    if (!rc)
        rc = cli_write_text(outfile ? outfile : "-", &out, &err);
    dp_buf_release(&out);
    free(plan);
    return rc ? cli_fail(&err) : 0;
}
