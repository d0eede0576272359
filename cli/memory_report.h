/*
 * Printing of struct dp_mem_report, shared by the subcommands that show memory.
 */
#ifndef DPLAN_CLI_MEMORY_REPORT_H
#define DPLAN_CLI_MEMORY_REPORT_H

#include <stdio.h>

#include "costmodel/costmodel.h"

/* The report as JSON; each stage lists its layers (first_layer, last_layer, 0-based,
 * and its chunks when interleaved). */
struct cJSON *cli_mem_json(const struct dp_mem_report *r, const struct dp_layout *l,
                           const struct dp_model *m);
/* One row per stage, labelled with its layers; columns as wide as their content. */
void cli_mem_table(FILE *f, const struct dp_mem_report *r, const struct dp_layout *l,
                   const struct dp_model *m);
/* FITS (tight under `margin` of the capacity free), or OOM, with the peak and headroom. */
void cli_mem_verdict(FILE *f, const struct dp_mem_report *r, double margin);
/* One line on what a tight layout (costmodel.h dp_mem_tight) risks. */
void cli_mem_tight_note(FILE *f, double margin);
/* "balance: stages range ..." when there is more than one stage. */
void cli_mem_balance(FILE *f, const struct dp_mem_report *r);
void cli_mem_derivation(FILE *f, const struct dp_layout *l, const struct dp_mem_report *r);
/* "quantity: peak = device total ...": what the peak counts and the allocated and reserved
 * peaks of the peak stage, the quantities frameworks log. */
void cli_mem_quantity(FILE *f, const struct dp_layout *l, const struct dp_mem_report *r);

#endif
