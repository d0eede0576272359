/*
 * The CUDA kinds as the factory sees them: forwarders to the backend's module,
 * libdplan_cuda.so, which is opened (dlopen) the first time a `cuda` or `cuda-mpi`
 * backend is asked for. So dplan itself links no CUDA library: a process that never
 * names the backend does not pay for loading cuBLAS(Lt) and NCCL (about 0.17 s per
 * process, measured on this project's CI machine), and a binary built with CUDA still
 * runs on a machine without it. The module resolves dp_err_set, dp__beat and the other
 * executor symbols it uses against the executable (linked with ENABLE_EXPORTS).
 *
 * Where the module is: $DPLAN_CUDA_MODULE (only there when set), else beside the executable, else
 * ../lib/ from it (an installed dplan).
 */
#include "backend.h"
#include "cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct dp__cuda_module *mod;
static char mod_err[512];

static const struct dp__cuda_module *load(void)
{
    if (mod || mod_err[0])
        return mod;
    char exe[PATH_MAX] = "", path[PATH_MAX + 64];
    const char *env = getenv("DPLAN_CUDA_MODULE");
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = n > 0 ? (exe[n] = 0, strrchr(exe, '/')) : NULL;
    if (slash)
        *slash = 0;
    const char *dirs[] = {"", "/", "/../lib/"};
    void *h = NULL;
    char first[384] = "";
    for (int i = env ? 0 : 1; i < (env ? 1 : 3) && !h; i++) { /* the variable alone when set */
        if (i == 0)
            snprintf(path, sizeof path, "%s", env);
        else if (slash)
            snprintf(path, sizeof path, "%s%slibdplan_cuda.so", exe, dirs[i]);
        else
            continue;
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h && !first[0])
            snprintf(first, sizeof first, "%s", dlerror());
    }
    if (h)
        mod = dlsym(h, "dp__cuda_module");
    if (!mod)
        snprintf(mod_err, sizeof mod_err,
                 "the CUDA backend's module libdplan_cuda.so did not load: %s",
                 h          ? "no dp__cuda_module in it"
                 : first[0] ? first
                            : "not found");
    return mod;
}

const char *dp__cuda_module_error(void)
{
    load();
    return mod ? NULL : mod_err;
}

bool dp__cuda_device_present(void)
{
    return load() && mod->device_present();
}

static struct dp_backend *create(const struct dp_backend_cfg *cfg, bool staged, struct dp_err *err)
{
    if (!load()) {
        dp_err_set(err, DP_ERUNTIME, "%s", mod_err);
        return NULL;
    }
    return (staged ? mod->cuda_mpi : mod->cuda)->create(cfg, err);
}

static struct dp_backend *cuda_create(const struct dp_backend_cfg *cfg, struct dp_err *err)
{
    return create(cfg, false, err);
}

static struct dp_backend *cuda_mpi_create(const struct dp_backend_cfg *cfg, struct dp_err *err)
{
    return create(cfg, true, err);
}

/* Only a loaded module has anything to finalise or abort. */
static void finalize(void)
{
    if (mod)
        mod->cuda->finalize();
}

static void cuda_abort(int code)
{
    if (mod)
        mod->cuda->abort(code);
}

const struct dp_backend_kind dp__cuda_kind = {
    .name = "cuda",
    .create = cuda_create,
    .finalize = finalize,
    .abort = cuda_abort,
    .flash_default = true, /* cuda_flash.cu: no T x T probabilities on the device */
};

const struct dp_backend_kind dp__cuda_mpi_kind = {
    .name = "cuda-mpi",
    .create = cuda_mpi_create,
    .finalize = finalize,
    .abort = cuda_abort,
    .flash_default = true, /* cuda_flash.cu: no T x T probabilities on the device */
};
