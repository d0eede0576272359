/*
 * Axes: data-to-pixel scales, "nice" tick values, tick labels, and the
 * furniture every chart shares (axis lines, grid, legend, title).
 *
 * Tick steps are 1, 2 or 5 x 10^k, the sequence Heckbert's "Nice numbers for
 * graph labels" (Graphics Gems, 1990) uses, so labels read as round numbers.
 */
#include "viz.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define AXIS_COLOR    "#444444"
#define GRID_COLOR    "#e4e4e4"
#define LABEL_COLOR   "#333333"
#define TICK_FONT     11.0
#define LABEL_FONT    12.0
#define SUBTITLE_FONT 12.0

double dp_viz_map(const struct dp_viz_scale *sc, double v)
{
    double a = sc->d0, b = sc->d1;
    if (sc->log) {
        /* Callers keep log-axis data positive; clamp anything else onto the axis. */
        a = log10(a > 0 ? a : 1e-300);
        b = log10(b > 0 ? b : 1e-300);
        v = log10(v > 0 ? v : 1e-300);
    }
    if (b == a)
        return sc->p0;
    return sc->p0 + (v - a) / (b - a) * (sc->p1 - sc->p0);
}

static double nice_step(double raw)
{
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    /* Heckbert's rounding rule: the nearest of 1, 2, 5, 10 on a log-ish scale. */
    double nice = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    return nice * mag;
}

int dp_viz_ticks(double lo, double hi, int target, double *ticks, int cap, double *step,
                 double *lo_out, double *hi_out)
{
    if (!(hi > lo))
        hi = lo + (lo != 0 ? fabs(lo) * 0.1 : 1.0);
    if (target < 1)
        target = 1;
    double st = nice_step((hi - lo) / target);
    /* Whole multiples of the step, with a little slack for values that are multiples
     * already but carry rounding error (0.30000000000000004). */
    double k0 = floor(lo / st + 1e-9), k1 = ceil(hi / st - 1e-9);
    int n = 0;
    for (double k = k0; k <= k1 && n < cap; k++)
        ticks[n++] = k * st;
    *step = st;
    *lo_out = k0 * st;
    *hi_out = k1 * st;
    return n;
}

int dp_viz_log_ticks(double lo, double hi, double *ticks, int cap)
{
    static const double mant[3] = {1, 2, 5};
    int n = 0;
    if (!(lo > 0) || !(hi > lo))
        return 0;
    int e0 = (int)floor(log10(lo)), e1 = (int)ceil(log10(hi));
    bool dense = e1 - e0 > 4; /* many decades: powers of ten only */
    for (int e = e0; e <= e1; e++)
        for (int i = 0; i < (dense ? 1 : 3); i++) {
            double t = mant[i] * pow(10.0, e);
            if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9) && n < cap)
                ticks[n++] = t;
        }
    return n;
}

void dp_viz_fmt_tick(double v, double step, char *buf, size_t cap)
{
    int dec = 0;
    if (step > 0 && step < 1)
        dec = (int)ceil(-log10(step) - 1e-9);
    if (dec > 6)
        dec = 6;
    snprintf(buf, cap, "%.*f", dec, v);
    if (strspn(buf, "-0.") == strlen(buf) && buf[0] == '-')
        memmove(buf, buf + 1, strlen(buf)); /* "-0.0" -> "0.0" */
}

void dp_viz_fmt_si(double v, char *buf, size_t cap)
{
    static const struct {
        double unit;
        const char *suffix;
    } units[] = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    double a = fabs(v);
    const char *suffix = "";
    double x = v;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (a >= units[i].unit * 0.9995) {
            x = v / units[i].unit;
            suffix = units[i].suffix;
            break;
        }
    double ax = fabs(x);
    int dec = ax >= 99.95 ? 0 : ax >= 9.995 ? 1 : 2;
    if (!suffix[0] && a >= 1 && ax == floor(ax))
        dec = 0;
    char num[32];
    snprintf(num, sizeof num, "%.*f", dec, x);
    if (strchr(num, '.')) { /* 1.50 -> 1.5, 2.00 -> 2 */
        size_t len = strlen(num);
        while (num[len - 1] == '0')
            num[--len] = '\0';
        if (num[len - 1] == '.')
            num[--len] = '\0';
    }
    if (strcmp(num, "-0") == 0)
        snprintf(num, sizeof num, "0");
    snprintf(buf, cap, "%s%s", num, suffix);
}

static void tick_label(double t, double step, bool si, char *buf, size_t cap)
{
    if (si)
        dp_viz_fmt_si(t, buf, cap);
    else
        dp_viz_fmt_tick(t, step, buf, cap);
}

void dp_viz_axis_left(struct dp_svg *s, const struct dp_viz_frame *f, const struct dp_viz_scale *sc,
                      const double *ticks, int n, double step, bool si, const char *label)
{
    double maxw = 0;
    char buf[48];
    for (int i = 0; i < n; i++) {
        double y = dp_viz_map(sc, ticks[i]);
        if (y < f->y - 0.5 || y > f->y + f->h + 0.5)
            continue;
        tick_label(ticks[i], step, si, buf, sizeof buf);
        double w = dp_svg_text_width(buf, TICK_FONT);
        if (w > maxw)
            maxw = w;
        dp_svg_line(s, f->x, y, f->x + f->w, y, GRID_COLOR, 1, NULL);
        dp_svg_line(s, f->x - 4, y, f->x, y, AXIS_COLOR, 1, NULL);
        dp_svg_text(s, f->x - 7, y + 4, DP_SVG_END, TICK_FONT, LABEL_COLOR, false, 0, buf);
    }
    dp_svg_line(s, f->x, f->y, f->x, f->y + f->h, AXIS_COLOR, 1, NULL);
    if (label && label[0])
        dp_svg_text(s, f->x - 12 - maxw - 6, f->y + f->h / 2, DP_SVG_MIDDLE, LABEL_FONT,
                    LABEL_COLOR, false, -90, label);
}

