/*
 * viz: pictures of plans as SVG text, written by dplan itself. Pure: data in,
 * SVG out, into a struct dp_buf; no files, no printing, no cost model. The CLI
 * gathers the numbers, calls a chart function and writes the result.
 *
 * Two layers. The canvas (svg.c) and the axis helpers (axis.c) are the
 * building blocks: XML escaping, rectangles, lines, text, "nice" tick values
 * (1, 2, 5 x 10^k) and their labels, legends. The charts (bars.c, scatter.c)
 * use them: stacked bars against a limit (memory per stage), a scatter with
 * marked points (the search), grouped bars in panels (whatif). A later chart
 * (the pipeline Gantt of `dplan simulate`, gantt.c) builds on the same blocks.
 *
 * Output is deterministic: coordinates are printed with one decimal, numbers
 * with fixed precision, and nothing depends on time, locale or addresses.
 */
#ifndef DPLAN_VIZ_H
#define DPLAN_VIZ_H

#include <stdbool.h>
#include <stddef.h>

#include "core/core.h"

/* ------------------------------------------------------------------ canvas */

enum dp_svg_anchor { DP_SVG_START, DP_SVG_MIDDLE, DP_SVG_END };

struct dp_svg {
    struct dp_buf *b; /* borrowed */
    double w, h;      /* px */
};

/* Open an SVG document of w x h px with a white background; `title` becomes its <title>. */
void dp_svg_begin(struct dp_svg *s, struct dp_buf *b, double w, double h, const char *title);
void dp_svg_end(struct dp_svg *s);
/* Append `text` with &, <, >, " and ' escaped for XML. */
void dp_svg_escape(struct dp_buf *b, const char *text);
/* fill/stroke: a colour ("#0072b2") or NULL for none. */
void dp_svg_rect(struct dp_svg *s, double x, double y, double w, double h, const char *fill,
                 const char *stroke);
/* dash: NULL for solid, else an SVG dash array ("6 4"). */
void dp_svg_line(struct dp_svg *s, double x1, double y1, double x2, double y2, const char *stroke,
                 double width, const char *dash);
/* fill NULL: inherited from the enclosing group (dp_svg_group_begin). */
void dp_svg_circle(struct dp_svg *s, double cx, double cy, double r, const char *fill,
                   const char *stroke, double stroke_width);
/* An SVG path `d` (caller-built, already valid XML); fill or stroke NULL for none. */
void dp_svg_path(struct dp_svg *s, const char *d, const char *fill, const char *stroke,
                 double width, const char *dash);
/* A group whose children inherit fill colour and opacity (1 for opaque). */
void dp_svg_group_begin(struct dp_svg *s, const char *fill, double opacity);
void dp_svg_group_end(struct dp_svg *s);
/* Append "x,y " with one decimal each to a path being built. */
void dp_svg_path_point(struct dp_buf *d, char cmd, double x, double y);
/* A text label at (x, y) (y is the baseline); rotate in degrees about (x, y), 0 for none. */
void dp_svg_text(struct dp_svg *s, double x, double y, enum dp_svg_anchor a, double size,
                 const char *fill, bool bold, double rotate, const char *text);
/* Approximate width in px of `text` at `size` (for layout; sans-serif average advance). */
double dp_svg_text_width(const char *text, double size);

/* Colour i of the qualitative palette (Okabe and Ito's colour-blind safe set), cycling. */
const char *dp_viz_color(int i);

/* ------------------------------------------------------------------ axes */

/* A linear or logarithmic map from data [d0, d1] to pixels [p0, p1]. */
struct dp_viz_scale {
    double d0, d1, p0, p1;
    bool log;
};
double dp_viz_map(const struct dp_viz_scale *sc, double v);

/*
 * Tick values for a linear axis over [lo, hi]: multiples of a step of 1, 2 or 5
 * x 10^k giving about `target` intervals. *lo_out and *hi_out get the range
 * widened to whole steps. Returns the number of ticks (<= cap), *step the step.
 */
int dp_viz_ticks(double lo, double hi, int target, double *ticks, int cap, double *step,
                 double *lo_out, double *hi_out);
/* Tick values 1, 2, 5 x 10^k inside [lo, hi] (lo > 0) for a log axis; fewer when dense. */
int dp_viz_log_ticks(double lo, double hi, double *ticks, int cap);
/* A tick label: v with as many decimals as `step` needs ("0.5", "20", "1.25"). */
void dp_viz_fmt_tick(double v, double step, char *buf, size_t cap);
/* A value with an SI suffix and 3 significant digits: 1234567 -> "1.23M", 950 -> "950". */
void dp_viz_fmt_si(double v, char *buf, size_t cap);

/* The plot area of a chart, in px. */
struct dp_viz_frame {
    double x, y, w, h;
};

/*
 * A value axis on the left (or bottom) of frame f: ticks, their labels, light
 * grid lines across the plot and the axis label (with its unit, e.g. "memory
 * per GPU (GiB)"). Labels come from dp_viz_fmt_tick unless si is set.
 */
void dp_viz_axis_left(struct dp_svg *s, const struct dp_viz_frame *f, const struct dp_viz_scale *sc,
                      const double *ticks, int n, double step, bool si, const char *label);
void dp_viz_axis_bottom(struct dp_svg *s, const struct dp_viz_frame *f,
                        const struct dp_viz_scale *sc, const double *ticks, int n, double step,
                        bool si, const char *label);

/* Legend swatches in one row from (x, y): square swatches, or dots when `dots`. Returns the
 * x after the last entry. */
