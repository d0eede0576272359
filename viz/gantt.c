/*
 * The Gantt chart (viz.h): rows of bars along a time axis, the pipeline
 * timeline of `dplan simulate --svg`. Each bar's ends are rounded to 0.1 px
 * before its width is taken, so that bars which touch in time touch on the
 * page and the chart's painted area adds up to the data's busy time to the
 * rounding of its ends (the test of the bubble reads the rects back).
 */
#include "viz.h"

#include <math.h>
#include <stdio.h>

#define TEXT_COLOR "#333333"
#define SPAN_COLOR "#555555"

static double r1(double v)
{
    double x = round(v * 10) / 10;
    return x == 0 ? 0 : x;
}

int dp_viz_gantt(const struct dp_viz_gantt *c, struct dp_buf *out, struct dp_err *err)
{
    if (c->nrows < 1 || c->ncolors < 1 || c->ncolors > DP_VIZ_MAX_SERIES || !(c->x_max > 0))
        return dp_err_set(err, DP_EINVAL, "gantt: %d rows, %d colours, x up to %g", c->nrows,
                          c->ncolors, c->x_max);
    /* Rows shrink as stages multiply, from 34 px (a readable bar) to 6 px (64 stages). */
    const double row_h = c->nrows <= 8 ? 34 : c->nrows <= 16 ? 22 : c->nrows <= 32 ? 12 : 6;
    const double lane_h = row_h >= 22 ? 6 : 0, gap = row_h >= 22 ? 8 : 2;
    const double pitch = row_h + lane_h + gap;
    const double left = 96, right = 28, bottom = 76, W = 1040;
    /* the legend names the colours the bars use, in as many lines as the width needs */
    const char *lname[DP_VIZ_MAX_SERIES], *lcolor[DP_VIZ_MAX_SERIES];
    int nl = 0, lstart[DP_VIZ_MAX_SERIES + 1], nlines = 0;
    double lx = 0;
    for (int k = 0; k < c->ncolors; k++) {
        bool used = false;
        for (size_t i = 0; i < c->nbar && !used; i++)
            used = c->bar[i].color == k;
        if (!used)
            continue;
        double w = 16 + dp_svg_text_width(c->color_name[k], 12) + 18; /* axis.c LABEL_FONT */
        if (nl == 0 || lx + w > W - left - right + 18) {
            lstart[nlines++] = nl;
            lx = 0;
        }
        lx += w;
        lname[nl] = c->color_name[k];
        lcolor[nl++] = c->colors[k];
    }
    lstart[nlines] = nl;
    const double legend_h = 18.0 * (nlines > 1 ? nlines - 1 : 0);
    const double extra = 17.0 * (dp_viz_title_lines(c->subtitle, W) - 1),
                 top = 96 + extra + legend_h;
    const double plot_h = c->nrows * pitch;
    const double H = top + plot_h + bottom + (c->note ? 16 : 0);
    struct dp_viz_frame f = {left, top, W - left - right, plot_h};

    double ticks[32], step, lo, hi;
    int nt = dp_viz_ticks(0, c->x_max, 8, ticks, 32, &step, &lo, &hi);
    /* the axis ends at x_max itself: the step fills the width */
    struct dp_viz_scale xs = {0, c->x_max, f.x, f.x + f.w, false};

    struct dp_svg s;
    dp_svg_begin(&s, out, W, H, c->title);
    dp_viz_title(&s, c->title, c->subtitle);
    for (int i = 0; i < nlines; i++)
        dp_viz_legend(&s, left, 70 + extra + 18.0 * i, lname + lstart[i], lcolor + lstart[i],
                      lstart[i + 1] - lstart[i], false);
    dp_viz_axis_bottom(&s, &f, &xs, ticks, nt, step, false, c->x_label);

    /* row labels, top to bottom */
    for (int i = 0; i < c->nrows; i++) {
        if (c->nrows > 32 && i % 4)
            continue;
        double y = f.y + i * pitch + row_h / 2 + 4;
        dp_svg_text(&s, f.x - 8, y, DP_SVG_END, c->nrows <= 16 ? 11 : 9, TEXT_COLOR, false, 0,
                    c->row[i]);
    }
    if (c->y_label)
        dp_svg_text(&s, 18, f.y + f.h / 2, DP_SVG_MIDDLE, 12, TEXT_COLOR, false, -90, c->y_label);

    for (size_t i = 0; i < c->nbar; i++) {
        const struct dp_viz_bar *b = &c->bar[i];
        if (b->row < 0 || b->row >= c->nrows || !(b->t1 > b->t0))
            continue;
        if (b->lane && lane_h <= 0)
            continue;
        double x0 = r1(dp_viz_map(&xs, b->t0)), x1 = r1(dp_viz_map(&xs, b->t1));
        double y = f.y + b->row * pitch + (b->lane ? row_h : 0), h = b->lane ? lane_h : row_h;
        int col = b->color >= 0 && b->color < c->ncolors ? b->color : 0;
        dp_buf_printf(out,
                      "<rect class=\"%s\" data-row=\"%d\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                      "height=\"%.1f\" fill=\"%s\"/>\n",
                      b->lane ? "lane" : "bar", b->row, x0, r1(y), r1(x1 - x0), r1(h),
                      c->colors[col]);
        char t[16];
        snprintf(t, sizeof t, "%d", b->tag);
        if (b->tag >= 0 && !b->lane && row_h >= 12 && x1 - x0 >= dp_svg_text_width(t, 10) + 4)
            dp_svg_text(&s, (x0 + x1) / 2, y + h / 2 + 3.5, DP_SVG_MIDDLE, 10, "#ffffff", false, 0,
                        t);
    }

    /* the pipeline span: its idle area is the bubble */
    if (c->span1 > c->span0) {
        double a = r1(dp_viz_map(&xs, c->span0)), e = r1(dp_viz_map(&xs, c->span1));
        dp_buf_printf(out, "<g class=\"span\" data-span-x0=\"%.1f\" data-span-x1=\"%.1f\">\n", a,
                      e);
        dp_svg_line(&s, a, f.y - 6, a, f.y + f.h, SPAN_COLOR, 1, "4 3");
        dp_svg_line(&s, e, f.y - 6, e, f.y + f.h, SPAN_COLOR, 1, "4 3");
        dp_buf_puts(out, "</g>\n");
    }
    if (c->note)
        dp_svg_text(&s, f.x, H - 14, DP_SVG_START, 11, TEXT_COLOR, false, 0, c->note);
    dp_svg_end(&s);
    if (out->failed)
        return dp_err_set(err, DP_ENOMEM, "out of memory while drawing the chart");
    return 0;
}
