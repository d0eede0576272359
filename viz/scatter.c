/*
 * Scatter plot with marked points: every layout the search evaluated, step
 * time against peak memory, coloured by a category, the chosen layout and
 * its runners-up marked and listed under the plot, and the lower envelope
 * (the fastest layout at or below each memory) as a staircase.
 *
 * A search evaluates up to ~10^5 layouts; most fall on the same pixels. Points
 * are thinned to one per 1.5 x 1.5 px cell per colour before drawing, which
 * leaves the picture as it was and keeps the file to a few hundred kB.
 */
#include "viz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK_COLOR  "#c0392b"
#define RING_COLOR  "#111111"
#define FRONT_COLOR "#555555"
#define TEXT_COLOR  "#333333"
#define CELL_PX     1.5

struct cell {
    int group;
    int ix, iy;
    size_t index; /* first point that fell in the cell: keeps the output deterministic */
    float px, py;
};

static int cell_cmp(const void *a, const void *b)
{
    const struct cell *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    if (x->ix != y->ix)
        return x->ix < y->ix ? -1 : 1;
    if (x->iy != y->iy)
        return x->iy < y->iy ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int pt_x_cmp(const void *a, const void *b)
{
    const struct dp_viz_point *x = a, *y = b;
    if (x->x != y->x)
        return x->x < y->x ? -1 : 1;
    return x->y < y->y ? -1 : x->y > y->y;
}

/* Range of the data along one axis, widened by the marks and the limit line. */
static void data_range(const struct dp_viz_scatter *c, bool along_x, double *lo, double *hi)
{
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < c->npt; i++) {
        double v = along_x ? c->pt[i].x : c->pt[i].y;
        if (v < *lo)
            *lo = v;
        if (v > *hi)
            *hi = v;
    }
    for (int i = 0; i < c->nmark; i++) {
        double v = along_x ? c->mark[i].x : c->mark[i].y;
        if (v < *lo)
            *lo = v;
        if (v > *hi)
            *hi = v;
    }
    if (along_x && c->x_limit > 0 && c->x_limit > *hi)
        *hi = c->x_limit;
    for (int i = 0; i < c->ny_ref && !along_x; i++) {
        if (c->y_ref[i] < *lo)
            *lo = c->y_ref[i];
        if (c->y_ref[i] > *hi)
            *hi = c->y_ref[i];
    }
    if (!(*hi >= *lo)) {
        *lo = 0;
        *hi = 1;
    }
}

/* A logarithmic axis over [lo, hi] (> 0) onto pixels [p0, p1]: 1-2-5 ticks, or linear
 * steps (about `target` of them) when the range spans less than a decade or so. *step
 * sets the labels' decimals: the linear step, or for 1-2-5 ticks the decimals the
 * smallest one needs. */
static int log_axis(double lo, double hi, double p0, double p1, int target, double *ticks,
                    double *step, struct dp_viz_scale *sc)
{
    double a, b;
    *step = 0;
    int n = dp_viz_log_ticks(lo, hi, ticks, 32);
    if (n < 3)
        n = dp_viz_ticks(lo, hi, target, ticks, 32, step, &a, &b);
    *sc = (struct dp_viz_scale){lo, hi, p0, p1, true};
    if (*step == 0)
        *step = ticks[0] > 0 ? pow(10.0, floor(log10(ticks[0]))) : 1;
    return n;
}

