/*
 * viz/: tick values, number formats, escaping, scales, and the geometry of
 * the charts, against values worked out by hand from the layout constants of
 * viz/bars.c and viz/scatter.c. (That the files are well-formed XML and
 * render is checked by tests/scripts/svg_check.sh with xmllint and
 * rsvg-convert on the golden SVGs.)
 */
#include "check.h"
#include "viz/viz.h"

#include <stdlib.h>

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_ticks(void)
{
    double t[32], step, lo, hi;
    /* 0 .. 83.9 in about 6 steps: 13.98 -> 1.398 x 10 -> Heckbert rounds to 1 -> step 10 */
    int n = dp_viz_ticks(0, 83.9, 6, t, 32, &step, &lo, &hi);
    CHECK_NEAR(step, 10, 1e-12);
    CHECK_EQ(n, 10); /* 0, 10, ..., 90 */
    CHECK_NEAR(hi, 90, 1e-12);
    CHECK_NEAR(t[3], 30, 1e-12);
    /* 0.12 .. 0.57 in 5: 0.09 -> 0.9 x 0.1 rounds to 1 x 0.1 -> 0.1 .. 0.6 */
    n = dp_viz_ticks(0.12, 0.57, 5, t, 32, &step, &lo, &hi);
    CHECK_NEAR(step, 0.1, 1e-12);
    CHECK_NEAR(lo, 0.1, 1e-9);
    CHECK_NEAR(hi, 0.6, 1e-9);
    CHECK_EQ(n, 6);
    /* log ticks 95 .. 1600: 100, 200, 500, 1000 */
    n = dp_viz_log_ticks(95, 1600, t, 32);
    CHECK_EQ(n, 4);
    CHECK_NEAR(t[0], 100, 1e-12);
    CHECK_NEAR(t[3], 1000, 1e-12);
    /* more than four decades: powers of ten only, 1e3 .. 1e8 */
    n = dp_viz_log_ticks(1e3, 1e8, t, 32);
    CHECK_EQ(n, 6);
}