void dp_viz_axis_bottom(struct dp_svg *s, const struct dp_viz_frame *f,
                        const struct dp_viz_scale *sc, const double *ticks, int n, double step,
                        bool si, const char *label)
{
    char buf[48];
    double yb = f->y + f->h;
    for (int i = 0; i < n; i++) {
        double x = dp_viz_map(sc, ticks[i]);
        if (x < f->x - 0.5 || x > f->x + f->w + 0.5)
            continue;
        tick_label(ticks[i], step, si, buf, sizeof buf);
        dp_svg_line(s, x, f->y, x, yb, GRID_COLOR, 1, NULL);
        dp_svg_line(s, x, yb, x, yb + 4, AXIS_COLOR, 1, NULL);
        dp_svg_text(s, x, yb + 17, DP_SVG_MIDDLE, TICK_FONT, LABEL_COLOR, false, 0, buf);
    }
    dp_svg_line(s, f->x, yb, f->x + f->w, yb, AXIS_COLOR, 1, NULL);
    if (label && label[0])
        dp_svg_text(s, f->x + f->w / 2, yb + 36, DP_SVG_MIDDLE, LABEL_FONT, LABEL_COLOR, false, 0,
                    label);
}

double dp_viz_legend(struct dp_svg *s, double x, double y, const char *const *names,
                     const char *const *colors, int n, bool dots)
{
    for (int i = 0; i < n; i++) {
        if (dots)
            dp_svg_circle(s, x + 5.5, y - 4, 4.5, colors[i], NULL, 0);
        else
            dp_svg_rect(s, x, y - 10, 11, 11, colors[i], NULL);
        dp_svg_text(s, x + 16, y, DP_SVG_START, LABEL_FONT, LABEL_COLOR, false, 0, names[i]);
        x += 16 + dp_svg_text_width(names[i], LABEL_FONT) + 18;
    }
    return x;
}

/*
 * The subtitle's lines: split at '\n' (at most DP_VIZ_SUBTITLE_LINES), and a line
 * too wide for the canvas broken once more at the best "; " (else ", ", else
 * " "): the break after which both parts fit, the first part as long as
 * possible. Returns the count; line i is sub[off[i] .. off[i] + len[i]).
 */
#define SUB_MAX 4
static int subtitle_lines(const char *sub, double w, size_t *off, size_t *len)
{
    double room = w - 32;
    int n = 0;
    size_t i = 0, total = strlen(sub);
    while (i <= total && n < SUB_MAX) {
        const char *nl = strchr(sub + i, '\n');
        size_t l = nl ? (size_t)(nl - (sub + i)) : total - i;
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)l, sub + i);
        size_t cut = 0;
        if (dp_svg_text_width(line, SUBTITLE_FONT) > room && n < SUB_MAX - 1) {
            static const char *const seps[] = {"; ", ", ", " "};
            for (size_t k = 0; k < 3 && !cut; k++)
                for (const char *p = strstr(line, seps[k]); p; p = strstr(p + 1, seps[k])) {
                    size_t c = (size_t)(p - line);
                    char a[512];
                    snprintf(a, sizeof a, "%.*s", (int)(c + 1), line); /* keeps ';' or ',' */
                    if (dp_svg_text_width(a, SUBTITLE_FONT) <= room &&
                        dp_svg_text_width(line + c + strlen(seps[k]), SUBTITLE_FONT) <= room)
                        cut = c + strlen(seps[k]);
                }
        }
        if (cut) {
            off[n] = i;
            len[n++] = cut - 1; /* drop the space after the separator */
            while (len[n - 1] && sub[i + len[n - 1] - 1] == ' ')
                len[n - 1]--;
            off[n] = i + cut;
            len[n++] = l - cut;
        } else {
            off[n] = i;
            len[n++] = l;
        }
        if (!nl)
            break;
        i += l + 1;
    }
    return n;
}

int dp_viz_title_lines(const char *subtitle, double w)
{
    size_t off[SUB_MAX], len[SUB_MAX];
    return subtitle && subtitle[0] ? subtitle_lines(subtitle, w, off, len) : 1;
}

void dp_viz_title(struct dp_svg *s, const char *title, const char *subtitle)
{
    if (title && title[0])
        dp_svg_text(s, 16, 26, DP_SVG_START, 16, "#111111", true, 0, title);
    if (!subtitle || !subtitle[0])
        return;
    size_t off[SUB_MAX], len[SUB_MAX];
    int n = subtitle_lines(subtitle, s->w, off, len);
    for (int i = 0; i < n; i++) {
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)len[i], subtitle + off[i]);
        dp_svg_text(s, 16, 45 + 17.0 * i, DP_SVG_START, SUBTITLE_FONT, "#555555", false, 0, line);
    }
}
