/*
 * Launch scripts for the plan's cluster (nodes x GPUs per node): torchrun on
 * every node, one Open MPI mpirun, or a Slurm sbatch script running srun with
 * one task per GPU. Each places global rank r on node r / gpus_per_node,
 * which is what Megatron's rank order (and the rank map printed with it)
 * assumes: TP groups of consecutive ranks stay inside a node.
 *
 * Option names: torchrun, PyTorch torch/distributed/run.py (pytorch/pytorch
 * 010929f); mpirun, Open MPI 4.1 (`mpirun --help all`); sbatch and srun,
 * Slurm 26.11 (SchedMD/slurm 284c3b9, doc/man/man1/sbatch.1, srun.1 and
 * scontrol.1).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static void program_in_bash_c(const struct dp__ctx *c, struct dp_buf *b, const char *env)
{
    char prog[1024], cmd[1536];
    dp__program_cmd(c, prog, sizeof prog);
    snprintf(cmd, sizeof cmd, "export %s; exec %s", env, prog);
    dp_buf_puts(b, "bash -c ");
    dp__shell_word(b, cmd);
    dp_buf_puts(b, "\n");
}

static void torchrun(const struct dp__ctx *c, struct dp_buf *b, const char *host, int port)
{
    const struct dp_cluster *cl = &c->p->cluster;
    const int G = cl->gpus_per_node, N = cl->nodes;
    dp_buf_printf(b,
                  "# options: PyTorch torch/distributed/run.py; static rendezvous (the default "
                  "backend): node R\n"
                  "#   runs global ranks %d x R .. %d x R + %d, the placement the map below "
                  "assumes\n",
                  G, G, G - 1);
    dp__rank_map(c, b);
    dp_buf_printf(b,
                  "\n# Run this script on every node with NODE_RANK set to its index, 0 .. %d "
                  "(%s0 is node 0).\n",
                  N - 1, host);
    dp_buf_printf(b,
                  "NODE_RANK=${NODE_RANK:?set NODE_RANK to this node's index, 0 .. %d}\n"
                  "MASTER_ADDR=${MASTER_ADDR:-%s0}\n"
                  "MASTER_PORT=${MASTER_PORT:-%d}\n",
                  N - 1, host, port);
    dp_buf_printf(b,
                  "torchrun --nnodes %d --nproc-per-node %d --node-rank \"$NODE_RANK\" \\\n"
                  "    --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \\\n    %s\n",
                  N, G, c->o->program ? c->o->program : "train.py");
}

static void mpirun(const struct dp__ctx *c, struct dp_buf *b, const char *host, int port)
{
    const struct dp_cluster *cl = &c->p->cluster;
    const int G = cl->gpus_per_node, N = cl->nodes;
    dp_buf_printf(b,
                  "# options: Open MPI 4.1 mpirun; --map-by ppr:%d:node fills each host's %d "
                  "slots in turn, so\n"
                  "#   rank r runs on host r / %d as the map below assumes; every rank sets "
                  "torch.distributed's\n"
                  "#   env:// variables from Open MPI's (OMPI_COMM_WORLD_RANK, "
                  "OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_SIZE)\n",
                  G, G, G);
    dp_buf_printf(b, "\n# hostfile: replace %s0 .. %s%d by the node names\n", host, host, N - 1);
    dp_buf_printf(b, "for i in $(seq 0 %d); do echo \"%s$i slots=%d\"; done > hostfile\n\n", N - 1,
                  host, G);
    dp__rank_map(c, b);
    dp_buf_printf(b,
                  "\nmpirun -np %d --hostfile hostfile --map-by ppr:%d:node --bind-to none \\\n"
                  "    -x MASTER_ADDR=%s0 -x MASTER_PORT=%d -x PATH -x LD_LIBRARY_PATH \\\n    ",
                  N * G, G, host, port);
    program_in_bash_c(c, b,
                      "RANK=$OMPI_COMM_WORLD_RANK LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK "
                      "WORLD_SIZE=$OMPI_COMM_WORLD_SIZE");
}

static void slurm(const struct dp__ctx *c, struct dp_buf *b, const char *host, int port)
{
    const struct dp_cluster *cl = &c->p->cluster;
    const int G = cl->gpus_per_node, N = cl->nodes;
    dp_buf_printf(b,
                  "# options: Slurm 26.11 sbatch, srun, scontrol (doc/man/man1); one task per "
                  "GPU, and\n"
                  "#   --distribution=block gives node k of the job tasks %d k .. %d k + %d, the "
                  "map below\n"
                  "#   (%sk is the job's k-th node in `scontrol show hostnames` order)\n",
                  G, G, G - 1, host);
    dp__rank_map(c, b);
    dp_buf_printf(b,
                  "\nexport MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head "
                  "-n 1)\n"
                  "export MASTER_PORT=%d\n"
                  "srun --distribution=block --kill-on-bad-exit=1 ",
                  port);
    program_in_bash_c(c, b,
                      "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS");
    (void)N;
}

int dp__export_launch(const struct dp__ctx *c0, enum dp_export_format f, struct dp_buf *b)
{
    struct dp__ctx c = *c0;
    c.framework = dp_export_format_name(f);
    int rc = dp__need_cluster(&c, c.framework);
    if (rc)
        return rc;
    const struct dp_cluster *cl = &c.p->cluster;
    const char *host = c.o->host_prefix ? c.o->host_prefix : "node";
    int port = c.o->port ? c.o->port : 29500;
    if (f == DP_EXPORT_SLURM) {
        char job[96];
        snprintf(job, sizeof job, "dplan-%s", c.m->name);
        dp_buf_printf(b,
                      "#!/bin/bash\n"
                      "#SBATCH --job-name=%s\n"
                      "#SBATCH --nodes=%d\n"
                      "#SBATCH --ntasks-per-node=%d\n"
                      "#SBATCH --gpus-per-node=%d\n"
                      "#SBATCH --exclusive\n",
                      job, cl->nodes, cl->gpus_per_node, cl->gpus_per_node);
        dp_buf_puts(b, "# Slurm batch script (dplan export --format slurm)\n");
    } else {
        dp_buf_printf(b, "#!/usr/bin/env bash\n# %s launch (dplan export --format %s)\n",
                      f == DP_EXPORT_TORCHRUN ? "torchrun" : "Open MPI mpirun", c.framework);
    }
    dp__header(&c, b, "#");
    switch (f) {
    case DP_EXPORT_TORCHRUN: torchrun(&c, b, host, port); break;
    case DP_EXPORT_MPIRUN: mpirun(&c, b, host, port); break;
    default: slurm(&c, b, host, port); break;
    }
    return 0;
}