static void draw_points(struct dp_svg *s, const struct dp_viz_scatter *c,
                        const struct dp_viz_scale *xs, const struct dp_viz_scale *ys,
                        struct dp_err *err, int *rc)
{
    if (c->npt == 0)
        return;
    struct cell *cells = malloc(c->npt * sizeof *cells);
    if (!cells) {
        *rc = dp_err_set(err, DP_ENOMEM, "scatter: out of memory for %zu points", c->npt);
        return;
    }
    for (size_t i = 0; i < c->npt; i++) {
        float px = (float)dp_viz_map(xs, c->pt[i].x), py = (float)dp_viz_map(ys, c->pt[i].y);
        cells[i] = (struct cell){c->pt[i].group,
                                 (int)floorf(px / (float)CELL_PX),
                                 (int)floorf(py / (float)CELL_PX),
                                 i,
                                 px,
                                 py};
    }
    qsort(cells, c->npt, sizeof *cells, cell_cmp);
    /* Sorted by group; walk backwards so that group 0 ends up on top. */
    int open = -1;
    for (size_t k = c->npt; k-- > 0;) {
        const struct cell *e = &cells[k];
        if (k > 0 && e->group == cells[k - 1].group && e->ix == cells[k - 1].ix &&
            e->iy == cells[k - 1].iy)
            continue;
        if (e->group != open) {
            if (open >= 0)
                dp_svg_group_end(s);
            dp_svg_group_begin(s, dp_viz_color(e->group), 0.5);
            open = e->group;
        }
        dp_svg_circle(s, e->px, e->py, 2.4, NULL, NULL, 0);
    }
    if (open >= 0)
        dp_svg_group_end(s);
    free(cells);
}

/* The fastest point at or below each x: a staircase down and to the right. */
static void draw_frontier(struct dp_svg *s, const struct dp_viz_scatter *c,
                          const struct dp_viz_scale *xs, const struct dp_viz_scale *ys,
                          struct dp_err *err, int *rc)
{
    if (c->npt < 2)
        return;
    struct dp_viz_point *p = malloc(c->npt * sizeof *p);
    if (!p) {
        *rc = dp_err_set(err, DP_ENOMEM, "scatter: out of memory for %zu points", c->npt);
        return;
    }
    memcpy(p, c->pt, c->npt * sizeof *p);
    qsort(p, c->npt, sizeof *p, pt_x_cmp);
    struct dp_buf d = {0};
    double best = INFINITY; /* the staircase ends at the last improvement */
    for (size_t i = 0; i < c->npt; i++) {
        if (p[i].y >= best)
            continue;
        double px = dp_viz_map(xs, p[i].x), py = dp_viz_map(ys, p[i].y);
        if (best == INFINITY) {
            dp_svg_path_point(&d, 'M', px, py);
        } else {
            dp_svg_path_point(&d, 'L', px, dp_viz_map(ys, best));
            dp_svg_path_point(&d, 'L', px, py);
        }
        best = p[i].y;
    }
    if (d.failed)
        *rc = dp_err_set(err, DP_ENOMEM, "scatter: out of memory for the frontier");
    else if (d.len)
        dp_svg_path(s, d.data, NULL, FRONT_COLOR, 1.3, NULL);
    dp_buf_release(&d);
    free(p);
}

struct box {
    double x0, y0, x1, y1;
};

static bool overlaps(const struct box *a, const struct box *b)
{
    return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1;
}

/*
 * Tags ("#1", "#2") next to their marks, in rank order, each at the first of a
 * ring of candidate offsets (then a wider ring) where its box overlaps neither
 * a tag already placed nor another mark and stays inside the plot; the first
 * candidate when none is free.
 */