double dp_viz_legend(struct dp_svg *s, double x, double y, const char *const *names,
                     const char *const *colors, int n, bool dots);
/* Title (bold) and subtitle at the top left of the canvas. The subtitle's lines are
 * separated by '\n'; a line wider than the canvas breaks at "; " (else ", "). Each line
 * after the first is 17 px lower; dp_viz_title_lines counts them (at most 4). */
void dp_viz_title(struct dp_svg *s, const char *title, const char *subtitle);
int dp_viz_title_lines(const char *subtitle, double w);

/* ------------------------------------------------------------------ charts */

#define DP_VIZ_MAX_SERIES 16

/*
 * Stacked bars: one bar per category (e.g. pipeline stage), one segment per
 * series (params, grads, ...), stacked bottom-up in series order, with an
 * optional horizontal limit line (the GPU's usable memory). Bars whose total
 * exceeds the limit get their total printed in red with `over_label`.
 * Pointers are borrowed. v is [ncat][nseries] row-major.
 */
struct dp_viz_stack {
    const char *title, *subtitle;
    const char *y_label; /* with unit */
    const char *x_label;
    int ncat, nseries;
    const char *const *cat;    /* ncat category labels */
    const char *const *series; /* nseries names */
    const double *v;
    double limit; /* <= 0: no line */
    const char *limit_label;
    const char *over_label; /* e.g. "OOM" */
};
int dp_viz_stacked_bars(const struct dp_viz_stack *c, struct dp_buf *out, struct dp_err *err);

/* Scatter points, grouped by colour; marks are labelled points drawn on top. */
struct dp_viz_point {
    float x, y;
    int group;
};
struct dp_viz_mark {
    double x, y;
    char tag[8];    /* drawn next to the point: "#1" */
    char text[160]; /* the side list: "#1 tp=2 pp=8 ... 102.9 s" */
    bool primary;   /* the chosen one (filled, larger) */
};
struct dp_viz_scatter {
    const char *title, *subtitle;
    const char *x_label, *y_label;
    bool x_log, y_log; /* logarithmic axes (used when every value is > 0) */
    int ngroups;
    const char *const *group; /* legend names, colour i = dp_viz_color(i) */
    const struct dp_viz_point *pt;
    size_t npt;
    const struct dp_viz_mark *mark;
    int nmark;
    double x_limit; /* > 0: a vertical line (capacity) */
    const char *x_limit_label;
    bool frontier; /* draw the lower envelope: the fastest point at or below each x */
    const char *frontier_label;
    const char *note; /* a line under the plot ("16606 out-of-memory layouts not shown") */
    /* Horizontal reference lines (a target band, zero), dashed grey, each with its label
     * (y_ref_label[i], or none) at the right end of the plot. */
    const double *y_ref;
    const char *const *y_ref_label;
    int ny_ref;
    /* The legend's words for the primary mark and the others; NULL: "chosen", "runners-up". */
    const char *mark_label[2];
};
/* Points are thinned to one per 1.5 px cell and group before drawing (the picture is
 * unchanged; the file stays small), so any number may be passed. Group 0 is drawn last
 * (on top). Mark tags are placed clear of each other where the space allows. */
int dp_viz_scatter(const struct dp_viz_scatter *c, struct dp_buf *out, struct dp_err *err);

/*
 * Grouped bars in stacked panels sharing the categories: for each category
 * (e.g. a node count) one bar per series (a system); each panel its own value
 * axis (tokens/s, cost). A NAN value is a missing bar, marked with `missing`.
 * v of panel p is [ncat][nseries] row-major. Value labels are printed with SI
 * suffixes above the bars.
 */
#define DP_VIZ_MAX_PANELS 3
struct dp_viz_grouped {
    const char *title, *subtitle;
    const char *x_label;
    int ncat, nseries, npanel;
    const char *const *cat;
    const char *const *series;
    struct {
        const char *y_label;
        const double *v;
        const char *missing;           /* printed where a value is NAN, e.g. "no fit" */
        const char *const *missing_at; /* optional [ncat][nseries]: per-bar text instead */
        bool log;                      /* logarithmic value axis (values > 0) */
    } panel[DP_VIZ_MAX_PANELS];
};
int dp_viz_grouped_bars(const struct dp_viz_grouped *c, struct dp_buf *out, struct dp_err *err);

/*
 * A Gantt chart: one row per resource (a pipeline stage's GPU), bars in time along the
 * x axis, each coloured by its legend entry; lane bars are drawn in a thin strip under
 * their row (communication). Times are in the unit of x_label; the axis runs from 0 to
 * x_max. Each bar is a <rect class="bar"> (or "lane") carrying data-row, so that a test can
 * add up the chart's busy and idle area; span0/span1 (span1 > span0) mark the interval
 * whose idle area is the pipeline bubble with dashed lines, in the frame's data-span
 * attributes.
 */
struct dp_viz_bar {
    double t0, t1;
    int row, color;
    int tag; /* >= 0: a number drawn inside the bar where it fits (the micro-batch) */
    bool lane;
};
struct dp_viz_gantt {
    const char *title, *subtitle;
    const char *x_label; /* with unit */
    const char *y_label;
    int nrows;
    const char *const *row;
    const struct dp_viz_bar *bar;
    size_t nbar;
    int ncolors;
    const char *const *color_name;
    const char *const *colors;
    double x_max;
    double span0, span1;
    const char *note; /* a line under the plot */
};
int dp_viz_gantt(const struct dp_viz_gantt *c, struct dp_buf *out, struct dp_err *err);

#endif
