/*
 * The pipeline split of a layout in words and as JSON: each stage's layers, each
 * model chunk's layer range, where the embedding and the loss run, and the split
 * as a Megatron --pipeline-model-parallel-layout string.
 */
#ifndef DPLAN_CLI_SPLIT_REPORT_H
#define DPLAN_CLI_SPLIT_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "core/core.h"

struct cJSON;

/* Whether the text reports print the split: interleaved or uneven pipelines (the memory
 * table's stage labels show the plain ones). */
bool cli_split_shown(const struct dp_layout *l);
/* The Megatron layout string and, with interleaving, every stage's chunks (the memory
 * table elides chunks beyond four); stages of the same shape in runs of more than 3 are
 * folded when pp > 16. Nothing for pp = 1. */
void cli_split_text(FILE *f, const struct dp_layout *l, const struct dp_model *m);
/* {"pp", "vpp", "layers", "stage_layers": [per chunk, model order], "megatron_layout"};
 * the per-stage ranges are in the memory report's stages[]. */
struct cJSON *cli_split_json(const struct dp_layout *l, const struct dp_model *m);

#endif