static void test_formats(void)
{
    char buf[32];
    dp_viz_fmt_si(1234567, buf, sizeof buf);
    CHECK_STR(buf, "1.23M");
    dp_viz_fmt_si(26630, buf, sizeof buf);
    CHECK_STR(buf, "26.6k");
    dp_viz_fmt_si(950, buf, sizeof buf);
    CHECK_STR(buf, "950");
    dp_viz_fmt_si(1.5e13, buf, sizeof buf);
    CHECK_STR(buf, "15T");
    dp_viz_fmt_si(2e6, buf, sizeof buf);
    CHECK_STR(buf, "2M");
    dp_viz_fmt_si(0, buf, sizeof buf);
    CHECK_STR(buf, "0");
    dp_viz_fmt_tick(0.5, 0.1, buf, sizeof buf);
    CHECK_STR(buf, "0.5");
    dp_viz_fmt_tick(20, 10, buf, sizeof buf);
    CHECK_STR(buf, "20");
    dp_viz_fmt_tick(-0.0001, 0.1, buf, sizeof buf);
    CHECK_STR(buf, "0.0");

    struct dp_buf b = {0};
    dp_svg_escape(&b, "a<b & \"c\" 'd'>");
    CHECK_STR(b.data, "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
    dp_buf_release(&b);
}

static void test_scales(void)
{
    struct dp_viz_scale lin = {0, 100, 400, 100, false};
    CHECK_NEAR(dp_viz_map(&lin, 25), 325, 1e-12); /* a quarter of 300 px up from 400 */
    struct dp_viz_scale lg = {10, 1000, 0, 200, true};
    CHECK_NEAR(dp_viz_map(&lg, 100), 100, 1e-12); /* one of two decades */
}

static void test_stacked_geometry(void)
{
    /* Two bars: (10, 20) and (30, 0), limit 50. The y axis runs to hi = 60 (ticks of 0 ..
     * 53 by 10); the plot is 470 - 84 - 70 = 316 px tall (one subtitle line), so 10 GiB is
     * 316 / 6 = 52.67 px, 20 GiB 105.3 px, 30 GiB 158 px; the limit line sits 316 x 50/60 =
     * 263.3 px above the axis at y = 400: y = 136.7. */
    static const char *const cat[] = {"0 (4L)", "1 (4L)"};
    static const char *const series[] = {"a", "b"};
    static const double v[] = {10, 20, 30, 0};
    struct dp_viz_stack c = {.title = "t",
                             .subtitle = "s",
                             .y_label = "GiB",
                             .ncat = 2,
                             .nseries = 2,
                             .cat = cat,
                             .series = series,
                             .v = v,
                             .limit = 50,
                             .limit_label = "limit",
                             .over_label = "OOM"};
    struct dp_buf b = {0};
    struct dp_err err = {0};
    CHECK_EQ(dp_viz_stacked_bars(&c, &b, &err), 0);
    CHECK(count(b.data, "height=\"52.7\"") == 1);
    CHECK(count(b.data, "height=\"105.3\"") == 1);
    CHECK(count(b.data, "height=\"158.0\"") == 1);
    CHECK(count(b.data, "<line x1=\"84.0\" y1=\"136.7\" x2=\"724.0\" y2=\"136.7\" "
                        "stroke=\"#c0392b\"") == 1); /* the dashed limit across the plot */
    CHECK(count(b.data, "OOM") == 0);                /* 30 GiB < 50 */
    CHECK(strncmp(b.data, "<?xml", 5) == 0);
    CHECK(strcmp(b.data + b.len - 7, "</svg>\n") == 0);
    dp_buf_release(&b);
}

static void test_scatter_thinning(void)
{
    /* 10000 copies of one point draw one circle; a second group at another place adds one,
     * plus the two marks (each a circle in the plot and one in the list). */
    size_t n = 10001;
    struct dp_viz_point *pt = malloc(n * sizeof *pt);
    for (size_t i = 0; i < n - 1; i++)
        pt[i] = (struct dp_viz_point){50, 10, 0};
    pt[n - 1] = (struct dp_viz_point){70, 20, 1};
    static const char *const groups[] = {"g0", "g1"};
    struct dp_viz_mark marks[2] = {{.x = 50, .y = 10, .tag = "#1", .text = "one", .primary = true},
                                   {.x = 70, .y = 20, .tag = "#2", .text = "two"}};
    struct dp_viz_scatter c = {.title = "t",
                               .x_label = "x",
                               .y_label = "y",
                               .y_log = true,
                               .ngroups = 2,
                               .group = groups,
                               .pt = pt,
                               .npt = n,
                               .mark = marks,
                               .nmark = 2,
                               .x_limit = 80,
                               .frontier = false};
    struct dp_buf b = {0};
    struct dp_err err = {0};
    CHECK_EQ(dp_viz_scatter(&c, &b, &err), 0);
    /* circles: 2 data + 2 marks + 2 list symbols + 2 legend (group dots) + 2 legend marks */
    CHECK_EQ(count(b.data, "<circle"), 10);
    CHECK_EQ(count(b.data, "<g fill="), 2);
    dp_buf_release(&b);
    free(pt);
}

/* The validation picture's options: a log x axis over 1 .. 100 puts 10 in the middle of the
 * 640 px plot (x = 84 + 320 = 404 px, the axis padded by 1.15 each way, so exactly the
 * middle); three dashed reference lines across the plot, two labelled; the legend's mark
 * words replaced. */
static void test_scatter_refs(void)
{
    struct dp_viz_point pt[3] = {{1, -5, 0}, {10, 0, 1}, {100, 5, 1}};
    static const char *const groups[] = {"held out", "fitted"};
    static const double refs[3] = {15, 0, -15};
    static const char *const labels[3] = {"+15%", NULL, "-15%"};
    struct dp_viz_mark mark = {.x = 1, .y = -5, .tag = "#1", .text = "worst", .primary = true};
    struct dp_viz_scatter c = {.title = "t",
                               .x_label = "x",
                               .y_label = "y",
                               .x_log = true,
                               .ngroups = 2,
                               .group = groups,
                               .pt = pt,
                               .npt = 3,
                               .mark = &mark,
                               .nmark = 1,
                               .y_ref = refs,
                               .y_ref_label = labels,
                               .ny_ref = 3,
                               .mark_label = {"worst held out", "next"}};
    struct dp_buf b = {0};
    struct dp_err err = {0};
    CHECK_EQ(dp_viz_scatter(&c, &b, &err), 0);
    CHECK_EQ(count(b.data, "stroke-dasharray=\"5 4\""), 3);
    CHECK_EQ(count(b.data, ">+15%<"), 1);
    CHECK_EQ(count(b.data, ">-15%<"), 1);
    CHECK_EQ(count(b.data, ">worst held out<"), 1);
    CHECK_EQ(count(b.data, ">chosen<"), 0);
    CHECK(count(b.data, "<circle cx=\"404.0\"") >= 1); /* the point at x = 10 */
    dp_buf_release(&b);
}

int main(void)
{
    test_ticks();
    test_formats();
    test_scales();
    test_stacked_geometry();
    test_scatter_thinning();
    test_scatter_refs();
    return check_failures ? 1 : 0;
}
