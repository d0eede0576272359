/*
 * Printing of struct dp_mem_report, shared by the subcommands that show memory.
 */
#ifndef DPLAN_CLI_MEMORY_REPORT_H
#define DPLAN_CLI_MEMORY_REPORT_H

#include <stdio.h>

#include "costmodel/costmodel.h"

struct cJSON *cli_mem_json(const struct dp_mem_report *r);
void cli_mem_table(FILE *f, const struct dp_mem_report *r);
void cli_mem_verdict(FILE *f, const struct dp_mem_report *r);
void cli_mem_derivation(FILE *f, const struct dp_layout *l, const struct dp_mem_report *r);

#endif
