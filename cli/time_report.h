/*
 * Printing of struct dp_step_cost, shared by estimate, suggest and whatif.
 */
#ifndef DPLAN_CLI_TIME_REPORT_H
#define DPLAN_CLI_TIME_REPORT_H

#include <stdio.h>

#include "costmodel/costmodel.h"

/* {"step_time_s", "tokens_per_s", "tflops_per_gpu": {...}, "mfu", "hfu", "breakdown_s": {...},
 *  "links": {...}}; the "memory" member is added by the caller. */
struct cJSON *cli_time_json(const struct dp_step_cost *c, const struct dp_layout *l);
void cli_time_text(FILE *f, const struct dp_step_cost *c, const struct dp_layout *l,
                   const struct dp_cluster *cl);
/* One line per parallel group: which ranks and which link. */
void cli_placement_text(FILE *f, const struct dp_step_cost *c, const struct dp_layout *l);

#endif
