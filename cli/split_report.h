/*
 * The pipeline split of a layout in words and as JSON: each stage's layers, each
 * model chunk's layer range, where the embedding and the loss run, and the split
 * as a Megatron --pipeline-model-parallel-layout string.
 */
#ifndef DPLAN_CLI_SPLIT_REPORT_H
#define DPLAN_CLI_SPLIT_REPORT_H

#include <stdio.h>

#include "core/core.h"

struct cJSON;

/* Nothing for pp = 1. Stages of the same shape in runs of more than 3 are folded when
 * pp > 16. */
void cli_split_text(FILE *f, const struct dp_layout *l, const struct dp_model *m);
/* {"pp", "vpp", "layers", "megatron_layout", "stages": [{"stage", "layers", "embedding",
 * "loss", "chunks": [{"chunk", "layers", "first_layer", "last_layer"}]}]} */
struct cJSON *cli_split_json(const struct dp_layout *l, const struct dp_model *m);

#endif
