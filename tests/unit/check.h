/*
 * Minimal test assertions: each failure prints both sides and the location;
 * the test's exit status is the number of failures (capped at 1).
 */
#ifndef DPLAN_CHECK_H
#define DPLAN_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "%s:%d: CHECK_EQ(%s, %s): %lld != %lld\n", __FILE__, __LINE__, #a, #b, \
                    a_, b_);                                                                       \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* |a - b| <= rtol * |b| */
#define CHECK_NEAR(a, b, rtol)                                                                     \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!(fabs(a_ - b_) <= (rtol)*fabs(b_))) {                                                 \
            fprintf(stderr, "%s:%d: CHECK_NEAR(%s, %s, %g): %.10g vs %.10g (rel %.3g)\n",          \
                    __FILE__, __LINE__, #a, #b, (double)(rtol), a_, b_,                            \
                    b_ != 0 ? fabs(a_ - b_) / fabs(b_) : fabs(a_));                                \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (strcmp(a_, b_) != 0) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK_STR(%s, %s): \"%s\" != \"%s\"\n", __FILE__, __LINE__,    \
                    #a, #b, a_, b_);                                                               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* The message contains the substring. */
#define CHECK_CONTAINS(hay, needle)                                                                \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!strstr(h_, n_)) {                                                                     \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, h_,     \
                    n_);                                                                           \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

static inline int check_done(const char *name)
{
    if (check_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
    else
        printf("%s: ok\n", name);
    return check_failures ? 1 : 0;
}

#endif
