/*
 * Explanations of search results in words: what a step's time goes to, and
 * what a slower layout loses on compared with a faster one.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct term {
    const char *name;
    double v;
};

static int terms(const struct dp_step_cost *c, struct term *t)
{
    int n = 0;
    t[n++] = (struct term){"compute", c->compute_s};
    t[n++] = (struct term){"recompute", c->recompute_s};
    t[n++] = (struct term){"tp comm", c->tp_comm_s};
    t[n++] = (struct term){"cp comm", c->cp_comm_s};
    t[n++] = (struct term){"ep comm", c->ep_comm_s};
    t[n++] = (struct term){"pp comm", c->pp_comm_s};
    t[n++] = (struct term){"bubble", c->bubble_s};
    t[n++] = (struct term){"dp comm", c->dp_comm_s};
    t[n++] = (struct term){"optimizer", c->optimizer_s};
    t[n++] = (struct term){"embedding sync", c->other_s};
    return n;
}

static int by_value_desc(const void *a, const void *b)
{
    double x = ((const struct term *)a)->v, y = ((const struct term *)b)->v;
    return x > y ? -1 : x < y;
}

void dp_explain_shares(const struct dp_step_cost *c, char *buf, size_t cap)
{
    struct term t[12];
    int n = terms(c, t);
    qsort(t, (size_t)n, sizeof t[0], by_value_desc);
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && i < 4; i++) {
        double share = t[i].v / c->step_time_s;
        if (share < 0.01)
            break;
        len += (size_t)snprintf(buf + len, cap > len ? cap - len : 0, "%s%s %.0f%%", i ? ", " : "",
                                t[i].name, 100 * share);
    }
}

void dp_explain_delta(const struct dp_candidate *w, const struct dp_candidate *c, char *buf,
                      size_t cap)
{
    struct term a[12], b[12], d[12];
    int n = terms(&w->cost, a);
    terms(&c->cost, b);
    for (int i = 0; i < n; i++)
        d[i] = (struct term){a[i].name, b[i].v - a[i].v};
    qsort(d, (size_t)n, sizeof d[0], by_value_desc);
    double rel = c->cost.step_time_s / w->cost.step_time_s - 1;
    const double small = 0.005 * w->cost.step_time_s;
    size_t len = (size_t)snprintf(buf, cap, "%+.1f%%", 100 * rel);
    int shown = 0;
    for (int i = 0; i < n && shown < 2; i++) {
        if (d[i].v <= small)
            break;
        len += (size_t)snprintf(buf + len, cap > len ? cap - len : 0, "%s %s +%.3g s",
                                shown ? "," : ":", d[i].name, d[i].v);
        shown++;
    }
    /* What it gains back: a layout within a few percent often loses seconds on one term
     * and wins most of them back on another, and the losses alone would read as a gap
     * many times the real one. */
    int gained = 0;
    for (int i = n - 1; i >= 0 && gained < 2; i--) {
        if (d[i].v >= -small)
            break;
        len += (size_t)snprintf(buf + len, cap > len ? cap - len : 0, "%s %s %.3g s",
                                gained  ? ","
                                : shown ? "; gains"
                                        : ": gains",
                                d[i].name, d[i].v);
        gained++;
    }
    if (shown == 0 && gained == 0 && len < cap)
        snprintf(buf + len, cap - len, " (ties on time; memory balance decides)");
}