static void place_tags(struct dp_svg *s, const struct dp_viz_scatter *c,
                       const struct dp_viz_frame *f, const double *mx, const double *my)
{
    static const double dir[8][2] = {{1, -1}, {1, 1}, {-1, -1}, {-1, 1},
                                     {0, -1}, {0, 1}, {1, 0},   {-1, 0}};
    struct box placed[16], marks[16];
    for (int k = 0; k < c->nmark; k++)
        marks[k] = (struct box){mx[k] - 6, my[k] - 6, mx[k] + 6, my[k] + 6};
    for (int k = 0; k < c->nmark; k++) {
        const struct dp_viz_mark *m = &c->mark[k];
        double tw = dp_svg_text_width(m->tag, 11) + 2, th = 12;
        struct box best = {0};
        double bx = 0, by = 0;
        bool found = false;
        for (int ring = 1; ring <= 3 && !found; ring++)
            for (int d = 0; d < 8 && !found; d++) {
                double r = 8.0 * ring;
                double cx = mx[k] + dir[d][0] * r, cy = my[k] + dir[d][1] * r;
                /* box of the tag whose anchor side faces the mark */
                double x0 = dir[d][0] > 0 ? cx : dir[d][0] < 0 ? cx - tw : cx - tw / 2;
                double y0 = dir[d][1] > 0 ? cy : dir[d][1] < 0 ? cy - th : cy - th / 2;
                struct box b = {x0, y0, x0 + tw, y0 + th};
                bool ok =
                    b.x0 >= f->x && b.x1 <= f->x + f->w && b.y0 >= f->y && b.y1 <= f->y + f->h;
                for (int j = 0; j < k && ok; j++)
                    ok = !overlaps(&b, &placed[j]);
                for (int j = 0; j < c->nmark && ok; j++)
                    ok = j == k || !overlaps(&b, &marks[j]);
                if (ok || (ring == 1 && d == 0)) {
                    best = b;
                    bx = x0;
                    by = y0 + th - 2;
                    found = ok;
                }
            }
        placed[k] = best;
        dp_svg_text(s, bx + 1, by, DP_SVG_START, 11, m->primary ? MARK_COLOR : RING_COLOR, true, 0,
                    m->tag);
    }
}

static void draw_mark(struct dp_svg *s, double x, double y, bool primary)
{
    if (primary)
        dp_svg_circle(s, x, y, 6.5, MARK_COLOR, "#ffffff", 1.5);
    else
        dp_svg_circle(s, x, y, 5.5, "none", RING_COLOR, 1.6);
}

