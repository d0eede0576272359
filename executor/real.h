/*
 * The executor's floating-point type. The whole executor is compiled twice:
 * in float (fp32, what `dplan run` uses) and, for the finite-difference
 * gradient check only, in double (-DDP_REAL_DOUBLE, library
 * dplan_executor_f64). Nothing else changes between the two builds.
 */
#ifndef DPLAN_EXECUTOR_REAL_H
#define DPLAN_EXECUTOR_REAL_H

#ifdef DP_REAL_DOUBLE
typedef double real;
#define DP_REAL_NAME "f64"
#else
typedef float real;
#define DP_REAL_NAME "f32"
#endif

#endif
