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

void dp_launch_detect_env(struct dp_rank_env *o)
{
    memset(o, 0, sizeof *o);
    o->world = o->local_world = 1;
    const char *src = "none";
    if (has("OMPI_COMM_WORLD_SIZE")) {
        src = "openmpi";
        o->rank = env_int("OMPI_COMM_WORLD_RANK", 0);
        o->world = env_int("OMPI_COMM_WORLD_SIZE", 1);
        o->local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
        o->local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    } else if (has("PMI_SIZE") && has("PMI_RANK")) {
        src = "pmi";
        o->rank = env_int("PMI_RANK", 0);
        o->world = env_int("PMI_SIZE", 1);
        o->local_rank = env_int("MPI_LOCALRANKID", 0);
        o->local_world = env_int("MPI_LOCALNRANKS", 1);
    } else if (has("SLURM_PROCID") && has("SLURM_NTASKS") &&
               (has("SLURM_STEP_ID") || has("SLURM_STEPID"))) {
        src = "slurm";
        o->rank = env_int("SLURM_PROCID", 0);
        o->world = env_int("SLURM_NTASKS", 1);
        o->local_rank = env_int("SLURM_LOCALID", 0);
        o->local_world = env_int("SLURM_NTASKS_PER_NODE", 1);
    } else if (has("RANK") && has("WORLD_SIZE")) {
        src = "torchrun";
        o->rank = env_int("RANK", 0);
        o->world = env_int("WORLD_SIZE", 1);
        o->local_rank = env_int("LOCAL_RANK", 0);
        o->local_world = env_int("LOCAL_WORLD_SIZE", 1);
    }
    o->launched = strcmp(src, "none") != 0;
    snprintf(o->source, sizeof o->source, "%s", src);
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
