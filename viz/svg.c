/*
 * The SVG canvas: document frame, XML escaping and the few shapes the charts
 * draw. Coordinates are printed with one decimal (a tenth of a pixel is below
 * what any renderer shows) so that output is byte-for-byte reproducible.
 */
#include "viz.h"

#include <math.h>
#include <string.h>

/* One decimal, never "-0.0". */
static void num(struct dp_buf *b, double v)
{
    double r = round(v * 10.0) / 10.0;
    if (fabs(r) < 0.05)
        r = 0.0;
    dp_buf_printf(b, "%.1f", r);
}

static void attr(struct dp_buf *b, const char *name, double v)
{
    dp_buf_printf(b, " %s=\"", name);
    num(b, v);
    dp_buf_puts(b, "\"");
}

void dp_svg_escape(struct dp_buf *b, const char *text)
{
    for (const char *p = text; *p; p++) {
        switch (*p) {
        case '&': dp_buf_puts(b, "&amp;"); break;
        case '<': dp_buf_puts(b, "&lt;"); break;
        case '>': dp_buf_puts(b, "&gt;"); break;
        case '"': dp_buf_puts(b, "&quot;"); break;
        case '\'': dp_buf_puts(b, "&apos;"); break;
        default:
            /* Control characters other than tab and newline are not allowed in XML 1.0. */
            if ((unsigned char)*p < 0x20 && *p != '\t' && *p != '\n')
                dp_buf_puts(b, "?");
            else
                dp_buf_printf(b, "%c", *p);
        }
    }
}

void dp_svg_begin(struct dp_svg *s, struct dp_buf *b, double w, double h, const char *title)
{
    s->b = b;
    s->w = w;
    s->h = h;
    dp_buf_puts(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    dp_buf_puts(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\"");
    attr(b, "width", w);
    attr(b, "height", h);
    dp_buf_puts(b, " viewBox=\"0 0 ");
    num(b, w);
    dp_buf_puts(b, " ");
    num(b, h);
    dp_buf_puts(b, "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n<title>");
    dp_svg_escape(b, title ? title : "");
    dp_buf_puts(b, "</title>\n");
    dp_svg_rect(s, 0, 0, w, h, "#ffffff", NULL);
}

void dp_svg_end(struct dp_svg *s)
{
    dp_buf_puts(s->b, "</svg>\n");
}

void dp_svg_rect(struct dp_svg *s, double x, double y, double w, double h, const char *fill,
                 const char *stroke)
{
    struct dp_buf *b = s->b;
    dp_buf_puts(b, "<rect");
    attr(b, "x", x);
    attr(b, "y", y);
    attr(b, "width", w > 0 ? w : 0);
    attr(b, "height", h > 0 ? h : 0);
    dp_buf_printf(b, " fill=\"%s\"", fill ? fill : "none");
    if (stroke)
        dp_buf_printf(b, " stroke=\"%s\"", stroke);
    dp_buf_puts(b, "/>\n");
}

void dp_svg_line(struct dp_svg *s, double x1, double y1, double x2, double y2, const char *stroke,
                 double width, const char *dash)
{
    struct dp_buf *b = s->b;
    dp_buf_puts(b, "<line");
    attr(b, "x1", x1);
    attr(b, "y1", y1);
    attr(b, "x2", x2);
    attr(b, "y2", y2);
    dp_buf_printf(b, " stroke=\"%s\"", stroke);
    attr(b, "stroke-width", width);
    if (dash)
        dp_buf_printf(b, " stroke-dasharray=\"%s\"", dash);
    dp_buf_puts(b, "/>\n");
}

void dp_svg_circle(struct dp_svg *s, double cx, double cy, double r, const char *fill,
                   const char *stroke, double stroke_width)
{
    struct dp_buf *b = s->b;
    dp_buf_puts(b, "<circle");
    attr(b, "cx", cx);
    attr(b, "cy", cy);
    attr(b, "r", r);
    if (fill)
        dp_buf_printf(b, " fill=\"%s\"", fill);
    if (stroke) {
        dp_buf_printf(b, " stroke=\"%s\"", stroke);
        attr(b, "stroke-width", stroke_width);
    }
    dp_buf_puts(b, "/>\n");
}

void dp_svg_path(struct dp_svg *s, const char *d, const char *fill, const char *stroke,
                 double width, const char *dash)
{
    struct dp_buf *b = s->b;
    dp_buf_printf(b, "<path d=\"%s\" fill=\"%s\"", d, fill ? fill : "none");
    if (stroke) {
        dp_buf_printf(b, " stroke=\"%s\"", stroke);
        attr(b, "stroke-width", width);
        dp_buf_puts(b, " stroke-linejoin=\"round\"");
    }
    if (dash)
        dp_buf_printf(b, " stroke-dasharray=\"%s\"", dash);
    dp_buf_puts(b, "/>\n");
}

void dp_svg_path_point(struct dp_buf *d, char cmd, double x, double y)
{
    dp_buf_printf(d, "%c", cmd);
    num(d, x);
    dp_buf_puts(d, ",");
    num(d, y);
    dp_buf_puts(d, " ");
}

void dp_svg_group_begin(struct dp_svg *s, const char *fill, double opacity)
{
    dp_buf_printf(s->b, "<g fill=\"%s\"", fill);
    if (opacity < 1)
        attr(s->b, "fill-opacity", opacity);
    dp_buf_puts(s->b, ">\n");
}

void dp_svg_group_end(struct dp_svg *s)
{
    dp_buf_puts(s->b, "</g>\n");
}

void dp_svg_text(struct dp_svg *s, double x, double y, enum dp_svg_anchor a, double size,
                 const char *fill, bool bold, double rotate, const char *text)
{
    static const char *const anchors[] = {"start", "middle", "end"};
    struct dp_buf *b = s->b;
    dp_buf_puts(b, "<text");
    attr(b, "x", x);
    attr(b, "y", y);
    attr(b, "font-size", size);
    if (a != DP_SVG_START)
        dp_buf_printf(b, " text-anchor=\"%s\"", anchors[a]);
    if (fill && strcmp(fill, "#000000") != 0)
        dp_buf_printf(b, " fill=\"%s\"", fill);
    if (bold)
        dp_buf_puts(b, " font-weight=\"bold\"");
    if (rotate != 0) {
        dp_buf_puts(b, " transform=\"rotate(");
        num(b, rotate);
        dp_buf_puts(b, " ");
        num(b, x);
        dp_buf_puts(b, " ");
        num(b, y);
        dp_buf_puts(b, ")\"");
    }
    dp_buf_puts(b, ">");
    dp_svg_escape(b, text);
    dp_buf_puts(b, "</text>\n");
}

double dp_svg_text_width(const char *text, double size)
{
    /* DejaVu Sans advances average about 0.57 em over digits and lower case; bytes of a
     * UTF-8 sequence after the first do not add width. */
    double n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if ((*p & 0xc0) != 0x80)
            n += 1;
    return n * 0.57 * size;
}

const char *dp_viz_color(int i)
{
    /* Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour
     * vision deficiencies. Yellow last: it is pale on white. */
    static const char *const palette[] = {"#0072b2", "#e69f00", "#009e73", "#cc79a7",
                                          "#56b4e9", "#d55e00", "#000000", "#f0e442"};
    int n = (int)(sizeof palette / sizeof palette[0]);
    return palette[((i % n) + n) % n];
}
