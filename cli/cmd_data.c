/*
 * dplan data prepare TEXT... -o OUT.bin [--format llmc|raw]: byte-level
 * tokenisation (token = byte, vocabulary 256) into an llm.c token shard or a
 * raw uint16 array, so that any text can be trained on with `dplan run`.
 * The output is written to a temporary name and renamed; it may not be one of the
 * inputs.
 */
#include "cli.h"
#include "executor/executor.h"

#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: dplan data prepare TEXT... -o OUT.bin [--format llmc|raw]\n\n"
    "Tokenise text files byte by byte (vocabulary 256: each byte is a token) and\n"
    "write them, concatenated, as a token file for `dplan run --data`:\n"
    "  llmc  llm.c shard: 256 int32 header {20240520, 1, ntok}, uint16 tokens [default]\n"
    "  raw   headerless uint16 array (nanoGPT's train.bin)\n";

int cmd_data(int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"format", required_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(help, stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "prepare") != 0)
        return cli_usage_error("data", "expected the subcommand \"prepare\"");
    const char *out = NULL;
    enum dp_data_format fmt = DP_DATA_LLMC;
    int ch;
    optind = 1;
    opterr = 0;
    argc--;
    argv++;
    while ((ch = cli_next_opt("data", argc, argv, ":o:f:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'f':
            if (!strcmp(optarg, "llmc"))
                fmt = DP_DATA_LLMC;
            else if (!strcmp(optarg, "raw"))
                fmt = DP_DATA_RAW;
            else
                return cli_usage_error("data", "--format: expected llmc or raw, got \"%s\"",
                                       optarg);
            break;
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
    }
    if (!out)
        return cli_usage_error("data", "prepare needs -o OUT.bin");
    if (optind >= argc)
        return cli_usage_error("data", "prepare needs at least one TEXT file");
    struct dp_err err = {0};
    /* The output must not be one of the texts (it would replace them with tokens). */
    int nin = argc - optind;
    struct dp_io *in = calloc((size_t)nin, sizeof *in);
    if (!in)
        return 1;
    for (int i = 0; i < nin; i++)
        in[i].path = argv[optind + i];
    int rc = dp_output_check(out, "-o", in, nin, &err);
    free(in);
    if (rc)
        return cli_fail(&err);
    int64_t n = 0;
    if (dp_data_prepare((const char *const *)argv + optind, argc - optind, out, fmt, &n, &err))
        return cli_fail(&err);
    printf("%s: %lld tokens (byte-level, vocab 256, %s format)\n", out, (long long)n,
           fmt == DP_DATA_RAW ? "raw uint16" : "llm.c");
    return 0;
}
