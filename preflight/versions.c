/*
 * This process's NVIDIA driver and CUDA versions, from NVML and the CUDA
 * runtime loaded with dlopen: the build needs neither, and a machine without
 * them gets empty fields and a note, never an error. The prototypes are
 * those of nvml.h (nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion)
 * and cuda_runtime_api.h (cudaRuntimeGetVersion). The tests load
 * tests/topology/fake_nvml.c through $DPLAN_NVML_LIB.
 */
#include "preflight.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* dlsym into a function pointer without a data-to-function pointer cast. */
static bool sym(void *lib, const char *name, void *fnp)
{
    void *p = dlsym(lib, name);
    memcpy(fnp, &p, sizeof p);
    return p != NULL;
}

static void nvml_versions(struct dp_pf_versions *out)
{
    const char *name = getenv("DPLAN_NVML_LIB");
    if (!name || !name[0])
        name = "libnvidia-ml.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(out->note, sizeof out->note, "%s not found", name);
        return;
    }
    int (*init)(void), (*shutdown)(void), (*driver)(char *, unsigned), (*cuda)(int *);
    if (!sym(lib, "nvmlInit_v2", &init) || !sym(lib, "nvmlShutdown", &shutdown) ||
        !sym(lib, "nvmlSystemGetDriverVersion", &driver)) {
        snprintf(out->note, sizeof out->note, "%s lacks nvmlSystemGetDriverVersion", name);
        dlclose(lib);
        return;
    }
    if (!sym(lib, "nvmlSystemGetCudaDriverVersion_v2", &cuda))
        sym(lib, "nvmlSystemGetCudaDriverVersion", &cuda);
    int rc = init();
    if (rc != 0) {
        snprintf(out->note, sizeof out->note, "nvmlInit failed (NVML error %d): no driver", rc);
        dlclose(lib);
        return;
    }
    /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80 */
    char v[80] = "";
    if (driver(v, sizeof v) == 0)
        snprintf(out->driver, sizeof out->driver, "%s", v);
    int c = 0;
    if (cuda && cuda(&c) == 0)
        out->cuda_driver = c;
    shutdown();
    dlclose(lib);
}

static void cudart_version(struct dp_pf_versions *out)
{
    /* $DPLAN_CUDART_LIB, when set, is the only one tried (the tests point it nowhere). */
    const char *env = getenv("DPLAN_CUDART_LIB");
    const char *names[] = {env && env[0] ? env : "libcudart.so", "libcudart.so.12",
                           "libcudart.so.11.0"};
    size_t n = env && env[0] ? 1 : sizeof names / sizeof names[0];
    for (size_t i = 0; i < n; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            continue;
        int (*get)(int *);
        int v = 0;
        if (sym(lib, "cudaRuntimeGetVersion", &get) && get(&v) == 0)
            out->cudart = v;
        dlclose(lib);
        return;
    }
}

void dp_pf_versions_local(struct dp_pf_versions *out)
{
    memset(out, 0, sizeof *out);
    if (gethostname(out->host, sizeof out->host - 1) != 0)
        snprintf(out->host, sizeof out->host, "?");
    nvml_versions(out);
    cudart_version(out);
}
