/*
 * core internals shared between the files of core/; not for other modules.
 */
#ifndef DPLAN_CORE_INTERNAL_H
#define DPLAN_CORE_INTERNAL_H

#include "core.h"

struct cJSON;

bool dp__is_hf_config(const struct cJSON *root);
int dp__model_from_hf(struct dp_jr *jr, const struct cJSON *root, struct dp_model *m);

#endif
