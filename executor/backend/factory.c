/*
 * The backend factory (backend.h): the one place that knows which backends
 * this build has and makes one by name. Whether the CPU backend is real or
 * the stand-in that says it was not built is CMake's choice of cpu.c or
 * none.c, not an #ifdef here; the CUDA kinds are in the table when the build has them
 * (DP_HAVE_CUDA, CMake's DPLAN_CUDA; only the fp32 library).
 */
#include "backend.h"

#include <stdio.h>
#include <string.h>

static const struct dp_backend_kind *const kinds[] = {&dp__cpu_kind,
#ifdef DP_HAVE_CUDA
                                                      &dp__cuda_kind, &dp__cuda_mpi_kind
#endif
};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

const struct dp_backend_kind *dp__backend_kind(const char *name)
{
    if (!name)
        return kinds[0];
    for (int i = 0; i < NKINDS; i++)
        if (!strcmp(kinds[i]->name, name))
            return kinds[i];
    return NULL;
}

const char *dp__backend_names(void)
{
    static char names[128];
    if (!names[0])
        for (int i = 0; i < NKINDS; i++) {
            size_t k = strlen(names);
            snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", kinds[i]->name);
        }
    return names;
}

struct dp_backend *dp__backend_new(const char *name, const struct dp_backend_cfg *cfg,
                                   struct dp_err *err)
{
    const struct dp_backend_kind *k = dp__backend_kind(name);
    if (!k) {
        dp_err_set(err, DP_EUSAGE, "backend \"%s\" is not built in (this dplan has: %s)", name,
                   dp__backend_names());
        return NULL;
    }
    return k->create(cfg, err);
}

void dp__backend_finalize(void)
{
    for (int i = 0; i < NKINDS; i++)
        if (kinds[i]->finalize)
            kinds[i]->finalize();
}

void dp__backend_abort(int code)
{
    for (int i = 0; i < NKINDS; i++)
        if (kinds[i]->abort)
            kinds[i]->abort(code);
}
