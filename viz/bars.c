/*
 * Bar charts: stacked bars against a limit (memory per pipeline stage
 * against the GPU's usable memory) and grouped bars in panels (the whatif
 * sweep: one bar per system within each size, one panel per measure).
 */
#include "viz.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define OVER_COLOR "#c0392b"
#define TEXT_COLOR "#333333"

static int finish(struct dp_buf *out, struct dp_err *err)
{
    if (out->failed)
        return dp_err_set(err, DP_ENOMEM, "out of memory while drawing the chart");
    return 0;
}

int dp_viz_stacked_bars(const struct dp_viz_stack *c, struct dp_buf *out, struct dp_err *err)
{
    if (c->ncat < 1 || c->nseries < 1 || c->nseries > DP_VIZ_MAX_SERIES)
        return dp_err_set(err, DP_EINVAL, "stacked bars: %d categories, %d series", c->ncat,
                          c->nseries);
    /* Slots shrink as stages multiply; past 32 bars only every k-th is labelled. */
    double slot = c->ncat <= 8 ? 88 : c->ncat <= 16 ? 56 : c->ncat <= 32 ? 34 : 14;
    double plot_w = c->ncat * slot;
    if (plot_w < 640)
        plot_w = 640, slot = plot_w / c->ncat;
    const double left = 84, right = 28, bottom = 70;
    const double W = left + plot_w + right;
    const double extra = 17.0 * (dp_viz_title_lines(c->subtitle, W) - 1);
    const double top = 84 + extra, H = 470 + extra;
    struct dp_viz_frame f = {left, top, plot_w, H - top - bottom};

    double vmax = c->limit > 0 ? c->limit : 0;
    for (int i = 0; i < c->ncat; i++) {
        double t = 0;
        for (int j = 0; j < c->nseries; j++)
            t += c->v[i * c->nseries + j] > 0 ? c->v[i * c->nseries + j] : 0;
        if (t > vmax)
            vmax = t;
    }
    double ticks[32], step, lo, hi;
    int nt = dp_viz_ticks(0, vmax * 1.06, 6, ticks, 32, &step, &lo, &hi);
    struct dp_viz_scale ys = {0, hi, f.y + f.h, f.y, false};

    struct dp_svg s;
    dp_svg_begin(&s, out, W, H, c->title);
    dp_viz_title(&s, c->title, c->subtitle);
    const char *colors[DP_VIZ_MAX_SERIES];
    for (int j = 0; j < c->nseries; j++)
        colors[j] = dp_viz_color(j);
    double lx = dp_viz_legend(&s, left, 68 + extra, c->series, colors, c->nseries, false);
    if (c->limit > 0 && c->limit_label) {
        /* The limit is named in the legend, where no bar label can cover it. */
        dp_svg_line(&s, lx, 64 + extra, lx + 22, 64 + extra, OVER_COLOR, 1.5, "6 4");
        dp_svg_text(&s, lx + 28, 68 + extra, DP_SVG_START, 12, OVER_COLOR, false, 0,
                    c->limit_label);
    }
    dp_viz_axis_left(&s, &f, &ys, ticks, nt, step, false, c->y_label);

    int label_every = 1;
    while (slot * label_every < 30)
        label_every++;
    /* One orientation for all category labels: upright unless the widest does not fit. */
    bool slanted = false;
    for (int i = 0; i < c->ncat; i += label_every)
        if (dp_svg_text_width(c->cat[i], 11) > slot * label_every - 4)
            slanted = true;
    double bw = slot * 0.64 < 90 ? slot * 0.64 : 90;
    for (int i = 0; i < c->ncat; i++) {
        double x = f.x + slot * i + (slot - bw) / 2, base = 0;
        for (int j = 0; j < c->nseries; j++) {
            double v = c->v[i * c->nseries + j];
            if (!(v > 0))
                continue;
            double y0 = dp_viz_map(&ys, base), y1 = dp_viz_map(&ys, base + v);
            dp_svg_rect(&s, x, y1, bw, y0 - y1, colors[j], c->ncat <= 32 ? "#ffffff" : NULL);
            base += v;
        }
        bool over = c->limit > 0 && base > c->limit;
        if (c->ncat <= 32 || over) {
            char buf[48];
            dp_viz_fmt_tick(base, 0.1, buf, sizeof buf);
            if (over && c->over_label)
                snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " %s", c->over_label);
            dp_svg_text(&s, x + bw / 2, dp_viz_map(&ys, base) - 5, DP_SVG_MIDDLE,
                        c->ncat <= 16 ? 11 : 9, over ? OVER_COLOR : TEXT_COLOR, over, 0, buf);
        }
        if (i % label_every == 0) {
            double cx = x + bw / 2, yb = f.y + f.h;
            if (slanted)
                dp_svg_text(&s, cx + 3, yb + 14, DP_SVG_END, 11, TEXT_COLOR, false, -35, c->cat[i]);
            else
                dp_svg_text(&s, cx, yb + 17, DP_SVG_MIDDLE, 11, TEXT_COLOR, false, 0, c->cat[i]);
        }
    }
    dp_svg_line(&s, f.x, f.y + f.h, f.x + f.w, f.y + f.h, "#444444", 1, NULL);
    if (c->limit > 0) {
        double y = dp_viz_map(&ys, c->limit);
        dp_svg_line(&s, f.x, y, f.x + f.w, y, OVER_COLOR, 1.5, "6 4");
    }
    if (c->x_label)
        dp_svg_text(&s, f.x + f.w / 2, H - 18, DP_SVG_MIDDLE, 12, TEXT_COLOR, false, 0, c->x_label);
    dp_svg_end(&s);
    return finish(out, err);
}

