/*
 * The simulated step (sim/) for people and programs: the text report of
 * `dplan simulate`, its --json object, and the pipeline Gantt chart of
 * --svg (the passes laid out for viz/'s dp_viz_gantt).
 */
#ifndef DPLAN_CLI_SIM_REPORT_H
#define DPLAN_CLI_SIM_REPORT_H

#include "sim/sim.h"

#include <stdio.h>

struct cJSON;

/* est: the analytic step (dp_time_step) to compare with, NULL for none; capacity: usable
 * bytes per GPU (the peak is judged against it). */
void cli_sim_text(FILE *f, const struct dp_sim_result *r, const struct dp_layout *l,
                  const struct dp_step_cost *est, int64_t capacity);
struct cJSON *cli_sim_json(const struct dp_sim_result *r, const struct dp_step_cost *est);

/* The Gantt of the step: one row per stage, its passes coloured forward/backward by chunk,
 * the optimizer, and a thin lane for its sends and data-parallel collectives. */
int cli_svg_gantt(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_sim_result *r, struct dp_buf *out, struct dp_err *err);

/* "0,3,8-15" into a malloc'ed array (*n entries); DP_EUSAGE on a malformed list. */
int cli_parse_ranks(const char *s, long **out, size_t *n, struct dp_err *err);

#endif
