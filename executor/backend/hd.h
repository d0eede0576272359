/*
 * DP_HD marks code that both the CPU backend and the CUDA kernels run (flash_tile.h,
 * ce_online.h, cuda_moe.h): __host__ __device__ under nvcc, nothing in C.
 */
#ifndef DPLAN_EXECUTOR_BACKEND_HD_H
#define DPLAN_EXECUTOR_BACKEND_HD_H

#ifdef __CUDACC__
#define DP_HD __host__ __device__
#else
#define DP_HD
#endif

#endif
