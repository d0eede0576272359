/*
 * The pictures of `dplan memory/suggest/whatif --svg`: the numbers of each
 * report arranged for viz/'s charts, and the SVG written to a file
 * (atomically) or to stdout ("-").
 */
#ifndef DPLAN_CLI_SVG_CHARTS_H
#define DPLAN_CLI_SVG_CHARTS_H

#include "costmodel/costmodel.h"
#include "planner/planner.h"
#include "validate/validate.h"
#include "viz/viz.h"

/* Write `b` to `file` (tmp + rename), or to stdout when file is "-". */
int cli_write_text(const char *file, const struct dp_buf *b, struct dp_err *err);

/* Per-stage memory stacked against the GPU's usable memory. */
int cli_svg_memory(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                   const struct dp_mem_report *rep, struct dp_buf *out, struct dp_err *err);

/*
 * The layouts a search evaluated, gathered through dp_search_opts.on_fit:
 * (peak GiB, step s, recompute mode) per fitting layout. Bounded: past
 * CLI_SCATTER_MAX points every other one is dropped and only every 2^k-th
 * later one kept, deterministically, so memory stays under ~16 MiB.
 */
#define CLI_SCATTER_MAX (1 << 20)
struct cli_scatter {
    struct dp_viz_point *pt;
    size_t n, cap;
    unsigned long long seen, stride;
    bool failed;
};
void cli_scatter_collect(const struct dp_candidate *c, void *ctx); /* ctx: struct cli_scatter */
void cli_scatter_release(struct cli_scatter *s);
int cli_svg_suggest(const struct dp_model *m, const struct dp_cluster *cl,
                    const struct dp_search_opts *so, const struct dp_search_result *r,
                    const struct cli_scatter *pts, struct dp_buf *out, struct dp_err *err);

/* The whatif sweep: rows in system-major order, one per (system, node count). */
struct cli_whatif_row {
    bool fits;
    double tokens_per_s, days, cost_usd; /* cost < 0: no price given */
};
int cli_svg_whatif(const struct dp_model *m, double tokens, const struct dp_search_opts *so,
                   char *const *systems, int nsys, const int *nodes, int nnodes,
                   const struct cli_whatif_row *rows, bool priced, struct dp_buf *out,
                   struct dp_err *err);

/*
 * `dplan validate --svg`: each scored run's error against its measured step time (log
 * scale), held-out and fitted runs in two colours, reference lines at 0 and +-band
 * percent, the worst held-out runs marked and listed. `held` and `fit` are the summary's
 * statistics, `sources` the number of sources, as `dplan validate` counted them.
 */
int cli_svg_validate(const struct dp_run *runs, const struct dp_run_result *res, int n,
                     struct dp_val_stats held, struct dp_val_stats fit, int sources,
                     double band_pct, struct dp_buf *out, struct dp_err *err);

#endif
