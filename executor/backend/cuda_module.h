/*
 * What the CUDA backend's module (libdplan_cuda.so: cuda.c and its files) exports to
 * its loader (cuda_loader.c): one symbol, dp__cuda_module.
 */
#ifndef DPLAN_EXECUTOR_CUDA_MODULE_H
#define DPLAN_EXECUTOR_CUDA_MODULE_H

#include "backend.h"

struct dp__cuda_module {
    const struct dp_backend_kind *cuda, *cuda_mpi;
    bool (*device_present)(void);
};

/* The loader's error text when the module did not load, else NULL (cuda_loader.c). */
const char *dp__cuda_module_error(void);

#endif