int dp_viz_grouped_bars(const struct dp_viz_grouped *c, struct dp_buf *out, struct dp_err *err)
{
    if (c->ncat < 1 || c->nseries < 1 || c->nseries > DP_VIZ_MAX_SERIES || c->npanel < 1 ||
        c->npanel > DP_VIZ_MAX_PANELS)
        return dp_err_set(err, DP_EINVAL, "grouped bars: %d categories, %d series, %d panels",
                          c->ncat, c->nseries, c->npanel);
    /* Bars widen to fill a 520 px plot when there are few, between 14 and 40 px. */
    const double gap = 28;
    double bw = (520 - c->ncat * gap) / (c->ncat * c->nseries);
    bw = bw > 40 ? 40 : bw < 14 ? 14 : bw;
    const double group_w = c->nseries * bw + gap;
    double plot_w = c->ncat * group_w;
    if (plot_w < 520)
        plot_w = 520;
    const double left = 92, right = 24, panel_h = 210, panel_gap = 40, bottom = 58;
    const double W = left + plot_w + right;
    const double extra = 17.0 * (dp_viz_title_lines(c->subtitle, W) - 1), top = 84 + extra;
    const double H = top + c->npanel * panel_h + (c->npanel - 1) * panel_gap + bottom;
    const double pad = (plot_w - c->ncat * group_w) / 2; /* centre the groups */

    struct dp_svg s;
    dp_svg_begin(&s, out, W, H, c->title);
    dp_viz_title(&s, c->title, c->subtitle);
    const char *colors[DP_VIZ_MAX_SERIES];
    for (int j = 0; j < c->nseries; j++)
        colors[j] = dp_viz_color(j);
    dp_viz_legend(&s, left, 68 + extra, c->series, colors, c->nseries, false);

    for (int p = 0; p < c->npanel; p++) {
        struct dp_viz_frame f = {left, top + p * (panel_h + panel_gap), plot_w, panel_h};
        const double *v = c->panel[p].v;
        double vmax = 0, vmin = INFINITY;
        for (int i = 0; i < c->ncat * c->nseries; i++)
            if (!isnan(v[i]) && v[i] > 0) {
                if (v[i] > vmax)
                    vmax = v[i];
                if (v[i] < vmin)
                    vmin = v[i];
            }
        if (vmax <= 0)
            vmax = vmin = 1;
        /* Headroom above the tallest bar for its value label (printed upright): 22% on a
         * linear axis, a factor 3 (about half a decade) on a log one. */
        double ticks[32], step, lo, hi;
        int nt;
        struct dp_viz_scale ys;
        if (c->panel[p].log) {
            /* the largest 1, 2 or 5 x 10^k at or below the smallest bar */
            double e = pow(10.0, floor(log10(vmin)));
            lo = vmin >= 5 * e ? 5 * e : vmin >= 2 * e ? 2 * e : e;
            hi = vmax * 3;
            nt = dp_viz_log_ticks(lo, hi, ticks, 32);
            step = 1;
            ys = (struct dp_viz_scale){lo, hi, f.y + f.h, f.y, true};
        } else {
            nt = dp_viz_ticks(0, vmax * 1.22, 5, ticks, 32, &step, &lo, &hi);
            ys = (struct dp_viz_scale){0, hi, f.y + f.h, f.y, false};
        }
        dp_viz_axis_left(&s, &f, &ys, ticks, nt, step, true, c->panel[p].y_label);
        for (int i = 0; i < c->ncat; i++) {
            double gx = f.x + pad + i * group_w + gap / 2;
            for (int j = 0; j < c->nseries; j++) {
                double x = gx + j * bw, val = v[i * c->nseries + j];
                double yb = f.y + f.h;
                if (isnan(val)) {
                    const char *why = c->panel[p].missing_at
                                          ? c->panel[p].missing_at[i * c->nseries + j]
                                          : c->panel[p].missing;
                    if (why)
                        dp_svg_text(&s, x + bw / 2 + 3, yb - 4, DP_SVG_START, 9, "#888888", false,
                                    -90, why);
                    continue;
                }
                double yt = dp_viz_map(&ys, val);
                dp_svg_rect(&s, x + 1, yt, bw - 2, yb - yt, colors[j], NULL);
                char buf[32];
                dp_viz_fmt_si(val, buf, sizeof buf);
                dp_svg_text(&s, x + bw / 2 + 3, yt - 4, DP_SVG_START, 9, TEXT_COLOR, false, -90,
                            buf);
            }
            if (p == c->npanel - 1)
                dp_svg_text(&s, gx + c->nseries * bw / 2, f.y + f.h + 17, DP_SVG_MIDDLE, 11,
                            TEXT_COLOR, false, 0, c->cat[i]);
        }
        dp_svg_line(&s, f.x, f.y + f.h, f.x + f.w, f.y + f.h, "#444444", 1, NULL);
    }
    if (c->x_label)
        dp_svg_text(&s, left + plot_w / 2, H - 16, DP_SVG_MIDDLE, 12, TEXT_COLOR, false, 0,
                    c->x_label);
    dp_svg_end(&s);
    return finish(out, err);
}