int dp_viz_scatter(const struct dp_viz_scatter *c, struct dp_buf *out, struct dp_err *err)
{
    if (c->ngroups < 1 || c->ngroups > DP_VIZ_MAX_SERIES || c->nmark < 0 || c->nmark > 16)
        return dp_err_set(err, DP_EINVAL, "scatter: %d groups, %d marks", c->ngroups, c->nmark);
    const double left = 84, plot_w = 640, plot_h = 390, right = 28;
    const double W = left + plot_w + right;
    const double extra = 17.0 * (dp_viz_title_lines(c->subtitle, W) - 1), top = 84 + extra;
    const double list_top = top + plot_h + 56;
    const double H = list_top + 16.0 * c->nmark + (c->note ? 22 : 0) + 10;
    struct dp_viz_frame f = {left, top, plot_w, plot_h};

    double xlo, xhi, ylo, yhi;
    data_range(c, true, &xlo, &xhi);
    data_range(c, false, &ylo, &yhi);
    double xt[32], xstep = 0, ylin[32], ystep = 0, a, b;
    struct dp_viz_scale xs;
    int nxt;
    if (c->x_log && xlo > 0) {
        nxt = log_axis(xlo / 1.15, xhi * 1.15, f.x, f.x + f.w, 7, xt, &xstep, &xs);
    } else {
        /* Pad the low end; the high end is the limit line when there is one (no point lies
         * beyond it). */
        double pad = (xhi - xlo) * 0.04;
        nxt = dp_viz_ticks(xlo - pad, c->x_limit > 0 ? xhi : xhi + pad, 7, xt, 32, &xstep, &a, &b);
        xs = (struct dp_viz_scale){a, b, f.x, f.x + f.w, false};
    }
    struct dp_viz_scale ys;
    int nyt;
    if (c->y_log && ylo > 0) {
        nyt = log_axis(ylo / 1.12, yhi * 1.08, f.y + f.h, f.y, 6, ylin, &ystep, &ys);
    } else {
        double p = (yhi - ylo) * 0.05, lo = ylo - p;
        if (lo < 0 && ylo >= 0)
            lo = 0;
        nyt = dp_viz_ticks(lo, yhi + p, 6, ylin, 32, &ystep, &a, &b);
        ys = (struct dp_viz_scale){a, b, f.y + f.h, f.y, false};
    }

    struct dp_svg s;
    dp_svg_begin(&s, out, W, H, c->title);
    dp_viz_title(&s, c->title, c->subtitle);
    const char *colors[DP_VIZ_MAX_SERIES];
    for (int j = 0; j < c->ngroups; j++)
        colors[j] = dp_viz_color(j);
    const double ly = 68 + extra;
    double lx = dp_viz_legend(&s, left, ly, c->group, colors, c->ngroups, true);
    const char *primary = c->mark_label[0] ? c->mark_label[0] : "chosen";
    const char *others = c->mark_label[1] ? c->mark_label[1] : "runners-up";
    if (c->nmark > 0) {
        draw_mark(&s, lx + 5.5, ly - 4, true);
        dp_svg_text(&s, lx + 16, ly, DP_SVG_START, 12, TEXT_COLOR, false, 0, primary);
        lx += 16 + dp_svg_text_width(primary, 12) + 18;
    }
    if (c->nmark > 1) {
        draw_mark(&s, lx + 5.5, ly - 4, false);
        dp_svg_text(&s, lx + 16, ly, DP_SVG_START, 12, TEXT_COLOR, false, 0, others);
        lx += 16 + dp_svg_text_width(others, 12) + 18;
    }
    if (c->frontier && c->frontier_label) {
        dp_svg_line(&s, lx, ly - 4, lx + 18, ly - 4, FRONT_COLOR, 1.3, NULL);
        dp_svg_text(&s, lx + 24, ly, DP_SVG_START, 12, TEXT_COLOR, false, 0, c->frontier_label);
    }

    dp_viz_axis_left(&s, &f, &ys, ylin, nyt, ystep, false, c->y_label);
    dp_viz_axis_bottom(&s, &f, &xs, xt, nxt, xstep, false, c->x_label);
    for (int i = 0; i < c->ny_ref; i++) {
        double y = dp_viz_map(&ys, c->y_ref[i]);
        dp_svg_line(&s, f.x, y, f.x + f.w, y, FRONT_COLOR, 1.2, "5 4");
        if (c->y_ref_label && c->y_ref_label[i])
            dp_svg_text(&s, f.x + f.w - 4, y - 4, DP_SVG_END, 11, FRONT_COLOR, false, 0,
                        c->y_ref_label[i]);
    }
    int rc = 0;
    draw_points(&s, c, &xs, &ys, err, &rc);
    if (c->frontier && !rc)
        draw_frontier(&s, c, &xs, &ys, err, &rc);
    if (c->x_limit > 0) {
        double x = dp_viz_map(&xs, c->x_limit);
        dp_svg_line(&s, x, f.y, x, f.y + f.h, MARK_COLOR, 1.5, "6 4");
        if (c->x_limit_label)
            dp_svg_text(&s, x - 5, f.y + 14, DP_SVG_END, 11, MARK_COLOR, false, 0,
                        c->x_limit_label);
    }
    /* Runners-up under the chosen one. */
    double mx[16], my[16];
    for (int k = c->nmark - 1; k >= 0; k--) {
        mx[k] = dp_viz_map(&xs, c->mark[k].x);
        my[k] = dp_viz_map(&ys, c->mark[k].y);
        draw_mark(&s, mx[k], my[k], c->mark[k].primary);
    }
    place_tags(&s, c, &f, mx, my);
    for (int k = 0; k < c->nmark; k++) {
        double y = list_top + 16.0 * k;
        draw_mark(&s, left + 6, y - 4, c->mark[k].primary);
        dp_svg_text(&s, left + 18, y, DP_SVG_START, 11, TEXT_COLOR, false, 0, c->mark[k].text);
    }
    if (c->note)
        dp_svg_text(&s, left, list_top + 16.0 * c->nmark + 12, DP_SVG_START, 11, "#666666", false,
                    0, c->note);
    dp_svg_end(&s);
    if (rc)
        return rc;
    if (out->failed)
        return dp_err_set(err, DP_ENOMEM, "out of memory while drawing the chart");
    return 0;
}
