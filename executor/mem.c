/*
 * Accounted device memory: every executor buffer is allocated through here
 * (or held through dp__mem_hold for reused activation slots), so each rank
 * knows the bytes in use and the peak of each pool. The numbers are the
 * bytes the executor asked for; the allocator's own rounding (to 64 bytes, or
 * to 2 MiB for large buffers in the CPU backend) is counted apart, in `reserved`,
 * which is what run.c compares with the process's resident memory.
 */
#include "internal.h"

#include <stdio.h>

static void bump(struct dp_mem *mem, enum dp_pool pool, int64_t bytes)
{
    mem->in_use[pool] += bytes;
    mem->total_in_use += bytes;
    if (mem->in_use[pool] > mem->peak[pool])
        mem->peak[pool] = mem->in_use[pool];
    if (mem->total_in_use > mem->total_peak)
        mem->total_peak = mem->total_in_use;
}

static int64_t footprint(struct dp_backend *be, size_t bytes)
{
    return (int64_t)(be->ops->footprint ? be->ops->footprint(be, bytes) : bytes);
}

void *dp__mem_alloc(struct dp_backend *be, struct dp_mem *mem, enum dp_pool pool, size_t bytes)
{
    void *p = be->ops->alloc(be, bytes);
    if (p) {
        bump(mem, pool, (int64_t)bytes);
        mem->reserved += footprint(be, bytes);
    }
    return p;
}

void *dp__mem_alloc_unheld(struct dp_backend *be, struct dp_mem *mem, size_t bytes)
{
    void *p = be->ops->alloc(be, bytes);
    if (p)
        mem->reserved += footprint(be, bytes);
    return p;
}

void dp__mem_hold(struct dp_mem *mem, enum dp_pool pool, int64_t bytes)
{
    bump(mem, pool, bytes);
}

const char *dp_pool_name(enum dp_pool p)
{
    static const char *const names[DP_NPOOLS] = {"params",   "grads",    "optimizer", "act_slots",
                                                 "act_head", "act_work", "comm"};
    return (unsigned)p < DP_NPOOLS ? names[p] : "?";
}

int64_t dp__mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb >= 0 ? (int64_t)kb * 1024 : -1;
}
