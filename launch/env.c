/*
 * Which rank this process is, from the launcher's environment, checked in
 * this order (executor-notes Sec. 5): OpenMPI's mpirun (OMPI_COMM_WORLD_*),
 * MPICH/Hydra (PMI_RANK, PMI_SIZE), Slurm's srun (SLURM_PROCID,
 * SLURM_NTASKS; a batch script outside srun has no step id and does not
 * count), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE); and
 * what dplan's runner told its ranks (launch.h).
 */
#include "launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return (*end || x < 0 || x > 1 << 30) ? dflt : (int)x;
}

static bool has(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

/* The launchers in the order checked: the variables that must be set (need, and also need2
 * when given; step: one of the two Slurm step ids), then rank, world, local rank and local
 * world. */
static const struct launcher {
    const char *source, *need, *need2, *step1, *step2;
    const char *rank, *world, *local_rank, *local_world;
} launchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_SIZE", NULL, NULL, NULL, "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_SIZE", "PMI_RANK", NULL, NULL, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
     "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID",
     "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"torchrun", "RANK", "WORLD_SIZE", NULL, NULL, "RANK", "WORLD_SIZE", "LOCAL_RANK",
     "LOCAL_WORLD_SIZE"},
};

void dp_launch_detect_env(struct dp_rank_env *o)
{
    memset(o, 0, sizeof *o);
    o->world = o->local_world = 1;
    snprintf(o->source, sizeof o->source, "none");
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
        const struct launcher *l = &launchers[i];
        if (!has(l->need) || (l->need2 && !has(l->need2)) ||
            (l->step1 && !has(l->step1) && !has(l->step2)))
            continue;
        o->launched = true;
        snprintf(o->source, sizeof o->source, "%s", l->source);
        o->rank = env_int(l->rank, 0);
        o->world = env_int(l->world, 1);
        o->local_rank = env_int(l->local_rank, 0);
        o->local_world = env_int(l->local_world, 1);
        return;
    }
}

bool dp_launch_is_rank(void)
{
    const char *v = getenv(DP_ENV_LAUNCHER);
    return v && !strcmp(v, "1");
}

int dp_launch_attempt(void)
{
    return env_int(DP_ENV_RESTART_COUNT, 0);
}
